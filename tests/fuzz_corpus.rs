//! Replays the fuzz corpus (`fuzz/corpus/message/`) through the fuzz target's checks
//! on stable, so CI guards what the fuzzer found: the JSON-RPC parsers and the line
//! codec never panic, and parsed messages round-trip through `to_json()`. Also pins
//! the answers to hostile inputs: nesting 100,000 deep never overflows the stack (a
//! deep message is refused; deep `params` are carried raw, and typed views of them
//! hit serde_json's recursion limit of 128 as an error), and duplicate members, bad
//! ids and invalid UTF-8 are refused with the right error class.

use crate::common;

use common::fuzz_check::{check, decode_lines, excerpt};
use mcpmux::protocol::{Incoming, Kind, Message, ParseError};
use serde_json::Value;

fn corpus_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/message")
}

#[test]
fn every_corpus_input_passes_the_fuzz_checks() {
    let mut n = 0;
    for entry in std::fs::read_dir(corpus_dir()).expect("fuzz/corpus/message exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "fuzz check failed on {}", path.display());
        n += 1;
    }
    assert!(n >= 40, "corpus has only {n} inputs");
}

fn is_json_error(r: &Result<Message, ParseError>) -> bool {
    matches!(r, Err(ParseError::Json(_)))
}

#[test]
fn nesting_far_past_the_recursion_limit_never_overflows_the_stack() {
    const DEPTH: usize = 100_000;
    // serde_json's own limit, which every typed view of a member is subject to.
    let nested = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
    assert!(serde_json::from_str::<Value>(&nested(127)).is_ok());
    let err = serde_json::from_str::<Value>(&nested(128)).unwrap_err();
    assert!(
        err.to_string().contains("recursion limit exceeded"),
        "{err}"
    );

    // As a whole message: refused (not an object, or not JSON-RPC), never a crash.
    let arrays = "[".repeat(DEPTH);
    let closed = nested(DEPTH);
    let objects = format!("{}1{}", "{\"a\":".repeat(DEPTH), "}".repeat(DEPTH));
    for text in [&arrays, &closed, &objects] {
        let r = Message::parse(text.as_bytes());
        assert!(r.is_err(), "{}", excerpt(text));
        assert!(Message::salvage_id(text.as_bytes()).is_none());
        assert!(!matches!(
            Incoming::parse(text.as_bytes()),
            Ok(Incoming::Single(Ok(_)))
        ));
        check(text.as_bytes());
    }

    // As `params` of a request: carried raw and forwarded verbatim (the proxy is
    // transparent to what it does not route on), while the typed view the hub would
    // take of it fails with serde_json's recursion limit instead of recursing.
    for inner in [&closed, &objects] {
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{inner}}}"#);
        let parsed = Message::parse(msg.as_bytes()).expect("deep params are carried raw");
        assert_eq!(parsed.kind(), Kind::Request);
        assert!(parsed.to_json() == msg);
        let typed = serde_json::from_str::<Value>(parsed.params().unwrap().get());
        assert!(typed.unwrap_err().to_string().contains("recursion limit"));
        assert_eq!(
            Message::salvage_id(msg.as_bytes()).map(|i| i.as_json().to_owned()),
            Some("1".to_owned())
        );
        check(msg.as_bytes());
        // As a stdio line stream too.
        decode_lines(format!("{msg}\n{msg}").as_bytes(), 1 << 20);
    }
}

#[test]
fn hostile_envelopes_get_the_right_error_class() {
    let invalid = [
        &br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#[..],
        br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":5}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"x","params":5}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":""}}"#,
        br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        br#"[1,2]"#,
        br#""text""#,
    ];
    for bytes in invalid {
        let r = Message::parse(bytes);
        assert!(
            matches!(r, Err(ParseError::Invalid(_))),
            "{}: {:?}",
            String::from_utf8_lossy(bytes),
            r.map(|m| m.kind())
        );
    }
    let not_json = [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\x00\"method\":\"ping\"}",
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/ca"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#,
        b"",
    ];
    for bytes in not_json {
        let r = Message::parse(bytes);
        assert!(
            is_json_error(&r),
            "{}: {:?}",
            String::from_utf8_lossy(bytes),
            r.map(|m| m.kind())
        );
    }
    // Escapes in member names are decoded: `\u0069d` is `id`.
    let m = Message::parse(br#"{"jsonrpc":"2.0","\u0069d":7,"method":"ping"}"#).unwrap();
    assert_eq!(m.id().map(|i| i.as_json()), Some("7"));
    // An empty batch is invalid, not a parse error.
    assert!(matches!(
        Incoming::parse(b"[]"),
        Err(ParseError::Invalid(_))
    ));
}
