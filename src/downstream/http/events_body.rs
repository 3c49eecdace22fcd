//! The response body of an SSE stream that drains its outbox itself (a session's GET
//! stream, a 2026-07-28 request's answer): its source of [`Events`] is polled each time
//! the connection polls the body, so no task and no channel sit between the outbox and
//! the socket (docs/architecture.md, "Fan-out").
//!
//! Owns: handing the source's chunks to the connection and a keep-alive comment after a
//! period of silence. Never: frames, routes or decides when a stream ends (its source
//! does).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::sse::{KeepAlive, KEEP_ALIVE_FRAME};

/// What an [`EventsBody`] draws its events from.
pub(crate) trait Events {
    /// The next chunk of events; `Ready(None)` when the stream ends; `Pending` with
    /// `cx` woken when there may be more.
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

/// An SSE response body over [`Events`]: their chunks as they come, and a keep-alive
/// comment after a period of silence ([`KeepAlive`]).
pub(crate) struct EventsBody<E> {
    events: E,
    keep_alive: KeepAlive,
    done: bool,
}

impl<E> EventsBody<E> {
    pub(crate) fn of(events: E) -> Self {
        EventsBody {
            events,
            keep_alive: KeepAlive::default(),
            done: false,
        }
    }
}

impl<E: std::fmt::Debug> std::fmt::Debug for EventsBody<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EventsBody").field(&self.events).finish()
    }
}

impl<E: Events + Unpin> http_body::Body for EventsBody<E> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let chunk = match this.events.poll_events(cx) {
            Poll::Ready(Some(chunk)) => {
                this.keep_alive.wrote();
                chunk
            }
            Poll::Ready(None) => {
                this.done = true;
                return Poll::Ready(None);
            }
            Poll::Pending => match this.keep_alive.poll_due(cx) {
                Poll::Ready(()) => Bytes::from_static(KEEP_ALIVE_FRAME),
                Poll::Pending => return Poll::Pending,
            },
        };
        Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
