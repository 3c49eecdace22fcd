//! The accept loop: the connection bound makes new connections wait (never refused),
//! the header read timeout frees slots held by half-sent headers and closes a
//! kept-alive connection idle for that long (each request starting its own deadline),
//! and shutdown is not held up by them for longer than that timeout.

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
    let mut tcp = TcpStream::connect(addr(s)).await.unwrap();
    send_initialize(&mut tcp).await;
    tcp
}

/// Writes a complete `initialize` request on `tcp`.
async fn send_initialize(tcp: &mut TcpStream) {
    let body = rpc(0, "initialize", json!({"protocolVersion": "2025-06-18"}));
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
}

/// Reads one whole response with a `Content-Length` from `tcp`, within [`WAIT`]; its
/// status line.
async fn read_response(tcp: &mut TcpStream) -> String {
    tokio::time::timeout(WAIT, async {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = tcp.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before a whole response: {got:?}");
            got.extend_from_slice(&buf[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .expect("a Content-Length")
                .trim()
                .parse()
                .unwrap();
            if got.len() >= end + 4 + length {
                return head.lines().next().unwrap_or_default().to_owned();
            }
        }
    })
    .await
    .expect("a whole response in time")
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

#[tokio::test]
async fn each_request_on_a_kept_alive_connection_starts_its_own_head_deadline() {
    let timeout = Duration::from_millis(1500);
    let s = start(HttpSettings {
        header_read_timeout: timeout,
        ..settings()
    })
    .await;
    let mut tcp = full_request(&s).await;
    assert_eq!(read_response(&mut tcp).await, "http/1.1 200 ok");
    // Idle for less than the timeout before each request, longer than it in all: every
    // request is answered, so each wait had a deadline of its own.
    for _ in 0..2 {
        tokio::time::sleep(timeout.mul_f32(0.6)).await;
        send_initialize(&mut tcp).await;
        assert_eq!(read_response(&mut tcp).await, "http/1.1 200 ok");
    }
    // Idle past the timeout: closed.
    until_closed(&mut tcp).await;
}
