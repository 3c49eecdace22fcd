//! A Streamable HTTP upstream that sends sampling, elicitation and log messages on its
//! GET stream, tied to no request id (as servers on the TypeScript SDK v1 do with
//! `server.createMessage()`/`elicitInput()`), against the real daemon and the scripted
//! upstream in HTTP mode: with one client request in flight there, that client gets
//! them; with two in flight, the request is refused with the reason and the log goes
//! to nobody; no client ever receives another's.
//!
//! Waits are on conditions (a marker update that follows on the same upstream stream,
//! each read bounded by `EVENT_TIMEOUT`); no sleeps.

use crate::common;

use common::fleet::HttpUpstream;
use common::http::{Daemon, HttpClient, PostStream};

use serde_json::{json, Value};

const MARKER_URI: &str = "test://static/1";

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

async fn rig() -> (HttpUpstream, Daemon) {
    let up = HttpUpstream::start(&[("SCRIPTED_CONFORMANCE", "1")]).await;
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.up]\nurl = {}\nprotocol = \"legacy\"\n",
        serde_json::to_string(&up.url).unwrap()
    );
    let d = Daemon::start(&config).await;
    (up, d)
}

/// A client that can be asked, holds the marker URI and hears every log level.
async fn client(url: &str) -> HttpClient {
    let mut c = HttpClient::connect(url, json!({"sampling": {}, "elicitation": {}})).await;
    let r = c
        .call("resources/subscribe", json!({"uri": MARKER_URI}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let r = c.call("logging/setLevel", json!({"level": "debug"})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    c
}

/// Emits an update for the marker URI (on the upstream's GET stream, after everything
/// it sent there before) and returns what `c` received until that update.
async fn until_marker(emitter: &mut HttpClient, c: &mut HttpClient) -> Vec<Value> {
    let r = emitter
        .tool("emit_update", json!({"uri": MARKER_URI}))
        .await;
    assert_eq!(r["emitted"], 1, "{r}");
    let mut before = vec![];
    loop {
        let ev = c.next_event().await;
        if ev["method"] == "notifications/resources/updated" && ev["params"]["uri"] == MARKER_URI {
            return before;
        }
        before.push(ev);
    }
}

#[tokio::test]
async fn the_one_caller_gets_the_get_streams_sampling_elicitation_and_log() {
    let (_up, d) = rig().await;
    let a = client(&d.url).await;
    let mut b = client(&d.url).await;
    let mut control = HttpClient::connect(&d.url, json!({})).await;

    // Sampling, with a log line before it, both on the upstream's GET stream.
    let mut s = PostStream::open(
        &a,
        &call(1, "sample", json!({"prompt": "hi", "log": "for a"})),
    )
    .await;
    let log = s.next().await.expect("the log line");
    assert_eq!(log["method"], "notifications/message", "{log}");
    assert_eq!(log["params"]["data"], "for a", "{log}");
    let req = s.next().await.expect("the sampling request");
    assert_eq!(req["method"], "sampling/createMessage", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "hello from a"},
        "model": "test"}});
    assert_eq!(a.post(&answer).await.status(), 202);
    let rest = s.rest().await;
    let result = rest.iter().find(|m| m["id"] == 1).expect("the tool result");
    assert!(result.to_string().contains("hello from a"), "{result}");

    // Elicitation the same way.
    let mut s = PostStream::open(&a, &call(2, "test_elicitation", json!({}))).await;
    let req = s.next().await.expect("the elicitation request");
    assert_eq!(req["method"], "elicitation/create", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {
        "action": "accept", "content": {"username": "alice", "email": "a@example.com"}}});
    assert_eq!(a.post(&answer).await.status(), 202);
    let rest = s.rest().await;
    let result = rest.iter().find(|m| m["id"] == 2).expect("the tool result");
    assert!(result.to_string().contains("alice"), "{result}");

    // The other client heard none of it.
    assert_eq!(
        until_marker(&mut control, &mut b).await,
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn with_two_callers_in_flight_the_request_is_refused_and_nobody_gets_the_log() {
    let (_up, d) = rig().await;
    let mut a = client(&d.url).await;
    let mut b = client(&d.url).await;
    let mut control = HttpClient::connect(&d.url, json!({})).await;

    // a's call hangs upstream; then b's call asks on the GET stream.
    let hang = PostStream::open(&a, &call(10, "hang", json!({}))).await;
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    tokio::time::timeout(common::EVENT_TIMEOUT, async {
        loop {
            let stats = watcher.tool("stats", json!({})).await;
            if stats.pointer("/tools/hang") == Some(&json!(1)) {
                return;
            }
        }
    })
    .await
    .expect("the hang reached the upstream");
    let got = PostStream::open(
        &b,
        &call(11, "sample", json!({"prompt": "hi", "log": "for b"})),
    )
    .await
    .rest()
    .await;
    assert!(
        got.iter().all(|m| m.get("method").is_none()),
        "b got no request and no log: {got:?}"
    );
    let text = got.last().expect("b's result").to_string();
    assert!(text.contains("cannot tell which client"), "{text}");

    // Neither client received anything of the other's (or the unattributable log).
    assert_eq!(
        until_marker(&mut control, &mut a).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        until_marker(&mut control, &mut b).await,
        Vec::<Value>::new()
    );
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 10, "reason": "test"}});
    assert_eq!(a.post(&cancel).await.status(), 202);
    assert!(hang.rest().await.iter().all(|m| m.get("result").is_none()));
}
