//! Tracing in the load generator: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the in-process
//! mcpmux exports its spans as `mcpmux serve` would (and the `mcpmux stdio` children
//! inherit the variable); either way a counting layer reports how many `mcpmux::otel`
//! spans this process created, so a run shows that tracing off creates none.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use mcpmux::telemetry::{Telemetry, TARGET};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

static SPANS: AtomicU64 = AtomicU64::new(0);

/// `mcpmux::otel` spans created in this process so far.
pub fn spans() -> u64 {
    SPANS.load(Ordering::Relaxed)
}

struct Count;

impl<S: tracing::Subscriber> Layer<S> for Count {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        if attrs.metadata().target() == TARGET {
            SPANS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installs the counting layer, and the exporter when the variable names a collector.
///
/// # Errors
/// The exporter cannot be built.
pub fn init(runtime: &tokio::runtime::Handle) -> Result<Option<Telemetry>> {
    let started = Telemetry::start(None, runtime.clone())?;
    let (telemetry, layer) = started.unzip();
    tracing_subscriber::registry()
        .with(layer)
        .with(Count)
        .try_init()
        .ok();
    Ok(telemetry)
}
