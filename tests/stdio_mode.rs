//! `mcpmux stdio` end to end: a client on mcpmux's stdin/stdout, the scripted
//! upstream as a real child process behind it.

use crate::common;

use common::*;
use serde_json::json;

fn start() -> LineClient {
    let cfg = temp_config(&scripted_config("", "", ""));
    LineClient::spawn(mcpmux_bin(), &["stdio", "--config", cfg.to_str().unwrap()])
}

fn count(stats: &serde_json::Value, method: &str) -> u64 {
    stats["counts"][method].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn stdio_client_lists_calls_subscribes_and_gets_updates_with_meta() {
    let mut c = start();
    let init = c.initialize(json!({})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        true
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "mcpmux");

    let tools = c.call("tools/list", json!({})).await;
    assert!(tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo"));
    let echo = c
        .call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "hi");

    let sub = c
        .call("resources/subscribe", json!({"uri": "test://static/1"}))
        .await;
    assert_eq!(sub["result"], json!({}));
    // Idempotent per client: a second subscribe sends nothing upstream.
    c.call("resources/subscribe", json!({"uri": "test://static/1"}))
        .await;
    c.tool(
        "emit_update",
        json!({"uri": "test://static/1", "meta": {"trace": "abc", "n": [1, 2]}}),
    )
    .await;
    let upd = c
        .expect_notification("notifications/resources/updated")
        .await;
    assert_eq!(upd["params"]["uri"], "test://static/1");
    assert_eq!(upd["params"]["_meta"], json!({"trace": "abc", "n": [1, 2]}));
    // An update for a URI this client does not hold is not delivered. The upstream
    // writes it before the tool's result, and stdout keeps that order, so the
    // notifications read before the result hold it if it was delivered.
    c.tool("emit_update", json!({"uri": "test://static/2"}))
        .await;
    let stats = c.tool("stats", json!({})).await;
    assert_eq!(count(&stats, "resources/subscribe"), 1, "{stats}");
    assert!(
        !c.notifications
            .iter()
            .any(|n| n["params"]["uri"] == "test://static/2"),
        "update for an unheld URI leaked: {:?}",
        c.notifications
    );

    assert_eq!(
        c.call("resources/unsubscribe", json!({"uri": "test://static/1"}))
            .await["result"],
        json!({})
    );
    let stats = c.tool("stats", json!({})).await;
    assert_eq!(count(&stats, "resources/unsubscribe"), 1, "{stats}");
    assert_eq!(stats["subscribed"], json!([]));

    let read = c
        .call("resources/read", json!({"uri": "test://static/1"}))
        .await;
    assert_eq!(read["result"]["contents"][0]["uri"], "test://static/1");
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn stdio_bad_input_gets_errors_and_the_session_keeps_working() {
    let mut c = start();
    c.initialize(json!({})).await;
    c.send_raw("{not json").await;
    assert_eq!(c.read().await["error"]["code"], -32700);
    c.send_raw(r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#)
        .await;
    let v = c.read().await;
    assert_eq!(
        (v["error"]["code"].clone(), v["id"].clone()),
        (json!(-32600), json!(5))
    );
    c.send_raw(r#"[1,2]"#).await;
    assert_eq!(c.read().await["error"]["code"], -32600);
    // An invalid member of a batch is answered under its own id, when it has one.
    c.send_raw(r#"[{"jsonrpc":"2.0","id":7,"method":"ping","params":1}]"#)
        .await;
    let mut answer = c.read().await;
    for _ in 0..3 {
        if answer["id"] == json!(7) {
            break;
        }
        answer = c.read().await;
    }
    assert_eq!(answer["id"], json!(7), "{answer}");
    assert!(answer["error"]["code"].is_i64(), "{answer}");
    let unknown = c.call("no/such/method", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad = c.call("resources/subscribe", json!({"url": "x"})).await;
    assert_eq!(bad["error"]["code"], -32602);
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));
}

/// Sends a 2026-07-28 request (the era's `_meta` added) and reads until its response;
/// returns the messages that came first and the response.
async fn modern_call(
    c: &mut LineClient,
    id: serde_json::Value,
    method: &str,
    params: serde_json::Value,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let body = common::modern::request(id.clone(), method, params);
    c.send_raw(&body.to_string()).await;
    let mut before = vec![];
    loop {
        let m = c.read().await;
        if m["id"] == id && m.get("method").is_none() {
            return (before, m);
        }
        before.push(m);
    }
}

#[tokio::test]
async fn a_modern_stdio_client_discovers_listens_and_closes_its_listen() {
    let mut c = start();
    let (_, discover) = modern_call(&mut c, json!(1), "server/discover", json!({})).await;
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    assert_eq!(discover["result"]["supportedVersions"][0], "2026-07-28");

    // A listen: acknowledged first, tagged with its id.
    let listen = common::modern::request(
        json!("listen:0"),
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": ["test://static/1"]}}),
    );
    c.send_raw(&listen.to_string()).await;
    let ack = c.read().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen:0"
    );

    // An update emitted by a modern tool call on the same connection reaches the listen.
    let (before, done) = modern_call(
        &mut c,
        json!(2),
        "tools/call",
        json!({"name": "emit_update", "arguments": {"uri": "test://static/1"}}),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["method"], "notifications/resources/updated");
    assert_eq!(
        before[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen:0"
    );

    // notifications/cancelled naming the listen closes it: the URI is released upstream.
    c.notify("notifications/cancelled", json!({"requestId": "listen:0"}))
        .await;
    let (_, stats) = modern_call(
        &mut c,
        json!(3),
        "tools/call",
        json!({"name": "stats", "arguments": {}}),
    )
    .await;
    let stats = &stats["result"]["structuredContent"];
    assert_eq!(count(stats, "resources/unsubscribe"), 1, "{stats}");
    assert_eq!(stats["subscribed"], json!([]), "{stats}");

    // A legacy session on the same connection still works.
    let init = c.initialize(json!({})).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "mcpmux");
}

/// A client may reuse a listen's id once it cancelled it (the hub marks the end of each
/// request's messages on the connection, and the writer counts them): each new listen
/// gets its own URI's updates, tagged with the id, and nothing for the URI the listen
/// before it held, however often the id is reused.
#[tokio::test]
async fn a_stdio_listen_id_reused_after_a_cancel_gets_only_its_own_updates() {
    let mut c = start();
    let (a, b) = ("test://static/1", "test://static/2");
    for (round, (uri, other)) in [(a, b), (b, a), (a, b), (b, a)].into_iter().enumerate() {
        let listen = common::modern::request(
            json!("L"),
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": [uri]}}),
        );
        c.send_raw(&listen.to_string()).await;
        let ack = c.read().await;
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "round {round}: {ack}"
        );
        let emit = |u: &str| json!({"name": "emit_update", "arguments": {"uri": u}});
        let (before, _) = modern_call(
            &mut c,
            json!(format!("o{round}")),
            "tools/call",
            emit(other),
        )
        .await;
        assert!(before.is_empty(), "round {round}, {other}: {before:?}");
        let (before, _) =
            modern_call(&mut c, json!(format!("u{round}")), "tools/call", emit(uri)).await;
        assert_eq!(before.len(), 1, "round {round}: {before:?}");
        assert_eq!(before[0]["params"]["uri"], uri, "round {round}");
        assert_eq!(
            before[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L",
            "round {round}"
        );
        c.notify("notifications/cancelled", json!({"requestId": "L"}))
            .await;
    }
}

/// Methods the 2026-07-28 era does not have are refused at the stdio edge (-32601 naming
/// the method and the version), as over HTTP; the connection keeps working.
#[tokio::test]
async fn a_modern_stdio_request_for_a_handshake_era_method_is_method_not_found() {
    let mut c = start();
    for (i, method) in ["ping", "logging/setLevel", "resources/subscribe"]
        .into_iter()
        .enumerate()
    {
        let (_, r) = modern_call(
            &mut c,
            json!(i + 10),
            method,
            json!({"level": "info", "uri": "test://static/1"}),
        )
        .await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
        let text = r["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains(method) && text.contains("2026-07-28"), "{r}");
    }
    let (_, discover) = modern_call(&mut c, json!(20), "server/discover", json!({})).await;
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
}
