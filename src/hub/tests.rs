//! In-process actor tests of the hub: real hub task, real outboxes, and a scripted
//! upstream played by the test through the upstream command channel. No processes,
//! no sockets, no sleeps: `stats()` is a round trip through the hub's inbox, so after
//! it returns every earlier event has been handled.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::downstream::outbox::{OutKind, Outbox};
use crate::protocol::{Kind, Message, RawId};
use crate::upstream::Related;
use crate::upstream::{InitInfo, UpstreamCmd, UpstreamEvent, UpstreamHandle};

struct Rig {
    hub: HubHandle,
    up_rx: mpsc::Receiver<UpstreamCmd>,
    _stop: CancellationToken,
}

fn settings() -> HubSettings {
    HubSettings {
        client_capability: ClientCapabilityPolicy::Offered,
        linger: Duration::ZERO,
        max_clients: 100,
        max_subscriptions_per_client: 10,
        max_pending_per_client: 10,
        request_timeout: Duration::from_secs(60),
        request_max_total: Duration::from_secs(600),
        cache_entries: 100,
        cache_bytes: 1 << 20,
        profiles: Vec::new(),
    }
}

async fn rig_with(settings: HubSettings, caps: Value) -> Rig {
    rig_prefixed(settings, caps, None).await
}

async fn rig_prefixed(settings: HubSettings, caps: Value, prefix: Option<&str>) -> Rig {
    let prefix = prefix.map(str::to_owned);
    let (up_tx, up_rx) = mpsc::channel(1024);
    let stop = CancellationToken::new();
    let (hub, _task) = spawn_hub(
        settings,
        |_| {
            vec![UpstreamSlot {
                name: "up".into(),
                handle: UpstreamHandle::new(up_tx),
                force_subscribe: false,
                prefix,
                uri_prefixes: vec![],
                unrelated: Default::default(),
                ttl_ms: 0,
                cache_scope: Default::default(),
                declares_roots: true,
                shared: false,
                view: Default::default(),
                declared_caps: json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}}),
                last_caps: Value::Null,
                status: UpstreamStatus::Starting,
                was_ready: false,
                catalog_synced: false,
            }]
        },
        stop.clone(),
    );
    let info = InitInfo {
        protocol_version: "2025-11-25".into(),
        capabilities: caps,
        server_info: json!({"name": "up"}),
        ..InitInfo::default()
    };
    hub.upstream_event(UpstreamId(0), UpstreamEvent::Ready(info))
        .await
        .unwrap();
    let mut rig = Rig {
        hub,
        up_rx,
        _stop: stop,
    };
    rig.answer_catalog_fetches().await;
    rig
}

async fn rig() -> Rig {
    rig_with(
        settings(),
        json!({"resources": {"subscribe": true}, "tools": {}}),
    )
    .await
}

struct Client {
    id: ClientId,
    outbox: std::sync::Arc<Outbox>,
    hub: HubHandle,
    next_id: u64,
}

impl Rig {
    async fn client(&self, caps: Value) -> Client {
        let outbox = Outbox::new(64);
        let id = self.hub.open_client(outbox.clone()).await.unwrap();
        let mut c = Client {
            id,
            outbox,
            hub: self.hub.clone(),
            next_id: 0,
        };
        let r = c
            .call("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}}))
            .await;
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
        c
    }

    /// Waits until the hub handled everything sent so far.
    async fn sync(&self) {
        self.hub.stats().await.unwrap();
    }

    /// Every message the hub has sent upstream so far.
    /// The upstream goes down and comes back with `caps` (a restart).
    async fn restart_upstream(&mut self, caps: Value) {
        let down = UpstreamEvent::Down {
            reason: "crash".into(),
            retrying: true,
        };
        self.hub.upstream_event(UpstreamId(0), down).await.unwrap();
        let info = InitInfo {
            capabilities: caps,
            ..InitInfo::default()
        };
        self.hub
            .upstream_event(UpstreamId(0), UpstreamEvent::Ready(info))
            .await
            .unwrap();
    }

    async fn upstream_msgs(&mut self) -> Vec<Message> {
        self.sync().await;
        let mut out = vec![];
        while let Ok(cmd) = self.up_rx.try_recv() {
            let b = cmd.into_bytes();
            out.push(Message::parse(&b).unwrap());
        }
        out
    }

    /// On ready the hub lists what the upstream offers (for routing); answer with
    /// empty lists so each test starts with a quiet upstream channel.
    async fn answer_catalog_fetches(&mut self) {
        for m in self.upstream_msgs().await {
            let key = match m.method() {
                Some("tools/list") => "tools",
                Some("prompts/list") => "prompts",
                Some("resources/list") => "resources",
                Some("resources/templates/list") => "resourceTemplates",
                other => panic!("unexpected upstream message at start: {other:?}"),
            };
            self.answer(&m, json!({ key: [] })).await;
        }
        self.sync().await;
    }

    async fn answer(&self, req: &Message, result: Value) {
        let m = Message::response(req.id().unwrap(), &result);
        self.inject(m).await;
    }

    async fn inject(&self, m: Message) {
        self.inject_related(m, Related::Unknown).await;
    }

    async fn inject_related(&self, m: Message, related: Related) {
        self.hub
            .upstream_event(UpstreamId(0), UpstreamEvent::Message(m, related))
            .await
            .unwrap();
    }
}

impl Client {
    async fn send(&mut self, method: &str, params: Value) -> RawId {
        self.next_id += 1;
        let id = RawId::from_u64(self.next_id * 1000 + self.id.0);
        let m = Message::request(&id, method, Some(&params));
        self.hub.client_message(self.id, m).await.unwrap();
        id
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let v = self.next().await;
        assert_eq!(v["id"].to_string(), id.as_json(), "{v}");
        v
    }

    async fn next(&self) -> Value {
        loop {
            let mut out = vec![];
            self.outbox.drain(&mut out).unwrap();
            if let Some(first) = out.first() {
                assert_eq!(out.len(), 1, "expected one message, got {out:?}");
                return serde_json::from_slice(&first.bytes).unwrap();
            }
            tokio::time::timeout(Duration::from_secs(5), self.outbox.ready())
                .await
                .expect("a message");
        }
    }

    fn pending(&self) -> Vec<Value> {
        let mut out = vec![];
        self.outbox.drain(&mut out).unwrap();
        out.iter()
            .map(|o| serde_json::from_slice(&o.bytes).unwrap())
            .collect()
    }
}

fn methods_of(msgs: &[Message]) -> Vec<&str> {
    msgs.iter().filter_map(Message::method).collect()
}

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
    let cancel = Message::notification(
        "notifications/cancelled",
        Some(&json!({"requestId": serde_json::from_str::<Value>(id.as_json()).unwrap()})),
    );
    c.hub.client_message(c.id, cancel).await.unwrap();
    let up2 = r.upstream_msgs().await;
    let params: Value = serde_json::from_str(up2[0].params().unwrap().get()).unwrap();
    assert_eq!(
        params["requestId"].to_string(),
        up[0].id().unwrap().as_json()
    );
    assert_eq!(r.hub.stats().await.unwrap().pending_requests, 0);
}

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

/// A re-subscribe after an upstream restart that the server refuses is asked again
/// (docs/architecture.md, "Upstream failure"); the holder keeps the URI meanwhile.
#[tokio::test(start_paused = true)]
async fn a_refused_resubscribe_is_retried() {
    let caps = json!({"resources": {"subscribe": true}});
    let mut r = rig_with(settings(), caps.clone()).await;
    let mut c = r.client(json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    r.answer(&up[0], json!({})).await;
    c.next().await;
    r.restart_upstream(caps).await;
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
