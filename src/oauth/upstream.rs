//! [`UpstreamAuth`]: the OAuth side of one HTTP upstream while mcpmux serves it. The
//! transport asks it for the bearer token on every request, tells it about every
//! challenge a response carried (401, 403 `insufficient_scope`), and before each new
//! session lets it get a usable token: the stored one, a refreshed one, or, when only
//! a person can help, a login (opened by `serve` itself once, unless `auto_login =
//! false`) or a token another process (`mcpmux login`) put in the store, which is
//! re-read every [`STORE_POLL`] while waiting.
//!
//! Owns the upstream's current grant and its last challenge. The token is only ever
//! sent to the upstream it was issued for, never to a client, never to a log. A
//! downstream client's own token never reaches it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{StatusCode, Url};
use tokio::sync::watch;

use super::callback::DaemonCallback;
use super::challenge::{split_scopes, Challenge};
use super::login::{self, LoginTarget, Opener};
use super::store::{Grant, TokenStore};
use super::{discovery, flow, http_client};
use crate::config::OAuthServerConfig;

/// How often a waiting upstream re-reads the store for a token `mcpmux login` saved
/// (default 1 s: the login is a person's, so a second is quick enough, and one small
/// read a second costs nothing).
pub const STORE_POLL: Duration = Duration::from_secs(1);

/// Step-up logins for one challenged scope before mcpmux gives up (default 2): a
/// server that keeps answering 403 whatever is granted must not loop forever.
pub const MAX_STEP_UPS: u32 = 2;

/// Refresh this long before the access token expires (at most; a third of the
/// token's lifetime for short-lived tokens).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// The least time between two refreshes in one session (default 1 s): a server that
/// hands out tokens living a second or less must not get a refresh loop.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(1);

/// What must happen before the next session may start.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Go ahead (with a token, or without one until the server asks).
    Ready,
    /// Only a login helps; the reason names the command.
    NeedsLogin(String),
    /// No session now: the step-up limit was reached (until `mcpmux login` stores a new
    /// login), or the authorization server did not answer a refresh (the grant is
    /// kept). The upstream's restart backoff decides when to try again.
    Failed(String),
}

/// The OAuth state of one upstream, shared by its sessions' tasks.
#[derive(Debug)]
pub struct UpstreamAuth {
    name: String,
    url: Url,
    cfg: OAuthServerConfig,
    store: Arc<TokenStore>,
    /// Follows no redirect (the OAuth endpoints must not be redirected).
    http: reqwest::Client,
    /// `serve`'s own listener as the redirect target (when it is a loopback one).
    daemon: Option<Arc<DaemonCallback>>,
    /// A std mutex: read on every upstream request (the bearer), never held across an
    /// await, critical sections of a few field reads.
    state: Mutex<AuthState>,
    /// Bumped on every challenge: a session ends when it moves.
    challenges: watch::Sender<u64>,
    /// Set while [`Self::login_or_wait`] waits; then [`Self::request_login`] wakes it.
    waiting: std::sync::atomic::AtomicBool,
    asked: tokio::sync::Notify,
    /// One refresh at a time: a rotating refresh token is good for one use, so two at
    /// once would spend it twice and the second would be refused.
    /// A gate (one permit), guarding no state.
    refresh_gate: tokio::sync::Semaphore,
}

/// Clears a flag when the scope that set it ends (also when its future is dropped).
struct ClearOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

#[derive(Debug, Default)]
struct AuthState {
    grant: Option<Grant>,
    loaded: bool,
    /// The last challenge not yet dealt with.
    challenge: Option<Challenge>,
    /// The challenge the pending login is for.
    login_for: Option<Challenge>,
    /// Step-up logins per challenged scope.
    step_ups: HashMap<String, u32>,
    /// A scope reached [`MAX_STEP_UPS`]: only a login stored by `mcpmux login` (a token
    /// other than the current one) starts the count over.
    step_ups_exhausted: bool,
    /// Whether `serve` already opened the browser for the current need.
    auto_login_tried: bool,
    /// The current grant could not be refreshed: do not try again on a timer.
    refresh_failed: bool,
    /// The access token the server last refused: the store's copy of it is no login.
    refused: Option<String>,
}

impl UpstreamAuth {
    pub fn new(
        name: &str,
        url: Url,
        cfg: OAuthServerConfig,
        store: Arc<TokenStore>,
        daemon: Option<Arc<DaemonCallback>>,
    ) -> Arc<UpstreamAuth> {
        Arc::new(UpstreamAuth {
            name: name.to_owned(),
            url,
            cfg,
            store,
            http: http_client(),
            daemon,
            state: Mutex::new(AuthState::default()),
            challenges: watch::Sender::new(0),
            waiting: std::sync::atomic::AtomicBool::new(false),
            asked: tokio::sync::Notify::new(),
            refresh_gate: tokio::sync::Semaphore::new(1),
        })
    }

    /// The OAuth client of an HTTP server, unless its configured headers carry their
    /// own `Authorization` (then mcpmux stays out of it). `interactive`: whether this
    /// process may open a browser (`auto_login` decides too).
    pub fn for_server(
        server: &crate::config::ServerConfig,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        store: Arc<TokenStore>,
        interactive: bool,
        daemon: Option<Arc<DaemonCallback>>,
    ) -> Option<Arc<UpstreamAuth>> {
        if headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return None;
        }
        let url = Url::parse(url).ok()?;
        let mut cfg = server.oauth.clone().unwrap_or_default();
        cfg.auto_login &= interactive;
        Some(UpstreamAuth::new(&server.name, url, cfg, store, daemon))
    }

    /// The access token to send, if there is one.
    pub fn bearer(&self) -> Option<String> {
        self.lock().grant.as_ref().map(|g| g.access_token.clone())
    }

    /// Looks at a response: a challenge is recorded and announced. Returns whether it
    /// was one.
    pub fn observe(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        let Some(ch) = Challenge::from_response(status, headers) else {
            return false;
        };
        tracing::info!(upstream = %self.name, status = ch.status, scope = ?ch.scope, error = ?ch.error, "upstream asks for authorization");
        self.lock().challenge = Some(ch);
        self.challenges.send_modify(|n| *n += 1);
        true
    }

    /// Moves whenever a response carried a challenge.
    pub fn challenges(&self) -> watch::Receiver<u64> {
        self.challenges.subscribe()
    }

    /// When to refresh the token proactively, if there is a refresh token.
    pub fn refresh_in(&self) -> Option<Duration> {
        let st = self.lock();
        let g = st.grant.as_ref()?;
        if st.refresh_failed || g.refresh_token.is_none() {
            return None;
        }
        let expires = g.expires_at?;
        let lifetime = expires.saturating_sub(g.issued_at.unwrap_or(expires));
        let margin = REFRESH_MARGIN.as_secs().min(lifetime / 3).max(1);
        Some(Duration::from_secs(
            expires
                .saturating_sub(margin)
                .saturating_sub(flow::now_secs()),
        ))
    }

    /// Refreshes the token now; `false` when that failed (the next 401 decides).
    pub async fn refresh_now(&self) -> bool {
        self.refresh().await.is_ok()
    }

    /// [`Self::refresh_now`] in a task of its own, which nothing cancels halfway: a
    /// refresh the authorization server granted but whose answer was dropped would
    /// have spent a rotating refresh token for nothing, and the next refresh, with the
    /// old one, would be refused.
    pub fn refresh_detached(self: &Arc<Self>) -> tokio::task::JoinHandle<bool> {
        let me = self.clone();
        tokio::spawn(async move { me.refresh_now().await })
    }

    /// A refresh in a task of its own (as [`Self::refresh_detached`]), awaited: a
    /// caller that is dropped meanwhile (a reload, shutdown) does not cut it off.
    async fn refresh_to_the_end(self: &Arc<Self>) -> Result<(), flow::RefreshError> {
        let me = self.clone();
        match tokio::spawn(async move { me.refresh().await }).await {
            Ok(r) => r,
            Err(e) => Err(flow::RefreshError::Unreachable(super::OAuthError::Flow(
                format!("the refresh task failed: {e}"),
            ))),
        }
    }

    async fn refresh(&self) -> Result<(), flow::RefreshError> {
        let started_with = self.bearer();
        let _turn = self.refresh_gate.acquire().await.expect("never closed");
        // A refresh that ran while this one waited for the gate did the work.
        if started_with.is_some() && self.bearer() != started_with {
            return Ok(());
        }
        // Other processes on this store take turns too, and the store is read again
        // under the lock: the grant one of them refreshed meanwhile is the one to use.
        let _shared_turn = self
            .store
            .lock_grant(&self.name, super::store::GRANT_LOCK_WAIT)
            .await;
        let Some(mut grant) = self.lock().grant.clone() else {
            return Err(flow::RefreshError::Refused(super::OAuthError::Flow(
                "no token".into(),
            )));
        };
        // Another process on this store (`mcpmux stdio`, `check --probe`, another
        // `serve`) may have refreshed the login already, rotating our refresh token
        // away: its grant is the one to go on with, refreshed only if it is due too.
        if let Some(stored) = self.load_stored(false).await {
            if stored.access_token != grant.access_token {
                tracing::debug!(upstream = %self.name, "taking the login another process refreshed");
                let due = stored.expires_at.is_some_and(|e| {
                    e <= flow::now_secs().saturating_add(REFRESH_MARGIN.as_secs())
                });
                let mut st = self.lock();
                st.grant = Some(stored.clone());
                st.refresh_failed = false;
                if !due {
                    return Ok(());
                }
                grant = stored;
            }
        }
        match flow::refresh(&self.http, &grant).await {
            Ok(fresh) => {
                if let Err(e) = self.store.save_grant(&self.name, &fresh).await {
                    tracing::warn!(upstream = %self.name, error = %e, "the refreshed token could not be stored");
                }
                tracing::debug!(upstream = %self.name, "access token refreshed");
                let mut st = self.lock();
                st.grant = Some(fresh);
                st.refresh_failed = false;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "token refresh failed");
                self.lock().refresh_failed = true;
                Err(e)
            }
        }
    }

    /// Gets ready for a new session: loads the stored grant once, and deals with the
    /// last challenge without a person if it can (a refresh).
    pub async fn prepare(self: &Arc<Self>) -> Prepared {
        if !self.lock().loaded {
            let stored = self.load_stored(true).await;
            let mut st = self.lock();
            st.grant = stored;
            st.loaded = true;
        }
        if self.lock().step_ups_exhausted {
            if let Some(g) = self.load_stored(false).await {
                if self.bearer().as_deref() != Some(g.access_token.as_str()) {
                    tracing::info!(upstream = %self.name, "a new login was stored: step-ups start over");
                    self.install(g);
                    let mut st = self.lock();
                    st.step_ups.clear();
                    st.step_ups_exhausted = false;
                }
            }
        }
        let challenge = self.lock().challenge.take();
        let Some(ch) = challenge else {
            if self.refresh_in() == Some(Duration::ZERO) {
                let _ = self.refresh_to_the_end().await;
            }
            return Prepared::Ready;
        };
        if ch.is_step_up() {
            let key = ch.scope.clone().unwrap_or_default();
            let mut st = self.lock();
            let n = st.step_ups.entry(key.clone()).or_default();
            *n += 1;
            if *n > MAX_STEP_UPS {
                st.step_ups_exhausted = true;
                return Prepared::Failed(format!(
                    "the server keeps refusing the token for want of scope {key:?} after {MAX_STEP_UPS} step-up logins; not asking again (run `mcpmux login {}` to retry)",
                    self.name
                ));
            }
            st.login_for = Some(ch);
            st.auto_login_tried = false;
            return Prepared::NeedsLogin(self.needs_login_reason("the server asks for more scope"));
        }
        let grant = self.lock().grant.clone();
        if let Some(g) = grant {
            // The authorization server may have changed (SEP-2352): then the old
            // client and tokens are not used again.
            let same_issuer = match discovery::discover(&self.http, &self.url, Some(&ch)).await {
                Ok(found) => found.server.issuer == g.issuer,
                Err(e) => {
                    tracing::debug!(upstream = %self.name, error = %e, "rediscovery failed");
                    true
                }
            };
            if same_issuer && g.refresh_token.is_some() {
                match self.refresh_to_the_end().await {
                    Ok(()) => return Prepared::Ready,
                    // Keep the grant: its refresh token may work once the authorization
                    // server answers (the next session gets the 401 again and retries).
                    Err(flow::RefreshError::Unreachable(e)) => {
                        return Prepared::Failed(format!(
                            "the server refused the access token and it could not be refreshed ({e}); trying again"
                        ));
                    }
                    Err(flow::RefreshError::Refused(_)) => {}
                }
            }
            let mut st = self.lock();
            st.refused = Some(g.access_token);
            st.grant = None;
        }
        let mut st = self.lock();
        st.login_for = Some(ch);
        Prepared::NeedsLogin(self.needs_login_reason("the server asks for a login"))
    }

    /// Waits for a token: logs in itself first when `auto_login` allows and it has
    /// not tried for this need yet; then waits for the store to get a token other than
    /// the one the server refused (`mcpmux login`), or for a person to ask for a login
    /// ([`Self::request_login`]: the status page's link), which opens the browser again.
    /// Returns once a token is there.
    pub async fn login_or_wait(&self) {
        let (ch, held, try_auto) = {
            let mut st = self.lock();
            let held = st
                .grant
                .as_ref()
                .map(|g| split_scopes(g.scope.as_deref()))
                .unwrap_or_default();
            let try_auto = self.cfg.auto_login && !st.auto_login_tried;
            st.auto_login_tried = true;
            (st.login_for.clone(), held, try_auto)
        };
        // Tokens not to take from the store: the one in use (a step-up needs more) and
        // the one the server refused.
        let stale: Vec<String> = [self.bearer(), self.lock().refused.clone()]
            .into_iter()
            .flatten()
            .collect();
        let t = LoginTarget {
            name: &self.name,
            url: &self.url,
            cfg: &self.cfg,
            store: &self.store,
            http: &self.http,
            daemon: self.daemon.as_ref(),
        };
        let attempt = || Box::pin(login::login(&t, ch.as_ref(), &held, Opener::Browser));
        let mut running = try_auto.then(attempt);
        self.waiting
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _waiting = ClearOnDrop(&self.waiting);
        loop {
            tokio::select! {
                done = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                    running = None;
                    match done {
                        Ok(grant) => return self.install(grant),
                        Err(e) => tracing::warn!(upstream = %self.name, error = %e,
                            "login failed; waiting for `mcpmux login {}`", self.name),
                    }
                }
                _ = self.asked.notified() => {
                    tracing::info!(upstream = %self.name, "login asked for; opening the browser");
                    running = Some(attempt());
                }
                _ = tokio::time::sleep(STORE_POLL) => {
                    if let Some(g) = self.load_stored(false).await {
                        if !stale.contains(&g.access_token) {
                            tracing::info!(upstream = %self.name, "a new login was stored");
                            return self.install(g);
                        }
                    }
                }
            }
        }
    }

    /// Asks a waiting upstream to open the browser for a login now (the status page's
    /// link); `false` when it is not waiting for one.
    pub fn request_login(&self) -> bool {
        if !self.waiting.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        self.asked.notify_one();
        true
    }

    fn install(&self, grant: Grant) {
        let mut st = self.lock();
        st.grant = Some(grant);
        st.refresh_failed = false;
        st.auto_login_tried = false;
        st.login_for = None;
        st.challenge = None;
    }

    /// The stored login of this server's name, when it was issued for this server's
    /// URL (a login kept from before the config pointed the name elsewhere, or from
    /// another config's server of the same name, is not sent there). `loud`: say why a
    /// stored login is not used at warn level (else debug: the wait re-reads it).
    async fn load_stored(&self, loud: bool) -> Option<Grant> {
        let g = match self.store.load_grant(&self.name).await {
            Ok(g) => g?,
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "cannot read the token store");
                return None;
            }
        };
        if discovery::resource_covers(&g.resource, &self.url) {
            return Some(g);
        }
        let why = "the stored login is for another URL: not using it";
        if loud {
            tracing::warn!(upstream = %self.name, resource = %g.resource, url = %self.url, "{why} (run `mcpmux login {}`)", self.name);
        } else {
            tracing::debug!(upstream = %self.name, resource = %g.resource, url = %self.url, "{why}");
        }
        None
    }

    fn needs_login_reason(&self, why: &str) -> String {
        format!("needs login ({why}): run `mcpmux login {}`", self.name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AuthState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
