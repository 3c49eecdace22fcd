//! Interop tests: official MCP SDK clients through a real `mcpmux serve`, with the reference
//! server (`@modelcontextprotocol/server-everything`, stdio) as the upstream.
//!
//! The peers are installed by `tests/interop/setup.sh` (pinned by `package-lock.json` and
//! `python/requirements.lock`), run once per test run by [`ensure_peers`]. The upstream
//! is wrapped by `tests/interop/record.mjs`, which appends every line mcpmux sends to the
//! upstream to a JSON-lines log (written before the line is forwarded), so a test can count
//! what actually reached the server: one `initialize`, one `resources/subscribe`, one
//! `resources/unsubscribe` however many clients asked.
//!
//! server-everything facts these tests lean on (checked against 2026.8.31): tools `echo` and
//! `toggle-subscriber-updates`; static resources `demo://resource/static/document/<file>.md`;
//! `resources.subscribe: true`; no `notifications/resources/updated` until the toggle tool is
//! called on that (upstream) session, then one at once and one every 5 s for every URI the
//! session subscribed; a second toggle switches them off. Through mcpmux every client shares
//! one upstream session, so exactly one client toggles.
//!
//! Cleanup is deterministic: mcpmux runs in its own process group, which is SIGKILLed on
//! drop (record.mjs also stops its child 1.5 s after its stdin closes, should mcpmux have
//! moved upstreams to another group). No fixed ports (`127.0.0.1:0`), no sleeps: every wait
//! is on a process event, bounded by a timeout that only guards against hangs.

use crate::harness;

use std::time::{Duration, Instant};

use serde_json::Value;

use harness::*;

#[test]
fn ts_sdk_clients_share_one_upstream_subscription() {
    ensure_peers();
    let log = TempPath::new("upstream", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[script, "fanout", &url, "--clients", "3", "--uri", DOC_URI],
        SCENARIO_TIMEOUT,
    );
    let context = || run.report("clients.mjs fanout", &mcpmux);
    assert!(
        run.status.success(),
        "TS SDK fanout scenario failed through mcpmux\n{}",
        context()
    );

    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("clients.mjs printed no JSON result ({e})\n{}", context()));
    assert_eq!(result["clients"], 3, "{}", context());
    assert_eq!(result["uri"], DOC_URI, "{}", context());
    assert_eq!(result["toggles"], 1, "{}", context());
    assert!(
        result["tools"].as_u64().unwrap_or(0) >= 2,
        "tools/list through mcpmux is too short\n{}",
        context()
    );
    let per_client = result["updatesPerClient"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(per_client.len(), 3, "{}", context());
    assert!(
        per_client.iter().all(|n| n.as_u64().unwrap_or(0) >= 1),
        "every client must receive the update fanned out from the one upstream subscription\n{}",
        context()
    );
    assert_eq!(
        result["afterUnsubscribe"],
        0,
        "updates reached clients after they unsubscribed\n{}",
        context()
    );

    assert_one_upstream_subscription(&upstream_messages(&log), DOC_URI, &context());
}

#[test]
fn python_client_subscribes_through_mcpmux() {
    ensure_peers();
    let log = TempPath::new("upstream", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));

    let python = interop_dir().join(".venv/bin/python");
    let script = interop_dir().join("python/subscribe.py");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(&python, &[script, &url, DOC_URI], SCENARIO_TIMEOUT);
    let context = || run.report("subscribe.py", &mcpmux);
    assert!(
        run.status.success(),
        "Python SDK client failed through mcpmux\n{}",
        context()
    );

    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("subscribe.py printed no JSON result ({e})\n{}", context()));
    assert_eq!(result["uri"], DOC_URI, "{}", context());
    assert!(
        result["updates"].as_u64().unwrap_or(0) >= 1,
        "{}",
        context()
    );

    assert_one_upstream_subscription(&upstream_messages(&log), DOC_URI, &context());
}

#[test]
fn ts_sdk_clients_rereading_on_every_update_cost_one_upstream_read_per_update() {
    ensure_peers();
    let log = TempPath::new("upstream-reread", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));
    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[
            script,
            "reread",
            &url,
            "--clients",
            "5",
            "--uri",
            DOC_URI,
            "--updates",
            "2",
        ],
        SCENARIO_TIMEOUT,
    );
    let context = || run.report("clients.mjs reread", &mcpmux);
    assert!(
        run.status.success(),
        "TS SDK reread scenario failed through mcpmux\n{}",
        context()
    );
    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("clients.mjs printed no JSON result ({e})\n{}", context()));
    let updates: Vec<u64> = result["updatesPerClient"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let reads: Vec<u64> = result["readsPerClient"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(updates.len(), 5, "{}", context());
    assert!(updates.iter().all(|n| *n >= 2), "{}", context());
    assert_eq!(
        updates,
        reads,
        "every client re-read once per update\n{}",
        context()
    );
    let msgs = upstream_messages(&log);
    let upstream_reads = count_method(&msgs, "resources/read", Some(DOC_URI)) as u64;
    let update_count = *updates.iter().max().expect("five clients");
    let client_reads: u64 = reads.iter().sum();
    eprintln!(
        "reread: {client_reads} client reads over {update_count} updates -> {upstream_reads} upstream reads \
         (hit ratio {:.2})",
        1.0 - upstream_reads as f64 / client_reads as f64
    );
    assert_eq!(
        upstream_reads,
        update_count,
        "expected exactly one upstream resources/read per update\n{}\n{}",
        summarize(&msgs),
        context()
    );
}

#[test]
fn ts_sdk_clients_see_a_stdio_and_an_http_upstream_as_one_server() {
    ensure_peers();
    let started = Instant::now();
    let remote = EverythingHttp::start(free_port());
    let log = TempPath::new("upstream-local", "jsonl");
    let (mcpmux, url) = start_mcpmux(&local_and_remote_config(log.path(), &remote.url()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[script, "multi", &url, "--uri", DOC_URI, "--updates", "2"],
        SCENARIO_TIMEOUT,
    );
    let context = || {
        format!(
            "{}\n--- remote server-everything stderr ---\n{}",
            run.report("clients.mjs multi", &mcpmux),
            remote.logs()
        )
    };
    assert!(
        run.status.success(),
        "TS SDK multi scenario failed through mcpmux\n{}",
        context()
    );
    let result = result_json(&run, &context);
    let local_uri = format!("local+{DOC_URI}");
    let remote_uri = format!("remote+{DOC_URI}");
    for (who, want) in [("x", &local_uri), ("y", &remote_uri)] {
        let got = result["updates"][who]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            vec![want],
            "client {who} must receive updates for {want} and nothing else\n{}",
            context()
        );
        assert!(
            got[want.as_str()].as_u64().unwrap_or(0) >= 2,
            "client {who}: too few updates for {want}\n{}",
            context()
        );
    }

    // What reached the stdio upstream: its own half of the traffic, URIs and names unprefixed.
    let msgs = upstream_messages(&log);
    let report = format!(
        "--- local upstream received ---\n{}\n{}",
        summarize(&msgs),
        context()
    );
    assert_eq!(
        count_method(&msgs, "initialize", None),
        1,
        "one local session\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/subscribe", Some(DOC_URI)),
        1,
        "exactly one upstream resources/subscribe for {DOC_URI} on the local upstream\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/subscribe", None),
        1,
        "the remote client's subscription must not reach the local upstream\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/unsubscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_tool_calls(&msgs, "toggle-subscriber-updates"),
        2,
        "only the local toggles (on, off) reach the local upstream\n{report}"
    );
    let echoes = tool_call_args(&msgs, "echo");
    assert_eq!(
        echoes.len(),
        2,
        "each client's local__echo (and only those) reach the local upstream\n{report}"
    );
    assert!(
        echoes.iter().all(|a| a["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("local "))),
        "a remote__echo reached the local upstream\n{report}"
    );
    assert!(
        msgs.iter()
            .all(|m| !m.to_string().contains("local__") && !m.to_string().contains("local+")),
        "a namespaced name or URI reached the upstream unstripped\n{report}"
    );
    // mcpmux maps a namespaced resources/read to the upstream but does not namespace
    // the answer's contents[].uri; reported here, not asserted (see clients.mjs).
    eprintln!(
        "multi: scenario {} ms, test {} ms; resources/read contents[0].uri: {} / {}",
        result["elapsedMs"],
        started.elapsed().as_millis(),
        result["reads"]["local"]["contentsUri"],
        result["reads"]["remote"]["contentsUri"]
    );
}

#[test]
fn http_upstream_restart_keeps_clients_receiving_updates() {
    ensure_peers();
    let started = Instant::now();
    let port = free_port();
    let mut remote = EverythingHttp::start(port);
    let log = TempPath::new("upstream-local", "jsonl");
    let (mcpmux, url) = start_mcpmux(&local_and_remote_config(log.path(), &remote.url()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let mut restarts = 0;
    let mut restart_took = Duration::ZERO;
    let run = run_peer_interactive(
        &node(),
        &[script, "restart", &url, "--uri", DOC_URI, "--updates", "2"],
        SCENARIO_TIMEOUT,
        |line| {
            if line != "READY-FOR-RESTART" {
                return None;
            }
            let t = Instant::now();
            remote.kill();
            // Same port: mcpmux's next GET on its old session meets a server that never
            // heard of it (400), which is how it learns the session is gone.
            remote = EverythingHttp::start(port);
            restart_took = t.elapsed();
            restarts += 1;
            Some("RESTARTED".into())
        },
    );
    let context = || {
        format!(
            "{}\n--- remote server-everything stderr ---\n{}",
            run.report("clients.mjs restart", &mcpmux),
            remote.logs()
        )
    };
    assert!(
        run.status.success(),
        "TS SDK restart scenario failed through mcpmux\n{}",
        context()
    );
    assert_eq!(restarts, 1, "{}", context());
    let result = result_json(&run, &context);
    assert!(
        result["updatesBeforeRestart"].as_u64().unwrap_or(0) >= 1,
        "{}",
        context()
    );
    assert!(
        result["updatesOnReReady"].as_u64().unwrap_or(0) >= 1,
        "the holder must be told about the re-established subscription\n{}",
        context()
    );
    assert!(
        result["updatesAfterToggle"].as_u64().unwrap_or(0) >= 2,
        "updates from the new upstream session must keep flowing\n{}",
        context()
    );
    assert_eq!(
        result["localUpdates"],
        0,
        "the remote's restart must not notify holders of the local upstream\n{}",
        context()
    );
    assert!(
        mcpmux.stderr.read().contains("session expired (HTTP 4"),
        "mcpmux should have found the old session gone (HTTP 400/404 from the new server)\n{}",
        context()
    );

    // The stdio upstream is not disturbed by the remote's restart.
    let msgs = upstream_messages(&log);
    let report = format!(
        "--- local upstream received ---\n{}\n{}",
        summarize(&msgs),
        context()
    );
    assert_eq!(count_method(&msgs, "initialize", None), 1, "{report}");
    assert_eq!(
        count_method(&msgs, "resources/subscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/unsubscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_tool_calls(&msgs, "toggle-subscriber-updates"),
        0,
        "{report}"
    );
    eprintln!("restart: {result}");
    eprintln!(
        "restart: server restart {} ms, mcpmux re-ready seen {} ms after it, scenario {} ms, test {} ms",
        restart_took.as_millis(),
        result["reReadyMs"],
        result["elapsedMs"],
        started.elapsed().as_millis()
    );
}

/// The tool list and results of fidelity.mjs `tools` against `target` (a URL, or
/// `--stdio ENTRY` for server-everything directly).
fn fidelity_tools(target: &[&str], mcpmux: Option<&Mcpmux>) -> Value {
    let script = interop_dir().join("fidelity.mjs");
    let mut args = vec![script.to_str().expect("utf-8 path"), "tools"];
    args.extend_from_slice(target);
    let run = run_peer(&node(), &args, SCENARIO_TIMEOUT);
    let context = || match mcpmux {
        Some(m) => run.report("fidelity.mjs tools", m),
        None => format!("direct: {}\n{}", run.stdout, run.stderr),
    };
    assert!(run.status.success(), "{}", context());
    result_json(&run, &context)
}

#[test]
fn sdk_client_with_sampling_and_elicitation_sees_the_direct_tools_and_both_complete() {
    // mcpmux declares sampling, elicitation and roots upstream, so server-everything
    // registers the tools that need them: the list through mcpmux equals the direct one
    // for a client declaring the same, and both server→client requests complete.
    ensure_peers();
    let entry = everything_entry();
    let direct = fidelity_tools(&["--stdio", entry.to_str().unwrap()], None);
    let log = TempPath::new("upstream", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));
    let through = fidelity_tools(&[&url], Some(&mcpmux));
    assert_eq!(
        through["tools"],
        direct["tools"],
        "logs:\n{}",
        mcpmux.logs()
    );
    let tools = through["tools"].as_array().unwrap();
    for needed in ["trigger-sampling-request", "trigger-elicitation-request"] {
        assert!(
            tools.iter().any(|t| t == needed),
            "{needed} missing: {through}"
        );
    }
    let sampling = through["sampling"].as_str().unwrap_or_default();
    assert!(sampling.contains("sampled by fidelity"), "{through}");
    let elicitation = through["elicitation"].as_str().unwrap_or_default();
    assert!(elicitation.contains("elicited by fidelity"), "{through}");
}

#[test]
fn concurrent_sampling_requests_reach_only_their_own_clients_over_http() {
    // Two SDK clients call trigger-sampling-request at the same time on one shared
    // Streamable HTTP upstream session: each sampling request arrives on its call's POST
    // stream, so mcpmux sends it to that client alone.
    ensure_peers();
    let remote = EverythingHttp::start(free_port());
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.everything]\nurl = {}\n",
        toml_str(&remote.url())
    );
    let (mcpmux, url) = start_mcpmux(&config);
    let script = interop_dir().join("fidelity.mjs");
    let run = run_peer(
        &node(),
        &[script.to_str().unwrap(), "concurrent", &url],
        SCENARIO_TIMEOUT,
    );
    let context = || run.report("fidelity.mjs concurrent", &mcpmux);
    assert!(run.status.success(), "{}", context());
    let result = result_json(&run, &context);
    for (me, other) in [("a", "b"), ("b", "a")] {
        let requests = result[me]["requests"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(requests.len(), 1, "{me}: {}", context());
        let asked = requests[0].as_str().unwrap_or_default();
        assert!(
            asked.ends_with(&format!("from {me}")),
            "{me} got {asked}\n{}",
            context()
        );
        let answer = result[me]["result"].as_str().unwrap_or_default();
        assert!(answer.contains(&format!("answer of {me}")), "{}", context());
        assert!(
            !answer.contains(&format!("answer of {other}")),
            "{}",
            context()
        );
    }
}
