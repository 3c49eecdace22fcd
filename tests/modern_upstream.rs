//! Upstreams of the 2026-07-28 era behind the real daemon: the scripted upstream in
//! its legacy, dual and modern-only modes (`SCRIPTED_ERA`), used by legacy and modern
//! clients at once. What the upstream saw is read from its `stats` tool: one
//! subscription (legacy) or one listen covering a URI (dual, modern) however many
//! clients hold it, one upstream read per change, the MRTR bridge for legacy clients
//! and pass-through for modern ones, the TTL cache, and `check --probe`.
//!
//! Waits are on conditions (an event, a stats value), each bounded; no sleeps.

use crate::common;

use std::time::Instant;

use common::http::{Daemon, HttpClient, PostStream};
use common::modern::{request, ModernClient};
use common::{scripted_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";
const URI: &str = "test://static/1";
const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The marker of negative checks (see `HttpClient::events_until`).
const TOOLS_CHANGED: &str = "notifications/tools/list_changed";

async fn daemon(era: &str, server_extra: &str) -> Daemon {
    let extra = format!("env = {{ SCRIPTED_ERA = \"{era}\" }}\n{server_extra}");
    Daemon::start(&scripted_config(LISTEN, "", &extra)).await
}

/// The upstream's open listens that cover `uri`.
fn listens_covering(stats: &Value, uri: &str) -> usize {
    stats["listens"]["open"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|l| {
                    l["uris"]
                        .as_array()
                        .is_some_and(|u| u.contains(&json!(uri)))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Polls the upstream's stats until `ok` holds (bounded by `EVENT_TIMEOUT`).
async fn stats_until(c: &mut HttpClient, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let stats = c.tool("stats", json!({})).await;
        if ok(&stats) {
            return stats;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "timed out waiting for {what}: {stats}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn ten_holders_of_both_eras_cost_one_upstream_subscription_in_every_era() {
    for era in ["legacy", "dual", "modern"] {
        let d = daemon(era, "").await;
        let m = ModernClient::new(&d.url);
        let mut listens = vec![];
        for i in 0..5 {
            // Every listen id twice: ids are only unique per client.
            let id = format!("listen:{}", i % 3);
            let (s, ack) = m.listen(&id, &[URI]).await;
            assert_eq!(
                ack["params"]["notifications"]["resourceSubscriptions"],
                json!([URI]),
                "{era}: {ack}"
            );
            listens.push((id, s));
        }
        let mut legacy = vec![];
        for _ in 0..5 {
            let mut c = HttpClient::connect(&d.url, json!({})).await;
            let r = c.call("resources/subscribe", json!({"uri": URI})).await;
            assert_eq!(r["result"], json!({}), "{era}: {r}");
            legacy.push(c);
        }
        let mut bystander = HttpClient::connect(&d.url, json!({})).await;
        let stats = bystander.tool("stats", json!({})).await;
        assert_eq!(stats["era"], era);
        if era == "legacy" {
            assert_eq!(stats["counts"]["resources/subscribe"], 1, "{stats}");
            assert!(stats["counts"].get("subscriptions/listen").is_none());
        } else {
            assert!(
                stats["counts"].get("resources/subscribe").is_none(),
                "{stats}"
            );
            assert_eq!(listens_covering(&stats, URI), 1, "{era}: {stats}");
            // The strategy: a listen for the list flags at start, one with the URI
            // that replaced it; one open.
            assert_eq!(stats["listens"]["opened"], 2, "{era}: {stats}");
            assert_eq!(stats["listens"]["open"].as_array().unwrap().len(), 1);
        }

        // One update reaches all ten, modern ones tagged with their own listen id,
        // and no tag of mcpmux's own upstream listen leaks.
        bystander
            .tool("emit_update", json!({"uri": URI, "meta": {"k": "v"}}))
            .await;
        for (id, s) in &mut listens {
            let ev = s.next().await.expect("the update");
            assert_eq!(ev["params"]["uri"], URI, "{era}: {ev}");
            assert_eq!(ev["params"]["_meta"][SUB_ID], json!(id), "{era}: {ev}");
            assert_eq!(ev["params"]["_meta"]["k"], "v", "{era}: {ev}");
        }
        for c in &mut legacy {
            let ev = c.next_event().await;
            assert_eq!(ev["params"]["uri"], URI, "{era}: {ev}");
            assert_eq!(ev["params"]["_meta"], json!({"k": "v"}), "{era}: {ev}");
        }
        // The holders have it, so the daemon has fanned it out: a list_changed sent
        // now reaches the bystander after anything of that fan-out.
        bystander
            .tool("emit_list_changed", json!({"kind": "tools"}))
            .await;
        let before = bystander.events_until(TOOLS_CHANGED).await;
        assert!(before.is_empty(), "nothing for a bystander: {before:?}");

        // Ten reads after the update: one upstream read.
        for c in &mut legacy {
            let r = c.call("resources/read", json!({"uri": URI})).await;
            assert_eq!(
                r["result"]["contents"][0]["text"],
                format!("{URI} v1"),
                "{era}: {r}"
            );
        }
        for i in 0..5 {
            let (_, r) = m.call(100 + i, "resources/read", json!({"uri": URI})).await;
            assert_eq!(
                r["result"]["contents"][0]["text"],
                format!("{URI} v1"),
                "{era}: {r}"
            );
        }
        let stats = bystander.tool("stats", json!({})).await;
        assert_eq!(stats["by_uri"]["resources/read"][URI], 1, "{era}: {stats}");

        // Everyone leaves: nothing stays subscribed upstream.
        drop(listens);
        for c in &mut legacy {
            c.call("resources/unsubscribe", json!({"uri": URI})).await;
        }
        let stats = stats_until(&mut bystander, "the URI released upstream", |s| {
            listens_covering(s, URI) == 0 && s["subscribed"] == json!([])
        })
        .await;
        if era == "legacy" {
            assert_eq!(stats["counts"]["resources/unsubscribe"], 1, "{stats}");
        }
    }
}

/// A small deterministic generator (no clock, no global state).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn no_update_is_lost_while_the_union_changes() {
    let d = daemon("modern", "").await;
    let uris: Vec<String> = (1..=4).map(|i| format!("test://static/{i}")).collect();
    let mut clients = vec![];
    for _ in 0..4 {
        clients.push(HttpClient::connect(&d.url, json!({})).await);
    }
    let mut emitter = HttpClient::connect(&d.url, json!({})).await;
    // held[c][u]; expectations: (client, uri, seq) — the client held the URI when
    // update `seq` of it was emitted, so it must receive that one or a later one.
    let mut held = vec![vec![false; uris.len()]; clients.len()];
    let mut expect: Vec<(usize, usize, u64)> = vec![];
    let mut seq = 0;
    let mut rng = Lcg(7);
    for _ in 0..120 {
        let (c, u) = (rng.next(4) as usize, rng.next(4) as usize);
        match rng.next(3) {
            0 if !held[c][u] => {
                let r = clients[c]
                    .call("resources/subscribe", json!({"uri": uris[u]}))
                    .await;
                assert_eq!(r["result"], json!({}), "{r}");
                held[c][u] = true;
            }
            1 if held[c][u] => {
                clients[c]
                    .call("resources/unsubscribe", json!({"uri": uris[u]}))
                    .await;
                held[c][u] = false;
            }
            _ => {
                seq += 1;
                emitter
                    .tool("emit_update", json!({"uri": uris[u], "meta": {"seq": seq}}))
                    .await;
                for (ci, h) in held.iter().enumerate() {
                    if h[u] {
                        expect.push((ci, u, seq));
                    }
                }
            }
        }
    }
    assert!(
        expect.len() > 20,
        "the run exercises deliveries: {}",
        expect.len()
    );
    // A last update of every URI (seq above all) tells each holder everything before
    // it has been delivered: wait for it, then check every expectation.
    seq += 1;
    for uri in &uris {
        emitter
            .tool("emit_update", json!({"uri": uri, "meta": {"seq": seq}}))
            .await;
    }
    for (ci, c) in clients.iter_mut().enumerate() {
        let mut got: Vec<(String, u64)> = vec![];
        let finals = held[ci].iter().filter(|h| **h).count();
        while got.iter().filter(|(_, s)| *s == seq).count() < finals {
            let ev = c.next_event().await;
            if ev["method"] == "notifications/resources/updated" {
                let s = ev["params"]["_meta"]["seq"].as_u64().unwrap();
                got.push((ev["params"]["uri"].as_str().unwrap().to_owned(), s));
            }
        }
        for (_, u, want) in expect.iter().filter(|(c, _, _)| *c == ci) {
            assert!(
                got.iter().any(|(uri, s)| *uri == uris[*u] && s >= want),
                "client {ci} lost update {want} of {}: got {got:?}",
                uris[*u]
            );
        }
    }
    // The documented strategy: one union listen open when quiet.
    let stats = emitter.tool("stats", json!({})).await;
    assert_eq!(
        stats["listens"]["open"].as_array().unwrap().len(),
        1,
        "{stats}"
    );
}

#[tokio::test]
async fn input_required_is_bridged_for_legacy_clients_and_passed_to_modern_ones() {
    let d = daemon("modern", "").await;
    let caps = json!({"elicitation": {"form": {}}});
    let a = HttpClient::connect(&d.url, caps.clone()).await;
    let mut other = HttpClient::connect(&d.url, caps).await;

    // A legacy client: mcpmux asks it, round after round, on its request's stream.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "ask", "arguments": {"rounds": 2}}});
    let mut s = PostStream::open(&a, &call).await;
    for round in 1..=2 {
        let req = s.next().await.expect("an elicitation request");
        assert_eq!(req["method"], "elicitation/create", "{req}");
        assert_eq!(req["params"]["message"], format!("question {round}"));
        let answer = json!({"jsonrpc": "2.0", "id": req["id"],
            "result": {"action": "accept", "content": {"answer": format!("a{round}")}}});
        assert_eq!(a.post(&answer).await.status(), 202);
    }
    let rest = s.rest().await;
    let result = rest.iter().find(|m| m["id"] == 7).expect("the result");
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("a1") && text.contains("a2"), "{result}");
    // The other client was never asked.
    let stats = other.tool("stats", json!({})).await;
    assert_eq!(
        stats["tools"]["ask"], 3,
        "first call and two retries: {stats}"
    );
    // Anything for it was sent before the result: it would precede a list_changed
    // sent now on its GET stream.
    other
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let before = other.events_until(TOOLS_CHANGED).await;
    assert!(before.is_empty(), "the other client was asked: {before:?}");

    // A legacy client without the capability: the upstream refuses (-32021).
    let mut plain = HttpClient::connect(&d.url, json!({})).await;
    let r = plain
        .call("tools/call", json!({"name": "ask", "arguments": {}}))
        .await;
    assert_eq!(r["error"]["code"], -32021, "{r}");

    // A modern client: `input_required` passes through with the server's state,
    // and so does the retry.
    let m = ModernClient::new(&d.url);
    let mut params = json!({"name": "ask", "arguments": {"rounds": 1}});
    let mut body = request(json!(1), "tools/call", params.clone());
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps_json();
    let (_, r) = post_json(&m, &body).await;
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].clone();
    assert_eq!(state, "ask:1:1", "the server's own state, untouched: {r}");
    params["requestState"] = state;
    params["inputResponses"] = json!({"q1": {"action": "accept", "content": {"answer": "m"}}});
    let mut body = request(json!(2), "tools/call", params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps_json();
    let (_, r) = post_json(&m, &body).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"m\""));
}

fn caps_json() -> Value {
    json!({"elicitation": {"form": {}}})
}

async fn post_json(m: &ModernClient, body: &Value) -> (u16, Value) {
    let resp = m.post_with(body, &[]).await;
    let status = resp.status().as_u16();
    let msgs = common::http::read_body(resp).await;
    (status, msgs.into_iter().last().unwrap_or(Value::Null))
}

#[tokio::test]
async fn ttl_results_are_cached_for_their_ttl_and_an_update_ends_them() {
    let d = daemon("modern", "").await;
    let public = "test://dynamic/p?ttl=60000&scope=public";
    let private = "test://dynamic/q?ttl=60000&scope=private";
    let mut clients = vec![];
    for _ in 0..10 {
        clients.push(HttpClient::connect(&d.url, json!({})).await);
    }
    for uri in [public, private] {
        for c in &mut clients {
            let r = c.call("resources/read", json!({"uri": uri})).await;
            assert_eq!(
                r["result"]["contents"][0]["text"],
                format!("{uri} v0"),
                "{r}"
            );
        }
    }
    let m = ModernClient::new(&d.url);
    let (_, r) = m.call(1, "resources/read", json!({"uri": private})).await;
    assert_eq!(r["result"]["cacheScope"], "private", "stays private: {r}");
    let left = r["result"]["ttlMs"].as_u64().unwrap();
    assert!(left <= 60_000, "the time left, not more: {r}");
    let stats = clients[0].tool("stats", json!({})).await;
    assert_eq!(stats["by_uri"]["resources/read"][public], 1, "{stats}");
    assert_eq!(stats["by_uri"]["resources/read"][private], 1, "{stats}");

    // A short TTL: after it, one more upstream read.
    let short = "test://dynamic/s?ttl=200&scope=public";
    clients[0]
        .call("resources/read", json!({"uri": short}))
        .await;
    let start = Instant::now();
    loop {
        clients[1]
            .call("resources/read", json!({"uri": short}))
            .await;
        let stats = clients[0].tool("stats", json!({})).await;
        if stats["by_uri"]["resources/read"][short] == 2 {
            break;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "never expired: {stats}");
    }

    // An update through the listen ends a TTL-fresh entry at once.
    let held = "test://dynamic/h?ttl=60000&scope=public";
    let r = clients[2]
        .call("resources/subscribe", json!({"uri": held}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    clients[3]
        .call("resources/read", json!({"uri": held}))
        .await;
    clients[4].tool("emit_update", json!({"uri": held})).await;
    clients[2].next_event().await;
    let r = clients[3]
        .call("resources/read", json!({"uri": held}))
        .await;
    assert_eq!(
        r["result"]["contents"][0]["text"],
        format!("{held} v1"),
        "{r}"
    );
    let stats = clients[0].tool("stats", json!({})).await;
    assert_eq!(stats["by_uri"]["resources/read"][held], 2, "{stats}");
}

#[tokio::test]
async fn a_refused_uri_gets_a_clear_error_and_the_probe_reports_each_era() {
    let d = daemon("modern", "").await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let r = c
        .call("resources/subscribe", json!({"uri": "test://nack/x"}))
        .await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("did not acknowledge"), "{r}");
    drop(d);

    let config = common::temp_config(&format!(
        "[servers.old]\ncommand = {cmd:?}\n[servers.new]\ncommand = {cmd:?}\nenv = {{ SCRIPTED_ERA = \"modern\" }}\n[servers.forced]\ncommand = {cmd:?}\nprotocol = \"modern\"\n",
        cmd = common::scripted_upstream()
    ));
    let out = tokio::time::timeout(
        EVENT_TIMEOUT,
        tokio::process::Command::new(common::mcpmux_bin())
            .args(["check", "--probe", "--config"])
            .arg(&config)
            .output(),
    )
    .await
    .expect("check --probe finishes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reports: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(reports.len(), 3, "{stdout}");
    assert_eq!(reports[0]["era"], "legacy", "{stdout}");
    assert_eq!(reports[1]["era"], "modern", "{stdout}");
    assert_eq!(reports[1]["supportedVersions"], json!(["2026-07-28"]));
    assert!(reports[2]["error"]
        .as_str()
        .unwrap()
        .contains("not a 2026-07-28 server"));
    assert!(
        !out.status.success(),
        "a server that fails the probe fails the check"
    );
}

/// A modern-only stdio server that answers the era probe only after mcpmux stopped
/// waiting for it (slow to start: a loaded machine, a cold `npx`) is still used as a
/// 2026-07-28 server: its late `server/discover` answer wins over the handshake that
/// mcpmux began meanwhile, which the server refuses.
#[tokio::test]
async fn a_modern_stdio_server_slower_than_the_probe_is_still_modern() {
    let d = Daemon::start(&scripted_config(
        LISTEN,
        "[restart]\ninit_timeout_ms = 2000\n",
        "env = { SCRIPTED_ERA = \"modern\", SCRIPTED_SLOW_START = \"1\" }\n",
    ))
    .await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let echo = c.tool("echo", json!({"text": "late"})).await;
    assert!(echo.to_string().contains("late"), "{echo}");
    let stats = c.tool("stats", json!({})).await;
    assert_eq!(stats["era"], "modern", "{stats}");
    // The probe, then the handshake begun when the probe's wait ran out; one process
    // (no restart): one discover, one initialize.
    assert_eq!(stats["counts"]["server/discover"], 1, "{stats}");
    assert_eq!(stats["counts"]["initialize"], 1, "{stats}");
    let r = c.call("resources/subscribe", json!({"uri": URI})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    let stats = stats_until(&mut c, "a listen covering the URI", |s| {
        listens_covering(s, URI) == 1
    })
    .await;
    assert!(
        stats["counts"].get("resources/subscribe").is_none(),
        "{stats}"
    );
}

#[tokio::test]
async fn mcpmux_discover_merges_the_modern_upstreams_cache_hints() {
    let extra = "env = { SCRIPTED_ERA = \"modern\", SCRIPTED_TTL_MS = \"5000\", SCRIPTED_CACHE_SCOPE = \"public\" }\nttl_ms = 99\n";
    let d = Daemon::start(&scripted_config(LISTEN, "", extra)).await;
    let m = ModernClient::new(&d.url);
    let (_, r) = m.call(1, "server/discover", json!({})).await;
    assert_eq!(
        (
            r["result"]["ttlMs"].clone(),
            r["result"]["cacheScope"].clone()
        ),
        (json!(5000), json!("public")),
        "the upstream's own hints, not the ttl_ms config: {r}"
    );
    assert_eq!(r["result"]["capabilities"]["resources"]["subscribe"], true);
    // Its lists keep the hints the upstream gave them.
    let (_, r) = m.call(2, "tools/list", json!({})).await;
    assert_eq!(r["result"]["ttlMs"], 5000, "{r}");
}

#[tokio::test]
async fn a_modern_request_gets_the_eras_statuses_and_no_log_it_did_not_ask_for() {
    let d = daemon("dual", "").await;
    let m = ModernClient::new(&d.url);
    // The upstream's -32021 is HTTP 400 in this era, as mcpmux's own errors are.
    let (status, r) = m
        .call(1, "tools/call", json!({"name": "ask", "arguments": {}}))
        .await;
    assert_eq!(
        (status, r["error"]["code"].clone()),
        (400, json!(-32021)),
        "{r}"
    );

    // A legacy session sets a log level and leaves; a modern request without
    // `logLevel` then gets no log message (its answer is SSE: it has a progress token).
    let mut legacy = HttpClient::connect(&d.url, json!({})).await;
    legacy
        .call("logging/setLevel", json!({"level": "debug"}))
        .await;
    legacy.delete().await;
    let mut body = request(
        json!(2),
        "tools/call",
        json!({"name": "log", "arguments": {"level": "error", "data": "x"}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("p1");
    let mut s = m.open_stream(&body).await;
    let mut got = vec![];
    while let Some(ev) = s.next().await {
        let done = ev["id"] == 2;
        got.push(ev);
        if done {
            break;
        }
    }
    assert!(
        got.iter().all(|m| m["method"] != "notifications/message"),
        "{got:?}"
    );
    assert_eq!(
        got.last().unwrap()["result"]["resultType"],
        "complete",
        "{got:?}"
    );
}

#[tokio::test]
async fn an_input_required_read_is_never_cached_even_while_subscribed() {
    let d = Daemon::start(&scripted_config(
        LISTEN,
        "",
        "env = { SCRIPTED_ERA = \"dual\", SCRIPTED_CONFORMANCE = \"1\" }\n",
    ))
    .await;
    let uri = "test://input-required";
    // Held by a legacy session: a plain result would now be cached until its update.
    let mut holder = HttpClient::connect(&d.url, json!({})).await;
    let r = holder
        .call("resources/subscribe", json!({"uri": uri}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let m = ModernClient::new(&d.url);
    for id in [1, 2] {
        let mut body = request(json!(id), "resources/read", json!({"uri": uri}));
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"elicitation": {"form": {}}});
        let (_, r) = post_json(&m, &body).await;
        assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    }
    let stats = holder.tool("stats", json!({})).await;
    assert_eq!(
        stats["by_uri"]["resources/read"][uri], 3,
        "every read went upstream (the first, shared, once more as the client's own; \
         the second as its own at once): {stats}"
    );
}

/// "Not found" has a code per era: a 2026-07-28 upstream's -32602 (naming the URI in
/// `data.uri`) reaches a legacy client as -32002, and a modern client as it is.
#[tokio::test]
async fn a_modern_upstreams_not_found_is_32002_for_legacy_clients() {
    let d = daemon("modern", "").await;
    let mut legacy = HttpClient::connect(&d.url, json!({})).await;
    let r = legacy
        .call("resources/read", json!({"uri": "test://nope"}))
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["uri"], "test://nope", "{r}");
    let modern = ModernClient::new(&d.url);
    let (_, r) = modern
        .call(2, "resources/read", json!({"uri": "test://nope"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}
