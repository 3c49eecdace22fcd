//! The timer behind hyper's request-head deadline (`limits.header_read_timeout_ms`):
//! every connection's deadline in one ordered table, watched by one task on one tokio
//! sleep.
//!
//! Owns: the table of waiting deadlines, and the task that wakes each connection whose
//! deadline has passed.
//! Never: decides what a deadline means (hyper closes the connection), or touches the
//! tokio timer for a deadline that is not the earliest.
//!
//! Why not hyper-util's `TokioTimer`: hyper arms a new head deadline every time it
//! waits for a request, so each request on a kept-alive connection registers a fresh
//! tokio timer. When that deadline is earlier than any the runtime's timer knew when it
//! last parked (it is, whenever no other timer is pending), tokio wakes its driver with
//! a write to an eventfd, and the worker's next park returns at once only to park
//! again: two system calls per request, a quarter of those a 2026-07-28 call makes
//! (docs/architecture.md, "Streamable HTTP", "Request-head deadlines"). Here a deadline
//! only goes into a table; the watching task's one sleep is set again only when a
//! deadline comes in earlier than the one it sleeps to, which with one timeout for
//! every connection happens when the table was empty. The watcher wakes at most once
//! per timeout's length while connections come and go, and not at all when none wait.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

/// A [`hyper::rt::Timer`] whose sleeps share one watcher. Clones share it too.
#[derive(Clone, Debug)]
pub(super) struct HeaderTimer {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    table: Mutex<Table>,
    /// Tells the watcher that a deadline earlier than the one it sleeps to came in.
    rearm: Notify,
}

#[derive(Debug, Default)]
struct Table {
    /// Waiting deadlines in order, each with its sleep's waker (a number breaks ties).
    waiting: BTreeMap<(Instant, u64), Waker>,
    next_key: u64,
    /// What the watcher sleeps to; `None` while it waits for a first deadline.
    armed: Option<Instant>,
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Table> {
    // Nothing here panics while holding the lock; a poisoned table is still whole.
    shared.table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The current time on tokio's clock (the paused clock in tests).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl HeaderTimer {
    /// A timer and its watcher, which runs (on the current runtime) until the handle
    /// is dropped.
    pub(super) fn start() -> (HeaderTimer, AbortOnDropHandle<()>) {
        let shared = Arc::new(Shared::default());
        let watcher = tokio::spawn(watch(shared.clone()));
        (HeaderTimer { shared }, AbortOnDropHandle::new(watcher))
    }

    fn sleep_at(&self, deadline: Instant) -> HeadDeadline {
        HeadDeadline {
            deadline,
            key: None,
            shared: self.shared.clone(),
        }
    }

    /// Deadlines waiting, and what the watcher sleeps to (tests).
    #[cfg(test)]
    fn state(&self) -> (usize, Option<Instant>) {
        let table = lock(&self.shared);
        (table.waiting.len(), table.armed)
    }
}

impl hyper::rt::Timer for HeaderTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(self.sleep_at(now() + duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(self.sleep_at(deadline))
    }

    fn now(&self) -> Instant {
        now()
    }
}

/// Wakes the sleeps whose deadline has passed, then sleeps to the earliest left.
async fn watch(shared: Arc<Shared>) {
    let mut due = Vec::new();
    loop {
        let next = {
            let mut table = lock(&shared);
            let now = now();
            while let Some(entry) = table.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            table.armed = table.waiting.first_key_value().map(|((at, _), _)| *at);
            table.armed
        };
        // Woken outside the lock: a waker may run its task's poll right here.
        due.drain(..).for_each(Waker::wake);
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => {}
                    () = shared.rearm.notified() => {}
                }
            }
            None => shared.rearm.notified().await,
        }
    }
}

/// One connection's head deadline ([`hyper::rt::Sleep`]).
#[derive(Debug)]
struct HeadDeadline {
    deadline: Instant,
    /// Its place in the table, once polled.
    key: Option<u64>,
    shared: Arc<Shared>,
}

impl hyper::rt::Sleep for HeadDeadline {}

impl Future for HeadDeadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if now() >= this.deadline {
            this.leave();
            return Poll::Ready(());
        }
        let mut table = lock(&this.shared);
        match this.key {
            Some(key) => match table.waiting.get_mut(&(this.deadline, key)) {
                Some(waker) => waker.clone_from(cx.waker()),
                // Not there (the watcher takes only passed deadlines): put it back.
                None => {
                    table
                        .waiting
                        .insert((this.deadline, key), cx.waker().clone());
                }
            },
            None => {
                let key = table.next_key;
                table.next_key += 1;
                table
                    .waiting
                    .insert((this.deadline, key), cx.waker().clone());
                this.key = Some(key);
            }
        }
        if table.armed.is_none_or(|armed| this.deadline < armed) {
            table.armed = Some(this.deadline);
            drop(table);
            // A permit is stored if the watcher is not waiting yet: never lost.
            this.shared.rearm.notify_one();
        }
        Poll::Pending
    }
}

impl HeadDeadline {
    /// Takes this deadline out of the table, if it is there.
    fn leave(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.shared).waiting.remove(&(self.deadline, key));
        }
    }
}

impl Drop for HeadDeadline {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
#[path = "header_timer_tests.rs"]
mod tests;
