//! The loopback redirect target of a login (RFC 8252 §7.3): `http://127.0.0.1:PORT/callback`
//! on a port the OS picks (or the one a stored registration names), answering the
//! browser with a short page and handing the query (`code`, `state`, `iss`, `error`)
//! to the login.
//!
//! Owns its listener for the length of one login. Never logs the code; never binds
//! anything but 127.0.0.1.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::Uri;
use axum::response::Html;
use tokio::sync::mpsc;

use super::OAuthError;

/// The callback's path.
pub const CALLBACK_PATH: &str = "/callback";

/// What the authorization server sent back through the browser.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// A bound callback listener, serving until dropped.
pub struct Callback {
    pub redirect_uri: String,
    rx: mpsc::Receiver<Answer>,
    _server: AbortOnDrop,
}

impl Callback {
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
        let app = axum::Router::new()
            .route(CALLBACK_PATH, axum::routing::get(on_callback))
            .with_state(tx);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Callback {
            redirect_uri: format!("http://127.0.0.1:{}{CALLBACK_PATH}", addr.port()),
            rx,
            _server: AbortOnDrop(server),
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
    pub async fn answer(&mut self) -> Option<Answer> {
        self.rx.recv().await
    }
}

async fn on_callback(State(tx): State<mpsc::Sender<Answer>>, uri: Uri) -> Html<&'static str> {
    let mut a = Answer::default();
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
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
    let failed = a.error.is_some() || a.code.is_none();
    let _ = tx.try_send(a);
    Html(if failed {
        "<!doctype html><title>mcpmux</title><p>The login did not complete; see mcpmux's output.</p>"
    } else {
        "<!doctype html><title>mcpmux</title><p>mcpmux is logged in. You can close this window.</p>"
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
