//! The holders of one active key, and the list a fan-out walks.
//!
//! Owns: the set and a shared, ordered snapshot of it, made on the first fan-out after
//! a change and reused by every update until the next change (a burst of one URI's
//! updates asks for the same audience each time). Never: hands out a snapshot older
//! than the set — every change goes through a method here, which drops it.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use crate::state::ids::ClientId;

#[derive(Debug, Clone, Default)]
pub(super) struct HolderSet {
    set: BTreeSet<ClientId>,
    snapshot: OnceLock<Arc<[ClientId]>>,
}

impl HolderSet {
    pub(super) fn one(client: ClientId) -> Self {
        HolderSet::from(BTreeSet::from([client]))
    }

    pub(super) fn insert(&mut self, client: ClientId) -> bool {
        self.snapshot.take();
        self.set.insert(client)
    }

    pub(super) fn remove(&mut self, client: &ClientId) -> bool {
        self.snapshot.take();
        self.set.remove(client)
    }

    pub(super) fn contains(&self, client: &ClientId) -> bool {
        self.set.contains(client)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The holders in client order.
    pub(super) fn iter(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.set.iter().copied()
    }

    /// The holders in client order, shared: the same allocation until the set changes.
    pub(super) fn snapshot(&self) -> Arc<[ClientId]> {
        self.snapshot
            .get_or_init(|| self.set.iter().copied().collect())
            .clone()
    }
}

impl From<BTreeSet<ClientId>> for HolderSet {
    fn from(set: BTreeSet<ClientId>) -> Self {
        HolderSet {
            set,
            snapshot: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_shared_until_the_set_changes() {
        let mut h = HolderSet::one(ClientId(3));
        h.insert(ClientId(1));
        let a = h.snapshot();
        assert_eq!(&*a, &[ClientId(1), ClientId(3)]);
        assert!(Arc::ptr_eq(&a, &h.snapshot()), "unchanged: the same list");
        h.insert(ClientId(2));
        assert_eq!(&*h.snapshot(), &[ClientId(1), ClientId(2), ClientId(3)]);
        h.remove(&ClientId(1));
        assert_eq!(&*h.snapshot(), &[ClientId(2), ClientId(3)]);
        // The old snapshot is untouched: a fan-out holding it is not disturbed.
        assert_eq!(&*a, &[ClientId(1), ClientId(3)]);
    }
}
