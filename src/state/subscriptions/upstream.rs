//! The registry's side of an upstream's life: its session lost and back (every held
//! key re-subscribed, a refused re-subscribe asked again), and its removal or
//! replacement by a reload. Same rules as the rest of the registry: pure, effects out.
//!
//! Never drops a holder's key while its upstream only restarts.

use std::fmt::Debug;

use super::{first_key, Ack, KeyState, SubEffect, SubscriptionRegistry};
use crate::state::ids::{SubKey, UpstreamId};

impl<W: Clone + Debug> SubscriptionRegistry<W> {
    /// The upstream's session is gone (crash/restart). In-flight subscribes are failed by
    /// the hub via `upstream_result(Err)` separately. Lingering keys of that upstream are
    /// dropped silently (nothing to unsubscribe on a dead session). Active keys are kept,
    /// marked as not held upstream: until `upstream_ready` re-subscribes them, their 1→0
    /// sends no unsubscribe and `is_active` is false.
    /// Returns the lingering keys dropped (nothing held them; the fleet may track them).
    pub fn upstream_lost(&mut self, upstream: UpstreamId) -> Vec<SubKey> {
        let mut dropped = Vec::new();
        for (key, state) in self.by_key.range_mut(first_key(upstream)..) {
            if key.upstream != upstream {
                break;
            }
            match state {
                KeyState::Lingering { .. } => dropped.push(key.clone()),
                KeyState::Active { ack, .. } => *ack = Ack::Unconfirmed,
                KeyState::Pending { .. } => {}
            }
        }
        for key in &dropped {
            self.by_key.remove(key);
        }
        dropped
    }

    /// The upstream is being removed (a config reload): every key of it goes. Waiting
    /// subscribes are answered `Err(error)`; holders lose the key; the upstream gets one
    /// UpstreamUnsubscribe per key it holds (confirmed active or lingering), so it is
    /// left holding nothing.
    pub fn remove_upstream<E: Clone>(
        &mut self,
        upstream: UpstreamId,
        error: E,
    ) -> Vec<SubEffect<W, E>> {
        let keys: Vec<SubKey> = self
            .by_key
            .range(first_key(upstream)..)
            .take_while(|(k, _)| k.upstream == upstream)
            .map(|(k, _)| k.clone())
            .collect();
        let mut fx = Vec::new();
        for key in keys {
            let state = self.by_key.remove(&key).expect("listed above");
            match state {
                KeyState::Pending { waiters, .. } => {
                    for (_, waiter, _) in waiters {
                        fx.push(SubEffect::Reply {
                            waiter,
                            result: Err(error.clone()),
                        });
                    }
                }
                KeyState::Active { ack, .. } => {
                    if ack == Ack::Confirmed {
                        fx.push(SubEffect::UpstreamUnsubscribe(key));
                    }
                }
                KeyState::Lingering { .. } => fx.push(SubEffect::UpstreamUnsubscribe(key)),
            }
        }
        // Holders and waiters alike are indexed per client.
        for set in self.by_client.values_mut() {
            set.retain(|k| k.upstream != upstream);
        }
        self.by_client.retain(|_, set| !set.is_empty());
        fx
    }

    /// The upstream is replaced by `to` (a reload changed its config): as
    /// [`Self::remove_upstream`], except that every held key moves to `to` with its
    /// holders, not yet subscribed there (`upstream_ready(to)` subscribes it).
    pub fn move_upstream<E: Clone>(
        &mut self,
        from: UpstreamId,
        to: UpstreamId,
        error: E,
    ) -> Vec<SubEffect<W, E>> {
        let held: Vec<(SubKey, super::HolderSet)> = self
            .by_key
            .range(first_key(from)..)
            .take_while(|(k, _)| k.upstream == from)
            .filter_map(|(k, st)| match st {
                KeyState::Active { holders, .. } => Some((k.clone(), holders.clone())),
                _ => None,
            })
            .collect();
        let fx = self.remove_upstream(from, error);
        for (key, holders) in held {
            let moved = SubKey {
                upstream: to,
                uri: key.uri.clone(),
            };
            for c in holders.iter() {
                self.link(c, moved.clone());
            }
            let ack = Ack::Unconfirmed;
            self.by_key.insert(moved, KeyState::Active { holders, ack });
        }
        fx
    }

    /// The upstream is back with a fresh session: UpstreamSubscribe for every Active key
    /// of it (re-subscribe). Results of these come back through `upstream_result` and
    /// never disturb holders (an Err yields no effects; the key stays, holders keep it).
    ///
    /// Call `upstream_lost` before this for every new session. A key whose re-subscribe
    /// is still in flight is skipped, so at most one subscribe per key is ever in flight.
    pub fn upstream_ready<E: Clone>(&mut self, upstream: UpstreamId) -> Vec<SubEffect<W, E>> {
        let mut fx = Vec::new();
        for (key, state) in self.by_key.range_mut(first_key(upstream)..) {
            if key.upstream != upstream {
                break;
            }
            if let KeyState::Active { ack, .. } = state {
                if *ack != Ack::Resubscribing {
                    *ack = Ack::Resubscribing;
                    fx.push(SubEffect::UpstreamSubscribe(key.clone()));
                }
            }
        }
        fx
    }

    /// Whether a re-subscribe of `key` (after `upstream_ready`) awaits its answer.
    pub fn is_resubscribing(&self, key: &SubKey) -> bool {
        matches!(
            self.by_key.get(key),
            Some(KeyState::Active {
                ack: Ack::Resubscribing,
                ..
            })
        )
    }

    /// A held key the current session does not hold (its re-subscribe failed): try
    /// again. `None` when the key is in any other state (released, confirmed, lost).
    pub fn retry_resubscribe<E>(&mut self, key: &SubKey) -> Option<SubEffect<W, E>> {
        match self.by_key.get_mut(key) {
            Some(KeyState::Active { ack, .. }) if *ack == Ack::Unconfirmed => {
                *ack = Ack::Resubscribing;
                Some(SubEffect::UpstreamSubscribe(key.clone()))
            }
            _ => None,
        }
    }
}
