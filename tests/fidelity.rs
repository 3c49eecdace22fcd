//! Protocol fidelity on the shared upstream session, against the real daemon and the
//! scripted upstream over stdio: every message about one client's request reaches
//! that client alone; sub-resource updates; cancellation releases the POST; progress
//! extends the timeout up to the total limit; bad params never reach the server;
//! what mcpmux declares; the log level after a restart; how a stuck server is stopped.
//!
//! Waits are on conditions (a marker update that follows, a stats count, a log line),
//! each bounded by `EVENT_TIMEOUT`; no sleeps.

use crate::common;

use std::path::{Path, PathBuf};

use common::http::{Daemon, HttpClient, PostStream};
use common::{scripted_config, EVENT_TIMEOUT};

use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";
const MARKER_URI: &str = "test://static/1";

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

fn call_with_progress(id: u64, tool: &str, args: Value, token: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": {"progressToken": token}}})
}

/// Emits an update for `MARKER_URI` and waits until `c` (which holds it) receives it:
/// everything mcpmux queued for `c` before is then delivered. Returns what came first.
async fn until_marker(emitter: &mut HttpClient, c: &mut HttpClient) -> Vec<Value> {
    let r = emitter
        .call(
            "tools/call",
            json!({"name": "emit_update", "arguments": {"uri": MARKER_URI}}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let mut before = vec![];
    loop {
        let ev = c.next_event().await;
        if ev["method"] == "notifications/resources/updated" && ev["params"]["uri"] == MARKER_URI {
            return before;
        }
        before.push(ev);
    }
}

async fn subscribe(c: &mut HttpClient, uri: &str) {
    let r = c.call("resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(r["result"], json!({}), "{r}");
}

async fn wait_for_stat(c: &mut HttpClient, path: &str, want: Value) {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let stats = c.tool("stats", json!({})).await;
            if stats.pointer(path) == Some(&want) {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("stats {path} never became {want}"));
}

#[tokio::test]
async fn each_client_gets_only_its_own_progress_logs_and_sampling() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let mut a = HttpClient::connect(&d.url, json!({"sampling": {}})).await;
    let mut b = HttpClient::connect(&d.url, json!({"sampling": {}})).await;
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    subscribe(&mut a, MARKER_URI).await;
    subscribe(&mut b, MARKER_URI).await;

    // 1. Progress of two concurrent calls: each stream carries only its own token.
    let args = json!({"steps": 3, "interval_ms": 20});
    let sa = PostStream::open(&a, &call_with_progress(10, "progress", args.clone(), "a")).await;
    let sb = PostStream::open(&b, &call_with_progress(10, "progress", args, "b")).await;
    let (got_a, got_b) = tokio::join!(sa.rest(), sb.rest());
    for (got, token) in [(&got_a, "a"), (&got_b, "b")] {
        let progress: Vec<&Value> = got
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 3, "{got:?}");
        assert!(
            progress
                .iter()
                .all(|p| p["params"]["progressToken"] == token),
            "{got:?}"
        );
        assert!(got.last().unwrap()["result"].is_object(), "{got:?}");
    }

    // 2. A log message while two clients have requests in flight on the stdio
    //    upstream cannot be attributed: nobody gets it (no cross-client leak).
    let hang = PostStream::open(&b, &call(20, "hang", json!({}))).await;
    wait_for_stat(&mut watcher, "/tools/hang", json!(1)).await;
    let logged = PostStream::open(&a, &call(21, "log", json!({"data": "a's secret"})))
        .await
        .rest()
        .await;
    assert_eq!(logged.len(), 1, "only the result: {logged:?}");
    assert!(logged[0]["result"].is_object());
    assert_eq!(
        until_marker(&mut watcher, &mut b).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        until_marker(&mut watcher, &mut a).await,
        Vec::<Value>::new()
    );

    // 3. Cancelling the hung call ends its POST at once (no response will come).
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 20, "reason": "test"}});
    assert_eq!(b.post(&cancel).await.status(), 202);
    let rest = hang.rest().await;
    assert!(rest.iter().all(|m| m.get("result").is_none()), "{rest:?}");

    // 4. With only a's call in flight, its sampling request reaches a, on a's POST.
    let mut sample = PostStream::open(&a, &call(30, "sample", json!({"prompt": "hi"}))).await;
    let req = sample.next().await.expect("the sampling request");
    assert_eq!(req["method"], "sampling/createMessage", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "hello from a"},
        "model": "test"}});
    assert_eq!(a.post(&answer).await.status(), 202);
    let rest = sample.rest().await;
    let result = rest
        .iter()
        .find(|m| m["id"] == 30)
        .expect("the tool result");
    assert!(result.to_string().contains("hello from a"), "{result}");
    assert_eq!(
        until_marker(&mut watcher, &mut b).await,
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn a_sampling_request_for_a_client_without_the_capability_is_refused() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let a = HttpClient::connect(&d.url, json!({})).await;
    let got = PostStream::open(&a, &call(1, "sample", json!({"prompt": "hi"})))
        .await
        .rest()
        .await;
    // The refusal goes back upstream; the scripted server turns it into the result.
    assert!(
        got.iter().all(|m| m["method"] != "sampling/createMessage"),
        "{got:?}"
    );
    let text = got.last().unwrap().to_string();
    assert!(
        text.contains("did not declare the sampling capability"),
        "{text}"
    );
}

#[tokio::test]
async fn an_update_for_a_sub_resource_reaches_holders_of_the_parent() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let mut parent = HttpClient::connect(&d.url, json!({})).await;
    let mut other = HttpClient::connect(&d.url, json!({})).await;
    subscribe(&mut parent, "test://dynamic/dir").await;
    subscribe(&mut other, "test://dynamic/elsewhere").await;
    subscribe(&mut other, MARKER_URI).await;
    // The parent's contents are cached while subscribed...
    for _ in 0..2 {
        let r = parent
            .call("resources/read", json!({"uri": "test://dynamic/dir"}))
            .await;
        assert!(r["result"]["contents"].is_array(), "{r}");
    }
    let stats = parent.tool("stats", json!({})).await;
    assert_eq!(stats["by_uri"]["resources/read"]["test://dynamic/dir"], 1);
    // ...an update of a child reaches the parent's holder, with the child's URI...
    let r = other
        .call(
            "tools/call",
            json!({"name": "emit_update", "arguments": {"uri": "test://dynamic/dir/file"}}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let ev = parent.next_event().await;
    assert_eq!(ev["method"], "notifications/resources/updated");
    assert_eq!(ev["params"]["uri"], "test://dynamic/dir/file");
    // ...and makes the parent's cached contents stale.
    parent
        .call("resources/read", json!({"uri": "test://dynamic/dir"}))
        .await;
    let stats = parent.tool("stats", json!({})).await;
    assert_eq!(stats["by_uri"]["resources/read"]["test://dynamic/dir"], 2);
    // A client holding an unrelated URI heard nothing of it.
    let before = until_marker(&mut parent, &mut other).await;
    assert_eq!(before, Vec::<Value>::new());
}

#[tokio::test]
async fn progress_extends_the_request_timeout_up_to_the_total_limit() {
    let limits = "[limits]\nrequest_timeout_ms = 2000\nrequest_max_total_ms = 60000\n";
    let d = Daemon::start(&scripted_config(LISTEN, limits, "")).await;
    let a = HttpClient::connect(&d.url, json!({})).await;
    // 10 steps 300 ms apart: 3 s in all, more than the 2 s timeout, never 2 s silent.
    let args = json!({"steps": 10, "interval_ms": 300});
    let got = PostStream::open(&a, &call_with_progress(1, "progress", args, "t"))
        .await
        .rest()
        .await;
    let last = got.last().unwrap();
    assert_eq!(last["result"]["structuredContent"]["sent"], 10, "{last}");

    let limits = "[limits]\nrequest_timeout_ms = 2000\nrequest_max_total_ms = 2500\n";
    let d = Daemon::start(&scripted_config(LISTEN, limits, "")).await;
    let a = HttpClient::connect(&d.url, json!({})).await;
    let args = json!({"steps": 40, "interval_ms": 300});
    let got = PostStream::open(&a, &call_with_progress(1, "progress", args, "t"))
        .await
        .rest()
        .await;
    let last = got.last().unwrap();
    let message = last["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("limits.request_max_total_ms"), "{last}");
}

#[tokio::test]
async fn params_that_are_not_an_object_or_nest_too_deep_never_reach_the_server() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let r = a.call("tools/call", json!(["echo", {"text": "x"}])).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let mut deep = json!({"text": "x"});
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let r = a
        .call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x", "deep": deep}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // The session still works, and the server saw neither call: its only tools/call
    // is this stats call, and it read every line it got.
    let stats = a.tool("stats", json!({})).await;
    assert_eq!(stats["counts"]["tools/call"], 1, "{stats}");
    assert_eq!(stats["counts"].get("<parse_error>"), None, "{stats}");
}

#[tokio::test]
async fn list_changed_is_declared_and_a_missing_resource_is_32002() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let resp = common::http::post(
        &reqwest::Client::new(),
        &d.url,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
    )
    .await;
    let init = common::http::read_body(resp).await.remove(0);
    for kind in ["tools", "prompts", "resources"] {
        assert_eq!(
            init["result"]["capabilities"][kind]["listChanged"], true,
            "{init}"
        );
    }
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let r = a
        .call("resources/read", json!({"uri": "test://nowhere/1"}))
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
}

/// The messages the upstream received, one JSON value (or marker string) per line.
fn logged(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.to_owned())))
        .collect()
}

async fn wait_for_log(path: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let seen = logged(path);
            if pred(&seen) {
                return seen;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the upstream log never showed {what}: {:?}", logged(path)))
}

fn temp_log(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mcpmux-fidelity-{name}-{}-{}.log",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

#[tokio::test]
async fn the_log_level_is_set_again_after_an_upstream_restart() {
    let log = temp_log("setlevel");
    let server = format!("env = {{ SCRIPTED_LOG = {:?} }}\n", log.to_str().unwrap());
    let restart = "[restart]\ninitial_backoff_ms = 10\nmax_backoff_ms = 50\n";
    let d = Daemon::start(&scripted_config(LISTEN, restart, &server)).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let r = a.call("logging/setLevel", json!({"level": "error"})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    let count =
        |seen: &[Value], method: &str| seen.iter().filter(|m| m["method"] == method).count();
    wait_for_log(&log, "a logging/setLevel", |s| {
        count(s, "logging/setLevel") == 1
    })
    .await;
    // The server exits; mcpmux starts a new one, which must be told the level again.
    let _ = a
        .call(
            "tools/call",
            json!({"name": "exit", "arguments": {"code": 1}}),
        )
        .await;
    let seen = wait_for_log(&log, "the second setLevel", |s| {
        count(s, "initialize") == 2 && count(s, "logging/setLevel") == 2
    })
    .await;
    let last = seen
        .iter()
        .rev()
        .find(|m| m["method"] == "logging/setLevel")
        .unwrap();
    assert_eq!(last["params"]["level"], "error", "{last}");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_server_that_ignores_stdin_eof_gets_sigterm_before_sigkill() {
    let log = temp_log("sigterm");
    let server = format!(
        "env = {{ SCRIPTED_LOG = {:?}, SCRIPTED_IGNORE_EOF = \"1\" }}\n",
        log.to_str().unwrap()
    );
    let mut d = Daemon::start(&scripted_config(LISTEN, "", &server)).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let _ = a.tool("stats", json!({})).await;
    let status = d.terminate().await;
    assert_eq!(status.code(), Some(0));
    // The server recorded the SIGTERM (it exits 0 on it) rather than being killed.
    let seen = logged(&log);
    assert_eq!(seen.last(), Some(&json!("<sigterm>")), "{seen:?}");
    let _ = std::fs::remove_file(&log);
}
