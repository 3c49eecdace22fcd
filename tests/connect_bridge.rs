//! `mcpmux connect URL`: a stdio host reaches a running daemon through the bridge,
//! sharing its upstream session with HTTP clients.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::*;
use serde_json::json;

#[tokio::test]
async fn stdio_host_through_connect_shares_the_daemons_upstream() {
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let mut host = LineClient::spawn(mcpmux_bin(), &["connect", &d.url]);
    let init = host.initialize(json!({})).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "mcpmux");
    let echo = host
        .call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "bridged"}}),
        )
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "bridged");

    // The bridged host and an HTTP client hold the same URI: one upstream subscribe.
    let mut http = HttpClient::connect(&d.url, json!({})).await;
    let uri = "test://static/1";
    assert_eq!(
        host.call("resources/subscribe", json!({"uri": uri})).await["result"],
        json!({})
    );
    http.call("resources/subscribe", json!({"uri": uri})).await;
    let stats = http.tool("stats", json!({})).await;
    assert_eq!(stats["by_uri"]["resources/subscribe"][uri], 1, "{stats}");

    // An update reaches the host over the daemon's GET stream, through the bridge.
    http.tool(
        "emit_update",
        json!({"uri": uri, "meta": {"via": "bridge"}}),
    )
    .await;
    let upd = host
        .expect_notification("notifications/resources/updated")
        .await;
    assert_eq!(upd["params"]["uri"], uri);
    assert_eq!(upd["params"]["_meta"]["via"], "bridge");
    assert_eq!(http.next_event().await["params"]["uri"], uri);

    // Bad input from the host gets an error line and the bridge keeps going.
    host.send_raw("{oops").await;
    assert_eq!(host.read().await["error"]["code"], -32700);
    assert_eq!(host.call("ping", json!({})).await["result"], json!({}));
}

/// A daemon (or profile) guarded by a bearer token is reached through the bridge with
/// the token from `--token-env` or `$MCPMUX_TOKEN`; without it the host gets an error
/// line, not a hang.
#[tokio::test]
async fn connect_sends_the_bearer_token_it_is_given() {
    let toml = scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\nauth_token_env = \"MCPMUX_TEST_TOKEN\"\n",
        "",
        "",
    );
    let d = Daemon::start_with_env(&toml, &[("MCPMUX_TEST_TOKEN", "sesame")]).await;
    for (args, env) in [
        (vec!["connect", &d.url], vec![("MCPMUX_TOKEN", "sesame")]),
        (
            vec!["connect", &d.url, "--token-env", "MY_TOKEN"],
            vec![("MY_TOKEN", "sesame")],
        ),
    ] {
        let mut host = LineClient::spawn_with_env(mcpmux_bin(), &args, &env);
        let init = host.initialize(json!({})).await;
        assert_eq!(init["result"]["serverInfo"]["name"], "mcpmux", "{init}");
    }
    let mut host =
        LineClient::spawn_with_env(mcpmux_bin(), &["connect", &d.url], &[("MCPMUX_TOKEN", "")]);
    host.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    let refused = host.read().await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("401"),
        "{refused}"
    );
}

/// Sends a 2026-07-28 request through the bridge and reads until its response;
/// returns what came first and the response.
async fn modern_call(
    host: &mut LineClient,
    id: serde_json::Value,
    method: &str,
    params: serde_json::Value,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let body = common::modern::request(id.clone(), method, params);
    host.send_raw(&body.to_string()).await;
    let mut before = vec![];
    loop {
        let m = host.read().await;
        if m["id"] == id && m.get("method").is_none() {
            return (before, m);
        }
        before.push(m);
    }
}

#[tokio::test]
async fn a_modern_stdio_host_through_connect_discovers_calls_and_listens() {
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let mut host = LineClient::spawn(mcpmux_bin(), &["connect", &d.url]);
    let (_, discover) = modern_call(&mut host, json!(1), "server/discover", json!({})).await;
    assert_eq!(
        discover["result"]["supportedVersions"][0], "2026-07-28",
        "{discover}"
    );

    // The bridge learns the tool's x-mcp-header annotation from the list and sends
    // the Mcp-Param header the daemon checks.
    let (_, tools) = modern_call(&mut host, json!(2), "tools/list", json!({})).await;
    assert!(
        tools["result"]["tools"].as_array().unwrap().len() > 3,
        "{tools}"
    );
    let (_, call) = modern_call(
        &mut host,
        json!(3),
        "tools/call",
        json!({"name": "regional", "arguments": {"region": "eu west", "query": "q"}}),
    )
    .await;
    assert_eq!(call["result"]["content"][0]["text"], "eu west: q", "{call}");

    // A listen through the bridge: acknowledged, tagged updates; the host's
    // notifications/cancelled closes its stream and releases the URI upstream.
    let uri = "test://static/1";
    let listen = common::modern::request(
        json!("listen:0"),
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri]}}),
    );
    host.send_raw(&listen.to_string()).await;
    let ack = host.read().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let mut http = HttpClient::connect(&d.url, json!({})).await;
    http.tool("emit_update", json!({"uri": uri})).await;
    let upd = host
        .expect_notification("notifications/resources/updated")
        .await;
    assert_eq!(
        upd["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen:0"
    );
    host.notify("notifications/cancelled", json!({"requestId": "listen:0"}))
        .await;
    let start = std::time::Instant::now();
    loop {
        let stats = http.tool("stats", json!({})).await;
        if stats["subscribed"] == json!([]) {
            assert_eq!(stats["by_uri"]["resources/unsubscribe"][uri], 1, "{stats}");
            break;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "never released: {stats}");
    }
}
