//! Request deadlines: which pending upstream request is due, and one timer to wake the
//! hub when the earliest may be (docs/architecture.md, "Request deadlines").
//!
//! Owns an ordered set of `(deadline, proxy id)` and a single [`Sleep`]. The sleep is
//! moved earlier when a new deadline comes before it, and never otherwise: an answered
//! request only leaves the set. When the sleep fires with nothing due, it is set to the
//! earliest deadline left (or disarmed). With one timeout for every request, sequential
//! requests therefore touch the runtime's timer once per timeout period rather than
//! twice per request, and never wake the hub for their own bookkeeping.
//!
//! [`RequestTimers`] is the hub's part built on it: each pending request's deadline,
//! total limit, send time and method (for the latency counters), armed when a request
//! is sent, pushed back by progress, dropped when answered.
//!
//! Never decides what a due request means (the hub fails and cancels it) and never
//! reads the clock except when its timer fired.

use std::collections::BTreeSet;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::state::ids::{IdMap, ProxyId};

#[derive(Debug)]
pub(super) struct Deadlines {
    due: BTreeSet<(Instant, ProxyId)>,
    sleep: Pin<Box<Sleep>>,
    /// What `sleep` is set to; `None` when nothing is due at all.
    armed: Option<Instant>,
}

impl Deadlines {
    pub(super) fn new() -> Self {
        Deadlines {
            due: BTreeSet::new(),
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    /// Adds `pid`, due `at`.
    pub(super) fn insert(&mut self, pid: ProxyId, at: Instant) {
        self.due.insert((at, pid));
        if self.armed.is_none_or(|armed| at < armed) {
            self.sleep.as_mut().reset(at);
            self.armed = Some(at);
        }
    }

    /// Removes `pid`, which was due `at`. The timer stays as it is (see the module doc).
    pub(super) fn remove(&mut self, pid: ProxyId, at: Instant) {
        self.due.remove(&(at, pid));
    }

    /// Moves `pid` from `old` to `new`.
    pub(super) fn reset(&mut self, pid: ProxyId, old: Instant, new: Instant) {
        self.remove(pid, old);
        self.insert(pid, new);
    }

    /// Whether the timer is set: [`Self::next_due`] can only complete when it is.
    pub(super) fn armed(&self) -> bool {
        self.armed.is_some()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.due.len()
    }

    /// The next request whose deadline has passed, taken out of the set. Pending until
    /// there is one; with the timer disarmed it registers no wake-up (the hub only polls
    /// it while [`Self::armed`]).
    pub(super) async fn next_due(&mut self) -> ProxyId {
        poll_fn(|cx| self.poll_due(cx)).await
    }

    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<ProxyId> {
        loop {
            if self.armed.is_none() || self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            match self.due.first() {
                Some(&(at, pid)) if at <= now => {
                    self.due.pop_first();
                    return Poll::Ready(pid);
                }
                Some(&(at, _)) => {
                    // Fired for requests answered since: set it to the earliest left.
                    self.sleep.as_mut().reset(at);
                    self.armed = Some(at);
                }
                None => {
                    self.armed = None;
                    return Poll::Pending;
                }
            }
        }
    }
}

/// A request's deadline timer and the latest it may be pushed back to.
#[derive(Debug)]
pub(super) struct RequestTimer {
    deadline: Instant,
    limit: Instant,
    /// When it was sent and its method (for the latency and error counters).
    pub(super) sent: Instant,
    pub(super) method: &'static str,
}

impl RequestTimer {
    /// Whether the request ran into its total limit by `now` (not only its timeout).
    pub(super) fn limit_reached(&self, now: Instant) -> bool {
        now >= self.limit
    }
}

/// The deadlines of the requests in flight upstream, by proxy id.
#[derive(Debug)]
pub(super) struct RequestTimers {
    timers: IdMap<ProxyId, RequestTimer>,
    queue: Deadlines,
}

impl RequestTimers {
    pub(super) fn new() -> Self {
        RequestTimers {
            timers: IdMap::default(),
            queue: Deadlines::new(),
        }
    }

    /// Request `pid` (of `method`) was sent at `now`: due after `timeout`, and never
    /// later than `max_total` after `now`.
    pub(super) fn arm(
        &mut self,
        pid: ProxyId,
        method: &'static str,
        now: Instant,
        timeout: std::time::Duration,
        max_total: std::time::Duration,
    ) {
        let deadline = now + timeout;
        self.queue.insert(pid, deadline);
        let timer = RequestTimer {
            deadline,
            limit: now + max_total,
            sent: now,
            method,
        };
        self.timers.insert(pid, timer);
    }

    /// Request `pid` is done (answered, failed or cancelled): its timer goes.
    pub(super) fn disarm(&mut self, pid: ProxyId) -> Option<RequestTimer> {
        let t = self.timers.remove(&pid)?;
        self.queue.remove(pid, t.deadline);
        Some(t)
    }

    /// Progress on `pid` at `now`: its timeout starts again, never past its limit.
    pub(super) fn extend(&mut self, pid: ProxyId, now: Instant, timeout: std::time::Duration) {
        if let Some(t) = self.timers.get_mut(&pid) {
            let at = (now + timeout).min(t.limit);
            self.queue.reset(pid, t.deadline, at);
            t.deadline = at;
        }
    }

    pub(super) fn get(&self, pid: ProxyId) -> Option<&RequestTimer> {
        self.timers.get(&pid)
    }

    /// Whether a deadline can come due ([`Self::next_due`] only completes then).
    pub(super) fn armed(&self) -> bool {
        self.queue.armed()
    }

    /// The next request whose deadline passed, with its timer (taken out).
    pub(super) async fn next_due(&mut self) -> (ProxyId, Option<RequestTimer>) {
        let pid = self.queue.next_due().await;
        (pid, self.timers.remove(&pid))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{timeout, Instant};

    use super::Deadlines;
    use crate::state::ids::ProxyId;

    const S: Duration = Duration::from_secs(1);

    async fn next(d: &mut Deadlines) -> Option<(ProxyId, Instant)> {
        if !d.armed() {
            return None;
        }
        timeout(S * 3600, d.next_due())
            .await
            .ok()
            .map(|p| (p, Instant::now()))
    }

    #[tokio::test(start_paused = true)]
    async fn due_requests_come_out_in_deadline_order_at_their_deadline() {
        let t0 = Instant::now();
        let mut d = Deadlines::new();
        d.insert(ProxyId(2), t0 + S * 20);
        d.insert(ProxyId(1), t0 + S * 10);
        d.insert(ProxyId(3), t0 + S * 30);
        assert_eq!(next(&mut d).await, Some((ProxyId(1), t0 + S * 10)));
        assert_eq!(next(&mut d).await, Some((ProxyId(2), t0 + S * 20)));
        assert_eq!(next(&mut d).await, Some((ProxyId(3), t0 + S * 30)));
        assert_eq!(d.len(), 0);
        // Nothing left: the timer disarms itself rather than wake anyone again.
        assert!(timeout(S, d.next_due()).await.is_err());
        assert!(!d.armed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_request_never_comes_out_and_the_timer_moves_on_to_the_next() {
        let t0 = Instant::now();
        let mut d = Deadlines::new();
        d.insert(ProxyId(1), t0 + S * 10);
        d.insert(ProxyId(2), t0 + S * 25);
        d.remove(ProxyId(1), t0 + S * 10);
        // The timer still fires at 10 s, finds nothing due and waits for 25 s.
        assert_eq!(next(&mut d).await, Some((ProxyId(2), t0 + S * 25)));
        d.insert(ProxyId(3), t0 + S * 40);
        d.remove(ProxyId(3), t0 + S * 40);
        assert!(timeout(S * 3600, d.next_due()).await.is_err());
        assert!(!d.armed(), "fired with nothing left, so disarmed");
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_moves_the_timer_and_a_reset_moves_the_request() {
        let t0 = Instant::now();
        let mut d = Deadlines::new();
        d.insert(ProxyId(1), t0 + S * 60);
        d.insert(ProxyId(2), t0 + S * 5);
        assert_eq!(next(&mut d).await, Some((ProxyId(2), t0 + S * 5)));
        // Progress pushed request 1 back (its old deadline no longer counts), then
        // forward again.
        d.reset(ProxyId(1), t0 + S * 60, t0 + S * 90);
        d.reset(ProxyId(1), t0 + S * 90, t0 + S * 70);
        assert_eq!(next(&mut d).await, Some((ProxyId(1), t0 + S * 70)));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_due_at_the_same_instant_all_come_out() {
        let t0 = Instant::now();
        let mut d = Deadlines::new();
        for p in 0..100 {
            d.insert(ProxyId(p), t0 + S);
        }
        let mut seen = Vec::new();
        while let Some((p, at)) = next(&mut d).await {
            assert_eq!(at, t0 + S);
            seen.push(p.0);
            if d.len() == 0 {
                break;
            }
        }
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }
}
