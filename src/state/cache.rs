//! The `resources/read` cache: pure rules, no I/O (docs/architecture.md, "Read cache").
//!
//! Owns: cached read results per (upstream, URI), a generation per key, and the
//! single-flight table of reads in progress with the clients waiting on each.
//!
//! Rules:
//! - a result is cached while mcpmux holds an active upstream subscription to that URI
//!   (the caller checks with the registry: only then will it hear of a change), until
//!   that changes; or, when the upstream gave it a `ttlMs` (2026-07-28), for that long
//!   even when nobody subscribes ([`Keep`]);
//! - a hit on a result with a `ttlMs` reports the time it has left ([`ReadPlan::Fresh`]);
//! - `invalidate` (an update, the last unsubscribe) drops the entry and bumps the
//!   generation; `clear_upstream` (a reconnect) does that for every key of an upstream;
//! - a read captures the generation when it is sent; its result is stored only if the
//!   generation is unchanged, so a read that raced an update is never cached;
//! - concurrent misses for one key share one upstream read; errors are never cached;
//! - the LRU is bounded by entries and by bytes; an entry larger than the byte bound
//!   is not stored.
//!
//! Never: sends anything, parses results, or decides whether a key is subscribed.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::protocol::RawId;
use crate::state::ids::{ClientId, IdMap, SubKey, UpstreamId};

/// A cached `result` object as compact JSON text, shared by every response built
/// from it.
pub type CachedResult = Arc<str>;

/// A client waiting for a read: who, and the id it used.
pub type ReadWaiter = (ClientId, RawId);

/// What to do with a client's read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadPlan {
    /// Answer from the cache.
    Hit(CachedResult),
    /// Answer from the cache a result the upstream gave a `ttlMs`: it has `remaining`
    /// of it left (what a 2026-07-28 client is told).
    Fresh {
        result: CachedResult,
        remaining: Duration,
    },
    /// Another read of this key is in flight: the client was added to its waiters.
    Joined,
    /// Send one upstream read; its answer goes to `complete` with this generation.
    Fetch { generation: u64 },
}

/// Counters for tests, stats and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub joined: u64,
    pub fetches: u64,
    pub stored: u64,
    /// Results not stored because the key changed while the read was in flight.
    pub stale_fills: u64,
    pub evictions: u64,
}

#[derive(Debug)]
struct CacheEntry {
    result: CachedResult,
    size: usize,
    /// When it was stored and the `ttlMs` the upstream gave it, if any.
    stored: Instant,
    ttl: Option<Duration>,
    /// Set when only its TTL keeps it (no subscription tells of changes).
    expires: Option<Instant>,
}

/// How long a completed read may be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Until the key changes (mcpmux holds its subscription); `ttl` is the `ttlMs`
    /// the upstream gave, reported as time left on hits.
    UntilChanged { ttl: Option<Duration> },
    /// For this long (a 2026-07-28 `ttlMs`), or until the key changes.
    For(Duration),
    /// Not at all.
    Not,
}

#[derive(Debug)]
pub struct ReadCache {
    lru: Option<LruCache<SubKey, CacheEntry>>,
    max_bytes: usize,
    bytes: usize,
    generations: HashMap<SubKey, u64>,
    inflight: HashMap<SubKey, Vec<ReadWaiter>>,
    /// How many of the waiters in `inflight` are each client's: its share of the
    /// reads in flight, known without a scan (and a client with none costs nothing
    /// to forget).
    waiting: IdMap<ClientId, usize>,
    pub counters: CacheCounters,
}

impl ReadCache {
    /// A cache of at most `max_entries` entries and `max_bytes` bytes of results;
    /// either being 0 disables storing (single flight still applies).
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        ReadCache {
            lru: NonZeroUsize::new(max_entries)
                .filter(|_| max_bytes > 0)
                .map(LruCache::new),
            max_bytes,
            bytes: 0,
            generations: HashMap::new(),
            inflight: HashMap::new(),
            waiting: IdMap::default(),
            counters: CacheCounters::default(),
        }
    }

    /// [`ReadCache::read_at`] now (tests only: the hub passes its own `now`).
    #[cfg(test)]
    pub fn read(&mut self, key: &SubKey, waiter: ReadWaiter) -> ReadPlan {
        self.read_at(key, waiter, Instant::now())
    }

    /// Plans a client's read of a cacheable key at `now` (entries past their TTL are
    /// dropped).
    pub fn read_at(&mut self, key: &SubKey, waiter: ReadWaiter, now: Instant) -> ReadPlan {
        if let Some(lru) = self.lru.as_mut() {
            let expired = lru
                .peek(key)
                .is_some_and(|e| e.expires.is_some_and(|x| now >= x));
            if expired {
                let e = lru.pop(key).expect("peeked");
                self.bytes -= e.size;
            } else if let Some(e) = lru.get(key) {
                self.counters.hits += 1;
                return match e.ttl {
                    None => ReadPlan::Hit(e.result.clone()),
                    Some(ttl) => ReadPlan::Fresh {
                        result: e.result.clone(),
                        remaining: ttl.saturating_sub(now.saturating_duration_since(e.stored)),
                    },
                };
            }
        }
        *self.waiting.entry(waiter.0).or_default() += 1;
        if let Some(waiters) = self.inflight.get_mut(key) {
            waiters.push(waiter);
            self.counters.joined += 1;
            return ReadPlan::Joined;
        }
        self.inflight.insert(key.clone(), vec![waiter]);
        self.counters.fetches += 1;
        ReadPlan::Fetch {
            generation: self.generation(key),
        }
    }

    /// The upstream answered the read sent at `generation`. Returns the waiters to
    /// answer (all of them, whatever the outcome). The result is stored only when it
    /// is a success (`Some`), the generation is unchanged and `still_active` holds.
    /// Tests only: the hub calls [`ReadCache::complete_keep`] with its own `now`.
    #[cfg(test)]
    pub fn complete(
        &mut self,
        key: &SubKey,
        generation: u64,
        result: Option<CachedResult>,
        still_active: bool,
    ) -> Vec<ReadWaiter> {
        let keep = if still_active {
            Keep::UntilChanged { ttl: None }
        } else {
            Keep::Not
        };
        self.complete_keep(key, generation, result, keep, Instant::now())
    }

    /// [`ReadCache::complete`] with the keeping rule chosen by the caller.
    pub fn complete_keep(
        &mut self,
        key: &SubKey,
        generation: u64,
        result: Option<CachedResult>,
        keep: Keep,
        now: Instant,
    ) -> Vec<ReadWaiter> {
        let waiters = self.inflight.remove(key).unwrap_or_default();
        for (client, _) in &waiters {
            self.unwait(*client, 1);
        }
        if let Some(result) = result {
            if generation != self.generation(key) {
                self.counters.stale_fills += 1;
            } else {
                let (ttl, expires) = match keep {
                    Keep::UntilChanged { ttl } => (Some(ttl), None),
                    Keep::For(ttl) if !ttl.is_zero() => (Some(Some(ttl)), Some(now + ttl)),
                    Keep::For(_) | Keep::Not => (None, None),
                };
                if let Some(ttl) = ttl {
                    self.store(key.clone(), result, now, ttl, expires);
                }
            }
        }
        waiters
    }

    /// Removes `client`'s waiter of request `id`, or all of its waiters (`None`: it
    /// left). The reads themselves go on.
    pub fn forget_waiter(&mut self, client: ClientId, id: Option<&RawId>) {
        if !self.waiting.contains_key(&client) {
            return;
        }
        let mut gone = 0;
        for w in self.inflight.values_mut() {
            let before = w.len();
            w.retain(|(c, i)| !(*c == client && id.is_none_or(|id| id == i)));
            gone += before - w.len();
        }
        self.unwait(client, gone);
    }

    /// How many reads in flight `client` waits on.
    pub fn waiting_of(&self, client: ClientId) -> usize {
        self.waiting.get(&client).copied().unwrap_or(0)
    }

    fn unwait(&mut self, client: ClientId, n: usize) {
        if let Some(count) = self.waiting.get_mut(&client) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.waiting.remove(&client);
            }
        }
    }

    /// The key changed (update) or is no longer watched (last unsubscribe).
    pub fn invalidate(&mut self, key: &SubKey) {
        *self.generations.entry(key.clone()).or_default() += 1;
        if let Some(e) = self.lru.as_mut().and_then(|l| l.pop(key)) {
            self.bytes -= e.size;
        }
    }

    /// The upstream reconnected: nothing cached for it can be trusted.
    pub fn clear_upstream(&mut self, upstream: UpstreamId) {
        let keys: Vec<SubKey> = self
            .lru
            .iter()
            .flat_map(|l| l.iter().map(|(k, _)| k.clone()))
            .chain(self.inflight.keys().cloned())
            .filter(|k| k.upstream == upstream)
            .collect();
        for k in keys {
            self.invalidate(&k);
        }
    }

    /// Whether a read of this key is in flight.
    pub fn in_flight(&self, key: &SubKey) -> bool {
        self.inflight.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.lru.as_ref().map_or(0, LruCache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn generation(&self, key: &SubKey) -> u64 {
        self.generations.get(key).copied().unwrap_or(0)
    }

    fn store(
        &mut self,
        key: SubKey,
        result: CachedResult,
        stored: Instant,
        ttl: Option<Duration>,
        expires: Option<Instant>,
    ) {
        let size = result.len() + key.uri.len();
        let Some(lru) = self.lru.as_mut() else { return };
        if size > self.max_bytes {
            return;
        }
        let entry = CacheEntry {
            result,
            size,
            stored,
            ttl,
            expires,
        };
        if let Some(old) = lru.put(key, entry) {
            self.bytes -= old.size;
        }
        self.bytes += size;
        while self.bytes > self.max_bytes {
            match lru.pop_lru() {
                Some((_, e)) => {
                    self.bytes -= e.size;
                    self.counters.evictions += 1;
                }
                None => break,
            }
        }
        // CacheEntry-count evictions by `put` are not reported back by `lru`; recount.
        self.bytes = lru.iter().map(|(_, e)| e.size).sum();
        self.counters.stored += 1;
    }
}

#[cfg(test)]
mod tests {
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
        assert!(matches!(
            c.read(&k, w(2)),
            ReadPlan::Fetch { generation: 1 }
        ));
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
}
