//! `/metrics` read by a strict OpenMetrics parser: the official Python client's
//! `prometheus_client.openmetrics.parser` (pinned in `tests/interop/python/requirements.lock`,
//! installed into `tests/interop/.venv` by `tests/interop/setup.sh`). It rejects the whole
//! exposition on one bad line (a histogram bucket `le="inf"` instead of `le="+Inf"`,
//! buckets that are not cumulative, a missing `# EOF`), which the lenient Rust parser of
//! `tests/operator_view.rs` lets through.

use crate::common;
use crate::harness;

use std::io::Write;
use std::process::{Command, Stdio};

use common::http::{Daemon, HttpClient};
use common::scripted_config;
use harness::*;
use serde_json::{json, Value};

/// Parses the exposition on stdin strictly; prints, as JSON, every histogram's buckets
/// (`le` → cumulative count) and `_count`, per label set.
const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    if fam.type != "histogram":
        continue
    for s in fam.samples:
        key = fam.name + json.dumps({k: v for k, v in sorted(s.labels.items()) if k != "le"})
        h = out.setdefault(key, {"buckets": [], "count": None})
        if s.name.endswith("_bucket"):
            h["buckets"].append([s.labels["le"], s.value])
        elif s.name.endswith("_count"):
            h["count"] = s.value
print(json.dumps(out))
"#;

/// A server name with a double quote and a backslash in it.
const ODD: &str = r#"odd "one" \ here"#;

#[tokio::test]
async fn metrics_pass_the_official_openmetrics_parser() {
    ensure_peers();
    // A second server whose name needs escaping in a label value (valid TOML).
    let odd = format!(
        "[servers.'{ODD}']\ncommand = {:?}\nprefix = \"odd\"\n",
        common::scripted_upstream()
    );
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        &odd,
        "",
    ))
    .await;
    // Some upstream traffic, so the latency histogram has observations.
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    for _ in 0..3 {
        let r = c
            .call("resources/read", json!({"uri": "test://static/1"}))
            .await;
        assert!(r["result"].is_object(), "{r}");
    }
    let base = d.url.trim_end_matches("/mcp").to_owned();
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let python = interop_dir().join(".venv").join("bin").join("python");
    let mut child = Command::new(&python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser rejected /metrics: {}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hist: Value = serde_json::from_slice(&out.stdout).unwrap();
    let upstreams: Vec<String> = hist
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("mcpmux_upstream_request_duration_seconds"))
        .filter_map(|labels| serde_json::from_str::<Value>(labels).ok())
        .filter_map(|labels| labels["upstream"].as_str().map(str::to_owned))
        .collect();
    assert!(
        upstreams.iter().any(|u| u == ODD),
        "the odd name reads back as it is: {upstreams:?}\n{text}"
    );
    let latency = hist
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("mcpmux_upstream_request_duration_seconds{"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no latency histogram: {hist}\n{text}"));
    let buckets = latency["buckets"].as_array().unwrap();
    let last = buckets.last().unwrap();
    assert_eq!(last[0], "+Inf", "{latency}");
    assert_eq!(
        last[1], latency["count"],
        "+Inf equals the count: {latency}"
    );
    assert!(latency["count"].as_f64().unwrap() >= 1.0, "{latency}");
    let counts: Vec<f64> = buckets.iter().map(|b| b[1].as_f64().unwrap()).collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "cumulative buckets never decrease: {latency}"
    );
}
