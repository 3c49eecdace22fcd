//! The operator's view from inside the hub (docs/architecture.md, "Operating mcpmux"):
//! plain counters the hub bumps as it works (it is single-threaded: no atomics on the
//! hot path), and the [`Snapshot`] (a type of `crate::observe`) it answers
//! `Control::Snapshot` with, which `/metrics`, `/status` and `mcpmux status` render.
//!
//! Owns the counters and the recent-warnings ring. Never formats for a wire (that is
//! `crate::observe`'s) and never blocks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Hub, UpstreamStatus};
use crate::state::ids::UpstreamId;
use crate::upstream::Era;

pub use crate::observe::snapshot::{
    FleetKey, FleetSnapshot, Histogram, MethodCount, Snapshot, UpstreamView, LATENCY_BUCKETS,
};

/// Warnings kept for `/status`.
const RECENT_WARNINGS: usize = 20;

/// The methods counted by name; anything else is `other` (clients choose method
/// names, so they must not choose label values).
const KNOWN_METHODS: [&str; 16] = [
    "tools/call",
    "tools/list",
    "prompts/get",
    "prompts/list",
    "resources/read",
    "resources/list",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "ping",
    "subscriptions/listen",
    "server/discover",
    "sampling/createMessage",
    "elicitation/create",
];

/// What the hub counts per upstream.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpstreamCounters {
    pub restarts: u64,
    pub methods: BTreeMap<&'static str, MethodCount>,
    pub latency: Histogram,
}

/// What the hub counts overall.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// When the hub started (ms since the Unix epoch).
    pub started_unix_ms: u64,
    /// Upstream requests sent, by method label ([`method_label`]: a bounded set).
    pub sent: HashMap<&'static str, u64>,
    /// The deepest any gone client's queue was (live clients report their own).
    pub peak_queue: usize,
    /// Coalesced notifications of clients already gone (`HubStats::coalesced`).
    pub coalesced_gone: u64,
    pub upstreams: HashMap<UpstreamId, UpstreamCounters>,
    /// Client subscriptions taken (legacy subscribes and listen URIs), and of those the
    /// ones that needed no upstream subscription (the URI was held already).
    pub client_subscribes: u64,
    pub subscribes_saved: u64,
    /// `resources/subscribe` (or listen changes, for a modern upstream) mcpmux sent.
    pub upstream_subscribes: u64,
    /// Notifications pushed to clients by a fan-out (one per client reached).
    pub fanout_deliveries: u64,
    /// Clients disconnected because they did not keep up.
    pub slow_disconnects: u64,
    pub warnings: VecDeque<(u64, String)>,
}

/// The method name as a label value.
pub(crate) fn method_label(method: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Hub {
    /// Remembers a warning for `/status` (the log has it too).
    pub(super) fn warn_operator(&mut self, text: String) {
        let w = &mut self.counters.warnings;
        if w.len() == RECENT_WARNINGS {
            w.pop_front();
        }
        w.push_back((unix_ms(SystemTime::now()), text));
    }

    /// Counts a request sent upstream.
    pub(super) fn count_request(&mut self, upstream: UpstreamId, method: &str) {
        let c = self.counters.upstreams.entry(upstream).or_default();
        c.methods.entry(method_label(method)).or_default().requests += 1;
    }

    /// Counts an upstream answer (or timeout) of `method` after `took`.
    pub(super) fn count_answer(
        &mut self,
        upstream: UpstreamId,
        method: &str,
        took: Duration,
        error: bool,
    ) {
        let c = self.counters.upstreams.entry(upstream).or_default();
        c.latency.observe(took);
        if error {
            c.methods.entry(method_label(method)).or_default().errors += 1;
        }
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let stats = self.stats();
        let upstreams = self
            .upstreams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let c = self
                    .counters
                    .upstreams
                    .get(&UpstreamId(i))
                    .cloned()
                    .unwrap_or_default();
                let (state, reason, era, version) = match &s.status {
                    UpstreamStatus::Ready(info) => (
                        "up",
                        None,
                        Some(match info.era {
                            _ if info.dual.is_some() => "dual",
                            Era::Modern => "modern",
                            Era::Legacy => "legacy",
                        }),
                        Some(info.protocol_version.clone()),
                    ),
                    UpstreamStatus::Down { reason, .. } => {
                        ("down", Some(reason.clone()), None, None)
                    }
                    UpstreamStatus::NeedsLogin { reason } => (
                        crate::observe::snapshot::NEEDS_LOGIN,
                        Some(reason.clone()),
                        None,
                        None,
                    ),
                    UpstreamStatus::Starting => ("starting", None, None, None),
                    UpstreamStatus::Idle => ("idle", None, None, None),
                    UpstreamStatus::Removed => ("removed", None, None, None),
                };
                Some(UpstreamView {
                    name: s.name.clone(),
                    state,
                    reason,
                    era,
                    version,
                    restarts: c.restarts,
                    methods: c.methods.into_iter().collect(),
                    latency: c.latency,
                })
                .filter(|v| v.state != "removed")
            })
            .collect();
        let mut clients: BTreeMap<(&'static str, &'static str), usize> = BTreeMap::new();
        for c in self.clients.values() {
            let era = if c.init.as_ref().is_some_and(|i| i.stateless.is_some()) {
                "modern"
            } else {
                "legacy"
            };
            *clients.entry((c.outbox.transport(), era)).or_default() += 1;
        }
        let registry = &self.holders.registry;
        let mut top: Vec<(String, usize)> = registry
            .keys()
            .map(|k| {
                (
                    self.catalog.expose_uri(k.upstream, &k.uri).into_owned(),
                    registry.holders(k).count(),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(20);
        Snapshot {
            started_unix_ms: self.counters.started_unix_ms,
            upstreams,
            clients: clients.into_iter().collect(),
            profiles: self.clients_per_view(),
            uris_held: registry.keys().filter(|k| registry.is_active(k)).count(),
            holders: stats.client_subscriptions,
            top_uris: top,
            client_subscribes: self.counters.client_subscribes,
            upstream_subscribes: self.counters.upstream_subscribes,
            subscribes_saved: self.counters.subscribes_saved,
            cache: stats.cache,
            cache_entries: stats.cache_entries,
            cache_bytes: self.reads.cache.bytes(),
            queue_high_water: stats.peak_queue,
            coalesced: stats.coalesced,
            slow_disconnects: self.counters.slow_disconnects,
            fanout_deliveries: self.counters.fanout_deliveries,
            warnings: self.counters.warnings.iter().cloned().collect(),
            fleet: self.fleet.actor.as_ref().map(|_| {
                let view = &self.fleet.view;
                let mut keys: Vec<FleetKey> = self
                    .fleet
                    .roles
                    .iter()
                    .map(|(k, role)| {
                        let (role, owner) = match role {
                            super::fleet::FleetRole::Own => ("own", Some(view.instance.clone())),
                            super::fleet::FleetRole::Follow => {
                                ("follow", view.owners.get(k).cloned())
                            }
                            super::fleet::FleetRole::Direct => ("direct", None),
                            super::fleet::FleetRole::Pending => ("pending", None),
                        };
                        FleetKey {
                            uri: self.catalog.expose_uri(k.upstream, &k.uri).into_owned(),
                            role,
                            owner,
                        }
                    })
                    .collect();
                keys.sort_by(|a, b| a.uri.cmp(&b.uri));
                FleetSnapshot {
                    instance: view.instance.clone(),
                    instances: view.instances.clone(),
                    keys,
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_puts_each_observation_in_its_first_fitting_bucket() {
        let mut h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(100));
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[3], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(h.buckets[LATENCY_BUCKETS.len()], 1, "+Inf");
        assert_eq!(h.count, 3);
    }

    #[test]
    fn unknown_methods_are_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/anything-a-client-invents"), "other");
    }
}
