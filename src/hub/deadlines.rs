//! Every timer of the hub (docs/architecture.md, "Request deadlines"): the deadlines
//! of the requests in flight upstream, and the rare others (a lingering release, a
//! refused re-subscribe to ask again, the shutdown drain's deadline).
//!
//! Request deadlines are on the path of every forwarded call, so they have a timer of
//! their own: an ordered set of `(deadline, proxy id)` and a single [`Sleep`]
//! ([`DueQueue`]). The sleep is moved earlier when a new deadline comes before it, and
//! never otherwise: an answered request only leaves the set. When the sleep fires with
//! nothing due, it is set to the earliest deadline left (or disarmed). With one timeout
//! for every request, sequential requests therefore touch the runtime's timer once per
//! timeout period rather than twice per request, and never wake the hub for their own
//! bookkeeping. The rare timers share one `DelayQueue`.
//!
//! [`Deadlines`] is the hub's part: each pending request's deadline, total limit, send
//! time and method (for the latency counters), armed when a request is sent, pushed
//! back by progress, dropped when answered; and the other timers, set by the hub.
//!
//! Never decides what a due request or timer means (the hub fails and cancels the
//! request, releases the key, ...) and never reads the clock except when its timer
//! fired.

use std::collections::BTreeSet;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};
use tokio_util::time::DelayQueue;

use crate::state::ids::{IdMap, ProxyId, SubKey};

/// The hub's rare timers (one per released subscription, one per refused
/// re-subscribe, one per shutdown).
#[derive(Debug)]
pub(super) enum Timer {
    Linger(SubKey),
    /// A held URI whose re-subscribe after an upstream restart failed: try again.
    Resubscribe(SubKey),
    /// The shutdown drain's deadline.
    Drain,
}

/// What came due: a request's deadline (with its timer, taken out) or another timer.
#[derive(Debug)]
pub(super) enum Due {
    Request(ProxyId, Option<RequestTimer>),
    Timer(Timer),
}

/// The ordered set of request deadlines and its one sleep (see the module doc).
#[derive(Debug)]
struct DueQueue {
    due: BTreeSet<(Instant, ProxyId)>,
    sleep: Pin<Box<Sleep>>,
    /// What `sleep` is set to; `None` when nothing is due at all.
    armed: Option<Instant>,
}

impl DueQueue {
    fn new() -> Self {
        DueQueue {
            due: BTreeSet::new(),
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    /// Adds `pid`, due `at`.
    fn insert(&mut self, pid: ProxyId, at: Instant) {
        self.due.insert((at, pid));
        if self.armed.is_none_or(|armed| at < armed) {
            self.sleep.as_mut().reset(at);
            self.armed = Some(at);
        }
    }

    /// Removes `pid`, which was due `at`. The timer stays as it is (see the module doc).
    fn remove(&mut self, pid: ProxyId, at: Instant) {
        self.due.remove(&(at, pid));
    }

    /// Moves `pid` from `old` to `new`.
    fn reset(&mut self, pid: ProxyId, old: Instant, new: Instant) {
        self.remove(pid, old);
        self.insert(pid, new);
    }

    /// Whether the timer is set: [`Self::next_due`] can only complete when it is.
    fn armed(&self) -> bool {
        self.armed.is_some()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.due.len()
    }

    /// The next request whose deadline has passed, taken out of the set. Pending until
    /// there is one; with the timer disarmed it registers no wake-up (the hub only polls
    /// it while [`Self::armed`]).
    #[cfg(test)]
    async fn next_due(&mut self) -> ProxyId {
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

/// The hub's timers: the deadlines of the requests in flight upstream, by proxy id,
/// and the rare others.
#[derive(Debug)]
pub(super) struct Deadlines {
    requests: IdMap<ProxyId, RequestTimer>,
    queue: DueQueue,
    others: DelayQueue<Timer>,
}

impl Deadlines {
    pub(super) fn new() -> Self {
        Deadlines {
            requests: IdMap::default(),
            queue: DueQueue::new(),
            others: DelayQueue::new(),
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
        self.requests.insert(pid, timer);
    }

    /// Request `pid` is done (answered, failed or cancelled): its timer goes.
    pub(super) fn disarm(&mut self, pid: ProxyId) -> Option<RequestTimer> {
        let t = self.requests.remove(&pid)?;
        self.queue.remove(pid, t.deadline);
        Some(t)
    }

    /// Progress on `pid` at `now`: its timeout starts again, never past its limit.
    pub(super) fn extend(&mut self, pid: ProxyId, now: Instant, timeout: std::time::Duration) {
        if let Some(t) = self.requests.get_mut(&pid) {
            let at = (now + timeout).min(t.limit);
            self.queue.reset(pid, t.deadline, at);
            t.deadline = at;
        }
    }

    pub(super) fn get(&self, pid: ProxyId) -> Option<&RequestTimer> {
        self.requests.get(&pid)
    }

    /// Sets one of the rare timers, due `at`.
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        self.others.insert_at(timer, at);
    }

    /// Whether anything can come due ([`Self::next`] only completes then).
    pub(super) fn armed(&self) -> bool {
        self.queue.armed() || !self.others.is_empty()
    }

    /// The next request deadline passed (with its timer, taken out) or other timer
    /// due. Pending until there is one; registers no wake-up for a part with nothing
    /// to wait for.
    pub(super) async fn next(&mut self) -> Due {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Due> {
        if let Poll::Ready(pid) = self.queue.poll_due(cx) {
            return Poll::Ready(Due::Request(pid, self.requests.remove(&pid)));
        }
        if !self.others.is_empty() {
            if let Poll::Ready(Some(expired)) = self.others.poll_expired(cx) {
                return Poll::Ready(Due::Timer(expired.into_inner()));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{timeout, Instant};

    use super::{Deadlines, Due, DueQueue, Timer};
    use crate::state::ids::ProxyId;

    const S: Duration = Duration::from_secs(1);

    async fn next(d: &mut DueQueue) -> Option<(ProxyId, Instant)> {
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
        let mut d = DueQueue::new();
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
        let mut d = DueQueue::new();
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
        let mut d = DueQueue::new();
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
        let mut d = DueQueue::new();
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

    #[tokio::test(start_paused = true)]
    async fn the_part_gives_request_deadlines_with_their_timer_and_the_other_timers() {
        let t0 = Instant::now();
        let mut d = Deadlines::new();
        assert!(!d.armed(), "nothing to wait for");
        d.arm(ProxyId(7), "tools/call", t0, S * 10, S * 600);
        d.set(Timer::Drain, t0 + S * 5);
        assert!(d.armed());
        assert!(matches!(d.next().await, Due::Timer(Timer::Drain)));
        assert_eq!(Instant::now(), t0 + S * 5);
        // Progress pushes the request back; its timer comes out with it.
        d.extend(ProxyId(7), Instant::now(), S * 10);
        match d.next().await {
            Due::Request(pid, Some(t)) => {
                assert_eq!((pid, t.method, t.sent), (ProxyId(7), "tools/call", t0));
                assert!(!t.limit_reached(Instant::now()));
            }
            other => panic!("expected the request's deadline, got {other:?}"),
        }
        assert_eq!(Instant::now(), t0 + S * 15);
        assert!(d.get(ProxyId(7)).is_none(), "taken out");
        // An answered request never comes due.
        d.arm(ProxyId(8), "tools/call", Instant::now(), S, S);
        assert!(d.disarm(ProxyId(8)).is_some());
        assert!(timeout(S * 3600, d.next()).await.is_err());
    }
}
