//! Hostile or malformed input: each gets its status and JSON-RPC error, and no other
//! session is disturbed.

use reqwest::StatusCode;
use serde_json::json;

use super::*;

#[tokio::test]
async fn hostile_inputs_are_refused_and_other_sessions_keep_working() {
    let s = start(settings()).await;
    let good = s.initialize().await;
    let sid = s.initialize().await;
    let long = rpc(1, "echo", json!({"pad": "x".repeat(5000)}));
    let cases: Vec<(&str, reqwest::RequestBuilder, StatusCode, i64)> = vec![
        (
            "malformed JSON",
            s.post(Some(&sid), r#"{"jsonrpc":"2.0","id":1,"#),
            StatusCode::BAD_REQUEST,
            -32700,
        ),
        (
            "wrong jsonrpc",
            s.post(Some(&sid), r#"{"jsonrpc":"1.0","id":1,"method":"echo"}"#),
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            "over-long body",
            s.post(Some(&sid), long),
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
        ),
        (
            "unknown session",
            s.post(
                Some("00000000000000000000000000000000"),
                rpc(1, "echo", json!({})),
            ),
            StatusCode::NOT_FOUND,
            -32001,
        ),
        (
            "missing session",
            s.post(None, rpc(1, "echo", json!({}))),
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            "server/discover probe",
            s.post(None, rpc(1, "server/discover", json!({}))),
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            "bad origin",
            s.post(Some(&sid), rpc(1, "echo", json!({})))
                .header("origin", "http://evil.example"),
            StatusCode::FORBIDDEN,
            -32000,
        ),
        (
            "foreign host",
            s.post(Some(&sid), rpc(1, "echo", json!({})))
                .header("host", "evil.example"),
            StatusCode::FORBIDDEN,
            -32000,
        ),
        (
            "wrong content type",
            s.post_with(Some(&sid), rpc(1, "echo", json!({})), "text/plain", "*/*"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            -32000,
        ),
        (
            "accept neither",
            s.post_with(
                Some(&sid),
                rpc(1, "echo", json!({})),
                "application/json",
                "text/html",
            ),
            StatusCode::NOT_ACCEPTABLE,
            -32000,
        ),
        (
            "bad protocol version",
            s.post(Some(&sid), rpc(1, "echo", json!({})))
                .header("mcp-protocol-version", "1999-01-01"),
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            "GET without SSE accept",
            s.http
                .get(&s.url)
                .header("accept", "application/json")
                .header("mcp-session-id", &sid),
            StatusCode::NOT_ACCEPTABLE,
            -32000,
        ),
        (
            "initialize in a batch",
            s.post(Some(&sid), format!("[{}]", rpc(1, "initialize", json!({})))),
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            "other method",
            s.http.put(&s.url),
            StatusCode::METHOD_NOT_ALLOWED,
            -32000,
        ),
    ];
    for (name, req, status, code) in cases {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), status, "{name}");
        if status == StatusCode::METHOD_NOT_ALLOWED {
            assert_eq!(resp.headers()["allow"], "GET, POST, DELETE");
        }
        assert_eq!(error_code(resp).await, code, "{name}");
        s.assert_echo(&good).await;
    }
    // The session the hostile requests named is unharmed too.
    s.assert_echo(&sid).await;
    let other_path = s
        .http
        .post(format!("{}/other", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(other_path.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bearer_token_is_required_when_configured() {
    let s = start(HttpSettings {
        auth_token: Some("s3cret".into()),
        ..settings()
    })
    .await;
    let init = rpc(0, "initialize", json!({"protocolVersion": "2025-06-18"}));
    for auth in [None, Some("Bearer wrong"), Some("Basic s3cret")] {
        let mut req = s.post(None, init.clone());
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        assert_eq!(error_code(resp).await, -32000);
    }
    let resp = s
        .post(None, init)
        .header("authorization", "Bearer s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().contains_key("mcp-session-id"));
}

/// A 2026-07-28 POST that is no valid request is told what is wrong with it, not that
/// its protocol version is unknown.
#[tokio::test]
async fn a_malformed_2026_07_28_post_gets_the_error_of_its_content() {
    let s = start(settings()).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
            -32600,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            -32600,
        ),
    ];
    for (body, code) in cases {
        let resp = s
            .post(None, body)
            .header("mcp-protocol-version", "2026-07-28")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.contains("unsupported"), "{body}: {v}");
    }
}
