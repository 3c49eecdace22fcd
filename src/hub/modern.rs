//! Clients of the 2026-07-28 era (docs/architecture.md, "Both protocol eras"): their
//! requests arrive already validated at the edge, each with its own declared
//! capabilities; this file answers what only the hub can (`server/discover`,
//! `subscriptions/listen`), refuses the legacy-only methods, and gives their results
//! the era's shape (`resultType`, `ttlMs`/`cacheScope`, -32602 for a missing
//! resource).
//!
//! A listen stream is one more holder in the era-neutral subscription registry: the
//! client id of the stream (over HTTP, one client per listen request; the registry
//! never sees listen ids, which are only unique per client). Its notifications carry
//! `_meta["io.modelcontextprotocol/subscriptionId"]`; serialized once per distinct
//! listen id, so many clients whose listens all have id `"listen:0"` share the bytes.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::effects::notification_out;
use super::{Hub, UpstreamStatus};
use crate::config::CacheScope;
use crate::downstream::outbox::{OutKind, Outbound};
use crate::protocol::modern::{self, meta};
use crate::protocol::{code, methods, Message, RawId};
use crate::state::capabilities::{self, UpstreamOffer};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, SubKey, ViewId};

/// What the hub keeps for a modern client.
#[derive(Debug, Default)]
pub(super) struct ModernClient {
    /// Requests in flight: id → (method, `params.uri`), for the result's cache hints.
    requests: HashMap<RawId, (Box<str>, Option<String>)>,
    /// Set on a listen stream.
    pub(super) listen: Option<Listen>,
    /// Over HTTP, the request's `Mcp-Param-*` headers.
    pub(super) param_headers: Option<Vec<(String, String)>>,
}

impl ModernClient {
    pub(super) fn new(param_headers: Option<Vec<(String, String)>>) -> Self {
        ModernClient {
            param_headers,
            ..Default::default()
        }
    }
}

/// One `subscriptions/listen` stream.
#[derive(Debug)]
pub(super) struct Listen {
    /// The listen request's id: the stream's `subscriptionId`.
    pub(super) id: RawId,
    pub(super) tools: bool,
    pub(super) prompts: bool,
    pub(super) resources: bool,
    /// Requested URIs (as the client wrote them), in order, with the outcome of each:
    /// `None` while its upstream subscribe is in flight.
    uris: Vec<(String, Option<bool>)>,
    /// The acknowledgement was sent: notifications may flow.
    pub(super) acked: bool,
}

impl Listen {
    /// Whether a `*/list_changed` notification was asked for.
    pub(super) fn wants(&self, method: &str) -> bool {
        match method {
            methods::TOOLS_LIST_CHANGED => self.tools,
            methods::PROMPTS_LIST_CHANGED => self.prompts,
            methods::RESOURCES_LIST_CHANGED => self.resources,
            _ => false,
        }
    }
}

/// `ttlMs`/`cacheScope` for a result: the smallest TTL and `private` if any part is.
#[derive(Debug, Clone, Copy)]
struct Hints {
    ttl_ms: u64,
    scope: CacheScope,
}

impl Hints {
    fn merge(self, other: Hints) -> Hints {
        Hints {
            ttl_ms: self.ttl_ms.min(other.ttl_ms),
            scope: if self.scope == CacheScope::Private || other.scope == CacheScope::Private {
                CacheScope::Private
            } else {
                CacheScope::Public
            },
        }
    }
}

impl Hub {
    /// A modern client's request, already validated at the edge (which also refused
    /// the methods the era does not have).
    pub(super) fn on_modern_request(&mut self, client: ClientId, id: RawId, msg: Message) {
        let method = msg.method().unwrap_or_default().to_owned();
        let uri = (method == methods::RESOURCES_READ)
            .then(|| methods::parse_params::<methods::UriParams>(msg.params()).map(|p| p.uri))
            .flatten();
        if let Some(m) = self.modern_mut(client) {
            m.requests.insert(id.clone(), (method.as_str().into(), uri));
        }
        if self.on_mrtr_retry(client, &id, &msg) {
            return;
        }
        if method == methods::TOOLS_CALL {
            if let Err(why) = self.check_param_headers(client, &msg) {
                return self.reply_error(client, &id, modern::code::HEADER_MISMATCH, &why);
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
            .and_then(|i| i.modern.as_ref())
            .and_then(|m| m.param_headers.as_ref())
        else {
            return Ok(());
        };
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let Some(name) = params["name"].as_str() else {
            return Ok(());
        };
        let Some(tool) = self
            .catalog
            .item(self.view_of(client), ListKind::Tools, name)
        else {
            return Ok(());
        };
        modern::check_param_headers(&tool["inputSchema"], &params["arguments"], headers)
    }

    pub(super) fn modern_mut(&mut self, client: ClientId) -> Option<&mut ModernClient> {
        self.clients
            .get_mut(&client)?
            .init
            .as_mut()?
            .modern
            .as_mut()
    }

    pub(super) fn is_modern(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .is_some_and(|i| i.modern.is_some())
    }

    /// `server/discover`, answered from the aggregated state of the view's upstreams.
    fn discover_result(&self, view: ViewId) -> Value {
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": modern::supported_versions(),
            "capabilities": capabilities::merged_capabilities(self.ready_offers(view)),
            "_meta": {meta::SERVER_INFO: server_info()},
        });
        if let Some(text) = self.ready_instructions(view) {
            result["instructions"] = json!(text);
        }
        let hints = self.hints_of(self.view_members(view).into_iter().map(|u| u.0));
        set_hints(&mut result, hints);
        result
    }

    fn hints_of(&self, upstreams: impl IntoIterator<Item = usize>) -> Hints {
        upstreams
            .into_iter()
            .filter_map(|u| self.upstreams.get(u))
            .filter(|s| !matches!(s.status, UpstreamStatus::Removed))
            .map(|s| match &s.status {
                // A 2026-07-28 upstream said how long its answers keep.
                UpstreamStatus::Ready(info) if info.discover_hints.is_some() => {
                    let (ttl_ms, scope) = info.discover_hints.expect("checked");
                    Hints { ttl_ms, scope }
                }
                _ => Hints {
                    ttl_ms: s.ttl_ms,
                    scope: s.cache_scope,
                },
            })
            .reduce(Hints::merge)
            .unwrap_or(Hints {
                ttl_ms: 0,
                scope: CacheScope::Private,
            })
    }

    /// The cache hints of a result of `method` (with `params.uri` for a read) for a
    /// client of `view`.
    fn hints_for(&self, view: ViewId, method: &str, uri: Option<&str>) -> Option<Hints> {
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

    /// Gives a response to a modern client the era's shape: results carry
    /// `resultType` (and, for cacheable methods, `ttlMs`/`cacheScope` unless the
    /// upstream set them); a legacy "resource not found" (-32002) becomes -32602 with
    /// the requested URI in `data.uri`.
    pub(super) fn modernize_response(
        &mut self,
        client: ClientId,
        id: &RawId,
        bytes: Bytes,
    ) -> Bytes {
        let Some(m) = self.modern_mut(client) else {
            return bytes;
        };
        let Some((method, uri)) = m.requests.remove(id) else {
            return bytes;
        };
        let Ok(mut msg) = Message::parse(&bytes) else {
            return bytes;
        };
        // Only the member that changes is re-encoded; the envelope keeps its order.
        let (member, raw) = match (msg.result(), msg.error()) {
            (Some(r), _) => ("result", r.get()),
            (None, Some(e)) => ("error", e.get()),
            (None, None) => return bytes,
        };
        let Ok(mut v) = serde_json::from_str::<Value>(raw) else {
            return bytes;
        };
        if member == "result" {
            let Some(result) = v.as_object_mut() else {
                return bytes;
            };
            result
                .entry("resultType")
                .or_insert_with(|| json!("complete"));
            if let Some(h) = self.hints_for(self.view_of(client), &method, uri.as_deref()) {
                if v.get("ttlMs").is_none() {
                    set_hints(&mut v, h);
                }
            }
        } else if v["code"] == json!(code::RESOURCE_NOT_FOUND)
            || (uri.is_some() && v["code"] == json!(code::INVALID_PARAMS))
        {
            // The era's shape of a read's "not found" (legacy servers answer -32002,
            // or -32602 as the TypeScript SDK v1 does): -32602 with the URI in `data`.
            v["code"] = json!(code::INVALID_PARAMS);
            if let Some(uri) = uri.as_deref() {
                if !v["data"].is_object() {
                    v["data"] = json!({});
                }
                if v["data"].get("uri").is_none() {
                    v["data"]["uri"] = json!(uri);
                }
            }
        } else {
            return bytes;
        }
        match serde_json::value::RawValue::from_string(v.to_string()) {
            Ok(raw) => {
                msg.set_member(member, raw);
                msg.to_bytes()
            }
            Err(_) => bytes,
        }
    }

    /// `subscriptions/listen`: every requested URI that routes to an upstream that
    /// can subscribe becomes held by this stream (one more holder in the registry);
    /// the acknowledgement (the honoured subset) is sent once each upstream subscribe
    /// is settled, before any notification.
    fn on_listen(&mut self, client: ClientId, id: RawId, msg: &Message) {
        let filter: Value = msg
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .map(|p| p["notifications"].clone())
            .unwrap_or(Value::Null);
        if !filter.is_object() && !filter.is_null() {
            return self.reply_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "params.notifications must be an object",
            );
        }
        let f = crate::protocol::listen::ListenFilter::parse(&filter);
        let uris = f.uris.unwrap_or_default();
        let listen = Listen {
            id: id.clone(),
            tools: f.tools,
            prompts: f.prompts,
            resources: f.resources,
            uris: uris.iter().map(|u| (u.clone(), None)).collect(),
            acked: false,
        };
        let Some(m) = self.modern_mut(client) else {
            return;
        };
        m.requests.remove(&id);
        m.listen = Some(listen);
        let now = Instant::now().into_std();
        for (i, uri) in uris.iter().enumerate() {
            let key = self.listen_key(self.view_of(client), uri);
            let Some(key) = key else {
                self.listen_settled(client, i, false);
                continue;
            };
            if self.subs.count_for(client) >= self.settings.max_subscriptions_per_client {
                self.listen_settled(client, i, false);
                continue;
            }
            // The waiter's id is the URI's index in the filter (see `listen_settled`).
            let effects =
                self.subs
                    .subscribe(client, key, (client, RawId::from_u64(i as u64)), now);
            self.count_client_subscribe(&effects);
            self.apply_sub_effects(effects);
        }
        self.maybe_ack(client);
    }

    /// The registry key of a URI a listen asks for, when an upstream can deliver its
    /// updates (it declares `resources.subscribe`, or `force_subscribe`).
    fn listen_key(&self, view: ViewId, uri: &str) -> Option<SubKey> {
        let (upstream, own) = self.route_uri(view, uri)?;
        let slot = &self.upstreams[upstream.0];
        let key = SubKey::new(upstream, &own);
        let ok = match &slot.status {
            UpstreamStatus::Ready(info) => UpstreamOffer {
                capabilities: &info.capabilities,
                force_subscribe: slot.force_subscribe,
            }
            .subscribable(),
            _ => self.subs.is_active(&key),
        };
        ok.then_some(key)
    }

    /// The registry answered the subscribe for URI number `index` of a listen.
    pub(super) fn listen_settled(&mut self, client: ClientId, index: usize, ok: bool) {
        if let Some(slot) = self
            .modern_mut(client)
            .and_then(|m| m.listen.as_mut())
            .and_then(|l| l.uris.get_mut(index))
        {
            slot.1 = Some(ok);
        }
        self.maybe_ack(client);
    }

    /// Whether `client` is a listen stream (registry answers go to `listen_settled`).
    pub(super) fn is_listen(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .and_then(|i| i.modern.as_ref())
            .is_some_and(|m| m.listen.is_some())
    }

    /// Sends the acknowledgement once every requested URI is settled.
    fn maybe_ack(&mut self, client: ClientId) {
        let Some(listen) = self.modern_mut(client).and_then(|m| m.listen.as_mut()) else {
            return;
        };
        if listen.acked || listen.uris.iter().any(|(_, s)| s.is_none()) {
            return;
        }
        listen.acked = true;
        let honoured = crate::protocol::listen::ListenFilter {
            tools: listen.tools,
            prompts: listen.prompts,
            resources: listen.resources,
            uris: (!listen.uris.is_empty()).then(|| {
                listen
                    .uris
                    .iter()
                    .filter(|(_, s)| *s == Some(true))
                    .map(|(u, _)| u.clone())
                    .collect()
            }),
        };
        let id = listen.id.clone();
        let params = json!({
            "_meta": {meta::SUBSCRIPTION_ID: raw_json(&id)},
            "notifications": honoured.to_value(),
        });
        let ack = Message::notification(methods::SUBSCRIPTIONS_ACKNOWLEDGED, Some(&params));
        self.push(
            client,
            notification_out(ack.to_bytes(), OutKind::Request, Some(id)),
        );
    }

    /// Delivers one notification (serialized once as `msg`) to `clients`: legacy
    /// clients get it as is; listen streams get it tagged with their subscription id,
    /// serialized once per distinct id, and only once acknowledged.
    pub(super) fn fan_out_tagged(&mut self, clients: &[ClientId], msg: &Message, kind: OutKind) {
        self.counters.fanout_deliveries += clients.len() as u64;
        let plain = notification_out(msg.to_bytes(), kind.clone(), None);
        let mut tagged: HashMap<RawId, Outbound> = HashMap::new();
        for &c in clients {
            // One lookup per holder: this loop runs for every holder of every update.
            let Some(state) = self.clients.get(&c) else {
                continue;
            };
            let out = match state.init.as_ref().and_then(|i| i.modern.as_ref()) {
                None => plain.clone(),
                Some(m) => match m.listen.as_ref().filter(|l| l.acked) {
                    // A modern client that is no (acknowledged) listen gets nothing.
                    None => continue,
                    Some(l) => match tagged.get(&l.id) {
                        Some(out) => out.clone(),
                        None => {
                            let bytes = crate::protocol::tag::with_meta(
                                &plain.bytes,
                                meta::SUBSCRIPTION_ID,
                                l.id.as_json(),
                            );
                            let out = notification_out(bytes, kind.clone(), Some(l.id.clone()));
                            tagged.insert(l.id.clone(), out.clone());
                            out
                        }
                    },
                },
            };
            self.turn.push(c, &state.outbox, out);
        }
    }

    /// Ends every listen stream gracefully (shutdown): its request is answered with a
    /// completion result, which ends the stream.
    pub(super) fn end_listens(&mut self) {
        let listens: Vec<(ClientId, RawId)> = self
            .clients
            .iter()
            .filter_map(|(c, s)| {
                let l = s.init.as_ref()?.modern.as_ref()?.listen.as_ref()?;
                Some((*c, l.id.clone()))
            })
            .collect();
        for (client, id) in listens {
            let result =
                json!({"resultType": "complete", "_meta": {meta::SUBSCRIPTION_ID: raw_json(&id)}});
            self.reply(client, &id, result);
        }
    }
}

/// mcpmux's own `Implementation`.
pub(super) fn server_info() -> Value {
    json!({"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")})
}

fn set_hints(result: &mut Value, h: Hints) {
    result["ttlMs"] = json!(h.ttl_ms);
    result["cacheScope"] = json!(match h.scope {
        CacheScope::Public => "public",
        CacheScope::Private => "private",
    });
}

/// A raw id as a JSON value (it is a string or a number).
fn raw_json(id: &RawId) -> Value {
    serde_json::from_str(id.as_json()).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_merge_to_the_smallest_ttl_and_private_if_any() {
        let a = Hints {
            ttl_ms: 5,
            scope: CacheScope::Public,
        };
        let b = Hints {
            ttl_ms: 9,
            scope: CacheScope::Private,
        };
        let m = a.merge(b);
        assert_eq!(m.ttl_ms, 5);
        assert_eq!(m.scope, CacheScope::Private);
        let p = a.merge(Hints {
            ttl_ms: 7,
            scope: CacheScope::Public,
        });
        assert_eq!(p.scope, CacheScope::Public);
    }
}
