//! The registry's invariant check (tests only): every invariant listed in the
//! registry's module docs, asserted with a message naming the one violated. Never
//! changes the registry.

use std::collections::BTreeSet;
use std::fmt::Debug;

use super::{ClientId, KeyState, SubscriptionRegistry};

impl<W: Clone + Debug> SubscriptionRegistry<W> {
    /// Checks every invariant listed in the module docs.
    ///
    /// # Panics
    ///
    /// With a message naming the violated invariant.
    pub fn check_invariants(&self) {
        let mut pairs = 0;
        for (key, state) in &self.by_key {
            let clients: BTreeSet<ClientId> = match state {
                KeyState::Pending { waiters, wanted } => {
                    let waiting: BTreeSet<ClientId> = waiters.iter().map(|(c, ..)| *c).collect();
                    assert!(
                        wanted.is_subset(&waiting),
                        "{key:?}: wanted {wanted:?} not a subset of waiters {waiting:?}"
                    );
                    waiting
                }
                KeyState::Active { holders, .. } => {
                    assert!(!holders.is_empty(), "{key:?}: empty Active holder set");
                    let set: BTreeSet<ClientId> = holders.iter().collect();
                    assert_eq!(
                        &*holders.snapshot(),
                        &*set.iter().copied().collect::<Vec<_>>(),
                        "{key:?}: the shared holder list differs from the set"
                    );
                    set
                }
                KeyState::Lingering { .. } => BTreeSet::new(),
            };
            for c in &clients {
                assert!(
                    self.by_client.get(c).is_some_and(|keys| keys.contains(key)),
                    "{key:?} lists {c} but by_client does not"
                );
            }
            pairs += clients.len();
        }
        for (c, keys) in &self.by_client {
            assert!(!keys.is_empty(), "empty by_client entry for {c}");
            for key in keys {
                let listed = match self.by_key.get(key) {
                    Some(KeyState::Pending { waiters, .. }) => waiters.iter().any(|(w, ..)| w == c),
                    Some(KeyState::Active { holders, .. }) => holders.contains(c),
                    Some(KeyState::Lingering { .. }) | None => false,
                };
                assert!(
                    listed,
                    "by_client lists {key:?} for {c} but by_key does not"
                );
            }
        }
        assert_eq!(
            pairs,
            self.client_pairs(),
            "pair counts of the two indexes differ"
        );
    }
}
