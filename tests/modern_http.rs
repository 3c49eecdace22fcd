//! 2026-07-28 clients over Streamable HTTP against the real daemon and the scripted
//! (legacy) upstream: stateless requests, `server/discover`, the era's validation
//! table, result shape, and `subscriptions/listen` sharing one upstream subscription
//! with legacy sessions.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::modern::{request, ModernClient, VERSION};
use common::scripted_config;
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";
const URI: &str = "test://static/1";

async fn daemon() -> Daemon {
    Daemon::start(&scripted_config(
        LISTEN,
        "",
        "ttl_ms = 1234\ncache_scope = \"public\"\n",
    ))
    .await
}

#[tokio::test]
async fn discover_lists_both_eras_and_the_aggregated_capabilities() {
    let d = daemon().await;
    let c = ModernClient::new(&d.url);
    let (status, r) = c.call(1, "server/discover", json!({})).await;
    assert_eq!(status, 200, "{r}");
    let result = &r["result"];
    assert_eq!(result["resultType"], "complete");
    let versions = result["supportedVersions"].as_array().unwrap();
    assert_eq!(versions[0], VERSION);
    assert!(versions.contains(&json!("2025-11-25")), "{r}");
    assert_eq!(result["capabilities"]["resources"]["subscribe"], true);
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpmux"
    );
    assert_eq!(
        (result["ttlMs"].clone(), result["cacheScope"].clone()),
        (json!(1234), json!("public"))
    );
}

#[tokio::test]
async fn results_carry_result_type_and_cache_hints_and_not_found_is_32602() {
    let d = daemon().await;
    let c = ModernClient::new(&d.url);
    let (status, r) = c
        .call(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "hi");
    let (_, r) = c.call(2, "tools/list", json!({})).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["ttlMs"], 1234, "{r}");
    assert_eq!(r["result"]["cacheScope"], "public");
    let (_, r) = c.call(3, "resources/read", json!({"uri": URI})).await;
    assert_eq!(r["result"]["ttlMs"], 1234, "{r}");
    // The scripted server answers an unknown URI with the legacy -32002.
    let (_, r) = c
        .call(4, "resources/read", json!({"uri": "test://nothing/here"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

/// One row of the validation table: what it shows, the headers that replace the
/// correct ones (an empty value removes one), the body, and the expected HTTP status
/// and JSON-RPC code.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Value,
    u16,
    i64,
);

#[tokio::test]
async fn the_validation_table() {
    let d = daemon().await;
    let c = ModernClient::new(&d.url);
    let call = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": meta}})
    };
    let good_meta = common::modern::meta();
    let cases: Vec<Case> = vec![
        (
            "version header differs from _meta",
            vec![("mcp-protocol-version", "2025-11-25")],
            call(good_meta.clone()),
            400,
            -32020,
        ),
        (
            "Mcp-Method differs",
            vec![("mcp-method", "tools/list")],
            call(good_meta.clone()),
            400,
            -32020,
        ),
        (
            "Mcp-Name missing",
            vec![("mcp-name", "")],
            call(good_meta.clone()),
            400,
            -32020,
        ),
        (
            "Mcp-Name differs",
            vec![("mcp-name", "other")],
            call(good_meta.clone()),
            400,
            -32020,
        ),
        (
            "unsupported version",
            vec![("mcp-protocol-version", "2030-01-01")],
            call(
                json!({"io.modelcontextprotocol/protocolVersion": "2030-01-01",
                "io.modelcontextprotocol/clientCapabilities": {}}),
            ),
            400,
            -32022,
        ),
        (
            "clientCapabilities missing",
            vec![],
            call(json!({"io.modelcontextprotocol/protocolVersion": VERSION})),
            400,
            -32602,
        ),
        (
            "ping does not exist in this era",
            vec![],
            request(json!(7), "ping", json!({})),
            404,
            -32601,
        ),
        (
            "resources/subscribe does not exist in this era",
            vec![],
            request(json!(7), "resources/subscribe", json!({"uri": URI})),
            404,
            -32601,
        ),
        (
            "logging/setLevel does not exist in this era",
            vec![],
            request(json!(7), "logging/setLevel", json!({"level": "debug"})),
            404,
            -32601,
        ),
        (
            "unknown method",
            vec![],
            request(json!(7), "nope/nothing", json!({})),
            404,
            -32601,
        ),
        (
            "a listen whose Accept has no event stream",
            vec![("accept", "application/json")],
            request(
                json!(7),
                "subscriptions/listen",
                json!({"notifications": {"resourceSubscriptions": [URI]}}),
            ),
            406,
            -32000,
        ),
    ];
    for (what, headers, body, status, code) in cases {
        let resp = tokio::time::timeout(common::EVENT_TIMEOUT, c.post_with(&body, &headers))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer"));
        let got_status = resp.status().as_u16();
        let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(
            (got_status, v["error"]["code"].as_i64()),
            (status, Some(code)),
            "{what}: {v}"
        );
        if code == -32022 {
            let supported = &v["error"]["data"]["supported"];
            assert!(
                supported.as_array().unwrap().contains(&json!(VERSION)),
                "{v}"
            );
        }
        // The next request is still served.
        let (s, r) = c
            .call(
                8,
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "ok"}}),
            )
            .await;
        assert_eq!(
            (s, r["result"]["content"][0]["text"].clone()),
            (200, json!("ok")),
            "after {what}"
        );
    }
}

#[tokio::test]
async fn modern_listens_and_legacy_sessions_share_one_upstream_subscription() {
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    // Three modern listens (two with the same id, as every TS SDK v2 client's first
    // listen is "listen:0") and three legacy sessions hold one URI.
    let mut listens = vec![];
    for id in ["listen:0", "listen:0", "other"] {
        let (s, ack) = m.listen(id, &[URI]).await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            id
        );
        assert_eq!(
            ack["params"]["notifications"]["resourceSubscriptions"],
            json!([URI])
        );
        listens.push((id, s));
    }
    let mut legacy = vec![];
    for _ in 0..3 {
        let mut c = HttpClient::connect(&d.url, json!({})).await;
        let r = c.call("resources/subscribe", json!({"uri": URI})).await;
        assert_eq!(r["result"], json!({}), "{r}");
        legacy.push(c);
    }
    // Bystanders: a listen on another URI and a legacy session holding nothing.
    let (mut other_listen, _) = m.listen("listen:0", &["test://static/2"]).await;
    let mut bystander = HttpClient::connect(&d.url, json!({})).await;
    let stats = bystander.tool("stats", json!({})).await;
    assert_eq!(
        stats["counts"]["resources/subscribe"], 2,
        "one per URI: {stats}"
    );

    let r = bystander
        .tool("emit_update", json!({"uri": URI, "meta": {"k": "v"}}))
        .await;
    assert!(r.is_object(), "{r}");
    for (id, s) in &mut listens {
        let ev = s.next().await.expect("the update");
        assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
        assert_eq!(ev["params"]["uri"], URI);
        assert_eq!(
            ev["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            *id
        );
        assert_eq!(
            ev["params"]["_meta"]["k"], "v",
            "the upstream's _meta is kept"
        );
    }
    for c in &mut legacy {
        let ev = c.next_event().await;
        assert_eq!(ev["params"]["uri"], URI, "{ev}");
        assert!(ev["params"]["_meta"]
            .get("io.modelcontextprotocol/subscriptionId")
            .is_none());
    }
    // The bystanders: an update of the other listen's URI is the first thing it gets.
    bystander
        .tool("emit_update", json!({"uri": "test://static/2"}))
        .await;
    let first = other_listen.next().await.unwrap();
    assert_eq!(first["params"]["uri"], "test://static/2", "{first}");
    // And the legacy bystander: a list_changed sent now follows on its GET stream
    // anything the daemon sent it before.
    bystander
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let before = bystander
        .events_until("notifications/tools/list_changed")
        .await;
    assert!(before.is_empty(), "a bystander got {before:?}");

    // Closing the modern streams and unsubscribing the legacy sessions: exactly one
    // upstream unsubscribe for the URI, after the last holder.
    drop(listens);
    for c in &mut legacy[..2] {
        c.call("resources/unsubscribe", json!({"uri": URI})).await;
    }
    let stats = bystander.tool("stats", json!({})).await;
    assert_eq!(
        stats["counts"].get("resources/unsubscribe"),
        None,
        "{stats}"
    );
    legacy[2]
        .call("resources/unsubscribe", json!({"uri": URI}))
        .await;
    // The closed streams are released when the daemon notices them: wait for it.
    let stats = wait_for(&mut bystander, "/subscribed", json!(["test://static/2"])).await;
    assert_eq!(stats["counts"]["resources/unsubscribe"], 1, "{stats}");
}

#[tokio::test]
async fn a_burst_reaches_every_listen_and_session_whole_in_order_and_tagged_as_its_own() {
    // The hub queues a burst's updates as runs shared by the holders (one per session
    // set, one per listen id): each holder still gets every update, in order, in its
    // own form.
    const COUNT: usize = 300;
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    let mut listens = vec![];
    for id in ["listen:0", "listen:0", "other"] {
        let (s, _ack) = m.listen(id, &[URI]).await;
        listens.push((id, s));
    }
    let mut session = HttpClient::connect(&d.url, json!({})).await;
    let r = session
        .call("resources/subscribe", json!({"uri": URI}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let mut bystander = HttpClient::connect(&d.url, json!({})).await;
    let r = bystander
        .tool(
            "emit_updates",
            json!({"uri": URI, "count": COUNT, "stamp": true}),
        )
        .await;
    assert_eq!(r["emitted"], COUNT, "{r}");
    let stamps = |evs: &[Value], tag: Option<&str>| {
        let mut last = 0;
        for ev in evs {
            assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
            assert_eq!(ev["params"]["uri"], URI, "{ev}");
            let meta = &ev["params"]["_meta"];
            let id = meta.get("io.modelcontextprotocol/subscriptionId");
            assert_eq!(id.and_then(Value::as_str), tag, "{ev}");
            let t = meta["t"].as_u64().expect("stamped");
            assert!(t >= last, "out of order: {t} after {last}");
            last = t;
        }
    };
    for (id, s) in &mut listens {
        let mut evs = vec![];
        while evs.len() < COUNT {
            evs.push(s.next().await.expect("the listen stays open"));
        }
        stamps(&evs, Some(id));
    }
    let mut evs = vec![];
    while evs.len() < COUNT {
        evs.push(session.next_event().await);
    }
    stamps(&evs, None);
}

#[tokio::test]
async fn progress_travels_on_the_requests_stream_and_closing_it_cancels_upstream() {
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    let mut body = request(
        json!(1),
        "tools/call",
        json!({"name": "progress", "arguments": {"steps": 3}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("tok");
    let mut s = m.open_stream(&body).await;
    let mut got = vec![];
    while let Some(ev) = s.next().await {
        got.push(ev);
    }
    let progress: Vec<&Value> = got
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{got:?}");
    assert!(progress
        .iter()
        .all(|p| p["params"]["progressToken"] == "tok"));
    let last = got.last().unwrap();
    assert_eq!(last["result"]["resultType"], "complete", "{last}");

    // A call the upstream never answers: closing its stream is its cancellation.
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    let hang = m
        .open_stream(&request(
            json!(2),
            "tools/call",
            json!({"name": "hang", "arguments": {}}),
        ))
        .await;
    wait_for(&mut watcher, "/pending/hung", json!(1)).await;
    drop(hang);
    let stats = wait_for(&mut watcher, "/pending/hung", json!(0)).await;
    assert_eq!(stats["counts"]["notifications/cancelled"], 1, "{stats}");
}

/// Polls the scripted upstream's `stats` until `path` equals `want`; returns them.
async fn wait_for(watcher: &mut HttpClient, path: &str, want: Value) -> Value {
    tokio::time::timeout(common::EVENT_TIMEOUT, async {
        loop {
            let stats = watcher.tool("stats", json!({})).await;
            if stats.pointer(path) == Some(&want) {
                return stats;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("stats {path} never became {want}"))
}

/// A `tools/call` of `sample` from a modern client declaring `capabilities`.
fn sample_call(id: u64, capabilities: Value, extra: Value) -> Value {
    let mut params = json!({"name": "sample", "arguments": {"prompt": "hi"}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let mut body = request(json!(id), "tools/call", params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    body
}

async fn post_json(m: &ModernClient, body: &Value) -> Value {
    let resp = m.post_with(body, &[]).await;
    serde_json::from_str(&resp.text().await.unwrap()).unwrap()
}

#[tokio::test]
async fn a_legacy_servers_sampling_request_reaches_a_modern_client_as_input_required() {
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    let sampling = json!({"sampling": {}});
    // Round 1: the scripted server asks for sampling while serving the call.
    let r = post_json(&m, &sample_call(1, sampling.clone(), json!({}))).await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let (key, input) = result["inputRequests"]
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("one input request");
    assert_eq!(input["method"], "sampling/createMessage", "{r}");
    assert_eq!(input["params"]["messages"][0]["content"]["text"], "hi");
    let state = result["requestState"].as_str().unwrap().to_owned();

    // A tampered state is refused, and changes nothing.
    let mut tampered = state.clone();
    tampered.insert(0, 'x');
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"});
    let retry = |id, s: &str| {
        sample_call(
            id,
            sampling.clone(),
            json!({"inputResponses": {key.clone(): answer.clone()}, "requestState": s}),
        )
    };
    let r = post_json(&m, &retry(2, &tampered)).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The retry answers the held request; the call's own result comes back.
    let r = post_json(&m, &retry(3, &state)).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(r.to_string().contains("sampled"), "{r}");
    // The same state again: already used.
    let r = post_json(&m, &retry(4, &state)).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Also when the member's name is spelled with an escape: still read as a retry.
    let text = retry(5, &state)
        .to_string()
        .replace("\"requestState\"", "\"request\\u0053tate\"");
    assert!(text.contains("u0053"), "{text}");
    let resp = m
        .http
        .post(&m.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "sample")
        .body(text)
        .send()
        .await
        .unwrap();
    let r: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The server's request got exactly one answer, and nothing is left waiting.
    let mut watcher = HttpClient::connect(&d.url, json!({})).await;
    let stats = watcher.tool("stats", json!({})).await;
    assert_eq!(stats["counts"]["<response>"], 1, "{stats}");
    assert_eq!(stats["pending"]["sampling"], 0, "{stats}");
}

#[tokio::test]
async fn a_modern_client_without_the_capability_is_not_asked() {
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    let r = post_json(&m, &sample_call(1, json!({}), json!({}))).await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert!(
        r.to_string()
            .contains("did not declare the sampling capability"),
        "{r}"
    );
}

#[tokio::test]
async fn mcp_param_headers_must_mirror_x_mcp_header_arguments() {
    let d = daemon().await;
    let m = ModernClient::new(&d.url);
    let body = request(
        json!(1),
        "tools/call",
        json!({"name": "regional", "arguments": {"region": "us-west1", "query": "q"}}),
    );
    for (headers, status, code) in [
        (vec![("mcp-param-region", "us-west1")], 200, None),
        (vec![], 400, Some(-32020)),
        (vec![("Mcp-Param-Region", "eu-north1")], 400, Some(-32020)),
    ] {
        let resp = m.post_with(&body, &headers).await;
        let got = resp.status().as_u16();
        let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(
            (got, v["error"]["code"].as_i64()),
            (status, code),
            "{headers:?}: {v}"
        );
        if code.is_none() {
            assert_eq!(v["result"]["content"][0]["text"], "us-west1: q", "{v}");
        }
    }
}
