//! Upstream → hub: readiness and failure, responses mapped back to their clients,
//! notifications fanned out (updates only to holders), server→client requests routed
//! to the one client they can belong to.

use std::sync::Arc;

use serde_json::json;
use tokio::time::Instant;

use super::effects::notification_out;
use super::{Hub, UpstreamStatus};
use crate::downstream::outbox::OutKind;
use crate::protocol::methods::{self, parse_params, UriParams};
use crate::protocol::{code, Kind, Message, RawId};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId};
use crate::state::pending::{ClientBound, Origin};
use crate::upstream::UpstreamEvent;

impl Hub {
    pub(super) fn on_upstream_event(&mut self, upstream: UpstreamId, event: UpstreamEvent) {
        if upstream.0 >= self.upstreams.len() {
            return;
        }
        match event {
            UpstreamEvent::Ready(info) => self.on_upstream_ready(upstream, info),
            UpstreamEvent::Down { reason, retrying } => {
                self.on_upstream_down(upstream, reason, retrying)
            }
            UpstreamEvent::Message(msg) => match msg.kind() {
                Kind::Response => self.on_upstream_response(upstream, msg),
                Kind::Notification => self.on_upstream_notification(upstream, msg),
                Kind::Request => self.on_upstream_request(upstream, msg),
            },
        }
    }

    fn on_upstream_ready(&mut self, upstream: UpstreamId, info: crate::upstream::InitInfo) {
        let slot = &mut self.upstreams[upstream.0];
        let restart = slot.was_ready;
        tracing::info!(upstream = %slot.name, restart, server = %info.server_info, "upstream ready");
        slot.last_caps = info.capabilities.clone();
        slot.status = UpstreamStatus::Ready(info);
        slot.was_ready = true;
        self.cache.clear_upstream(upstream);
        self.refresh_catalog(upstream, &ListKind::ALL);
        if restart {
            // A fresh session holds no subscriptions: take them again, and tell every
            // holder that changes may have been missed.
            let effects = self.subs.upstream_ready(upstream);
            self.apply_sub_effects(effects);
            let keys: Vec<SubKey> = self.subs.keys_of(upstream).cloned().collect();
            for key in keys {
                // Holders know the URI in its exposed (namespaced) form, as in every
                // other update; `key.uri` is the upstream's own form.
                let uri = self.catalog.expose_uri(upstream, &key.uri);
                let n =
                    Message::notification(methods::RESOURCES_UPDATED, Some(&json!({ "uri": uri })));
                let holders: Vec<ClientId> = self.subs.holders(&key).collect();
                let out = notification_out(n.to_bytes(), update_key(&key), None);
                self.fan_out(&holders, &out);
            }
            for method in [
                methods::TOOLS_LIST_CHANGED,
                methods::PROMPTS_LIST_CHANGED,
                methods::RESOURCES_LIST_CHANGED,
            ] {
                self.broadcast(
                    &Message::notification(method, None),
                    OutKind::Coalescible(method.into()),
                );
            }
        }
        self.answer_deferred_inits();
    }

    fn on_upstream_down(&mut self, upstream: UpstreamId, reason: String, retrying: bool) {
        let name = self.upstreams[upstream.0].name.clone();
        tracing::warn!(upstream = %name, %reason, retrying, "upstream down");
        self.upstreams[upstream.0].status = UpstreamStatus::Down {
            reason: reason.clone(),
            retrying,
        };
        let why = format!("upstream {name} closed before answering: {reason}");
        for pid in self.pending.ids_on_upstream(upstream) {
            self.fail_request(pid, code::UPSTREAM_UNAVAILABLE, &why);
        }
        self.subs.upstream_lost(upstream);
        self.cache.clear_upstream(upstream);
        for kind in ListKind::ALL {
            self.catalog.forget(upstream, kind);
        }
        if self.upstreams[upstream.0].was_ready {
            // Its tools, prompts and resources are gone from the merged lists.
            self.broadcast_list_changed(upstream);
        }
        for bound in self.pending.drop_client_bound(|b| b.upstream == upstream) {
            // The client may still answer; the answer will find nothing and be dropped.
            tracing::debug!(client = %bound.client, "server request orphaned by upstream exit");
        }
        self.answer_deferred_inits();
    }

    fn on_upstream_response(&mut self, upstream: UpstreamId, mut msg: Message) {
        let Some(pid) = msg.id().and_then(RawId::as_u64).map(ProxyId) else {
            tracing::debug!(upstream = %self.upstreams[upstream.0].name, "response with a foreign id dropped");
            return;
        };
        if self.pending.get(pid).map(|e| e.upstream) != Some(upstream) {
            tracing::debug!("late or unknown upstream response dropped");
            return;
        }
        self.drop_request_timer(pid);
        let entry = self.pending.complete(pid).expect("checked above");
        match entry.origin {
            Origin::Client {
                client, id, method, ..
            } => {
                msg.set_id(&id);
                if &*method == methods::RESOURCES_READ {
                    if let Some(r) = msg.result().map(|r| r.get().to_owned()) {
                        if let Some(exposed) = self.expose_read_result(upstream, &r) {
                            if let Ok(raw) = serde_json::value::RawValue::from_string(exposed) {
                                msg.set_member("result", raw);
                            }
                        }
                    }
                }
                self.push_response(client, &id, msg);
            }
            Origin::Subscribe(key) => {
                let result = match msg.error() {
                    None => Ok(()),
                    Some(e) => Err(serde_json::from_str(e.get()).unwrap_or_else(
                        |_| json!({"code": code::INTERNAL_ERROR, "message": "upstream error"}),
                    )),
                };
                if let Err(e) = &result {
                    tracing::warn!(uri = %key.uri, error = %e, "upstream refused resources/subscribe");
                }
                let effects = self
                    .subs
                    .upstream_result(&key, result, Instant::now().into_std());
                self.apply_sub_effects(effects);
            }
            Origin::Read { key, generation } => match (msg.result(), msg.error()) {
                (Some(r), _) => match self.expose_read_result(upstream, r.get()) {
                    Some(exposed) => self.finish_read(&key, generation, Ok(&exposed)),
                    None => self.finish_read(&key, generation, Ok(r.get())),
                },
                (None, Some(e)) => self.finish_read(&key, generation, Err(e.get())),
                (None, None) => self.finish_read(
                    &key,
                    generation,
                    Err("{\"code\":-32603,\"message\":\"empty upstream response\"}"),
                ),
            },
            Origin::ListPart { agg, kind, cursor } => {
                let outcome = response_outcome(&msg);
                self.list_part_done(upstream, agg, kind, cursor, outcome);
            }
            Origin::CatalogFetch { kind, cursor, page } => {
                let outcome = response_outcome(&msg);
                self.catalog_page(upstream, kind, cursor, page, outcome);
                self.catalog_settled(upstream);
            }
            Origin::Unsubscribe(key) => {
                if let Some(e) = msg.error() {
                    tracing::debug!(uri = %key.uri, error = e.get(), "upstream refused resources/unsubscribe");
                }
            }
            Origin::Internal(what) => {
                if let Some(e) = msg.error() {
                    tracing::debug!(
                        what,
                        error = e.get(),
                        "upstream refused an internal request"
                    );
                }
            }
        }
    }

    fn on_upstream_notification(&mut self, upstream: UpstreamId, mut msg: Message) {
        let method = msg.method().unwrap_or_default().to_owned();
        match method.as_str() {
            methods::RESOURCES_UPDATED => {
                let Some(UriParams { uri }) = parse_params(msg.params()) else {
                    tracing::debug!("resources/updated without a uri dropped");
                    return;
                };
                let key = SubKey::new(upstream, &uri);
                // Invalidate before anyone hears of the change, so a re-read misses.
                self.cache.invalidate(&key);
                let holders: Vec<ClientId> = self.subs.holders(&key).collect();
                if holders.is_empty() {
                    return;
                }
                // Serialized once; `_meta` and unknown members travel untouched. A
                // namespaced upstream's URI is shown as the clients know it.
                let exposed = self.catalog.expose_uri(upstream, &uri);
                if exposed != uri {
                    super::routing::set_param(&mut msg, &["uri"], &exposed);
                }
                let out = notification_out(msg.to_bytes(), update_key(&key), None);
                self.fan_out(&holders, &out);
            }
            m if methods::is_list_changed(m) => {
                let kinds = ListKind::changed_by(m);
                self.refresh_catalog(upstream, kinds);
                self.broadcast(&msg, OutKind::Coalescible(method.as_str().into()));
            }
            methods::LOG_MESSAGE => {
                let level: Option<String> = msg
                    .params()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p["level"].as_str().map(str::to_owned));
                let out = notification_out(msg.to_bytes(), OutKind::Notification, None);
                let clients: Vec<ClientId> = self
                    .clients
                    .iter()
                    .filter(|(id, c)| c.init.is_some() && self.wants_log(**id, level.as_deref()))
                    .map(|(id, _)| *id)
                    .collect();
                self.fan_out(&clients, &out);
            }
            methods::PROGRESS => {
                let Some(pid) = methods::progress_token_of_notification(msg.params()).map(ProxyId)
                else {
                    return;
                };
                let Some(Origin::Client {
                    client,
                    id,
                    progress: Some(token),
                    ..
                }) = self
                    .pending
                    .get(pid)
                    .filter(|e| e.upstream == upstream)
                    .map(|e| e.origin.clone())
                else {
                    return;
                };
                let token: serde_json::Value =
                    serde_json::from_str(&token).unwrap_or(serde_json::Value::Null);
                rewrite_progress_token_notification(&mut msg, token);
                self.push(
                    client,
                    notification_out(msg.to_bytes(), OutKind::Notification, Some(id)),
                );
            }
            methods::CANCELLED => {
                // The upstream cancels a request it sent to a client.
                let Some(req) = parse_params::<methods::CancelledParams>(msg.params())
                    .and_then(|p| p.request_id)
                    .and_then(|r| RawId::parse(r.get()))
                else {
                    return;
                };
                if let Some(pid) = self.pending.find_client_bound(upstream, &req) {
                    let bound = self
                        .pending
                        .complete_client_bound(pid)
                        .expect("found above");
                    let n = Message::notification(
                        methods::CANCELLED,
                        Some(&json!({"requestId": pid.0})),
                    );
                    self.push(
                        bound.client,
                        notification_out(n.to_bytes(), OutKind::Notification, None),
                    );
                }
            }
            _ => self.broadcast(&msg, OutKind::Notification),
        }
    }

    /// A server→client request: answered locally (`ping`) or routed to the one client
    /// it can belong to, else refused with an error that says why.
    fn on_upstream_request(&mut self, upstream: UpstreamId, mut msg: Message) {
        let id = msg.id().cloned().expect("requests have ids");
        if msg.method() == Some(methods::PING) {
            self.send_to_upstream(upstream, &Message::response(&id, &json!({})));
            return;
        }
        let waiting = self.pending.clients_waiting_on(upstream);
        let [(client, related)] = waiting.as_slice() else {
            let why = if waiting.is_empty() {
                "mcpmux cannot route this request: no client has a request in flight on this server"
            } else {
                "mcpmux cannot route this request: several clients have requests in flight on this server"
            };
            let err = Message::error_response(Some(&id), code::METHOD_NOT_FOUND, why, None);
            self.send_to_upstream(upstream, &err);
            return;
        };
        let (client, related) = (*client, related.clone());
        let pid = self.pending.register_client_bound(ClientBound {
            upstream,
            upstream_id: id,
            client,
        });
        msg.set_id(&RawId::from_u64(pid.0));
        self.push(
            client,
            notification_out(msg.to_bytes(), OutKind::Request, Some(related)),
        );
    }

    /// Tells every client that the lists an upstream contributes may have changed.
    fn broadcast_list_changed(&mut self, upstream: UpstreamId) {
        let caps = self.upstreams[upstream.0].last_caps.clone();
        for (cap, method) in [
            ("tools", methods::TOOLS_LIST_CHANGED),
            ("prompts", methods::PROMPTS_LIST_CHANGED),
            ("resources", methods::RESOURCES_LIST_CHANGED),
        ] {
            if caps[cap].is_object() {
                self.broadcast(
                    &Message::notification(method, None),
                    OutKind::Coalescible(method.into()),
                );
            }
        }
    }

    /// Sends a notification to every initialized client.
    fn broadcast(&mut self, msg: &Message, kind: OutKind) {
        let clients: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.init.is_some())
            .map(|(id, _)| *id)
            .collect();
        let out = notification_out(msg.to_bytes(), kind, None);
        self.fan_out(&clients, &out);
    }
}

impl Hub {
    /// A `resources/read` result of a namespaced upstream with `contents[].uri` shown
    /// as clients know it; `None` when nothing needs to change.
    fn expose_read_result(&self, upstream: UpstreamId, result: &str) -> Option<String> {
        self.upstreams[upstream.0].prefix.as_ref()?;
        let mut v: serde_json::Value = serde_json::from_str(result).ok()?;
        for item in v.get_mut("contents")?.as_array_mut()? {
            if let Some(uri) = item.get("uri").and_then(|u| u.as_str()) {
                let exposed = self.catalog.expose_uri(upstream, uri);
                item["uri"] = serde_json::Value::String(exposed);
            }
        }
        Some(v.to_string())
    }
}

/// A response as `Ok(result)` or `Err(error object)`.
fn response_outcome(msg: &Message) -> Result<serde_json::Value, serde_json::Value> {
    let parse = |r: &serde_json::value::RawValue| serde_json::from_str(r.get()).unwrap_or_default();
    match (msg.result(), msg.error()) {
        (Some(r), _) => Ok(parse(r)),
        (None, Some(e)) => Err(parse(e)),
        (None, None) => {
            Err(json!({"code": code::INTERNAL_ERROR, "message": "empty upstream response"}))
        }
    }
}

/// The outbox coalescing key of an update: one pending entry per (upstream, URI).
fn update_key(key: &SubKey) -> OutKind {
    OutKind::Coalescible(Arc::from(format!("{} {}", key.upstream, key.uri)))
}

/// Sets `params.progressToken` of a progress notification.
fn rewrite_progress_token_notification(msg: &mut Message, token: serde_json::Value) {
    if let Some(mut params) = msg
        .params()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
    {
        params["progressToken"] = token;
        msg.set_params(&params);
    }
}
