//! `[telemetry]`: OpenTelemetry export (docs/architecture.md, "Traces"). Absent, and
//! without `$OTEL_EXPORTER_OTLP_ENDPOINT`, tracing is off.
//!
//! Plain data read by serde, and its rules; never reads the environment.

use serde::{Deserialize, Serialize};

use super::problem::{invalid, KeyPath, Problem};

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`): spans go to
    /// `/v1/traces`, metrics to `/v1/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of what mcpmux exports (default `mcpmux`; `$OTEL_SERVICE_NAME` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The share of new traces recorded, 0.0 to 1.0 (a request's sampled parent is
    /// followed either way). Default: `$OTEL_TRACES_SAMPLER(_ARG)`, else every trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<f64>,
}

// `sample_ratio` is never NaN (checked), so equality is an equivalence.
impl Eq for TelemetryConfig {}

pub(super) fn check(t: &TelemetryConfig) -> Result<(), Problem> {
    if let Some(url) = &t.otlp_endpoint {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            let at = KeyPath::new(&["telemetry", "otlp_endpoint"]);
            return Err(invalid(
                &at,
                format!("{at} must start with http:// or https:// (got {url:?})"),
            ));
        }
    }
    if let Some(r) = t.sample_ratio {
        if !(0.0..=1.0).contains(&r) {
            let at = KeyPath::new(&["telemetry", "sample_ratio"]);
            return Err(invalid(
                &at,
                format!("{at} must be between 0.0 and 1.0 (got {r})"),
            ));
        }
    }
    Ok(())
}
