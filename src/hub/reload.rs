//! A configuration reload as the hub carries it out (docs/architecture.md, "Hot
//! reload"): new settings, upstreams added (their actors already started by the
//! caller), upstreams removed. A removed upstream's requests in flight fail with a
//! clear error, its holders lose their URIs (waiting subscribes are refused) unless the
//! server was only changed (then they keep them, and the new upstream subscribes them
//! and tells them they may have changed when it is ready), it gets
//! one `resources/unsubscribe` per URI it holds, queued before the caller stops its
//! actor. A server whose filters or renames alone changed keeps its session. Profiles
//! are applied anew (the clients of a removed one are closed), and the clients of every
//! view that changed hear `list_changed`; nobody else does. Upstreams not named are
//! untouched.
//!
//! Owns nothing beyond applying a [`ReloadPlan`]; never starts or stops an actor.

use serde_json::json;

use std::sync::Arc;

use super::views::Audience;
use super::{Hub, HubSettings, UpstreamSlot, UpstreamStatus};
use crate::protocol::code;
use crate::state::catalog::{ListKind, UpstreamNaming};
use crate::state::ids::{ClientId, SubKey, UpstreamId, ViewId};
use crate::state::views::ServerView;

/// What changes, in the order the hub applies it: settings, removals, additions.
#[derive(Debug)]
pub struct ReloadPlan {
    pub settings: HubSettings,
    pub removed: Vec<UpstreamId>,
    /// New slots; their ids are the hub's next indexes, in order.
    pub added: Vec<UpstreamSlot>,
    /// Changed servers: (the removed upstream, the index in `added` of its new slot).
    /// Their holders keep their URIs, which the new upstream subscribes when ready.
    pub replaced: Vec<(UpstreamId, usize)>,
    /// Servers whose view keys alone changed (filters, renames): they keep their
    /// session; what they show is replaced.
    pub retuned: Vec<(UpstreamId, Arc<ServerView>)>,
    /// Every upstream of the new configuration, in its order (ids after the reload):
    /// where two servers show one name, the first wins, as at start.
    pub order: Vec<UpstreamId>,
}

impl Hub {
    pub(super) fn on_reload(&mut self, plan: ReloadPlan) {
        let ReloadPlan {
            settings,
            removed,
            added,
            replaced,
            retuned,
            order,
        } = plan;
        let first_added = self.upstreams.len();
        // Who sees what changes: the views of the servers removed or retuned now, and
        // (below) of those added or retuned after, and every view whose profile changed.
        let mut audience: Vec<ViewId> = Vec::new();
        let mut hear = |a: Audience| audience.extend(a.0);
        for u in removed.iter().chain(retuned.iter().map(|(u, _)| u)) {
            hear(self.views_with(*u));
        }
        if settings.cache_entries != self.settings.cache_entries
            || settings.cache_bytes != self.settings.cache_bytes
        {
            tracing::warn!(
                "[cache] sizes apply after a restart; the running cache keeps its bounds"
            );
        }
        self.settings = HubSettings {
            cache_entries: self.settings.cache_entries,
            cache_bytes: self.settings.cache_bytes,
            ..settings
        };
        for (u, view) in retuned {
            let Some(slot) = self.upstreams.get_mut(u.0) else {
                continue;
            };
            tracing::info!(upstream = %slot.name, "what the upstream shows changed by reload");
            slot.view = view.clone();
            self.catalog.set_naming(
                u,
                UpstreamNaming {
                    prefix: slot.prefix.clone(),
                    uri_prefixes: slot.uri_prefixes.clone(),
                    view,
                },
            );
            hear(self.views_with(u));
        }
        for u in removed {
            let to = replaced
                .iter()
                .find(|(from, _)| *from == u)
                .map(|(_, i)| UpstreamId(first_added + i));
            self.remove_upstream(u, to);
        }
        let added_ids: Vec<UpstreamId> = (0..added.len())
            .map(|i| UpstreamId(self.upstreams.len() + i))
            .collect();
        for slot in added {
            let u = UpstreamId(self.upstreams.len());
            tracing::info!(upstream = %slot.name, id = u.0, "upstream added by reload");
            self.catalog.set_naming(
                u,
                UpstreamNaming {
                    prefix: slot.prefix.clone(),
                    uri_prefixes: slot.uri_prefixes.clone(),
                    view: slot.view.clone(),
                },
            );
            self.upstreams.push(slot);
        }
        self.catalog.set_order(&order);
        // Profiles added, changed or removed (their clients are closed), and the views
        // mapped to the new upstream table.
        audience.extend(self.apply_views());
        self.release_hidden_holds();
        for u in added_ids {
            audience.extend(self.views_with(u).0);
        }
        audience.sort_unstable();
        audience.dedup();
        // Their lists join (or leave) the merged ones: the clients that see them hear it
        // now, and again when an added upstream's catalog arrives.
        self.lists_changed_for(&Audience(audience));
    }

    /// Releases what clients hold that the new configuration hides from them (a server
    /// left their profile, or its `resources_deny`/`resources_allow` hide the URI now):
    /// a hidden resource cannot be subscribed, and so it is not held either.
    fn release_hidden_holds(&mut self) {
        let mut hidden: Vec<(ClientId, SubKey)> = Vec::new();
        for (&client, c) in &self.clients {
            for k in self.holders.registry.keys_for(client) {
                if !self.catalog.in_view(c.view, k.upstream)
                    || !self.catalog.shows_uri(k.upstream, &k.uri)
                {
                    hidden.push((client, k.clone()));
                }
            }
        }
        let now = tokio::time::Instant::now().into_std();
        for (client, key) in hidden {
            tracing::info!(client.id = %client, uri = %key.uri, "subscription released: the new configuration hides it from this client");
            let effects = self.holders.registry.unsubscribe(client, &key, now);
            self.apply_sub_effects(effects);
        }
    }

    /// Removes `u`; with `to`, its held URIs move to that upstream (a changed server).
    fn remove_upstream(&mut self, u: UpstreamId, to: Option<UpstreamId>) {
        let Some(name) = self.upstreams.get(u.0).map(|s| s.name.clone()) else {
            return;
        };
        tracing::info!(upstream = %name, "upstream removed by reload");
        let why = format!("upstream {name} was removed from the configuration");
        for pid in self.pending.ids_on_upstream(u) {
            self.fail_request(pid, code::UPSTREAM_UNAVAILABLE, &why);
        }
        for (_, bound) in self.pending.drop_client_bound(|b| b.upstream == u) {
            tracing::debug!(client = %bound.client, "server request of a removed upstream dropped");
        }
        let err = json!({"code": code::UPSTREAM_UNAVAILABLE, "message": why});
        let effects = match to {
            Some(to) => self.holders.registry.move_upstream(u, to, err),
            None => self.holders.registry.remove_upstream(u, err),
        };
        // The unsubscribes are queued to the actor, which delivers them before it stops.
        self.apply_sub_effects(effects);
        self.reads.cache.clear_upstream(u);
        self.reads.upstream_gone(u);
        self.fleet_upstream_removed(u, to);
        for kind in ListKind::ALL {
            self.catalog.forget(u, kind);
        }
        self.catalog.set_naming(u, UpstreamNaming::default());
        let slot = &mut self.upstreams[u.0];
        slot.status = UpstreamStatus::Removed;
        slot.last_caps = serde_json::Value::Null;
        slot.prefix = None;
        slot.uri_prefixes.clear();
        // A changed server is the same series on /metrics (labelled by name): its
        // counts go on from where they were, never back to zero.
        let counts = self.counters.upstreams.remove(&u);
        if let (Some(to), Some(counts)) = (to, counts) {
            self.counters.upstreams.insert(to, counts);
        }
        self.answer_deferred_inits();
    }
}
