//! How sessions end: initialize errors, DELETE, idle expiry, hub close, shutdown.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::*;

#[tokio::test]
async fn initialize_error_drops_the_session() {
    let mut s = start(settings()).await;
    let resp = s
        .post(
            None,
            rpc(0, "initialize", json!({"protocolVersion": "fail"})),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!resp.headers().contains_key("mcp-session-id"));
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(s.next_closed().await.1, "initialize failed");
}

#[tokio::test]
async fn delete_ends_the_session_and_calls_client_closed_once() {
    let mut s = start(settings()).await;
    let sid = s.initialize().await;
    let (http, url) = (s.http.clone(), s.url.clone());
    let del = || http.delete(&url).header("mcp-session-id", sid.clone());
    assert_eq!(del().send().await.unwrap().status(), StatusCode::OK);
    let (first, reason) = s.next_closed().await;
    assert_eq!(reason, "deleted by the client");
    assert_eq!(del().send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let resp = s.post(Some(&sid), rpc(1, "echo", json!({}))).send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::NOT_FOUND);
    // The next record belongs to another session: no second close for the first.
    let other = s.initialize().await;
    let resp = s.http.delete(&s.url).header("mcp-session-id", other);
    assert_eq!(resp.send().await.unwrap().status(), StatusCode::OK);
    let (second, _) = s.next_closed().await;
    assert_ne!(first, second);
}

#[tokio::test]
async fn delete_closes_the_get_stream() {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    let stream = s.get(&sid).send().await.unwrap();
    let del = s.http.delete(&s.url).header("mcp-session-id", sid.clone());
    assert_eq!(del.send().await.unwrap().status(), StatusCode::OK);
    let body = tokio::time::timeout(WAIT, stream.bytes()).await.unwrap();
    assert!(body.unwrap().is_empty());
}

#[tokio::test]
async fn idle_session_expires() {
    let mut s = start(settings()).await;
    let sid = s.initialize().await;
    let kept = s.initialize().await;
    let stream = s.get(&kept).send().await.unwrap();
    tokio::time::pause();
    tokio::time::advance(IDLE + Duration::from_millis(1)).await;
    let (_, reason) = s.next_closed().await;
    assert_eq!(reason, "idle expiry");
    tokio::time::resume();
    let resp = s.post(Some(&sid), rpc(1, "echo", json!({}))).send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::NOT_FOUND);
    // The session with an attached GET stream did not expire.
    s.assert_echo(&kept).await;
    drop(stream);
}

#[tokio::test]
async fn outbox_closed_by_the_hub_ends_the_session() {
    let mut s = start(settings()).await;
    let sid = s.initialize().await;
    let stream = s.get(&sid).send().await.unwrap();
    let resp = s.post(Some(&sid), note("x/kill", json!({}))).send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::ACCEPTED);
    let (_, reason) = s.next_closed().await;
    assert!(reason.contains("too slow"), "{reason}");
    let body = tokio::time::timeout(WAIT, stream.bytes()).await.unwrap();
    assert!(body.unwrap().is_empty());
    let resp = s.post(Some(&sid), rpc(1, "echo", json!({}))).send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn shutdown_ends_every_session_and_returns() {
    let mut s = start(settings()).await;
    let a = s.initialize().await;
    let _b = s.initialize().await;
    let stream = s.get(&a).send().await.unwrap();
    s.shutdown.cancel();
    let mut closed = [s.next_closed().await, s.next_closed().await];
    closed.sort();
    assert_eq!(closed[0].1, "shutdown");
    assert_ne!(closed[0].0, closed[1].0);
    let body = tokio::time::timeout(WAIT, stream.bytes()).await.unwrap();
    assert!(body.unwrap().is_empty());
    let served = tokio::time::timeout(WAIT, s.task).await.unwrap();
    assert!(served.unwrap().is_ok());
}
