//! The accept loop: the connection bound makes new connections wait (never refused),
//! the header read timeout frees slots held by half-sent headers, and shutdown is not
//! held up by them for longer than that timeout.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A request header cut off before its blank line.
const HALF_HEADER: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n";

fn addr(s: &Server) -> String {
    s.url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

async fn half_open(s: &Server) -> TcpStream {
    let mut tcp = TcpStream::connect(addr(s)).await.unwrap();
    tcp.write_all(HALF_HEADER).await.unwrap();
    tcp
}

/// A complete `initialize` request on a fresh connection.
async fn full_request(s: &Server) -> TcpStream {
    let body = rpc(0, "initialize", json!({"protocolVersion": "2025-06-18"}));
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut tcp = TcpStream::connect(addr(s)).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    tcp
}

/// Reads until the peer closes the connection (EOF or reset), within [`WAIT`].
async fn until_closed(tcp: &mut TcpStream) {
    let mut buf = [0u8; 256];
    tokio::time::timeout(WAIT, async {
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    })
    .await
    .expect("the server closed the connection in time");
}

#[tokio::test]
async fn at_the_bound_a_new_connection_waits_and_is_served_when_a_slot_frees() {
    let s = start(HttpSettings {
        max_connections: 1,
        header_read_timeout: Duration::from_secs(600),
        ..settings()
    })
    .await;
    let holder = half_open(&s).await;
    let mut waiting = full_request(&s).await;
    // Neither answered nor refused while the one slot is held: the connection waits in
    // the listen backlog. (Asserting an absence needs a bound; a refusal would show
    // as EOF or a reset at once.)
    let mut first = [0u8; 12];
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut first)).await;
    assert!(early.is_err(), "served or closed at the bound: {early:?}");
    drop(holder);
    tokio::time::timeout(WAIT, waiting.read_exact(&mut first))
        .await
        .expect("served once the slot is free")
        .unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
}

#[tokio::test]
async fn the_header_timeout_closes_a_half_sent_header_and_frees_its_slot() {
    let s = start(HttpSettings {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(200),
        ..settings()
    })
    .await;
    let mut stalled = half_open(&s).await;
    // The only slot is held until the timeout closes the stalled connection.
    s.initialize().await;
    until_closed(&mut stalled).await;
}

#[tokio::test]
async fn shutdown_is_held_up_by_a_half_sent_header_only_until_its_timeout() {
    let s = start(HttpSettings {
        header_read_timeout: Duration::from_millis(200),
        ..settings()
    })
    .await;
    let mut stalled = half_open(&s).await;
    // And an idle keep-alive connection, which shutdown closes at once.
    s.initialize().await;
    s.shutdown.cancel();
    until_closed(&mut stalled).await;
    let served = tokio::time::timeout(WAIT, s.task).await;
    assert!(served.expect("serve_http returned").unwrap().is_ok());
}
