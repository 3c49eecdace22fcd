//! Typed ids. Never bare integers or strings across module boundaries.

use std::fmt;
use std::sync::Arc;

/// One downstream client session (HTTP session or stdio client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// One configured upstream server: its index in config order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpstreamId(pub usize);

/// An id the proxy allocated for a request it sends (upstream or downstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyId(pub u64);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

impl fmt::Display for UpstreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "u{}", self.0)
    }
}

/// What a subscription is about, per upstream. Keyed by topic so that a 2026-era
/// `subscriptions/listen` filter can map onto the same registry later.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubKey {
    pub upstream: UpstreamId,
    /// The URI as the upstream knows it (never namespaced).
    pub uri: Arc<str>,
}

impl SubKey {
    pub fn new(upstream: UpstreamId, uri: &str) -> Self {
        SubKey {
            upstream,
            uri: uri.into(),
        }
    }
}

/// Monotonic allocator for ids.
#[derive(Debug, Default)]
pub struct IdAlloc {
    next: u64,
}

impl IdAlloc {
    pub fn allocate(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}
