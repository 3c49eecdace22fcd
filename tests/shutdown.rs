//! Graceful shutdown of the real daemon: `mcpmux serve` with three subscribed HTTP
//! clients gets SIGTERM, exits 0, releases every upstream subscription it held (the
//! scripted upstream's `SCRIPTED_LOG` records a `resources/unsubscribe` per URI), and
//! leaves no upstream process behind.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use common::http::{Daemon, HttpClient};
use common::{scripted_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const URIS: [&str; 2] = ["test://static/1", "test://static/2"];

/// Pids of live processes whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<u32> {
    let mut out = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            out.push(pid);
        }
    }
    out
}

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// The messages the upstream received, one JSON value per logged line.
fn logged(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits (bounded) until a process whose command line holds `marker` runs.
#[cfg(unix)]
async fn until_running(marker: &str) {
    let start = std::time::Instant::now();
    while pids_with(marker).is_empty() {
        assert!(start.elapsed() < EVENT_TIMEOUT, "{marker} did not start");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until no process whose command line holds `marker` is left.
#[cfg(unix)]
async fn until_gone(marker: &str) {
    let start = std::time::Instant::now();
    while !pids_with(marker).is_empty() {
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "{marker} outlived its server: {:?}",
            pids_with(marker)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A config whose one stdio server `s` (the scripted upstream, under `sh`) starts a
/// child of its own whose command line holds `marker`; `extra` goes before it.
#[cfg(unix)]
fn server_with_a_child(marker: &str, extra: &str, env: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n{extra}[servers.s]\ncommand = \"sh\"\n\
         args = ['-c', 'sh -c \"sleep 1000; : {marker}\" & exec {scripted}']\n{env}",
        scripted = common::scripted_upstream()
    )
}

#[tokio::test]
async fn sigterm_unsubscribes_everything_exits_zero_and_reaps_the_upstream() {
    let marker = unique("mcpmux-shutdown-marker");
    let log: PathBuf = std::env::temp_dir().join(format!("{marker}.log"));
    let server_extra = format!(
        "args = [{marker:?}]\nenv = {{ SCRIPTED_LOG = {:?} }}\n",
        log.to_str().unwrap()
    );
    let mut d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        &server_extra,
    ))
    .await;

    let mut clients = vec![];
    for _ in 0..3 {
        let mut c = HttpClient::connect(&d.url, json!({})).await;
        for uri in URIS {
            let r = c.call("resources/subscribe", json!({"uri": uri})).await;
            assert_eq!(r["result"], json!({}), "{r}");
        }
        clients.push(c);
    }
    let stats = clients[0].tool("stats", json!({})).await;
    assert_eq!(stats["subscribed"], json!(URIS), "{stats}");
    let upstream = pids_with(&marker);
    assert_eq!(upstream.len(), 1, "exactly one scripted upstream runs");

    let status = d.terminate().await;
    assert_eq!(status.code(), Some(0), "{status}");

    // The upstream was stopped and reaped before mcpmux exited.
    assert_eq!(pids_with(&marker), Vec::<u32>::new());
    assert!(
        !Path::new(&format!("/proc/{}", upstream[0])).exists(),
        "upstream pid {} still exists (zombie?)",
        upstream[0]
    );
    let received = logged(&log);
    for uri in URIS {
        let unsubs = received
            .iter()
            .filter(|m| m["method"] == "resources/unsubscribe" && m["params"]["uri"] == uri)
            .count();
        assert_eq!(
            unsubs, 1,
            "one resources/unsubscribe for {uri}: {received:?}"
        );
    }
    drop(clients);
    let _ = std::fs::remove_file(&log);
}

/// Starts mcpmux with `drain_ms`, sends one `tools/call` of `tool` (in the
/// background), waits until the upstream has it, sends SIGTERM, and returns what the
/// call got and mcpmux's exit code.
async fn call_across_sigterm(drain_ms: u64, tool: &str, args: Value) -> (Vec<Value>, Option<i32>) {
    let mut d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        &format!("[limits]\ndrain_ms = {drain_ms}\n"),
        "",
    ))
    .await;
    let c = HttpClient::connect(&d.url, json!({})).await;
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args}});
    let call = tokio::spawn(async move {
        let resp = c.post(&req).await;
        common::http::read_body(resp).await
    });
    // The upstream has the call before mcpmux is told to stop.
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let stats = watcher.tool("stats", json!({})).await;
            if stats["tools"][tool] == json!(1) {
                break;
            }
        }
    })
    .await
    .expect("the upstream never saw the call");
    // mcpmux exits only after the drain, so the call has its answer by then.
    let status = d.terminate().await;
    let got = tokio::time::timeout(EVENT_TIMEOUT, call)
        .await
        .expect("the call in flight was never answered")
        .unwrap();
    (got, status.code())
}

#[tokio::test]
async fn sigterm_lets_a_request_in_flight_finish_within_drain_ms() {
    // The upstream answers 1 s after the call; drain_ms leaves it 20 s.
    let (got, code) =
        call_across_sigterm(20_000, "delay", json!({"ms": 1000, "text": "finished"})).await;
    assert_eq!(code, Some(0));
    let answer = got.iter().find(|m| m["id"] == json!(1)).expect("an answer");
    assert_eq!(
        answer["result"]["content"][0]["text"], "finished",
        "the answer itself, not an error: {answer}"
    );
}

#[tokio::test]
async fn sigterm_cuts_a_request_still_in_flight_after_drain_ms() {
    let (got, code) = call_across_sigterm(300, "hang", json!({})).await;
    assert_eq!(code, Some(0));
    let answer = got.iter().find(|m| m["id"] == json!(1)).expect("an answer");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("limits.drain_ms"), "{answer}");
}

/// Stopping a stdio server stops what it started too: a server that ignores stdin's EOF
/// gets SIGTERM as a process group, its own child included (as an `npx` or `sh -c`
/// wrapper's server would be).
#[cfg(unix)]
#[tokio::test]
async fn stopping_a_server_stops_the_processes_it_started() {
    stopping_stops_the_servers_child(true).await;
}

/// A server that exits by itself at stdin's EOF, leaving a child behind: the child gets
/// SIGTERM as its process group's last member.
#[cfg(unix)]
#[tokio::test]
async fn a_server_that_exits_at_eof_leaves_no_child_behind() {
    stopping_stops_the_servers_child(false).await;
}

#[cfg(unix)]
async fn stopping_stops_the_servers_child(ignore_eof: bool) {
    let marker = unique("mcpmux-grandchild");
    let env = format!(
        "env = {{ SCRIPTED_IGNORE_EOF = \"{}\" }}\n",
        if ignore_eof { "1" } else { "" }
    );
    let mut d = Daemon::start(&server_with_a_child(&marker, "", &env)).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let _ = a.tool("stats", json!({})).await;
    until_running(&marker).await;
    let status = d.terminate().await;
    assert_eq!(status.code(), Some(0));
    until_gone(&marker).await;
}

/// A server that crashes leaves no child behind either: when its session ends, its
/// process group is told to stop, before the restart starts the next server (and the
/// next child).
#[cfg(unix)]
#[tokio::test]
async fn a_crashed_servers_child_does_not_outlive_it() {
    let marker = unique("mcpmux-crashed-child");
    let mut d = Daemon::start(&server_with_a_child(&marker, "", "")).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let _ = a.tool("stats", json!({})).await;
    let r = a
        .call(
            "tools/call",
            json!({"name": "exit", "arguments": {"code": 1}}),
        )
        .await;
    assert!(r["error"].is_object(), "the server died mid-call: {r}");
    // The restarted server answers, and only its own child is running.
    let start = std::time::Instant::now();
    loop {
        let r = a
            .call("tools/call", json!({"name": "stats", "arguments": {}}))
            .await;
        let children = pids_with(&marker);
        if r["result"].is_object() && children.len() == 1 {
            break;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "children of the crashed and the restarted server: {children:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(d.terminate().await.code(), Some(0));
    until_gone(&marker).await;
}

/// An open status page (its event stream) ends with the shutdown instead of holding it:
/// the stream is closed cleanly and mcpmux exits 0.
#[tokio::test]
async fn an_open_status_page_ends_with_the_shutdown() {
    let mut d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let mut events = reqwest::Client::new()
        .get(format!("{}/status/events", d.origin()))
        .send()
        .await
        .unwrap();
    assert!(events.status().is_success(), "{}", events.status());
    assert!(events.chunk().await.unwrap().is_some(), "the first event");
    assert_eq!(d.terminate().await.code(), Some(0));
    // Ended by mcpmux (the last chunk), not cut by its exit.
    while let Some(_keepalive) = events.chunk().await.expect("a clean end of the stream") {}
}

/// A client stalled in the middle of a request body does not hold the exit: its
/// connection is closed after the grace.
#[tokio::test]
async fn a_request_body_that_never_comes_does_not_hold_the_exit() {
    use tokio::io::AsyncWriteExt;
    let mut d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let authority = d.origin().trim_start_matches("http://").to_owned();
    let mut stalled = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{{"
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(d.terminate().await.code(), Some(0));
}

/// A second SIGTERM while mcpmux stops (here, while a request in flight is given a
/// long `drain_ms`) ends it at once, with exit code 130, and its stdio server's process
/// group is told to stop (a server that ignores stdin's EOF, and its child, included).
#[cfg(unix)]
#[tokio::test]
async fn a_second_sigterm_while_stopping_exits_at_once() {
    let marker = unique("mcpmux-second-signal");
    let mut d = Daemon::start(&server_with_a_child(
        &marker,
        "[limits]\ndrain_ms = 600000\n\n",
        "env = { SCRIPTED_IGNORE_EOF = \"1\" }\n",
    ))
    .await;
    let c = HttpClient::connect(&d.url, json!({})).await;
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "hang", "arguments": {}}});
    // Never answered: mcpmux exits under it.
    let _call = tokio::spawn(async move { c.try_post(&req).await });
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while watcher.tool("stats", json!({})).await["tools"]["hang"] != json!(1) {}
    })
    .await
    .expect("the upstream never saw the call");
    until_running(&marker).await;
    let pid = d.child.id().expect("running").to_string();
    let term = || {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    term();
    // The first signal was taken once a new session is refused (the drain).
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while common::http::post(&http, &d.url, None, &init)
            .await
            .status()
            != reqwest::StatusCode::SERVICE_UNAVAILABLE
        {}
    })
    .await
    .expect("mcpmux never started draining");
    term();
    let status = tokio::time::timeout(EVENT_TIMEOUT, d.child.wait())
        .await
        .expect("the second SIGTERM did not end mcpmux")
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    until_gone(&marker).await;
}
