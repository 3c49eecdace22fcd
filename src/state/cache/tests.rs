//! The read cache's rules, one per test: single flight by generation, what is
//! stored and for how long, the LRU's bounds, each client's waits.

use super::*;

fn key(uri: &str) -> SubKey {
    SubKey::new(UpstreamId(0), uri)
}
fn w(c: u64) -> ReadWaiter {
    (ClientId(c), RawId::from_u64(c))
}
fn res(text: &str) -> CachedResult {
    Arc::from(format!("{{\"contents\":[{{\"text\":\"{text}\"}}]}}"))
}
fn fetch(c: &mut ReadCache, k: &SubKey, who: u64) -> u64 {
    match c.read(k, w(who)) {
        ReadPlan::Fetch { generation } => generation,
        other => panic!("expected a fetch, got {other:?}"),
    }
}

#[test]
fn concurrent_misses_share_one_fetch_and_then_hit() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    assert_eq!(c.read(&k, w(2)), ReadPlan::Joined);
    assert_eq!(c.read(&k, w(3)), ReadPlan::Joined);
    let waiters = c.complete(&k, g, Some(res("x")), true);
    assert_eq!(waiters, vec![w(1), w(2), w(3)]);
    assert_eq!(c.read(&k, w(4)), ReadPlan::Hit(res("x")));
    assert_eq!(c.counters.fetches, 1);
}

#[test]
fn fill_rejected_after_a_generation_bump() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    c.invalidate(&k); // an update raced the read
    let waiters = c.complete(&k, g, Some(res("stale")), true);
    assert_eq!(waiters.len(), 1, "the waiter still gets its answer");
    assert!(c.is_empty(), "the raced result is not stored");
    assert_eq!(c.counters.stale_fills, 1);
    assert!(matches!(c.read(&k, w(2)), ReadPlan::Fetch { .. }));
    assert!(
        c.generations.len() <= 1,
        "generations are kept while reads fly only"
    );
}

/// A read that comes after an update does not join the read sent before it: that
/// one's answer may be the old contents. Each flight answers its own waiters.
#[test]
fn a_read_after_an_update_does_not_join_the_read_before_it() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let before = fetch(&mut c, &k, 1);
    c.invalidate(&k);
    let ReadPlan::Fetch { generation: after } = c.read(&k, w(2)) else {
        panic!("a new read is sent");
    };
    assert_ne!(before, after);
    assert_eq!(c.read(&k, w(3)), ReadPlan::Joined, "it joins the new one");
    assert_eq!(c.complete(&k, before, Some(res("old")), true), vec![w(1)]);
    assert!(c.is_empty(), "the old contents are not stored");
    assert_eq!(
        c.complete(&k, after, Some(res("new")), true),
        vec![w(2), w(3)]
    );
    assert_eq!(c.read(&k, w(4)), ReadPlan::Hit(res("new")));
    assert!(c.generations.is_empty() && c.inflight.is_empty());
}

/// Updates of keys nobody reads leave nothing behind.
#[test]
fn invalidating_keys_not_in_flight_keeps_no_generation() {
    let mut c = ReadCache::new(10, 1 << 20);
    for i in 0..100 {
        c.invalidate(&key(&format!("a://{i}")));
    }
    assert!(c.generations.is_empty());
}

#[test]
fn errors_and_inactive_keys_are_never_stored() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    c.complete(&k, g, None, true);
    assert!(c.is_empty());
    let g = fetch(&mut c, &k, 1);
    c.complete(&k, g, Some(res("x")), false);
    assert!(c.is_empty(), "an unsubscribed URI is never stored");
}

#[test]
fn update_drops_the_entry() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    c.complete(&k, g, Some(res("x")), true);
    c.invalidate(&k);
    assert!(c.is_empty());
    assert_eq!(c.bytes(), 0);
}

#[test]
fn byte_bound_evicts_least_recently_used() {
    let one = res("0123456789").len() + "a://1".len();
    let mut c = ReadCache::new(100, one * 2);
    for (i, uri) in ["a://1", "a://2"].iter().enumerate() {
        let g = fetch(&mut c, &key(uri), i as u64);
        c.complete(&key(uri), g, Some(res("0123456789")), true);
    }
    // Touch a://1 so a://2 is least recently used.
    assert!(matches!(c.read(&key("a://1"), w(9)), ReadPlan::Hit(_)));
    let g = fetch(&mut c, &key("a://3"), 3);
    c.complete(&key("a://3"), g, Some(res("0123456789")), true);
    assert_eq!(c.len(), 2);
    assert!(c.bytes() <= one * 2);
    assert!(matches!(c.read(&key("a://1"), w(9)), ReadPlan::Hit(_)));
    assert!(matches!(
        c.read(&key("a://2"), w(9)),
        ReadPlan::Fetch { .. }
    ));
    assert_eq!(c.counters.evictions, 1);
}

#[test]
fn entry_bound_evicts_and_bytes_stay_exact() {
    let mut c = ReadCache::new(1, 1 << 20);
    for uri in ["a://1", "a://2"] {
        let g = fetch(&mut c, &key(uri), 1);
        c.complete(&key(uri), g, Some(res("x")), true);
    }
    assert_eq!(c.len(), 1);
    assert_eq!(c.bytes(), res("x").len() + "a://2".len());
}

#[test]
fn oversized_results_are_not_stored() {
    let mut c = ReadCache::new(10, 8);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    c.complete(&k, g, Some(res("far too large")), true);
    assert!(c.is_empty());
}

#[test]
fn reconnect_clears_only_that_upstream() {
    let mut c = ReadCache::new(10, 1 << 20);
    let a = SubKey::new(UpstreamId(0), "x://1");
    let b = SubKey::new(UpstreamId(1), "x://1");
    for k in [&a, &b] {
        let g = fetch(&mut c, k, 1);
        c.complete(k, g, Some(res("x")), true);
    }
    c.clear_upstream(UpstreamId(0));
    assert!(matches!(c.read(&a, w(1)), ReadPlan::Fetch { .. }));
    assert!(matches!(c.read(&b, w(1)), ReadPlan::Hit(_)));
}

#[test]
fn a_ttl_entry_lives_for_its_ttl_and_reports_the_time_left() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let t0 = Instant::now();
    let ReadPlan::Fetch { generation } = c.read_at(&k, w(1), t0) else {
        panic!()
    };
    let ttl = Duration::from_millis(60_000);
    c.complete_keep(&k, generation, Some(res("x")), Keep::For(ttl), t0);
    let later = t0 + Duration::from_millis(20_000);
    assert_eq!(
        c.read_at(&k, w(2), later),
        ReadPlan::Fresh {
            result: res("x"),
            remaining: Duration::from_millis(40_000)
        }
    );
    assert!(matches!(
        c.read_at(&k, w(3), t0 + ttl),
        ReadPlan::Fetch { .. }
    ));
    assert_eq!(c.bytes(), 0, "the expired entry is gone");
}

#[test]
fn an_update_ends_a_ttl_entry_and_zero_ttl_is_not_kept() {
    let mut c = ReadCache::new(10, 1 << 20);
    let k = key("a://1");
    let now = Instant::now();
    let g = fetch(&mut c, &k, 1);
    c.complete_keep(
        &k,
        g,
        Some(res("x")),
        Keep::For(Duration::from_secs(60)),
        now,
    );
    c.invalidate(&k);
    assert!(c.is_empty());
    let g = fetch(&mut c, &k, 1);
    c.complete_keep(&k, g, Some(res("x")), Keep::For(Duration::ZERO), now);
    assert!(c.is_empty());
    // Subscribed with a ttl: kept past it (until the update), time left floors at 0.
    let g = fetch(&mut c, &k, 1);
    let keep = Keep::UntilChanged {
        ttl: Some(Duration::from_secs(1)),
    };
    c.complete_keep(&k, g, Some(res("x")), keep, now);
    assert_eq!(
        c.read_at(&k, w(2), now + Duration::from_secs(5)),
        ReadPlan::Fresh {
            result: res("x"),
            remaining: Duration::ZERO
        }
    );
}

#[test]
fn disabled_cache_still_single_flights() {
    let mut c = ReadCache::new(0, 0);
    let k = key("a://1");
    let g = fetch(&mut c, &k, 1);
    assert_eq!(c.read(&k, w(2)), ReadPlan::Joined);
    assert_eq!(c.complete(&k, g, Some(res("x")), true).len(), 2);
    assert!(matches!(c.read(&k, w(3)), ReadPlan::Fetch { .. }));
}

#[test]
fn each_clients_waits_are_counted_until_answered_or_forgotten() {
    let mut c = ReadCache::new(8, 1 << 20);
    let (a, b) = (key("test://a"), key("test://b"));
    let _ = c.read(&a, w(1));
    let _ = c.read(&a, w(2));
    let _ = c.read(&b, w(1));
    let _ = c.read(&b, (ClientId(1), RawId::from_u64(9)));
    assert_eq!(
        (c.waiting_of(ClientId(1)), c.waiting_of(ClientId(2))),
        (3, 1)
    );
    c.forget_waiter(ClientId(1), Some(&RawId::from_u64(9)));
    assert_eq!(c.waiting_of(ClientId(1)), 2);
    let Some(ReadPlan::Fetch { generation }) = Some(c.read(&key("test://c"), w(3))) else {
        panic!("a fresh key is fetched");
    };
    assert_eq!(c.complete(&a, 0, None, false), vec![w(1), w(2)]);
    assert_eq!(
        (c.waiting_of(ClientId(1)), c.waiting_of(ClientId(2))),
        (1, 0)
    );
    c.forget_waiter(ClientId(1), None);
    assert_eq!(c.waiting_of(ClientId(1)), 0);
    assert_eq!(c.complete(&b, 0, None, false), vec![]);
    c.complete(&key("test://c"), generation, None, false);
    assert!(c.waiting.is_empty());
}
