//! Upstream failures as clients see them, through `mcpmux serve` over Streamable HTTP
//! in front of the scripted upstream (docs/architecture.md, "Upstream failure"):
//! - an upstream that exits fails every request in flight at once, naming itself;
//! - a restarted upstream is re-subscribed to every held URI, holders get a
//!   `notifications/resources/updated` for it, and the read cache starts empty;
//! - an upstream that crashes on every start is retried with backoff, then marked
//!   down after `restart.max_failures` attempts, while mcpmux keeps answering;
//! - a request that outlives `limits.request_timeout_ms` gets -32001 and the upstream
//!   gets `notifications/cancelled`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::http::{Daemon, HttpClient};
use common::{scripted_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";
const URI: &str = "test://static/3";

fn count(stats: &Value, method: &str) -> u64 {
    stats["counts"][method].as_u64().unwrap_or(0)
}

fn error_message(r: &Value) -> &str {
    r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a JSON-RPC error, got {r}"))
}

/// Calls `stats` until the upstream reports a parked `hang` call (the upstream has
/// no event for "request received"; each poll is one round trip).
async fn wait_hung(c: &mut HttpClient, n: u64) {
    let start = Instant::now();
    while c.tool("stats", json!({})).await["pending"]["hung"] != json!(n) {
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "hang never reached the upstream"
        );
    }
}

/// Far beyond every wait in these tests: nothing the test sees is caused by it.
const FAR_MS: u64 = 600_000;

#[tokio::test]
async fn an_upstream_exit_fails_in_flight_requests_at_once_naming_the_upstream() {
    // Neither the request timeout nor the restart happen within the test, so an
    // answer to the hung request can only come from its upstream's exit.
    let d = Daemon::start(&scripted_config(
        LISTEN,
        &format!(
            "[limits]\nrequest_timeout_ms = {FAR_MS}\n\
             [restart]\ninitial_backoff_ms = {FAR_MS}\nmax_backoff_ms = {FAR_MS}\n"
        ),
        "",
    ))
    .await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let mut b = HttpClient::connect(&d.url, json!({})).await;
    let hanging = tokio::spawn(async move {
        let r = a
            .call("tools/call", json!({"name": "hang", "arguments": {}}))
            .await;
        (r, Instant::now())
    });
    wait_hung(&mut b, 1).await;

    let exit_at = Instant::now();
    let own = b
        .call("tools/call", json!({"name": "exit", "arguments": {}}))
        .await;
    assert!(error_message(&own).contains("scripted"), "{own}");
    // "At once": failed because its upstream died, not by the request timeout (which
    // would say -32001) and not once the upstream is back (both are far beyond this
    // bound, a safety net that holds on a loaded machine).
    let (r, answered_at) = tokio::time::timeout(EVENT_TIMEOUT, hanging)
        .await
        .expect("the hung request was not failed when its upstream exited")
        .unwrap();
    let waited = answered_at - exit_at;
    assert_eq!(r["error"]["code"], -32000, "{r}");
    let msg = error_message(&r);
    assert!(msg.contains("upstream scripted"), "{msg}");
    assert!(msg.contains("closed before answering"), "{msg}");
    eprintln!("in-flight request failed {waited:?} after the exit call: {msg}");
}

#[tokio::test]
async fn a_restarted_upstream_is_resubscribed_holders_are_told_and_reads_go_upstream() {
    let d = Daemon::start(&scripted_config(
        LISTEN,
        "[restart]\ninitial_backoff_ms = 50\n",
        "",
    ))
    .await;
    let mut holder = HttpClient::connect(&d.url, json!({})).await;
    let mut killer = HttpClient::connect(&d.url, json!({})).await;
    let r = holder
        .call("resources/subscribe", json!({"uri": URI}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    // While subscribed, the second read is served from the cache.
    for _ in 0..2 {
        let r = holder.call("resources/read", json!({"uri": URI})).await;
        assert_eq!(r["result"]["contents"][0]["text"], "test://static/3 v0");
    }
    let before = holder.tool("stats", json!({})).await;
    assert_eq!(count(&before, "resources/read"), 1, "{before}");

    killer
        .call("tools/call", json!({"name": "exit", "arguments": {}}))
        .await;

    // After the restart, the holder hears that URI may have changed.
    let update = loop {
        let ev = holder.next_event().await;
        if ev["method"] == "notifications/resources/updated" {
            break ev;
        }
    };
    assert_eq!(update["params"]["uri"], URI);

    // The new process got exactly one subscribe for the held URI and no read yet.
    let after = holder.tool("stats", json!({})).await;
    assert_eq!(after["subscribed"], json!([URI]), "{after}");
    assert_eq!(count(&after, "initialize"), 1, "a new process: {after}");
    assert_eq!(count(&after, "resources/subscribe"), 1, "{after}");
    assert_eq!(count(&after, "resources/read"), 0, "{after}");
    // The cache was dropped with the old session: this read goes upstream.
    let r = holder.call("resources/read", json!({"uri": URI})).await;
    assert_eq!(r["result"]["contents"][0]["text"], "test://static/3 v0");
    let after = holder.tool("stats", json!({})).await;
    assert_eq!(count(&after, "resources/read"), 1, "{after}");
}

#[tokio::test]
async fn an_upstream_that_crashes_on_every_start_is_retried_with_backoff_then_marked_down() {
    const MAX_FAILURES: usize = 4;
    const INITIAL_BACKOFF_MS: u64 = 100;
    let log = temp_log("crash");
    let extra = format!(
        "[restart]\ninitial_backoff_ms = {INITIAL_BACKOFF_MS}\nmax_backoff_ms = 10000\n\
         max_failures = {MAX_FAILURES}\n"
    );
    let server = format!(
        "env = {{ SCRIPTED_CRASH_ON_START = \"1\", SCRIPTED_LOG = {:?} }}\n",
        log.to_str().unwrap()
    );
    let started = Instant::now();
    let d = Daemon::start(&scripted_config(LISTEN, &extra, &server)).await;

    // mcpmux itself answers (once the first start has failed).
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));

    // Requests get a clear error; poll it until the actor has given up (no event
    // tells a client that; each poll is one round trip to the hub).
    let given_up = loop {
        let r = c
            .call(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "x"}}),
            )
            .await;
        assert_eq!(r["error"]["code"], -32000, "{r}");
        let msg = error_message(&r).to_owned();
        assert!(msg.contains("upstream scripted is not available"), "{msg}");
        if msg.contains("marked down") {
            break msg;
        }
        assert!(
            started.elapsed() < EVENT_TIMEOUT,
            "never marked down: {msg}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed = started.elapsed();

    let attempts = first_lines(&log);
    assert_eq!(attempts, MAX_FAILURES, "one first line per start attempt");
    // Backoff between attempts: 100, 200, 400 ms (±25 %), not a hot loop.
    let min_backoff: u64 = (1..MAX_FAILURES as u32)
        .map(|k| INITIAL_BACKOFF_MS << (k - 1))
        .sum::<u64>()
        * 3
        / 4;
    assert!(
        elapsed >= Duration::from_millis(min_backoff),
        "{MAX_FAILURES} attempts within {elapsed:?}"
    );
    // Subscriptions are refused clearly too, and mcpmux still answers.
    let r = c.call("resources/subscribe", json!({"uri": URI})).await;
    assert!(r.get("error").is_some(), "{r}");
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));
    eprintln!("{attempts} start attempts, marked down after {elapsed:?}: {given_up}");
    let _ = std::fs::remove_file(&log);
}

/// The first line of each start: the era probe (`protocol = "auto"`), after which the
/// crashing server exits.
fn first_lines(log: &Path) -> usize {
    let lines = logged(log);
    assert!(
        lines.iter().all(|m| m["method"] == "server/discover"),
        "{lines:?}"
    );
    lines.len()
}

#[tokio::test]
async fn a_request_that_times_out_gets_32001_and_the_upstream_is_cancelled() {
    const TIMEOUT_MS: u64 = 300;
    let log = temp_log("timeout");
    let d = Daemon::start(&scripted_config(
        LISTEN,
        &format!("[limits]\nrequest_timeout_ms = {TIMEOUT_MS}\n"),
        &format!("env = {{ SCRIPTED_LOG = {:?} }}\n", log.to_str().unwrap()),
    ))
    .await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let started = Instant::now();
    let r = c
        .call("tools/call", json!({"name": "hang", "arguments": {}}))
        .await;
    let waited = started.elapsed();
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(error_message(&r).contains("request_timeout_ms"), "{r}");
    assert!(waited >= Duration::from_millis(TIMEOUT_MS), "{waited:?}");

    // The upstream is told to cancel that very request. On a loaded machine other
    // requests (the boot-time list fetches, a stats call) may outlive 300 ms too and
    // be cancelled as well, so match the hang call's own id rather than count.
    let start = Instant::now();
    let (hang_id, cancels) = loop {
        let received = logged(&log);
        let hang_id = received
            .iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "hang")
            .map(|m| m["id"].clone());
        if let Some(id) = hang_id {
            let cancels: Vec<Value> = received
                .iter()
                .filter(|m| {
                    m["method"] == "notifications/cancelled" && m["params"]["requestId"] == id
                })
                .cloned()
                .collect();
            if !cancels.is_empty() {
                break (id, cancels);
            }
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "the upstream was never told to cancel the hang call: {received:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(cancels.len(), 1, "one cancel for {hang_id}: {cancels:?}");

    // It dropped the call: any request read after the cancel sees nothing hung. This
    // stats call may itself outlive 300 ms on a loaded machine: ask again then.
    let start = Instant::now();
    let stats = loop {
        let r = c
            .call("tools/call", json!({"name": "stats", "arguments": {}}))
            .await;
        if r["error"]["code"] != -32001 {
            break common::tool_output("stats", &r);
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "stats kept timing out: {r}"
        );
    };
    assert_eq!(
        stats["pending"]["hung"], 0,
        "the upstream dropped it: {stats}"
    );
    let _ = std::fs::remove_file(&log);
}

/// A fresh `SCRIPTED_LOG` path for one test.
fn temp_log(what: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("mcpmux-{what}-{}-{nanos}.log", std::process::id()))
}

/// Every message a scripted upstream recorded in its `SCRIPTED_LOG`, in order.
fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}
