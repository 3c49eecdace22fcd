//! The holders and their fan-out (docs/architecture.md, "Subscriptions" and
//! "Fan-out"): who holds which URI, and who gets an update and in which form.
//!
//! [`Holders`] owns the era-neutral subscription registry (`state/subscriptions.rs`,
//! whose effects `effects.rs` carries out) and decides the audience of an update: the
//! holders of its key and of every held parent URI, each once. [`Delivery`] decides
//! what each recipient gets of one message: a session the plain bytes; a listen stream,
//! once acknowledged, the same bytes marked as related to its listen request (one
//! shared copy per listen id; its edge adds the `subscriptionId` as it writes); a
//! stateless client that is no listen, nothing. The hub's glue here (`fan_out_tagged`,
//! `queue_fan_out`) holds back fan-outs to the same audience in a row and queues them
//! through the turn, one lock of each holder's outbox for the lot: several messages go
//! as one run shared by the sessions, and one per listen id shared by those listens
//! (docs/architecture.md, "Fan-out").
//!
//! Never delivers an update to a client that holds neither the URI nor a parent of it,
//! never serializes a message more than once, never tags bytes itself, never lets a
//! held fan-out overtake or fall behind anything else queued to the same client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::effects::notification_out;
use super::Hub;
use crate::downstream::outbox::{OutKind, Outbound, Run};
use crate::protocol::{Message, RawId};
use crate::state::ids::{parent_uris, ClientId, SubKey};
use crate::state::subscriptions::SubscriptionRegistry;

/// A waiter in the subscription registry: the client and its subscribe request id (for
/// a listen, the URI's index in its filter).
pub(crate) type Waiter = (ClientId, RawId);

/// The error payload the registry hands to waiters: a JSON-RPC error object.
pub(crate) type SubError = serde_json::Value;

/// The hub's part for holders: the subscription registry and the audience of updates.
#[derive(Debug)]
pub(super) struct Holders {
    pub(super) registry: SubscriptionRegistry<Waiter>,
}

impl Holders {
    /// Released keys linger `linger` before their upstream unsubscribe.
    pub(super) fn new(linger: Duration) -> Self {
        Holders {
            registry: SubscriptionRegistry::new(linger),
        }
    }

    /// The confirmed holders of `key`: who gets its updates.
    pub(super) fn of_key(&self, key: &SubKey) -> Arc<[ClientId]> {
        self.registry
            .holders_shared(key)
            .unwrap_or_else(|| Arc::from([]))
    }

    /// Who gets an update of `key`: its holders and those of every parent URI that is
    /// held (the URI may be a sub-resource of one a client holds), each once, in client
    /// order; and the parent keys in the registry, held or lingering (their cached reads
    /// are stale too: a lingering key taken again is served from the cache at once).
    /// With no such parent, the key's own shared list: a burst of its updates allocates
    /// nothing here.
    pub(super) fn of_update(&self, key: &SubKey) -> (Arc<[ClientId]>, Vec<SubKey>) {
        let own = self.registry.holders_shared(key);
        let mut parents = Vec::new();
        let mut clients = Vec::new();
        for parent in parent_uris(&key.uri) {
            // Looked up by its parts: a key is made only for a parent that is held.
            let pkey = (key.upstream, parent);
            if self.registry.is_known_at(&pkey) {
                if self.registry.is_active_at(&pkey) {
                    clients.extend(self.registry.holders_at(&pkey));
                }
                parents.push(SubKey::new(key.upstream, parent));
            }
        }
        if parents.is_empty() {
            return (own.unwrap_or_else(|| Arc::from([])), parents);
        }
        clients.extend(own.iter().flat_map(|o| o.iter().copied()));
        clients.sort_unstable();
        clients.dedup();
        (clients.into(), parents)
    }
}

/// One message on its way to many clients: serialized once, with one tagged copy per
/// listen id that receives it.
#[derive(Debug)]
pub(super) struct Delivery {
    plain: Outbound,
    kind: OutKind,
    tagged: HashMap<RawId, Outbound>,
}

impl Delivery {
    pub(super) fn new(msg: &Message, kind: OutKind) -> Self {
        Delivery {
            plain: notification_out(msg.to_bytes(), kind.clone(), None),
            kind,
            tagged: HashMap::new(),
        }
    }

    /// What a recipient gets: a session (`stateless` false) the plain message; a
    /// stateless client only as a listen stream already acknowledged (`listen`: its
    /// listen id), the message marked as related to that request; else nothing.
    pub(super) fn to(&mut self, stateless: bool, listen: Option<&RawId>) -> Option<Outbound> {
        if !stateless {
            return Some(self.plain.clone());
        }
        let id = listen?;
        let out = self.tagged.entry(id.clone()).or_insert_with(|| {
            notification_out(
                self.plain.bytes.clone(),
                self.kind.clone(),
                Some(id.clone()),
            )
        });
        Some(out.clone())
    }
}

impl Hub {
    /// Delivers one notification (serialized once as `msg`) to `clients`, each in the
    /// form [`Delivery::to`] gives it: the same bytes to each.
    ///
    /// Fan-outs to the same audience in a row (a burst of one URI's updates) are held
    /// back and queued together by [`Hub::queue_fan_out`]: one lock of each holder's
    /// outbox for the lot instead of one per update. Anything else queued to a client
    /// first queues what is held back, so each client's order is the hub's order.
    pub(super) fn fan_out_tagged(
        &mut self,
        clients: &Arc<[ClientId]>,
        msg: &Message,
        kind: OutKind,
    ) {
        self.counters.fanout_deliveries += clients.len() as u64;
        let delivery = Delivery::new(msg, kind);
        match self.held_fan_out.as_mut() {
            Some(held) if Arc::ptr_eq(&held.clients, clients) || held.clients == *clients => {
                held.deliveries.push(delivery);
                // The copies each update makes: the plain one, and a tagged one per
                // listen id among the holders (counted once, when a run begins).
                let listens = &self.listens;
                self.turn.pushes += *held.copies.get_or_insert_with(|| {
                    let mut ids: Vec<&RawId> =
                        clients.iter().filter_map(|c| listens.acked(*c)).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    1 + ids.len()
                });
            }
            _ => {
                self.queue_fan_out();
                self.held_fan_out = Some(FanOut {
                    clients: clients.clone(),
                    deliveries: vec![delivery],
                    copies: None,
                });
                // One push per holder, however many updates are held with this one.
                self.turn.pushes += clients.len();
            }
        }
        if self.traces.on {
            // A fan-out's span counts what the outboxes merged: queue it now.
            self.queue_fan_out();
        }
    }

    /// Queues what fan-outs held back: each holder's outbox is locked once for all of
    /// it. Runs before anything else is queued to a client, before the hub reads an
    /// outbox, and at the end of every turn.
    pub(super) fn queue_fan_out(&mut self) {
        let Some(mut held) = self.held_fan_out.take() else {
            return;
        };
        let mut outs = Vec::with_capacity(held.deliveries.len());
        // With several messages, every session gets one run of them shared by all
        // sessions, and every acknowledged listen one shared by the listens of its id:
        // each holder takes one reference for the lot (each run made at its first).
        let several = held.deliveries.len() > 1;
        let mut run: Option<Option<Run>> = (!several).then_some(None);
        let mut tagged_runs: HashMap<RawId, Option<Run>> = HashMap::new();
        for &c in held.clients.iter() {
            // One lookup of the client table per holder (and one of the listens for a
            // stateless client): this loop runs for every holder of every burst.
            let Some(state) = self.clients.get(&c) else {
                continue;
            };
            let stateless = state.init.as_ref().is_some_and(|i| i.stateless.is_some());
            if !stateless {
                let shared = run.get_or_insert_with(|| {
                    Run::new(held.deliveries.iter().map(|d| d.plain.clone()).collect())
                });
                if let Some(shared) = shared {
                    self.turn.push_run(c, &state.outbox, shared.clone());
                    continue;
                }
            }
            let listen = if stateless {
                self.listens.acked(c)
            } else {
                None
            };
            if let Some(id) = listen.filter(|_| several) {
                let shared = tagged_runs.entry(id.clone()).or_insert_with(|| {
                    let items: Vec<Outbound> = held
                        .deliveries
                        .iter_mut()
                        .filter_map(|d| d.to(true, Some(id)))
                        .collect();
                    Run::new(items)
                });
                if let Some(shared) = shared {
                    self.turn.push_run(c, &state.outbox, shared.clone());
                    continue;
                }
            }
            outs.extend(
                held.deliveries
                    .iter_mut()
                    .filter_map(|d| d.to(stateless, listen)),
            );
            if !outs.is_empty() {
                self.turn.push_all(c, &state.outbox, &mut outs);
            }
        }
    }
}

/// Fan-outs to one audience, held back until [`Hub::queue_fan_out`].
#[derive(Debug)]
pub(super) struct FanOut {
    clients: Arc<[ClientId]>,
    deliveries: Vec<Delivery>,
    /// What each update after the first costs the turn: its copies (see
    /// [`Hub::fan_out_tagged`]), found when the second arrives.
    copies: Option<usize>,
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::downstream::outbox::CoalesceKey;
    use crate::protocol::methods;
    use crate::state::ids::UpstreamId;

    /// `client` holds `uri` of upstream 0, confirmed by the upstream.
    fn hold(h: &mut Holders, client: u64, uri: &str) {
        let key = SubKey::new(UpstreamId(0), uri);
        let now = Instant::now();
        let waiter = (ClientId(client), RawId::from_u64(client));
        let _ = h
            .registry
            .subscribe::<SubError>(ClientId(client), key.clone(), waiter, now);
        let _ = h.registry.upstream_result::<SubError>(&key, Ok(()), now);
    }

    #[test]
    fn an_update_reaches_the_holders_of_the_uri_and_of_its_held_parents_once() {
        let mut h = Holders::new(Duration::ZERO);
        hold(&mut h, 3, "file:///a/b/c");
        hold(&mut h, 1, "file:///a/");
        hold(&mut h, 3, "file:///a");
        hold(&mut h, 2, "file:///x");
        let key = SubKey::new(UpstreamId(0), "file:///a/b/c");
        let (clients, parents) = h.of_update(&key);
        assert_eq!(&*clients, [ClientId(1), ClientId(3)]);
        let parents: Vec<&str> = parents.iter().map(|k| &*k.uri).collect();
        assert_eq!(parents, ["file:///a/", "file:///a"]);
        // With no parent held, a burst of the URI's updates shares one list.
        let own = SubKey::new(UpstreamId(0), "file:///x");
        let (first, none) = h.of_update(&own);
        assert_eq!((&*first, none.len()), (&[ClientId(2)][..], 0));
        assert!(Arc::ptr_eq(&first, &h.of_update(&own).0));
        let (clients, parents) = h.of_update(&SubKey::new(UpstreamId(1), "file:///a/b/c"));
        assert!(
            clients.is_empty() && parents.is_empty(),
            "another upstream's"
        );
    }

    #[test]
    fn a_lingering_parent_gets_no_update_but_its_cached_read_is_dropped() {
        let mut h = Holders::new(Duration::from_secs(60));
        hold(&mut h, 1, "file:///a");
        let parent = SubKey::new(UpstreamId(0), "file:///a");
        let _ = h
            .registry
            .unsubscribe::<SubError>(ClientId(1), &parent, Instant::now());
        assert!(!h.registry.is_active(&parent), "lingering");
        let (clients, parents) = h.of_update(&SubKey::new(UpstreamId(0), "file:///a/b"));
        assert!(clients.is_empty(), "nobody holds it");
        assert_eq!(parents, [parent], "its cached read is stale all the same");
    }

    #[test]
    fn sessions_get_the_plain_bytes_and_acknowledged_listens_one_tagged_copy_per_id() {
        let msg = Message::notification(methods::RESOURCES_UPDATED, None);
        let kind = OutKind::Coalescible(CoalesceKey::Method("m".into()));
        let mut d = Delivery::new(&msg, kind);
        let session = d.to(false, None).expect("a session gets it");
        assert_eq!(session.related, None);
        assert_eq!(session.bytes, msg.to_bytes());
        assert!(d.to(true, None).is_none(), "no listen, or not acknowledged");
        let (l1, l2) = (RawId::from_u64(1), RawId::from_u64(2));
        let a = d
            .to(true, Some(&l1))
            .expect("an acknowledged listen gets it");
        let b = d.to(true, Some(&l1)).expect("as does another of that id");
        let c = d.to(true, Some(&l2)).expect("and one of another id");
        assert_eq!(a.related.as_ref(), Some(&l1));
        assert_eq!(c.related.as_ref(), Some(&l2));
        assert_eq!(a.bytes, session.bytes, "the same bytes: the edge tags them");
        assert!(std::ptr::eq(&*a, &*b), "one shared copy per listen id");
    }
}
