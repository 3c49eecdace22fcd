//! The properties fuzzed by `fuzz/fuzz_targets/message.rs` and replayed over the
//! corpus by `tests/fuzz_corpus.rs`: for any bytes, the JSON-RPC parsers
//! (`Message::parse`, `Incoming::parse`, `Message::salvage_id`) and the `JsonLines`
//! decoder return instead of panicking, and every message that parses re-serializes
//! with `to_json()` to valid JSON that parses back to the same kind, id and method
//! (and to the same text: serialization is a fixed point).
//!
//! Depth: the envelope parser never builds a tree. Members are kept as `RawValue`,
//! which serde_json validates with an explicit heap stack (`ignore_value`), so no
//! nesting depth can overflow the stack and none is refused there; serde_json's
//! recursion limit (128) applies to the typed views the proxy takes of `params`, which
//! then fail as absent or invalid params.
//!
//! Only depends on crates both the fuzz crate and the main crate's tests have.

use bytes::BytesMut;
use mcpmux::protocol::codec::{Frame, JsonLines};
use mcpmux::protocol::{Incoming, Message};
use tokio_util::codec::Decoder;

/// Line limits the decoder is run with: one that splits most inputs into too-long
/// frames, one that never does.
const LINE_LIMITS: [usize; 2] = [64, 1 << 20];

/// Runs every check on `data`; panics on a violated property.
pub fn check(data: &[u8]) {
    check_envelope(data);
    for max in LINE_LIMITS {
        decode_lines(data, max);
    }
}

/// The parsers on one body (a POST body or one stdio line).
pub fn check_envelope(data: &[u8]) {
    if let Ok(m) = Message::parse(data) {
        round_trip(&m);
    }
    if let Some(id) = Message::salvage_id(data) {
        // A salvaged id is itself JSON (a string or a number). `RawValue`, not `Value`:
        // JSON's grammar allows a lone surrogate escape such as "\ud800", which the
        // proxy carries verbatim but `Value` refuses.
        serde_json::from_str::<Box<serde_json::value::RawValue>>(id.as_json())
            .expect("salvaged id is JSON");
    }
    match Incoming::parse(data) {
        Ok(Incoming::Single(Ok(m))) => round_trip(&m),
        Ok(Incoming::Batch(items)) => items.iter().flatten().for_each(round_trip),
        Ok(Incoming::Single(Err(_))) | Err(_) => {}
    }
}

/// The decoder over `data` as a byte stream, then at EOF; each line goes through the
/// parsers. Frames are bounded by `max` and the decoder always makes progress.
pub fn decode_lines(data: &[u8], max: usize) {
    let mut codec = JsonLines::new(max);
    let mut buf = BytesMut::from(data);
    let mut frames = 0usize;
    for eof in [false, true] {
        loop {
            let next = if eof {
                codec.decode_eof(&mut buf)
            } else {
                codec.decode(&mut buf)
            };
            match next {
                Ok(Some(Frame::Line(line))) => {
                    assert!(line.len() <= max, "a line over the limit was returned");
                    check_envelope(line.as_bytes());
                    // A stdio peer's line, kept as it came while unchanged.
                    if let Ok(m) = Message::parse_line(line.clone()) {
                        round_trip(&m);
                        assert_eq!(
                            &m.to_bytes()[..],
                            line.trim().as_bytes(),
                            "an unchanged line goes back out as it came"
                        );
                    }
                }
                // Both are dropped and reading goes on with the next line.
                Ok(Some(Frame::TooLong | Frame::NotUtf8)) => {}
                Ok(None) | Err(_) => break,
            }
            frames += 1;
            assert!(
                frames <= data.len() + 2,
                "the decoder stopped making progress"
            );
        }
    }
}

fn round_trip(m: &Message) {
    let text = m.to_json();
    let shown = excerpt(&text);
    // Valid JSON at any depth: `RawValue` validates without recursing (serde_json's
    // `Value` would refuse nesting past 128, which members may legally carry).
    serde_json::from_str::<Box<serde_json::value::RawValue>>(&text)
        .unwrap_or_else(|e| panic!("to_json gave invalid JSON ({e}): {shown}"));
    let again = Message::parse(text.as_bytes())
        .unwrap_or_else(|e| panic!("to_json output does not parse back ({e}): {shown}"));
    assert_eq!(again.kind(), m.kind(), "{shown}");
    assert_eq!(again.id(), m.id(), "{shown}");
    assert_eq!(again.method(), m.method(), "{shown}");
    assert!(
        again.to_json() == text,
        "serialization is not a fixed point: {shown}"
    );
}

/// The start of a possibly huge text, for panic messages.
pub fn excerpt(text: &str) -> String {
    let end = text.char_indices().nth(200).map_or(text.len(), |(i, _)| i);
    format!("{}… ({} bytes)", &text[..end], text.len())
}
