//! The operator's view over HTTP (docs/architecture.md, "Operating mcpmux"): `/metrics`
//! (OpenMetrics text), `/status` (JSON), `/status/events` (the same JSON over SSE
//! whenever it changes) and `/` (the live status page), all on the `serve` listener
//! behind the same Host/Origin/token guard as the MCP endpoint; and the `mcpmux status`
//! client that reads `/status`.
//!
//! Owns the status JSON shape and these handlers. Never changes the hub: every answer
//! is built from one [`Snapshot`] taken from a [`SnapshotSource`] (the hub's control
//! channel, wired outside this module: `observe` never names the hub).

pub mod metrics;
pub mod snapshot;
pub mod status_cli;

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub use snapshot::Snapshot;

/// A request to reload the configuration; answered with the changes, or why the new
/// configuration was refused.
pub type ReloadRequest = tokio::sync::oneshot::Sender<Result<Vec<String>, String>>;

/// Where the operator's view takes its snapshots from: the hub, wired by whoever
/// starts the listener (`None` once the hub has stopped).
#[derive(Clone)]
pub struct SnapshotSource(std::sync::Arc<dyn Fn() -> PendingSnapshot + Send + Sync>);

/// One snapshot on its way.
type PendingSnapshot =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Snapshot>> + Send>>;

impl SnapshotSource {
    /// A source that calls `take` for each snapshot.
    pub fn new<F, Fut>(take: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Option<Snapshot>> + Send + 'static,
    {
        SnapshotSource(std::sync::Arc::new(move || Box::pin(take())))
    }

    async fn take(&self) -> Option<Snapshot> {
        (self.0)().await
    }
}

impl std::fmt::Debug for SnapshotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotSource")
    }
}

/// What the HTTP listener needs to serve the operator's view.
#[derive(Debug, Clone)]
pub struct Observe {
    pub snapshots: SnapshotSource,
    /// Where `POST /reload` asks for a reload (none: the route answers 404).
    pub reload: Option<tokio::sync::mpsc::Sender<ReloadRequest>>,
    /// The upstreams' OAuth clients, for `POST /login/NAME` (none: 404).
    pub logins: Option<std::sync::Arc<crate::oauth::Logins>>,
}

/// `POST /login/NAME` (the status page's link): asks upstream NAME, when it needs a
/// login, to open the browser for it now.
pub fn login(logins: Option<&crate::oauth::Logins>, name: &str) -> Response {
    use crate::oauth::LoginAsked;
    let Some(logins) = logins else {
        return (StatusCode::NOT_FOUND, "login is not available here").into_response();
    };
    match logins.ask(name) {
        LoginAsked::Started => (
            StatusCode::ACCEPTED,
            format!("logging in to {name}: finish it in the browser mcpmux opened\n"),
        )
            .into_response(),
        LoginAsked::NotWaiting => (
            StatusCode::CONFLICT,
            format!("{name} is not waiting for a login\n"),
        )
            .into_response(),
        LoginAsked::Unknown => (
            StatusCode::NOT_FOUND,
            format!("no HTTP server {name} that logs in with OAuth\n"),
        )
            .into_response(),
    }
}

/// `POST /reload`: asks the daemon to re-read its configuration.
pub async fn reload(reload: Option<&tokio::sync::mpsc::Sender<ReloadRequest>>) -> Response {
    let Some(tx) = reload else {
        return (StatusCode::NOT_FOUND, "reload is not available here").into_response();
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if tx.send(reply).await.is_err() {
        return unavailable();
    }
    let json_response = |status: StatusCode, body: Value| {
        (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body.to_string(),
        )
            .into_response()
    };
    match answer.await {
        Ok(Ok(changes)) => json_response(StatusCode::OK, json!({"changes": changes})),
        Ok(Err(why)) => json_response(StatusCode::UNPROCESSABLE_ENTITY, json!({"error": why})),
        Err(_) => unavailable(),
    }
}

/// The status page: one self-contained file, no build step.
const PAGE: &str = include_str!("page.html");

/// How often `/status/events` looks for a change.
const EVENTS_EVERY: Duration = Duration::from_millis(500);

/// An SSE comment is sent when nothing changed for this long (keeps proxies from
/// closing the stream).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The `/status` document for a snapshot.
pub fn status_json(s: &Snapshot) -> Value {
    let upstreams: Vec<Value> = s
        .upstreams
        .iter()
        .map(|u| {
            let (requests, errors) = u
                .methods
                .iter()
                .fold((0, 0), |(r, e), (_, c)| (r + c.requests, e + c.errors));
            json!({
                "name": u.name,
                "state": u.state,
                "reason": u.reason,
                "era": u.era,
                "version": u.version,
                "restarts": u.restarts,
                "requests": requests,
                "errors": errors,
                "latencyMeanMs": if u.latency.count > 0 {
                    (u.latency.sum / u.latency.count as f64 * 1000.0 * 100.0).round() / 100.0
                } else { 0.0 },
            })
        })
        .collect();
    let clients: Vec<Value> = s
        .clients
        .iter()
        .map(|((transport, era), n)| json!({"transport": transport, "era": era, "count": n}))
        .collect();
    let reads = s.cache.hits + s.cache.joined + s.cache.fetches;
    let hit_ratio = if reads == 0 {
        0.0
    } else {
        ((s.cache.hits + s.cache.joined) as f64 / reads as f64 * 1000.0).round() / 1000.0
    };
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "startedUnixMs": s.started_unix_ms,
        "upstreams": upstreams,
        "clients": clients,
        "clientsTotal": s.clients.iter().map(|(_, n)| n).sum::<usize>(),
        "profiles": s.profiles.iter().map(|(name, n)| json!({"profile": name, "clients": n})).collect::<Vec<_>>(),
        "subscriptions": {
            "urisHeld": s.uris_held,
            "holders": s.holders,
            "clientSubscribes": s.client_subscribes,
            "upstreamSubscribes": s.upstream_subscribes,
            "upstreamSubscribesSaved": s.subscribes_saved,
        },
        "topUris": s.top_uris.iter().map(|(uri, n)| json!({"uri": uri, "holders": n})).collect::<Vec<_>>(),
        "cache": {
            "hits": s.cache.hits,
            "misses": s.cache.fetches,
            "joined": s.cache.joined,
            "fills": s.cache.stored,
            "evictions": s.cache.evictions,
            "entries": s.cache_entries,
            "bytes": s.cache_bytes,
            "hitRatio": hit_ratio,
            "upstreamReadsSaved": s.reads_saved(),
        },
        "fanoutDeliveries": s.fanout_deliveries,
        "clientQueueHighWater": s.queue_high_water,
        "coalescedUpdates": s.coalesced,
        "slowClientDisconnects": s.slow_disconnects,
        "warnings": s.warnings.iter().map(|(at, text)| json!({"atUnixMs": at, "text": text})).collect::<Vec<_>>(),
        "fleet": s.fleet.as_ref().map(|f| json!({
            "instance": f.instance,
            "instances": f.instances,
            "keys": f.keys.iter().map(|k| json!({"uri": k.uri, "role": k.role, "owner": k.owner})).collect::<Vec<_>>(),
        })),
    })
}

fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "mcpmux is shutting down").into_response()
}

/// `GET /metrics`.
pub async fn metrics(snapshots: &SnapshotSource) -> Response {
    match snapshots.take().await {
        Some(s) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            )],
            metrics::render(s),
        )
            .into_response(),
        None => unavailable(),
    }
}

/// `GET /status`.
pub async fn status(snapshots: &SnapshotSource) -> Response {
    match snapshots.take().await {
        Some(s) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            status_json(&s).to_string(),
        )
            .into_response(),
        None => unavailable(),
    }
}

/// `GET /`: the status page.
pub fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
                ),
            ),
        ],
        PAGE,
    )
        .into_response()
}

/// `GET /status/events`: the status document as an SSE event at once and whenever it
/// changes; ends when the hub stops or `shutdown` is cancelled (the server's drain
/// must not wait on an open status page).
pub fn events(snapshots: SnapshotSource, shutdown: CancellationToken) -> Response {
    struct State {
        snapshots: SnapshotSource,
        last: Option<String>,
        quiet: Duration,
        first: bool,
        shutdown: CancellationToken,
    }
    let state = State {
        snapshots,
        last: None,
        quiet: Duration::ZERO,
        first: true,
        shutdown,
    };
    let s = stream::unfold(state, |mut st| async move {
        loop {
            if st.shutdown.is_cancelled() {
                return None;
            }
            if !st.first {
                tokio::select! {
                    () = tokio::time::sleep(EVENTS_EVERY) => {}
                    () = st.shutdown.cancelled() => return None,
                }
            }
            st.first = false;
            let snap = st.snapshots.take().await?;
            let text = status_json(&snap).to_string();
            if st.last.as_deref() != Some(&text) {
                st.quiet = Duration::ZERO;
                let frame = format!("data: {text}\n\n");
                st.last = Some(text);
                return Some((Ok::<_, Infallible>(frame), st));
            }
            st.quiet += EVENTS_EVERY;
            if st.quiet >= KEEPALIVE {
                st.quiet = Duration::ZERO;
                return Some((Ok(":\n\n".to_owned()), st));
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(s))
        .expect("static headers are valid")
}
