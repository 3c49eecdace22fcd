//! Typed ids. Never bare integers or strings across module boundaries.

use std::fmt;
use std::sync::Arc;

/// One downstream client session (HTTP session or stdio client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// One configured upstream server: its index in config order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpstreamId(pub usize);

/// A view of the upstreams: the default one (every server, at `[listen].path`) or a
/// `[profiles.NAME]`. Ids are never reused while mcpmux runs, across reloads too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ViewId(pub u32);

impl ViewId {
    /// The view of every server.
    pub const DEFAULT: ViewId = ViewId(0);
}

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

/// A [`SubKey`] seen as its two parts, so an ordered map keyed by `SubKey` can be
/// searched with a borrowed `(UpstreamId, &str)` and nothing allocated: the fan-out
/// asks about every parent URI of every update, and most are held by nobody.
pub trait SubKeyView {
    fn parts(&self) -> (UpstreamId, &str);
}

impl SubKeyView for SubKey {
    fn parts(&self) -> (UpstreamId, &str) {
        (self.upstream, &self.uri)
    }
}

impl SubKeyView for (UpstreamId, &str) {
    fn parts(&self) -> (UpstreamId, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn SubKeyView + 'a> for SubKey {
    fn borrow(&self) -> &(dyn SubKeyView + 'a) {
        self
    }
}

// The order (and equality) of the parts is the derived order of `SubKey`: upstream,
// then the URI's text. `Borrow` requires that they agree.
impl PartialEq for dyn SubKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn SubKeyView + '_ {}

impl PartialOrd for dyn SubKeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn SubKeyView + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// The hasher of maps keyed by ids mcpmux allocates itself ([`ClientId`]): ids are
/// sequential and never chosen by a peer, so a multiply spreads them well and there is
/// no flooding to defend against. SipHash showed up in the fan-out profile at about a
/// tenth of the hub's time (two lookups per holder per update).
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// See [`IdMap`]. Integers are multiplied by a 64-bit odd constant (Fibonacci hashing);
/// anything else is folded in FNV-1a style.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
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

/// The URIs `uri` is a sub-resource of, nearest first: every prefix that ends at a
/// `/` of its path, with and without that `/` (`file:///a/b/c` → `file:///a/b/`,
/// `file:///a/b`, `file:///a/`, `file:///a`, `file:///`). Nothing above the path
/// (the scheme and authority alone) is a parent.
pub fn parent_uris(uri: &str) -> impl Iterator<Item = &str> {
    let path_start = uri.find("://").map_or(0, |i| i + 3);
    let path_start = uri[path_start..]
        .find('/')
        .map_or(uri.len(), |i| path_start + i);
    uri[path_start..]
        .rmatch_indices('/')
        .map(move |(i, _)| path_start + i)
        .filter(move |&end| end + 1 < uri.len())
        .flat_map(move |end| {
            let with = &uri[..=end];
            let without = (end > path_start).then(|| &uri[..end]);
            [Some(with), without].into_iter().flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_end_at_slashes_of_the_path() {
        let p: Vec<&str> = parent_uris("file:///a/b/c").collect();
        assert_eq!(
            p,
            [
                "file:///a/b/",
                "file:///a/b",
                "file:///a/",
                "file:///a",
                "file:///"
            ]
        );
        let p: Vec<&str> = parent_uris("test://static/1").collect();
        assert_eq!(p, ["test://static/"]);
        assert_eq!(parent_uris("test://static").count(), 0);
        assert_eq!(
            parent_uris("test://static/").count(),
            0,
            "a URI is not its own parent"
        );
        let p: Vec<&str> = parent_uris("db://h/t/").collect();
        assert_eq!(p, ["db://h/"]);
        assert_eq!(parent_uris("urn:x:y").count(), 0);
    }

    proptest::proptest! {
        /// A map keyed by `SubKey` finds, by a key's borrowed parts, exactly what it
        /// finds by the key itself: the two orders agree.
        #[test]
        fn lookup_by_parts_agrees_with_lookup_by_key(
            held in proptest::collection::btree_set((0usize..3, "[ab/]{0,4}"), 0..12),
            probe in (0usize..3, "[ab/]{0,4}"),
        ) {
            let map: std::collections::BTreeMap<SubKey, ()> = held
                .iter()
                .map(|(u, uri)| (SubKey::new(UpstreamId(*u), uri), ()))
                .collect();
            let key = SubKey::new(UpstreamId(probe.0), &probe.1);
            let parts = (UpstreamId(probe.0), probe.1.as_str());
            proptest::prop_assert_eq!(
                map.contains_key(&key),
                map.contains_key(&parts as &dyn SubKeyView)
            );
            proptest::prop_assert_eq!(map.contains_key(&key), held.contains(&probe));
        }
    }
}
