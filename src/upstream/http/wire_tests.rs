//! How a JSON body splits into texts, and the SSE size guard.

use super::EventSizeGuard;

#[test]
fn event_size_guard_resets_at_blank_lines() {
    let mut g = EventSizeGuard::new(10);
    assert!(g.check(b"data: 1234\n\n").is_ok(), "exactly the limit");
    assert!(g.check(b"data: 12345\n\n").is_err(), "one byte over");
    let mut g = EventSizeGuard::new(20);
    for _ in 0..100 {
        assert!(g.check(b"data: 12345\r\n\r\n").is_ok());
    }
    assert!(g.check(b"data: 12345\ndata: 1234567890\n").is_err());
}

#[test]
fn json_texts_split_at_value_boundaries() {
    let body = b" {\"a\":\n 1}\n{\"b\":[2,\n3]}\n\n[{\"c\":4}] {\"d\"";
    let (t, used) = super::next_text(body).unwrap().unwrap();
    assert_eq!(t, b"{\"a\":\n 1}");
    let rest = &body[used..];
    let (t, used2) = super::next_text(rest).unwrap().unwrap();
    assert_eq!(t, b"{\"b\":[2,\n3]}");
    let rest = &rest[used2..];
    let (t, used3) = super::next_text(rest).unwrap().unwrap();
    assert_eq!(t, b"[{\"c\":4}]");
    // An unfinished text waits for more bytes; garbage is an error.
    assert!(super::next_text(&rest[used3..]).unwrap().is_none());
    assert!(super::next_text(b"  \n").unwrap().is_none());
    assert!(super::next_text(b"{\"a\" 1}").is_err());
}

/// What each call of [`super::JsonTexts::next`] gave, message texts or the error.
async fn texts(body: super::super::client::Body) -> Vec<Result<Vec<String>, String>> {
    let mut texts = super::JsonTexts::new(hyper::Response::new(body), 1 << 20, "up");
    let mut out = Vec::new();
    while let Some(msgs) = texts.next().await {
        let text = |m: super::Message| String::from_utf8(m.to_bytes().to_vec()).unwrap();
        out.push(msgs.map(|ms| ms.into_iter().map(text).collect()));
    }
    out
}

fn whole(text: &'static str) -> super::super::client::Body {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes::Bytes::from_static(text.as_bytes()))
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn in_chunks(chunks: &[&'static str]) -> super::super::client::Body {
    use http_body_util::BodyExt;
    let frames = chunks.iter().map(|c| {
        Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
            c.as_bytes(),
        )))
    });
    http_body_util::StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
        .boxed_unsync()
}

#[tokio::test]
async fn a_body_read_whole_or_in_chunks_gives_the_same_texts() {
    let a = r#"{"jsonrpc":"2.0","method":"a"}"#;
    let b = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let one = vec![Ok(vec![a.to_owned()])];
    assert_eq!(
        texts(whole(" {\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n")).await,
        one
    );
    assert_eq!(
        texts(in_chunks(&[r#"{"jsonrpc":"2.0","#, r#""method":"a"}"#])).await,
        one
    );
    // Several texts in one complete body, and a batch: each text in order.
    let two = vec![Ok(vec![a.to_owned()]), Ok(vec![b.to_owned()])];
    assert_eq!(
        texts(whole(
            r#"{"jsonrpc":"2.0","method":"a"}
{"jsonrpc":"2.0","id":1,"result":{}}"#
        ))
        .await,
        two
    );
    assert_eq!(texts(in_chunks(&[a, "\n", b])).await, two);
    let batch = vec![Ok(vec![a.to_owned(), b.to_owned()])];
    assert_eq!(
        texts(whole(
            r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":{}}]"#
        ))
        .await,
        batch
    );
    // Nothing, an unfinished text, no message, garbage: as the scan gives them.
    assert!(texts(whole(" \n")).await.is_empty());
    for body in [
        r#"{"jsonrpc":"2.0""#,
        r#"{"a":1}"#,
        r#"{"jsonrpc" 1}"#,
        r#"{"a":1} x"#,
        r#"[] {"jsonrpc":"2.0","method":"a"}"#,
    ] {
        assert_eq!(texts(whole(body)).await, texts(in_chunks(&[body])).await);
    }
    assert!(texts(whole(r#"{"jsonrpc" 1}"#)).await[0].is_err());
}
