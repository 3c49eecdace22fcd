//! Happy paths: sessions, JSON and SSE answers, the GET stream, replay, batches.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::*;

#[tokio::test]
async fn initialize_returns_a_session_id() {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    assert_eq!(sid.len(), 32);
    assert!(sid.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(s.initialize().await, sid);
}

#[tokio::test]
async fn request_gets_json_response_with_its_own_id() {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    let body = r#"{"jsonrpc":"2.0","id":"req-é","method":"echo","params":{"a":[1]}}"#;
    let resp = s.post(Some(&sid), body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["id"], "req-é");
    assert_eq!(v["result"]["echo"]["a"], json!([1]));
}

#[tokio::test]
async fn notification_gets_202_without_body() {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    let resp = s
        .post(Some(&sid), note("notifications/initialized", json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert!(resp.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn get_stream_receives_unrelated_notification_with_event_id() {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    let stream = s.get(&sid).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    assert_eq!(stream.headers()["cache-control"], "no-cache");
    assert_eq!(stream.headers()["x-accel-buffering"], "no");
    let resp = s
        .post(Some(&sid), note("x/emit", json!({"n": 2})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let text = read_until(stream, "x/event", 2).await;
    assert!(text.starts_with("id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x/event\""));
    assert!(text.contains("id: 2\ndata: "), "{text}");
}

/// A session with three events queued before it has a GET stream (they are buffered).
async fn three_events_before_any_get() -> (Server, String) {
    let s = start(settings()).await;
    let sid = s.initialize().await;
    s.post(Some(&sid), note("x/emit", json!({"n": 3})))
        .send()
        .await
        .unwrap();
    (s, sid)
}

/// A `Last-Event-ID` beyond anything this session ever sent (one of an earlier
/// session, or made up) cannot mean those events were seen: the events no stream has
/// received yet are delivered all the same.
#[tokio::test]
async fn a_last_event_id_beyond_what_was_sent_skips_nothing() {
    let (s, sid) = three_events_before_any_get().await;
    let get = s
        .get(&sid)
        .header("last-event-id", "2")
        .send()
        .await
        .unwrap();
    let text = read_until(get, "x/event", 3).await;
    assert!(text.starts_with("id: 1\n"), "{text}");
}

#[tokio::test]
async fn events_wait_for_a_get_stream_and_last_event_id_replays() {
    let (s, sid) = three_events_before_any_get().await;
    // A fresh GET gets what no stream has received yet.
    let first = s.get(&sid).send().await.unwrap();
    let text = read_until(first, "x/event", 3).await;
    assert!(
        text.contains("id: 1\n") && text.contains("id: 3\n"),
        "{text}"
    );
    // Resuming after id 1 replays 2 and 3 only.
    let again = s
        .get(&sid)
        .header("last-event-id", "1")
        .send()
        .await
        .unwrap();
    let text = read_until(again, "x/event", 2).await;
    assert!(text.starts_with("id: 2\n"), "{text}");
    assert!(
        text.contains("id: 3\n") && !text.contains("id: 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn progress_token_request_is_answered_as_sse() {
    progress_token_request_is_answered_as_sse_at("2025-11-25").await;
}

/// Before 2025-11-25 there are no priming events: a client of then may take one's
/// empty data for a message. The stream is numbered the same.
#[tokio::test]
async fn sessions_before_2025_11_25_get_no_priming_event() {
    progress_token_request_is_answered_as_sse_at("2025-06-18").await;
}

async fn progress_token_request_is_answered_as_sse_at(version: &str) {
    let s = start(settings()).await;
    let sid = s.initialize_version(version).await;
    let body = rpc(5, "echo", json!({"_meta": {"progressToken": "t1"}}));
    let resp = s.post(Some(&sid), body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    // The stream ends after the response, so the whole body can be read.
    let text = String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap();
    let progress = text
        .find("notifications/progress")
        .expect("progress on the POST");
    let response = text
        .find(r#""id":5,"result""#)
        .expect("response on the POST");
    assert!(progress < response, "{text}");
    // From 2025-11-25 a priming event (an id, no data) comes first, so the stream can
    // be resumed; every event carries an id of this stream.
    let primed = version >= "2025-11-25";
    let first = if primed {
        "id: p1-0\ndata: \n\n"
    } else {
        "id: p1-1\ndata: {"
    };
    assert!(text.starts_with(first) && text.ends_with("\n\n"), "{text}");
    let ids = text.lines().filter(|l| l.starts_with("id: p1-")).count();
    assert_eq!(
        ids,
        2 + usize::from(primed),
        "(priming,) progress, response: {text}"
    );
    // Without the token the same request is plain JSON.
    s.assert_echo(&sid).await;
}

#[tokio::test]
async fn batch_is_allowed_without_the_version_header_for_2025_03_26() {
    let s = start(settings()).await;
    let sid = s.initialize_version("2025-03-26").await;
    let body = format!(
        "[{},{},{},{{\"jsonrpc\":\"1.0\"}}]",
        rpc(1, "echo", json!({})),
        note("x/emit", json!({"n": 1})),
        rpc(2, "echo", json!({}))
    );
    let resp = s.post(Some(&sid), body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Vec<Value> = resp.json().await.unwrap();
    assert_eq!(v.len(), 3, "{v:?}");
    let mut ids: Vec<_> = v.iter().map(|m| m["id"].clone()).collect();
    ids.sort_by_key(|i| i.to_string());
    assert_eq!(ids, vec![json!(1), json!(2), Value::Null]);
    assert!(v.iter().any(|m| m["error"]["code"] == -32600));
}

/// A batch of more requests than a stream's queue holds is answered whole, as one
/// array, and the session goes on.
#[tokio::test]
async fn a_large_batch_is_answered_whole() {
    let s = start(HttpSettings {
        max_message_bytes: 1 << 20,
        ..settings()
    })
    .await;
    let sid = s.initialize_version("2025-03-26").await;
    // More than a stream's queue and the client's queue (64 here) together.
    let n = 200;
    let items: Vec<String> = (1..=n).map(|i| rpc(i, "echo", json!({}))).collect();
    let body = format!("[{}]", items.join(","));
    let resp = s.post(Some(&sid), body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Vec<Value> = resp.json().await.unwrap();
    assert_eq!(v.len(), n as usize);
    assert!(
        v.iter().all(|m| m["result"].is_object()),
        "{:?}",
        v.iter().find(|m| !m["result"].is_object())
    );
    s.assert_echo(&sid).await;
}

#[tokio::test]
async fn batch_is_refused_with_protocol_version_2025_06_18() {
    let s = start(settings()).await;
    let sid = s.initialize_version("2025-03-26").await;
    let body = format!("[{}]", rpc(1, "echo", json!({})));
    let resp = s
        .post(Some(&sid), body.clone())
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32600);
    assert_eq!(
        v["error"]["message"],
        "batches are not allowed in protocol version 2025-06-18"
    );
    // A session that negotiated 2025-06-18 is refused even without the header.
    let newer = s.initialize().await;
    let resp = s.post(Some(&newer), body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}
