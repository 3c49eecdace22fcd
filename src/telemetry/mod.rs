//! OpenTelemetry over OTLP/HTTP (docs/architecture.md, "Traces"): the exporter, the
//! `tracing` layer that turns mcpmux's `mcpmux::otel` spans into OpenTelemetry spans,
//! the two operation-duration histograms of the MCP semantic conventions, and W3C trace
//! context in `params._meta` (`traceparent`, `tracestate`).
//!
//! Owns: whether tracing is on ([`enabled`], read once by the hub), the providers and
//! their shutdown (a final flush).
//! Never: builds anything per request when tracing is off, or exports anything but spans
//! and the two histograms (logs stay on stderr).

mod export;
pub mod meta;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::metrics::Histogram;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::config::TelemetryConfig;

/// The `tracing` target of every span mcpmux exports; nothing else reaches the exporter.
pub const TARGET: &str = "mcpmux::otel";

static ENABLED: AtomicBool = AtomicBool::new(false);
static DURATIONS: OnceLock<Durations> = OnceLock::new();

/// Whether spans are exported: set once at startup, before the hub starts.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// `mcp.server.operation.duration` and `mcp.client.operation.duration`, in seconds.
struct Durations {
    server: Histogram<f64>,
    client: Histogram<f64>,
}

/// Records one operation's duration: `server` for a client's request to mcpmux, else
/// mcpmux's request to an upstream. No-op when tracing is off.
pub fn record_duration(server: bool, took: Duration, attributes: &[KeyValue]) {
    if let Some(d) = DURATIONS.get() {
        let h = if server { &d.server } else { &d.client };
        h.record(took.as_secs_f64(), attributes);
    }
}

/// The running exporters; [`Telemetry::shutdown`] flushes them.
pub struct Telemetry {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
}

/// Where spans go: `[telemetry] otlp_endpoint`, else `$OTEL_EXPORTER_OTLP_ENDPOINT` (a
/// base URL: `/v1/traces` and `/v1/metrics` are added), else nowhere (off).
pub fn endpoint(config: Option<&TelemetryConfig>) -> Option<String> {
    config
        .and_then(|c| c.otlp_endpoint.clone())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .filter(|e| !e.is_empty())
        .map(|e| e.trim_end_matches('/').to_owned())
}

impl Telemetry {
    /// Starts the exporters when an endpoint is configured; returns them with the layer
    /// to install. Exports run on `runtime` (a request is spawned there and awaited from
    /// the SDK's export thread).
    ///
    /// # Errors
    /// An exporter that cannot be built (a bad endpoint URL).
    pub fn start(
        config: Option<&TelemetryConfig>,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Option<(Telemetry, OtelLayer)>> {
        let Some(base) = endpoint(config) else {
            return Ok(None);
        };
        let client = export::ExportClient::new(runtime)?;
        let traces_url = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .unwrap_or_else(|_| format!("{base}/v1/traces"));
        let metrics_url = std::env::var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .unwrap_or_else(|_| format!("{base}/v1/metrics"));
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(traces_url)
            .build()?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(metrics_url)
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            let name = config
                .and_then(|c| c.service_name.clone())
                .unwrap_or_else(|| "mcpmux".to_owned());
            resource = resource.with_service_name(name);
        }
        let resource = resource.build();
        let mut traces = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_resource(resource.clone());
        // As for the service name, the variables win: `$OTEL_TRACES_SAMPLER(_ARG)`, read
        // by the SDK, when set; else the config's ratio.
        let ratio = config
            .and_then(|c| c.sample_ratio)
            .filter(|_| std::env::var_os("OTEL_TRACES_SAMPLER").is_none());
        if let Some(ratio) = ratio {
            traces = traces.with_sampler(Sampler::ParentBased(Box::new(
                Sampler::TraceIdRatioBased(ratio),
            )));
        }
        let traces = traces.build();
        let metrics = SdkMeterProvider::builder()
            .with_periodic_exporter(metrics)
            .with_resource(resource)
            .build();
        let meter = opentelemetry::metrics::MeterProvider::meter(&metrics, "mcpmux");
        let bounds = vec![
            0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0,
        ];
        let _ = DURATIONS.set(Durations {
            server: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("Duration of the MCP requests mcpmux served.")
                .with_boundaries(bounds.clone())
                .build(),
            client: meter
                .f64_histogram("mcp.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of the MCP requests mcpmux sent upstream.")
                .with_boundaries(bounds)
                .build(),
        });
        let layer = tracing_opentelemetry::layer().with_tracer(traces.tracer("mcpmux"));
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Some((Telemetry { traces, metrics }, layer)))
    }

    /// Flushes and stops the exporters. Blocks: call it off the runtime's threads (its
    /// exports run there).
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.traces.shutdown() {
            tracing::warn!(error = %e, "trace export did not flush");
        }
        if let Err(e) = self.metrics.shutdown() {
            tracing::warn!(error = %e, "metric export did not flush");
        }
    }
}

/// The layer that exports `mcpmux::otel` spans.
pub type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<
    tracing_subscriber::Registry,
    opentelemetry_sdk::trace::SdkTracer,
>;
