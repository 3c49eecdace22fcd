//! `GET /metrics`: the hub's [`Snapshot`] in the OpenMetrics text format, encoded by
//! `prometheus-client` through a collector built per scrape (docs/architecture.md,
//! "Operating mcpmux"). Counters are named without `_total`; the encoder appends it.
//!
//! Owns the metric names and help texts. Never keeps state between scrapes and never
//! touches the hub beyond the snapshot it is given.

use std::fmt::Error;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::snapshot::{Snapshot, LATENCY_BUCKETS, NEEDS_LOGIN};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders a snapshot as OpenMetrics text.
pub fn render(snapshot: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(snapshot)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct SnapshotCollector(Snapshot);

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// A label value as the exposition format writes it: backslash, double quote and line
/// feed escaped (the encoder writes values as given, and names come from the config,
/// where `[servers.'a "b"']` is valid TOML).
fn label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

fn counter(e: &mut MetricEncoder<'_>, v: u64) -> Result<(), Error> {
    e.encode_counter::<Labels<'_>, u64, f64>(&v, None::<&Exemplar<Labels<'_>, f64>>)
}

fn one<F>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    t: MetricType,
    f: F,
) -> Result<(), Error>
where
    F: FnOnce(&mut MetricEncoder<'_>) -> Result<(), Error>,
{
    let mut m = enc.encode_descriptor(name, help, None, t)?;
    f(&mut m)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), Error> {
        let s = &self.0;
        let names: Vec<_> = s.upstreams.iter().map(|u| label(&u.name)).collect();
        // Upstreams.
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_up",
            "1 when the upstream's session is ready, else 0.",
            None,
            MetricType::Gauge,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            let labels: Labels<'_> = vec![("upstream", name.as_ref()), ("state", u.state)];
            m.encode_family(&labels)?
                .encode_gauge(&i64::from(u.state == "up"))?;
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_needs_login",
            "1 when the upstream waits for an OAuth login (`mcpmux login NAME`), else 0.",
            None,
            MetricType::Gauge,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            let labels: Labels<'_> = vec![("upstream", name.as_ref())];
            m.encode_family(&labels)?
                .encode_gauge(&i64::from(u.state == NEEDS_LOGIN))?;
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_era",
            "1 for the protocol era the upstream speaks (legacy, modern, or dual: one session per era), once it was up.",
            None,
            MetricType::Gauge,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            if let Some(era) = u.era {
                let labels: Labels<'_> = vec![("upstream", name.as_ref()), ("era", era)];
                m.encode_family(&labels)?.encode_gauge(&1i64)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_restarts",
            "Times the upstream's session was set up again after its first.",
            None,
            MetricType::Counter,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            let labels: Labels<'_> = vec![("upstream", name.as_ref())];
            counter(&mut m.encode_family(&labels)?, u.restarts)?;
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_requests",
            "Requests mcpmux sent to the upstream, by method.",
            None,
            MetricType::Counter,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            for (method, c) in &u.methods {
                let labels: Labels<'_> = vec![("upstream", name.as_ref()), ("method", method)];
                counter(&mut m.encode_family(&labels)?, c.requests)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_errors",
            "Upstream requests answered with an error or timed out, by method.",
            None,
            MetricType::Counter,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            for (method, c) in &u.methods {
                let labels: Labels<'_> = vec![("upstream", name.as_ref()), ("method", method)];
                counter(&mut m.encode_family(&labels)?, c.errors)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_upstream_request_duration_seconds",
            "Time from sending a request upstream to its answer.",
            None,
            MetricType::Histogram,
        )?;
        for (u, name) in s.upstreams.iter().zip(&names) {
            let labels: Labels<'_> = vec![("upstream", name.as_ref())];
            // The encoder takes per-bucket counts and sums them itself, and writes
            // `le="+Inf"` only for an upper bound of `f64::MAX` (an `f64::INFINITY`
            // bound comes out as `le="inf"`, which OpenMetrics parsers reject).
            let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                .iter()
                .copied()
                .zip(u.latency.buckets.iter().copied())
                .collect();
            buckets.push((f64::MAX, u.latency.buckets[LATENCY_BUCKETS.len()]));
            m.encode_family(&labels)?.encode_histogram::<Labels<'_>>(
                u.latency.sum,
                u.latency.count,
                &buckets,
                None,
            )?;
        }
        // Subscriptions.
        let plain: [(&str, &str, MetricType, u64); 15] = [
            (
                "mcpmux_subscriptions_uris",
                "URIs mcpmux holds an upstream subscription to.",
                MetricType::Gauge,
                s.uris_held as u64,
            ),
            (
                "mcpmux_subscriptions_holders",
                "(client, URI) holds: legacy subscriptions and listen URIs.",
                MetricType::Gauge,
                s.holders as u64,
            ),
            (
                "mcpmux_client_subscribes",
                "Subscriptions clients took (legacy subscribes and listen URIs).",
                MetricType::Counter,
                s.client_subscribes,
            ),
            (
                "mcpmux_upstream_subscribes",
                "Subscriptions mcpmux took upstream (resources/subscribe, or a URI added to a listen).",
                MetricType::Counter,
                s.upstream_subscribes,
            ),
            (
                "mcpmux_upstream_subscribes_saved",
                "Client subscriptions that needed no upstream subscription (the URI was held already).",
                MetricType::Counter,
                s.subscribes_saved,
            ),
            (
                "mcpmux_cache_hits",
                "resources/read answered from the cache.",
                MetricType::Counter,
                s.cache.hits,
            ),
            (
                "mcpmux_cache_misses",
                "resources/read that went upstream through the cache.",
                MetricType::Counter,
                s.cache.fetches,
            ),
            (
                "mcpmux_cache_joined",
                "resources/read that joined a read of the same URI in flight.",
                MetricType::Counter,
                s.cache.joined,
            ),
            (
                "mcpmux_cache_fills",
                "Read results stored in the cache.",
                MetricType::Counter,
                s.cache.stored,
            ),
            (
                "mcpmux_cache_evictions",
                "Cache entries evicted by the size bounds.",
                MetricType::Counter,
                s.cache.evictions,
            ),
            (
                "mcpmux_cache_bytes",
                "Bytes of results in the cache.",
                MetricType::Gauge,
                s.cache_bytes as u64,
            ),
            (
                "mcpmux_upstream_reads_saved",
                "Client reads answered without an upstream read of their own (hits and joins).",
                MetricType::Counter,
                s.reads_saved(),
            ),
            (
                "mcpmux_client_queue_high_water",
                "Longest client outbox seen since start.",
                MetricType::Gauge,
                s.queue_high_water as u64,
            ),
            (
                "mcpmux_coalesced_updates",
                "Notifications merged into a pending one for the same key (slow clients).",
                MetricType::Counter,
                s.coalesced,
            ),
            (
                "mcpmux_slow_client_disconnects",
                "Clients disconnected because they did not keep up.",
                MetricType::Counter,
                s.slow_disconnects,
            ),
        ];
        for (name, help, t, v) in plain {
            one(&mut enc, name, help, t, |m| match t {
                MetricType::Counter => counter(m, v),
                _ => m.encode_gauge(&v),
            })?;
        }
        one(
            &mut enc,
            "mcpmux_fanout_deliveries",
            "Notifications pushed to clients by a fan-out (one per client reached).",
            MetricType::Counter,
            |m| counter(m, s.fanout_deliveries),
        )?;
        if let Some(fleet) = &s.fleet {
            let keys = &fleet.keys;
            one(
                &mut enc,
                "mcpmux_fleet_instances",
                "Live instances of the fleet, this one included, as their presence entries say (0 while NATS is away).",
                MetricType::Gauge,
                |m| m.encode_gauge(&(fleet.instances.len() as u64)),
            )?;
            let mut m = enc.encode_descriptor(
                "mcpmux_fleet_keys",
                "Shared keys this instance holds, by its role (own: it holds the upstream subscription; follow: another instance does; direct: NATS is away).",
                None,
                MetricType::Gauge,
            )?;
            for role in ["own", "follow", "direct", "pending"] {
                let n = keys.iter().filter(|k| k.role == role).count() as u64;
                let labels: Labels<'_> = vec![("role", role)];
                m.encode_family(&labels)?.encode_gauge(&n)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "mcpmux_clients",
            "Connected clients, by transport and protocol era.",
            None,
            MetricType::Gauge,
        )?;
        for ((transport, era), n) in &s.clients {
            let labels: Labels<'_> = vec![("transport", transport), ("era", era)];
            m.encode_family(&labels)?.encode_gauge(&(*n as u64))?;
        }
        if s.profiles.len() > 1 {
            let mut m = enc.encode_descriptor(
                "mcpmux_profile_clients",
                "Connected clients per profile (profile=\"\" is the default endpoint, every server).",
                None,
                MetricType::Gauge,
            )?;
            for (name, n) in &s.profiles {
                let name = label(name.as_deref().unwrap_or(""));
                let labels: Labels<'_> = vec![("profile", name.as_ref())];
                m.encode_family(&labels)?.encode_gauge(&(*n as u64))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::snapshot::{Histogram, MethodCount, UpstreamView};

    #[test]
    fn renders_counters_with_total_and_histograms_with_cumulative_buckets() {
        let mut latency = Histogram::default();
        latency.observe(std::time::Duration::from_millis(3));
        latency.observe(std::time::Duration::from_millis(300));
        let snap = Snapshot {
            upstreams: vec![UpstreamView {
                name: "a".into(),
                state: "up",
                reason: None,
                era: Some("legacy"),
                version: Some("2025-11-25".into()),
                restarts: 2,
                methods: vec![(
                    "tools/call",
                    MethodCount {
                        requests: 5,
                        errors: 1,
                    },
                )],
                latency,
            }],
            client_subscribes: 10,
            upstream_subscribes: 1,
            subscribes_saved: 9,
            ..Snapshot::default()
        };
        let text = render(snap);
        assert!(
            text.contains("mcpmux_upstream_up{upstream=\"a\",state=\"up\"} 1"),
            "{text}"
        );
        assert!(text.contains("mcpmux_upstream_restarts_total{upstream=\"a\"} 2"));
        assert!(
            text.contains("mcpmux_upstream_requests_total{upstream=\"a\",method=\"tools/call\"} 5")
        );
        assert!(text.contains("mcpmux_upstream_subscribes_saved_total 9"));
        assert!(
            text.contains(
                "mcpmux_upstream_request_duration_seconds_bucket{le=\"0.005\",upstream=\"a\"} 1"
            ) || text.contains(
                "mcpmux_upstream_request_duration_seconds_bucket{upstream=\"a\",le=\"0.005\"} 1"
            ),
            "{text}"
        );
        // Cumulative once (not summed twice), ending at `+Inf` with the count.
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("mcpmux_upstream_request_duration_seconds_bucket")
                        && l.contains(&format!("le=\"{le}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or_else(|| panic!("no bucket le={le}: {text}"))
                .to_owned()
        };
        assert_eq!(bucket("0.005"), "1", "{text}");
        assert_eq!(bucket("0.01"), "1", "{text}");
        assert_eq!(bucket("+Inf"), "2", "{text}");
        assert!(!text.contains("le=\"inf\""), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
