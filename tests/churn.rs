//! Session churn leaks nothing: thousands of Streamable HTTP sessions each initialize,
//! open their GET stream, subscribe to one of 20 URIs and leave without unsubscribing
//! (half by DELETE, half by simply dropping their connections and being expired by
//! `listen.session_idle_ms`). Afterwards the upstream holds no subscription and the
//! hub's client, subscription and pending tables are all empty.
//!
//! `MCPMUX_CHURN_CYCLES` overrides the number of sessions (default [`DEFAULT_CYCLES`]).

use crate::common;

use std::time::{Duration, Instant};

use common::http::{post, read_body, HttpClient};
use common::inproc::{tables_empty, InProc};
use common::scripted_config;
use futures_util::StreamExt;
use serde_json::{json, Value};

/// Sessions opened and dropped: 7–9 s in a debug build on 2 idle cores (20 s while
/// another build ran), well under the 60 s budget.
const DEFAULT_CYCLES: usize = 5000;
/// Sessions in flight at once.
const CONCURRENCY: usize = 50;
/// Distinct URIs subscribed to (`test://static/1..=URIS`).
const URIS: u32 = 20;
/// Idle expiry of abandoned sessions. A live cycle is idle (no stream, no request in
/// flight) twice: between its `initialize` answer and its `initialized` POST, and
/// between that and its GET. Under load those gaps grow: up to 230 ms was measured at
/// load average 10 on 2 cores (six busy loops beside the test). A live session that
/// expired there would fail its cycle with a 404, so the expiry is 20 times that;
/// abandoned sessions then take this long to go, which is the price.
const IDLE_MS: u64 = 5_000;
/// Safety net for the release of every session after the churn (about `IDLE_MS`).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(120);

fn cycles() -> usize {
    std::env::var("MCPMUX_CHURN_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CYCLES)
}

/// One session: initialize, initialized, GET stream, subscribe; then DELETE (even `i`)
/// or abandon (odd `i`: the GET connection is dropped, nothing else is sent).
async fn cycle(http: &reqwest::Client, url: &str, i: usize) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "churn", "version": "0"}}});
    let resp = post(http, url, None, &init).await;
    assert!(resp.status().is_success(), "initialize: {}", resp.status());
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    read_body(resp).await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(http, url, Some(&session), &note).await.status(), 202);
    let get = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(get.status().is_success(), "GET: {}", get.status());
    let uri = format!("test://static/{}", rand::random_range(1..=URIS));
    let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                     "params": {"uri": uri}});
    let answer = read_body(post(http, url, Some(&session), &sub).await).await;
    assert_eq!(answer[0]["result"], json!({}), "{answer:?}");
    if i.is_multiple_of(2) {
        drop(get);
        let status = http
            .delete(url)
            .header("mcp-session-id", &session)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    // Odd: `get` is dropped here, closing its connection without a word.
}

fn count(stats: &Value, method: &str) -> u64 {
    stats["counts"][method].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churned_sessions_leave_no_subscription_upstream_and_empty_hub_tables() {
    let n = cycles();
    let listen = format!("[listen]\nhttp = \"127.0.0.1:0\"\nsession_idle_ms = {IDLE_MS}\n");
    let proxy = InProc::start(&scripted_config(
        &listen,
        "[limits]\nmax_clients = 100000\n",
        "",
    ))
    .await;
    let url = proxy.url.clone();
    let http = reqwest::Client::new();

    let started = Instant::now();
    futures_util::stream::iter(0..n)
        .map(|i| cycle(&http, &url, i))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    let churn_time = started.elapsed();

    // Abandoned sessions expire within about IDLE_MS of their connection closing.
    let drained = proxy
        .wait_stats(
            "every session to be released",
            RELEASE_TIMEOUT,
            tables_empty,
        )
        .await;
    let released_after = started.elapsed() - churn_time;

    let mut observer = HttpClient::connect(&url, json!({})).await;
    let upstream = observer.tool("stats", json!({})).await;
    assert_eq!(upstream["subscribed"], json!([]), "{upstream}");
    let (subs, unsubs) = (
        count(&upstream, "resources/subscribe"),
        count(&upstream, "resources/unsubscribe"),
    );
    // Every 0→1 was matched by exactly one 1→0.
    assert_eq!(subs, unsubs, "{upstream}");
    assert!(n == 0 || subs > 0, "{upstream}");
    assert_eq!(observer.delete().await, 200);
    let end = proxy
        .wait_stats("the observer to be released", RELEASE_TIMEOUT, tables_empty)
        .await;
    assert_eq!(end.cache_entries, 0, "{end:?}");
    eprintln!(
        "churn: {n} sessions in {churn_time:?} (+{released_after:?} until released); \
         upstream resources/subscribe = {subs}, resources/unsubscribe = {unsubs}; \
         hub after: {drained:?}"
    );
    proxy.stop().await;
}
