//! The loopback redirect target of a login (RFC 8252 §7.3), answering the browser with a
//! short page and handing the query (`code`, `state`, `iss`, `error`) to the login:
//! either `http://127.0.0.1:PORT/callback` on a listener of its own, on a port the OS
//! picks (or the one a stored registration names), or, for `serve` on a loopback
//! listener, `/oauth/callback` on the daemon's own listener ([`DaemonCallback`]: the
//! daemon's HTTP layer hands it each request, matched to its login by `state`). Either
//! way only an answer with the login's `state` reaches it: any other request (a stray
//! page's, a local process's) gets the failure page and the login keeps waiting.
//!
//! Owns its listener (or its `state` entry) for the length of one login. Never logs
//! the code; never binds anything but 127.0.0.1.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use tokio_util::task::AbortOnDropHandle;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Html;
use tokio::sync::mpsc;

use super::OAuthError;

/// The callback's path on a listener of its own.
pub const CALLBACK_PATH: &str = "/callback";

/// The callback's path on the daemon's listener.
pub const DAEMON_CALLBACK_PATH: &str = "/oauth/callback";

/// The page the browser is shown after a login that went through.
pub const DONE_PAGE: &str =
    "<!doctype html><title>mcpmux</title><p>mcpmux is logged in. You can close this window.</p>";
/// The page the browser is shown otherwise.
pub const FAILED_PAGE: &str =
    "<!doctype html><title>mcpmux</title><p>The login did not complete; see mcpmux's output.</p>";

/// The daemon's own listener as the redirect target: its base URL (set once the
/// listener is bound, and only when it is a loopback one) and the logins waiting for
/// their answer, by `state`. The std mutex is held for one map operation.
#[derive(Debug, Default)]
pub struct DaemonCallback {
    base: OnceLock<String>,
    pending: Mutex<HashMap<String, mpsc::Sender<CallbackAnswer>>>,
}

impl DaemonCallback {
    /// `http://127.0.0.1:PORT` of the daemon's loopback listener.
    pub fn set_base(&self, base: String) {
        let _ = self.base.set(base);
    }

    fn redirect_uri(&self) -> Option<String> {
        self.base
            .get()
            .map(|b| format!("{b}{DAEMON_CALLBACK_PATH}"))
    }

    /// Hands a request's query to the login it answers; `false` when none waits for
    /// its `state` (the page then says the login did not complete).
    pub fn deliver(&self, query: &str) -> bool {
        let answer = parse_answer(query);
        let Some(state) = answer.state.clone() else {
            return false;
        };
        let tx = self.lock().get(&state).cloned();
        let failed = answer.error.is_some() || answer.code.is_none();
        tx.is_some_and(|tx| tx.try_send(answer).is_ok()) && !failed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<CallbackAnswer>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What the authorization server sent back through the browser.
#[derive(Debug, Clone, Default)]
pub struct CallbackAnswer {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// A bound callback listener (or a daemon's route), serving until dropped.
pub struct Callback {
    pub redirect_uri: String,
    rx: mpsc::Receiver<CallbackAnswer>,
    _server: Option<AbortOnDropHandle<()>>,
    /// On a listener of its own: the `state` this login waits for (set by `expect`).
    own_state: Arc<OnceLock<String>>,
    /// On the daemon's listener: the route and the `state` this login waits for.
    daemon: Option<(
        Arc<DaemonCallback>,
        mpsc::Sender<CallbackAnswer>,
        Option<String>,
    )>,
}

impl Drop for Callback {
    fn drop(&mut self) {
        if let Some((d, _, Some(state))) = &self.daemon {
            d.lock().remove(state);
        }
    }
}

impl Callback {
    /// The daemon's route, when its listener is a loopback one (else `None`).
    pub fn on_daemon(d: &Arc<DaemonCallback>) -> Option<Callback> {
        let redirect_uri = d.redirect_uri()?;
        let (tx, rx) = mpsc::channel(4);
        Some(Callback {
            redirect_uri,
            rx,
            _server: None,
            own_state: Arc::default(),
            daemon: Some((d.clone(), tx, None)),
        })
    }

    /// Waits for the answer to the request with this `state`: only a request that
    /// carries it reaches [`Callback::answer`].
    pub fn expect(&mut self, state: &str) {
        if let Some((d, tx, st)) = &mut self.daemon {
            d.lock().insert(state.to_owned(), tx.clone());
            *st = Some(state.to_owned());
        } else {
            let _ = self.own_state.set(state.to_owned());
        }
    }

    /// Binds 127.0.0.1 on `port` (0: any; a taken preferred port falls back to any).
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub async fn bind(port: u16) -> Result<Callback, OAuthError> {
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => Ok(l),
            Err(_) if port != 0 => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await,
            Err(e) => Err(e),
        }
        .map_err(|e| OAuthError::Flow(format!("cannot bind the loopback callback: {e}")))?;
        let addr: SocketAddr = listener
            .local_addr()
            .map_err(|e| OAuthError::Flow(format!("cannot bind the loopback callback: {e}")))?;
        let (tx, rx) = mpsc::channel(4);
        let own_state: Arc<OnceLock<String>> = Arc::default();
        let app = axum::Router::new()
            .route(CALLBACK_PATH, axum::routing::get(on_callback))
            .with_state((tx, own_state.clone()));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Callback {
            redirect_uri: format!("http://127.0.0.1:{}{CALLBACK_PATH}", addr.port()),
            rx,
            _server: Some(AbortOnDropHandle::new(server)),
            own_state,
            daemon: None,
        })
    }

    /// The port of a redirect URI this module made (to bind it again).
    pub fn port_of(redirect_uri: &str) -> Option<u16> {
        let u = reqwest::Url::parse(redirect_uri).ok()?;
        (u.host_str() == Some("127.0.0.1") && u.path() == CALLBACK_PATH)
            .then(|| u.port())
            .flatten()
    }

    /// The next answer the browser brought.
    pub async fn answer(&mut self) -> Option<CallbackAnswer> {
        self.rx.recv().await
    }
}

async fn on_callback(
    State((tx, expected)): State<(mpsc::Sender<CallbackAnswer>, Arc<OnceLock<String>>)>,
    uri: Uri,
) -> Html<&'static str> {
    let a = parse_answer(uri.query().unwrap_or_default());
    if expected.get().is_none() || a.state.as_ref() != expected.get() {
        return Html(FAILED_PAGE);
    }
    let failed = a.error.is_some() || a.code.is_none();
    let _ = tx.try_send(a);
    Html(if failed { FAILED_PAGE } else { DONE_PAGE })
}

/// The authorization response's parameters.
fn parse_answer(query: &str) -> CallbackAnswer {
    let mut a = CallbackAnswer::default();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let v = Some(v.into_owned());
        match &*k {
            "code" => a.code = v,
            "state" => a.state = v,
            "iss" => a.iss = v,
            "error" => a.error = v,
            "error_description" => a.error_description = v,
            _ => {}
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_daemon_route_hands_an_answer_only_to_the_login_with_its_state() {
        let d = Arc::new(DaemonCallback::default());
        assert!(
            Callback::on_daemon(&d).is_none(),
            "no loopback listener yet"
        );
        d.set_base("http://127.0.0.1:7878".into());
        let mut cb = Callback::on_daemon(&d).unwrap();
        assert_eq!(cb.redirect_uri, "http://127.0.0.1:7878/oauth/callback");
        cb.expect("s1");
        assert!(!d.deliver("code=c&state=other"), "another login's state");
        assert!(!d.deliver("code=c"), "no state at all");
        assert!(d.deliver("code=c1&state=s1&iss=https%3A%2F%2Fas"));
        let a = cb.answer().await.unwrap();
        assert_eq!(a.code.as_deref(), Some("c1"));
        assert_eq!(a.iss.as_deref(), Some("https://as"));
        drop(cb);
        assert!(
            !d.deliver("code=c2&state=s1"),
            "a finished login takes no answer"
        );
    }

    #[tokio::test]
    async fn a_listener_of_its_own_answers_on_a_loopback_port_for_its_state_only() {
        let mut cb = Callback::bind(0).await.unwrap();
        assert!(Callback::port_of(&cb.redirect_uri).is_some_and(|p| p != 0));
        cb.expect("x");
        let get = |query: &'static str| {
            let url = format!("{}?{query}", cb.redirect_uri);
            async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
        };
        // Requests without the login's state (a stray page's, a local process's) are
        // turned away and do not end the login.
        for stray in [
            "code=c",
            "code=c&state=other",
            "error=access_denied&state=y",
        ] {
            let body = get(stray).await;
            assert!(body.contains("did not complete"), "{stray}: {body}");
        }
        let body = get("error=access_denied&state=x").await;
        assert!(body.contains("did not complete"), "{body}");
        let a = cb.answer().await.unwrap();
        assert_eq!(
            a.state.as_deref(),
            Some("x"),
            "the first answer is the login's own"
        );
        assert_eq!(a.error.as_deref(), Some("access_denied"));
    }
}
