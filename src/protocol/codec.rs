//! Newline-delimited JSON framing for stdio, bounded.
//!
//! Wraps [`LinesCodec::new_with_max_length`]: a line longer than the limit is an error
//! item (the rest of that line is discarded by the codec, never buffered without
//! bound), as is a line that is not UTF-8, and reading continues with the next line. Lines are handed up as text; the
//! caller parses them with [`crate::protocol::Message::parse`] and applies its policy.

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder, LinesCodec, LinesCodecError};

/// One decoded frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line (without the newline), possibly empty.
    Line(String),
    /// A line exceeded the maximum length and was discarded.
    TooLong,
    /// A line that is not UTF-8 was discarded (JSON text is UTF-8).
    NotUtf8,
}

/// Line codec with a maximum line length.
#[derive(Debug)]
pub struct JsonLines {
    inner: LinesCodec,
}

impl JsonLines {
    pub fn new(max_line_bytes: usize) -> Self {
        JsonLines {
            inner: LinesCodec::new_with_max_length(max_line_bytes),
        }
    }
}

impl Decoder for JsonLines {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        map(self.inner.decode(src))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        map(self.inner.decode_eof(src))
    }
}

fn map(r: Result<Option<String>, LinesCodecError>) -> Result<Option<Frame>, std::io::Error> {
    match r {
        Ok(Some(line)) => Ok(Some(Frame::Line(line))),
        Ok(None) => Ok(None),
        Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(Frame::TooLong)),
        // The codec reports a line that is not UTF-8 as `InvalidData`, after taking the
        // line out of the buffer: an item of its own, so that reading goes on (an
        // error would end the stream).
        Err(LinesCodecError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            Ok(Some(Frame::NotUtf8))
        }
        Err(LinesCodecError::Io(e)) => Err(e),
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
    fn encodes_one_line() {
        let mut c = JsonLines::new(10);
        let mut dst = BytesMut::new();
        c.encode(Bytes::from_static(b"{}"), &mut dst).unwrap();
        assert_eq!(&dst[..], b"{}\n");
    }
}
