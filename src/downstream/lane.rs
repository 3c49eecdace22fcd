//! A lean bounded queue from many senders to one receiver: the command queue of an
//! HTTP session and the chunk queue of each of its POST streams (docs/architecture.md,
//! "Streamable HTTP": memory per session).
//!
//! Owns: the queue, its bound, and the wake-ups between its ends. Never: grows past its
//! bound (a full queue refuses or makes the sender wait), or keeps more than a few
//! empty slots allocated while idle.
//!
//! Why not `tokio::sync::mpsc`: an idle session holds one command queue and one GET
//! stream for as long as the client stays, and tokio's channel allocates a block of 32
//! slots plus two cache-padded halves up front (≈ 1.5 KiB for 32-byte items, ≈ 2 KiB
//! for the commands). Here the slots are a `VecDeque` that grows with use and is given
//! back when the receiver empties it, so an idle queue costs its ≈ 150-byte header.
//! The API mirrors the parts of `mpsc` the sessions use.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Slots an emptied queue keeps allocated (beyond this it gives its buffer back).
const KEEP_SLOTS: usize = 4;

/// Why [`Sender::try_send`] refused a value (it is handed back).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TrySendError<T> {
    /// The queue holds its bound.
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

struct LaneState<T> {
    queue: VecDeque<T>,
    cap: usize,
    senders: usize,
    receiver: bool,
}

struct Shared<T> {
    state: Mutex<LaneState<T>>,
    /// Wakes the receiver (a stored permit covers a push before it waits).
    to_receiver: Notify,
    /// Wakes every sender waiting for room or for the receiver to go.
    to_senders: Notify,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, LaneState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bounded queue holding at most `cap` (≥ 1) values.
pub(crate) fn channel<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(LaneState {
            queue: VecDeque::new(),
            cap: cap.max(1),
            senders: 1,
            receiver: true,
        }),
        to_receiver: Notify::new(),
        to_senders: Notify::new(),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// The sending end; clones share the queue. The receiver sees the end once every
/// sender is dropped and the queue is drained.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("lane::Sender")
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut s = self.shared.lock();
            s.senders -= 1;
            s.senders == 0
        };
        if last {
            self.shared.to_receiver.notify_one();
        }
    }
}

impl<T> Sender<T> {
    /// Queues `value` unless the queue is full or the receiver is gone.
    pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        {
            let mut s = self.shared.lock();
            if !s.receiver {
                return Err(TrySendError::Closed(value));
            }
            if s.queue.len() >= s.cap {
                return Err(TrySendError::Full(value));
            }
            s.queue.push_back(value);
        }
        self.shared.to_receiver.notify_one();
        Ok(())
    }

    /// Queues `value`, waiting for room; `Err(value)` when the receiver is gone.
    pub(crate) async fn send(&self, mut value: T) -> Result<(), T> {
        loop {
            match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(v),
                Err(TrySendError::Full(v)) => value = v,
            }
            self.wait_for(|s| s.queue.len() < s.cap || !s.receiver)
                .await;
        }
    }

    /// Free slots now (0 only when full). A closed queue is empty, so it reports room:
    /// a caller that checks for room before sending learns of the close from
    /// [`Sender::try_send`] instead of waiting for room forever.
    pub(crate) fn capacity(&self) -> usize {
        let s = self.shared.lock();
        s.cap - s.queue.len()
    }

    /// Resolves when the queue has room or the receiver is gone.
    pub(crate) async fn room(&self) {
        self.wait_for(|s| s.queue.len() < s.cap || !s.receiver)
            .await;
    }

    async fn wait_for(&self, ready: impl Fn(&LaneState<T>) -> bool) {
        loop {
            let notified = self.shared.to_senders.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake-up between the two is not lost.
            notified.as_mut().enable();
            if ready(&self.shared.lock()) {
                return;
            }
            notified.await;
        }
    }
}

/// The receiving end. Dropping it closes the queue (values still queued are dropped).
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("lane::Receiver")
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let dropped = {
            let mut s = self.shared.lock();
            s.receiver = false;
            std::mem::take(&mut s.queue)
        };
        self.shared.to_senders.notify_waiters();
        drop(dropped);
    }
}

impl<T> Receiver<T> {
    /// The next value without waiting; `None` when the queue is empty.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        let (value, was_full) = {
            let mut s = self.shared.lock();
            let was_full = s.queue.len() >= s.cap;
            let value = s.queue.pop_front();
            if s.queue.is_empty() && s.queue.capacity() > KEEP_SLOTS {
                s.queue = VecDeque::new();
            }
            (value, was_full)
        };
        if was_full && value.is_some() {
            self.shared.to_senders.notify_waiters();
        }
        value
    }

    /// The next value; `None` once every sender is gone and the queue is drained.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        loop {
            if let Some(v) = self.try_recv() {
                return Some(v);
            }
            if self.shared.lock().senders == 0 {
                // A value queued by the last sender before it went is still delivered.
                return self.try_recv();
            }
            self.shared.to_receiver.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn values_arrive_in_order_and_the_end_after_the_last_sender() {
        let (tx, mut rx) = channel(4);
        let tx2 = tx.clone();
        tx.send(1).await.unwrap();
        tx2.try_send(2).unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some(1));
        drop(tx2);
        assert_eq!(rx.recv().await, Some(2), "queued before the end");
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_reports_no_capacity() {
        let (tx, mut rx) = channel(2);
        assert_eq!(tx.capacity(), 2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.capacity(), 0);
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        assert_eq!(rx.try_recv(), Some(1));
        assert_eq!(tx.capacity(), 1);
    }

    #[tokio::test]
    async fn a_waiting_sender_gets_room_when_the_receiver_takes_one() {
        let (tx, mut rx) = channel(1);
        tx.try_send(1).unwrap();
        let waiter = tokio::spawn(async move {
            tx.send(2).await.unwrap();
            tx
        });
        // The waiter cannot finish while the queue is full.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(rx.recv().await, Some(1));
        let tx = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
        assert_eq!(rx.recv().await, Some(2));
        tokio::time::timeout(WAIT, tx.room()).await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_receiver_closes_and_wakes_senders() {
        let (tx, rx) = channel::<u8>(1);
        tx.try_send(1).unwrap();
        let full = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(2).await })
        };
        tokio::task::yield_now().await;
        drop(rx);
        let refused = tokio::time::timeout(WAIT, full).await.unwrap().unwrap();
        assert_eq!(refused, Err(2));
        assert_eq!(tx.try_send(3), Err(TrySendError::Closed(3)));
        assert_eq!(
            tx.capacity(),
            1,
            "closed reports room, so nobody waits for it"
        );
        tokio::time::timeout(WAIT, tx.room()).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_on_a_send_from_another_task() {
        let (tx, mut rx) = channel(4);
        let got = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        tx.try_send(7).unwrap();
        assert_eq!(
            tokio::time::timeout(WAIT, got).await.unwrap().unwrap(),
            Some(7)
        );
    }

    #[test]
    fn an_emptied_queue_gives_its_slots_back() {
        let (tx, mut rx) = channel(64);
        for i in 0..64 {
            tx.try_send(i).unwrap();
        }
        while rx.try_recv().is_some() {}
        assert_eq!(tx.shared.lock().queue.capacity(), 0);
    }

    #[test]
    fn an_idle_queue_is_small() {
        // What one idle session pays per queue (tokio's mpsc: ≈ 1.5 KiB).
        assert!(std::mem::size_of::<Shared<bytes::Bytes>>() <= 160);
    }
}
