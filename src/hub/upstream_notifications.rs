//! Upstream notifications: `resources/updated` fanned out to the holders of the URI and
//! of its parents (the cached reads dropped first; who they are and what each gets is
//! `holders.rs`), `list_changed` re-emitted to the sessions and the listens that asked
//! for it, progress mapped back to its request's client, and everything else handed to
//! `association.rs`.
//!
//! Never delivers an update to a client that does not hold the URI.

use serde_json::json;

use super::effects::notification_out;
use super::Hub;
use crate::downstream::outbox::{CoalesceKey, OutKind};
use crate::protocol::methods::{self, parse_params, UriRef};
use crate::protocol::{Message, RawId};
use crate::state::catalog::ListKind;
use crate::state::ids::{ClientId, ProxyId, SubKey, UpstreamId};
use crate::state::pending::Origin;
use crate::upstream::Related;

impl Hub {
    pub(super) fn on_upstream_updated(&mut self, upstream: UpstreamId, mut msg: Message) {
        let Some(UriRef { uri }) = parse_params(msg.params()) else {
            tracing::debug!("resources/updated without a uri dropped");
            return;
        };
        // The registry's key when the URI is known there (no copy of its text).
        let key = match self.holders.registry.key_at(&(upstream, &*uri)) {
            Some(known) => known.clone(),
            None => SubKey::new(upstream, &uri),
        };
        // `uri` is borrowed from `msg`, which may change below.
        drop(uri);
        // The fleet's followers hear of it too (an owner may hold a key for them alone).
        self.fleet_publish(&key, &msg);
        // The URI may be a sub-resource of one a client holds: its holders
        // hear of it too, and the parent's cached contents are stale.
        let (holders, parents) = self.holders.of_update(&key);
        // Invalidate before anyone hears of the change, so a re-read misses.
        self.reads.cache.invalidate(&key);
        self.reads.changed(&key);
        for pkey in &parents {
            self.reads.cache.invalidate(pkey);
        }
        // A URI the server's filters hide is told to nobody, not even to the holders
        // of a parent it sits below.
        if holders.is_empty() || !self.catalog.shows_uri(upstream, &key.uri) {
            return;
        }
        // Serialized once; `_meta` and unknown members travel untouched. A
        // namespaced upstream's URI is shown as the clients know it.
        let exposed = self.catalog.expose_uri(upstream, &key.uri);
        if exposed != *key.uri {
            super::routing::set_param(&mut msg, &["uri"], &exposed);
        }
        let merged_before = if self.traces.on {
            self.merged_of(&holders)
        } else {
            0
        };
        self.fan_out_tagged(
            &holders,
            &msg,
            OutKind::Coalescible(CoalesceKey::Update(key.clone())),
        );
        if self.traces.on {
            let merged = self.merged_of(&holders) - merged_before;
            self.trace_fan_out(upstream, &exposed, holders.len(), merged);
        }
    }

    pub(super) fn on_upstream_notification(
        &mut self,
        upstream: UpstreamId,
        mut msg: Message,
        related: &Related,
    ) {
        // The one notification of a burst: handled without copying its method.
        if msg.method() == Some(methods::RESOURCES_UPDATED) {
            self.on_upstream_updated(upstream, msg);
            return;
        }
        let method = msg.method().unwrap_or_default().to_owned();
        match method.as_str() {
            m if methods::is_list_changed(m) => {
                let kinds = ListKind::changed_by(m);
                self.refresh_catalog(upstream, kinds);
                let audience = self.views_with(upstream);
                self.broadcast(
                    &msg,
                    OutKind::Coalescible(CoalesceKey::Method(method.as_str().into())),
                    &audience,
                );
            }
            methods::LOG_MESSAGE => {
                let level: Option<String> = msg
                    .params()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p["level"].as_str().map(str::to_owned));
                let level = level.as_deref();
                match self.owner_of(upstream, related) {
                    Some((client, id, _)) => {
                        if self.wants_log(client, level) {
                            let out =
                                notification_out(msg.to_bytes(), OutKind::Notification, Some(id));
                            self.push(client, out);
                        }
                    }
                    None => {
                        let clients: Vec<ClientId> = self
                            .unrelated_receivers(upstream, true)
                            .into_iter()
                            .filter(|c| self.wants_log(*c, level))
                            .collect();
                        self.deliver_unrelated(upstream, &msg, &clients);
                    }
                }
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
                self.extend_request_timer(pid);
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
                    // Only the client the request went to hears of its cancellation.
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
            methods::ELICITATION_COMPLETE => {
                let id = msg
                    .params()
                    .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok())
                    .and_then(|p| p["elicitationId"].as_str().map(str::to_owned));
                let owner = id.and_then(|id| self.elicitations.complete(upstream, id));
                match owner {
                    Some(client) => {
                        self.push(
                            client,
                            notification_out(msg.to_bytes(), OutKind::Notification, None),
                        );
                    }
                    None => self.on_other_notification(upstream, &msg, related),
                }
            }
            _ => self.on_other_notification(upstream, &msg, related),
        }
    }

    /// Tells every client that sees an upstream that the lists it contributes may have
    /// changed.
    pub(super) fn broadcast_list_changed(&mut self, upstream: UpstreamId) {
        let caps = self.upstreams[upstream.0].last_caps.clone();
        let audience = self.views_with(upstream);
        for (cap, method) in [
            ("tools", methods::TOOLS_LIST_CHANGED),
            ("prompts", methods::PROMPTS_LIST_CHANGED),
            ("resources", methods::RESOURCES_LIST_CHANGED),
        ] {
            if caps[cap].is_object() {
                self.broadcast(
                    &Message::notification(method, None),
                    OutKind::Coalescible(CoalesceKey::Method(method.into())),
                    &audience,
                );
            }
        }
    }

    /// Sends a `*/list_changed` to every initialized session client of `audience` and to
    /// every listen stream of it that asked for it (tagged).
    pub(super) fn broadcast(
        &mut self,
        msg: &Message,
        kind: OutKind,
        audience: &super::views::Audience,
    ) {
        let method = msg.method().unwrap_or_default();
        let clients: std::sync::Arc<[ClientId]> = self
            .clients
            .iter()
            .filter(|(_, c)| audience.includes(c.view))
            .filter(
                |(id, c)| match c.init.as_ref().map(|i| i.stateless.as_ref()) {
                    None => false,
                    Some(None) => true,
                    Some(Some(_)) => self.listens.wants(**id, method),
                },
            )
            .map(|(id, _)| *id)
            .collect();
        self.fan_out_tagged(&clients, msg, kind);
    }
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
