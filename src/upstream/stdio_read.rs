//! A stdio server's stdout as messages: the next one, waiting for it
//! ([`read_message`]), and those it already wrote behind it, without waiting
//! ([`read_ready`]), so that a burst reaches the hub as a few batches rather than one
//! send per line (docs/architecture.md, "Fan-out").
//!
//! Blank, unparseable, overlong and non-UTF-8 lines are logged and dropped here; the
//! reading never stops for them. This module never writes to the server and never
//! holds a line back: a batch is only what had already been read.

use futures_util::{FutureExt, Stream, StreamExt};

use crate::protocol::codec::Frame;
use crate::protocol::Message;

/// Most messages in one batch: the one waited for and those [`read_ready`] found
/// behind it. A batch is handled across the hub's turns, so this bounds only what one
/// send to the hub holds.
pub(super) const READ_BATCH: usize = 64;

/// What one read of a server's stdout takes at most: what a Linux pipe holds, so a
/// burst's backlog is read in one system call and batched whole.
pub(super) const READ_BUFFER: usize = 64 * 1024;

/// The next message the server writes, skipping blank, unparseable and overlong
/// lines (logged). Cancel-safe: a line is consumed only when it is returned or
/// dropped.
///
/// # Errors
/// Reading failed or the server closed its stdout (`during` names what was going on).
pub(super) async fn read_message<S>(
    reader: &mut S,
    upstream: &str,
    during: &str,
) -> Result<Message, String>
where
    S: Stream<Item = std::io::Result<Frame>> + Unpin,
{
    loop {
        if let Some(msg) = message_of(reader.next().await, upstream, during)? {
            return Ok(msg);
        }
    }
}

/// Appends to `batch` the messages the server already wrote, until `batch` holds `max`,
/// without waiting for more. `Some` (why) when reading ended meanwhile, after the
/// messages read before the end.
pub(super) fn read_ready<S>(
    reader: &mut S,
    upstream: &str,
    batch: &mut Vec<Message>,
    max: usize,
) -> Option<String>
where
    S: Stream<Item = std::io::Result<Frame>> + Unpin,
{
    while batch.len() < max {
        // `None`: the next line is not there yet. The reader is polled again, with
        // the task's own waker, by the next `read_message`.
        let frame = reader.next().now_or_never()?;
        match message_of(frame, upstream, "") {
            Ok(Some(msg)) => batch.push(msg),
            Ok(None) => {}
            Err(e) => return Some(e),
        }
    }
    None
}

/// What one frame of the server's stdout is: a message, nothing (a line dropped and
/// logged), or the end of reading.
fn message_of(
    frame: Option<std::io::Result<Frame>>,
    upstream: &str,
    during: &str,
) -> Result<Option<Message>, String> {
    match frame {
        Some(Ok(Frame::Line(line))) => Ok(parse_line(upstream, line)),
        Some(Ok(Frame::TooLong)) => {
            tracing::warn!(%upstream, "upstream line over limits.max_message_bytes dropped");
            Ok(None)
        }
        Some(Ok(Frame::NotUtf8)) => {
            tracing::warn!(%upstream, "upstream line that is not UTF-8 dropped");
            Ok(None)
        }
        Some(Err(e)) => Err(format!("reading from the server failed: {e}")),
        None => Err(format!("the server closed its stdout{during}")),
    }
}

fn parse_line(upstream: &str, line: std::sync::Arc<str>) -> Option<Message> {
    if line.trim().is_empty() {
        return None;
    }
    match Message::parse_line(line) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(%upstream, error = %e, "unparseable line from upstream dropped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;

    fn line(n: u32) -> std::io::Result<Frame> {
        Ok(Frame::Line(
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#)
                .into(),
        ))
    }

    fn n_of(m: &Message) -> u64 {
        let p: serde_json::Value = serde_json::from_str(m.params().unwrap().get()).unwrap();
        p["n"].as_u64().unwrap()
    }

    /// Frames that are all there, then a reader that waits for more.
    fn ready_then_waiting(
        frames: Vec<std::io::Result<Frame>>,
    ) -> impl Stream<Item = std::io::Result<Frame>> + Unpin {
        stream::iter(frames).chain(stream::pending())
    }

    #[test]
    fn takes_what_was_read_and_stops_where_it_would_wait() {
        let mut r = ready_then_waiting(vec![line(2), line(3), line(4)]);
        let mut batch = vec![];
        assert_eq!(read_ready(&mut r, "up", &mut batch, READ_BATCH), None);
        assert_eq!(batch.iter().map(n_of).collect::<Vec<_>>(), [2, 3, 4]);
        // Nothing more is there: the next call adds nothing and does not block.
        assert_eq!(read_ready(&mut r, "up", &mut batch, READ_BATCH), None);
        assert_eq!(batch.len(), 3);
    }

    #[test]
    fn stops_at_the_bound_and_leaves_the_rest_for_the_next_batch() {
        let mut r = ready_then_waiting((1..=5).map(line).collect());
        let mut batch = vec![];
        assert_eq!(read_ready(&mut r, "up", &mut batch, 2), None);
        assert_eq!(batch.iter().map(n_of).collect::<Vec<_>>(), [1, 2]);
        let mut next = vec![];
        assert_eq!(read_ready(&mut r, "up", &mut next, 10), None);
        assert_eq!(next.iter().map(n_of).collect::<Vec<_>>(), [3, 4, 5]);
    }

    #[test]
    fn drops_blank_broken_and_overlong_lines_and_goes_on() {
        let mut r = ready_then_waiting(vec![
            line(1),
            Ok(Frame::Line("   ".into())),
            Ok(Frame::Line("{not json".into())),
            Ok(Frame::TooLong),
            Ok(Frame::NotUtf8),
            line(2),
        ]);
        let mut batch = vec![];
        assert_eq!(read_ready(&mut r, "up", &mut batch, READ_BATCH), None);
        assert_eq!(batch.iter().map(n_of).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn keeps_what_came_before_the_end_and_says_why_it_ended() {
        let mut r = stream::iter(vec![line(1), line(2)]);
        let mut batch = vec![];
        let end = read_ready(&mut r, "up", &mut batch, READ_BATCH);
        assert_eq!(end.as_deref(), Some("the server closed its stdout"));
        assert_eq!(batch.len(), 2);

        let broken = std::io::Error::other("pipe broke");
        let mut r = stream::iter(vec![line(1), Err(broken), line(2)]);
        let mut batch = vec![];
        let end = read_ready(&mut r, "up", &mut batch, READ_BATCH).unwrap();
        assert!(end.contains("pipe broke"), "{end}");
        assert_eq!(batch.iter().map(n_of).collect::<Vec<_>>(), [1]);
    }

    #[tokio::test]
    async fn the_next_message_skips_what_is_dropped_and_waits_for_one() {
        let mut r = stream::iter(vec![Ok(Frame::TooLong), line(7)]);
        assert_eq!(n_of(&read_message(&mut r, "up", "").await.unwrap()), 7);
        let end = read_message(&mut r, "up", " during initialize").await;
        assert_eq!(
            end.unwrap_err(),
            "the server closed its stdout during initialize"
        );
    }
}
