//! The hub's side of the fleet (docs/architecture.md, "Fleet"). For an upstream shared
//! by the fleet (a Streamable HTTP upstream with `[fleet]` configured) the registry's
//! "subscribe upstream" and "unsubscribe upstream" go to the fleet actor instead, which
//! answers with this instance's role for the key: own (hold the upstream subscription
//! and publish its updates), follow (updates and reads come through the owner), or
//! direct (NATS is away: hold it like a single instance). Everything else about a key
//! is unchanged: holders, gating, coalescing, the cache and its generations.
//!
//! Owns the role per key and the last fleet view (instances, owners) for the operator.
//! Never talks to NATS, never blocks.

use serde_json::json;

use super::Hub;
use crate::fleet::{FleetCmd, FleetEvent};
use crate::protocol::{methods, Message, RawId};
use crate::state::ids::{SubKey, UpstreamId};
use crate::state::pending::Origin;
use crate::upstream::Related;

/// This instance's role for a shared key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FleetRole {
    /// Asked the fleet actor; no answer yet.
    Pending,
    Own,
    Follow,
    Direct,
}

/// What the fleet actor last said of the fleet (`FleetEvent::View`), for the
/// operator's view.
#[derive(Debug, Default)]
pub(crate) struct FleetView {
    pub instance: String,
    pub instances: Vec<String>,
    pub owners: std::collections::HashMap<SubKey, String>,
}

/// The hub's part of the fleet: the actor's handle (when `[fleet]` is configured), this
/// instance's role per shared key, and the last view for the operator.
#[derive(Debug, Default)]
pub(super) struct FleetPart {
    pub(super) actor: Option<crate::fleet::FleetHandle>,
    pub(super) roles: std::collections::HashMap<SubKey, FleetRole>,
    /// Owned keys the current upstream session confirmed. For a key owned for other
    /// instances alone (no local holder, so not in the registry) this is what lets the
    /// followers' reads be kept, as the registry's confirmation does for held keys.
    pub(super) watching: std::collections::HashSet<SubKey>,
    pub(super) view: FleetView,
}

impl Hub {
    /// Whether `key`'s upstream subscription is the fleet's business.
    pub(super) fn fleet_shared(&self, key: &SubKey) -> bool {
        self.fleet.actor.is_some() && self.upstreams.get(key.upstream.0).is_some_and(|s| s.shared)
    }

    /// The registry wants the upstream subscription (0→1 holders here).
    /// A role already known (an owned key wanted again after its last local holder
    /// left) stays until the actor answers: an owner keeps publishing meanwhile.
    pub(super) fn fleet_want(&mut self, key: SubKey) {
        self.fleet
            .roles
            .entry(key.clone())
            .or_insert(FleetRole::Pending);
        let upstream_name = self.upstreams[key.upstream.0].name.clone();
        if let Some(f) = &self.fleet.actor {
            f.send(FleetCmd::Want { key, upstream_name });
        }
    }

    /// The registry no longer needs the upstream subscription (1→0 here). The fleet
    /// actor decides when it goes (`FleetEvent::Unsubscribe`): an owner keeps it while
    /// other instances are interested.
    pub(super) fn fleet_release(&mut self, key: SubKey) {
        if self.fleet.roles.get(&key) == Some(&FleetRole::Follow) {
            self.fleet.roles.remove(&key);
        }
        if let Some(f) = &self.fleet.actor {
            f.send(FleetCmd::Release { key });
        }
    }

    /// After `upstream`'s session restarted: the keys this instance owns for other
    /// instances only (no local holder, so no registry entry) are subscribed again.
    pub(super) fn fleet_resubscribe_owned(&mut self, upstream: UpstreamId) {
        for key in self.owned_for_others(upstream) {
            self.send_sub_request(key, true);
        }
    }

    /// The keys of `upstream` this instance owns for other instances alone: no local
    /// holder, so the registry does not know them.
    fn owned_for_others(&self, upstream: UpstreamId) -> Vec<SubKey> {
        self.fleet
            .roles
            .iter()
            .filter(|(k, role)| {
                k.upstream == upstream
                    && **role == FleetRole::Own
                    && !self.holders.registry.is_known_at(*k)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A reload removed upstream `u` (replaced by `to` when only changed), after its
    /// held keys were released or moved. Keys this instance owns for other instances
    /// alone (no local holder, so the registry released nothing for them) move to `to`
    /// with their lease, subscribed again when `to` is ready; with no `to`, their
    /// leases are given up, so a follower takes over. The rest of `u`'s roles go.
    pub(super) fn fleet_upstream_removed(&mut self, u: UpstreamId, to: Option<UpstreamId>) {
        self.fleet.watching.retain(|k| k.upstream != u);
        let owned_for_others = self.owned_for_others(u);
        self.fleet.roles.retain(|k, _| k.upstream != u);
        let Some(f) = &self.fleet.actor else {
            return;
        };
        for key in owned_for_others {
            match to {
                Some(to) => {
                    let moved = SubKey::new(to, &key.uri);
                    self.fleet.roles.insert(moved.clone(), FleetRole::Own);
                    f.send(FleetCmd::Move {
                        from: key,
                        to: moved,
                    });
                }
                None => f.send(FleetCmd::Forfeit { key }),
            }
        }
    }

    /// Whether this instance holds the key's upstream subscription (as its owner, or
    /// directly while the fleet is away).
    pub(super) fn fleet_subscribes_itself(&self, key: &SubKey) -> bool {
        matches!(
            self.fleet_role(key),
            Some(FleetRole::Own | FleetRole::Direct)
        )
    }

    /// The registry dropped `key` with nothing to send upstream (its upstream session
    /// was not known to hold it): the fleet actor lets it go too, or its interest (or
    /// lease) in the key would be renewed for ever.
    pub(super) fn fleet_forget(&mut self, key: SubKey) {
        if self.fleet_role(&key).is_some() {
            self.fleet_release(key);
        }
    }

    /// The role of a key (`None`: not shared, or not held).
    pub(super) fn fleet_role(&self, key: &SubKey) -> Option<FleetRole> {
        self.fleet.roles.get(key).copied()
    }

    /// An update from this instance's own upstream for a key it owns, or for a URI
    /// below one it owns (the holders of a parent hear of its sub-resources): the
    /// followers of each such key hear it through NATS, and treat it as their own
    /// upstream's.
    pub(super) fn fleet_publish(&self, key: &SubKey, update: &Message) {
        let Some(f) = &self.fleet.actor else {
            return;
        };
        if self.fleet.roles.is_empty() {
            return;
        }
        let owns = |k: &SubKey| self.fleet_role(k) == Some(FleetRole::Own);
        let own = owns(key).then(|| key.clone());
        // (A key per parent URI, on a fleet instance that owns keys only.)
        let parents = crate::state::ids::parent_uris(&key.uri)
            .map(|p| SubKey::new(key.upstream, p))
            .filter(|k| owns(k));
        let mut bytes = None;
        for owned in own.into_iter().chain(parents) {
            let update = bytes.get_or_insert_with(|| update.to_bytes()).clone();
            f.send(FleetCmd::Publish { key: owned, update });
        }
    }

    /// Whether a change of `key` will be heard of, so that its reads may be kept: the
    /// registry's confirmed keys, and the keys owned for other instances alone.
    pub(super) fn watched(&self, key: &SubKey) -> bool {
        self.holders.registry.is_active(key)
            || (!self.fleet.watching.is_empty() && self.fleet.watching.contains(key))
    }

    /// The upstream confirmed the subscription of `key`: when this instance owns it,
    /// its followers drop the reads they kept of it, as this instance does (a read
    /// made before cannot be told of a change made before).
    pub(super) fn fleet_watched(&mut self, key: &SubKey) {
        let Some(f) = &self.fleet.actor else {
            return;
        };
        if self.fleet_role(key) == Some(FleetRole::Own) {
            self.fleet.watching.insert(key.clone());
            let n = Message::notification(
                crate::fleet::keys::WATCHED,
                Some(&json!({ "uri": &*key.uri })),
            );
            f.send(FleetCmd::Publish {
                key: key.clone(),
                update: n.to_bytes(),
            });
        }
    }

    /// A follower's cache miss: the owner reads (once for the whole fleet).
    pub(super) fn fleet_read(&self, key: SubKey, exposed_uri: String, generation: u64) {
        if let Some(f) = &self.fleet.actor {
            f.send(FleetCmd::Read {
                key,
                exposed_uri,
                generation,
            });
        }
    }

    pub(super) fn on_fleet_event(&mut self, ev: FleetEvent) {
        // A subscription that is to be sent, or no longer this instance's: not watched
        // (until confirmed again).
        let unwatched = match &ev {
            FleetEvent::Own {
                key,
                subscribe: true,
            }
            | FleetEvent::Follow { key, .. }
            | FleetEvent::Direct { key, .. }
            | FleetEvent::Unsubscribe { key } => Some(key),
            _ => None,
        };
        if let Some(key) = unwatched {
            if self.fleet.watching.remove(key) && !self.holders.registry.is_active(key) {
                self.reads.cache.invalidate(key);
            }
        }
        match ev {
            FleetEvent::Own { key, subscribe } => {
                let takeover = self.holders.registry.is_active(&key);
                self.fleet.roles.insert(key.clone(), FleetRole::Own);
                self.settle_fleet_key(&key, subscribe, takeover);
            }
            FleetEvent::Follow { key, drop_upstream } => {
                self.fleet.roles.insert(key.clone(), FleetRole::Follow);
                if drop_upstream {
                    self.send_sub_request(key.clone(), false);
                }
                self.settle_fleet_key(&key, false, false);
            }
            FleetEvent::Direct { key, subscribe } => {
                let fallback = self.holders.registry.is_active(&key);
                self.fleet.roles.insert(key.clone(), FleetRole::Direct);
                self.settle_fleet_key(&key, subscribe, fallback && subscribe);
            }
            FleetEvent::Unsubscribe { key } => {
                self.fleet.roles.remove(&key);
                if self.holders.registry.is_active(&key) {
                    // Holders came back while the release was on its way: keep it.
                    self.fleet_want(key);
                } else {
                    self.send_sub_request(key, false);
                }
            }
            FleetEvent::Update { key, update } => match Message::parse(&update) {
                Ok(msg) if msg.method() == Some(methods::RESOURCES_UPDATED) => {
                    self.on_fleet_update(key, msg);
                }
                Ok(msg) if msg.method() == Some(crate::fleet::keys::WATCHED) => {
                    // As in `subscribe_settled`, for the owner's subscription.
                    self.reads.cache.invalidate(&key);
                }
                _ => tracing::debug!("fleet: an unreadable update dropped"),
            },
            FleetEvent::ReadDone {
                key,
                generation,
                outcome,
            } => match outcome {
                Ok(result) => self.finish_read(&key, generation, Ok(&result)),
                Err(e) if e.contains("\"fleet\"") => {
                    // The fleet could not read: this instance reads itself.
                    tracing::debug!(uri = %key.uri, error = %e, "fleet: read through the owner failed; reading directly");
                    let origin = Origin::Read {
                        key: key.clone(),
                        generation,
                    };
                    let pid = self
                        .pending
                        .register(key.upstream, origin)
                        .expect("internal ids are unique");
                    let msg = Message::request(
                        &RawId::from_u64(pid.0),
                        methods::RESOURCES_READ,
                        Some(&json!({"uri": &*key.uri})),
                    );
                    self.dispatch_upstream(key.upstream, pid, &msg);
                }
                Err(e) => self.finish_read(&key, generation, Err(&e)),
            },
            FleetEvent::StateKey(key) => self.mrtr.set_fleet_key(key),
            FleetEvent::RetryDone { client, id, answer } => self.retry_done(client, id, answer),
            FleetEvent::View {
                instance,
                instances,
                owners,
            } => {
                self.mrtr.instance.clone_from(&instance);
                self.fleet.view = FleetView {
                    instance,
                    instances,
                    owners: owners.into_iter().collect(),
                };
            }
        }
    }

    /// Brings the registry and the upstream in line with a role just decided:
    /// `subscribe` sends the upstream subscription (whose answer settles a pending
    /// key); otherwise a pending key is settled now. `changed`: holders may have missed
    /// updates meanwhile (a takeover, a fallback): tell them, as after a restart.
    fn settle_fleet_key(&mut self, key: &SubKey, subscribe: bool, changed: bool) {
        if subscribe {
            self.send_sub_request(key.clone(), true);
        } else if !self.holders.registry.is_active(key) {
            // Watched from now on (through the owner): as in `subscribe_settled`.
            self.reads.cache.invalidate(key);
            let effects = self.holders.registry.upstream_result(
                key,
                Ok(()),
                tokio::time::Instant::now().into_std(),
            );
            self.apply_sub_effects(effects);
        }
        if changed {
            // As an update from the upstream: cached reads dropped, holders told, and,
            // when this instance owns the key now (a takeover), every follower too
            // (their holders missed what happened in the gap as much as these did).
            let n = Message::notification(
                methods::RESOURCES_UPDATED,
                Some(&json!({ "uri": &*key.uri })),
            );
            self.on_upstream_updated(key.upstream, n);
        }
    }

    /// An update the owner published: as if this instance's upstream had sent it.
    fn on_fleet_update(&mut self, key: SubKey, msg: Message) {
        self.on_upstream_event(
            key.upstream,
            crate::upstream::UpstreamEvent::Message(msg, Related::Nothing),
        );
    }
}
