//! A legacy session's GET stream: a response body that drains the session's outbox
//! itself and routes what it finds, each time the connection polls it
//! (docs/architecture.md, "Streamable HTTP"). No task sits between the hub's queue and
//! the socket while a GET stream is open: the session's actor keeps the commands and
//! takes the outbox back when the stream goes.
//!
//! Owns: the attached stream's events (framed from the session's replay buffer with
//! their ids), keep-alive comments after a period of silence, waiting for room in a
//! POST stream that is full. Never: ends the session (it tells the actor, which does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::Shared;
use crate::downstream::http::events_body::{Events, EventsBody};
use crate::downstream::outbox::Outbox;

type Room = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// The events of a plain GET stream of a session.
pub(crate) struct GetEvents {
    shared: Arc<Shared>,
    outbox: Arc<Outbox>,
    gen: u64,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    /// A POST stream is full: routing waits for its room.
    room: Option<Room>,
}

/// The body of a plain GET stream of a session.
pub(crate) type GetStream = EventsBody<GetEvents>;

impl std::fmt::Debug for GetEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetEvents").field("gen", &self.gen).finish()
    }
}

impl GetStream {
    pub(crate) fn new(
        shared: Arc<Shared>,
        outbox: Arc<Outbox>,
        gen: u64,
        shutdown: CancellationToken,
    ) -> Self {
        EventsBody::of(GetEvents {
            shared,
            outbox,
            gen,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            room: None,
        })
    }
}

impl GetEvents {
    /// Drains and routes what the outbox holds; the next chunk for this stream. `Err`
    /// when the stream ends.
    fn pump(&mut self, cx: &mut Context<'_>) -> Result<Option<Bytes>, ()> {
        if let Some(room) = self.room.as_mut() {
            if room.as_mut().poll(cx).is_ready() {
                self.room = None;
            } else if self.outbox.is_closed() {
                // While blocked, a close of the outbox is all that matters (the actor
                // sees it too, and ends the session).
                return Err(());
            }
        }
        let mut a = self.shared.lock();
        if !a.attached(self.gen) {
            // Replaced by a newer GET, or the session ended: nothing more to route here.
            return Err(());
        }
        if self.room.is_none() {
            let mut blocked = if a.has_backlog() { a.flush() } else { None };
            if blocked.is_none() && !a.has_backlog() {
                let mut batch = Vec::new();
                if self.outbox.drain_entries(&mut batch).is_err() {
                    // Closed: the actor sees it too, and ends the session.
                    return Err(());
                }
                if !batch.is_empty() {
                    a.take_batch(batch);
                    blocked = a.flush();
                }
            }
            if let Some(tx) = blocked {
                self.room = Some(Box::pin(async move { tx.room().await }));
            }
            a.release_idle_buffers();
        }
        a.take_for_get(self.gen, cx.waker())
    }
}

impl Events for GetEvents {
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if self.shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            match self.pump(cx) {
                Err(()) => return Poll::Ready(None),
                Ok(Some(chunk)) => return Poll::Ready(Some(chunk)),
                Ok(None) => {}
            }
            let ready = self.outbox.poll_ready(cx).is_ready();
            // Blocked on a POST stream, the queue stays (its close wakes `cx`).
            if !(ready && self.room.is_none()) {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for GetEvents {
    fn drop(&mut self) {
        self.shared.lock().detach_get(self.gen);
        self.shared.handback().notify_one();
    }
}
