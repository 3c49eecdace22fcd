//! `mcpmux connect URL`: a stdio host reaches a running daemon through the bridge,
//! sharing its upstream session with HTTP clients.

mod common;

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
