//! Behaviour tests for the registry, one rule per test. Time is a fixed `Instant` plus
//! offsets; nothing sleeps.

use super::*;

/// The waiter token in these tests: (client, request number).
type W = (ClientId, u64);
type Fx = Vec<SubEffect<W, String>>;

const C1: ClientId = ClientId(1);
const C2: ClientId = ClientId(2);
const C3: ClientId = ClientId(3);
const U0: UpstreamId = UpstreamId(0);
const U1: UpstreamId = UpstreamId(1);

fn key(upstream: UpstreamId, uri: &str) -> SubKey {
    SubKey::new(upstream, uri)
}

fn reg(linger_ms: u64) -> SubscriptionRegistry<W> {
    SubscriptionRegistry::new(Duration::from_millis(linger_ms))
}

fn ms(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

fn ok(client: ClientId, req: u64) -> SubEffect<W, String> {
    SubEffect::Reply {
        waiter: (client, req),
        result: Ok(()),
    }
}

fn err(client: ClientId, req: u64, e: &str) -> SubEffect<W, String> {
    SubEffect::Reply {
        waiter: (client, req),
        result: Err(e.to_string()),
    }
}

fn sub(r: &mut SubscriptionRegistry<W>, c: ClientId, k: &SubKey, req: u64, now: Instant) -> Fx {
    let fx = r.subscribe(c, k.clone(), (c, req), now);
    r.check_invariants();
    fx
}

fn unsub(r: &mut SubscriptionRegistry<W>, c: ClientId, k: &SubKey, now: Instant) -> Fx {
    let fx = r.unsubscribe(c, k, now);
    r.check_invariants();
    fx
}

fn answer(r: &mut SubscriptionRegistry<W>, k: &SubKey, res: Result<(), &str>, now: Instant) -> Fx {
    let fx = r.upstream_result(k, res.map_err(str::to_string), now);
    r.check_invariants();
    fx
}

fn holders(r: &SubscriptionRegistry<W>, k: &SubKey) -> Vec<ClientId> {
    r.holders(k).collect()
}

/// Brings `k` to Active with `clients` as holders (first one triggers the upstream call).
fn activate(r: &mut SubscriptionRegistry<W>, k: &SubKey, clients: &[ClientId], now: Instant) {
    for (i, c) in clients.iter().enumerate() {
        sub(r, *c, k, 100 + i as u64, now);
    }
    answer(r, k, Ok(()), now);
    assert!(r.is_active(k));
}

#[test]
fn two_clients_same_uri_one_upstream_subscribe() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    assert_eq!(
        sub(&mut r, C1, &a, 1, t0),
        vec![SubEffect::UpstreamSubscribe(a.clone())]
    );
    assert_eq!(answer(&mut r, &a, Ok(()), t0), vec![ok(C1, 1)]);
    assert_eq!(sub(&mut r, C2, &a, 2, t0), vec![ok(C2, 2)]);
    assert_eq!(holders(&r, &a), vec![C1, C2]);
    assert!(r.is_active(&a));
    assert_eq!(r.len(), 1);
    assert_eq!(r.client_pairs(), 2);
}

#[test]
fn last_unsubscribe_sends_exactly_one_upstream_unsubscribe() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1, C2], t0);
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    assert_eq!(
        unsub(&mut r, C2, &a, t0),
        vec![SubEffect::UpstreamUnsubscribe(a.clone())]
    );
    assert_eq!(unsub(&mut r, C2, &a, t0), vec![]);
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    assert!(r.is_empty());
    assert_eq!(r.client_pairs(), 0);
    assert_eq!(r.count_for(C1), 0);
}

#[test]
fn subscribe_is_idempotent_per_client() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    // Twice while pending: one upstream call, both requests answered.
    assert_eq!(sub(&mut r, C1, &a, 1, t0).len(), 1);
    assert_eq!(sub(&mut r, C1, &a, 2, t0), vec![]);
    assert_eq!(r.count_for(C1), 1);
    assert_eq!(answer(&mut r, &a, Ok(()), t0), vec![ok(C1, 1), ok(C1, 2)]);
    // Again while active: immediate Ok, still one holder.
    assert_eq!(sub(&mut r, C1, &a, 3, t0), vec![ok(C1, 3)]);
    assert_eq!(holders(&r, &a), vec![C1]);
    assert_eq!(r.count_for(C1), 1);
    // A single unsubscribe releases it: it was never counted twice.
    assert_eq!(
        unsub(&mut r, C1, &a, t0),
        vec![SubEffect::UpstreamUnsubscribe(a)]
    );
    assert!(r.is_empty());
}

#[test]
fn unsubscribe_of_unknown_uri_is_silent() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    assert!(r.is_empty());
    // Held by someone else: still silent, and the holder keeps it.
    activate(&mut r, &a, &[C2], t0);
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    assert_eq!(holders(&r, &a), vec![C2]);
    assert_eq!(r.count_for(C1), 0);
}

#[test]
fn concurrent_first_subscribers_share_one_upstream_call() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    assert_eq!(
        sub(&mut r, C1, &a, 1, t0),
        vec![SubEffect::UpstreamSubscribe(a.clone())]
    );
    assert_eq!(sub(&mut r, C2, &a, 2, t0), vec![]);
    assert_eq!(sub(&mut r, C3, &a, 3, t0), vec![]);
    // Nobody holds it (or gets updates) before the upstream confirms.
    assert_eq!(holders(&r, &a), vec![]);
    assert!(!r.is_active(&a));
    assert!(!r.holds(C1, &a));
    assert_eq!(r.count_for(C2), 1);
    assert_eq!(
        answer(&mut r, &a, Ok(()), t0),
        vec![ok(C1, 1), ok(C2, 2), ok(C3, 3)]
    );
    assert_eq!(holders(&r, &a), vec![C1, C2, C3]);
}

#[test]
fn upstream_error_reaches_all_waiters_and_changes_nothing() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    sub(&mut r, C1, &a, 1, t0);
    sub(&mut r, C2, &a, 2, t0);
    assert_eq!(
        answer(&mut r, &a, Err("boom"), t0),
        vec![err(C1, 1, "boom"), err(C2, 2, "boom")]
    );
    assert!(r.is_empty());
    assert_eq!(r.client_pairs(), 0);
    // A later subscribe tries again with a fresh upstream call.
    assert_eq!(
        sub(&mut r, C1, &a, 3, t0),
        vec![SubEffect::UpstreamSubscribe(a)]
    );
}

#[test]
fn linger_then_resubscribe_cancels_unsubscribe() {
    let t0 = Instant::now();
    let mut r = reg(30_000);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1], t0);
    let at = ms(t0, 30_000);
    assert_eq!(
        unsub(&mut r, C1, &a, t0),
        vec![SubEffect::SetLingerTimer { key: a.clone(), at }]
    );
    assert!(
        !r.is_active(&a),
        "no holder: nothing guarantees we keep hearing updates"
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r.client_pairs(), 0);
    // Re-subscribe during the linger: answered at once, no upstream traffic.
    assert_eq!(sub(&mut r, C2, &a, 2, ms(t0, 10)), vec![ok(C2, 2)]);
    assert!(r.is_active(&a));
    assert_eq!(r.linger_expired::<String>(&a, at), vec![]);
    r.check_invariants();
    assert_eq!(holders(&r, &a), vec![C2]);
}

#[test]
fn stale_linger_timer_is_ignored() {
    let t0 = Instant::now();
    let mut r = reg(100);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1], t0);
    unsub(&mut r, C1, &a, t0);
    sub(&mut r, C1, &a, 2, ms(t0, 1));
    let fx = unsub(&mut r, C1, &a, ms(t0, 2));
    assert_eq!(
        fx,
        vec![SubEffect::SetLingerTimer {
            key: a.clone(),
            at: ms(t0, 102)
        }]
    );
    // The first timer fires: the key lingers again but is not due yet.
    assert_eq!(r.linger_expired::<String>(&a, ms(t0, 100)), vec![]);
    assert_eq!(r.len(), 1);
    assert_eq!(
        r.linger_expired::<String>(&a, ms(t0, 102)),
        vec![SubEffect::UpstreamUnsubscribe(a.clone())]
    );
    // A timer for a key that is gone (or active) does nothing.
    assert_eq!(r.linger_expired::<String>(&a, ms(t0, 500)), vec![]);
    assert!(r.is_empty());
    r.check_invariants();
}

#[test]
fn disconnect_releases_share() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let shared = key(U0, "file:///shared");
    let own = key(U0, "file:///own");
    let waiting = key(U1, "file:///waiting");
    activate(&mut r, &shared, &[C1, C2], t0);
    activate(&mut r, &own, &[C1], t0);
    sub(&mut r, C1, &waiting, 7, t0);
    assert_eq!(r.count_for(C1), 3);
    assert_eq!(
        r.held_by(C1).cloned().collect::<Vec<_>>(),
        vec![own.clone(), shared.clone()]
    );

    let fx: Fx = r.remove_client(C1, t0);
    r.check_invariants();
    assert_eq!(fx, vec![SubEffect::UpstreamUnsubscribe(own)]);
    assert_eq!(holders(&r, &shared), vec![C2]);
    assert_eq!(r.count_for(C1), 0);
    assert_eq!(r.held_by(C1).count(), 0);
    // Its pending subscribe is not answered; nobody wants the key, so it is undone.
    assert_eq!(
        answer(&mut r, &waiting, Ok(()), t0),
        vec![SubEffect::UpstreamUnsubscribe(waiting)]
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r.client_pairs(), 1);
}

#[test]
fn waiter_that_leaves_before_answer_causes_unsubscribe_after_ack() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    sub(&mut r, C1, &a, 1, t0);
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    // Its subscribe is still answered, but it does not hold the key.
    assert_eq!(
        answer(&mut r, &a, Ok(()), t0),
        vec![ok(C1, 1), SubEffect::UpstreamUnsubscribe(a.clone())]
    );
    assert!(!r.holds(C1, &a));
    assert!(r.is_empty());
    assert_eq!(r.count_for(C1), 0);

    // A waiter that disconnects: the key stays pending (the call is in flight), so a
    // newcomer joins it instead of sending a second subscribe.
    sub(&mut r, C2, &a, 2, t0);
    let fx: Fx = r.remove_client(C2, t0);
    r.check_invariants();
    assert_eq!(fx, vec![]);
    assert_eq!(r.len(), 1);
    assert_eq!(sub(&mut r, C3, &a, 3, t0), vec![]);
    assert_eq!(answer(&mut r, &a, Ok(()), t0), vec![ok(C3, 3)]);
    assert_eq!(holders(&r, &a), vec![C3]);
}

#[test]
fn waiter_that_leaves_before_answer_lingers_when_configured() {
    let t0 = Instant::now();
    let mut r = reg(50);
    let a = key(U0, "file:///a");
    sub(&mut r, C1, &a, 1, t0);
    let fx: Fx = r.remove_client(C1, t0);
    assert_eq!(fx, vec![]);
    assert_eq!(
        answer(&mut r, &a, Ok(()), ms(t0, 5)),
        vec![SubEffect::SetLingerTimer {
            key: a.clone(),
            at: ms(t0, 55)
        }]
    );
    assert_eq!(
        r.linger_expired::<String>(&a, ms(t0, 55)),
        vec![SubEffect::UpstreamUnsubscribe(a)]
    );
}

#[test]
fn restart_resubscribes_active_keys_only() {
    let t0 = Instant::now();
    let mut r = reg(1_000);
    let active = key(U0, "file:///active");
    let pending = key(U0, "file:///pending");
    let lingering = key(U0, "file:///lingering");
    let other = key(U1, "file:///active");
    activate(&mut r, &active, &[C1], t0);
    activate(&mut r, &lingering, &[C2], t0);
    unsub(&mut r, C2, &lingering, t0);
    activate(&mut r, &other, &[C3], t0);
    sub(&mut r, C2, &pending, 5, t0);

    assert_eq!(
        r.upstream_lost(U0),
        vec![lingering.clone()],
        "the lingering key is dropped, and reported (for the fleet)"
    );
    r.check_invariants();
    assert_eq!(r.len(), 3, "nothing else is dropped");
    assert_eq!(holders(&r, &active), vec![C1], "holders are kept");
    assert!(!r.is_active(&active), "the dead session no longer holds it");
    assert!(r.is_active(&other));
    // The hub fails the in-flight subscribe.
    assert_eq!(
        answer(&mut r, &pending, Err("gone"), t0),
        vec![err(C2, 5, "gone")]
    );
    assert_eq!(
        r.linger_expired::<String>(&lingering, ms(t0, 1_000)),
        vec![]
    );

    let fx: Fx = r.upstream_ready(U0);
    r.check_invariants();
    assert_eq!(fx, vec![SubEffect::UpstreamSubscribe(active.clone())]);
    assert!(!r.is_active(&active));
    assert_eq!(answer(&mut r, &active, Ok(()), t0), vec![]);
    assert!(r.is_active(&active));
    assert_eq!(r.keys_of(U0).cloned().collect::<Vec<_>>(), vec![active]);
    assert_eq!(r.keys_of(U1).cloned().collect::<Vec<_>>(), vec![other]);
}

#[test]
fn failed_resubscribe_keeps_holders_and_sends_no_unsubscribe() {
    let t0 = Instant::now();
    let mut r = reg(1_000);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1], t0);
    r.upstream_lost(U0);
    let fx: Fx = r.upstream_ready(U0);
    assert_eq!(fx.len(), 1);
    assert_eq!(answer(&mut r, &a, Err("nope"), t0), vec![]);
    assert_eq!(holders(&r, &a), vec![C1]);
    assert!(!r.is_active(&a));
    // The upstream does not hold it: 1→0 sends nothing upstream and does not linger
    // (the key is reported forgotten, for the fleet).
    assert_eq!(
        unsub(&mut r, C1, &a, t0),
        vec![SubEffect::Forgotten(a.clone())]
    );
    assert!(r.is_empty());
}

#[test]
fn unsubscribe_while_upstream_down_sends_nothing() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1], t0);
    r.upstream_lost(U0);
    assert_eq!(
        unsub(&mut r, C1, &a, t0),
        vec![SubEffect::Forgotten(a.clone())]
    );
    assert!(r.is_empty());
    let fx: Fx = r.upstream_ready(U0);
    assert_eq!(fx, vec![]);
}

#[test]
fn last_holder_leaving_during_resubscribe_waits_for_the_answer() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    activate(&mut r, &a, &[C1], t0);
    r.upstream_lost(U0);
    let _: Fx = r.upstream_ready(U0);
    assert_eq!(unsub(&mut r, C1, &a, t0), vec![]);
    assert_eq!(r.len(), 1, "re-subscribe still in flight");
    // A newcomer joins the in-flight re-subscribe rather than sending a second one.
    assert_eq!(sub(&mut r, C2, &a, 2, t0), vec![]);
    assert_eq!(answer(&mut r, &a, Ok(()), t0), vec![ok(C2, 2)]);
    assert_eq!(holders(&r, &a), vec![C2]);
    // And if nobody comes back, the confirmed re-subscribe is undone after the answer.
    r.upstream_lost(U0);
    let _: Fx = r.upstream_ready(U0);
    unsub(&mut r, C2, &a, t0);
    assert_eq!(
        answer(&mut r, &a, Ok(()), t0),
        vec![SubEffect::UpstreamUnsubscribe(a)]
    );
    assert!(r.is_empty());
}

#[test]
fn same_uri_on_two_upstreams_kept_apart() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a0 = key(U0, "file:///same");
    let a1 = key(U1, "file:///same");
    assert_eq!(
        sub(&mut r, C1, &a0, 1, t0),
        vec![SubEffect::UpstreamSubscribe(a0.clone())]
    );
    assert_eq!(
        sub(&mut r, C2, &a1, 2, t0),
        vec![SubEffect::UpstreamSubscribe(a1.clone())]
    );
    assert_eq!(answer(&mut r, &a0, Ok(()), t0), vec![ok(C1, 1)]);
    assert!(!r.is_active(&a1));
    assert_eq!(answer(&mut r, &a1, Ok(()), t0), vec![ok(C2, 2)]);
    assert_eq!(holders(&r, &a0), vec![C1]);
    assert_eq!(holders(&r, &a1), vec![C2]);
    assert!(!r.holds(C1, &a1));
    assert_eq!(
        unsub(&mut r, C1, &a0, t0),
        vec![SubEffect::UpstreamUnsubscribe(a0)]
    );
    assert_eq!(holders(&r, &a1), vec![C2]);
    assert!(r.is_active(&a1));
}

#[test]
fn count_for_includes_pending_and_held_by_does_not() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "file:///a");
    let b = key(U0, "file:///b");
    activate(&mut r, &a, &[C1], t0);
    sub(&mut r, C1, &b, 2, t0);
    assert_eq!(r.count_for(C1), 2);
    assert_eq!(r.held_by(C1).cloned().collect::<Vec<_>>(), vec![a]);
    assert_eq!(r.client_pairs(), 2);
}

#[test]
fn removing_an_upstream_unsubscribes_what_it_holds_and_answers_waiters() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let (a, b, other) = (key(U0, "a"), key(U0, "b"), key(U1, "a"));
    sub(&mut r, C1, &a, 1, t0);
    answer(&mut r, &a, Ok(()), t0);
    sub(&mut r, C2, &a, 2, t0);
    sub(&mut r, C3, &b, 3, t0); // still pending upstream
    sub(&mut r, C1, &other, 4, t0);
    answer(&mut r, &other, Ok(()), t0);
    let fx = r.remove_upstream(U0, "removed".to_owned());
    r.check_invariants();
    assert_eq!(
        fx,
        vec![
            SubEffect::UpstreamUnsubscribe(a.clone()),
            err(C3, 3, "removed")
        ]
    );
    assert!(holders(&r, &a).is_empty());
    assert_eq!(r.count_for(C2), 0);
    assert_eq!(r.count_for(C3), 0);
    assert_eq!(
        holders(&r, &other),
        vec![C1],
        "another upstream's keys stay"
    );
    // The late answer to the pending subscribe finds nothing.
    assert!(answer(&mut r, &b, Ok(()), t0).is_empty());
}

#[test]
fn moving_an_upstream_keeps_holders_and_subscribes_at_the_new_one_when_ready() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let a = key(U0, "x://a");
    sub(&mut r, C1, &a, 1, t0);
    sub(&mut r, C2, &a, 2, t0);
    answer(&mut r, &a, Ok(()), t0);
    // A subscribe still waiting at the old upstream is refused.
    let b = key(U0, "x://b");
    sub(&mut r, C3, &b, 3, t0);
    let fx: Fx = r.move_upstream(U0, U1, "changed".to_owned());
    r.check_invariants();
    assert_eq!(
        fx,
        vec![
            SubEffect::UpstreamUnsubscribe(a.clone()),
            err(C3, 3, "changed"),
        ]
    );
    let moved = key(U1, "x://a");
    assert_eq!(holders(&r, &moved), vec![C1, C2]);
    assert!(holders(&r, &a).is_empty());
    assert!(
        !r.is_active(&moved),
        "not subscribed at the new upstream yet"
    );
    let fx: Fx = r.upstream_ready(U1);
    assert_eq!(fx, vec![SubEffect::UpstreamSubscribe(moved.clone())]);
    answer(&mut r, &moved, Ok(()), t0);
    assert!(r.is_active(&moved));
    // Leaving releases the moved key: the last holder's unsubscribe goes to U1.
    unsub(&mut r, C1, &moved, t0);
    let fx = unsub(&mut r, C2, &moved, t0);
    assert_eq!(fx, vec![SubEffect::UpstreamUnsubscribe(moved)]);
}

#[test]
fn a_cancelled_waiter_gets_no_reply_and_holds_nothing() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let k = key(U0, "test://a");
    assert_eq!(
        sub(&mut r, C1, &k, 1, t0),
        vec![SubEffect::UpstreamSubscribe(k.clone())]
    );
    sub(&mut r, C2, &k, 2, t0);
    r.cancel_waiter(C1, |w| *w == (C1, 1));
    r.check_invariants();
    assert_eq!(r.count_for(C1), 0);
    assert_eq!(answer(&mut r, &k, Ok(()), t0), vec![ok(C2, 2)]);
    assert_eq!(holders(&r, &k), vec![C2]);
}

#[test]
fn a_client_with_a_second_waiter_still_holds_and_the_last_cancel_releases() {
    let t0 = Instant::now();
    let mut r = reg(0);
    let k = key(U0, "test://a");
    sub(&mut r, C1, &k, 1, t0);
    sub(&mut r, C1, &k, 2, t0);
    // Another waiter's token, or another client's, cancels nothing.
    r.cancel_waiter(C1, |w| *w == (C1, 9));
    r.cancel_waiter(C2, |w| *w == (C1, 1));
    r.cancel_waiter(C1, |w| *w == (C1, 1));
    r.check_invariants();
    assert_eq!(answer(&mut r, &k, Ok(()), t0), vec![ok(C1, 2)]);
    assert_eq!(holders(&r, &k), vec![C1]);
    // Every waiter cancelled: the upstream's yes is undone at once.
    let k2 = key(U0, "test://b");
    sub(&mut r, C3, &k2, 3, t0);
    r.cancel_waiter(C3, |w| *w == (C3, 3));
    r.check_invariants();
    assert_eq!(
        answer(&mut r, &k2, Ok(()), t0),
        vec![SubEffect::UpstreamUnsubscribe(k2.clone())]
    );
    assert!(!r.is_active(&k2));
}

#[test]
fn key_at_hands_out_the_registrys_own_key_for_its_parts() {
    let mut r = reg(0);
    let t0 = Instant::now();
    let k = key(U0, "file:///a");
    sub(&mut r, C1, &k, 1, t0);
    let known = r.key_at(&(U0, "file:///a")).expect("known while pending");
    assert!(
        std::sync::Arc::ptr_eq(&known.uri, &k.uri),
        "the same URI text, not a copy"
    );
    assert!(r.key_at(&(U1, "file:///a")).is_none(), "another upstream's");
    assert!(r.key_at(&(U0, "file:///b")).is_none());
}
