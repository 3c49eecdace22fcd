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
    let info = InitInfo {
        protocol_version: "2025-11-25".into(),
        capabilities: caps,
        server_info: json!({"name": "up"}),
        ..InitInfo::default()
    };
    rig_of(settings, info, prefix).await
}

/// A rig whose one upstream answered its handshake with `info`.
async fn rig_of(settings: HubSettings, info: InitInfo, prefix: Option<&str>) -> Rig {
    let prefix = prefix.map(str::to_owned);
    rig_of_slot(settings, info, |tx| slot("up", tx, prefix)).await
}

/// A rig whose one upstream, as `make` makes it, answered its handshake with `info`.
async fn rig_of_slot(
    settings: HubSettings,
    info: InitInfo,
    make: impl FnOnce(mpsc::Sender<UpstreamCmd>) -> UpstreamSlot,
) -> Rig {
    rig_of_hub(settings, info, make, None).await
}

/// [`rig_of_slot`], with the fleet actor (when given) played by the test.
async fn rig_of_hub(
    settings: HubSettings,
    info: InitInfo,
    make: impl FnOnce(mpsc::Sender<UpstreamCmd>) -> UpstreamSlot,
    fleet: Option<crate::fleet::FleetHandle>,
) -> Rig {
    let (up_tx, up_rx) = mpsc::channel(1024);
    let stop = CancellationToken::new();
    let up = make(up_tx);
    let (hub, inboxes) = HubHandle::channels(INBOX_CAPACITY);
    let mut actor = Hub::new(settings, vec![up]);
    actor.fleet.actor = fleet;
    tokio::spawn(actor.run(inboxes, stop.clone()));
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

/// An upstream slot as the config would make it, commanded through `tx`.
fn slot(name: &str, tx: mpsc::Sender<UpstreamCmd>, prefix: Option<String>) -> UpstreamSlot {
    UpstreamSlot {
        name: name.into(),
        handle: UpstreamHandle::new(tx),
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
    }
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
        self.client_on(Outbox::new(64), caps).await
    }

    /// A client whose messages go to `outbox`, initialized with `caps`.
    async fn client_on(&self, outbox: std::sync::Arc<Outbox>, caps: Value) -> Client {
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

    /// Sends `notifications/cancelled` naming this client's request `id`.
    async fn cancel(&self, id: &RawId) {
        let params = json!({"requestId": serde_json::from_str::<Value>(id.as_json()).unwrap()});
        let m = Message::notification("notifications/cancelled", Some(&params));
        self.hub.client_message(self.id, m).await.unwrap();
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
            // Markers that carry no bytes (a cancelled request's release) are not
            // messages.
            out.retain(|o| !o.bytes.is_empty());
            if let Some(first) = out.first() {
                assert_eq!(out.len(), 1, "expected one message, got {out:?}");
                return serde_json::from_slice(&first.bytes).unwrap();
            }
            tokio::time::timeout(Duration::from_secs(5), self.outbox.ready())
                .await
                .expect("a message");
        }
    }

    /// Every message queued for the client (not the markers that carry no bytes).
    fn pending(&self) -> Vec<Value> {
        let mut out = vec![];
        self.outbox.drain(&mut out).unwrap();
        out.iter()
            .filter(|o| !o.bytes.is_empty())
            .map(|o| serde_json::from_slice(&o.bytes).unwrap())
            .collect()
    }
}

/// A stateless (2026-07-28) client with no capabilities, on its own outbox or (with
/// `shared_outbox`) on a stdio connection's.
fn stateless_kind(shared_outbox: Option<RawId>) -> ClientKind {
    ClientKind::Stateless {
        capabilities: json!({}),
        log_level: None,
        shared_outbox,
        param_headers: None,
    }
}

fn methods_of(msgs: &[Message]) -> Vec<&str> {
    msgs.iter().filter_map(Message::method).collect()
}

mod batches;
mod fleet;
mod hidden;
mod requests;
mod server_messages;
mod subscriptions;
