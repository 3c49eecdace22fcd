//! MRTR across the fleet (docs/architecture.md, "Fleet", MRTR retries): the fleet's
//! one `requestState` key, kept in NATS so every instance checks every instance's
//! states; a retry that reached this instance for a request another instance holds is
//! sent there (request-reply on that instance's retry subject); a retry another
//! instance sent here is served by this instance's hub through a 2026-07-28 client of
//! its own, whose answer goes back on the reply subject.
//!
//! Owns nothing between messages: every forwarded or served retry is a task of its
//! own, so the actor's loop never waits for one. Never touches the hub's state.

use std::time::Duration;

use async_nats::jetstream::kv;
use bytes::Bytes;
use serde_json::{json, Value};

use super::{keys, FleetActor};
use crate::downstream::link::{ClientKind, ClientLink};
use crate::downstream::outbox::Outbox;
use crate::fleet::FleetEvent;
use crate::protocol::{Kind, Message, RawId};
use crate::state::ids::ClientId;

/// How long a forwarded retry may take: the held request's own work (its upstream
/// finishing, or asking for the next round of input) happens meanwhile.
const RETRY_TIMEOUT: Duration = Duration::from_secs(300);

/// Reads the fleet's state key, creating it when this is the first instance.
pub(super) async fn state_key(
    js: &async_nats::jetstream::Context,
    fleet: &str,
) -> Option<[u8; 32]> {
    let cfg = kv::Config {
        bucket: keys::secrets_bucket(fleet),
        history: 1,
        ..Default::default()
    };
    let store = match js.get_key_value(&cfg.bucket).await {
        Ok(s) => s,
        Err(_) => js.create_key_value(cfg.clone()).await.ok().or(None)?,
    };
    let fresh: [u8; 32] = rand::random();
    // Only the first instance's key is kept; the others read it.
    let _ = store
        .create(keys::STATE_KEY_ENTRY, Bytes::copy_from_slice(&fresh))
        .await;
    let stored = store.get(keys::STATE_KEY_ENTRY).await.ok()??;
    stored.as_ref().try_into().ok()
}

impl FleetActor {
    /// Sends a retry to the instance that holds its request; the answer (or why there
    /// is none) reaches the hub as `FleetEvent::RetryDone`.
    pub(super) fn forward_retry(
        &self,
        instance: String,
        client: ClientId,
        id: RawId,
        request: Bytes,
        capabilities: Value,
        log_level: Option<String>,
    ) {
        let conn = self.conn.as_ref().map(|c| c.client.clone());
        let subject = keys::retry_subject(&self.cfg.name, &instance);
        let events = self.events.clone();
        tokio::spawn(async move {
            let answer = match conn {
                None => Err(format!(
                    "it was issued by mcpmux instance {instance}, and this instance cannot reach the fleet now"
                )),
                Some(nats) => {
                    let body = json!({
                        "request": serde_json::from_slice::<Value>(&request).unwrap_or_default(),
                        "capabilities": capabilities,
                        "logLevel": log_level,
                    });
                    let req = async_nats::Request::new()
                        .payload(Bytes::from(body.to_string()))
                        .timeout(Some(RETRY_TIMEOUT));
                    match nats.send_request(subject, req).await {
                        Ok(m) => Ok(m.payload),
                        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Err(format!(
                            "the mcpmux instance that issued it ({instance}) is gone (stopped or restarted), \
                             and the request it held with it: send the request again without requestState"
                        )),
                        Err(e) => Err(format!(
                            "the mcpmux instance that issued it ({instance}) did not answer: {e}"
                        )),
                    }
                }
            };
            let _ = events
                .send(FleetEvent::RetryDone { client, id, answer })
                .await;
        });
    }

    /// Serves a retry another instance sent: as a 2026-07-28 client of this hub.
    pub(super) fn serve_retry(&self, m: async_nats::Message) {
        let (Some(reply), Some(conn)) = (m.reply.clone(), self.conn.as_ref()) else {
            return;
        };
        let nats = conn.client.clone();
        let clients = self.clients.clone();
        tokio::spawn(async move {
            let answer = served(&clients, &m.payload).await;
            let _ = nats.publish(reply, answer).await;
        });
    }
}

/// The hub's answer to a forwarded retry, as the bytes of its JSON-RPC response.
async fn served(clients: &ClientLink, payload: &[u8]) -> Bytes {
    let v: Value = serde_json::from_slice(payload).unwrap_or_default();
    let failed = |why: &str| {
        let id =
            RawId::parse(&v["request"]["id"].to_string()).unwrap_or_else(|| RawId::from_u64(0));
        Message::error_response(Some(&id), crate::protocol::code::INTERNAL_ERROR, why, None)
            .to_bytes()
    };
    let Ok(msg) = Message::parse(v["request"].to_string().as_bytes()) else {
        return failed("the forwarded retry is not a request");
    };
    let Some(id) = msg.id().cloned().filter(|_| msg.kind() == Kind::Request) else {
        return failed("the forwarded retry is not a request");
    };
    let outbox = Outbox::for_transport(64, "fleet");
    let kind = ClientKind::Stateless {
        capabilities: v["capabilities"].clone(),
        log_level: v["logLevel"].as_str().map(str::to_owned),
        shared_outbox: None,
        param_headers: None,
    };
    let Ok(client) = clients.open(outbox.clone(), kind).await else {
        return failed("the instance that holds the request is shutting down");
    };
    if clients.client_message(client, msg).await.is_err() {
        return failed("the instance that holds the request is shutting down");
    }
    let answer = tokio::time::timeout(RETRY_TIMEOUT, async {
        loop {
            outbox.ready().await;
            let mut out = Vec::new();
            if outbox.drain(&mut out).is_err() {
                return None;
            }
            for o in out {
                if let Ok(m) = Message::parse(&o.bytes) {
                    if m.kind() == Kind::Response && m.id() == Some(&id) {
                        return Some(o.bytes.clone());
                    }
                }
            }
        }
    })
    .await;
    clients.client_closed(client, "answered").await;
    match answer {
        Ok(Some(bytes)) => bytes,
        _ => failed("the instance that holds the request gave no answer"),
    }
}
