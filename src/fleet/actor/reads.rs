//! Reads across the fleet (docs/architecture.md, "Fleet", Reads): as an owner, the
//! actor answers followers' reads by reading through the hub as a client of its own (so
//! this instance's cache and single flight serve the fleet); as a follower, it sends a
//! read to the owner in a task of its own, never waiting for the answer in its loop.
//!
//! Owns the actor's hub client and the reads it has in flight for followers. Never
//! touches the hub's state or the keys' roles.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::{keys, FleetActor, Role};
use crate::downstream::link::ClientLink;
use crate::downstream::outbox::Outbox;
use crate::fleet::FleetEvent;
use crate::protocol::{Message, RawId};
use crate::state::ids::{ClientId, SubKey};

/// How long a follower waits for the owner's answer to a read before reading itself.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// The actor's client of the hub, for reads it serves as an owner.
pub(super) struct Reader {
    client: ClientId,
    pub(super) outbox: Arc<Outbox>,
    next: u64,
    /// Request id → the NATS reply subject.
    waiting: HashMap<u64, async_nats::Subject>,
}

impl FleetActor {
    /// A follower asks this instance (the owner) for a read: read through the hub.
    pub(super) async fn serve_read(&mut self, m: async_nats::Message) {
        let Some(reply) = m.reply.clone() else {
            return;
        };
        let kid = m.subject.as_str().rsplit('.').next().unwrap_or_default();
        let owned = matches!(self.keys.get(kid).map(|k| k.role), Some(Role::Own { .. }));
        if !owned {
            // Every instance hears the request; only the owner answers it.
            return;
        }
        let uri = String::from_utf8_lossy(&m.payload).into_owned();
        if self.reader.is_none() {
            self.reader = open_reader(&self.clients).await;
        }
        let Some(r) = self.reader.as_mut() else {
            self.answer(reply, &json!({"fleet": "cannot read"})).await;
            return;
        };
        r.next += 1;
        let id = r.next;
        r.waiting.insert(id, reply);
        let req = Message::request(
            &RawId::from_u64(id),
            "resources/read",
            Some(&json!({ "uri": uri })),
        );
        let _ = self.clients.client_message(r.client, req).await;
    }

    /// Answers from the hub to reads served for followers.
    pub(super) async fn deliver_reads(&mut self) {
        let Some(r) = self.reader.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        if r.outbox.drain(&mut out).is_err() {
            self.reader = None;
            return;
        }
        let mut replies = Vec::new();
        for o in out {
            let Ok(msg) = Message::parse(&o.bytes) else {
                continue;
            };
            let Some(id) = msg.id().and_then(RawId::as_u64) else {
                continue;
            };
            if let Some(reply) = r.waiting.remove(&id) {
                let body = match (msg.result(), msg.error()) {
                    (Some(res), _) => format!("{{\"result\":{}}}", res.get()),
                    (None, Some(err)) => format!("{{\"error\":{}}}", err.get()),
                    _ => continue,
                };
                replies.push((reply, body));
            }
        }
        if let Some(conn) = &self.conn {
            for (reply, body) in replies {
                let _ = conn.client.publish(reply, Bytes::from(body)).await;
            }
        }
    }

    async fn answer(&self, reply: async_nats::Subject, body: &serde_json::Value) {
        if let Some(conn) = &self.conn {
            let _ = conn
                .client
                .publish(reply, Bytes::from(body.to_string()))
                .await;
        }
    }

    /// A follower's read, answered by the owner, in a task of its own (the actor goes
    /// on relaying updates and renewing leases meanwhile), which sends the hub
    /// `FleetEvent::ReadDone`.
    pub(super) fn read_from_owner(&self, key: SubKey, exposed_uri: String, generation: u64) {
        let target = match (self.kid_of(&key), &self.conn) {
            (Some(kid), Some(conn)) => Some((
                conn.client.clone(),
                keys::read_subject(&self.cfg.name, &kid),
            )),
            _ => None,
        };
        let events = self.events.clone();
        tokio::spawn(async move {
            let outcome = match target {
                Some((client, subject)) => ask_owner(&client, subject, exposed_uri).await,
                None => Err(json!({"fleet": "no fleet"}).to_string()),
            };
            let _ = events
                .send(FleetEvent::ReadDone {
                    key,
                    generation,
                    outcome,
                })
                .await;
        });
    }
}

/// Asks the owner for a read. `Err` carries an error object; a read the fleet cannot do
/// is `Err` with `"fleet"` set (the hub then reads itself).
async fn ask_owner(
    client: &async_nats::Client,
    subject: String,
    exposed_uri: String,
) -> Result<String, String> {
    let unavailable = |why: &str| Err(json!({"fleet": why}).to_string());
    let req = client.request(subject, Bytes::from(exposed_uri));
    let answer = match tokio::time::timeout(READ_TIMEOUT, req).await {
        Ok(Ok(m)) => m,
        _ => return unavailable("the owner did not answer"),
    };
    let v: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap_or_default();
    if let Some(r) = v.get("result") {
        Ok(r.to_string())
    } else if let Some(e) = v.get("error") {
        Err(e.to_string())
    } else {
        unavailable("the owner could not read")
    }
}

/// The actor's own client of the hub (initialized like any legacy client), through
/// which it reads for followers: such reads use this instance's cache.
async fn open_reader(clients: &ClientLink) -> Option<Reader> {
    let outbox = Outbox::for_transport(1024, "fleet");
    let client = clients
        .open(
            outbox.clone(),
            crate::downstream::link::ClientKind::FleetReader,
        )
        .await
        .ok()?;
    let init = Message::request(
        &RawId::from_u64(0),
        "initialize",
        Some(&json!({"protocolVersion": crate::protocol::LATEST_VERSION,
            "capabilities": {}, "clientInfo": {"name": "mcpmux-fleet", "version": env!("CARGO_PKG_VERSION")}})),
    );
    clients.client_message(client, init).await.ok()?;
    let initialized = Message::notification("notifications/initialized", None);
    clients.client_message(client, initialized).await.ok()?;
    // The initialize answer is drained with the first reads (id 0 matches no read).
    Some(Reader {
        client,
        outbox,
        next: 0,
        waiting: HashMap::new(),
    })
}
