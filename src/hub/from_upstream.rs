//! Upstream → hub, first stop: each upstream event dispatched by kind, and the
//! upstream's lifecycle (ready: catalog, log level, re-subscribes and their "may have
//! changed"; down: requests failed, lists and cache dropped). Responses are in
//! `upstream_responses.rs`, notifications in `upstream_notifications.rs` (who gets an
//! update is `holders.rs`), the messages that belong to one client's request in
//! `association.rs` (docs/architecture.md, "Server messages and their clients").
//!
//! Never blocks on a client or an upstream.

use serde_json::json;

use super::{Hub, UpstreamStatus};
use crate::downstream::outbox::OutKind;
use crate::protocol::methods::{self};
use crate::protocol::{code, Kind, Message};
use crate::state::catalog::ListKind;
use crate::state::ids::{SubKey, UpstreamId};
use crate::upstream::{Related, UpstreamEvent};

/// The rest of a batch of one stdio server's messages ([`UpstreamEvent::Messages`]),
/// handled before the hub takes anything else from the upstreams.
#[derive(Debug)]
pub(super) struct Carry {
    upstream: UpstreamId,
    rest: std::vec::IntoIter<Message>,
}

impl Hub {
    pub(super) fn on_upstream_event(&mut self, upstream: UpstreamId, event: UpstreamEvent) {
        if self.upstream_gone(upstream) {
            // Unknown, or removed by a reload (its actor is winding down).
            return;
        }
        match event {
            UpstreamEvent::Ready(info) => self.on_upstream_ready(upstream, info),
            UpstreamEvent::Down { reason, retrying } => {
                self.on_upstream_down(upstream, reason, retrying)
            }
            UpstreamEvent::NeedsLogin { reason } => {
                self.on_upstream_down(upstream, reason.clone(), true);
                self.upstreams[upstream.0].status = UpstreamStatus::NeedsLogin { reason };
            }
            UpstreamEvent::Message(msg, related) => {
                self.on_upstream_message(upstream, msg, &related)
            }
            UpstreamEvent::Messages(msgs) => {
                debug_assert!(self.carry.is_none(), "a batch taken before the last ended");
                self.carry = Some(Carry {
                    upstream,
                    rest: msgs.into_iter(),
                });
                self.continue_carry(super::TURN_PUSHES);
            }
        }
    }

    fn upstream_gone(&self, upstream: UpstreamId) -> bool {
        upstream.0 >= self.upstreams.len()
            || matches!(self.upstreams[upstream.0].status, UpstreamStatus::Removed)
    }

    /// Handles the messages of the batch under way (`carry`) until this turn's pushes
    /// reach `limit` ([`super::TURN_PUSHES`]), or the batch ends: a batch is handled across
    /// turns, so it bounds a turn no more than one message does.
    pub(super) fn continue_carry(&mut self, limit: usize) {
        while self.turn.pushes < limit {
            let Some(carry) = self.carry.as_mut() else {
                return;
            };
            let upstream = carry.upstream;
            let Some(msg) = carry.rest.next() else {
                self.carry = None;
                return;
            };
            if !self.upstream_gone(upstream) {
                self.on_upstream_message(upstream, msg, &Related::Unknown);
            }
            self.reap_doomed();
        }
        if self.carry.as_ref().is_some_and(|c| c.rest.len() == 0) {
            self.carry = None;
        }
    }

    fn on_upstream_message(&mut self, upstream: UpstreamId, msg: Message, related: &Related) {
        match msg.kind() {
            Kind::Response => self.on_upstream_response(upstream, msg),
            Kind::Notification => self.on_upstream_notification(upstream, msg, related),
            Kind::Request => self.on_upstream_request(upstream, msg, related),
        }
    }

    fn on_upstream_ready(&mut self, upstream: UpstreamId, info: crate::upstream::InitInfo) {
        let slot = &mut self.upstreams[upstream.0];
        let restart = slot.was_ready;
        tracing::info!(upstream = %slot.name, restart, server = %info.server_info, "upstream ready");
        if restart {
            self.counters
                .upstreams
                .entry(upstream)
                .or_default()
                .restarts += 1;
        }
        let slot = &mut self.upstreams[upstream.0];
        slot.last_caps = info.capabilities.clone();
        slot.status = UpstreamStatus::Ready(info);
        slot.was_ready = true;
        self.reads.cache.clear_upstream(upstream);
        self.reads.upstream_gone(upstream);
        self.refresh_catalog(upstream, &ListKind::ALL);
        self.send_log_level(upstream);
        {
            // A fresh session holds no subscriptions: take them again (after a restart,
            // or the URIs a reload moved here from this server's old config), and tell
            // every holder that changes may have been missed.
            let effects = self.holders.registry.upstream_ready(upstream);
            self.apply_sub_effects(effects);
            // Keys this instance owns for the fleet's other instances alone are in no
            // registry entry here: taken again too.
            self.fleet_resubscribe_owned(upstream);
            let keys: Vec<SubKey> = self.holders.registry.keys_of(upstream).cloned().collect();
            for key in keys {
                // Holders know the URI in its exposed (namespaced) form, as in every
                // other update; `key.uri` is the upstream's own form.
                let uri = self.catalog.expose_uri(upstream, &key.uri);
                let n =
                    Message::notification(methods::RESOURCES_UPDATED, Some(&json!({ "uri": uri })));
                let holders = self.holders.of_key(&key);
                self.fan_out_tagged(&holders, &n, OutKind::update(&key));
            }
        }
        // Its lists join the merged ones: clients that initialized before (it was
        // down, or restarting) hear that they changed.
        let audience = self.views_with(upstream);
        self.lists_changed_for(&audience);
        self.answer_deferred_inits();
    }

    fn on_upstream_down(&mut self, upstream: UpstreamId, reason: String, retrying: bool) {
        let name = self.upstreams[upstream.0].name.clone();
        tracing::warn!(upstream = %name, %reason, retrying, "upstream down");
        self.warn_operator(format!("upstream {name} down: {reason}"));
        self.upstreams[upstream.0].status = UpstreamStatus::Down {
            reason: reason.clone(),
            retrying,
        };
        let why = format!("upstream {name} closed before answering: {reason}");
        for pid in self.pending.ids_on_upstream(upstream) {
            self.fail_request(pid, code::UPSTREAM_UNAVAILABLE, &why);
        }
        for key in self.holders.registry.upstream_lost(upstream) {
            self.fleet_forget(key);
        }
        self.fleet.watching.retain(|k| k.upstream != upstream);
        self.reads.cache.clear_upstream(upstream);
        for kind in ListKind::ALL {
            self.catalog.forget(upstream, kind);
        }
        if self.upstreams[upstream.0].was_ready {
            // Its tools, prompts and resources are gone from the merged lists.
            self.broadcast_list_changed(upstream);
        }
        for (_, bound) in self.pending.drop_client_bound(|b| b.upstream == upstream) {
            // The client may still answer; the answer will find nothing and be dropped.
            tracing::debug!(client = %bound.client, "server request orphaned by upstream exit");
        }
        self.answer_deferred_inits();
    }
}
