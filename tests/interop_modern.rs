//! Interop with 2026-07-28 clients: the official TypeScript SDK v2 client pinned to the
//! modern era (`tests/interop/modern_client.mjs`) and the Python `mcp` 2.x client in its
//! modern mode (`tests/interop/python/modern_client.py`), through `mcpmux serve` and
//! `mcpmux stdio` in front of the scripted (legacy) upstream: each listens to a URI,
//! gets the updates it triggers with `emit_update` tagged with its own listen id, reads
//! fresh contents after each, and answers an MRTR round (the scripted server's `sample`
//! asks for sampling; the SDK answers `input_required` and retries).
//!
//! Through `mcpmux serve`, both modern clients run (one after the other) while the
//! official TypeScript SDK v1 client (`tests/interop/legacy_holder.mjs`, 2025-11-25)
//! holds the same URI on the same mcpmux: it subscribes before they start, receives all
//! four of their updates untagged (no `io.modelcontextprotocol/subscriptionId`), reads
//! after each (never an older version), and pauses before it unsubscribes, so the
//! driver reads the upstream's own `stats` (through a Rust session that holds nothing)
//! while it still holds the URI: one upstream `resources/subscribe` for the URI for both
//! eras, no unsubscribe; once it has left, exactly one `resources/unsubscribe`. (`mcpmux
//! stdio` serves one client, so the stdio test has no second peer.) Waits are on
//! conditions with generous bounds; no sleeps, no fixed ports.

use crate::common;
use crate::harness;

use std::path::Path;
use std::time::{Duration, Instant};

use common::http::HttpClient;
use harness::*;
use serde_json::{json, Value};

const URI: &str = "test://static/1";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// Updates the SDK v1 client waits for: the two each modern peer triggers.
const LEGACY_UPDATES: usize = 4;
/// Bound on an upstream condition that follows at once or within moments.
const CONDITION_TIMEOUT: Duration = Duration::from_secs(30);

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
        assert_eq!(u["_meta"][SUBSCRIPTION_ID], listen_id, "{}", context());
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

/// Whether a peer's stdout line is the step line `{"step": name, …}`.
fn is_step(line: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["step"] == name)
}

/// Polls the upstream's `stats` (through `observer`) until `ok` holds, bounded.
async fn stats_until(observer: &mut HttpClient, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let stats = observer.tool("stats", json!({})).await;
        if ok(&stats) {
            return stats;
        }
        assert!(
            start.elapsed() < CONDITION_TIMEOUT,
            "timed out waiting for {what}: {stats}"
        );
        tokio::task::yield_now().await;
    }
}

/// How many `method` requests for URI the upstream received (absent = 0).
fn upstream_count(stats: &Value, method: &str) -> u64 {
    stats["by_uri"][method][URI].as_u64().unwrap_or(0)
}

/// The version N of a scripted text read, `"<uri> v<N>"`.
fn version_of(text: &str) -> Option<u64> {
    text.strip_prefix(&format!("{URI} v"))?.parse().ok()
}

/// What the SDK v1 client must have seen: [`LEGACY_UPDATES`] untagged updates (one per
/// `emit_update` of the modern peers, none twice) and, after each, a read that shows it.
fn assert_legacy_run(result: &Value, context: &dyn Fn() -> String) {
    assert_eq!(result["protocolVersion"], "2025-11-25", "{}", context());
    assert_eq!(result["unsubscribed"], true, "{}", context());
    assert_eq!(result["readBefore"], format!("{URI} v0"), "{}", context());
    let updates = result["updates"].as_array().cloned().unwrap_or_default();
    assert_eq!(updates.len(), LEGACY_UPDATES, "{}", context());
    for u in &updates {
        assert_eq!(u["uri"], URI, "{}", context());
        assert!(
            u["_meta"].get(SUBSCRIPTION_ID).is_none(),
            "a legacy update carries no listen id: {u}\n{}",
            context()
        );
    }
    assert_eq!(result["updatesTotal"], LEGACY_UPDATES, "{}", context());
    assert_eq!(result["otherUpdates"], 0, "{}", context());
    // The read after the k-th update shows at least version k (the modern peer may have
    // triggered the next one meanwhile), never an older, cached one; the last shows the
    // last update.
    let versions: Vec<Option<u64>> = result["reads"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["text"].as_str().and_then(version_of))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(versions.len(), LEGACY_UPDATES, "{}", context());
    for (k, v) in versions.iter().enumerate() {
        let k = k as u64 + 1;
        assert!(
            v.is_some_and(|v| (k..=LEGACY_UPDATES as u64).contains(&v)),
            "the read after update {k} shows version {v:?}\n{}",
            context()
        );
    }
    assert_eq!(
        versions.last().copied().flatten(),
        Some(LEGACY_UPDATES as u64),
        "{}",
        context()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_sdk_clients_and_an_sdk_v1_client_share_one_upstream_subscription() {
    ensure_peers();
    let (mcpmux, url) = start_mcpmux(&scripted_config_http());

    // The SDK v1 client holds the URI for the whole test: subscribed before the modern
    // peers start, it lets go only after both have finished (its `--pause`).
    let script = interop_dir()
        .join("legacy_holder.mjs")
        .display()
        .to_string();
    let updates = LEGACY_UPDATES.to_string();
    let timeout_ms = SCENARIO_TIMEOUT.as_millis().to_string();
    let mut legacy = Peer::spawn(
        &node(),
        &[
            &script,
            &url,
            "--uri",
            URI,
            "--updates",
            &updates,
            "--pause",
            "--timeout-ms",
            &timeout_ms,
        ],
    );
    tokio::task::block_in_place(|| {
        legacy.wait_line("holding line", SCENARIO_TIMEOUT, |l| is_step(l, "holding"))
    });
    // A Rust session that only asks the upstream for its `stats` (it holds nothing).
    let mut observer = HttpClient::connect(&url, json!({})).await;
    let stats = stats_until(&mut observer, "the v1 client's upstream subscribe", |s| {
        s["subscribed"] == json!([URI])
    })
    .await;
    assert_eq!(
        upstream_count(&stats, "resources/subscribe"),
        1,
        "{stats}\n{}\n{}",
        legacy.output(),
        mcpmux.logs()
    );

    let script = interop_dir().join("modern_client.mjs");
    let mut args = vec![script.display().to_string(), url.clone()];
    args.extend(scenario_args());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
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

    // The v1 client got the four updates and read after each; it still holds the URI.
    // Both modern listens came and went while it held it: the upstream saw ONE
    // subscribe for the URI (counted by the upstream itself), no unsubscribe yet, and
    // the four updates the modern peers triggered.
    tokio::task::block_in_place(|| {
        legacy.wait_line("updated line", SCENARIO_TIMEOUT, |l| is_step(l, "updated"))
    });
    let stats = observer.tool("stats", json!({})).await;
    let context = || format!("{stats}\n{}\n{}", legacy.output(), mcpmux.logs());
    assert_eq!(
        upstream_count(&stats, "resources/subscribe"),
        1,
        "{}",
        context()
    );
    assert_eq!(
        upstream_count(&stats, "resources/unsubscribe"),
        0,
        "{}",
        context()
    );
    assert_eq!(stats["subscribed"], json!([URI]), "{}", context());
    assert_eq!(stats["subscribers"][URI], 1, "{}", context());
    assert_eq!(
        stats["tools"]["emit_update"],
        LEGACY_UPDATES,
        "{}",
        context()
    );

    legacy.send_line("go");
    let run = tokio::task::block_in_place(|| legacy.finish(SCENARIO_TIMEOUT));
    let context = || run.report("legacy_holder.mjs (SDK v1)", &mcpmux);
    assert!(run.status.success(), "{}", context());
    assert_legacy_run(&result_json(&run, &context), &context);

    // Everyone has left: exactly one upstream unsubscribe, after the one subscribe.
    let stats = stats_until(&mut observer, "the upstream unsubscribe", |s| {
        s["subscribed"] == json!([])
    })
    .await;
    let context = || format!("{stats}\n{}", mcpmux.logs());
    assert_eq!(
        upstream_count(&stats, "resources/unsubscribe"),
        1,
        "{}",
        context()
    );
    assert_eq!(
        upstream_count(&stats, "resources/subscribe"),
        1,
        "{}",
        context()
    );
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
