//! Listen streams (`subscriptions/listen`, docs/architecture.md, "Both protocol
//! eras"): a listen is one more holder in the era-neutral subscription registry, under
//! the client id of the stream (the registry never sees listen ids, which are only
//! unique per client). This file registers what a listen asks for, sends its
//! acknowledgement once every URI is settled, hands updates to every holder (the same
//! bytes to each: a listen's edge adds its `subscriptionId` as it writes), and ends the
//! streams on shutdown.
//!
//! Never: delivers to a listen before its acknowledgement, or tags bytes itself.

use std::collections::HashMap;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::effects::notification_out;
use super::{Hub, UpstreamStatus};
use crate::downstream::outbox::{OutKind, Outbound};
use crate::protocol::stateless::meta;
use crate::protocol::{code, methods, Message, RawId};
use crate::state::capabilities::UpstreamOffer;
use crate::state::ids::{ClientId, SubKey, ViewId};

/// One `subscriptions/listen` stream.
#[derive(Debug)]
pub(super) struct Listen {
    /// The listen request's id: the stream's `subscriptionId`.
    pub(super) id: RawId,
    pub(super) tools: bool,
    pub(super) prompts: bool,
    pub(super) resources: bool,
    /// Requested URIs (as the client wrote them), in order, with the outcome of each:
    /// `None` while its upstream subscribe is in flight.
    uris: Vec<(String, Option<bool>)>,
    /// The acknowledgement was sent: notifications may flow.
    pub(super) acked: bool,
}

impl Listen {
    /// Whether a `*/list_changed` notification was asked for.
    pub(super) fn wants(&self, method: &str) -> bool {
        match method {
            methods::TOOLS_LIST_CHANGED => self.tools,
            methods::PROMPTS_LIST_CHANGED => self.prompts,
            methods::RESOURCES_LIST_CHANGED => self.resources,
            _ => false,
        }
    }
}

impl Hub {
    /// is settled, before any notification.
    pub(super) fn on_listen(&mut self, client: ClientId, id: RawId, msg: &Message) {
        let filter: Value = msg
            .params()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .map(|p| p["notifications"].clone())
            .unwrap_or(Value::Null);
        if !filter.is_object() && !filter.is_null() {
            return self.reply_error(
                client,
                &id,
                code::INVALID_PARAMS,
                "params.notifications must be an object",
            );
        }
        let f = crate::protocol::listen::ListenFilter::parse(&filter);
        let uris = f.uris.unwrap_or_default();
        let listen = Listen {
            id: id.clone(),
            tools: f.tools,
            prompts: f.prompts,
            resources: f.resources,
            uris: uris.iter().map(|u| (u.clone(), None)).collect(),
            acked: false,
        };
        let Some(m) = self.stateless_mut(client) else {
            return;
        };
        m.requests.remove(&id);
        m.listen = Some(listen);
        let now = Instant::now().into_std();
        for (i, uri) in uris.iter().enumerate() {
            let key = self.listen_key(self.view_of(client), uri);
            let Some(key) = key else {
                self.listen_settled(client, i, false);
                continue;
            };
            if self.subs.count_for(client) >= self.settings.max_subscriptions_per_client {
                self.listen_settled(client, i, false);
                continue;
            }
            // The waiter's id is the URI's index in the filter (see `listen_settled`).
            let effects =
                self.subs
                    .subscribe(client, key, (client, RawId::from_u64(i as u64)), now);
            self.count_client_subscribe(&effects);
            self.apply_sub_effects(effects);
        }
        self.maybe_ack(client);
    }

    /// The registry key of a URI a listen asks for, when an upstream can deliver its
    /// updates (it declares `resources.subscribe`, or `force_subscribe`).
    fn listen_key(&self, view: ViewId, uri: &str) -> Option<SubKey> {
        let (upstream, own) = self.route_uri(view, uri)?;
        let slot = &self.upstreams[upstream.0];
        let key = SubKey::new(upstream, &own);
        let ok = match &slot.status {
            UpstreamStatus::Ready(info) => UpstreamOffer {
                capabilities: &info.capabilities,
                force_subscribe: slot.force_subscribe,
            }
            .subscribable(),
            _ => self.subs.is_active(&key),
        };
        ok.then_some(key)
    }

    /// The registry answered the subscribe for URI number `index` of a listen.
    pub(super) fn listen_settled(&mut self, client: ClientId, index: usize, ok: bool) {
        if let Some(slot) = self
            .stateless_mut(client)
            .and_then(|m| m.listen.as_mut())
            .and_then(|l| l.uris.get_mut(index))
        {
            slot.1 = Some(ok);
        }
        self.maybe_ack(client);
    }

    /// Whether `client` is a listen stream (registry answers go to `listen_settled`).
    pub(super) fn is_listen(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .and_then(|c| c.init.as_ref())
            .and_then(|i| i.stateless.as_ref())
            .is_some_and(|m| m.listen.is_some())
    }

    /// Sends the acknowledgement once every requested URI is settled.
    fn maybe_ack(&mut self, client: ClientId) {
        let Some(listen) = self.stateless_mut(client).and_then(|m| m.listen.as_mut()) else {
            return;
        };
        if listen.acked || listen.uris.iter().any(|(_, s)| s.is_none()) {
            return;
        }
        listen.acked = true;
        let honoured = crate::protocol::listen::ListenFilter {
            tools: listen.tools,
            prompts: listen.prompts,
            resources: listen.resources,
            uris: (!listen.uris.is_empty()).then(|| {
                listen
                    .uris
                    .iter()
                    .filter(|(_, s)| *s == Some(true))
                    .map(|(u, _)| u.clone())
                    .collect()
            }),
        };
        let id = listen.id.clone();
        let params = json!({
            "_meta": {meta::SUBSCRIPTION_ID: raw_json(&id)},
            "notifications": honoured.to_value(),
        });
        let ack = Message::notification(methods::SUBSCRIPTIONS_ACKNOWLEDGED, Some(&params));
        self.push(
            client,
            notification_out(ack.to_bytes(), OutKind::Request, Some(id)),
        );
    }

    /// Delivers one notification (serialized once as `msg`) to `clients`: the same
    /// bytes to each. A listen stream gets it only once acknowledged, marked as related
    /// to its listen request (its edge adds the `subscriptionId` as it writes); a
    /// stateless client that is no listen gets nothing.
    pub(super) fn fan_out_tagged(&mut self, clients: &[ClientId], msg: &Message, kind: OutKind) {
        self.counters.fanout_deliveries += clients.len() as u64;
        let plain = notification_out(msg.to_bytes(), kind.clone(), None);
        let mut per_listen: HashMap<RawId, Outbound> = HashMap::new();
        for &c in clients {
            // One lookup per holder: this loop runs for every holder of every update.
            let Some(state) = self.clients.get(&c) else {
                continue;
            };
            let out = match state.init.as_ref().and_then(|i| i.stateless.as_ref()) {
                None => plain.clone(),
                Some(m) => match m.listen.as_ref().filter(|l| l.acked) {
                    None => continue,
                    Some(l) => per_listen
                        .entry(l.id.clone())
                        .or_insert_with(|| {
                            notification_out(plain.bytes.clone(), kind.clone(), Some(l.id.clone()))
                        })
                        .clone(),
                },
            };
            self.turn.push(c, &state.outbox, out);
        }
    }

    /// Ends every listen stream gracefully (shutdown): its request is answered with a
    /// completion result, which ends the stream.
    pub(super) fn end_listens(&mut self) {
        let listens: Vec<(ClientId, RawId)> = self
            .clients
            .iter()
            .filter_map(|(c, s)| {
                let l = s.init.as_ref()?.stateless.as_ref()?.listen.as_ref()?;
                Some((*c, l.id.clone()))
            })
            .collect();
        for (client, id) in listens {
            let result =
                json!({"resultType": "complete", "_meta": {meta::SUBSCRIPTION_ID: raw_json(&id)}});
            self.reply(client, &id, result);
        }
    }
}

/// A raw id as a JSON value (it is a string or a number).
fn raw_json(id: &RawId) -> Value {
    serde_json::from_str(id.as_json()).unwrap_or(Value::Null)
}
