//! Requests through the hub: proxy ids, local answers, upstream death, deadlines,
//! cancellation, counters and per-client limits.

use super::*;

#[tokio::test]
async fn requests_are_forwarded_under_proxy_ids_and_mapped_back() {
    let mut r = rig().await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    // Both clients use the same id and a progress token.
    let p = json!({"name": "echo", "_meta": {"progressToken": "tok"}});
    let ida = a.send("tools/call", p.clone()).await;
    let idb = b.send("tools/call", p).await;
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 2);
    assert_ne!(up[0].id(), up[1].id(), "upstream ids are unique");
    let params0: Value = serde_json::from_str(up[0].params().unwrap().get()).unwrap();
    let token0 = params0["_meta"]["progressToken"].clone();
    assert_ne!(token0, json!("tok"), "progress tokens are rewritten");
    // Progress for the first reaches only a, with a's token.
    r.inject(Message::notification(
        "notifications/progress",
        Some(&json!({"progressToken": token0, "progress": 1})),
    ))
    .await;
    r.answer(&up[1], json!({"content": [{"type": "text", "text": "b"}]}))
        .await;
    r.answer(&up[0], json!({"content": [{"type": "text", "text": "a"}]}))
        .await;
    r.sync().await;
    let got_a = a.pending();
    assert_eq!(got_a[0]["params"]["progressToken"], "tok");
    assert_eq!(got_a[1]["id"].to_string(), ida.as_json());
    assert_eq!(got_a[1]["result"]["content"][0]["text"], "a");
    let got_b = b.pending();
    assert_eq!(got_b.len(), 1);
    assert_eq!(got_b[0]["id"].to_string(), idb.as_json());
}

/// A progress token given twice is read as the server reads it (the last one counts)
/// and rewritten like any other: the server sees only the proxy's token, so a client
/// cannot have progress sent under a number of its choosing (another request's id).
#[tokio::test]
async fn a_progress_token_given_twice_is_rewritten_like_one() {
    let mut r = rig().await;
    let a = r.client(json!({})).await;
    let raw = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":"x","progressToken":17}}}"#;
    a.hub
        .client_message(a.id, Message::parse(raw).unwrap())
        .await
        .unwrap();
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 1);
    let text = up[0].params().unwrap().get();
    assert_eq!(text.matches("progressToken").count(), 1, "{text}");
    let params: Value = serde_json::from_str(text).unwrap();
    let sent = &params["_meta"]["progressToken"];
    assert_eq!(sent.as_u64(), up[0].id().and_then(RawId::as_u64), "{text}");
}

#[tokio::test]
async fn ping_and_discover_are_answered_locally() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    assert_eq!(c.call("ping", json!({})).await["result"], json!({}));
    assert_eq!(
        c.call("server/discover", json!({})).await["error"]["code"],
        -32601
    );
    assert_eq!(
        c.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}})
        )
        .await["error"]["code"],
        -32600
    );
    assert!(r.upstream_msgs().await.is_empty());
}

#[tokio::test]
async fn upstream_death_fails_pending_requests_at_once() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    c.send("tools/call", json!({"name": "slow"})).await;
    assert_eq!(r.upstream_msgs().await.len(), 1);
    r.hub
        .upstream_event(
            UpstreamId(0),
            UpstreamEvent::Down {
                reason: "exited".into(),
                retrying: true,
            },
        )
        .await
        .unwrap();
    r.sync().await;
    let got = c.pending();
    let v = &got[0];
    assert_eq!(v["error"]["code"], -32000);
    assert!(v["error"]["message"].as_str().unwrap().contains("exited"));
    // Its tools and resources leave the merged lists: clients are told to re-list.
    let methods: Vec<&str> = got[1..]
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        vec![
            "notifications/tools/list_changed",
            "notifications/resources/list_changed"
        ]
    );
    // While it is down, new requests fail fast too.
    assert_eq!(
        c.call("tools/call", json!({"name": "x"})).await["error"]["code"],
        -32000
    );
}

#[tokio::test(start_paused = true)]
async fn timed_out_request_errors_and_cancels_upstream() {
    let s = HubSettings {
        request_timeout: Duration::from_millis(500),
        ..settings()
    };
    let mut r = rig_with(s, json!({"tools": {}})).await;
    let mut c = r.client(json!({})).await;
    let answered = r.hub.snapshot().await.unwrap().upstreams[0].latency.count;
    c.send("tools/call", json!({"name": "hang"})).await;
    let up = r.upstream_msgs().await;
    let v = c.next().await; // auto-advances paused time to the deadline
    assert_eq!(v["error"]["code"], -32001);
    let up2 = r.upstream_msgs().await;
    assert_eq!(methods_of(&up2), vec!["notifications/cancelled"]);
    let params: Value = serde_json::from_str(up2[0].params().unwrap().get()).unwrap();
    assert_eq!(
        params["requestId"].to_string(),
        up[0].id().unwrap().as_json()
    );
    // The timeout counts as an error of the method, and its wait in the latency.
    let snap = r.hub.snapshot().await.unwrap();
    let u = &snap.upstreams[0];
    let calls = u
        .methods
        .iter()
        .find(|(m, _)| *m == "tools/call")
        .map(|(_, n)| *n);
    assert_eq!(
        calls.map(|n| (n.requests, n.errors)),
        Some((1, 1)),
        "{:?}",
        u.methods
    );
    assert_eq!(u.latency.count, answered + 1);
    // A late answer is dropped.
    r.answer(&up[0], json!({})).await;
    r.sync().await;
    assert!(c.pending().is_empty());
}

/// Methods mcpmux does not know are forwarded to a lone upstream, and counted under one
/// label: client-chosen names cannot grow the hub's counters.
#[tokio::test]
async fn unknown_forwarded_methods_are_counted_under_one_label() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    // (The rig allows 10 pending requests per client.)
    for i in 0..8 {
        c.send(&format!("x-vendor/method-{i}"), json!({})).await;
    }
    c.send("tools/call", json!({"name": "t"})).await;
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 9, "{:?}", methods_of(&up));
    let sent = r.hub.stats().await.unwrap().upstream_sent;
    let count = |m: &str| sent.iter().find(|(k, _)| k == m).map(|(_, n)| *n);
    assert_eq!(count("other"), Some(8), "{sent:?}");
    assert_eq!(count("tools/call"), Some(1), "{sent:?}");
    assert!(sent.len() <= 17, "{sent:?}");
}

/// The deadline timer is left set when a request is answered (hub/deadlines.rs): the
/// next request must still get its whole timeout, not the answered one's.
#[tokio::test(start_paused = true)]
async fn a_request_after_an_answered_one_gets_its_own_whole_timeout() {
    let timeout = Duration::from_millis(500);
    let s = HubSettings {
        request_timeout: timeout,
        ..settings()
    };
    let mut r = rig_with(s, json!({"tools": {}})).await;
    let mut c = r.client(json!({})).await;
    c.send("tools/call", json!({"name": "quick"})).await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({"content": []})).await;
    assert!(c.next().await.get("result").is_some());
    tokio::time::advance(Duration::from_millis(300)).await;
    let sent = tokio::time::Instant::now();
    c.send("tools/call", json!({"name": "hang"})).await;
    let _ = r.upstream_msgs().await;
    let v = c.next().await; // auto-advances paused time
    assert_eq!(v["error"]["code"], -32001, "{v}");
    let took = sent.elapsed();
    assert!(
        took >= timeout,
        "timed out after {took:?}, before its {timeout:?}"
    );
    assert!(took < timeout * 2, "timed out only after {took:?}");
    assert_eq!(r.hub.stats().await.unwrap().pending_requests, 0);
}

#[tokio::test]
async fn client_cancel_is_forwarded_with_the_upstream_id() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    let id = c.send("tools/call", json!({"name": "slow"})).await;
    let up = r.upstream_msgs().await;
    c.cancel(&id).await;
    let up2 = r.upstream_msgs().await;
    let params: Value = serde_json::from_str(up2[0].params().unwrap().get()).unwrap();
    assert_eq!(
        params["requestId"].to_string(),
        up[0].id().unwrap().as_json()
    );
    assert_eq!(r.hub.stats().await.unwrap().pending_requests, 0);
}

#[tokio::test]
async fn clients_beyond_max_clients_are_refused_and_a_freed_slot_is_reused() {
    let s = HubSettings {
        max_clients: 2,
        ..settings()
    };
    let r = rig_with(s, json!({})).await;
    let a = r.client(json!({})).await;
    let _b = r.client(json!({})).await;
    let refused = r.hub.open_client(Outbox::new(4)).await;
    assert_eq!(refused, Err(AdmitError::TooManyClients(2)));
    r.hub.clients().client_closed(a.id, "test").await;
    assert!(r.hub.open_client(Outbox::new(4)).await.is_ok());
}

/// Lists being assembled count against a client's requests in flight: one client
/// cannot fill the upstream's queue with list requests.
#[tokio::test]
async fn lists_in_flight_count_against_the_per_client_limit() {
    let s = HubSettings {
        max_pending_per_client: 2,
        ..settings()
    };
    let mut r = rig_with(s, json!({"tools": {}})).await;
    let mut c = r.client(json!({})).await;
    c.send("tools/list", json!({})).await;
    c.send("tools/call", json!({"name": "slow"})).await;
    let v = c.call("tools/list", json!({})).await;
    assert_eq!(v["error"]["code"], -32005, "{v}");
    assert_eq!(
        methods_of(&r.upstream_msgs().await),
        ["tools/list", "tools/call"]
    );
}

/// A list request its client cancels is not answered (the spec: a cancelled request
/// SHOULD get no response).
#[tokio::test]
async fn a_cancelled_list_is_not_answered() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    let id = c.send("tools/list", json!({})).await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["tools/list"]);
    c.cancel(&id).await;
    // Client messages and upstream events come on separate queues: the cancel is
    // handled before the answer is sent.
    r.sync().await;
    r.answer(&up[0], json!({"tools": []})).await;
    r.sync().await;
    let mut out = vec![];
    c.outbox.drain(&mut out).unwrap();
    let answers: Vec<_> = out.iter().filter(|o| o.kind == OutKind::Response).collect();
    assert!(answers.is_empty(), "{answers:?}");
}

/// A subscribe its client cancels while the upstream's answer is on its way is not
/// answered, and does not make the client a holder: with nobody else wanting the URI,
/// the upstream's yes is undone.
#[tokio::test]
async fn a_cancelled_subscribe_holds_nothing() {
    let mut r = rig_with(settings(), json!({"resources": {"subscribe": true}})).await;
    let mut c = r.client(json!({})).await;
    let id = c
        .send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["resources/subscribe"]);
    c.cancel(&id).await;
    r.sync().await;
    r.answer(&up[0], json!({})).await;
    assert_eq!(
        methods_of(&r.upstream_msgs().await),
        ["resources/unsubscribe"]
    );
    assert!(
        c.pending().is_empty(),
        "the cancelled subscribe was answered"
    );
    let stats = r.hub.stats().await.unwrap();
    assert_eq!(stats.client_subscriptions, 0);
    assert_eq!(stats.subscription_keys, 0);
}

#[tokio::test]
async fn per_client_limits_on_pending_requests_and_subscriptions() {
    let s = HubSettings {
        max_pending_per_client: 2,
        max_subscriptions_per_client: 1,
        ..settings()
    };
    let mut r = rig_with(s, json!({"resources": {"subscribe": true}, "tools": {}})).await;
    let mut c = r.client(json!({})).await;
    c.send("tools/call", json!({"name": "slow"})).await;
    c.send("tools/call", json!({"name": "slow"})).await;
    let v = c.call("tools/call", json!({"name": "slow"})).await;
    assert_eq!(v["error"]["code"], -32005);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_pending_per_client"));
    let up = r.upstream_msgs().await;
    assert_eq!(
        up.len(),
        2,
        "the refused request never reached the upstream"
    );
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let sub = r.upstream_msgs().await;
    r.answer(&sub[0], json!({})).await;
    r.sync().await;
    c.pending();
    let v = c
        .call("resources/subscribe", json!({"uri": "test://b"}))
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_subscriptions_per_client"),
        "{v}"
    );
    // Re-subscribing what it holds is not a new subscription.
    assert_eq!(
        c.call("resources/subscribe", json!({"uri": "test://a"}))
            .await["result"],
        json!({})
    );
}

/// Shared reads waiting for the upstream count toward `max_pending_per_client` until
/// they are answered or cancelled, as forwarded requests do.
#[tokio::test]
async fn shared_reads_in_flight_count_toward_the_clients_limit() {
    let s = HubSettings {
        max_pending_per_client: 2,
        ..settings()
    };
    let mut r = rig_with(s, json!({"resources": {"subscribe": true}})).await;
    let mut c = r.client(json!({})).await;
    for uri in ["test://a", "test://b", "test://c"] {
        c.send("resources/subscribe", json!({"uri": uri})).await;
        let sub = r.upstream_msgs().await;
        r.answer(&sub[0], json!({})).await;
        assert_eq!(c.next().await["result"], json!({}));
    }
    let first = c.send("resources/read", json!({"uri": "test://a"})).await;
    c.send("resources/read", json!({"uri": "test://b"})).await;
    let reads = r.upstream_msgs().await;
    assert_eq!(methods_of(&reads), ["resources/read", "resources/read"]);
    let v = c.call("resources/read", json!({"uri": "test://c"})).await;
    assert_eq!(v["error"]["code"], -32005, "{v}");
    assert!(r.upstream_msgs().await.is_empty());
    // A cancelled read frees its place; an answered one too.
    c.cancel(&first).await;
    c.send("resources/read", json!({"uri": "test://c"})).await;
    assert_eq!(methods_of(&r.upstream_msgs().await), ["resources/read"]);
    // The cancelled read went on; its answer, cached, serves the next read of it, even
    // at the limit (b and c in flight): a read the cache answers waits on nothing.
    r.answer(&reads[0], json!({"contents": ["a"]})).await;
    r.sync().await;
    let v = c.call("resources/read", json!({"uri": "test://a"})).await;
    assert_eq!(v["result"], json!({"contents": ["a"]}), "{v}");
    r.answer(&reads[1], json!({"contents": []})).await;
    assert_eq!(c.next().await["result"], json!({"contents": []}));
}

/// The fleet's reader (one session reading for the clients of other instances) is not
/// held to the per-client limit: those clients' own instances hold them to it.
#[tokio::test]
async fn the_fleet_reader_is_not_held_to_the_per_client_limit() {
    let s = HubSettings {
        max_pending_per_client: 1,
        ..settings()
    };
    let mut r = rig_with(s, json!({"resources": {"subscribe": true}})).await;
    let outbox = Outbox::new(64);
    let id = r
        .hub
        .clients()
        .open(
            outbox.clone(),
            crate::downstream::link::ClientKind::FleetReader,
        )
        .await
        .unwrap();
    let mut reader = Client {
        id,
        outbox,
        hub: r.hub.clone(),
        next_id: 0,
    };
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "f", "version": "1"}});
    assert!(reader.call("initialize", init).await["result"].is_object());
    for uri in ["test://a", "test://b"] {
        reader
            .send("resources/subscribe", json!({"uri": uri}))
            .await;
        let sub = r.upstream_msgs().await;
        r.answer(&sub[0], json!({})).await;
        reader.next().await;
    }
    reader
        .send("resources/read", json!({"uri": "test://a"}))
        .await;
    reader
        .send("resources/read", json!({"uri": "test://b"}))
        .await;
    let reads = r.upstream_msgs().await;
    assert_eq!(methods_of(&reads), ["resources/read", "resources/read"]);
}

/// A read that comes after an update is not given the answer of a read sent before
/// it (that answer may be the old contents): it is read anew.
#[tokio::test]
async fn a_read_after_an_update_is_not_answered_with_the_read_before_it() {
    let mut r = rig_with(settings(), json!({"resources": {"subscribe": true}})).await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    for c in [&mut a, &mut b] {
        c.send("resources/subscribe", json!({"uri": "test://a"}))
            .await;
    }
    let sub = r.upstream_msgs().await;
    r.answer(&sub[0], json!({})).await;
    a.next().await;
    b.next().await;
    a.send("resources/read", json!({"uri": "test://a"})).await;
    let first = r.upstream_msgs().await;
    let updated = Message::notification(
        "notifications/resources/updated",
        Some(&json!({"uri": "test://a"})),
    );
    r.inject(updated).await;
    r.sync().await;
    assert_eq!(b.next().await["method"], "notifications/resources/updated");
    b.send("resources/read", json!({"uri": "test://a"})).await;
    let second = r.upstream_msgs().await;
    assert_eq!(methods_of(&second), ["resources/read"], "read anew");
    r.answer(&first[0], json!({"contents": ["old"]})).await;
    r.answer(&second[0], json!({"contents": ["new"]})).await;
    let got_b = b.next().await;
    assert_eq!(got_b["result"], json!({"contents": ["new"]}), "{got_b}");
    let got_a: Vec<_> = a.pending();
    assert!(
        got_a
            .iter()
            .any(|m| m["result"] == json!({"contents": ["old"]})),
        "{got_a:?}"
    );
}

/// Pages of a list asked for before the server said the list changed again are not
/// kept as the new list, though they arrive after it: the next client gets the new one.
#[tokio::test]
async fn a_list_page_from_before_a_list_change_is_not_kept() {
    let mut r = rig_with(settings(), json!({"tools": {"listChanged": true}})).await;
    let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
    let changed = || Message::notification("notifications/tools/list_changed", None);
    r.inject(changed()).await;
    let first_refetch = r.upstream_msgs().await;
    assert_eq!(methods_of(&first_refetch), ["tools/list"]);
    // While the catalog has no list, a client's list goes to the server.
    let mut x = r.client(json!({})).await;
    x.send("tools/list", json!({})).await;
    let part = r.upstream_msgs().await;
    assert_eq!(methods_of(&part), ["tools/list"]);
    r.inject(changed()).await;
    let second_refetch = r.upstream_msgs().await;
    assert_eq!(methods_of(&second_refetch), ["tools/list"]);
    r.answer(&second_refetch[0], json!({"tools": [tool("new")]}))
        .await;
    r.answer(&part[0], json!({"tools": [tool("old")]})).await;
    r.answer(&first_refetch[0], json!({"tools": [tool("old")]}))
        .await;
    r.sync().await;
    let got_x = x.pending();
    assert!(
        got_x
            .iter()
            .any(|m| m["result"]["tools"][0]["name"] == "old"),
        "x gets the answer to its own request: {got_x:?}"
    );
    let mut y = r.client(json!({})).await;
    let v = y.call("tools/list", json!({})).await;
    assert_eq!(v["result"]["tools"], json!([tool("new")]), "{v}");
    assert!(
        r.upstream_msgs().await.is_empty(),
        "served from the catalog"
    );
}

/// A forged cursor naming one server again and again is refused, not split into a
/// part per mention.
#[tokio::test]
async fn a_cursor_naming_a_server_twice_is_refused() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    let parts = vec![(UpstreamId(0), None::<String>); 1000];
    let cursor = crate::state::catalog::encode_cursor(&parts);
    let v = c.call("tools/list", json!({"cursor": cursor})).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(r.upstream_msgs().await.is_empty());
}

/// A stdio connection's 2026-07-28 request shares the connection's outbox. When its
/// client goes, the outbox stays open for the connection's session, and a mark naming
/// the request follows the last message that was the client's: the connection tells
/// that request's leftovers from a later request's that reuses the id by it.
#[tokio::test]
async fn a_shared_outbox_client_that_goes_leaves_its_end_mark_after_its_messages() {
    let mut r = rig().await;
    let outbox = Outbox::new(64);
    let mut session = r.client_on(outbox.clone(), json!({})).await;
    let id = RawId::from_u64(7);
    let kind = stateless_kind(Some(id.clone()));
    let modern = r.hub.clients().open(outbox.clone(), kind).await.unwrap();
    let params = json!({"name": "echo", "_meta": {"progressToken": "p"}});
    let call = Message::request(&id, "tools/call", Some(&params));
    r.hub.client_message(modern, call).await.unwrap();
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["tools/call"]);
    let sent: Value = serde_json::from_str(up[0].params().unwrap().get()).unwrap();
    let token = sent["_meta"]["progressToken"].clone();
    r.inject(Message::notification(
        "notifications/progress",
        Some(&json!({"progressToken": token, "progress": 1})),
    ))
    .await;
    r.sync().await;
    r.hub
        .clients()
        .client_closed(modern, "cancelled by the client")
        .await;
    r.sync().await;
    let mut out = vec![];
    outbox.drain(&mut out).unwrap();
    let kinds: Vec<_> = out
        .iter()
        .map(|o| (o.kind.clone(), o.related.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (OutKind::Notification, Some(id.clone())),
            (OutKind::Ended, Some(id)),
        ],
        "{out:?}"
    );
    // The connection's session goes on.
    let v = session.call("ping", json!({})).await;
    assert_eq!(v["result"], json!({}), "{v}");
}

/// A stateless client's answer keeps the message its bytes were made from (its edge
/// shapes it without parsing it again); a session client's carries only bytes.
#[tokio::test]
async fn a_stateless_answer_keeps_its_parsed_message() {
    let mut r = rig().await;
    let outbox = Outbox::new(64);
    let kind = stateless_kind(None);
    let modern = r.hub.clients().open(outbox.clone(), kind).await.unwrap();
    let id = RawId::from_u64(7);
    let call = Message::request(&id, "tools/call", Some(&json!({"name": "echo"})));
    r.hub.client_message(modern, call).await.unwrap();
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["tools/call"]);
    let answer = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[]}}}}"#,
        up[0].id().unwrap().as_json()
    );
    r.inject(Message::parse(answer.as_bytes()).unwrap()).await;
    r.sync().await;
    let mut out = vec![];
    outbox.drain(&mut out).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    let (bytes, parsed) = out.pop().unwrap().into_parsed();
    let parsed = parsed.expect("the message is kept");
    assert_eq!(parsed.id(), Some(&id));
    assert_eq!(parsed.to_bytes(), bytes);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"content": []}})
    );

    let mut session = r.client(json!({})).await;
    session.send("ping", json!({})).await;
    r.sync().await;
    let mut out = vec![];
    session.outbox.drain(&mut out).unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out.pop().unwrap().into_parsed().1.is_none());
}
