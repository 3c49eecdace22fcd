//! Wiring: builds the hub and the upstream actors from a config, and tears them down
//! in order (clients first, so the last unsubscribes reach the upstreams; then the
//! upstream processes, each stopped by closing stdin, waiting, then killing).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ServerConfig};
use crate::hub::reload::ReloadPlan;
use crate::hub::{
    spawn_hub_with_fleet, HubHandle, HubProfile, HubSettings, UpstreamSlot, UpstreamStatus,
};
use crate::state::ids::{UpstreamId, ViewId};
use crate::upstream::{spawn_upstream, UpstreamLink};

/// How long shutdown waits for upstream actors before giving up on them.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// The runtime worker threads `mcpmux serve` starts with unless `--workers` says
/// otherwise: one (docs/architecture.md, "Runtime").
pub const SERVE_WORKERS: std::num::NonZeroUsize = std::num::NonZeroUsize::MIN;

/// The running core: the hub and one actor per upstream.
pub struct Core {
    pub hub: HubHandle,
    /// The upstreams' OAuth clients by name, for the status page's login link.
    pub logins: std::sync::Arc<crate::oauth::Logins>,
    hub_stop: CancellationToken,
    hub_task: tokio::task::JoinHandle<()>,
    upstream_stop: CancellationToken,
    tracker: TaskTracker,
    /// The configuration in force and, per server name, its actor's id and stop token.
    config: Config,
    actors: Vec<(String, UpstreamId, CancellationToken)>,
    next_id: usize,
    /// Each profile's view id, by name: kept across reloads, never reused.
    views: ProfileIds,
}

/// Gives each profile name a view id that stays while mcpmux runs.
#[derive(Debug, Default)]
struct ProfileIds {
    ids: std::collections::BTreeMap<String, ViewId>,
}

impl ProfileIds {
    fn id(&mut self, name: &str) -> ViewId {
        let next = ViewId(self.ids.len() as u32 + 1);
        *self.ids.entry(name.to_owned()).or_insert(next)
    }

    /// The hub's settings for `config`, its profiles with their ids.
    fn settings(&mut self, config: &Config) -> HubSettings {
        let mut settings = HubSettings::from_config(config);
        settings.profiles = config
            .profiles
            .values()
            .map(|p| HubProfile {
                id: self.id(&p.name),
                name: p.name.clone(),
                servers: p.servers.clone(),
                tools: p.tool_filter(),
            })
            .collect();
        settings
    }
}

/// The OAuth token store `[auth]` names; `None` (OAuth off, said once in the log)
/// when it cannot be placed (no config directory and no `store_dir`).
fn oauth_store(config: &Config) -> Option<std::sync::Arc<crate::oauth::TokenStore>> {
    match crate::oauth::TokenStore::new(&config.auth) {
        Ok(s) => Some(std::sync::Arc::new(s)),
        Err(e) => {
            tracing::warn!(error = %e, "OAuth toward upstreams is off");
            None
        }
    }
}

/// Builds the hub's slot for one server and starts its actor. `gated` holds the actor
/// until [`UpstreamHandle::start`] (a `lazy` server, or one added by a reload before
/// the hub knows it).
#[allow(clippy::too_many_arguments)]
fn start_slot(
    id: UpstreamId,
    server: &ServerConfig,
    config: &Config,
    logins: &std::sync::Arc<crate::oauth::Logins>,
    link: &UpstreamLink,
    stop: CancellationToken,
    tracker: &TaskTracker,
    gated: bool,
) -> UpstreamSlot {
    let mut actor_config = server.clone();
    actor_config.lazy = gated;
    UpstreamSlot {
        name: server.name.clone(),
        force_subscribe: server.force_subscribe,
        prefix: server.prefix.clone(),
        uri_prefixes: server.uri_prefixes.clone(),
        unrelated: server.unrelated_messages,
        ttl_ms: server.ttl_ms,
        cache_scope: server.cache_scope,
        declares_roots: server
            .client_capabilities
            .contains(&crate::config::ClientCapability::Roots),
        declared_caps: crate::config::ClientCapability::declared(&server.client_capabilities),
        shared: config.fleet.is_some() && server.url.is_some(),
        view: std::sync::Arc::new(server.view()),
        last_caps: serde_json::Value::Null,
        handle: spawn_upstream(
            id,
            actor_config,
            config.restart.clone(),
            config.limits.max_message_bytes,
            link.clone(),
            stop,
            tracker,
            oauth_store(config).map(|store| crate::oauth::OAuthCtx {
                store,
                interactive: true,
                logins: Some(logins.clone()),
            }),
        ),
        status: if server.lazy {
            UpstreamStatus::Idle
        } else {
            UpstreamStatus::Starting
        },
        was_ready: false,
        catalog_synced: false,
    }
}

impl Core {
    /// Starts the hub and every upstream.
    pub fn start(config: &Config) -> Core {
        Core::start_with(config, None)
    }

    /// [`Core::start`], with the base URL of `serve`'s listener when it is a loopback
    /// one: OAuth logins are redirected to its `/oauth/callback`.
    pub fn start_with(config: &Config, callback_base: Option<String>) -> Core {
        let hub_stop = CancellationToken::new();
        let upstream_stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let mut actors = Vec::new();
        let fleet = config
            .fleet
            .clone()
            .map(|f| (f, upstream_stop.child_token()));
        let mut views = ProfileIds::default();
        let logins = std::sync::Arc::new(crate::oauth::Logins::default());
        if let Some(base) = callback_base {
            logins.callback().set_base(base);
        }
        let (hub, hub_task) = spawn_hub_with_fleet(
            views.settings(config),
            |hub| {
                config
                    .servers
                    .0
                    .iter()
                    .enumerate()
                    .map(|(i, server)| {
                        let stop = upstream_stop.child_token();
                        actors.push((server.name.clone(), UpstreamId(i), stop.clone()));
                        start_slot(
                            UpstreamId(i),
                            server,
                            config,
                            &logins,
                            hub,
                            stop,
                            &tracker,
                            server.lazy,
                        )
                    })
                    .collect()
            },
            fleet,
            hub_stop.clone(),
        );
        Core {
            hub,
            logins,
            hub_stop,
            hub_task,
            upstream_stop,
            tracker,
            next_id: config.servers.0.len(),
            config: config.clone(),
            actors,
            views,
        }
    }

    /// The view id of profile `name` (`None`: no such profile in the config in force).
    pub fn view_of(&self, name: &str) -> Option<ViewId> {
        self.config
            .profiles
            .contains_key(name)
            .then(|| self.views.ids.get(name).copied())
            .flatten()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The HTTP endpoints of the profiles in force, their tokens read from the
    /// environment.
    ///
    /// # Errors
    /// A profile's `auth_token_env` names a variable that is not set.
    pub fn profile_endpoints(
        &self,
    ) -> Result<Vec<(String, crate::downstream::http::ProfileEndpoint)>, crate::config::ConfigError>
    {
        let env = |name: &str| std::env::var(name).ok();
        let mut out = Vec::new();
        for p in self.config.profiles.values() {
            let Some(view) = self.view_of(&p.name) else {
                continue;
            };
            let endpoint = crate::downstream::http::ProfileEndpoint {
                name: p.name.clone(),
                view,
                token: p.auth_token_with(env)?,
            };
            out.push((p.path(), endpoint));
        }
        Ok(out)
    }

    /// Why a valid new configuration cannot be applied to this running one, if it
    /// cannot: a profile taking the path the running listener serves every server on
    /// (`[listen]` changes apply after a restart, so the old `listen.path` keeps routing
    /// to the view of every server, not to the profile's).
    pub fn refuses(&self, new: &Config) -> Option<String> {
        let running = &self.config.listen.path;
        if new.listen.path == *running {
            return None; // checked with the rest of the new config
        }
        new.profiles.values().find(|p| p.path() == *running).map(|p| {
            format!(
                "profiles.{}.path = {running:?} is the running listener's listen.path ([listen] changes apply after a restart): restart mcpmux to move it",
                p.name
            )
        })
    }

    /// Applies a new configuration (docs/architecture.md, "Hot reload"): servers added
    /// are started, removed ones stopped (after their last unsubscribes), changed ones
    /// replaced; `[limits]`, `[subscriptions]` and `[restart]` apply at once; servers
    /// not changed keep their sessions and subscriptions. Returns what changed, one
    /// line each (also logged).
    ///
    /// # Errors
    /// The hub has stopped.
    pub async fn reload(&mut self, new: Config) -> Result<Vec<String>, String> {
        let mut changes = Vec::new();
        if new.listen != self.config.listen {
            changes.push("[listen] changed: it applies after a restart".to_owned());
        }
        if new.cache != self.config.cache {
            changes.push("[cache] changed: it applies after a restart".to_owned());
        }
        for (what, changed) in [
            ("[limits]", new.limits != self.config.limits),
            (
                "[subscriptions]",
                new.subscriptions != self.config.subscriptions,
            ),
            ("[restart]", new.restart != self.config.restart),
        ] {
            if changed {
                changes.push(format!("{what} changed: applied"));
            }
        }
        for (name, p) in &new.profiles {
            match self.config.profiles.get(name) {
                None => changes.push(format!("profile {name} added")),
                Some(o) if o != p => changes.push(format!("profile {name} changed")),
                Some(_) => {}
            }
        }
        for name in self.config.profiles.keys() {
            if !new.profiles.contains_key(name) {
                changes.push(format!("profile {name} removed: its clients are closed"));
            }
        }
        let old = |name: &str| self.config.servers.0.iter().find(|s| s.name == name);
        let mut removed = Vec::new();
        let mut retuned = Vec::new();
        for s in &self.config.servers.0 {
            match new.servers.0.iter().find(|n| n.name == s.name) {
                None => {
                    changes.push(format!("server {} removed", s.name));
                    removed.push(s.name.clone());
                }
                Some(n) if n != s && n.same_session(s) => {
                    changes.push(format!(
                        "server {}: filters or renames changed (its session stays)",
                        s.name
                    ));
                    retuned.push(n.clone());
                }
                Some(n) if n != s => {
                    changes.push(format!("server {} changed: restarted", s.name));
                    removed.push(s.name.clone());
                }
                Some(_) => {}
            }
        }
        let added: Vec<ServerConfig> = new
            .servers
            .0
            .iter()
            .filter(|n| old(&n.name).is_none_or(|o| !o.same_session(n)))
            .cloned()
            .collect();
        for a in &added {
            if old(&a.name).is_none() {
                changes.push(format!("server {} added", a.name));
            }
        }
        let kept = |servers: &[ServerConfig]| -> Vec<String> {
            let both = |s: &&ServerConfig| {
                self.config.servers.0.iter().any(|o| o.name == s.name)
                    && new.servers.0.iter().any(|n| n.name == s.name)
            };
            servers
                .iter()
                .filter(both)
                .map(|s| s.name.clone())
                .collect()
        };
        if kept(&self.config.servers.0) != kept(&new.servers.0) {
            changes.push("servers reordered: the first in order wins a shared name".to_owned());
        }
        if changes.is_empty() {
            return Ok(vec!["no change".to_owned()]);
        }
        let removed_ids: Vec<(UpstreamId, CancellationToken)> = self
            .actors
            .iter()
            .filter(|(name, _, _)| removed.contains(name))
            .map(|(_, id, stop)| (*id, stop.clone()))
            .collect();
        // A changed server: its old upstream's holders move to its new one.
        let replaced: Vec<(UpstreamId, usize)> = self
            .actors
            .iter()
            .filter(|(name, _, _)| removed.contains(name))
            .filter_map(|(name, id, _)| {
                added.iter().position(|a| &a.name == name).map(|i| (*id, i))
            })
            .collect();
        self.actors.retain(|(name, _, _)| !removed.contains(name));
        let mut slots = Vec::new();
        for server in &added {
            let id = UpstreamId(self.next_id);
            self.next_id += 1;
            let stop = self.upstream_stop.child_token();
            self.actors.push((server.name.clone(), id, stop.clone()));
            let slot = start_slot(
                id,
                server,
                &new,
                &self.logins,
                self.hub.upstreams(),
                stop,
                &self.tracker,
                true,
            );
            slots.push(slot);
        }
        let handles: Vec<(bool, crate::upstream::UpstreamHandle)> = slots
            .iter()
            .zip(&added)
            .map(|(slot, server)| (server.lazy, slot.handle.clone()))
            .collect();
        let retuned = self
            .actors
            .iter()
            .filter_map(|(name, id, _)| {
                let server = retuned.iter().find(|s| &s.name == name)?;
                Some((*id, std::sync::Arc::new(server.view())))
            })
            .collect();
        let order = new
            .servers
            .0
            .iter()
            .filter_map(|s| self.actors.iter().find(|(name, _, _)| *name == s.name))
            .map(|(_, id, _)| *id)
            .collect();
        let plan = ReloadPlan {
            settings: self.views.settings(&new),
            removed: removed_ids.iter().map(|(id, _)| *id).collect(),
            added: slots,
            replaced,
            retuned,
            order,
        };
        self.hub
            .reload(plan)
            .await
            .map_err(|_| "mcpmux is shutting down".to_owned())?;
        // The hub knows the new upstreams now: let them start (lazy ones wait for a
        // client as usual), and stop the removed ones, which first deliver the
        // unsubscribes the hub queued.
        for (lazy, handle) in handles {
            if !lazy {
                handle.start();
            }
        }
        for (_, stop) in removed_ids {
            stop.cancel();
        }
        for c in &changes {
            tracing::info!(change = %c, "configuration reloaded");
        }
        self.config = new;
        Ok(changes)
    }

    /// Stops everything: the hub releases every client (queuing the last upstream
    /// unsubscribes), then the upstream actors flush and stop their servers.
    pub async fn stop(self) {
        self.hub_stop.cancel();
        let _ = self.hub_task.await;
        self.upstream_stop.cancel();
        self.tracker.close();
        if tokio::time::timeout(SHUTDOWN_DEADLINE, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("upstreams did not stop within the shutdown deadline");
        }
    }
}
