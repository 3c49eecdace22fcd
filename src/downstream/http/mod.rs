//! The downstream Streamable HTTP transport (the MCP specification's Streamable HTTP
//! transport; docs/architecture.md, "Streamable HTTP" and "Security"): one endpoint at
//! `settings.path` answering POST, GET and DELETE, with sessions, and one more per
//! profile (`settings.profiles`, each with its view and token).
//!
//! Owns: the axum router, the request guards' mapping to HTTP statuses, the session
//! map (`Mcp-Session-Id` → session actor), and the server's lifetime ([`serve_http`];
//! accepting and bounding connections is [`listener`]'s).
//! Never: interprets MCP methods beyond `initialize` detection and the progress token
//! (the hub answers everything), awaits a client from the hub's side (session actors
//! in [`session`] own all waiting on sockets), or buffers a body past
//! `limits.max_message_bytes`.
//!
//! Status codes (all error bodies are JSON-RPC errors with `"id": null`):
//! - 403 `Host` not loopback/allowed, or `Origin` not allowed (code -32000);
//! - 401 + `WWW-Authenticate: Bearer` bad/missing token (-32000);
//! - 405 + `Allow` for other methods (-32000); 404 (empty) for other paths;
//! - 415 POST without `Content-Type: application/json` (-32000);
//! - 406 `Accept` present but allowing no type we could answer with (-32000);
//! - 413 body over `limits.max_message_bytes` (-32600);
//! - 400 invalid JSON (-32700), not JSON-RPC (-32600), unsupported
//!   `MCP-Protocol-Version` (-32600), missing `Mcp-Session-Id` (-32600), batch not
//!   allowed / `initialize` in a batch / request id already in flight (-32600);
//! - 404 unknown or expired session (-32001 "session not found");
//! - 503 the hub refused or is gone (-32000, the admission error's text);
//! - 202 no body for notifications/responses only; 200 JSON or SSE for requests;
//!   200 for DELETE.

mod decimal;
mod endpoints;
mod episode;
mod events_body;
mod guard;
mod handoff;
mod header_timer;
mod listener;
mod post;
mod replay;
mod request_stream;
mod session;
mod sse;
mod stateless;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::oneshot;

use crate::downstream::lane;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

pub use self::endpoints::{ProfileEndpoint, ProfileEndpoints};
use self::guard::GuardError;
use self::session::{SessionCmd, SessionEntry, SessionMap};
use crate::config::{LimitsConfig, ListenConfig};
use crate::downstream::link::ClientLink;
use crate::protocol::{code, Message};
use crate::state::ids::ViewId;

/// Implementation-defined JSON-RPC code for transport-level refusals (matches the TS
/// SDK's use for 403/406/415 answers).
const TRANSPORT_ERROR: i64 = -32000;
/// Implementation-defined JSON-RPC code for an unknown session (TS SDK: 404 + -32001).
const SESSION_NOT_FOUND: i64 = -32001;

pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Settings of the HTTP transport, resolved from the config. `Debug` redacts the token.
#[derive(Clone)]
pub struct HttpSettings {
    /// The one MCP endpoint path (`listen.path`, default `/mcp`).
    pub path: String,
    /// Accepted `Origin` values; an entry also matches that origin with any port.
    pub allowed_origins: Vec<String>,
    /// Accepted `Host` names besides `localhost`, `127.0.0.1` and `[::1]`.
    pub allowed_hosts: Vec<String>,
    /// Required bearer token, when configured (`listen.auth_token_env`).
    pub auth_token: Option<String>,
    /// A session with no stream, no in-flight POST and no request for this long ends.
    pub session_idle: Duration,
    /// GET-stream events kept per session for `Last-Event-ID` replay.
    pub sse_replay_events: usize,
    /// Largest accepted POST body.
    pub max_message_bytes: usize,
    /// Depth of each session's outbox.
    pub client_queue: usize,
    /// Open connections at most (further clamped to the open-file limit's budget).
    pub max_connections: usize,
    /// A connection's time to send a complete request header (also its keep-alive idle
    /// time between requests).
    pub header_read_timeout: Duration,
    /// The `[profiles.NAME]` endpoints, each with its view and token (replaced on
    /// reload by whoever holds a clone).
    pub profiles: ProfileEndpoints,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("path", &self.path)
            .field("allowed_origins", &self.allowed_origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("session_idle", &self.session_idle)
            .field("sse_replay_events", &self.sse_replay_events)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("client_queue", &self.client_queue)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("profiles", &self.profiles)
            .finish()
    }
}

impl HttpSettings {
    pub fn from_config(
        listen: &ListenConfig,
        limits: &LimitsConfig,
        auth_token: Option<String>,
    ) -> Self {
        HttpSettings {
            path: listen.path.clone(),
            allowed_origins: listen.allowed_origins.clone(),
            allowed_hosts: listen.allowed_hosts.clone(),
            auth_token,
            session_idle: Duration::from_millis(listen.session_idle_ms),
            sse_replay_events: listen.sse_replay_events,
            max_message_bytes: limits.max_message_bytes,
            client_queue: limits.client_queue,
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
            profiles: ProfileEndpoints::default(),
        }
    }
}

/// State shared by every request handler.
pub(crate) struct App {
    pub settings: HttpSettings,
    pub hub: ClientLink,
    /// The hub's control side, when the operator's view is served (`/metrics`,
    /// `/status`, `/status/events`, `/`).
    pub observe: Option<crate::observe::Observe>,
    pub sessions: SessionMap,
    /// Cancelled on shutdown; session actors end on it.
    pub shutdown: CancellationToken,
    /// Tracks session actors so shutdown can wait for every `client_closed`.
    pub tracker: TaskTracker,
}

/// Serves the Streamable HTTP endpoint on `listener` until `shutdown` is cancelled,
/// then stops accepting, lets every connection finish its response, ends every session
/// (one `client_closed` each) and returns.
///
/// # Errors
/// None today: accept errors are logged and retried ([`listener`]); the `Result` is
/// kept for errors of the listener itself.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    settings: HttpSettings,
    hub: ClientLink,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_http_observed(listener, settings, hub, None, shutdown).await
}

/// [`serve_http`], also serving the operator's view from `observe` (docs/architecture.md,
/// "Operating mcpmux").
pub async fn serve_http_observed(
    listener: tokio::net::TcpListener,
    settings: HttpSettings,
    hub: ClientLink,
    observe: Option<crate::observe::Observe>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let path = settings.path.clone();
    let fd_limit = crate::fdlimit::nofile_limit();
    let limits = listener::ConnLimits {
        max_connections: settings
            .max_connections
            .min(fd_limit.map_or(usize::MAX, crate::fdlimit::connection_budget)),
        header_read_timeout: settings.header_read_timeout,
    };
    let observed = observe.is_some();
    let app = Arc::new(App {
        settings,
        hub,
        observe,
        sessions: Arc::new(Mutex::new(Default::default())),
        shutdown: shutdown.clone(),
        tracker: TaskTracker::new(),
    });
    let mut router = Router::new().route(&path, axum::routing::any(endpoint));
    if observed {
        for view in ["/", "/metrics", "/status", "/status/events"] {
            if view != path {
                router = router.route(view, axum::routing::get(observe_view));
            }
        }
        if path != "/reload" {
            router = router.route("/reload", axum::routing::post(observe_view));
        }
        router = router.route("/login/{name}", axum::routing::post(observe_view));
        router = router.route(
            crate::oauth::callback::DAEMON_CALLBACK_PATH,
            axum::routing::get(oauth_callback),
        );
    }
    let router = router.fallback(profile_endpoint).with_state(app.clone());
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, %path, "Streamable HTTP listening");
    }
    if limits.max_connections < app.settings.max_connections {
        info!(
            max_connections = limits.max_connections,
            configured = app.settings.max_connections,
            open_file_limit = ?fd_limit,
            "limits.max_connections lowered to 3/4 of the open-file limit"
        );
    } else {
        debug!(
            max_connections = limits.max_connections,
            open_file_limit = ?fd_limit,
            "connection limit"
        );
    }
    listener::serve(listener, router, limits, shutdown).await;
    // Sessions end on the same token; wait until each has told the hub.
    app.tracker.close();
    app.tracker.wait().await;
    debug!("Streamable HTTP stopped");
    Ok(())
}

/// The single endpoint: guards first, on every method, then dispatch.
/// The operator's view, behind the same guards as the MCP endpoint.
async fn observe_view(State(app): State<Arc<App>>, req: Request) -> Response {
    if let Err(resp) = guard_request(&app, req.headers(), app.settings.auth_token.as_deref()) {
        return resp;
    }
    let Some(observe) = app.observe.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match req.uri().path() {
        "/metrics" => crate::observe::metrics(&observe.snapshots).await,
        "/status" => crate::observe::status(&observe.snapshots).await,
        "/status/events" => crate::observe::events(observe.snapshots, app.shutdown.clone()),
        "/reload" => crate::observe::reload(observe.reload.as_ref()).await,
        p if p.starts_with("/login/") => {
            let name = percent_decoded(&p["/login/".len()..]);
            crate::observe::login(observe.logins.as_deref(), &name)
        }
        _ => crate::observe::page(),
    }
}

/// An OAuth login's redirect back to the daemon (`/oauth/callback`). A browser sends
/// no bearer token, so only the Origin and Host guards apply; the answer reaches only
/// the login whose `state` it carries.
async fn oauth_callback(State(app): State<Arc<App>>, req: Request) -> Response {
    if let Err(resp) = guard_request(&app, req.headers(), None) {
        return resp;
    }
    let Some(logins) = app.observe.as_ref().and_then(|o| o.logins.as_ref()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let query = req.uri().query().unwrap_or_default();
    if logins.callback().deliver(query) {
        axum::response::Html(crate::oauth::callback::DONE_PAGE).into_response()
    } else {
        (
            StatusCode::BAD_REQUEST,
            axum::response::Html(crate::oauth::callback::FAILED_PAGE),
        )
            .into_response()
    }
}

/// The default endpoint (`[listen].path`): every server.
async fn endpoint(State(app): State<Arc<App>>, req: Request) -> Response {
    if let Err(resp) = guard_request(&app, req.headers(), app.settings.auth_token.as_deref()) {
        return resp;
    }
    serve_endpoint(app, ViewId::DEFAULT, req).await
}

/// Any other path: a profile's endpoint when one is served there (behind the
/// profile's own token when it has one), else 404.
async fn profile_endpoint(State(app): State<Arc<App>>, req: Request) -> Response {
    let Some(ep) = app.settings.profiles.get(req.uri().path()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let token = ep.token.as_deref().or(app.settings.auth_token.as_deref());
    if let Err(resp) = guard_request(&app, req.headers(), token) {
        return resp;
    }
    serve_endpoint(app, ep.view, req).await
}

/// One MCP request to the endpoint of `view`, its guards passed.
async fn serve_endpoint(app: Arc<App>, view: ViewId, req: Request) -> Response {
    let headers = req.headers();
    // A POST checks the version itself: a 2026-07-28 request is told which versions
    // mcpmux speaks in the era's own error.
    if *req.method() != Method::POST {
        if let Err(msg) = guard::protocol_version(header_str(headers, &PROTOCOL_VERSION)) {
            return error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg);
        }
    }
    match *req.method() {
        Method::POST => post::handle(app, req, view).await,
        Method::GET => get(app, req.headers(), view).await,
        Method::DELETE => delete(app, req.headers(), view).await,
        _ => {
            let mut resp = error(
                StatusCode::METHOD_NOT_ALLOWED,
                TRANSPORT_ERROR,
                "method not allowed: use POST, GET or DELETE",
            );
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            resp
        }
    }
}

/// The Host, Origin and bearer-token (`token`, when one is required) checks every
/// request passes first.
#[allow(clippy::result_large_err)]
fn guard_request(app: &App, headers: &HeaderMap, token: Option<&str>) -> Result<(), Response> {
    let s = &app.settings;
    let checked = guard::check_host(header_str(headers, &header::HOST), &s.allowed_hosts)
        .and_then(|()| {
            guard::check_origin(header_str(headers, &header::ORIGIN), &s.allowed_origins)
        })
        .and_then(|()| guard::check_auth(header_str(headers, &header::AUTHORIZATION), token));
    if let Err(e) = checked {
        debug!(error = %e, "request refused by a guard");
        let mut resp = error(
            match e {
                GuardError::Unauthorized => StatusCode::UNAUTHORIZED,
                _ => StatusCode::FORBIDDEN,
            },
            TRANSPORT_ERROR,
            &e.to_string(),
        );
        if e == GuardError::Unauthorized {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return Err(resp);
    }
    Ok(())
}

async fn get(app: Arc<App>, headers: &HeaderMap, view: ViewId) -> Response {
    if !guard::accepts(header_str(headers, &header::ACCEPT)).sse {
        return error(
            StatusCode::NOT_ACCEPTABLE,
            TRANSPORT_ERROR,
            "not acceptable: the GET stream needs Accept: text/event-stream",
        );
    }
    let entry = match require_session(&app, headers, view) {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let last_event_id = header_str(headers, &LAST_EVENT_ID).and_then(sse::parse_last_event_id);
    let (tx, rx) = lane::channel(session::STREAM_QUEUE);
    let (ack, acked) = oneshot::channel();
    let cmd = SessionCmd::Get {
        last_event_id,
        tx,
        ack,
    };
    if entry.cmd.send(cmd).await.is_err() {
        return session_not_found();
    }
    match acked.await {
        Err(_) => session_not_found(),
        Ok(session::GetAck::Refused) => error(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "Last-Event-ID names a stream this session no longer keeps: it cannot be resumed",
        ),
        Ok(session::GetAck::Resumed) => handed_off(sse_response(rx)),
        Ok(session::GetAck::Stream(body)) => handed_off(sse_response_with(Body::new(body))),
    }
}

/// `resp`, marked to be written off hyper's connection once its head is out
/// ([`handoff`]): for the streams that stay open for long (a session's GET stream, a
/// listen), so an idle one costs no HTTP/1 buffers.
fn handed_off(mut resp: Response) -> Response {
    resp.extensions_mut().insert(handoff::HandOff);
    resp
}

/// DELETE: end the session.
async fn delete(app: Arc<App>, headers: &HeaderMap, view: ViewId) -> Response {
    let entry = match require_session(&app, headers, view) {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let (done, wait) = oneshot::channel();
    let cmd = SessionCmd::End {
        reason: "deleted by the client",
        done: Some(done),
    };
    if entry.cmd.send(cmd).await.is_err() || wait.await.is_err() {
        return session_not_found();
    }
    StatusCode::OK.into_response()
}

/// Looks up `Mcp-Session-Id`: 400 when absent, 404 when unknown (or a session of
/// another endpoint).
#[allow(clippy::result_large_err)]
pub(crate) fn require_session(
    app: &App,
    headers: &HeaderMap,
    view: ViewId,
) -> Result<SessionEntry, Response> {
    let Some(id) = header_str(headers, &SESSION_ID) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "missing Mcp-Session-Id; send initialize first",
        ));
    };
    lookup(app, id, view).ok_or_else(session_not_found)
}

/// The session `id` of the endpoint of `view`; a session opened on another endpoint
/// is not found here.
pub(crate) fn lookup(app: &App, id: &str, view: ViewId) -> Option<SessionEntry> {
    let map = app.sessions.lock().unwrap_or_else(|p| p.into_inner());
    map.get(id).filter(|e| e.view == view).cloned()
}

pub(crate) fn session_not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        SESSION_NOT_FOUND,
        "session not found",
    )
}

/// A header as text; `None` when absent or not visible ASCII.
pub(crate) fn header_str<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// An HTTP error whose body is a JSON-RPC error without id.
pub(crate) fn error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = Message::error_response(None, code, message, None).to_bytes();
    json_response(status, body)
}

pub(crate) fn json_response(status: StatusCode, body: bytes::Bytes) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A `text/event-stream` response fed by a session actor.
pub(crate) fn sse_response(rx: lane::Receiver<bytes::Bytes>) -> Response {
    sse_response_with(Body::from_stream(sse::sse_body(rx)))
}

/// A `200` SSE response with `body`. Its header map is sized for its three headers:
/// hyper keeps a connection's last response headers for reuse, so for an open stream
/// the map's size is paid for as long as the stream lives (docs/architecture.md,
/// "Streamable HTTP": memory per listen).
fn sse_response_with(body: Body) -> Response {
    let mut headers = HeaderMap::with_capacity(3);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    let mut resp = Response::new(body);
    *resp.headers_mut() = headers;
    resp
}

/// A path segment with its `%XX` escapes decoded (server names are plain, but the page
/// encodes them).
fn percent_decoded(segment: &str) -> String {
    url::form_urlencoded::parse(format!("n={}", segment.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
