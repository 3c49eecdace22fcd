//! Envelope parsing and rewriting, without I/O.

use super::*;
use crate::protocol::{nests_deeper_than, MAX_NESTING};

#[test]
fn nesting_depth_is_counted_outside_strings() {
    let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    assert!(
        !nests_deeper_than(&deep(127), MAX_NESTING),
        "128 levels with the object"
    );
    assert!(nests_deeper_than(&deep(128), MAX_NESTING));
    let in_string = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
    assert!(!nests_deeper_than(&in_string, 2));
}

#[test]
fn request_keeps_unknown_members_and_order() {
    let text =
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":[1,2]},"x-extra":{"k":1}}"#;
    let m = Message::parse(text.as_bytes()).unwrap();
    assert_eq!(m.kind(), Kind::Request);
    assert_eq!(m.id().unwrap().as_json(), "7");
    assert_eq!(m.method(), Some("tools/call"));
    assert_eq!(m.to_json(), text);
}

#[test]
fn member_names_that_need_escapes_are_escaped_again() {
    let text = r#"{"jsonrpc":"2.0","method":"m","a\"b":1,"c\\d":2,"e\nf":3,"é":4}"#;
    let m = Message::parse(text.as_bytes()).unwrap();
    assert_eq!(m.to_json(), text);
}

#[test]
fn a_line_is_given_back_as_it_came_until_a_member_changes() {
    let line = r#" {"jsonrpc": "2.0", "method":"n", "params":{"b":1, "a":2}} "#;
    let mut m = Message::parse_line(line.into()).unwrap();
    assert_eq!(&m.to_bytes()[..], line.trim().as_bytes());
    m.set_id(&RawId::from_u64(1));
    assert_eq!(
        &m.to_bytes()[..],
        br#"{"jsonrpc":"2.0","method":"n","params":{"b":1, "a":2},"id":1}"#
    );
}

#[test]
fn set_id_rewrites_only_the_id() {
    let text = r#"{"jsonrpc":"2.0","id":"abc","method":"m","params":{"id":1}}"#;
    let mut m = Message::parse(text.as_bytes()).unwrap();
    m.set_id(&RawId::from_u64(42));
    assert_eq!(
        m.to_json(),
        r#"{"jsonrpc":"2.0","id":42,"method":"m","params":{"id":1}}"#
    );
    assert_eq!(m.id().unwrap().as_u64(), Some(42));
}

#[test]
fn classifies_kinds() {
    let n = Message::parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
    assert_eq!(n.kind(), Kind::Notification);
    let r = Message::parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
    assert_eq!(r.kind(), Kind::Response);
    let e =
        Message::parse(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#).unwrap();
    assert!(e.is_error());
}

#[test]
fn rejects_bad_shapes() {
    for (bad, want) in [
        (
            &br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#[..],
            code::INVALID_REQUEST,
        ),
        (br#"{"id":1,"method":"m"}"#, code::INVALID_REQUEST),
        (
            br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            code::INVALID_REQUEST,
        ),
        (
            br#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
            code::INVALID_REQUEST,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            code::INVALID_REQUEST,
        ),
        (br#"{"jsonrpc":"2.0","id":1}"#, code::INVALID_REQUEST),
        (
            br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
            code::INVALID_REQUEST,
        ),
        (
            br#"{"jsonrpc":"2.0","method":"m","params":3}"#,
            code::INVALID_REQUEST,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            code::INVALID_REQUEST,
        ),
        (br#"[1,2]"#, code::INVALID_REQUEST),
        (br#""str""#, code::INVALID_REQUEST),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"m""#,
            code::PARSE_ERROR,
        ),
        (b"\xff\xfe", code::PARSE_ERROR),
        (b"", code::PARSE_ERROR),
    ] {
        let err = Message::parse(bad).unwrap_err();
        assert_eq!(err.code(), want, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn batch_parses_each_member() {
    let b = Incoming::parse(br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"x":1}]"#).unwrap();
    match b {
        Incoming::Batch(items) => {
            assert!(items[0].is_ok());
            assert!(items[1].is_err());
        }
        _ => panic!("expected a batch"),
    }
    assert!(Incoming::parse(b"[]").is_err());
}

#[test]
fn salvages_the_id_of_an_invalid_message() {
    let bad = br#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#;
    assert!(Message::parse(bad).is_err());
    assert_eq!(Message::salvage_id(bad), Some(RawId::from_u64(5)));
    assert_eq!(Message::salvage_id(b"{oops"), None);
}

#[test]
fn builders_produce_valid_messages() {
    let id = RawId::from_u64(3);
    let r = Message::error_response(Some(&id), code::INVALID_PARAMS, "bad", None);
    assert_eq!(
        r.to_json(),
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}"#
    );
    let r = Message::error_response(None, code::PARSE_ERROR, "bad", None);
    assert_eq!(
        r.to_json(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#
    );
    let q = Message::request(&id, "ping", None);
    assert_eq!(q.to_json(), r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
}

/// A duplicate member is refused however many members come before it; an object of
/// many distinct members (a hostile one: every POST body is parsed before anything
/// else) is checked by a set, not by a scan per member.
#[test]
fn duplicates_are_found_among_many_members() {
    let wide = |dup: bool| {
        let mut body = String::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping""#);
        for i in 0..100_000 {
            body.push_str(&format!(",\"m{i}\":0"));
        }
        if dup {
            body.push_str(",\"m99\":1");
        }
        body.push('}');
        body
    };
    let m = Message::parse(wide(false).as_bytes()).expect("distinct members");
    assert_eq!(m.method(), Some("ping"));
    assert!(matches!(
        Message::parse(wide(true).as_bytes()),
        Err(ParseError::Invalid(_))
    ));
    let early = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#;
    assert!(Message::parse(early.as_bytes()).is_err());
}
