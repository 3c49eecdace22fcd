//! Interop with 2026-07-28 clients: the official TypeScript SDK v2 client pinned to the
//! modern era (`tests/interop/modern_client.mjs`) and the Python `mcp` 2.x client in its
//! modern mode (`tests/interop/python/modern_client.py`), through `mcpmux serve` and
//! `mcpmux stdio` in front of the scripted (legacy) upstream, while a legacy session holds
//! the same URI: one upstream subscription for all of them, updates tagged with each
//! listen's own id, fresh reads after each update, and an MRTR round (the scripted
//! server's `sample` asks for sampling; the SDK answers `input_required` and retries).

mod common;
#[path = "interop/harness.rs"]
mod harness;

use std::path::Path;

use common::http::HttpClient;
use harness::*;
use serde_json::{json, Value};

const URI: &str = "test://static/1";

/// The common arguments: listen to URI, 2 updates triggered by `emit_update`, one MRTR
/// round through `sample`.
fn scenario_args() -> Vec<String> {
    [
        "--uri",
        URI,
        "--tool",
        "emit_update",
        "--updates",
        "2",
        "--mrtr",
        "sample",
        "--mrtr-args",
        r#"{"prompt":"hi"}"#,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What every modern client scenario must show.
fn assert_modern_run(result: &Value, listen_id: &str, context: &dyn Fn() -> String) {
    assert_eq!(
        result["discover"]["supportedVersions"][0],
        "2026-07-28",
        "{}",
        context()
    );
    assert_eq!(result["listen"]["id"], listen_id, "{}", context());
    assert_eq!(
        result["listen"]["honoredFilter"]["resourceSubscriptions"],
        json!([URI]),
        "{}",
        context()
    );
    let updates = result["updates"].as_array().cloned().unwrap_or_default();
    assert_eq!(updates.len(), 2, "{}", context());
    for u in &updates {
        assert_eq!(u["uri"], URI, "{}", context());
        assert_eq!(
            u["_meta"]["io.modelcontextprotocol/subscriptionId"],
            listen_id,
            "{}",
            context()
        );
    }
    // Each read after an update sees the new version (no stale cache anywhere).
    let reads: Vec<&str> = result["reads"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["text"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(reads.len(), 2, "{}", context());
    assert_ne!(
        reads[0],
        reads[1],
        "reads after two updates differ: {}",
        context()
    );
    assert_eq!(result["mrtr"]["samplings"], 1, "{}", context());
    assert_eq!(result["mrtr"]["isError"], false, "{}", context());
}

fn scripted_config_http() -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.scripted]\ncommand = {}\n",
        serde_json::to_string(common::scripted_upstream()).unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_sdk_clients_and_a_legacy_session_share_one_upstream_subscription() {
    ensure_peers();
    let (mcpmux, url) = start_mcpmux(&scripted_config_http());
    // A legacy session holds the URI for the whole test.
    let mut legacy = HttpClient::connect(&url, json!({})).await;
    let r = legacy
        .call("resources/subscribe", json!({"uri": URI}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");

    let script = interop_dir().join("modern_client.mjs");
    let mut args = vec![script.display().to_string(), url.clone()];
    args.extend(scenario_args());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    // The peer runs to completion here; the legacy session's stream keeps being read on
    // the runtime's other worker meanwhile.
    let run = tokio::task::block_in_place(|| run_peer(&node(), &a, SCENARIO_TIMEOUT));
    let context = || run.report("modern_client.mjs (HTTP)", &mcpmux);
    assert!(run.status.success(), "{}", context());
    assert_modern_run(&result_json(&run, &context), "listen:0", &context);

    let python = interop_dir().join(".venv/bin/python");
    let script = interop_dir().join("python/modern_client.py");
    let mut args = vec![script.display().to_string(), url.clone()];
    args.extend(scenario_args());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = tokio::task::block_in_place(|| run_peer(&python, &a, SCENARIO_TIMEOUT));
    let context = || run.report("modern_client.py (HTTP)", &mcpmux);
    assert!(run.status.success(), "{}", context());
    let result = result_json(&run, &context);
    assert_modern_run(
        &result,
        result["listen"]["id"].as_str().unwrap_or("?"),
        &context,
    );

    // The legacy session got all four updates, untagged; the upstream saw one
    // subscribe for the URI, and it is still held (by the legacy session).
    let mut seen = 0;
    while seen < 4 {
        let ev = legacy.next_event().await;
        if ev["method"] == "notifications/resources/updated" && ev["params"]["uri"] == URI {
            assert!(ev["params"]["_meta"]
                .get("io.modelcontextprotocol/subscriptionId")
                .is_none());
            seen += 1;
        }
    }
    let stats = legacy.tool("stats", json!({})).await;
    assert_eq!(
        stats["by_uri"]["resources/subscribe"][URI],
        1,
        "{stats}\n{}",
        mcpmux.logs()
    );
    assert_eq!(stats["subscribed"], json!([URI]), "{stats}");
}

#[test]
fn a_modern_sdk_client_through_mcpmux_stdio() {
    ensure_peers();
    let config =
        std::env::temp_dir().join(format!("mcpmux-interop-modern-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[servers.scripted]\ncommand = {}\n",
            serde_json::to_string(common::scripted_upstream()).unwrap()
        ),
    )
    .unwrap();
    let script = interop_dir().join("modern_client.mjs");
    let mcpmux = Path::new(env!("CARGO_BIN_EXE_mcpmux"))
        .display()
        .to_string();
    let mut args = vec![script.display().to_string()];
    args.extend(scenario_args());
    // The SDK probes in a throw-away process of the same command unless told to probe
    // on the connection itself; in place keeps one mcpmux (and one upstream).
    args.extend(["--probe-in-place", "--stdio", &mcpmux, "stdio", "--config"].map(String::from));
    args.push(config.display().to_string());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_peer(&node(), &a, SCENARIO_TIMEOUT);
    let context = || format!("modern_client.mjs (stdio): {}\n{}", run.stdout, run.stderr);
    assert!(run.status.success(), "{}", context());
    let result = result_json_plain(&run);
    assert_eq!(result["transport"], "stdio", "{}", context());
    assert_modern_run(&result, "listen:0", &context);
    let _ = std::fs::remove_file(&config);
}

fn result_json_plain(run: &Run) -> Value {
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no JSON result ({e}): {}\n{}", run.stdout, run.stderr))
}
