//! Stateless clients (docs/architecture.md, "Both protocol eras"): each is one
//! request, already validated at the edge with its own declared capabilities, and
//! asked things by answer-and-retry (MRTR) instead of a live channel. This file routes
//! such a request, answers what only the hub can (`server/discover`), checks its
//! `Mcp-Param-*` headers against the tool, and works out the cache hints of its answer
//! (the edge gives the answer the era's shape: `crate::protocol::shape`). A listen
//! request's stream is kept by the listens part (`listens.rs`), not here.
//!
//! Never: rewrites an answer's bytes, or keeps a client past its one request.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::Hub;
use super::UpstreamStatus;
use crate::config::CacheScope;
use crate::protocol::shape::CacheHints;
use crate::protocol::stateless::{self, meta};
use crate::protocol::{methods, Message, RawId};
use crate::state::capabilities;
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, ViewId};

/// What the hub keeps for a stateless client.
#[derive(Debug, Default)]
pub(super) struct StatelessClient {
    /// Requests in flight: id → (method, `params.uri`), for the result's cache hints.
    pub(super) requests: HashMap<RawId, (Box<str>, Option<String>)>,
    /// Over HTTP, the request's `Mcp-Param-*` headers.
    pub(super) param_headers: Option<Vec<(String, String)>>,
}

impl StatelessClient {
    pub(super) fn new(param_headers: Option<Vec<(String, String)>>) -> Self {
        StatelessClient {
            param_headers,
            ..Default::default()
        }
    }
}

impl Hub {
    /// A stateless client's request, already validated at the edge (which also refused
    /// the methods the era does not have).
    pub(super) fn on_stateless_request(&mut self, client: ClientId, id: RawId, msg: Message) {
        let method = msg.method().unwrap_or_default().to_owned();
        let uri = (method == methods::RESOURCES_READ)
            .then(|| methods::parse_params::<methods::UriParams>(msg.params()).map(|p| p.uri))
            .flatten();
        if let Some(m) = self.stateless_mut(client) {
            m.requests.insert(id.clone(), (method.as_str().into(), uri));
        }
        if self.on_mrtr_retry(client, &id, &msg) {
            return;
        }
        if method == methods::TOOLS_CALL {
            if let Err(why) = self.check_param_headers(client, &msg) {
                return self.reply_error(client, &id, stateless::code::HEADER_MISMATCH, &why);
            }
        }
        match method.as_str() {
            methods::SERVER_DISCOVER => {
                let result = self.discover_result(self.view_of(client));
                self.reply(client, &id, result);
            }
            methods::SUBSCRIPTIONS_LISTEN => self.on_listen(client, id, &msg),
            methods::RESOURCES_READ => self.on_read(client, id, msg),
            m if ListKind::from_method(m).is_some() => {
                let kind = ListKind::from_method(m).expect("checked");
                self.on_list(client, id, &msg, kind);
            }
            _ => self.forward_request(client, id, msg),
        }
    }

    /// `Mcp-Param-*` headers of an HTTP `tools/call` against the tool's definition, when
    /// mcpmux knows it (from the upstream's list).
    fn check_param_headers(&self, client: ClientId, msg: &Message) -> Result<(), String> {
        let Some(headers) = self
            .clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .and_then(|i| i.stateless.as_ref())
            .and_then(|m| m.param_headers.as_ref())
        else {
            return Ok(());
        };
        let Some(name) = stateless::mcp_name(msg) else {
            return Ok(());
        };
        let Some(tool) = self
            .catalog
            .item(self.view_of(client), ListKind::Tools, &name)
        else {
            return Ok(());
        };
        let schema = &tool["inputSchema"];
        if !stateless::has_param_annotations(schema) {
            // Most tools map no argument to a header: their arguments are not parsed.
            return Ok(());
        }
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        stateless::check_param_headers(schema, &params["arguments"], headers)
    }

    pub(super) fn stateless_mut(&mut self, client: ClientId) -> Option<&mut StatelessClient> {
        self.clients
            .get_mut(&client)?
            .init
            .as_mut()?
            .stateless
            .as_mut()
    }

    pub(super) fn is_stateless(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .is_some_and(|i| i.stateless.is_some())
    }

    /// `server/discover`, answered from the aggregated state of the view's upstreams.
    fn discover_result(&self, view: ViewId) -> Value {
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": stateless::supported_versions(),
            "capabilities": capabilities::merged_capabilities(self.ready_offers(view)),
            "_meta": {meta::SERVER_INFO: server_info()},
        });
        if let Some(text) = self.ready_instructions(view) {
            result["instructions"] = json!(text);
        }
        self.hints_of(self.view_members(view).into_iter().map(|u| u.0))
            .set_on(&mut result);
        result
    }

    fn hints_of(&self, upstreams: impl IntoIterator<Item = usize>) -> CacheHints {
        upstreams
            .into_iter()
            .filter_map(|u| self.upstreams.get(u))
            .filter(|s| !matches!(s.status, UpstreamStatus::Removed))
            .map(|s| match &s.status {
                // A 2026-07-28 upstream said how long its answers keep.
                UpstreamStatus::Ready(info) if info.discover_hints.is_some() => {
                    let (ttl_ms, scope) = info.discover_hints.expect("checked");
                    hints(ttl_ms, scope)
                }
                _ => hints(s.ttl_ms, s.cache_scope),
            })
            .reduce(CacheHints::merge)
            .unwrap_or(CacheHints::NONE)
    }

    /// The cache hints of a result of `method` (with `params.uri` for a read) for a
    /// client of `view`.
    fn hints_for(&self, view: ViewId, method: &str, uri: Option<&str>) -> Option<CacheHints> {
        if method == methods::RESOURCES_READ {
            let (u, _) = self.route_uri(view, uri?)?;
            return Some(self.hints_of([u.0]));
        }
        let kind = ListKind::from_method(method)?;
        Some(
            self.hints_of(
                self.candidates(view, kind.capability())
                    .into_iter()
                    .map(|u| u.0),
            ),
        )
    }

    /// The cache hints of the answer to a stateless client's request `id` (its edge
    /// gives the answer the era's shape, `crate::protocol::shape`); `None` for a
    /// session client's or for an answer that is not cacheable.
    pub(super) fn response_hints(&mut self, client: ClientId, id: &RawId) -> Option<CacheHints> {
        let (method, uri) = self.stateless_mut(client)?.requests.remove(id)?;
        self.hints_for(self.view_of(client), &method, uri.as_deref())
    }
}

/// mcpmux's own `Implementation`.
pub(super) fn server_info() -> Value {
    json!({"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")})
}

/// The hints a server's configured (or discovered) TTL and scope give.
fn hints(ttl_ms: u64, scope: CacheScope) -> CacheHints {
    CacheHints {
        ttl_ms,
        private: scope == CacheScope::Private,
    }
}
