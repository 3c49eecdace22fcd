//! Spans of the MCP semantic conventions (docs/architecture.md, "Traces"), made by the
//! hub when tracing is on: a SERVER span per client request (from the request to its
//! response), a CLIENT span per upstream request (its context written into the
//! request's `_meta`), an INTERNAL span per update fan-out, and links from cached or
//! joined reads to the upstream read that produced them.
//!
//! Never: does anything when tracing is off (every entry point returns at once), or
//! changes what a client or an upstream receives beyond `_meta.traceparent`/`tracestate`
//! of mcpmux's own upstream requests.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry::KeyValue;
use serde_json::Value;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Hub;
use crate::protocol::{methods, Message, RawId};
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId};
use crate::state::pending::Origin;
use crate::telemetry::{self, meta, TARGET};

/// The `_meta` key a stateless request names its protocol version in.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

/// Most upstream-read span contexts kept for links (one per cached URI).
const MAX_READS: usize = 65_536;

/// Open spans, by what ends them.
#[derive(Default)]
pub(super) struct Traces {
    pub(super) on: bool,
    server: HashMap<(ClientId, RawId), Open>,
    client: HashMap<ProxyId, Open>,
    /// The upstream read span that produced (or is producing) each cached URI's result.
    reads: HashMap<SubKey, SpanContext>,
    /// The client request behind the hub's next upstream request, when the pending
    /// table does not name it (a read's first reader).
    cause: Option<(ClientId, RawId)>,
}

impl Traces {
    pub(super) fn new(on: bool) -> Self {
        Traces {
            on,
            ..Traces::default()
        }
    }
}

struct Open {
    span: tracing::Span,
    start: Instant,
    method: String,
}

/// What a request's params say that the conventions record.
#[derive(Default)]
struct SpanTarget {
    tool: Option<String>,
    prompt: Option<String>,
    uri: Option<String>,
    version: Option<String>,
}

impl SpanTarget {
    fn of(msg: &Message) -> SpanTarget {
        let p: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let s = |v: &Value| v.as_str().map(str::to_owned);
        let method = msg.method().unwrap_or_default();
        SpanTarget {
            tool: (method == methods::TOOLS_CALL)
                .then(|| s(&p["name"]))
                .flatten(),
            prompt: (method == "prompts/get").then(|| s(&p["name"])).flatten(),
            uri: s(&p["uri"]),
            version: s(&p["_meta"][VERSION_KEY]),
        }
    }

    /// `{mcp.method.name} {target}`.
    fn span_name(&self, method: &str) -> String {
        match self.tool.as_deref().or(self.prompt.as_deref()) {
            Some(t) => format!("{method} {t}"),
            None => method.to_owned(),
        }
    }

    fn record(&self, span: &tracing::Span) {
        if let Some(t) = &self.tool {
            span.set_attribute("gen_ai.tool.name", t.clone());
            span.set_attribute("gen_ai.operation.name", "execute_tool");
        }
        if let Some(p) = &self.prompt {
            span.set_attribute("gen_ai.prompt.name", p.clone());
        }
        if let Some(u) = &self.uri {
            span.set_attribute("mcp.resource.uri", u.clone());
        }
    }
}

/// An error response's code, if `bytes` is one.
fn error_code(bytes: &[u8]) -> Option<i64> {
    let m = Message::parse(bytes).ok()?;
    let e: Value = serde_json::from_str(m.error()?.get()).ok()?;
    e["code"].as_i64()
}

fn end(open: Open, server: bool, error: Option<i64>) {
    let error = error.map(|code| {
        open.span.record("otel.status_code", "error");
        open.span.set_attribute("error.type", code.to_string());
        open.span
            .set_attribute("rpc.response.status_code", code.to_string());
        error_type(code)
    });
    record(&open, server, error);
}

/// The duration metric of a span that ends. Its attributes take bounded values only
/// (peers choose methods and error codes; each distinct set is a series kept for
/// good): a method mcpmux does not know is `other`, as on `/metrics`.
fn record(open: &Open, server: bool, error: Option<String>) {
    let method = super::metrics::method_label(&open.method);
    let mut attrs = vec![KeyValue::new("mcp.method.name", method)];
    if let Some(e) = error {
        attrs.push(KeyValue::new("error.type", e));
    }
    telemetry::record_duration(server, open.start.elapsed(), &attrs);
}

/// `error.type` of an error code on the duration metric: the JSON-RPC reserved codes
/// (which MCP's are among) as they are, any other `_OTHER` (the conventions' value
/// for an error type outside a known set).
fn error_type(code: i64) -> String {
    if (-32768..=-32000).contains(&code) {
        code.to_string()
    } else {
        "_OTHER".to_owned()
    }
}

impl Hub {
    /// A client request arrived: its SERVER span starts, child of the request's
    /// `_meta.traceparent` when it has one.
    pub(super) fn trace_request(&mut self, client: ClientId, id: &RawId, msg: &Message) {
        if !self.traces.on {
            return;
        }
        let method = msg.method().unwrap_or_default().to_owned();
        let target = SpanTarget::of(msg);
        let transport = match self.clients.get(&client).map(|c| c.outbox.transport()) {
            Some("stdio") => "pipe",
            _ => "tcp",
        };
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "mcp.server",
            otel.name = %target.span_name(&method),
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = %method,
            jsonrpc.request.id = %id,
            network.transport = transport,
        );
        if let Some(cx) = meta::extract(msg) {
            let _ = span.set_parent(cx);
        }
        target.record(&span);
        let state = self.clients.get(&client);
        let version = target.version.clone().or_else(|| {
            state
                .and_then(|c| c.init.as_ref())
                .and_then(|i| i.version.clone())
        });
        if let Some(v) = version {
            span.set_attribute("mcp.protocol.version", v);
        }
        // The conventions name a session only where one exists (a handshake session).
        if let Some(s) = state.and_then(|c| c.session.as_deref()) {
            span.set_attribute("mcp.session.id", s.to_owned());
        }
        let open = Open {
            span,
            start: Instant::now(),
            method,
        };
        self.traces.server.insert((client, id.clone()), open);
    }

    /// A response to a client's request is queued: its SERVER span ends.
    pub(super) fn trace_response(&mut self, client: ClientId, id: &RawId, bytes: &Bytes) {
        if !self.traces.on {
            return;
        }
        if let Some(open) = self.traces.server.remove(&(client, id.clone())) {
            end(open, true, error_code(bytes));
        }
    }

    /// A read's cache outcome on its SERVER span (`hit`, `join`, `miss`); a hit or a
    /// join links to the upstream read that produced (or is producing) the result, and
    /// a miss makes the reader the parent of that read.
    pub(super) fn trace_read(&mut self, client: ClientId, id: &RawId, key: &SubKey, outcome: &str) {
        if !self.traces.on {
            return;
        }
        let Some(open) = self.traces.server.get(&(client, id.clone())) else {
            return;
        };
        open.span.set_attribute("mcpmux.cache", outcome.to_owned());
        match outcome {
            "miss" => self.traces.cause = Some((client, id.clone())),
            _ => {
                if let Some(read) = self.traces.reads.get(key) {
                    open.span.add_link(read.clone());
                }
            }
        }
    }

    /// mcpmux sends request `pid` upstream: its CLIENT span starts (child of the client
    /// request behind it, if any) and the returned copy of `msg` carries its context.
    pub(super) fn trace_upstream(
        &mut self,
        upstream: UpstreamId,
        pid: ProxyId,
        msg: &Message,
    ) -> Option<Message> {
        if !self.traces.on {
            return None;
        }
        let method = msg.method().unwrap_or_default().to_owned();
        let target = SpanTarget::of(msg);
        let origin = self.pending.get(pid).map(|e| e.origin.clone());
        let cause = self.traces.cause.take();
        let parent = match &origin {
            Some(Origin::Client { client, id, .. }) => Some((*client, id.clone())),
            Some(Origin::ListPart { agg, .. }) => {
                self.lists.open.get(agg).map(|a| (a.client, a.id().clone()))
            }
            _ => cause,
        };
        let slot = &self.upstreams[upstream.0];
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "mcp.client",
            otel.name = %target.span_name(&method),
            otel.kind = "client",
            otel.status_code = Empty,
            mcp.method.name = %method,
            jsonrpc.request.id = pid.0,
            mcpmux.upstream = %slot.name,
        );
        if let Some(info) = self.upstream_ready(upstream) {
            span.set_attribute("mcp.protocol.version", info.protocol_version.clone());
        }
        target.record(&span);
        if let Some(p) = parent.and_then(|k| self.traces.server.get(&k)) {
            let _ = span.set_parent(p.span.context());
        }
        let cx = span.context();
        if let Some(Origin::Read { key, .. }) = &origin {
            if self.traces.reads.len() >= MAX_READS {
                self.traces.reads.clear();
            }
            self.traces
                .reads
                .insert(key.clone(), cx.span().span_context().clone());
        }
        let mut out = msg.clone();
        meta::inject(&mut out, &cx);
        let open = Open {
            span,
            start: Instant::now(),
            method,
        };
        self.traces.client.insert(pid, open);
        Some(out)
    }

    /// Upstream request `pid` is over (answered, failed, cancelled): its CLIENT span
    /// ends, with the error code when it failed.
    pub(super) fn trace_upstream_done(&mut self, pid: ProxyId, error: Option<i64>) {
        if !self.traces.on {
            return;
        }
        if let Some(open) = self.traces.client.remove(&pid) {
            end(open, false, error);
        }
    }

    /// An update fanned out: one INTERNAL span with the holder count and how many
    /// deliveries were merged into one already queued (slow clients).
    pub(super) fn trace_fan_out(
        &self,
        upstream: UpstreamId,
        uri: &str,
        holders: usize,
        merged: u64,
    ) {
        if !self.traces.on {
            return;
        }
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "mcp.fanout",
            otel.name = "notifications/resources/updated",
            otel.kind = "internal",
            mcp.method.name = methods::RESOURCES_UPDATED,
            mcp.resource.uri = uri,
            mcpmux.upstream = %self.upstreams[upstream.0].name,
            mcpmux.holders = holders as u64,
            mcpmux.coalesced = merged,
        );
        drop(span);
    }

    /// Deliveries merged so far into the outboxes of `clients` (for [`Hub::trace_fan_out`]).
    pub(super) fn merged_of(&self, clients: &[ClientId]) -> u64 {
        clients
            .iter()
            .filter_map(|c| self.clients.get(c))
            .map(|c| c.outbox.merged())
            .sum()
    }

    /// A client cancelled its request `id`: no response will come, so its SERVER span
    /// ends now (it would otherwise stay open until the client leaves).
    pub(super) fn trace_cancelled(&mut self, client: ClientId, id: &RawId) {
        if !self.traces.on {
            return;
        }
        if let Some(open) = self.traces.server.remove(&(client, id.clone())) {
            open.span.set_attribute("error.type", "cancelled");
            record(&open, true, Some("cancelled".to_owned()));
        }
    }

    /// A client left: its open SERVER spans end unanswered.
    pub(super) fn trace_client_gone(&mut self, client: ClientId) {
        if self.traces.on {
            self.traces.server.retain(|(c, _), _| *c != client);
        }
    }
}
