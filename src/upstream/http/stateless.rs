//! Streamable HTTP to a 2026-07-28 server (docs/architecture.md, "Upstreams of both
//! eras"): the `server/discover` probe, then a session without a session: every
//! request is its own POST with the era's headers (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`), a listen is a POST whose SSE answer stays
//! open, and stopping a request or a listen is dropping its stream.
//!
//! It is the HTTP side of the shared stateless loop (`driver::run_stateless`, through
//! `StatelessIo`): owns the POST tasks of the session and their abort handles.
//! Everything the server sends passes through the [`StatelessSession`] before it
//! reaches the hub; never parses more of a message than its id and kind.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{AbortHandle, JoinSet};

use super::handshake::error_chain;
use super::wire::{self, BodyKind, Endpoint, SessionCtx};
use super::{HttpUpstream, SessionEnd, MAX_IN_FLIGHT};
use crate::protocol::stateless::{encode_header_value, mcp_name, MODERN_VERSION};
use crate::protocol::{methods, Kind, Message, RawId};
use crate::upstream::driver::{self, Inbound, Supervisor};
use crate::upstream::probe::{self, Verdict};
use crate::upstream::stateless::{self, StatelessSession};
use crate::upstream::{InitInfo, Related, UpstreamCmd};

/// `Mcp-Method` / `Mcp-Name` (header names are case-insensitive).
const HEADER_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const HEADER_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// A session context for modern requests: no session id, the modern version header.
pub(super) fn stateless_ctx(endpoint: &Endpoint) -> SessionCtx {
    SessionCtx {
        endpoint: endpoint.clone(),
        session_id: None,
        protocol_version: Some(HeaderValue::from_static(MODERN_VERSION)),
    }
}

/// The probe over HTTP: POSTs `server/discover` without a session and reads the answer
/// as the dual-era rules say (`probe`): a `DiscoverResult` naming 2026-07-28 is modern;
/// an error status whose body is the JSON-RPC answer is read like any answer (a 400
/// with a recognized 2026-07-28 error is evidence of the era); any other answer (an
/// error status without one, another version) is not.
pub(super) struct HttpDiscoverer<'a> {
    pub endpoint: &'a Endpoint,
    pub capabilities: &'a Value,
}

impl probe::Discover for HttpDiscoverer<'_> {
    /// # Errors
    /// The server could not be reached at all.
    async fn discover(&mut self) -> Result<Verdict, String> {
        let endpoint = self.endpoint;
        let ctx = stateless_ctx(endpoint);
        let id = RawId::parse(probe::DISCOVER_ID).expect("valid id");
        let params = stateless::discover_params(self.capabilities);
        let req = Message::request(&id, methods::SERVER_DISCOVER, Some(&params));
        let resp = wire::send(endpoint, post(&ctx, &req, &[]))
            .await
            .map_err(|e| format!("server/discover failed: {}", error_chain(&e)))?;
        let status = resp.status();
        let is_answer = |m: &Message| m.kind() == Kind::Response && m.id() == Some(&id);
        if !status.is_success() {
            let body = wire::read_bounded(resp, endpoint.max_message)
                .await
                .unwrap_or_default();
            if let Some(answer) = Message::parse(&body).ok().filter(is_answer) {
                return Ok(probe::read_discover(&answer));
            }
            let text = String::from_utf8_lossy(&body);
            return Ok(Verdict::Legacy(format!(
                "server/discover answered HTTP {status}: {}",
                text.chars().take(200).collect::<String>()
            )));
        }
        let answer = match wire::body_kind(&resp) {
            BodyKind::Json => wire::read_json(resp, endpoint.max_message, &endpoint.name)
                .await?
                .into_iter()
                .find(is_answer),
            BodyKind::Sse => {
                let mut events = wire::sse_events(resp, endpoint.max_message);
                let mut found = None;
                while let Some(ev) = events.next().await {
                    let ev = ev.map_err(|e| format!("server/discover stream failed: {e}"))?;
                    found = wire::parse_data(&ev.data, &endpoint.name)
                        .into_iter()
                        .find(is_answer);
                    if found.is_some() {
                        break;
                    }
                }
                found
            }
            other => {
                return Ok(Verdict::Legacy(format!(
                    "server/discover answered HTTP {status} ({other:?})"
                )))
            }
        };
        Ok(match answer {
            Some(a) => probe::read_discover(&a),
            None => Verdict::Legacy("server/discover got no answer".into()),
        })
    }
}

/// A POST of one modern message with the era's headers.
fn post(
    ctx: &SessionCtx,
    msg: &Message,
    param_headers: &[(String, String)],
) -> super::client::Request {
    let mut rb = ctx.post(msg.to_bytes());
    if let Some(m) = msg.method() {
        rb = rb.repeatable(msg.kind() == Kind::Request && methods::safe_to_repeat(m));
        if let Ok(v) = HeaderValue::from_str(m) {
            rb = rb.header(HEADER_METHOD, v);
        }
        if let Some(name) = mcp_name(msg) {
            if let Ok(v) = HeaderValue::from_str(&encode_header_value(&name)) {
                rb = rb.header(HEADER_NAME, v);
            }
        }
    }
    for (name, value) in param_headers {
        let header = HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes());
        if let (Ok(h), Ok(v)) = (header, HeaderValue::from_str(value)) {
            rb = rb.header(h, v);
        }
    }
    rb
}

impl HttpUpstream {
    /// Runs a stateless session (the shared loop, `driver::run_stateless`, over POSTs)
    /// until shutdown, a restart the session asks for, or the hub going away. `info`
    /// is the probe's discover result (already sent as `Ready`).
    pub(super) async fn stateless_session(
        &self,
        endpoint: &Endpoint,
        info: &InitInfo,
        rx: &mut mpsc::Receiver<UpstreamCmd>,
    ) -> SessionEnd {
        let caps = crate::config::ClientCapability::declared(&self.config.client_capabilities);
        let mut session = StatelessSession::new(&self.config.name, caps, &info.capabilities);
        let (itx, irx) = mpsc::channel::<Inbound>(256);
        let mut io = Posts {
            ctx: Arc::new(stateless_ctx(endpoint)),
            itx,
            irx,
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            tasks: JoinSet::new(),
            streams: HashMap::new(),
        };
        let sup = Supervisor {
            id: self.id,
            name: &self.config.name,
            hub: &self.hub,
            restart: &self.restart,
            shutdown: &self.shutdown,
        };
        driver::run_stateless(&sup, &mut session, &mut io, rx).await
    }
}

/// The POSTs of one stateless session: one task per message, each request's or
/// listen's stream abortable by its id. Dropping it aborts every stream.
struct Posts {
    ctx: Arc<SessionCtx>,
    itx: mpsc::Sender<Inbound>,
    irx: mpsc::Receiver<Inbound>,
    permits: Arc<Semaphore>,
    tasks: JoinSet<()>,
    streams: HashMap<RawId, AbortHandle>,
}

impl driver::StatelessIo for Posts {
    fn send(&mut self, msg: Message, listen: bool, param_headers: Vec<(String, String)>) {
        while self.tasks.try_join_next().is_some() {}
        let task = StatelessPost {
            ctx: self.ctx.clone(),
            out: self.itx.clone(),
            listen,
        };
        let id = msg.id().cloned();
        let permits = (!listen).then(|| self.permits.clone());
        let handle = self.tasks.spawn(task.run(msg, param_headers, permits));
        if let Some(id) = id {
            self.streams.retain(|_, h| !h.is_finished());
            self.streams.insert(id, handle);
        }
    }

    fn stop(&mut self, id: &RawId) {
        if let Some(h) = self.streams.remove(id) {
            h.abort();
        }
    }

    async fn inbound(&mut self) -> Result<Inbound, String> {
        // `itx` lives here, so the channel never closes.
        Ok(self.irx.recv().await.expect("the session holds a sender"))
    }
}

/// One POST of a stateless session.
struct StatelessPost {
    ctx: Arc<SessionCtx>,
    out: mpsc::Sender<Inbound>,
    listen: bool,
}

impl StatelessPost {
    async fn run(
        self,
        msg: Message,
        param_headers: Vec<(String, String)>,
        permits: Option<Arc<Semaphore>>,
    ) {
        let _permit = match permits {
            Some(p) => Some(p.acquire_owned().await.expect("never closed")),
            None => None,
        };
        let id = (msg.kind() == Kind::Request)
            .then(|| msg.id().cloned())
            .flatten();
        let method = msg.method().map(str::to_owned);
        let failure = self.exchange(&msg, &param_headers, id.as_ref()).await;
        let Some(what) = failure else { return };
        match (id, self.listen) {
            (Some(id), true) => {
                tracing::debug!(upstream = %self.ctx.endpoint.name, listen = %id, error = %what, "upstream listen stream ended");
                let _ = self.out.send(Inbound::ListenLost(id)).await;
            }
            (Some(id), false) => {
                tracing::warn!(upstream = %self.ctx.endpoint.name, ?method, error = %what, "upstream request failed; answering it with an error");
                let err = self.ctx.synthesized_error(&id, &what);
                let _ = self.out.send(Inbound::Message(err, Related::Nothing)).await;
            }
            (None, _) => {
                tracing::debug!(upstream = %self.ctx.endpoint.name, ?method, error = %what, "upstream notification not delivered")
            }
        }
    }

    /// Sends the POST and forwards its answer; `Some(why)` when the request (or
    /// listen) did not get its answer.
    async fn exchange(
        &self,
        msg: &Message,
        param_headers: &[(String, String)],
        id: Option<&RawId>,
    ) -> Option<String> {
        let max = self.ctx.endpoint.max_message;
        let name = &self.ctx.endpoint.name;
        let resp = match wire::send(&self.ctx.endpoint, post(&self.ctx, msg, param_headers)).await {
            Ok(r) => r,
            Err(e) => return Some(format!("HTTP request failed: {}", error_chain(&e))),
        };
        let status = resp.status();
        let related = id.map_or(Related::Nothing, |i| Related::Request(i.clone()));
        let is_answer = |m: &Message| id.is_some() && m.kind() == Kind::Response && m.id() == id;
        if !status.is_success() {
            // A modern error status carries the JSON-RPC error: pass it on as is.
            let body = wire::read_bounded(resp, max).await.unwrap_or_default();
            if let Some(m) = Message::parse(&body).ok().filter(|m| is_answer(m)) {
                let _ = self.out.send(Inbound::Message(m, related)).await;
                return None;
            }
            let detail = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned));
            return id.map(|_| match detail {
                Some(d) => format!("HTTP {status}: {d}"),
                None => format!("HTTP {status}"),
            });
        }
        match wire::body_kind(&resp) {
            BodyKind::Empty => id.map(|_| format!("HTTP {status} without a response")),
            BodyKind::Other(ct) => Some(format!("HTTP {status} with content type `{ct}`")),
            BodyKind::Json => {
                // One JSON text, or a stream of them (progress, then the response;
                // a listen's notifications), forwarded as each one completes.
                let mut texts = wire::JsonTexts::new(resp, max, name);
                while let Some(msgs) = texts.next().await {
                    let msgs = match msgs {
                        Ok(m) => m,
                        Err(e) => return id.map(|_| e),
                    };
                    if self.forward(msgs, &related, id).await != Ok(false) {
                        return None;
                    }
                }
                id.map(|_| format!("HTTP {status} JSON body without the response"))
            }
            BodyKind::Sse => {
                let mut events = wire::sse_events(resp, max);
                while let Some(ev) = events.next().await {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(e) => return Some(format!("response stream failed: {e}")),
                    };
                    let msgs = wire::parse_data(&ev.data, name);
                    if self.forward(msgs, &related, id).await != Ok(false) {
                        return None;
                    }
                }
                id.map(|_| "response stream ended before the answer".to_owned())
            }
        }
    }

    /// Forwards one batch of the server's messages: `Err(())` when the session is
    /// gone, else whether the batch held the answer to `id`.
    async fn forward(
        &self,
        msgs: Vec<Message>,
        related: &Related,
        id: Option<&RawId>,
    ) -> Result<bool, ()> {
        let mut answered = false;
        for m in msgs {
            answered |= id.is_some() && m.kind() == Kind::Response && m.id() == id;
            if self
                .out
                .send(Inbound::Message(m, related.clone()))
                .await
                .is_err()
            {
                return Err(());
            }
        }
        Ok(answered)
    }
}
