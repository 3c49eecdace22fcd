//! Upstream actors: each owns one upstream transport (a stdio child or a Streamable
//! HTTP session), finds the server's era (`probe`) and performs the `initialize`
//! handshake or runs a stateless 2026-07-28 session (`stateless`), forwards
//! every inbound message to the hub; one restart loop (`driver`) runs the sessions of
//! either transport and restarts them with backoff (docs/architecture.md, "Upstream
//! failure", "Upstreams of both eras"). Never awaits a client; a
//! legacy session never interprets messages beyond the handshake.

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::protocol::{Message, RawId};

/// What an upstream actor tells the hub.
#[derive(Debug)]
pub enum UpstreamEvent {
    /// The handshake completed; the upstream takes requests now.
    Ready(InitInfo),
    /// Any message the upstream sent after the handshake, with what the transport
    /// knows about the request it belongs to.
    Message(Message, Related),
    /// Several messages a stdio server wrote one after the other, each as `Message`
    /// with [`Related::Unknown`]: read together, handed over in one send.
    Messages(Vec<Message>),
    /// The transport died or the handshake failed. Everything in flight is lost.
    Down { reason: String, retrying: bool },
    /// The server asks for an OAuth login that only a person can give (the session
    /// already ended with `Down`); the reason names `mcpmux login NAME`. `Ready`
    /// follows once a token is there.
    NeedsLogin { reason: String },
}

/// The channel upstream actors report on: each event with the upstream it is about.
/// Owned here, not by the hub, so that dependencies point one way (the hub reads it).
#[derive(Debug, Clone)]
pub struct UpstreamLink {
    tx: mpsc::Sender<(UpstreamId, UpstreamEvent)>,
}

/// Whoever reads upstream events has stopped; the actor should wind down.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the hub has stopped")]
pub struct LinkGone;

impl UpstreamLink {
    pub fn new(tx: mpsc::Sender<(UpstreamId, UpstreamEvent)>) -> Self {
        UpstreamLink { tx }
    }

    /// Reports an event of `upstream` (waits when the hub's queue is full).
    pub async fn send(&self, upstream: UpstreamId, event: UpstreamEvent) -> Result<(), LinkGone> {
        self.tx.send((upstream, event)).await.map_err(|_| LinkGone)
    }
}

/// Which of mcpmux's own upstream requests a message from the upstream belongs to, as
/// far as the transport can tell (docs/architecture.md, "Server messages and their
/// clients"). The hub turns the request into the client that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Related {
    /// It arrived on the response stream of the request mcpmux sent with this id
    /// (a Streamable HTTP POST's SSE answer): it belongs to that request.
    Request(RawId),
    /// mcpmux knows it belongs to no client request (an error mcpmux made up for a
    /// request the transport lost, a response no request waits for).
    Nothing,
    /// The transport cannot tell: stdio carries no association, and neither does the
    /// Streamable HTTP GET stream (servers send a call's sampling, elicitation and logs
    /// there when they name no related request).
    Unknown,
}

/// The protocol era an upstream session speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Era {
    /// The `initialize` handshake (2025-11-25 and earlier).
    #[default]
    Legacy,
    /// Stateless 2026-07-28 requests.
    Modern,
}

/// The parts of the upstream's `InitializeResult` (or `DiscoverResult`) the proxy uses.
#[derive(Debug, Clone, Default)]
pub struct InitInfo {
    pub era: Era,
    /// The versions the server names (`supportedVersions`; legacy: the negotiated one).
    pub supported_versions: Vec<String>,
    /// `ttlMs`/`cacheScope` of a modern server's `server/discover` result.
    pub discover_hints: Option<(u64, crate::config::CacheScope)>,
    pub protocol_version: String,
    pub capabilities: serde_json::Value,
    pub server_info: serde_json::Value,
    pub instructions: Option<String>,
    /// Both faces, when the server answers both eras and offers different things on
    /// each, so mcpmux keeps a session per face (docs/architecture.md, "Servers with
    /// two faces").
    pub dual: Option<Box<DualFaces>>,
}

/// The two faces of a server that answers both eras differently.
#[derive(Debug, Clone)]
pub struct DualFaces {
    /// What its `initialize` answered.
    pub legacy: InitInfo,
    /// What its `server/discover` answered.
    pub modern: InitInfo,
}

impl InitInfo {
    /// Whether the session is stateless (2026-07-28): each request carries its
    /// client's context (a [`RequestCtx`]), answers say how long they keep (`ttlMs`),
    /// and the server asks for input by `input_required` with its own `requestState`.
    /// What the hub asks instead of naming the era.
    pub fn is_stateless(&self) -> bool {
        self.era == Era::Modern
    }

    /// Reads the upstream's answer to the proxy's `initialize`.
    ///
    /// # Errors
    /// When the upstream answered with a JSON-RPC error.
    pub(crate) fn from_answer(answer: &Message) -> Result<InitInfo, String> {
        if let Some(err) = answer.error() {
            return Err(format!("the server refused initialize: {}", err.get()));
        }
        let result: serde_json::Value = answer
            .result()
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or_default();
        let version = result["protocolVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Ok(InitInfo {
            era: Era::Legacy,
            supported_versions: vec![version.clone()],
            discover_hints: None,
            protocol_version: version,
            capabilities: result["capabilities"].clone(),
            server_info: result["serverInfo"].clone(),
            instructions: result["instructions"].as_str().map(str::to_owned),
            dual: None,
        })
    }
}

/// The params of mcpmux's `initialize` to a server: the latest legacy version, and as
/// client capabilities the server→client requests mcpmux can route to its clients
/// (`servers.NAME.client_capabilities`).
pub(crate) fn initialize_params(config: &ServerConfig) -> serde_json::Value {
    serde_json::json!({
        "protocolVersion": crate::protocol::LATEST_VERSION,
        "capabilities": crate::config::ClientCapability::declared(&config.client_capabilities),
        "clientInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What the hub tells an upstream actor.
#[derive(Debug)]
pub enum UpstreamCmd {
    /// Write one serialized JSON-RPC message.
    Send(Bytes),
    /// A client's request to a 2026-07-28 upstream, with what its envelope needs
    /// (a legacy upstream's actor sends the bytes alone).
    Request(Bytes, Box<RequestCtx>),
}

impl UpstreamCmd {
    /// The serialized message, whatever came with it.
    pub fn into_bytes(self) -> Bytes {
        match self {
            UpstreamCmd::Send(b) | UpstreamCmd::Request(b, _) => b,
        }
    }
}

/// What a 2026-07-28 request carries about the client it is made for
/// (docs/architecture.md, "Upstreams of both eras").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestCtx {
    /// `clientCapabilities`: what that client can answer, within what mcpmux routes.
    pub client_capabilities: serde_json::Value,
    /// `logLevel` asked for this request (a modern client's own); else the level the
    /// legacy clients set.
    pub log_level: Option<String>,
    /// The client is of the legacy era: an `input_required` result is bridged into
    /// legacy requests to it.
    pub bridge_input: bool,
    /// A client's request (not one of mcpmux's own: catalog pages, shared reads,
    /// subscriptions).
    pub for_client: bool,
    /// `Mcp-Param-*` headers (lower-case name after the prefix, value) for HTTP.
    pub param_headers: Vec<(String, String)>,
}

/// The hub's handle to an upstream actor.
#[derive(Debug, Clone)]
pub struct UpstreamHandle {
    pub(crate) tx: mpsc::Sender<UpstreamCmd>,
    /// Releases a `lazy = true` upstream's actor (a no-op for the others).
    pub(crate) start: Arc<Notify>,
}

impl UpstreamHandle {
    /// A handle whose actor needs no start signal (tests drive the channel).
    #[cfg(test)]
    pub(crate) fn new(tx: mpsc::Sender<UpstreamCmd>) -> Self {
        UpstreamHandle {
            tx,
            start: Arc::new(Notify::new()),
        }
    }

    /// Lets a lazy upstream start its server (idempotent).
    pub fn start(&self) {
        self.start.notify_one();
    }

    /// Queues a message without waiting. `false` when the actor's queue is full or it
    /// has stopped.
    pub fn try_send(&self, bytes: Bytes) -> bool {
        self.tx.try_send(UpstreamCmd::Send(bytes)).is_ok()
    }

    /// Queues a client's request for a 2026-07-28 upstream with its envelope facts.
    pub fn try_send_request(&self, bytes: Bytes, ctx: RequestCtx) -> bool {
        self.tx
            .try_send(UpstreamCmd::Request(bytes, Box::new(ctx)))
            .is_ok()
    }
}

mod driver;
mod http;
pub mod probe;
pub mod process_group;
pub(crate) mod stateless;
mod stdio;
mod stdio_read;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{RestartConfig, ServerConfig, UpstreamTransport};
use crate::state::ids::UpstreamId;

/// Commands queued per upstream before the hub's `try_send` reports it full.
pub const QUEUE_CAPACITY: usize = 4096;

/// Starts the actor for one configured server.
///
/// `oauth`: the token store, whether this process may open a browser itself, where to
/// register the upstream's OAuth client ([`crate::oauth::OAuthCtx`]); `None` turns
/// OAuth off (a 401 is then an ordinary failure).
#[allow(clippy::too_many_arguments)]
pub fn spawn_upstream(
    id: UpstreamId,
    config: ServerConfig,
    restart: RestartConfig,
    max_line: usize,
    hub: UpstreamLink,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
    oauth: Option<crate::oauth::OAuthCtx>,
) -> UpstreamHandle {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let start = Arc::new(Notify::new());
    // A lazy upstream's actor waits for the hub's first client before it starts.
    let gate = config.lazy.then(|| (start.clone(), shutdown.clone()));
    let gated = |run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| async move {
        if let Some((start, shutdown)) = gate {
            tokio::select! {
                _ = start.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
        run.await
    };
    match config.transport() {
        UpstreamTransport::Stdio { .. } => {
            let actor = stdio::StdioUpstream {
                id,
                config,
                restart,
                max_line,
                hub,
                shutdown,
            };
            tracker.spawn(gated(Box::pin(actor.run(rx))));
        }
        UpstreamTransport::Http { url, headers } => {
            let auth = oauth.and_then(|ctx| {
                let daemon = ctx.logins.as_ref().map(|l| l.callback().clone());
                let auth = crate::oauth::UpstreamAuth::for_server(
                    &config,
                    &url,
                    &headers,
                    ctx.store,
                    ctx.interactive,
                    daemon,
                )?;
                if let Some(logins) = &ctx.logins {
                    logins.register(&config.name, auth.clone());
                }
                Some(auth)
            });
            let actor = http::HttpUpstream {
                id,
                auth,
                config,
                restart,
                max_message: max_line,
                hub,
                shutdown,
            };
            tracing::debug!(upstream = %actor.config.name, "starting Streamable HTTP upstream");
            tracker.spawn(gated(Box::pin(actor.run(rx))));
        }
    }
    UpstreamHandle { tx, start }
}

/// Delay before restart attempt `failures` (1-based): exponential from
/// `initial_backoff_ms`, capped at `max_backoff_ms`, with ±25 % jitter so that
/// upstreams that died together do not restart in lockstep.
pub fn backoff(cfg: &RestartConfig, failures: u32) -> Duration {
    let exp = cfg
        .initial_backoff_ms
        .saturating_mul(1u64 << failures.saturating_sub(1).min(20))
        .min(cfg.max_backoff_ms);
    let jitter = rand::random_range(0.75..=1.25);
    Duration::from_millis((exp as f64 * jitter) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let cfg = RestartConfig {
            initial_backoff_ms: 100,
            max_backoff_ms: 1000,
            ..RestartConfig::default()
        };
        let b1 = backoff(&cfg, 1).as_millis();
        let b3 = backoff(&cfg, 3).as_millis();
        let b10 = backoff(&cfg, 10).as_millis();
        assert!((75..=125).contains(&b1), "{b1}");
        assert!((300..=500).contains(&b3), "{b3}");
        assert!((750..=1250).contains(&b10), "{b10}");
    }
}
