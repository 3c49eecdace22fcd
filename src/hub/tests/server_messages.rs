//! What a server sends of its own accord: requests routed to the one client that can
//! answer, and messages that belong to one client's request reaching only that client.

use super::*;

#[tokio::test]
async fn server_request_goes_to_the_only_waiting_client_and_back() {
    let mut r = rig().await;
    let mut a = r.client(json!({"sampling": {}})).await;
    let _b = r.client(json!({})).await;
    a.send("tools/call", json!({"name": "sample"})).await;
    let _ = r.upstream_msgs().await;
    let req = Message::request(
        &RawId::parse("\"s1\"").unwrap(),
        "sampling/createMessage",
        Some(&json!({"messages": []})),
    );
    r.inject(req).await;
    let got = a.next().await;
    assert_eq!(got["method"], "sampling/createMessage");
    let down_id = RawId::parse(&got["id"].to_string()).unwrap();
    let answer = Message::response(&down_id, &json!({"role": "assistant"}));
    a.hub.client_message(a.id, answer).await.unwrap();
    let up = r.upstream_msgs().await;
    assert_eq!(up[0].kind(), Kind::Response);
    assert_eq!(up[0].id().unwrap().as_json(), "\"s1\"");
}

/// A server request still open when the client request it belongs to ends (here the
/// server answers the call, or the client cancels it) is cancelled toward the client,
/// on that request's stream, and failed toward the server: nothing waits for it for the
/// client's lifetime.
#[tokio::test]
async fn a_server_request_ends_with_the_request_it_belongs_to() {
    for cancel in [false, true] {
        let mut r = rig().await;
        let mut a = r.client(json!({"sampling": {}})).await;
        let call = a.send("tools/call", json!({"name": "sample"})).await;
        let up = r.upstream_msgs().await;
        let sample = Message::request(
            &RawId::parse("\"s1\"").unwrap(),
            "sampling/createMessage",
            Some(&json!({"messages": []})),
        );
        r.inject_related(sample, Related::Request(up[0].id().unwrap().clone()))
            .await;
        let got = a.next().await;
        assert_eq!(got["method"], "sampling/createMessage");
        if cancel {
            r.sync().await;
            a.cancel(&call).await;
        } else {
            r.answer(&up[0], json!({"content": []})).await;
        }
        r.sync().await;
        let down = a.pending();
        let cancelled: Vec<_> = down
            .iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .collect();
        assert_eq!(cancelled.len(), 1, "cancel={cancel}: {down:?}");
        assert_eq!(cancelled[0]["params"]["requestId"], got["id"]);
        let up = r.upstream_msgs().await;
        let failed: Vec<_> = up.iter().filter(|m| m.kind() == Kind::Response).collect();
        assert_eq!(failed.len(), 1, "cancel={cancel}: {up:?}");
        assert!(failed[0].is_error());
        assert_eq!(failed[0].id().unwrap().as_json(), "\"s1\"");
        // The client's late answer goes nowhere.
        let late = Message::response(&RawId::parse(&got["id"].to_string()).unwrap(), &json!({}));
        a.hub.client_message(a.id, late).await.unwrap();
        assert!(r.upstream_msgs().await.is_empty());
    }
}

/// A server request the hub only guessed the client of (the one request in flight on a
/// stdio server) may belong to no request at all: it does not end with that request.
#[tokio::test]
async fn a_server_request_of_a_guessed_client_outlives_the_request_in_flight() {
    let mut r = rig().await;
    let mut a = r.client(json!({"roots": {}})).await;
    a.send("prompts/get", json!({"name": "p"})).await;
    let up = r.upstream_msgs().await;
    r.inject(Message::request(&RawId::from_u64(9), "roots/list", None))
        .await;
    let asked = a.next().await;
    assert_eq!(asked["method"], "roots/list");
    r.answer(&up[0], json!({"messages": []})).await;
    assert!(a.next().await["result"].is_object());
    assert!(
        r.upstream_msgs().await.is_empty(),
        "nothing failed upstream"
    );
    let answer = Message::response(
        &RawId::parse(&asked["id"].to_string()).unwrap(),
        &json!({"roots": []}),
    );
    a.hub.client_message(a.id, answer).await.unwrap();
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].id().unwrap().as_json(), "9");
    assert!(!up[0].is_error());
}

#[tokio::test]
async fn unroutable_server_request_is_refused_with_a_reason() {
    let mut r = rig().await;
    let _a = r.client(json!({})).await;
    r.inject(Message::request(&RawId::from_u64(9), "roots/list", None))
        .await;
    let up = r.upstream_msgs().await;
    assert!(up[0].is_error());
    assert!(
        up[0]
            .error()
            .unwrap()
            .get()
            .contains("cannot tell which client"),
        "{:?}",
        up[0]
    );
}

/// The upstream id mcpmux gave a client's forwarded request (from what it sent).
fn forwarded_id(up: &[Message], method: &str) -> RawId {
    up.iter()
        .find(|m| m.method() == Some(method))
        .and_then(|m| m.id().cloned())
        .unwrap_or_else(|| panic!("no {method} upstream in {up:?}"))
}

fn log_note(data: &str) -> Message {
    Message::notification(
        "notifications/message",
        Some(&json!({"level": "info", "data": data})),
    )
}

#[tokio::test]
async fn messages_on_a_request_stream_reach_only_that_requests_client() {
    let mut r = rig().await;
    let mut a = r.client(json!({"sampling": {}})).await;
    let mut b = r.client(json!({"sampling": {}})).await;
    a.send("tools/call", json!({"name": "work"})).await;
    b.send("tools/call", json!({"name": "work"})).await;
    let up = r.upstream_msgs().await;
    let calls: Vec<RawId> = up
        .iter()
        .filter(|m| m.method() == Some("tools/call"))
        .map(|m| m.id().unwrap().clone())
        .collect();
    assert_eq!(calls.len(), 2);
    // Both are in flight; the transport says which request each message came with.
    r.inject_related(log_note("for a"), Related::Request(calls[0].clone()))
        .await;
    let sample = Message::request(
        &RawId::parse("\"s1\"").unwrap(),
        "sampling/createMessage",
        Some(&json!({"messages": [], "maxTokens": 1})),
    );
    r.inject_related(sample, Related::Request(calls[1].clone()))
        .await;
    r.sync().await;
    let got_a = a.pending();
    let got_b = b.pending();
    assert_eq!(got_a.len(), 1, "{got_a:?}");
    assert_eq!(got_a[0]["params"]["data"], "for a");
    assert_eq!(got_b.len(), 1, "{got_b:?}");
    assert_eq!(got_b[0]["method"], "sampling/createMessage");
    assert!(
        r.upstream_msgs().await.is_empty(),
        "nothing refused upstream"
    );
}

#[tokio::test]
async fn ambiguous_messages_on_stdio_reach_nobody_and_requests_are_refused() {
    let mut r = rig().await;
    let mut a = r.client(json!({"sampling": {}})).await;
    let mut b = r.client(json!({"sampling": {}})).await;
    a.send("tools/call", json!({"name": "work"})).await;
    b.send("tools/call", json!({"name": "work"})).await;
    let _ = r.upstream_msgs().await;
    // Two requests in flight and no association: nobody gets the log (default
    // policy), and the sampling request is refused with a reason.
    r.inject(log_note("whose?")).await;
    r.inject(Message::request(
        &RawId::parse("\"s1\"").unwrap(),
        "sampling/createMessage",
        Some(&json!({"messages": [], "maxTokens": 1})),
    ))
    .await;
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(up[0].is_error());
    assert!(up[0]
        .error()
        .unwrap()
        .get()
        .contains("cannot tell which client"));
    assert!(a.pending().is_empty());
    assert!(b.pending().is_empty());
}

#[tokio::test]
async fn with_one_request_in_flight_stdio_messages_go_to_its_client() {
    let mut r = rig().await;
    let mut a = r.client(json!({"sampling": {}})).await;
    let b = r.client(json!({"sampling": {}})).await;
    a.send("tools/call", json!({"name": "work"})).await;
    let _ = r.upstream_msgs().await;
    r.inject(log_note("mine")).await;
    r.sync().await;
    let got = a.pending();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["params"]["data"], "mine");
    assert!(b.pending().is_empty(), "the other client hears nothing");
}

#[tokio::test]
async fn server_requests_need_the_clients_capability() {
    let mut r = rig().await;
    let mut a = r.client(json!({"elicitation": {"form": {}}})).await;
    a.send("tools/call", json!({"name": "work"})).await;
    let up = r.upstream_msgs().await;
    let call = forwarded_id(&up, "tools/call");
    let ask = |id: &str, method: &str, params: Value| {
        Message::request(
            &RawId::parse(&format!("\"{id}\"")).unwrap(),
            method,
            Some(&params),
        )
    };
    // No sampling declared: refused, naming the capability.
    r.inject_related(
        ask(
            "q1",
            "sampling/createMessage",
            json!({"messages": [], "maxTokens": 1}),
        ),
        Related::Request(call.clone()),
    )
    .await;
    // URL-mode elicitation, only form declared: refused.
    r.inject_related(
        ask(
            "q2",
            "elicitation/create",
            json!({"mode": "url", "message": "m", "url": "https://x", "elicitationId": "e"}),
        ),
        Related::Request(call.clone()),
    )
    .await;
    // Form-mode elicitation: delivered.
    r.inject_related(
        ask(
            "q3",
            "elicitation/create",
            json!({"message": "m", "requestedSchema": {"type": "object"}}),
        ),
        Related::Request(call),
    )
    .await;
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 2, "{up:?}");
    assert!(
        up[0].error().unwrap().get().contains("sampling capability"),
        "{up:?}"
    );
    assert!(
        up[1].error().unwrap().get().contains("elicitation.url"),
        "{up:?}"
    );
    let got = a.pending();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["method"], "elicitation/create");
}

#[tokio::test]
async fn session_level_messages_reach_nobody_by_default() {
    let mut r = rig().await;
    let a = r.client(json!({})).await;
    let b = r.client(json!({})).await;
    // Default (none): a session-level message reaches nobody.
    r.inject_related(log_note("session"), Related::Nothing)
        .await;
    r.sync().await;
    assert!(a.pending().is_empty() && b.pending().is_empty());
    let _ = r.upstream_msgs().await;
}
