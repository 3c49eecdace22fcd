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
//! - concurrent misses for one key share one upstream read, of the key's current
//!   generation only: a read that comes after an update never joins one sent before
//!   it (whose answer may be the old contents); errors are never cached;
//! - a key's generation is kept only while a read of it is in flight (nothing else
//!   needs it), so the table does not grow with every URI ever updated;
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

/// One upstream read in flight and the clients waiting for it.
#[derive(Debug)]
struct Flight {
    generation: u64,
    waiters: Vec<ReadWaiter>,
}

#[derive(Debug)]
pub struct ReadCache {
    lru: Option<LruCache<SubKey, CacheEntry>>,
    max_bytes: usize,
    bytes: usize,
    generations: HashMap<SubKey, u64>,
    /// The reads in flight per key, each with the generation it was sent at (a key
    /// has two when an update came while one was on its way).
    inflight: HashMap<SubKey, Vec<Flight>>,
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

    /// Whether a read of `key` at `now` would be answered from the cache.
    pub fn answers_at(&self, key: &SubKey, now: Instant) -> bool {
        self.lru
            .as_ref()
            .and_then(|l| l.peek(key))
            .is_some_and(|e| e.expires.is_none_or(|x| now < x))
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
        let generation = self.generation(key);
        let flights = self.inflight.entry(key.clone()).or_default();
        if let Some(f) = flights.iter_mut().find(|f| f.generation == generation) {
            f.waiters.push(waiter);
            self.counters.joined += 1;
            return ReadPlan::Joined;
        }
        flights.push(Flight {
            generation,
            waiters: vec![waiter],
        });
        self.counters.fetches += 1;
        ReadPlan::Fetch { generation }
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
        let mut waiters = Vec::new();
        let current = self.generation(key);
        if let Some(flights) = self.inflight.get_mut(key) {
            if let Some(at) = flights.iter().position(|f| f.generation == generation) {
                waiters = flights.swap_remove(at).waiters;
            }
            if flights.is_empty() {
                self.inflight.remove(key);
                // Nothing in flight: the generation has done its work.
                self.generations.remove(key);
            }
        }
        for (client, _) in &waiters {
            self.unwait(*client, 1);
        }
        if let Some(result) = result {
            if generation != current {
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
        for f in self.inflight.values_mut().flatten() {
            let before = f.waiters.len();
            f.waiters
                .retain(|(c, i)| !(*c == client && id.is_none_or(|id| id == i)));
            gone += before - f.waiters.len();
        }
        self.unwait(client, gone);
    }

    /// Whether any client waits on a read in flight.
    pub fn has_waiters(&self) -> bool {
        !self.waiting.is_empty()
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
        if self.inflight.contains_key(key) {
            *self.generations.entry(key.clone()).or_default() += 1;
        }
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
mod tests;
