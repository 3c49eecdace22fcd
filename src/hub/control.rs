//! The hub's control channel (stats, snapshots, reload, shutdown), what its timers
//! mean when they come due (request deadlines, lingering releases, re-subscribes, the
//! drain's deadline; the timers themselves are `deadlines.rs`) and its own end: the
//! shutdown drain (its state is `admission.rs`) and the last unsubscribes.
//!
//! Never waits: a drain is a deadline the loop checks, not a sleep.

use super::deadlines::Due;
use super::*;

impl Hub {
    pub(super) fn on_control(&mut self, ctl: Control) {
        match ctl {
            Control::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            Control::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Control::Reload(plan, done) => {
                self.on_reload(*plan);
                let _ = done.send(());
            }
            Control::Drain { until, done } => {
                tracing::info!(
                    in_flight = self.pending.serving_clients().len(),
                    "draining requests in flight"
                );
                let waiting = self.admission.start_drain(done);
                self.end_listens();
                self.deadlines.set(Timer::Drain, until);
                for (client, msg) in waiting {
                    if let Some(id) = msg.id().cloned() {
                        self.reply_error(
                            client,
                            &id,
                            crate::protocol::code::UPSTREAM_UNAVAILABLE,
                            "mcpmux is shutting down",
                        );
                    }
                }
            }
        }
    }

    /// Answers the drain once no client request is in flight, shared reads included
    /// (a fleet follower's, read through the owner, has no upstream request here).
    pub(super) fn check_drained(&mut self) {
        if self.admission.drain_awaited()
            && !self.reads.cache.has_waiters()
            && self.pending.serving_clients().is_empty()
        {
            if let Some(done) = self.admission.finish_drain() {
                let _ = done.send(0);
            }
        }
    }

    /// The drain's deadline: what is still in flight fails (and is cancelled upstream).
    pub(super) fn drain_deadline(&mut self) {
        let Some(done) = self.admission.finish_drain() else {
            return;
        };
        let cut = self.pending.serving_clients();
        for pid in &cut {
            let upstream = self.pending.get(*pid).map(|e| e.upstream);
            self.fail_request(
                *pid,
                crate::protocol::code::UPSTREAM_UNAVAILABLE,
                "mcpmux shut down before the upstream answered (limits.drain_ms)",
            );
            if let Some(u) = upstream {
                self.send_cancelled(u, *pid, "mcpmux is shutting down");
            }
        }
        tracing::warn!(
            cut = cut.len(),
            "shutdown drain deadline passed; requests still in flight failed"
        );
        let _ = done.send(cut.len());
    }

    /// A timer came due: a request's deadline, or one of the rare others.
    pub(super) fn on_due(&mut self, due: Due) {
        match due {
            Due::Request(pid, timer) => self.request_timed_out(pid, timer),
            Due::Timer(t) => self.on_timer(t),
        }
    }

    fn on_timer(&mut self, t: Timer) {
        let now = Instant::now().into_std();
        match t {
            Timer::Linger(key) => {
                let effects = self.holders.registry.linger_expired(&key, now);
                self.apply_sub_effects(effects);
            }
            Timer::Resubscribe(key) => {
                if self.upstream_ready(key.upstream).is_some() {
                    if let Some(fx) = self.holders.registry.retry_resubscribe(&key) {
                        self.apply_sub_effects(vec![fx]);
                    }
                }
            }
            Timer::Drain => self.drain_deadline(),
        }
    }

    pub(super) fn stats(&self) -> HubStats {
        let mut sent: Vec<(String, u64)> = self
            .counters
            .sent
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect();
        sent.sort();
        let peak = self
            .clients
            .values()
            .map(|c| c.outbox.peak())
            .max()
            .unwrap_or(0)
            .max(self.counters.peak_queue);
        HubStats {
            clients: self.clients.len(),
            subscription_keys: self.holders.registry.len(),
            client_subscriptions: self.holders.registry.client_pairs(),
            pending_requests: self.pending.len(),
            peak_queue: peak,
            coalesced: self.counters.coalesced_gone
                + self
                    .clients
                    .values()
                    .filter(|c| c.shared_outbox.is_none())
                    .map(|c| c.outbox.merged())
                    .sum::<u64>(),
            upstream_sent: sent,
            cache: self.reads.cache.counters,
            cache_entries: self.reads.cache.len(),
        }
    }

    pub(super) fn shutdown(&mut self) {
        let ids: Vec<ClientId> = self.clients.keys().copied().collect();
        for c in ids {
            self.remove_client(c, "shutdown");
        }
    }

    /// Why a request for upstream `u` cannot be served, for the client's error: its
    /// name, the last failure and whether mcpmux is still restarting it, so a client can
    /// tell "try again shortly" from "marked down".
    pub(crate) fn unavailable(&self, u: UpstreamId) -> String {
        let Some(slot) = self.upstreams.get(u.0) else {
            return "no such upstream".to_owned();
        };
        let name = &slot.name;
        match &slot.status {
            UpstreamStatus::Down {
                reason,
                retrying: true,
            } => format!("upstream {name} is not available ({reason}; restarting)"),
            UpstreamStatus::Down {
                reason,
                retrying: false,
            } => format!(
                "upstream {name} is not available ({reason}; marked down after \
                 restart.max_failures failed starts: restart mcpmux to try again)"
            ),
            UpstreamStatus::Starting | UpstreamStatus::Idle => {
                format!("upstream {name} is not available (starting)")
            }
            UpstreamStatus::NeedsLogin { reason } => {
                format!("upstream {name} is not available: it {reason}")
            }
            UpstreamStatus::Ready(_) => format!("upstream {name} is not available"),
            UpstreamStatus::Removed => {
                format!("upstream {name} was removed from the configuration")
            }
        }
    }

    pub(crate) fn upstream_ready(&self, u: UpstreamId) -> Option<&InitInfo> {
        match &self.upstreams.get(u.0)?.status {
            UpstreamStatus::Ready(info) => Some(info),
            _ => None,
        }
    }
}
