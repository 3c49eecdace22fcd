//! Per-client outbound queue with the slow-consumer policy.
//!
//! The hub pushes with [`Outbox::push`] (or a run of messages it shares among clients,
//! [`Outbox::push_run_deferred`]) and never waits; the client's writer drains with
//! [`Outbox::drain`] (or [`Outbox::drain_entries`], which keeps a run one entry) after
//! [`Outbox::ready`] (a writer task) or [`Outbox::poll_ready`] (a writer that is a
//! response body, polled by the connection itself). Policy (docs/architecture.md,
//! "Slow clients"):
//! - while the queue is below `cap`, everything is queued in order;
//! - when it is full, coalescible notifications (`notifications/resources/updated` per
//!   URI, `*/list_changed` per method) go to a side map that keeps one entry per key
//!   and recipient (the listen a message is `related` to, on an outbox a stdio
//!   connection's clients share), the newest; other notifications (progress, logs) are
//!   dropped and counted;
//! - a response or a server→client request that cannot be queued, or a side map that
//!   grows past `cap` distinct keys, closes the outbox: the hub then disconnects the
//!   client with the returned reason.
//!
//! The state is a plain struct ([`OutboxState`]) so the policy is unit-tested without
//! tokio. It sits behind a `std::sync::Mutex` because exactly two parties touch it (the
//! hub and one writer), each for a few pointer moves, never across an `.await`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

mod outbound;
mod queued;
pub use outbound::{CoalesceKey, OutKind, Outbound, Parts};
pub use queued::{Queued, Run};

/// Slots an outbox's queue keeps allocated once drained message by message.
const KEEP_SLOTS: usize = 4;

/// Why an outbox was closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// A response or request could not be queued: the client is not reading.
    QueueFull,
    /// Too many distinct coalesced notifications are pending.
    CoalesceOverflow,
    /// The hub or the session ended it normally.
    Closed,
}

/// Result of a push.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    Coalesced,
    Dropped,
    /// The outbox is (now) closed; the hub must disconnect the client.
    Closed(CloseReason),
}

/// The pure queue state.
#[derive(Debug)]
pub struct OutboxState {
    cap: usize,
    queue: VecDeque<Queued>,
    /// Messages in `queue` (a run counts each of its messages).
    queued: usize,
    /// Coalesced notifications in arrival order of their keys; one entry per key.
    coalesced: Vec<Outbound>,
    closed: Option<CloseReason>,
    /// Highest queue length seen (queue + coalesced).
    pub peak: usize,
    /// Notifications dropped under pressure.
    pub dropped: u64,
    /// Notifications merged into an existing pending entry.
    pub merged: u64,
}

impl OutboxState {
    pub fn new(cap: usize) -> Self {
        OutboxState {
            cap: cap.max(1),
            queue: VecDeque::new(),
            queued: 0,
            coalesced: Vec::new(),
            closed: None,
            peak: 0,
            dropped: 0,
            merged: 0,
        }
    }

    pub fn push(&mut self, msg: Outbound) -> Pushed {
        if let Some(r) = &self.closed {
            return Pushed::Closed(r.clone());
        }
        if msg.kind == OutKind::Ended {
            // Past the bound, but not without one: a client that opens and ends
            // requests while it reads nothing is closed, as a response would close it.
            if self.queued >= 2 * self.cap {
                return self.close(CloseReason::QueueFull);
            }
            // What waits to be coalesced goes after the queue, so after this mark: the
            // ended request's pending notifications are for nobody now.
            self.coalesced.retain(|o| o.related != msg.related);
            self.queue.push_back(Queued::One(msg));
            self.queued += 1;
            return Pushed::Queued;
        }
        let result = if self.queued < self.cap {
            self.queue.push_back(Queued::One(msg));
            self.queued += 1;
            Pushed::Queued
        } else {
            match &msg.kind {
                // (`Ended` never comes here: it is queued above.)
                OutKind::Response | OutKind::Request | OutKind::Release | OutKind::Ended => {
                    self.close(CloseReason::QueueFull)
                }
                OutKind::Notification => {
                    self.dropped += 1;
                    Pushed::Dropped
                }
                OutKind::Coalescible(key) => {
                    // Same key and same recipient: on an outbox several clients share
                    // (a stdio connection's session and its listens) each copy names
                    // its listen in `related` (a session's copy names none).
                    let (key, related) = (key.clone(), msg.related.clone());
                    let same = |o: &Outbound| {
                        o.related == related
                            && matches!(&o.kind, OutKind::Coalescible(k) if *k == key)
                    };
                    if let Some(slot) = self.coalesced.iter_mut().find(|o| same(o)) {
                        *slot = msg;
                        self.merged += 1;
                        Pushed::Coalesced
                    } else if self
                        .queue
                        .back()
                        .and_then(|q| q.as_slice().last())
                        .is_some_and(same)
                    {
                        // The newest queued message already says the same thing.
                        self.merged += 1;
                        Pushed::Coalesced
                    } else if self.coalesced.len() >= self.cap {
                        self.close(CloseReason::CoalesceOverflow)
                    } else {
                        self.coalesced.push(msg);
                        Pushed::Coalesced
                    }
                }
            }
        };
        self.peak = self.peak.max(self.len());
        result
    }

    /// Queues a run whole when the queue has room for all of it (the holder's share is
    /// one reference); otherwise message by message under the policy, as if each came
    /// alone. Returns why the outbox closed, if it did (the rest is dropped).
    pub fn push_run(&mut self, run: Run) -> Option<CloseReason> {
        if let Some(r) = &self.closed {
            return Some(r.clone());
        }
        if self.queued + run.len() <= self.cap {
            self.queued += run.len();
            self.queue.push_back(Queued::Run(run));
            self.peak = self.peak.max(self.len());
            return None;
        }
        for msg in run.as_slice() {
            if let Pushed::Closed(why) = self.push(msg.clone()) {
                return Some(why);
            }
        }
        None
    }

    fn close(&mut self, reason: CloseReason) -> Pushed {
        self.closed = Some(reason.clone());
        self.queue.clear();
        self.queued = 0;
        self.coalesced.clear();
        Pushed::Closed(reason)
    }

    /// Moves everything pending into `out` as entries, queue first, then coalesced
    /// entries: a run stays shared. An empty `out` takes the queue's buffer itself (no
    /// copy), so an outbox that was drained holds no buffer while its session is idle.
    pub fn drain_entries_into(&mut self, out: &mut Vec<Queued>) {
        if out.is_empty() {
            *out = Vec::from(std::mem::take(&mut self.queue));
        } else {
            out.extend(self.queue.drain(..));
        }
        self.queued = 0;
        out.extend(self.coalesced.drain(..).map(Queued::One));
    }

    /// [`OutboxState::drain_entries_into`] message by message: each message of a run
    /// is one more reference to it.
    ///
    /// An emptied queue keeps its buffer only while that is small (an outbox that was
    /// drained after a burst holds no burst-sized buffer while its client is idle).
    pub fn drain_into(&mut self, out: &mut Vec<Outbound>) {
        out.reserve(self.len());
        for q in self.queue.drain(..) {
            q.flatten_into(out);
        }
        if self.queue.capacity() > KEEP_SLOTS {
            self.queue = VecDeque::new();
        }
        self.queued = 0;
        out.append(&mut self.coalesced);
    }

    /// Makes room in the queue for `n` more messages (no more than the cap allows), so
    /// a batch is queued without the queue growing step by step.
    pub fn reserve(&mut self, n: usize) {
        let room = self.cap.saturating_sub(self.queued);
        self.queue.reserve(n.min(room));
    }

    pub fn len(&self) -> usize {
        self.queued + self.coalesced.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn closed(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }
}

/// Shared handle: the hub pushes, one writer drains.
#[derive(Debug)]
pub struct Outbox {
    // std Mutex: two parties, critical sections of a few pointer moves, never held
    // across an await.
    state: Mutex<OutboxState>,
    notify: Notify,
    /// The waker of a writer that polls ([`Outbox::poll_ready`]) instead of awaiting.
    waker: AtomicWaker,
    /// The waker of a watcher of the close alone ([`Outbox::poll_closed`]).
    close_waker: AtomicWaker,
    /// The transport the client uses (`http`, `stdio`), for the operator's view.
    transport: &'static str,
}

impl Outbox {
    pub fn new(cap: usize) -> Arc<Self> {
        Self::for_transport(cap, "other")
    }

    /// An outbox of a client of transport `transport` (`http`, `stdio`).
    pub fn for_transport(cap: usize, transport: &'static str) -> Arc<Self> {
        Arc::new(Outbox {
            state: Mutex::new(OutboxState::new(cap)),
            notify: Notify::new(),
            waker: AtomicWaker::new(),
            close_waker: AtomicWaker::new(),
            transport,
        })
    }

    /// The transport named when it was made.
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Queues a message per the policy. Never blocks on the client.
    ///
    /// The writer is woken only when the outbox goes from empty to non-empty: a
    /// writer drains everything each time it wakes, so a push onto a non-empty queue
    /// will be picked up by the drain already due (the profile showed a wake per push
    /// costing ~9 % of fan-out CPU).
    pub fn push(&self, msg: Outbound) -> Pushed {
        let (r, wake) = self.push_deferred(msg);
        if wake {
            self.wake();
        }
        r
    }

    /// [`Outbox::push`] without the wake-up: returns whether one is due, for a caller
    /// that pushes a whole batch and then wakes each writer once with [`Outbox::wake`]
    /// (the hub, per turn: docs/architecture.md, "Fan-out"). A due wake must be given:
    /// the writer may be asleep on an empty queue.
    pub fn push_deferred(&self, msg: Outbound) -> (Pushed, bool) {
        let (r, was_empty) = {
            let mut s = self.lock();
            let was_empty = s.is_empty();
            (s.push(msg), was_empty)
        };
        let closed = matches!(r, Pushed::Closed(_));
        if closed {
            self.close_waker.wake();
        }
        (r, was_empty || closed)
    }

    /// [`Outbox::push_deferred`] for a batch, in order, under one lock: empties `msgs`
    /// and returns why the outbox closed, if it did (what was not queued is dropped),
    /// and whether a wake-up is due.
    pub fn push_all_deferred(&self, msgs: &mut Vec<Outbound>) -> (Option<CloseReason>, bool) {
        let (closed, was_empty) = {
            let mut s = self.lock();
            let was_empty = s.is_empty();
            s.reserve(msgs.len());
            let mut closed = None;
            for msg in msgs.drain(..) {
                if let Pushed::Closed(why) = s.push(msg) {
                    closed = Some(why);
                    break;
                }
            }
            (closed, was_empty)
        };
        msgs.clear();
        if closed.is_some() {
            self.close_waker.wake();
        }
        let wake = was_empty || closed.is_some();
        (closed, wake)
    }

    /// [`Outbox::push_all_deferred`] for a run shared with other clients
    /// ([`OutboxState::push_run`]).
    pub fn push_run_deferred(&self, run: Run) -> (Option<CloseReason>, bool) {
        let (closed, was_empty) = {
            let mut s = self.lock();
            let was_empty = s.is_empty();
            (s.push_run(run), was_empty)
        };
        if closed.is_some() {
            self.close_waker.wake();
        }
        let wake = was_empty || closed.is_some();
        (closed, wake)
    }

    /// Wakes the writer (see [`Outbox::push_deferred`]).
    pub fn wake(&self) {
        self.notify.notify_one();
        self.waker.wake();
    }

    /// Closes the outbox; the writer sees it on its next `drain`.
    pub fn close(&self, reason: CloseReason) {
        {
            let mut s = self.lock();
            if s.closed.is_none() {
                s.close(reason);
            }
        }
        self.close_waker.wake();
        self.wake();
    }

    /// `Ready` with the reason once the outbox is closed; otherwise `cx` is woken by the
    /// close (and by nothing else: a watcher that leaves the draining to another party
    /// is not woken per message).
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<CloseReason> {
        self.close_waker.register(cx.waker());
        match self.lock().closed() {
            Some(why) => Poll::Ready(why.clone()),
            None => Poll::Pending,
        }
    }

    /// Waits until something may be pending or the outbox was closed.
    pub async fn ready(&self) {
        self.notify.notified().await
    }

    /// [`Outbox::ready`] for a writer that is polled (a response body): `Ready` when
    /// something is pending or the outbox was closed; otherwise `cx` is woken by the
    /// next push that finds the queue empty, or by the close.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        // Register first, then look: a push after the look wakes the waker.
        self.waker.register(cx.waker());
        let s = self.lock();
        if s.closed().is_some() || !s.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Takes everything pending. `Err` once the outbox is closed.
    pub fn drain(&self, out: &mut Vec<Outbound>) -> Result<(), CloseReason> {
        self.take_with(|s| s.drain_into(out))
    }

    /// [`Outbox::drain`] as entries: a run the hub shared stays one entry.
    pub fn drain_entries(&self, out: &mut Vec<Queued>) -> Result<(), CloseReason> {
        self.take_with(|s| s.drain_entries_into(out))
    }

    fn take_with(&self, take: impl FnOnce(&mut OutboxState)) -> Result<(), CloseReason> {
        let mut s = self.lock();
        if let Some(r) = s.closed() {
            return Err(r.clone());
        }
        take(&mut s);
        Ok(())
    }

    /// True once the outbox was closed (by the hub or the session). Lets a writer that
    /// is not draining (its client is slow) notice the close without taking anything.
    pub fn is_closed(&self) -> bool {
        self.lock().closed().is_some()
    }

    /// Notifications merged into a pending entry so far (each is one delivery fewer).
    pub fn merged(&self) -> u64 {
        self.lock().merged
    }

    pub fn peak(&self) -> usize {
        self.lock().peak
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutboxState> {
        // A panic while holding this lock would be a bug in this file; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
