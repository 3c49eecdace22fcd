//! What the operator's view shows, taken at one moment: the [`Snapshot`] the hub builds
//! on request and `/metrics`, `/status` and `mcpmux status` render, with the latency
//! histogram it carries.
//!
//! Plain data (and the histogram's arithmetic). Never reaches the hub: the hub fills
//! these types, the rest of `observe` reads them.

use std::time::Duration;

use crate::state::cache::CacheCounters;

/// The `state` of an upstream waiting for an OAuth login, in `/status`, `mcpmux
/// status`, the status page and `/metrics`.
pub const NEEDS_LOGIN: &str = "needs login";

/// Upper bounds of the request-latency histogram buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// A latency histogram (cumulative counts are computed when rendered).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket of [`LATENCY_BUCKETS`] (not cumulative), then `+Inf`.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum += s;
        self.count += 1;
    }
}

/// Requests and errors of one method on one upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MethodCount {
    pub requests: u64,
    pub errors: u64,
}

/// One upstream as the operator sees it.
#[derive(Debug, Clone)]
pub struct UpstreamView {
    pub name: String,
    /// `up`, `down`, `starting`, `idle` or `needs login` ([`NEEDS_LOGIN`]).
    pub state: &'static str,
    /// Why it is down.
    pub reason: Option<String>,
    /// `legacy` or `modern` once it was up.
    pub era: Option<&'static str>,
    pub version: Option<String>,
    pub restarts: u64,
    pub methods: Vec<(&'static str, MethodCount)>,
    pub latency: Histogram,
}

/// Everything the operator's view shows, taken at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub started_unix_ms: u64,
    pub upstreams: Vec<UpstreamView>,
    /// Clients by (transport, era).
    pub clients: Vec<((&'static str, &'static str), usize)>,
    /// Clients per view: `None` is the default view (`[listen].path`), else the
    /// profile's name.
    pub profiles: Vec<(Option<String>, usize)>,
    /// URIs mcpmux holds upstream (active subscriptions).
    pub uris_held: usize,
    /// (client, URI) holds.
    pub holders: usize,
    /// The most-held URIs (as clients know them) with their holder counts.
    pub top_uris: Vec<(String, usize)>,
    pub client_subscribes: u64,
    pub upstream_subscribes: u64,
    pub subscribes_saved: u64,
    pub cache: CacheCounters,
    pub cache_entries: usize,
    pub cache_bytes: usize,
    pub queue_high_water: usize,
    pub coalesced: u64,
    pub slow_disconnects: u64,
    pub fanout_deliveries: u64,
    pub warnings: Vec<(u64, String)>,
    /// With `[fleet]`: the fleet as this instance sees it.
    pub fleet: Option<FleetSnapshot>,
}

/// The fleet view (docs/architecture.md, "Fleet").
#[derive(Debug, Clone, Default)]
pub struct FleetSnapshot {
    /// This instance's id (empty until the fleet actor has started).
    pub instance: String,
    /// The live instances' ids, sorted (empty while NATS is away).
    pub instances: Vec<String>,
    /// Each shared key this instance holds, sorted by URI.
    pub keys: Vec<FleetKey>,
}

/// One shared key this instance holds.
#[derive(Debug, Clone)]
pub struct FleetKey {
    /// The URI as clients know it.
    pub uri: String,
    /// `own`, `follow`, `direct` or `pending`.
    pub role: &'static str,
    /// The owner's instance id, when known.
    pub owner: Option<String>,
}

impl Snapshot {
    /// Upstream reads the cache saved: hits and single-flight joins.
    pub fn reads_saved(&self) -> u64 {
        self.cache.hits + self.cache.joined
    }
}
