//! Newline-delimited JSON framing for stdio, bounded.
//!
//! A line longer than the limit is an item of its own ([`Frame::TooLong`]; the rest of
//! that line is discarded as it comes, never buffered without bound), as is a line that
//! is not UTF-8, and reading continues with the next line. The rules are those of
//! tokio-util's `LinesCodec` (a `\r` before the newline is dropped; a last line without
//! a newline counts at the end of input), but a line is handed up as one shared text,
//! copied once out of the read buffer: [`crate::protocol::Message::parse_line`] keeps
//! that same text, so a stdio message costs one copy of its bytes. The caller parses
//! and applies its policy.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// One decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line (without the newline), possibly empty.
    Line(Arc<str>),
    /// A line exceeded the maximum length and was discarded.
    TooLong,
    /// A line that is not UTF-8 was discarded (JSON text is UTF-8).
    NotUtf8,
}

/// Line codec with a maximum line length.
#[derive(Debug)]
pub struct JsonLines {
    max: usize,
    /// Where the search for the next newline goes on: the bytes before it hold none.
    searched: usize,
    /// Inside a line over `max`, dropping bytes up to its newline.
    discarding: bool,
}

impl JsonLines {
    pub fn new(max_line_bytes: usize) -> Self {
        JsonLines {
            max: max_line_bytes,
            searched: 0,
            discarding: false,
        }
    }
}

impl Decoder for JsonLines {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        loop {
            // A line of `max` bytes and its newline is the most one search looks at.
            let read_to = self.max.saturating_add(1).min(src.len());
            let newline = memchr::memchr(b'\n', &src[self.searched..read_to]);
            match (self.discarding, newline) {
                (true, Some(at)) => {
                    src.advance(self.searched + at + 1);
                    self.discarding = false;
                    self.searched = 0;
                }
                (true, None) => {
                    src.advance(read_to);
                    self.searched = 0;
                    if src.is_empty() {
                        return Ok(None);
                    }
                }
                (false, Some(at)) => {
                    let end = self.searched + at;
                    self.searched = 0;
                    let frame = line_frame(&src[..end]);
                    src.advance(end + 1);
                    return Ok(Some(frame));
                }
                (false, None) if src.len() > self.max => {
                    self.discarding = true;
                    return Ok(Some(Frame::TooLong));
                }
                (false, None) => {
                    self.searched = read_to;
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        self.searched = 0;
        // No newline at the end: what is left is the last line, if anything.
        if src.is_empty() || &src[..] == b"\r" {
            return Ok(None);
        }
        let frame = line_frame(&src[..]);
        src.clear();
        Ok(Some(frame))
    }
}

/// The frame of one line's bytes (without its newline).
fn line_frame(line: &[u8]) -> Frame {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match std::str::from_utf8(line) {
        Ok(text) => Frame::Line(text.into()),
        Err(_) => Frame::NotUtf8,
    }
}

/// Encodes already-serialized JSON text as one line. Compact JSON holds no line break,
/// but a message may keep a server's own formatting inside its members (an HTTP
/// upstream that pretty-prints): its raw line breaks become spaces. That is safe in
/// JSON, where a raw CR or LF can only be whitespace between tokens (never inside a
/// string), so the message means the same on one line.
impl Encoder<Bytes> for JsonLines {
    type Error = std::io::Error;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), Self::Error> {
        let bytes = &item[..];
        dst.reserve(bytes.len() + 1);
        let start = dst.len();
        dst.put_slice(bytes);
        if memchr::memchr2(b'\n', b'\r', bytes).is_some() {
            for b in &mut dst[start..] {
                if matches!(*b, b'\n' | b'\r') {
                    *b = b' ';
                }
            }
        }
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message that kept a server's pretty-printing is written as one line that
    /// means the same.
    #[test]
    fn line_breaks_between_tokens_become_spaces() {
        let pretty =
            "{\r\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {\"text\": \"a\\nb\"}\n}";
        let mut c = JsonLines::new(1 << 10);
        let mut out = BytesMut::new();
        c.encode(Bytes::from(pretty), &mut out).unwrap();
        let line = std::str::from_utf8(&out).unwrap();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
        let back: serde_json::Value = serde_json::from_str(line).unwrap();
        let want: serde_json::Value = serde_json::from_str(pretty).unwrap();
        assert_eq!(back, want);
    }

    fn decode_all(max: usize, input: &[u8]) -> Vec<Frame> {
        let mut c = JsonLines::new(max);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = c.decode(&mut buf).unwrap() {
            out.push(f);
        }
        while let Some(f) = c.decode_eof(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn splits_lines_and_strips_cr() {
        let frames = decode_all(100, b"{\"a\":1}\n{\"b\":2}\r\n");
        assert_eq!(
            frames,
            vec![
                Frame::Line("{\"a\":1}".into()),
                Frame::Line("{\"b\":2}".into())
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported_and_the_next_line_survives() {
        let frames = decode_all(100, b"{\"a\":\"\xff\xfe\"}\n{\"b\":2}\n");
        assert_eq!(
            frames,
            vec![Frame::NotUtf8, Frame::Line("{\"b\":2}".into())]
        );
    }

    /// Through `FramedRead`, which ends the stream at the first error item.
    #[tokio::test]
    async fn a_stream_goes_on_after_a_line_that_is_not_utf8() {
        use futures_util::StreamExt;
        let input: &[u8] = b"\xff\n{\"b\":2}\n";
        let frames: Vec<Frame> = tokio_util::codec::FramedRead::new(input, JsonLines::new(100))
            .map(|f| f.expect("no error item"))
            .collect()
            .await;
        assert_eq!(
            frames,
            vec![Frame::NotUtf8, Frame::Line("{\"b\":2}".into())]
        );
    }

    #[test]
    fn over_long_line_is_reported_and_next_line_survives() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        let frames = decode_all(20, &input);
        assert_eq!(
            frames,
            vec![Frame::TooLong, Frame::Line("{\"ok\":true}".into())]
        );
    }

    #[test]
    fn a_line_that_arrives_in_pieces_is_one_line() {
        let mut c = JsonLines::new(100);
        let mut buf = BytesMut::from(&b"{\"a\":"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"1}\r");
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"\n{\"b\"");
        assert_eq!(
            c.decode(&mut buf).unwrap(),
            Some(Frame::Line("{\"a\":1}".into()))
        );
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert_eq!(&buf[..], b"{\"b\"");
    }

    #[test]
    fn an_over_long_line_in_pieces_is_reported_once_and_dropped_as_it_comes() {
        let mut c = JsonLines::new(8);
        let mut buf = BytesMut::from(&b"0123456789"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), Some(Frame::TooLong));
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        // What was read of it is gone: nothing of an over-long line is kept.
        assert!(buf.is_empty());
        buf.extend_from_slice(b"abcdefghijklmnop");
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty());
        buf.extend_from_slice(b"qr\n{}\n");
        assert_eq!(c.decode(&mut buf).unwrap(), Some(Frame::Line("{}".into())));
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_kept() {
        assert_eq!(
            decode_all(8, b"12345678\n123456789\n{}\n"),
            vec![
                Frame::Line("12345678".into()),
                Frame::TooLong,
                Frame::Line("{}".into())
            ]
        );
    }

    #[test]
    fn the_last_line_without_a_newline_counts_at_the_end() {
        assert_eq!(
            decode_all(100, b"{}\n{\"last\":1}"),
            vec![Frame::Line("{}".into()), Frame::Line("{\"last\":1}".into())]
        );
        assert_eq!(decode_all(100, b"{}\n\r"), vec![Frame::Line("{}".into())]);
        assert_eq!(decode_all(100, b"\n"), vec![Frame::Line("".into())]);
    }

    #[test]
    fn encodes_one_line() {
        let mut c = JsonLines::new(10);
        let mut dst = BytesMut::new();
        c.encode(Bytes::from_static(b"{}"), &mut dst).unwrap();
        assert_eq!(&dst[..], b"{}\n");
    }
}
