//! Wiring: builds the hub and the upstream actors from a config, and tears them down
//! in order (clients first, so the last unsubscribes reach the upstreams; then the
//! upstream processes, each stopped by closing stdin, waiting, then killing).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::hub::{spawn_hub, HubHandle, HubSettings, UpstreamSlot, UpstreamStatus};
use crate::state::ids::UpstreamId;
use crate::upstream::spawn_upstream;

/// How long shutdown waits for upstream actors before giving up on them.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// The running core: the hub and one actor per upstream.
pub struct Core {
    pub hub: HubHandle,
    hub_stop: CancellationToken,
    hub_task: tokio::task::JoinHandle<()>,
    upstream_stop: CancellationToken,
    tracker: TaskTracker,
}

impl Core {
    /// Starts the hub and every upstream.
    pub fn start(config: &Config) -> Core {
        let hub_stop = CancellationToken::new();
        let upstream_stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let max_line = config.limits.max_message_bytes;
        let (hub, hub_task) = spawn_hub(
            HubSettings::from_config(config),
            |hub| {
                config
                    .servers
                    .0
                    .iter()
                    .enumerate()
                    .map(|(i, server)| UpstreamSlot {
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
                        declared_caps: crate::config::ClientCapability::declared(
                            &server.client_capabilities,
                        ),
                        last_caps: serde_json::Value::Null,
                        handle: spawn_upstream(
                            UpstreamId(i),
                            server.clone(),
                            config.restart.clone(),
                            max_line,
                            hub.clone(),
                            upstream_stop.clone(),
                            &tracker,
                        ),
                        status: if server.lazy {
                            UpstreamStatus::Idle
                        } else {
                            UpstreamStatus::Starting
                        },
                        was_ready: false,
                        catalog_synced: false,
                    })
                    .collect()
            },
            hub_stop.clone(),
        );
        Core {
            hub,
            hub_stop,
            hub_task,
            upstream_stop,
            tracker,
        }
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
