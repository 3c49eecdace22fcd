//! Subscriptions through the hub: one upstream subscribe per URI, targeted fan-out,
//! releases, gating, restarts and re-subscribes, slow holders.

use super::*;
use crate::state::ids::SubKey;

#[tokio::test]
async fn ten_clients_same_uri_one_upstream_subscribe_and_targeted_fanout() {
    let mut r = rig().await;
    let mut clients = vec![];
    for _ in 0..10 {
        clients.push(r.client(json!({})).await);
    }
    let bystander = r.client(json!({})).await;
    for c in clients.iter_mut() {
        c.send("resources/subscribe", json!({"uri": "test://a"}))
            .await;
    }
    let up = r.upstream_msgs().await;
    assert_eq!(
        methods_of(&up),
        vec!["resources/subscribe"],
        "exactly one upstream subscribe"
    );
    for c in &clients {
        assert!(
            c.pending().is_empty(),
            "nobody is answered before the upstream is"
        );
    }
    r.answer(&up[0], json!({})).await;
    r.sync().await;
    for c in &clients {
        let got = c.pending();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["result"], json!({}));
    }
    // One update, with _meta and an unknown member, reaches the 10 holders only.
    let update = r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"test://a","_meta":{"k":[1,2]},"x":true}}"#;
    r.inject(Message::parse(update.as_bytes()).unwrap()).await;
    // An update for a URI nobody holds reaches nobody.
    r.inject(Message::notification(
        "notifications/resources/updated",
        Some(&json!({"uri": "test://b"})),
    ))
    .await;
    r.sync().await;
    for c in &clients {
        let got = c.pending();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0], serde_json::from_str::<Value>(update).unwrap());
    }
    assert!(
        bystander.pending().is_empty(),
        "a client that did not subscribe gets nothing"
    );
    // 9 unsubscribe: no upstream traffic; the 10th: exactly one unsubscribe.
    for c in clients.iter_mut().take(9) {
        assert_eq!(
            c.call("resources/unsubscribe", json!({"uri": "test://a"}))
                .await["result"],
            json!({})
        );
    }
    assert!(r.upstream_msgs().await.is_empty());
    clients[9]
        .call("resources/unsubscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), vec!["resources/unsubscribe"]);
    let stats = r.hub.stats().await.unwrap();
    assert_eq!(
        (stats.subscription_keys, stats.client_subscriptions),
        (0, 0)
    );
}

#[tokio::test]
async fn disconnect_releases_the_clients_share() {
    let mut r = rig().await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    a.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    a.next().await;
    assert_eq!(
        b.call("resources/subscribe", json!({"uri": "test://a"}))
            .await["result"],
        json!({})
    );
    r.hub.clients().client_closed(a.id, "test").await;
    assert!(r.upstream_msgs().await.is_empty(), "b still holds it");
    r.hub.clients().client_closed(b.id, "test").await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), vec!["resources/unsubscribe"]);
    r.answer(&up[0], json!({})).await;
    let s = r.hub.stats().await.unwrap();
    assert_eq!(
        (s.clients, s.subscription_keys, s.pending_requests),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn client_that_declared_no_subscribe_is_refused_without_upstream_traffic() {
    let mut r = rig().await;
    let mut c = r.client(json!({"resources": {"subscribe": false}})).await;
    let v = c
        .call("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    assert_eq!(v["error"]["code"], -32601);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("client_capability"));
    assert!(r.upstream_msgs().await.is_empty());
}

#[tokio::test]
async fn required_mode_refuses_clients_that_did_not_declare_true() {
    let s = HubSettings {
        client_capability: ClientCapabilityPolicy::Required,
        ..settings()
    };
    let mut r = rig_with(s, json!({"resources": {"subscribe": true}})).await;
    let mut silent = r.client(json!({})).await;
    let v = silent
        .call("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"required\""),
        "{v}"
    );
    assert!(r.upstream_msgs().await.is_empty());
    let mut declared = r.client(json!({"resources": {"subscribe": true}})).await;
    declared
        .send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    assert_eq!(
        methods_of(&r.upstream_msgs().await),
        vec!["resources/subscribe"]
    );
}

#[tokio::test]
async fn upstream_without_subscribe_capability_gets_no_subscribe() {
    let mut r = rig_with(settings(), json!({"resources": {}})).await;
    let mut c = r.client(json!({})).await;
    let v = c
        .call("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("force_subscribe"),
        "{v}"
    );
    assert!(r.upstream_msgs().await.is_empty());
}

#[tokio::test]
async fn upstream_error_on_subscribe_reaches_every_waiter_and_changes_nothing() {
    let mut r = rig().await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    a.send("resources/subscribe", json!({"uri": "test://x"}))
        .await;
    b.send("resources/subscribe", json!({"uri": "test://x"}))
        .await;
    let up = r.upstream_msgs().await;
    assert_eq!(up.len(), 1);
    let err = Message::error_response(
        up[0].id(),
        -32002,
        "Resource not found",
        Some(json!({"uri": "test://x"})),
    );
    r.inject(err).await;
    for c in [&a, &b] {
        let v = c.next().await;
        assert_eq!(v["error"]["code"], -32002);
        assert_eq!(v["error"]["data"]["uri"], "test://x");
    }
    assert_eq!(r.hub.stats().await.unwrap().subscription_keys, 0);
}

#[tokio::test]
async fn upstream_restart_resubscribes_and_tells_holders() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    c.next().await;
    r.restart_upstream(json!({"resources": {"subscribe": true}}))
        .await;
    let up = r.upstream_msgs().await;
    let subs: Vec<&str> = methods_of(&up)
        .into_iter()
        .filter(|m| !m.ends_with("/list"))
        .collect();
    assert_eq!(subs, vec!["resources/subscribe"]);
    let got = c.pending();
    assert!(
        got.iter()
            .any(|m| m["method"] == "notifications/resources/updated"
                && m["params"]["uri"] == "test://a"),
        "{got:?}"
    );
}

#[tokio::test]
async fn upstream_restart_tells_holders_the_namespaced_uri() {
    let caps = json!({"resources": {"subscribe": true}});
    let mut r = rig_prefixed(settings(), caps.clone(), Some("p")).await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "p+test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    c.next().await;
    r.restart_upstream(caps).await;
    let up = r.upstream_msgs().await;
    let resub: Vec<&Message> = up
        .iter()
        .filter(|m| m.method() == Some("resources/subscribe"))
        .collect();
    assert_eq!(resub.len(), 1);
    let params: Value = serde_json::from_str(resub[0].params().unwrap().get()).unwrap();
    assert_eq!(params["uri"], "test://a", "the upstream gets its own form");
    let updates: Vec<Value> = c
        .pending()
        .into_iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(
        updates[0]["params"]["uri"], "p+test://a",
        "the holder gets the URI it subscribed to"
    );
}

#[tokio::test]
async fn slow_client_gets_coalesced_updates_and_others_are_untouched() {
    let mut r = rig().await;
    let mut fast = r.client(json!({})).await;
    // A slow client with a tiny queue that never drains.
    let slow_box = Outbox::new(2);
    let slow_id = r.hub.open_client(slow_box.clone()).await.unwrap();
    let init = Message::request(
        &RawId::from_u64(1),
        "initialize",
        Some(&json!({"protocolVersion": "2025-06-18", "capabilities": {}})),
    );
    r.hub.client_message(slow_id, init).await.unwrap();
    fast.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    fast.next().await;
    let sub = Message::request(
        &RawId::from_u64(2),
        "resources/subscribe",
        Some(&json!({"uri": "test://a"})),
    );
    r.hub.client_message(slow_id, sub).await.unwrap();
    for i in 0..100 {
        r.inject(Message::notification(
            "notifications/resources/updated",
            Some(&json!({"uri": "test://a", "_meta": {"n": i}})),
        ))
        .await;
        r.sync().await;
        let got = fast.pending();
        assert_eq!(got.len(), 1, "the fast client gets every update");
        assert_eq!(got[0]["params"]["_meta"]["n"], i);
    }
    assert!(
        slow_box.len() <= 3,
        "the slow client's queue stays bounded: {}",
        slow_box.len()
    );
    assert_eq!(
        r.hub.stats().await.unwrap().clients,
        2,
        "coalescing, not disconnecting"
    );
    // When it finally reads, it learns of the newest change.
    let mut out = vec![];
    slow_box.drain(&mut out).unwrap();
    let last: Value = serde_json::from_slice(&out.last().unwrap().bytes).unwrap();
    assert_eq!(last["params"]["_meta"]["n"], 99);
    assert_eq!(
        out.last().unwrap().kind,
        OutKind::Coalescible(crate::downstream::outbox::CoalesceKey::Update(SubKey::new(
            UpstreamId(0),
            "test://a"
        )))
    );
}

/// A client holding `test://a` (confirmed), and the upstream restarted since: its
/// re-subscribe is on the upstream channel.
async fn holding_test_a_across_a_restart() -> (Rig, Client) {
    let caps = json!({"resources": {"subscribe": true}});
    let mut r = rig_with(settings(), caps.clone()).await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    c.next().await;
    r.restart_upstream(caps).await;
    (r, c)
}

/// A re-subscribe after an upstream restart that the server refuses is asked again
/// (docs/architecture.md, "Upstream failure"); the holder keeps the URI meanwhile.
#[tokio::test(start_paused = true)]
async fn a_refused_resubscribe_is_retried() {
    let (mut r, mut c) = holding_test_a_across_a_restart().await;
    let resubscribe = |up: &[Message]| -> Vec<Message> {
        up.iter()
            .filter(|m| m.method() == Some("resources/subscribe"))
            .cloned()
            .collect()
    };
    let first = resubscribe(&r.upstream_msgs().await);
    assert_eq!(first.len(), 1);
    let refusal = Message::error_response(first[0].id(), -32603, "not now", None);
    r.hub
        .upstream_event(
            UpstreamId(0),
            UpstreamEvent::Message(refusal, Related::Unknown),
        )
        .await
        .unwrap();
    assert!(
        resubscribe(&r.upstream_msgs().await).is_empty(),
        "not at once"
    );
    tokio::time::advance(RESUBSCRIBE_RETRY + Duration::from_millis(1)).await;
    let mut second = vec![];
    for _ in 0..100 {
        second = resubscribe(&r.upstream_msgs().await);
        if !second.is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(second.len(), 1, "asked again after RESUBSCRIBE_RETRY");
    r.answer(&second[0], json!({})).await;
    r.sync().await;
    let stats = r.hub.stats().await.unwrap();
    assert_eq!(stats.subscription_keys, 1);
    // Confirmed now: the last holder's release unsubscribes upstream.
    c.send("resources/unsubscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    assert!(
        up.iter()
            .any(|m| m.method() == Some("resources/unsubscribe")),
        "{:?}",
        methods_of(&up)
    );
}

/// A re-subscribe the server never answers times out, and is asked again like a
/// refused one.
#[tokio::test(start_paused = true)]
async fn a_resubscribe_that_times_out_is_retried() {
    let (mut r, _c) = holding_test_a_across_a_restart().await;
    let subscribes = |up: &[Message]| {
        up.iter()
            .filter(|m| m.method() == Some("resources/subscribe"))
            .count()
    };
    assert_eq!(subscribes(&r.upstream_msgs().await), 1);
    // No answer: the request times out (and is cancelled upstream).
    tokio::time::advance(settings().request_timeout + Duration::from_millis(1)).await;
    let mut cancelled = false;
    for _ in 0..100 {
        let up = r.upstream_msgs().await;
        assert_eq!(subscribes(&up), 0, "not asked again at once");
        if up
            .iter()
            .any(|m| m.method() == Some("notifications/cancelled"))
        {
            cancelled = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(cancelled, "the re-subscribe timed out");
    tokio::time::advance(RESUBSCRIBE_RETRY + Duration::from_millis(1)).await;
    let mut again = 0;
    for _ in 0..100 {
        again = subscribes(&r.upstream_msgs().await);
        if again > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(again, 1, "asked again after RESUBSCRIBE_RETRY");
}

/// A first subscribe the server does not answer in time fails for its waiter, and is
/// undone upstream: were it applied late, nothing would ever unsubscribe it.
#[tokio::test(start_paused = true)]
async fn a_subscribe_that_times_out_is_undone_upstream() {
    let mut r = rig().await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["resources/subscribe"]);
    tokio::time::advance(settings().request_timeout + Duration::from_millis(1)).await;
    let mut after = vec![];
    for _ in 0..100 {
        after.extend(r.upstream_msgs().await);
        if after
            .iter()
            .any(|m| m.method() == Some("resources/unsubscribe"))
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        methods_of(&after),
        ["notifications/cancelled", "resources/unsubscribe"]
    );
    let params: Value = serde_json::from_str(after[1].params().unwrap().get()).unwrap();
    assert_eq!(params["uri"], "test://a");
    let answer = c.next().await;
    assert_eq!(
        answer["error"]["code"],
        crate::protocol::code::REQUEST_TIMEOUT
    );
    assert_eq!(r.hub.stats().await.unwrap().subscription_keys, 0);
}

#[tokio::test]
async fn a_burst_held_for_its_holders_keeps_each_clients_order() {
    // A burst of one URI's updates is queued to its holders together at the end of the
    // hub's turn; a response to one of them in the middle of the burst must still come
    // after the updates before it and before those after it.
    let mut r = rig().await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    for c in [&mut a, &mut b] {
        c.send("resources/subscribe", json!({"uri": "test://a"}))
            .await;
    }
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    r.sync().await;
    assert_eq!(a.pending().len(), 1);
    assert_eq!(b.pending().len(), 1);
    a.send("resources/read", json!({"uri": "test://a"})).await;
    let read = r.upstream_msgs().await;
    assert_eq!(methods_of(&read), vec!["resources/read"]);
    let update = |n: u32| {
        Message::notification(
            "notifications/resources/updated",
            Some(&json!({"uri": "test://a", "_meta": {"n": n}})),
        )
    };
    // Queued behind each other: the hub takes them in one turn.
    r.inject(update(1)).await;
    r.inject(update(2)).await;
    r.answer(&read[0], json!({"contents": []})).await;
    r.inject(update(3)).await;
    r.sync().await;
    let seen = |msgs: Vec<Value>| -> Vec<String> {
        msgs.iter()
            .map(|m| match m["params"]["_meta"]["n"].as_u64() {
                Some(n) => format!("u{n}"),
                None => "read".to_owned(),
            })
            .collect()
    };
    assert_eq!(seen(a.pending()), ["u1", "u2", "read", "u3"]);
    assert_eq!(seen(b.pending()), ["u1", "u2", "u3"]);
}

/// Two unprefixed upstreams with subscribable resources, the first listing `test://a`
/// (so the URI is routed to it by its list); each one's command channel.
async fn two_upstreams(
    stop: &CancellationToken,
) -> (
    HubHandle,
    mpsc::Receiver<UpstreamCmd>,
    mpsc::Receiver<UpstreamCmd>,
) {
    let (a_tx, mut a_rx) = mpsc::channel(1024);
    let (b_tx, mut b_rx) = mpsc::channel(1024);
    let (hub, _task) = spawn_hub(
        settings(),
        |_| vec![slot("a", a_tx, None), slot("b", b_tx, None)],
        stop.clone(),
    );
    for (u, rx, listed) in [
        (0, &mut a_rx, json!([{"uri": "test://a", "name": "a"}])),
        (1, &mut b_rx, json!([])),
    ] {
        ready(&hub, UpstreamId(u)).await;
        answer_fetches(&hub, UpstreamId(u), rx, &listed).await;
    }
    (hub, a_rx, b_rx)
}

async fn ready(hub: &HubHandle, u: UpstreamId) {
    let info = InitInfo {
        capabilities: json!({"resources": {"subscribe": true}}),
        ..InitInfo::default()
    };
    hub.upstream_event(u, UpstreamEvent::Ready(info))
        .await
        .unwrap();
}

/// Answers the catalog fetches `u` was sent: `resources` as its resource list.
async fn answer_fetches(
    hub: &HubHandle,
    u: UpstreamId,
    rx: &mut mpsc::Receiver<UpstreamCmd>,
    resources: &Value,
) {
    hub.stats().await.unwrap();
    while let Ok(cmd) = rx.try_recv() {
        let m = Message::parse(&cmd.into_bytes()).unwrap();
        let result = match m.method() {
            Some("resources/list") => json!({"resources": resources}),
            Some("resources/templates/list") => json!({"resourceTemplates": []}),
            Some("tools/list") => json!({"tools": []}),
            Some("prompts/list") => json!({"prompts": []}),
            other => panic!("unexpected upstream message at start: {other:?}"),
        };
        let answer = Message::response(m.id().unwrap(), &result);
        hub.upstream_event(u, UpstreamEvent::Message(answer, Related::Unknown))
            .await
            .unwrap();
    }
    hub.stats().await.unwrap();
}

/// An unsubscribe releases what the client holds under that URI even when the URI
/// routes elsewhere now (it left its upstream's resource list): the hold does not
/// outlive the client's wish.
#[tokio::test]
async fn an_unsubscribe_releases_the_hold_its_uri_was_routed_to() {
    let stop = CancellationToken::new();
    let (hub, mut a_rx, mut b_rx) = two_upstreams(&stop).await;
    let outbox = Outbox::new(64);
    let id = hub.open_client(outbox.clone()).await.unwrap();
    let mut c = Client {
        id,
        outbox,
        hub: hub.clone(),
        next_id: 0,
    };
    c.call("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    hub.stats().await.unwrap();
    let sub = Message::parse(&a_rx.try_recv().expect("subscribed at a").into_bytes()).unwrap();
    assert_eq!(sub.method(), Some("resources/subscribe"));
    let ok = Message::response(sub.id().unwrap(), &json!({}));
    hub.upstream_event(UpstreamId(0), UpstreamEvent::Message(ok, Related::Unknown))
        .await
        .unwrap();
    c.next().await;
    // The resource leaves a's list: the URI no longer routes anywhere.
    let changed = Message::notification("notifications/resources/list_changed", None);
    hub.upstream_event(
        UpstreamId(0),
        UpstreamEvent::Message(changed, Related::Unknown),
    )
    .await
    .unwrap();
    answer_fetches(&hub, UpstreamId(0), &mut a_rx, &json!([])).await;
    c.send("resources/unsubscribe", json!({"uri": "test://a"}))
        .await;
    assert_eq!(hub.stats().await.unwrap().subscription_keys, 0, "released");
    assert!(c.pending().iter().any(|m| m["result"] == json!({})));
    let unsubscribe =
        Message::parse(&a_rx.try_recv().expect("unsubscribed at a").into_bytes()).unwrap();
    assert_eq!(unsubscribe.method(), Some("resources/unsubscribe"));
    assert!(b_rx.try_recv().is_err(), "nothing for b");
}

/// On a 2026-07-28 upstream every read is shared. A read sent before the URI's
/// subscription was confirmed cannot be told of a change made before the confirmation:
/// its result must not be kept until the next update (a later read asks again).
#[tokio::test]
async fn a_read_sent_before_the_subscription_was_confirmed_is_not_kept_until_changed() {
    let info = InitInfo {
        era: crate::upstream::Era::Modern,
        protocol_version: "2026-07-28".into(),
        capabilities: json!({"resources": {"subscribe": true}}),
        server_info: json!({"name": "up"}),
        ..InitInfo::default()
    };
    let mut r = rig_of(settings(), info, None).await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    a.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    b.send("resources/read", json!({"uri": "test://a"})).await;
    let up = r.upstream_msgs().await;
    let find = |up: &[Message], m: &str| up.iter().find(|x| x.method() == Some(m)).cloned();
    let sub = find(&up, "resources/subscribe").expect("the subscribe");
    let read = find(&up, "resources/read").expect("the read, shared on this era");
    // Confirmed first, then the read (evaluated upstream before it) answers.
    r.answer(&sub, json!({})).await;
    r.answer(
        &read,
        json!({"contents": [{"uri": "test://a", "text": "old"}]}),
    )
    .await;
    r.sync().await;
    b.pending();
    b.send("resources/read", json!({"uri": "test://a"})).await;
    let again = r.upstream_msgs().await;
    assert_eq!(methods_of(&again), vec!["resources/read"], "asked again");
}

/// A shared read of a 2026-07-28 upstream answered `input_required` is not handed to
/// everyone who joined it: each reader's read is sent again as its own request (a
/// legacy session's is then bridged to its own elicitation or sampling).
#[tokio::test]
async fn a_shared_read_that_asks_for_input_is_sent_again_for_each_reader() {
    let info = InitInfo {
        era: crate::upstream::Era::Modern,
        protocol_version: "2026-07-28".into(),
        capabilities: json!({"resources": {}}),
        server_info: json!({"name": "up"}),
        ..InitInfo::default()
    };
    let mut r = rig_of(settings(), info, None).await;
    let mut a = r.client(json!({})).await;
    let mut b = r.client(json!({})).await;
    let read_of = |who: &str| json!({"uri": "test://a", "_meta": {"who": who}});
    a.send("resources/read", read_of("a")).await;
    b.send("resources/read", read_of("b")).await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["resources/read"], "one shared read");
    r.answer(
        &up[0],
        json!({"resultType": "input_required", "inputRequests": {}, "requestState": "s"}),
    )
    .await;
    let again = r.upstream_msgs().await;
    assert_eq!(methods_of(&again), ["resources/read", "resources/read"]);
    assert_ne!(again[0].id(), again[1].id());
    // Each is its reader's read as it was sent, `_meta` and all.
    let params: Vec<Value> = again
        .iter()
        .map(|m| serde_json::from_str(m.params().unwrap().get()).unwrap())
        .collect();
    assert_eq!(params, [read_of("a"), read_of("b")]);
    assert!(a.pending().is_empty() && b.pending().is_empty());
    // Each answer reaches its own reader.
    for (m, text) in again.iter().zip(["one", "two"]) {
        r.answer(m, json!({"contents": [{"uri": "test://a", "text": text}]}))
            .await;
    }
    r.sync().await;
    let texts: Vec<Value> = [a.pending(), b.pending()]
        .iter()
        .map(|p| p[0]["result"]["contents"][0]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("one"), json!("two")]);
    // Later reads of the URI go as each reader's own at once, until it changes.
    a.send("resources/read", json!({"uri": "test://a"})).await;
    b.send("resources/read", json!({"uri": "test://a"})).await;
    assert_eq!(methods_of(&r.upstream_msgs().await).len(), 2);
    r.inject(Message::notification(
        "notifications/resources/updated",
        Some(&json!({"uri": "test://a"})),
    ))
    .await;
    r.sync().await;
    a.send("resources/read", json!({"uri": "test://a"})).await;
    b.send("resources/read", json!({"uri": "test://a"})).await;
    assert_eq!(
        methods_of(&r.upstream_msgs().await),
        ["resources/read"],
        "shared again"
    );
}
