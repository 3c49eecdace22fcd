//! The core over Streamable HTTP, end to end: `mcpmux serve` on 127.0.0.1:0 in front
//! of the scripted upstream (a real child process that records what it receives).

use crate::common;

use common::http::{post, read_body, Daemon, HttpClient};
use common::*;
use futures_util::future::join_all;
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";

async fn daemon(extra: &str) -> Daemon {
    Daemon::start(&scripted_config(LISTEN, extra, "")).await
}

fn count(stats: &Value, method: &str) -> u64 {
    stats["counts"][method].as_u64().unwrap_or(0)
}

fn count_uri(stats: &Value, method: &str, uri: &str) -> u64 {
    stats["by_uri"][method][uri].as_u64().unwrap_or(0)
}

const URI: &str = "test://static/1";

#[tokio::test]
async fn ten_clients_one_upstream_subscribe_targeted_fanout_refcounted_unsubscribe() {
    let d = daemon("").await;
    let mut clients: Vec<HttpClient> =
        join_all((0..10).map(|_| HttpClient::connect(&d.url, json!({})))).await;
    let mut bystander = HttpClient::connect(&d.url, json!({})).await;

    // 10 concurrent subscribes → exactly one upstream subscribe.
    let answers = join_all(
        clients
            .iter_mut()
            .map(|c| c.call("resources/subscribe", json!({"uri": URI}))),
    )
    .await;
    for a in &answers {
        assert_eq!(a["result"], json!({}), "{a}");
    }
    let stats = bystander.tool("stats", json!({})).await;
    assert_eq!(count_uri(&stats, "resources/subscribe", URI), 1, "{stats}");

    // One update (with _meta) reaches all 10, and nobody else.
    let meta = json!({"origin": "test", "seq": [1, 2, 3]});
    bystander
        .tool("emit_update", json!({"uri": URI, "meta": meta}))
        .await;
    for c in clients.iter_mut() {
        let ev = c.next_event().await;
        assert_eq!(ev["method"], "notifications/resources/updated");
        assert_eq!(ev["params"]["uri"], URI);
        assert_eq!(ev["params"]["_meta"], meta);
    }
    // The bystander's stream must stay silent: a marker list_changed (broadcast to all)
    // proves its stream delivered everything sent before it.
    bystander
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let first = bystander.next_event().await;
    assert_eq!(
        first["method"], "notifications/tools/list_changed",
        "bystander got {first}"
    );

    // 9 unsubscribe → no upstream unsubscribe; the 10th → exactly one.
    for c in clients.iter_mut().take(9) {
        assert_eq!(
            c.call("resources/unsubscribe", json!({"uri": URI})).await["result"],
            json!({})
        );
    }
    let stats = bystander.tool("stats", json!({})).await;
    assert_eq!(
        count_uri(&stats, "resources/unsubscribe", URI),
        0,
        "{stats}"
    );
    clients[9]
        .call("resources/unsubscribe", json!({"uri": URI}))
        .await;
    let stats = bystander.tool("stats", json!({})).await;
    assert_eq!(
        count_uri(&stats, "resources/unsubscribe", URI),
        1,
        "{stats}"
    );
    assert_eq!(stats["subscribed"], json!([]));
}

#[tokio::test]
async fn a_client_that_leaves_without_unsubscribing_releases_its_share() {
    let d = daemon("").await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let mut b = HttpClient::connect(&d.url, json!({})).await;
    let mut observer = HttpClient::connect(&d.url, json!({})).await;
    a.call("resources/subscribe", json!({"uri": URI})).await;
    b.call("resources/subscribe", json!({"uri": URI})).await;
    assert_eq!(a.delete().await, 200);
    let stats = observer.tool("stats", json!({})).await;
    assert_eq!(
        count_uri(&stats, "resources/unsubscribe", URI),
        0,
        "b still holds it: {stats}"
    );
    assert_eq!(b.delete().await, 200);
    let stats = observer.tool("stats", json!({})).await;
    assert_eq!(
        count_uri(&stats, "resources/unsubscribe", URI),
        1,
        "{stats}"
    );
}

#[tokio::test]
async fn a_client_that_declared_no_subscribe_gets_an_error_and_causes_no_upstream_traffic() {
    let d = daemon("").await;
    let mut c = HttpClient::connect(&d.url, json!({"resources": {"subscribe": false}})).await;
    let r = c.call("resources/subscribe", json!({"uri": URI})).await;
    assert_eq!(r["error"]["code"], -32601);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("client_capability"),
        "{r}"
    );
    let stats = c.tool("stats", json!({})).await;
    assert_eq!(count(&stats, "resources/subscribe"), 0);

    // And it never receives updates, even for a URI that another client holds, so
    // the update really is fanned out.
    let mut holder = HttpClient::connect(&d.url, json!({})).await;
    assert_eq!(
        holder
            .call("resources/subscribe", json!({"uri": URI}))
            .await["result"],
        json!({})
    );
    c.tool("emit_update", json!({"uri": URI})).await;
    let update = holder.next_event().await;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], URI);
    // The update has been queued for every client it goes to. A broadcast marker sent
    // after it proves that `c`'s stream delivered everything sent before it.
    c.tool("emit_list_changed", json!({"kind": "prompts"}))
        .await;
    assert_eq!(
        c.next_event().await["method"],
        "notifications/prompts/list_changed",
        "the client that declared no subscribe got something else first"
    );
    assert_eq!(
        holder.next_event().await["method"],
        "notifications/prompts/list_changed"
    );
}

#[tokio::test]
async fn required_mode_refuses_clients_that_did_not_declare_true() {
    let d = daemon("[subscriptions]\nclient_capability = \"required\"\n").await;
    let mut silent = HttpClient::connect(&d.url, json!({})).await;
    let r = silent
        .call("resources/subscribe", json!({"uri": URI}))
        .await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"required\""),
        "{r}"
    );
    let mut declared = HttpClient::connect(&d.url, json!({"resources": {"subscribe": true}})).await;
    assert_eq!(
        declared
            .call("resources/subscribe", json!({"uri": URI}))
            .await["result"],
        json!({})
    );
    let stats = declared.tool("stats", json!({})).await;
    assert_eq!(count(&stats, "resources/subscribe"), 1);
}

#[tokio::test]
async fn hostile_http_input_gets_the_right_errors_and_others_keep_working() {
    let d = daemon("[limits]\nmax_message_bytes = 65536\n").await;
    let mut good = HttpClient::connect(&d.url, json!({})).await;
    let http = reqwest::Client::new();
    let raw = |body: &'static [u8]| {
        http.post(&d.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", good.session.clone())
            .body(body)
    };

    // Malformed JSON → 400 / -32700.
    let r = raw(b"{not json").send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(read_body(r).await[0]["error"]["code"], -32700);
    // Wrong jsonrpc version → 400 / -32600.
    let r = raw(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(read_body(r).await[0]["error"]["code"], -32600);
    // Over-long body → 413.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(100_000)
    );
    let r = http
        .post(&d.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", good.session.clone())
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // Unknown session → 404.
    let r = post(
        &http,
        &d.url,
        Some("not-a-session"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    )
    .await;
    assert_eq!(r.status(), 404);
    // Bad Origin → 403.
    let ping_with = |header: &'static str, value: &'static str| {
        http.post(&d.url)
            .header(header, value)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string())
            .send()
    };
    let r = ping_with("origin", "http://evil.example").await.unwrap();
    assert_eq!(r.status(), 403);
    // Foreign Host (DNS rebinding) → 403.
    let r = ping_with("host", "attacker.example:7878").await.unwrap();
    assert_eq!(r.status(), 403);
    // An unknown method is a JSON-RPC error from the upstream, passed through.
    assert_eq!(
        good.call("no/such/method", json!({})).await["error"]["code"],
        -32601
    );
    // The good client is untouched.
    assert_eq!(good.call("ping", json!({})).await["result"], json!({}));
    assert_eq!(
        good.tool("echo", json!({"text": "still here"})).await["content"][0]["text"],
        "still here"
    );
}

#[tokio::test]
async fn server_discover_probe_fails_fast_and_initialize_works() {
    let d = daemon("").await;
    let http = reqwest::Client::new();
    let r = post(
        &http,
        &d.url,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}),
    )
    .await;
    assert!(r.status().is_client_error(), "{}", r.status());
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));
}
