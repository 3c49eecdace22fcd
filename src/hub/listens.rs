//! Listen streams (`subscriptions/listen`, docs/architecture.md, "Both protocol
//! eras"): a listen is one more holder in the era-neutral subscription registry, under
//! the client id of the stream (the registry never sees listen ids, which are only
//! unique per client).
//!
//! [`Listens`] owns every open listen stream, by its client id: what it asked for, the
//! outcome of each URI's subscribe, and whether it was acknowledged. The hub's glue
//! here registers what a listen asks for, sends its acknowledgement once every URI is
//! settled, and ends the streams on shutdown; updates reach a listen through the
//! holders' fan-out (`holders.rs`), which asks this part whether it was acknowledged.
//!
//! Never: delivers to a listen before its acknowledgement, or tags bytes itself (a
//! listen's edge adds its `subscriptionId` as it writes).

use serde_json::{json, Value};
use tokio::time::Instant;

use super::effects::notification_out;
use super::{Hub, UpstreamStatus};
use crate::downstream::outbox::OutKind;
use crate::protocol::listen::ListenFilter;
use crate::protocol::stateless::meta;
use crate::protocol::{code, methods, Message, RawId};
use crate::state::capabilities::UpstreamOffer;
use crate::state::ids::{ClientId, IdMap, SubKey, ViewId};

/// One `subscriptions/listen` stream.
#[derive(Debug)]
struct Listen {
    /// The listen request's id: the stream's `subscriptionId`.
    id: RawId,
    tools: bool,
    prompts: bool,
    resources: bool,
    /// Requested URIs (as the client wrote them), in order, with the outcome of each:
    /// `None` while its upstream subscribe is in flight.
    uris: Vec<(String, Option<bool>)>,
    /// The acknowledgement was sent: notifications may flow.
    acked: bool,
}

impl Listen {
    /// Whether a `*/list_changed` notification was asked for.
    fn wants(&self, method: &str) -> bool {
        match method {
            methods::TOOLS_LIST_CHANGED => self.tools,
            methods::PROMPTS_LIST_CHANGED => self.prompts,
            methods::RESOURCES_LIST_CHANGED => self.resources,
            _ => false,
        }
    }
}

/// Every open listen stream, by the client id of the stream.
#[derive(Debug, Default)]
pub(super) struct Listens {
    open: IdMap<ClientId, Listen>,
}

impl Listens {
    /// `client`'s listen request `id` asks for `filter`: every URI of it unsettled.
    pub(super) fn open(&mut self, client: ClientId, id: RawId, filter: &ListenFilter) {
        let uris = filter.uris.as_deref().unwrap_or_default();
        let listen = Listen {
            id,
            tools: filter.tools,
            prompts: filter.prompts,
            resources: filter.resources,
            uris: uris.iter().map(|u| (u.clone(), None)).collect(),
            acked: false,
        };
        self.open.insert(client, listen);
    }

    /// The subscribe for URI number `index` of `client`'s listen was answered.
    pub(super) fn settled(&mut self, client: ClientId, index: usize, ok: bool) {
        if let Some(slot) = self
            .open
            .get_mut(&client)
            .and_then(|l| l.uris.get_mut(index))
        {
            slot.1 = Some(ok);
        }
    }

    /// When `client`'s listen is ready for its acknowledgement (every URI settled, not
    /// acknowledged yet): marks it acknowledged and gives its id and the honoured
    /// filter (the URIs whose subscribe succeeded). Once per listen.
    pub(super) fn take_ack(&mut self, client: ClientId) -> Option<(RawId, ListenFilter)> {
        let listen = self.open.get_mut(&client)?;
        if listen.acked || listen.uris.iter().any(|(_, s)| s.is_none()) {
            return None;
        }
        listen.acked = true;
        let honoured = ListenFilter {
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
        Some((listen.id.clone(), honoured))
    }

    /// Whether `client` is a listen stream.
    pub(super) fn contains(&self, client: ClientId) -> bool {
        self.open.contains_key(&client)
    }

    /// The listen id of `client`'s stream once acknowledged (what it is told is
    /// tagged with); `None` before, or for a client that is no listen.
    pub(super) fn acked(&self, client: ClientId) -> Option<&RawId> {
        self.open.get(&client).filter(|l| l.acked).map(|l| &l.id)
    }

    /// Whether `client` is a listen stream that asked for `method` (a
    /// `*/list_changed`).
    pub(super) fn wants(&self, client: ClientId, method: &str) -> bool {
        self.open.get(&client).is_some_and(|l| l.wants(method))
    }

    /// Every open stream with its listen id, in the order they opened: who to end on
    /// shutdown.
    pub(super) fn streams(&self) -> Vec<(ClientId, RawId)> {
        let mut all: Vec<(ClientId, RawId)> =
            self.open.iter().map(|(c, l)| (*c, l.id.clone())).collect();
        all.sort_unstable_by_key(|(c, _)| *c);
        all
    }

    /// `client` closed: its listen goes.
    pub(super) fn close(&mut self, client: ClientId) {
        self.open.remove(&client);
    }
}

impl Hub {
    /// A listen request: its URIs are subscribed, and it is acknowledged once every one
    /// is settled, before any notification.
    pub(super) fn on_listen(&mut self, client: ClientId, id: RawId, msg: &Message) {
        // What a held fan-out gives a listen depends on its state: settle it first.
        self.queue_fan_out();
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
        let f = ListenFilter::parse(&filter);
        let Some(m) = self.stateless_mut(client) else {
            return;
        };
        m.requests.remove(&id);
        self.listens.open(client, id, &f);
        let now = Instant::now().into_std();
        for (i, uri) in f.uris.iter().flatten().enumerate() {
            let key = self.listen_key(self.view_of(client), uri);
            let Some(key) = key else {
                self.listen_settled(client, i, false);
                continue;
            };
            if self.holders.registry.count_for(client) >= self.settings.max_subscriptions_per_client
            {
                self.listen_settled(client, i, false);
                continue;
            }
            // The waiter's id is the URI's index in the filter (see `listen_settled`).
            let effects = self.holders.registry.subscribe(
                client,
                key,
                (client, RawId::from_u64(i as u64)),
                now,
            );
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
            _ => self.holders.registry.is_active(&key),
        };
        ok.then_some(key)
    }

    /// The registry answered the subscribe for URI number `index` of a listen.
    pub(super) fn listen_settled(&mut self, client: ClientId, index: usize, ok: bool) {
        // What a held fan-out gives a listen depends on its state: settle it first.
        self.queue_fan_out();
        self.listens.settled(client, index, ok);
        self.maybe_ack(client);
    }

    /// Sends the acknowledgement once every requested URI is settled.
    fn maybe_ack(&mut self, client: ClientId) {
        let Some((id, honoured)) = self.listens.take_ack(client) else {
            return;
        };
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

    /// Ends every listen stream gracefully (shutdown): its request is answered with a
    /// completion result, which ends the stream.
    pub(super) fn end_listens(&mut self) {
        // What a held fan-out gives a listen depends on its state: settle it first.
        self.queue_fan_out();
        for (client, id) in self.listens.streams() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(uris: Option<&[&str]>) -> ListenFilter {
        ListenFilter {
            tools: true,
            prompts: false,
            resources: false,
            uris: uris.map(|u| u.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn a_listen_is_acknowledged_once_every_uri_settled_with_the_honoured_ones() {
        let mut l = Listens::default();
        let c = ClientId(4);
        l.open(
            c,
            RawId::from_u64(9),
            &filter(Some(&["a://1", "a://2", "a://3"])),
        );
        assert!(l.contains(c));
        l.settled(c, 0, true);
        l.settled(c, 2, false);
        assert_eq!(l.take_ack(c), None, "a://2 still in flight");
        assert_eq!(l.acked(c), None, "nothing flows before the acknowledgement");
        l.settled(c, 1, true);
        let (id, honoured) = l.take_ack(c).expect("every URI settled");
        assert_eq!(id, RawId::from_u64(9));
        assert_eq!(honoured, filter(Some(&["a://1", "a://2"])));
        assert_eq!(l.take_ack(c), None, "acknowledged once");
        assert_eq!(l.acked(c), Some(&RawId::from_u64(9)));
    }

    #[test]
    fn a_listen_without_uris_is_ready_at_once_and_honours_none() {
        let mut l = Listens::default();
        l.open(ClientId(1), RawId::from_u64(1), &filter(None));
        l.open(ClientId(2), RawId::from_u64(2), &filter(Some(&[])));
        assert_eq!(l.take_ack(ClientId(1)).map(|a| a.1.uris), Some(None));
        assert_eq!(l.take_ack(ClientId(2)).map(|a| a.1.uris), Some(None));
    }

    #[test]
    fn list_changes_go_only_where_asked_and_closed_listens_are_gone() {
        let mut l = Listens::default();
        l.open(ClientId(7), RawId::from_u64(1), &filter(None));
        l.open(ClientId(3), RawId::from_u64(2), &filter(None));
        assert!(l.wants(ClientId(7), methods::TOOLS_LIST_CHANGED));
        assert!(!l.wants(ClientId(7), methods::PROMPTS_LIST_CHANGED));
        assert!(
            !l.wants(ClientId(5), methods::TOOLS_LIST_CHANGED),
            "no listen"
        );
        assert_eq!(
            l.streams(),
            [
                (ClientId(3), RawId::from_u64(2)),
                (ClientId(7), RawId::from_u64(1))
            ]
        );
        l.close(ClientId(7));
        assert!(!l.contains(ClientId(7)));
        l.settled(ClientId(7), 0, true);
        assert_eq!(l.take_ack(ClientId(7)), None);
        assert_eq!(l.streams().len(), 1);
    }
}
