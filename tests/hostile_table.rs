//! Issue 5's hostile-input table against the real daemon (with a bearer token): each
//! input gets the documented error, and a well-behaved client is untouched after each.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::*;
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-token-for-tests";

async fn daemon() -> Daemon {
    let cfg = scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\nauth_token_env = \"MCPMUX_TEST_TOKEN\"\n",
        "[limits]\nmax_message_bytes = 1048576\n",
        "",
    );
    Daemon::start_with_env(&cfg, &[("MCPMUX_TEST_TOKEN", TOKEN)]).await
}

struct Probe {
    http: reqwest::Client,
    url: String,
    session: String,
    version: String,
}

impl Probe {
    fn post(&self, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
            .body(body)
    }
}

async fn status_and_code(r: reqwest::RequestBuilder) -> (u16, Option<i64>) {
    let resp = r.send().await.expect("the proxy answers");
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    let code = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["code"].as_i64());
    (status, code)
}

#[tokio::test]
async fn hostile_inputs_get_documented_errors_and_others_are_untouched() {
    let d = daemon().await;
    let mut good = HttpClient::connect_with(&d.url, json!({}), Some(TOKEN)).await;
    let victim = HttpClient::connect_with(&d.url, json!({}), Some(TOKEN)).await;
    let p = Probe {
        http: reqwest::Client::new(),
        url: d.url.clone(),
        session: victim.session.clone(),
        version: victim.version.clone(),
    };
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{}}}}}}}"#,
        "[".repeat(5_000) + &"]".repeat(5_000)
    );
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, Option<i64>)> = vec![
        (
            "invalid UTF-8",
            p.post(&b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}"[..]),
            400,
            Some(-32700),
        ),
        (
            "truncated JSON",
            p.post(r#"{"jsonrpc":"2.0","id":1,"meth"#),
            400,
            Some(-32700),
        ),
        ("deeply nested JSON", p.post(deep), 400, None),
        (
            "batch in 2025-06-18",
            p.post(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            400,
            Some(-32600),
        ),
        (
            "response to an id never sent",
            p.post(r#"{"jsonrpc":"2.0","id":424242,"result":{}}"#),
            202,
            None,
        ),
        (
            "missing token",
            p.http
                .post(&p.url)
                .header("content-type", "application/json")
                .body("{}"),
            401,
            None,
        ),
        (
            "wrong token",
            p.http
                .post(&p.url)
                .bearer_auth("nope")
                .header("content-type", "application/json")
                .body("{}"),
            401,
            None,
        ),
        (
            "bad Origin",
            p.post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
                .header("origin", "http://evil.example"),
            403,
            None,
        ),
    ];
    for (name, req, want_status, want_code) in cases {
        let (status, code) = status_and_code(req).await;
        assert_eq!(status, want_status, "{name}");
        if want_code.is_some() {
            assert_eq!(code, want_code, "{name}");
        }
        assert_eq!(
            good.call("ping", json!({})).await["result"],
            json!({}),
            "after {name}"
        );
    }

    // JSON-RPC-level abuse inside a valid session.
    let mut victim = victim;
    let notif_with_id = victim.call("notifications/initialized", json!({})).await;
    assert_eq!(notif_with_id["error"]["code"], -32600, "{notif_with_id}");
    let second_init = victim
        .call("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}))
        .await;
    assert_eq!(second_init["error"]["code"], -32600, "{second_init}");
    // Deep nesting inside params is forwarded raw (the proxy never recurses into it).
    let (status, _) = status_and_code(p.post(deep_params)).await;
    assert!(status == 200 || status == 400, "deep params: {status}");

    // A 100 MiB body is refused without being buffered, and the proxy stays up.
    let chunk = vec![b' '; 1 << 20];
    let stream =
        futures_util::stream::iter((0..100).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let big = p.post(reqwest::Body::wrap_stream(stream)).send().await;
    if let Ok(resp) = big {
        assert_eq!(resp.status(), 413);
    } // else: the proxy closed the connection mid-upload, which is also a refusal.

    assert_eq!(victim.call("ping", json!({})).await["result"], json!({}));
    assert_eq!(
        good.tool("echo", json!({"text": "fine"})).await["content"][0]["text"],
        "fine"
    );
}
