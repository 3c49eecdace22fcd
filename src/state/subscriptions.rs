//! The subscription registry: which client holds which `(upstream, uri)` subscription,
//! and the one upstream subscription per key that serves all of them.
//!
//! This module owns the reference counting behind `resources/subscribe`. It never does
//! I/O, never touches tokio and never reads a clock: every operation takes its inputs
//! (and `now`) and returns [`SubEffect`]s for the hub to carry out.
//!
//! # Rules
//!
//! - Per client, subscriptions are a *set*: subscribing twice is idempotent, unsubscribing
//!   a key not held does nothing.
//! - Per key, exactly one upstream `resources/subscribe` on the 0→1 transition; clients
//!   that subscribe while it is in flight wait for the same answer. An upstream error is
//!   sent to every waiter and leaves nothing behind.
//! - Exactly one upstream `resources/unsubscribe` on 1→0, after an optional linger that a
//!   re-subscribe cancels. A key is removed at zero (no empty entries, unlike mini-redis
//!   issue #63).
//!
//! # Invariants (checked by `check_invariants` in tests)
//!
//! - `by_key` and `by_client` mirror each other exactly: `by_client[c]` contains `k` iff
//!   `k` is `Active` with `c` among its holders, or `Pending` with `c` among its waiters.
//!   (`wanted` is always a subset of the waiters' clients.)
//! - No empty `Active` holder set and no empty `by_client` entry is stored.
//! - A `Pending` key *may* have no waiters: when every waiter left while the upstream
//!   call was in flight, the key stays `Pending` until the answer arrives, so that a new
//!   subscriber joins that call instead of sending a second one. An `Ok` answer then takes
//!   the 1→0 path (unsubscribe or linger); an error just removes the key.
//! - A `Lingering` key has no clients at all.
//! - At most one upstream `resources/subscribe` per key is in flight at any time, and an
//!   unsubscribe is only emitted for a key the current upstream session holds.
//!
//! # Upstream restarts
//!
//! Holders survive a restart. Each `Active` key tracks whether the *current* session
//! holds it (`Ack`): `upstream_lost` marks it unconfirmed, `upstream_ready` re-subscribes
//! it. If the last holder leaves while a re-subscribe is in flight the key becomes
//! `Pending` with no waiters, so the answer is awaited like any first subscribe.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use super::ids::{ClientId, IdMap, SubKey, SubKeyView, UpstreamId};

mod holder_set;
#[cfg(test)]
mod invariants;
mod upstream;

use holder_set::HolderSet;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// What the hub must do after a registry operation, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubEffect<W, E> {
    /// Send exactly one `resources/subscribe` for this key upstream.
    UpstreamSubscribe(SubKey),
    /// Send exactly one `resources/unsubscribe` for this key upstream.
    UpstreamUnsubscribe(SubKey),
    /// Answer a client's pending subscribe request.
    Reply { waiter: W, result: Result<(), E> },
    /// Call `linger_expired(key, at)` at `at` (or later).
    SetLingerTimer { key: SubKey, at: Instant },
    /// The key left the registry with nothing to send upstream: its upstream session
    /// was not known to hold it (the upstream was down, or the subscribe failed).
    /// Whoever else tracks the key (the fleet) lets it go.
    Forgotten(SubKey),
}

/// The state of one `(upstream, uri)` key. A key that is not in the map has no upstream
/// subscription and nothing in flight.
#[derive(Debug, Clone)]
enum KeyState<W> {
    /// The upstream `resources/subscribe` was sent and not answered yet.
    Pending {
        /// Every subscribe request waiting for the answer, in arrival order. Each gets
        /// exactly one reply (unless its client leaves first). May be empty when all
        /// waiters left while the call was in flight. The flag says whether the client
        /// wanted the key just before this subscribe (what a cancel of it restores).
        waiters: Vec<(ClientId, W, bool)>,
        /// Clients that will hold the key if the answer is `Ok`: waiters whose last
        /// request for this key was a subscribe (an unsubscribe removes them here but
        /// keeps their waiter entry, so their subscribe is still answered).
        wanted: BTreeSet<ClientId>,
    },
    /// The upstream accepted the subscription; these clients hold it.
    Active {
        /// Never empty: the last holder leaving moves the key on (1→0).
        holders: HolderSet,
        /// Whether the *current* upstream session holds the subscription.
        ack: Ack,
    },
    /// No client holds the key, but the upstream subscription is kept until `until`
    /// so that a quick re-subscribe does not flap unsubscribe/subscribe.
    Lingering {
        /// When the deferred upstream `resources/unsubscribe` becomes due.
        until: Instant,
    },
}

/// For an `Active` key: how the current upstream session stands on it. Holders are kept
/// across upstream restarts; only this changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// The current session confirmed the subscription.
    Confirmed,
    /// A re-subscribe (after `upstream_ready`) is in flight.
    Resubscribing,
    /// The session is gone, or the re-subscribe failed: the upstream does not hold it,
    /// so 1→0 sends no unsubscribe.
    Unconfirmed,
}

/// The reference-counted subscription table. `W` is the hub's opaque waiter token (which
/// client request to answer); it is only stored and handed back.
#[derive(Debug)]
pub struct SubscriptionRegistry<W> {
    /// How long an unheld upstream subscription is kept before it is unsubscribed.
    /// Zero means unsubscribe at once on 1→0.
    linger: Duration,
    /// The state of every key that has an upstream subscription or one in flight.
    /// Ordered so that per-upstream scans are a range and effects come out deterministic.
    by_key: BTreeMap<SubKey, KeyState<W>>,
    /// Reverse index: the keys each client holds or waits on. Exists so that
    /// `remove_client` and `count_for` are O(keys of that client).
    by_client: IdMap<ClientId, BTreeSet<SubKey>>,
}

impl<W: Clone + Debug> SubscriptionRegistry<W> {
    /// An empty registry. `linger` is how long an upstream subscription outlives its last
    /// holder (zero: unsubscribe immediately).
    pub fn new(linger: Duration) -> Self {
        SubscriptionRegistry {
            linger,
            by_key: BTreeMap::new(),
            by_client: IdMap::default(),
        }
    }

    /// Client subscribes. Per-client SET semantics (idempotent).
    ///
    /// The waiter is answered at once when the key is already subscribed upstream
    /// (`Active` or `Lingering`); otherwise it waits for the one upstream call.
    pub fn subscribe<E: Clone>(
        &mut self,
        client: ClientId,
        key: SubKey,
        waiter: W,
        now: Instant,
    ) -> Vec<SubEffect<W, E>> {
        let _ = now; // No timing decision here; `now` keeps every operation the same shape.
        let mut fx = Vec::new();
        match self.by_key.get_mut(&key) {
            None => {
                self.by_key.insert(
                    key.clone(),
                    KeyState::Pending {
                        waiters: vec![(client, waiter, false)],
                        wanted: BTreeSet::from([client]),
                    },
                );
                fx.push(SubEffect::UpstreamSubscribe(key.clone()));
            }
            Some(KeyState::Pending { waiters, wanted }) => {
                let was_wanted = !wanted.insert(client);
                waiters.push((client, waiter, was_wanted));
            }
            Some(KeyState::Active { holders, .. }) => {
                holders.insert(client);
                fx.push(reply_ok(waiter));
            }
            Some(state @ KeyState::Lingering { .. }) => {
                *state = KeyState::Active {
                    holders: HolderSet::one(client),
                    ack: Ack::Confirmed,
                };
                fx.push(reply_ok(waiter));
            }
        }
        self.link(client, key);
        fx
    }

    /// Client unsubscribes; the hub always answers `{}` itself. Returns upstream effects
    /// only.
    ///
    /// A client that is still waiting on a `Pending` key stops *wanting* it but keeps its
    /// waiter entry: its subscribe is still answered, and it will not hold the key.
    pub fn unsubscribe<E: Clone>(
        &mut self,
        client: ClientId,
        key: &SubKey,
        now: Instant,
    ) -> Vec<SubEffect<W, E>> {
        let mut fx = Vec::new();
        match self.by_key.get_mut(key) {
            Some(KeyState::Pending { wanted, .. }) => {
                // The client keeps its waiter entry, so `by_client` keeps the key.
                wanted.remove(&client);
            }
            Some(KeyState::Active { holders, .. }) => {
                let was_held = holders.remove(&client);
                let now_empty = holders.is_empty();
                if was_held {
                    self.unlink(client, key);
                    if now_empty {
                        self.last_holder_left(key.clone(), now, &mut fx);
                    }
                }
            }
            Some(KeyState::Lingering { .. }) | None => {}
        }
        fx
    }

    /// A client cancelled a subscribe still waiting for the upstream's answer (`is_it`
    /// picks its waiter): that waiter gets no reply, and whether the client will hold
    /// the key is as if that subscribe had never come (its other requests for the key
    /// still count). Nothing is sent upstream here; if nobody wants the key when the
    /// answer comes, it is released then. A subscribe already answered is not undone
    /// (the client unsubscribes).
    pub fn cancel_waiter(&mut self, client: ClientId, is_it: impl Fn(&W) -> bool) {
        let Some(keys) = self.by_client.get(&client) else {
            return;
        };
        let mut gone = None;
        for key in keys {
            let Some(KeyState::Pending { waiters, wanted }) = self.by_key.get_mut(key) else {
                continue;
            };
            let Some(at) = waiters
                .iter()
                .position(|(c, w, _)| *c == client && is_it(w))
            else {
                continue;
            };
            let (_, _, was_wanted) = waiters.remove(at);
            match waiters[at..].iter_mut().find(|(c, ..)| *c == client) {
                // A later subscribe found the key wanted only if this one made it so
                // (no unsubscribe between them).
                Some((_, _, later_was_wanted)) => *later_was_wanted &= was_wanted,
                // The latest subscribe: unless an unsubscribe followed it, the client
                // wants the key as it did before it.
                None if wanted.contains(&client) && !was_wanted => {
                    wanted.remove(&client);
                }
                None => {}
            }
            if !waiters.iter().any(|(c, ..)| *c == client) {
                gone = Some(key.clone());
            }
            break;
        }
        if let Some(key) = gone {
            self.unlink(client, &key);
        }
    }

    /// The upstream answered the subscribe sent for `key` (Ok or error payload E).
    ///
    /// On a `Pending` key every waiter gets the answer. On an `Active` key this is the
    /// answer to a re-subscribe: it only updates whether the upstream holds the key and
    /// returns nothing (holders are never disturbed). Otherwise it is stale and ignored.
    pub fn upstream_result<E: Clone>(
        &mut self,
        key: &SubKey,
        result: Result<(), E>,
        now: Instant,
    ) -> Vec<SubEffect<W, E>> {
        match self.by_key.get_mut(key) {
            Some(KeyState::Pending { .. }) => {}
            Some(KeyState::Active { ack, .. }) => {
                if *ack == Ack::Resubscribing {
                    *ack = if result.is_ok() {
                        Ack::Confirmed
                    } else {
                        Ack::Unconfirmed
                    };
                }
                return Vec::new();
            }
            Some(KeyState::Lingering { .. }) | None => return Vec::new(),
        }
        let Some(KeyState::Pending { waiters, wanted }) = self.by_key.remove(key) else {
            unreachable!("checked Pending above");
        };
        let mut fx = Vec::with_capacity(waiters.len() + 1);
        for (client, ..) in &waiters {
            if result.is_err() || !wanted.contains(client) {
                self.unlink(*client, key);
            }
        }
        for (_, waiter, _) in waiters {
            fx.push(SubEffect::Reply {
                waiter,
                result: result.clone(),
            });
        }
        if result.is_ok() {
            if wanted.is_empty() {
                // Everyone left while the call was in flight: the upstream now holds a
                // subscription nobody wants.
                self.release(key.clone(), now, &mut fx);
            } else {
                self.by_key.insert(
                    key.clone(),
                    KeyState::Active {
                        holders: wanted.into(),
                        ack: Ack::Confirmed,
                    },
                );
            }
        }
        fx
    }

    /// Client left (disconnect, DELETE, expiry): release everything it held or waited on.
    /// Its pending subscribe requests are dropped without a reply.
    pub fn remove_client<E: Clone>(
        &mut self,
        client: ClientId,
        now: Instant,
    ) -> Vec<SubEffect<W, E>> {
        let mut fx = Vec::new();
        let Some(keys) = self.by_client.remove(&client) else {
            return fx;
        };
        for key in keys {
            match self.by_key.get_mut(&key) {
                Some(KeyState::Pending { waiters, wanted }) => {
                    waiters.retain(|(c, ..)| *c != client);
                    wanted.remove(&client);
                }
                Some(KeyState::Active { holders, .. }) => {
                    holders.remove(&client);
                    if holders.is_empty() {
                        self.last_holder_left(key, now, &mut fx);
                    }
                }
                Some(KeyState::Lingering { .. }) | None => {
                    debug_assert!(
                        false,
                        "by_client lists {key:?} for {client} but it has no clients"
                    );
                }
            }
        }
        fx
    }

    /// A linger timer fired. Unsubscribes only if the key is still lingering and due;
    /// a timer made stale by a re-subscribe (or a later linger) does nothing.
    pub fn linger_expired<E: Clone>(&mut self, key: &SubKey, now: Instant) -> Vec<SubEffect<W, E>> {
        match self.by_key.get(key) {
            Some(KeyState::Lingering { until }) if now >= *until => {
                self.by_key.remove(key);
                vec![SubEffect::UpstreamUnsubscribe(key.clone())]
            }
            _ => Vec::new(),
        }
    }

    /// ACTIVE holders of `key` only (those the upstream confirmed): who gets its updates.
    /// Holders stay across an upstream restart, so they also get the post-restart
    /// `resources/updated`.
    pub fn holders(&self, key: &SubKey) -> impl Iterator<Item = ClientId> + '_ {
        self.holders_at(key)
    }

    /// [`SubscriptionRegistry::holders`] of a key given by its parts (nothing
    /// allocated for the lookup).
    pub fn holders_at(&self, key: &dyn SubKeyView) -> impl Iterator<Item = ClientId> + '_ {
        let set = match self.by_key.get(key) {
            Some(KeyState::Active { holders, .. }) => Some(holders),
            _ => None,
        };
        set.into_iter().flat_map(HolderSet::iter)
    }

    /// [`SubscriptionRegistry::holders`] as one shared list in client order: the same
    /// allocation for every update until the key's holders change. `None` when the key
    /// is not active.
    pub fn holders_shared(&self, key: &dyn SubKeyView) -> Option<std::sync::Arc<[ClientId]>> {
        match self.by_key.get(key) {
            Some(KeyState::Active { holders, .. }) => Some(holders.snapshot()),
            _ => None,
        }
    }

    /// The registry's own key for `key`'s parts, when it knows one: a clone shares its
    /// URI text instead of copying it (every update of a held URI makes its key).
    pub fn key_at(&self, key: &dyn SubKeyView) -> Option<&SubKey> {
        self.by_key.get_key_value(key).map(|(k, _)| k)
    }

    /// Whether `client` is an active holder of `key`.
    pub fn holds(&self, client: ClientId, key: &SubKey) -> bool {
        matches!(self.by_key.get(key), Some(KeyState::Active { holders, .. }) if holders.contains(&client))
    }

    /// The keys `client` actively holds (not those it is still waiting on).
    pub fn held_by(&self, client: ClientId) -> impl Iterator<Item = &SubKey> + '_ {
        self.by_client
            .get(&client)
            .into_iter()
            .flatten()
            .filter(move |key| self.holds(client, key))
    }

    /// The keys `client` holds or waits on.
    pub fn keys_for(&self, client: ClientId) -> impl Iterator<Item = &SubKey> + '_ {
        self.by_client.get(&client).into_iter().flatten()
    }

    /// Keys held or waited on by the client (for the per-client limit).
    pub fn count_for(&self, client: ClientId) -> usize {
        self.by_client.get(&client).map_or(0, BTreeSet::len)
    }

    /// Whether the current upstream session confirmed and holds the subscription, so a
    /// change will be heard of (the cache may store reads only then). False while
    /// pending, lingering, and between an upstream restart and its re-subscribe answer.
    pub fn is_active(&self, key: &SubKey) -> bool {
        self.is_active_at(key)
    }

    /// Whether the key is in the registry at all, in any state (held, waited on,
    /// lingering, re-subscribing): its cached read, if any, may outlive this moment.
    pub fn is_known_at(&self, key: &dyn SubKeyView) -> bool {
        self.by_key.contains_key(key)
    }

    /// [`SubscriptionRegistry::is_active`] of a key given by its parts.
    pub fn is_active_at(&self, key: &dyn SubKeyView) -> bool {
        matches!(
            self.by_key.get(key),
            Some(KeyState::Active {
                ack: Ack::Confirmed,
                ..
            })
        )
    }

    /// Active keys of `upstream`, whether or not the current session confirmed them
    /// (for restart handling: clear cache, tell holders).
    pub fn keys_of(&self, upstream: UpstreamId) -> impl Iterator<Item = &SubKey> + '_ {
        self.by_key
            .range(first_key(upstream)..)
            .take_while(move |(key, _)| key.upstream == upstream)
            .filter(|(_, state)| matches!(state, KeyState::Active { .. }))
            .map(|(key, _)| key)
    }

    /// Every key, in any state (for the operator's view).
    pub fn keys(&self) -> impl Iterator<Item = &SubKey> + '_ {
        self.by_key.keys()
    }

    /// Number of keys in any state (pending, active, lingering).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is in any state.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// (client, key) pairs held or waited on: the sum of `count_for` over all clients.
    pub fn client_pairs(&self) -> usize {
        self.by_client.values().map(BTreeSet::len).sum()
    }

    /// The last holder of an `Active` key left: decide what the upstream side needs.
    fn last_holder_left<E>(&mut self, key: SubKey, now: Instant, fx: &mut Vec<SubEffect<W, E>>) {
        match self.by_key.get(&key) {
            Some(KeyState::Active {
                ack: Ack::Confirmed,
                ..
            }) => self.release(key, now, fx),
            Some(KeyState::Active {
                ack: Ack::Resubscribing,
                ..
            }) => {
                // A re-subscribe is in flight: wait for its answer like any pending
                // subscribe, so no second subscribe can overtake it.
                self.by_key.insert(
                    key,
                    KeyState::Pending {
                        waiters: Vec::new(),
                        wanted: BTreeSet::new(),
                    },
                );
            }
            _ => {
                // Unconfirmed: the current session is not known to hold it.
                self.by_key.remove(&key);
                fx.push(SubEffect::Forgotten(key));
            }
        }
    }

    /// The upstream holds `key` and no client wants it: the 1→0 path. Unsubscribe now,
    /// or linger and ask for a timer.
    fn release<E>(&mut self, key: SubKey, now: Instant, fx: &mut Vec<SubEffect<W, E>>) {
        // An absurd linger that overflows `Instant` degrades to "unsubscribe now".
        match now
            .checked_add(self.linger)
            .filter(|_| !self.linger.is_zero())
        {
            Some(until) => {
                self.by_key
                    .insert(key.clone(), KeyState::Lingering { until });
                fx.push(SubEffect::SetLingerTimer { key, at: until });
            }
            None => {
                self.by_key.remove(&key);
                fx.push(SubEffect::UpstreamUnsubscribe(key));
            }
        }
    }

    fn link(&mut self, client: ClientId, key: SubKey) {
        self.by_client.entry(client).or_default().insert(key);
    }

    fn unlink(&mut self, client: ClientId, key: &SubKey) {
        if let Some(keys) = self.by_client.get_mut(&client) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }
}

fn reply_ok<W, E>(waiter: W) -> SubEffect<W, E> {
    SubEffect::Reply {
        waiter,
        result: Ok(()),
    }
}

/// The smallest key of `upstream` (URIs order after the empty string).
fn first_key(upstream: UpstreamId) -> SubKey {
    SubKey {
        upstream,
        uri: "".into(),
    }
}
