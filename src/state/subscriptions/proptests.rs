//! Generated sequences against a model: clients that remember what they were told, and
//! a simulated upstream that counts every subscribe/unsubscribe it receives.
//!
//! The simulated hub sends `UpstreamSubscribe` to the upstream's FIFO of in-flight
//! calls, applies `UpstreamUnsubscribe` at once, fails every in-flight call when an
//! upstream crashes, and fails a subscribe to a crashed upstream immediately. Answers to
//! re-subscribes are always `Ok` (a failed re-subscribe deliberately leaves holders
//! without an upstream subscription; that path has its own unit test).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proptest::prelude::*;

use super::*;

const CLIENTS: u64 = 8;
const URIS: usize = 5;
const UPSTREAMS: usize = 2;
const KEYS: usize = URIS * UPSTREAMS;

/// (client, request number).
type W = (ClientId, u64);
type Fx = Vec<SubEffect<W, String>>;

#[derive(Debug, Clone)]
enum Op {
    Subscribe(u64, usize),
    Unsubscribe(u64, usize),
    /// Subscribe to the n-th key the registry knows (any state), to make sharing and
    /// re-subscribing during a linger common.
    SubscribeExisting(u64, usize),
    /// Unsubscribe the n-th (client, key) pair the registry holds or waits on.
    UnsubscribeExisting(usize),
    Disconnect(u64),
    /// The client of the n-th outstanding subscribe cancels it.
    CancelOutstanding(usize),
    /// Answer the oldest in-flight upstream subscribe, ok or error.
    AnswerOldest(bool),
    /// Advance the clock by this many ms and fire every due linger timer.
    Advance(u64),
    /// Deliver every outstanding linger timer now, due or not (they stay queued): the
    /// registry must ignore those not yet due.
    FireTimersEarly,
    Crash(usize),
    Ready(usize),
    /// Drain to a quiet point and check the end-to-end invariant, then go on.
    Quiesce,
}

/// Ops drawn from one flat tuple (cheaper to generate than a union of strategies, which
/// matters in debug builds); `kind` picks the op with these weights out of 26. Time
/// moves in steps shorter than the linger so timers go stale in interesting ways.
fn op() -> impl Strategy<Value = Op> {
    (0u8..26, 0..CLIENTS, 0..KEYS, 1u64..40).prop_map(|(kind, c, k, ms)| match kind {
        0..=4 => Op::Subscribe(c, k),
        5..=6 => Op::SubscribeExisting(c, k),
        7..=8 => Op::Unsubscribe(c, k),
        9..=10 => Op::UnsubscribeExisting(c as usize * KEYS + k),
        11 => Op::Disconnect(c),
        12..=15 => Op::AnswerOldest(true),
        16 => Op::AnswerOldest(false),
        17..=20 => Op::Advance(ms),
        21 => Op::Crash(k % UPSTREAMS),
        22 => Op::Ready(k % UPSTREAMS),
        23 => Op::FireTimersEarly,
        24 => Op::CancelOutstanding(c as usize * KEYS + k),
        _ => Op::Quiesce,
    })
}

/// The same URIs on both upstreams, so keys that differ only by upstream are exercised.
fn key_of(k: usize) -> SubKey {
    SubKey::new(
        UpstreamId(k % UPSTREAMS),
        &format!("file:///r{}", k / UPSTREAMS),
    )
}

fn key_index(key: &SubKey) -> usize {
    (0..KEYS)
        .find(|k| key_of(*k) == *key)
        .expect("generated key")
}

struct Sim {
    reg: SubscriptionRegistry<W>,
    linger: Duration,
    now: Instant,
    /// Simulated upstream: subscriptions it holds (applied when answered ok).
    upstream_subs: BTreeSet<SubKey>,
    /// In-flight subscribes, oldest first; `true` for a re-subscribe.
    in_flight: VecDeque<(SubKey, bool)>,
    down: BTreeSet<UpstreamId>,
    timers: Vec<(Instant, SubKey)>,
    /// The latest linger deadline announced per key: an unsubscribe must not come sooner.
    deadline: BTreeMap<SubKey, Instant>,
    /// What clients believe they hold.
    believed: BTreeSet<(ClientId, SubKey)>,
    /// Subscribe requests not answered yet.
    outstanding: BTreeMap<u64, (ClientId, SubKey)>,
    /// Request number of each client's last unsubscribe per key.
    last_unsub: BTreeMap<(ClientId, SubKey), u64>,
    next_req: u64,
}

impl Sim {
    fn new(linger_ms: u64) -> Self {
        let linger = Duration::from_millis(linger_ms);
        Sim {
            reg: SubscriptionRegistry::new(linger),
            linger,
            now: Instant::now(),
            upstream_subs: BTreeSet::new(),
            in_flight: VecDeque::new(),
            down: BTreeSet::new(),
            timers: Vec::new(),
            deadline: BTreeMap::new(),
            believed: BTreeSet::new(),
            outstanding: BTreeMap::new(),
            last_unsub: BTreeMap::new(),
            next_req: 0,
        }
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Subscribe(c, k) => {
                let (c, key) = (ClientId(c), key_of(k));
                self.next_req += 1;
                let req = self.next_req;
                self.outstanding.insert(req, (c, key.clone()));
                let fx = self.reg.subscribe(c, key, (c, req), self.now);
                self.apply(fx);
            }
            Op::Unsubscribe(c, k) => {
                let (c, key) = (ClientId(c), key_of(k));
                self.next_req += 1;
                self.last_unsub.insert((c, key.clone()), self.next_req);
                self.believed.remove(&(c, key.clone()));
                let fx = self.reg.unsubscribe(c, &key, self.now);
                assert!(no_reply(&fx), "unsubscribe answered a waiter: {fx:?}");
                self.apply(fx);
                assert!(!self.reg.holds(c, &key));
            }
            Op::SubscribeExisting(c, n) => {
                let key = self
                    .reg
                    .by_key
                    .keys()
                    .nth(n % self.reg.len().max(1))
                    .cloned();
                let k = key.map_or(n % KEYS, |key| key_index(&key));
                self.step(&Op::Subscribe(c, k));
                return;
            }
            Op::UnsubscribeExisting(n) => {
                let pairs: Vec<(ClientId, SubKey)> = (0..CLIENTS)
                    .map(ClientId)
                    .flat_map(|c| {
                        self.reg
                            .by_client
                            .get(&c)
                            .into_iter()
                            .flatten()
                            .map(move |k| (c, k.clone()))
                    })
                    .collect();
                if let Some((c, key)) = pairs.get(n % pairs.len().max(1)) {
                    self.step(&Op::Unsubscribe(c.0, key_index(key)));
                    return;
                }
            }
            Op::Disconnect(c) => {
                let c = ClientId(c);
                self.believed.retain(|(x, _)| *x != c);
                self.outstanding.retain(|_, (x, _)| *x != c);
                let fx = self.reg.remove_client(c, self.now);
                assert!(no_reply(&fx), "reply to a gone client: {fx:?}");
                self.apply(fx);
                assert_eq!(self.reg.count_for(c), 0);
            }
            Op::CancelOutstanding(n) => {
                let picked = self
                    .outstanding
                    .keys()
                    .nth(n % self.outstanding.len().max(1));
                if let Some(req) = picked.copied() {
                    let (c, key) = self.outstanding.remove(&req).expect("listed");
                    self.reg.cancel_waiter(c, |w| *w == (c, req));
                    let waits = self.outstanding.values().any(|p| *p == (c, key.clone()));
                    if !waits && !self.believed.contains(&(c, key.clone())) {
                        assert!(
                            !self.reg.holds(c, &key),
                            "{c} holds {key:?} after its cancel"
                        );
                    }
                }
            }
            Op::AnswerOldest(ok) => self.answer_oldest(ok),
            Op::Advance(ms) => self.advance(Duration::from_millis(ms)),
            Op::FireTimersEarly => {
                for (_, key) in self.timers.clone() {
                    let fx = self.reg.linger_expired(&key, self.now);
                    self.apply(fx);
                }
            }
            Op::Crash(u) => self.crash(UpstreamId(u)),
            Op::Ready(u) => self.ready(UpstreamId(u)),
            Op::Quiesce => self.quiesce_and_check(),
        }
        self.check();
    }

    fn answer_oldest(&mut self, ok: bool) {
        let Some((key, resub)) = self.in_flight.pop_front() else {
            return;
        };
        let result = if ok || resub {
            assert!(
                self.upstream_subs.insert(key.clone()),
                "upstream subscribed twice to {key:?}"
            );
            Ok(())
        } else {
            Err("upstream refused".to_string())
        };
        let fx = self.reg.upstream_result(&key, result, self.now);
        self.apply(fx);
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.timers.sort();
        let due = self.timers.partition_point(|(at, _)| *at <= self.now);
        for (_, key) in self.timers.drain(..due).collect::<Vec<_>>() {
            let fx = self.reg.linger_expired(&key, self.now);
            self.apply(fx);
        }
    }

    fn crash(&mut self, u: UpstreamId) {
        if !self.down.insert(u) {
            return;
        }
        self.reg.upstream_lost(u);
        self.upstream_subs.retain(|k| k.upstream != u);
        let (failed, kept) = self.in_flight.drain(..).partition(|(k, _)| k.upstream == u);
        self.in_flight = kept;
        for (key, _) in failed {
            let fx = self
                .reg
                .upstream_result(&key, Err("upstream lost".to_string()), self.now);
            self.apply(fx);
        }
    }

    fn ready(&mut self, u: UpstreamId) {
        if self.down.remove(&u) {
            let fx = self.reg.upstream_ready(u);
            self.apply(fx);
        }
    }

    /// Carries out effects the way the hub would, checking each one is legitimate.
    fn apply(&mut self, fx: Fx) {
        let mut fail_now = Vec::new();
        for effect in fx {
            match effect {
                SubEffect::UpstreamSubscribe(key) => {
                    assert!(
                        !self.upstream_subs.contains(&key),
                        "subscribe for held {key:?}"
                    );
                    assert!(
                        !self.in_flight.iter().any(|(k, _)| *k == key),
                        "second subscribe in flight for {key:?}"
                    );
                    if self.down.contains(&key.upstream) {
                        fail_now.push(key);
                    } else {
                        let resub = self.reg.holders(&key).next().is_some();
                        self.in_flight.push_back((key, resub));
                    }
                }
                SubEffect::UpstreamUnsubscribe(key) => {
                    assert!(
                        !self.down.contains(&key.upstream),
                        "unsubscribe on dead {key:?}"
                    );
                    assert!(
                        !self.in_flight.iter().any(|(k, _)| *k == key),
                        "unsubscribe overtakes in-flight subscribe for {key:?}"
                    );
                    assert!(
                        self.upstream_subs.remove(&key),
                        "unsubscribe for unheld {key:?}"
                    );
                    if !self.linger.is_zero() {
                        let due = self.deadline.remove(&key);
                        assert!(
                            due.is_some_and(|at| at <= self.now),
                            "early unsubscribe {key:?}"
                        );
                    }
                }
                SubEffect::Forgotten(key) => {
                    // Dropped with nothing to undo: the upstream must not hold it.
                    assert!(
                        !self.upstream_subs.contains(&key),
                        "forgot {key:?} while the upstream holds it"
                    );
                    assert!(
                        !self.in_flight.iter().any(|(k, _)| *k == key),
                        "forgot {key:?} with a subscribe in flight"
                    );
                }
                SubEffect::Reply {
                    waiter: (c, req),
                    result,
                } => {
                    let (owner, key) = self
                        .outstanding
                        .remove(&req)
                        .unwrap_or_else(|| panic!("reply to unknown or cancelled request {req}"));
                    assert_eq!(owner, c);
                    let pair = (c, key);
                    if result.is_ok() {
                        if self.last_unsub.get(&pair).is_none_or(|u| *u < req) {
                            assert!(self.reg.holds(c, &pair.1), "Ok but not holding {pair:?}");
                            self.believed.insert(pair);
                        }
                    } else {
                        assert!(!self.believed.contains(&pair), "Err while holding {pair:?}");
                    }
                }
                SubEffect::SetLingerTimer { key, at } => {
                    assert!(!self.linger.is_zero(), "linger timer with zero linger");
                    assert_eq!(at, self.now + self.linger);
                    self.deadline.insert(key.clone(), at);
                    self.timers.push((at, key));
                }
            }
        }
        for key in fail_now {
            let fx = self
                .reg
                .upstream_result(&key, Err("upstream down".to_string()), self.now);
            self.apply(fx);
        }
    }

    /// Checked after every step.
    fn check(&self) {
        self.reg.check_invariants();
        let mut held = BTreeSet::new();
        let mut pairs = 0;
        for c in (0..CLIENTS).map(ClientId) {
            held.extend(self.reg.held_by(c).map(|k| (c, k.clone())));
            pairs += self.reg.count_for(c);
        }
        assert_eq!(
            held, self.believed,
            "registry holders differ from client beliefs"
        );
        assert_eq!(pairs, self.reg.client_pairs());
        // The upstream holds exactly the confirmed-active and lingering keys, and the
        // in-flight calls are exactly the pending and re-subscribing keys.
        let mut confirmed = BTreeSet::new();
        let mut awaiting = BTreeSet::new();
        for (key, state) in &self.reg.by_key {
            match state {
                KeyState::Active {
                    ack: Ack::Confirmed,
                    ..
                }
                | KeyState::Lingering { .. } => {
                    confirmed.insert(key.clone());
                }
                KeyState::Pending { .. }
                | KeyState::Active {
                    ack: Ack::Resubscribing,
                    ..
                } => {
                    awaiting.insert(key.clone());
                }
                KeyState::Active {
                    ack: Ack::Unconfirmed,
                    ..
                } => {}
            }
            assert_eq!(
                self.reg.is_active(key),
                matches!(
                    state,
                    KeyState::Active {
                        ack: Ack::Confirmed,
                        ..
                    }
                )
            );
        }
        assert_eq!(confirmed, self.upstream_subs, "upstream state drifted");
        let flying: BTreeSet<SubKey> = self.in_flight.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            flying.len(),
            self.in_flight.len(),
            "duplicate in-flight subscribe"
        );
        assert_eq!(awaiting, flying, "pending keys differ from in-flight calls");
    }

    /// Bring every upstream up, answer everything ok, let every linger expire.
    fn quiesce(&mut self) {
        for u in self.down.clone() {
            self.ready(u);
        }
        loop {
            while !self.in_flight.is_empty() {
                self.answer_oldest(true);
            }
            self.advance(self.linger + Duration::from_millis(1));
            let settled = self.reg.by_key.values().all(|s| {
                matches!(
                    s,
                    KeyState::Active {
                        ack: Ack::Confirmed,
                        ..
                    }
                )
            });
            if self.in_flight.is_empty() && settled {
                break;
            }
        }
        self.check();
    }

    fn quiesce_and_check(&mut self) {
        self.quiesce();
        let union: BTreeSet<SubKey> = self.believed.iter().map(|(_, k)| k.clone()).collect();
        assert_eq!(
            self.upstream_subs, union,
            "upstream set != union of client sets"
        );
        assert_eq!(
            self.reg.len(),
            union.len(),
            "registry keeps an entry nobody holds"
        );
        assert!(
            self.outstanding.is_empty(),
            "unanswered subscribes: {:?}",
            self.outstanding
        );
    }
}

fn no_reply(fx: &Fx) -> bool {
    !fx.iter().any(|e| matches!(e, SubEffect::Reply { .. }))
}

/// 4000 cases by default (a few seconds in a debug build); `PROPTEST_CASES` overrides.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn generated_sequences_keep_upstream_equal_to_union_of_clients(
        linger_ms in prop_oneof![Just(0u64), Just(50u64)],
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut sim = Sim::new(linger_ms);
        for op in &ops {
            sim.step(op);
        }
        sim.quiesce_and_check();
        for c in 0..CLIENTS {
            sim.step(&Op::Disconnect(c));
        }
        sim.quiesce_and_check();
        prop_assert!(sim.upstream_subs.is_empty());
        prop_assert!(sim.reg.is_empty());
        prop_assert_eq!(sim.reg.client_pairs(), 0);
        prop_assert!(sim.believed.is_empty());
    }
}
