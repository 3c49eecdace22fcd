//! The SSE answer to one 2026-07-28 request (docs/architecture.md, "Both protocol
//! eras"): a response body that drains the request's outbox itself, each time the
//! connection polls it. No task and no channel sit between the hub's queue and the
//! socket, so an idle `subscriptions/listen` costs its connection, its outbox and this
//! struct, and an update reaches the socket in one hop.
//!
//! Owns: the request's stream from its first event to its end, in the era's shape (the
//! response shaped, a listen's updates tagged with its `subscriptionId`; keep-alive
//! comments come from [`EventsBody`]), and ending the request's client exactly once: when its response was written, when a listen was released, when the outbox
//! closed, on shutdown, or when the connection dropped the body (the client went away).
//! Never: waits on the hub (the close is `client_closed_now`), or writes an event that
//! is not the request's own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::events_body::{Events, EventsBody};
use super::sse;
use crate::downstream::link::ClientLink;
use crate::downstream::outbox::{OutKind, Outbound, Outbox};
use crate::protocol::shape;
use crate::protocol::RawId;
use crate::state::ids::ClientId;

/// What a stream writes for: its request's id, the URI when it is a read, and whether
/// it is a listen.
pub(super) struct Request {
    pub(super) id: RawId,
    pub(super) read_uri: Option<String>,
    pub(super) listen: bool,
}

impl Request {
    /// The bytes to write for `o`, in the era's shape: the response shaped, a listen's
    /// update tagged with the stream's `subscriptionId`.
    fn wire(&self, o: &Outbound) -> Bytes {
        match &o.kind {
            OutKind::Response if o.related.as_ref() == Some(&self.id) => {
                shape::response(o.bytes.clone(), o.hints, self.read_uri.as_deref())
            }
            OutKind::Notification | OutKind::Coalescible(_)
                if self.listen && o.related.as_ref() == Some(&self.id) =>
            {
                o.listen_bytes()
            }
            _ => o.bytes.clone(),
        }
    }

    /// Whether `o` ends the stream: the request's own response, or the hub's release
    /// of a listen.
    fn ends(&self, o: &Outbound) -> bool {
        o.kind == OutKind::Release
            || (o.kind == OutKind::Response && o.related.as_ref() == Some(&self.id))
    }
}

/// The events of one request's SSE stream.
pub(super) struct RequestEvents {
    outbox: Arc<Outbox>,
    request: Request,
    /// Ends the request's client; `None` once it was ended.
    close: Option<(ClientLink, ClientId)>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// The response body of one request's SSE stream.
pub(super) type RequestStream = EventsBody<RequestEvents>;

impl RequestStream {
    pub(super) fn new(
        outbox: Arc<Outbox>,
        link: ClientLink,
        client: ClientId,
        request: Request,
        shutdown: CancellationToken,
    ) -> Self {
        EventsBody::of(RequestEvents {
            outbox,
            request,
            close: Some((link, client)),
            shutdown: Box::pin(shutdown.cancelled_owned()),
        })
    }
}

impl std::fmt::Debug for RequestEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestEvents")
            .field("id", &self.request.id)
            .finish()
    }
}

impl RequestEvents {
    /// Ends the request's client (once) with `reason`.
    fn end(&mut self, reason: &'static str) {
        if let Some((link, client)) = self.close.take() {
            link.client_closed_now(client, reason);
        }
    }

    /// Everything pending, as one chunk of events; whether the stream ends with it.
    /// `None` when the outbox was closed.
    fn take_pending(&self) -> Option<(BytesMut, bool)> {
        let mut batch = Vec::new();
        // As entries: a run of a burst's updates is written from the shared array.
        self.outbox.drain_entries(&mut batch).ok()?;
        let mut chunk = BytesMut::new();
        let mut done = false;
        for o in batch.iter().flat_map(|q| q.as_slice()) {
            if o.kind != OutKind::Release {
                sse::write_event(&mut chunk, None, &self.request.wire(o));
            }
            done |= self.request.ends(o);
        }
        Some((chunk, done))
    }
}

impl Events for RequestEvents {
    fn poll_events(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if self.close.is_none() {
                return Poll::Ready(None);
            }
            let Some((chunk, done)) = self.take_pending() else {
                self.end("outbox closed");
                return Poll::Ready(None);
            };
            if done {
                self.end("answered");
            }
            if !chunk.is_empty() {
                return Poll::Ready(Some(chunk.freeze()));
            }
            if done {
                return Poll::Ready(None);
            }
            if self.shutdown.as_mut().poll(cx).is_ready() {
                self.end("shutdown");
                return Poll::Ready(None);
            }
            if self.outbox.poll_ready(cx).is_ready() {
                continue;
            }
            return Poll::Pending;
        }
    }
}

impl Drop for RequestEvents {
    fn drop(&mut self) {
        // The connection dropped the body before the stream ended: the client went
        // away (or the server is closing the connection).
        self.end("stream closed by the client");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::http::sse::KEEP_ALIVE_FRAME;
    use crate::downstream::link::ClientEvent;
    use http_body::Body;
    use tokio::sync::mpsc;

    /// The body's next frame's data; `None` at its end.
    async fn next(s: &mut RequestStream) -> Option<Bytes> {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *s).poll_frame(cx)).await?;
        Some(frame.unwrap().into_data().unwrap())
    }

    fn stream(listen: bool) -> (RequestStream, Arc<Outbox>, mpsc::Receiver<ClientEvent>) {
        let (tx, rx) = mpsc::channel(8);
        let outbox = Outbox::new(16);
        let request = Request {
            id: RawId::from_u64(7),
            read_uri: None,
            listen,
        };
        let s = RequestStream::new(
            outbox.clone(),
            ClientLink::new(tx),
            ClientId(3),
            request,
            CancellationToken::new(),
        );
        (s, outbox, rx)
    }

    fn closes(rx: &mut mpsc::Receiver<ClientEvent>) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            if let ClientEvent::Closed { client, reason } = ev {
                assert_eq!(client, ClientId(3));
                reasons.push(reason);
            }
        }
        reasons
    }

    #[tokio::test]
    async fn writes_notifications_then_the_response_and_ends_the_client_once() {
        let (mut s, outbox, mut rx) = stream(false);
        outbox.push(Outbound::new(
            Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            OutKind::Notification,
            Some(RawId::from_u64(7)),
        ));
        outbox.push(Outbound::response(
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#),
            RawId::from_u64(7),
            None,
        ));
        let frame = next(&mut s).await.unwrap();
        let text = std::str::from_utf8(&frame).unwrap();
        assert!(text
            .starts_with("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"));
        assert!(text.contains("\"id\":7"), "{text}");
        assert!(
            next(&mut s).await.is_none(),
            "the stream ends after its response"
        );
        drop(s);
        assert_eq!(closes(&mut rx), vec!["answered"]);
    }

    #[tokio::test]
    async fn a_dropped_body_ends_the_client() {
        let (s, _outbox, mut rx) = stream(true);
        drop(s);
        assert_eq!(closes(&mut rx), vec!["stream closed by the client"]);
    }

    #[tokio::test]
    async fn a_release_ends_a_listen() {
        let (mut s, outbox, mut rx) = stream(true);
        outbox.push(Outbound::new(Bytes::new(), OutKind::Release, None));
        assert!(next(&mut s).await.is_none());
        assert_eq!(closes(&mut rx), vec!["answered"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_listen_gets_keep_alives_and_a_busy_one_does_not() {
        let (mut s, outbox, _rx) = stream(true);
        let first = next(&mut s).await.unwrap();
        assert_eq!(&first[..], KEEP_ALIVE_FRAME);
        // An update written within the next period: that period owes no comment.
        let update = Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a"}}"#,
        );
        outbox.push(Outbound::new(update, OutKind::Notification, None));
        let data = next(&mut s).await.unwrap();
        assert!(data.starts_with(b"data: "));
        let start = tokio::time::Instant::now();
        let next = next(&mut s).await.unwrap();
        assert_eq!(&next[..], KEEP_ALIVE_FRAME);
        assert!(
            start.elapsed() > sse::KEEP_ALIVE,
            "one whole silent period first"
        );
    }

    #[tokio::test]
    async fn a_listens_run_of_updates_is_written_tagged_and_in_order() {
        use crate::downstream::outbox::Run;
        let (mut s, outbox, _rx) = stream(true);
        let update = |n: u64| {
            Outbound::new(
                Bytes::from(format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{{"uri":"a","_meta":{{"n":{n}}}}}}}"#
                )),
                OutKind::Coalescible(crate::downstream::outbox::CoalesceKey::Method("u".into())),
                Some(RawId::from_u64(7)),
            )
        };
        let run = Run::new(vec![update(1), update(2), update(3)]).unwrap();
        let (closed, wake) = outbox.push_run_deferred(run);
        assert!(closed.is_none() && wake);
        outbox.wake();
        let text = String::from_utf8(next(&mut s).await.unwrap().to_vec()).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 3, "{text}");
        for (i, e) in events.iter().enumerate() {
            assert!(e.contains(&format!(r#""n":{}"#, i + 1)), "in order: {text}");
            assert!(
                e.contains(r#""io.modelcontextprotocol/subscriptionId":7"#),
                "tagged: {e}"
            );
        }
    }

    #[tokio::test]
    async fn shutdown_ends_the_stream() {
        let (tx, mut rx) = mpsc::channel(8);
        let token = CancellationToken::new();
        let mut s = RequestStream::new(
            Outbox::new(4),
            ClientLink::new(tx),
            ClientId(3),
            Request {
                id: RawId::from_u64(1),
                read_uri: None,
                listen: true,
            },
            token.clone(),
        );
        token.cancel();
        assert!(next(&mut s).await.is_none());
        assert_eq!(closes(&mut rx), vec!["shutdown"]);
    }
}
