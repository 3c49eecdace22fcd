//! Server-Sent Events framing and the SSE body stream.
//!
//! Owns: turning JSON-RPC message bytes into SSE events (`id:` + `data:` lines; the
//! bounded buffer of GET-stream events kept for `Last-Event-ID` resumption is
//! `replay.rs`), the response body of a POST stream that batches every chunk available into one write
//! ([`sse_body`]; the body of a stream that drains its outbox itself is
//! `events_body.rs`), and the keep-alive clock of every SSE stream ([`KeepAlive`]).
//! Never: decides routing (the session's and the request's job) or touches the hub.
//! The framing and the buffer are pure and unit-tested; only the bodies use tokio.
//!
//! Invariants: event ids are assigned here, strictly increasing from 1 per session;
//! the buffer never holds more than `cap` events (oldest dropped first).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::decimal::Decimal;
use crate::downstream::lane;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::Stream;

/// Interval of the `: keep-alive` comment on idle SSE streams. 15 s is well under the
/// usual 30–60 s idle timeouts of proxies and of the SDK clients' fetch stacks.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The comment written when a stream has been silent for [`KEEP_ALIVE`].
pub(crate) const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// When an SSE stream owes a keep-alive comment: at the end of a [`KEEP_ALIVE`] period
/// in which nothing was written (so a silent stream hears from mcpmux every 15–30 s).
/// One timer per stream, made on the first wait and moved once a period: writing an
/// event only sets a flag, so a busy stream touches no timer (a timer per wait cost
/// two timer-wheel locks per delivery).
#[derive(Default)]
pub(crate) struct KeepAlive {
    timer: Option<Pin<Box<Sleep>>>,
    wrote: bool,
}

impl KeepAlive {
    /// Something was written: the current period is not silent.
    pub(crate) fn wrote(&mut self) {
        self.wrote = true;
    }

    /// `Ready` when a keep-alive comment is due; otherwise `cx` is woken at the end of
    /// the current period.
    pub(crate) fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEP_ALIVE)));
        while timer.as_mut().poll(cx).is_ready() {
            timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
            if !std::mem::take(&mut self.wrote) {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }

    /// [`KeepAlive::poll_due`] as a future.
    pub(crate) async fn due(&mut self) {
        std::future::poll_fn(|cx| self.poll_due(cx)).await;
    }
}

/// Appends one SSE event to `buf`. `data` may contain line breaks (JSON whitespace
/// from a pretty-printing peer): each line becomes its own `data:` field, which the
/// client joins back with `\n`, so the JSON stays equivalent.
pub(crate) fn write_event(buf: &mut BytesMut, id: Option<u64>, data: &[u8]) {
    let id = id.map(Decimal::new);
    write_framed(buf, id.as_ref().map(Decimal::as_bytes), data, false);
}

/// [`write_event`], told whether `data` is already known to hold no line break (then
/// it is not scanned again: a message shared by many sessions is scanned once, when
/// it is made, not once per session).
pub(super) fn write_framed(buf: &mut BytesMut, id: Option<&[u8]>, data: &[u8], one_line: bool) {
    buf.reserve(data.len() + FRAMING);
    if let Some(id) = id {
        buf.put_slice(b"id: ");
        buf.put_slice(id);
        buf.put_u8(b'\n');
    }
    if one_line {
        buf.put_slice(b"data: ");
        buf.put_slice(data);
        buf.put_slice(b"\n\n");
        return;
    }
    let mut rest = data;
    loop {
        let end = memchr::memchr2(b'\n', b'\r', rest);
        let (line, next) = match end {
            None => (rest, None),
            Some(i) => {
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..i], Some(&rest[i + skip..]))
            }
        };
        buf.put_slice(b"data: ");
        buf.put_slice(line);
        buf.put_u8(b'\n');
        match next {
            Some(n) => rest = n,
            None => break,
        }
    }
    buf.put_u8(b'\n');
}

/// Writes `n` in decimal without a heap allocation.
fn put_decimal(buf: &mut BytesMut, n: u64) {
    buf.put_slice(Decimal::new(n).as_bytes());
}

/// One SSE event as its own buffer.
#[cfg(test)]
pub(crate) fn event(id: Option<u64>, data: &[u8]) -> Bytes {
    let mut buf = BytesMut::new();
    write_event(&mut buf, id, data);
    buf.freeze()
}

/// An event id mcpmux issued, as a client names it in `Last-Event-ID`: GET-stream
/// events are numbered `N` per session; the events of a POST's SSE answer are
/// `p<stream>-<seq>`, where `stream` numbers the POST within the session and `seq`
/// counts its events from 0 (the priming event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastEventId {
    Get(u64),
    Post { stream: u64, seq: u64 },
}

/// Parses a `Last-Event-ID` header value; `None` when it is no id mcpmux issues.
pub(crate) fn parse_last_event_id(value: &str) -> Option<LastEventId> {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('p') {
        let (stream, seq) = rest.split_once('-')?;
        return Some(LastEventId::Post {
            stream: stream.parse().ok()?,
            seq: seq.parse().ok()?,
        });
    }
    value.parse().ok().map(LastEventId::Get)
}

/// One event of a POST's SSE answer, with its resumable id `p<stream>-<seq>`. An empty
/// `data` makes the priming event (SEP-1699: an id the client can resume from before
/// anything else is sent); clients skip events without data.
pub(crate) fn post_event(stream: u64, seq: u64, data: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(data.len() + 32);
    buf.put_slice(b"id: p");
    put_decimal(&mut buf, stream);
    buf.put_u8(b'-');
    put_decimal(&mut buf, seq);
    buf.put_u8(b'\n');
    write_event(&mut buf, None, data);
    buf.freeze()
}

/// Bytes [`write_event`] adds to a one-line event: `id: ` + up to 20 digits + `\n`,
/// `data: `, `\n\n`.
pub(super) const FRAMING: usize = 4 + 20 + 1 + 6 + 2;

/// An SSE response body: every chunk the session actor sent, merged with whatever else
/// is already queued into a single `Bytes` (one write per wake-up: the cost is per system
/// call, see docs/architecture.md, "Performance reference"), and a
/// keep-alive comment after a [`KEEP_ALIVE`] period of silence ([`KeepAlive`]). Ends when the actor drops the
/// sender.
pub(crate) fn sse_body(
    rx: lane::Receiver<Bytes>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures_util::stream::unfold(
        (rx, KeepAlive::default()),
        |(mut rx, mut keep_alive)| async move {
            let first = tokio::select! {
                first = rx.recv() => first?,
                () = keep_alive.due() => Bytes::from_static(KEEP_ALIVE_FRAME),
            };
            keep_alive.wrote();
            Some((Ok(merge_available(first, &mut rx)), (rx, keep_alive)))
        },
    )
}

/// Appends every chunk already queued in `rx` to `first`.
pub(crate) fn merge_available(first: Bytes, rx: &mut lane::Receiver<Bytes>) -> Bytes {
    let Some(second) = rx.try_recv() else {
        return first;
    };
    let mut buf = BytesMut::with_capacity(first.len() + second.len());
    buf.extend_from_slice(&first);
    buf.extend_from_slice(&second);
    while let Some(more) = rx.try_recv() {
        buf.extend_from_slice(&more);
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn frames_event_with_id_and_data() {
        assert_eq!(
            text(&event(Some(7), br#"{"a":1}"#)),
            "id: 7\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(text(&event(None, b"{}")), "data: {}\n\n");
    }

    #[test]
    fn splits_line_breaks_into_data_lines() {
        assert_eq!(
            text(&event(None, b"{\n\"a\":1\r\n}\r")),
            "data: {\ndata: \"a\":1\ndata: }\ndata: \n\n"
        );
    }

    #[test]
    fn decimal_ids_are_written_exactly() {
        for n in [0u64, 7, 10, 99, 12_345, u64::MAX] {
            let mut b = BytesMut::new();
            put_decimal(&mut b, n);
            assert_eq!(text(&b), n.to_string());
        }
    }

    #[test]
    fn last_event_ids_and_post_events() {
        assert_eq!(parse_last_event_id(" 12 "), Some(LastEventId::Get(12)));
        assert_eq!(parse_last_event_id("x"), None);
        assert_eq!(
            parse_last_event_id("p3-7"),
            Some(LastEventId::Post { stream: 3, seq: 7 })
        );
        assert_eq!(parse_last_event_id("p3"), None);
        assert_eq!(parse_last_event_id("p-1"), None);
        assert_eq!(
            &post_event(3, 0, b"")[..],
            b"id: p3-0\ndata: \n\n",
            "the priming event"
        );
        assert_eq!(&post_event(3, 1, b"{}")[..], b"id: p3-1\ndata: {}\n\n");
    }

    #[tokio::test]
    async fn body_merges_all_queued_chunks_into_one() {
        use futures_util::StreamExt;
        let (tx, rx) = lane::channel(8);
        for c in ["a", "b", "c"] {
            tx.send(Bytes::from(c)).await.unwrap();
        }
        drop(tx);
        let chunks: Vec<_> = sse_body(rx).map(|c| c.unwrap()).collect().await;
        assert_eq!(chunks, vec![Bytes::from("abc")]);
    }

    #[tokio::test(start_paused = true)]
    async fn body_sends_keep_alive_when_silent() {
        use futures_util::StreamExt;
        let (tx, rx) = lane::channel::<Bytes>(8);
        let mut body = Box::pin(sse_body(rx));
        let first = body.next().await.unwrap().unwrap();
        assert_eq!(&first[..], KEEP_ALIVE_FRAME);
        drop(tx);
        assert!(body.next().await.is_none());
    }
}
