//! The hand-off on real connections: a small router behind the accept loop
//! ([`super::super::listener::serve`]) on `127.0.0.1:0`, driven over raw sockets so the
//! test reads every byte on the wire. `/stream` answers with a body marked for hand-off fed by
//! the test; `/plain` with "ok".

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::downstream::http::listener::{self, ConnLimits};

const WAIT: Duration = Duration::from_secs(10);

/// A body fed by the test; `dropped` resolves when hyper or the handed-off stream's task drops it.
struct Fed {
    rx: mpsc::UnboundedReceiver<Bytes>,
    _dropped: oneshot::Sender<()>,
}

impl http_body::Body for Fed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|d| d.map(|d| Ok(http_body::Frame::data(d))))
    }
}

/// One `/stream` request's ends, as the test holds them.
struct Stream {
    feed: mpsc::UnboundedSender<Bytes>,
    dropped: oneshot::Receiver<()>,
}

type Streams = mpsc::UnboundedSender<Stream>;

async fn stream(State(streams): State<Streams>) -> Response<Body> {
    let (feed, rx) = mpsc::unbounded_channel();
    let (tx, dropped) = oneshot::channel();
    let _ = streams.send(Stream { feed, dropped });
    let mut resp = Response::new(Body::new(Fed { rx, _dropped: tx }));
    resp.extensions_mut().insert(HandOff);
    resp
}

struct Server {
    addr: std::net::SocketAddr,
    streams: mpsc::UnboundedReceiver<Stream>,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

async fn server(max_connections: usize) -> Server {
    let (tx, streams) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/stream", post(stream))
        .route("/plain", get(|| async { "ok" }))
        .with_state(tx);
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let limits = ConnLimits {
        max_connections,
        header_read_timeout: Duration::from_secs(30),
    };
    let served = tokio::spawn(listener::serve(tcp, router, limits, shutdown.clone()));
    Server {
        addr,
        streams,
        shutdown,
        served,
    }
}

const STREAM_REQUEST: &[u8] = b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";

/// Reads from `s` into `got` until it holds `want` (bounded).
async fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, want: &[u8]) {
    tokio::time::timeout(WAIT, async {
        while memchr::memmem::find(got, want).is_none() {
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.expect("read");
            assert!(
                n > 0,
                "closed before {:?}: {:?}",
                want,
                String::from_utf8_lossy(got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {:?} in {:?}", want, String::from_utf8_lossy(got)));
}

/// Reads `s` to its end (bounded).
async fn read_to_end(s: &mut TcpStream, got: &mut Vec<u8>) {
    tokio::time::timeout(WAIT, s.read_to_end(got))
        .await
        .expect("the connection closes")
        .expect("read");
}

/// A `/stream` request on a new connection: the socket, the stream's ends, and what
/// was read up to the end of the head.
async fn open_stream(server: &mut Server) -> (TcpStream, Stream, Vec<u8>) {
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(STREAM_REQUEST).await.unwrap();
    let stream = next_stream(server).await;
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"\r\n\r\n").await;
    (s, stream, got)
}

async fn next_stream(server: &mut Server) -> Stream {
    tokio::time::timeout(WAIT, server.streams.recv())
        .await
        .expect("the handler ran")
        .expect("server alive")
}

#[tokio::test]
async fn a_handed_off_body_is_written_chunked_then_ended_and_the_connection_closed() {
    let mut server = server(16).await;
    let (mut s, stream, mut got) = open_stream(&mut server).await;
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(
        !head.contains("0\r\n\r\n"),
        "nothing after the head yet: {head}"
    );
    stream
        .feed
        .send(Bytes::from_static(b"data: one\n\n"))
        .unwrap();
    read_until(&mut s, &mut got, b"B\r\ndata: one\n\n\r\n").await;
    let long = Bytes::from(vec![b'x'; 300]);
    stream.feed.send(long.clone()).unwrap();
    let mut framed = b"12C\r\n".to_vec();
    framed.extend_from_slice(&long);
    framed.extend_from_slice(b"\r\n");
    read_until(&mut s, &mut got, &framed).await;
    drop(stream.feed);
    read_to_end(&mut s, &mut got).await;
    let mut ended = framed.clone();
    ended.extend_from_slice(b"0\r\n\r\n");
    assert!(
        got.ends_with(&ended),
        "the chunked end, then the close: {:?}",
        String::from_utf8_lossy(&got[got.len().saturating_sub(40)..])
    );
    assert!(
        tokio::time::timeout(WAIT, stream.dropped).await.is_ok(),
        "the body is dropped once written"
    );
}

#[tokio::test]
async fn a_client_that_leaves_drops_the_handed_off_body() {
    let mut server = server(16).await;
    let (mut s, stream, mut got) = open_stream(&mut server).await;
    stream
        .feed
        .send(Bytes::from_static(b"data: x\n\n"))
        .unwrap();
    read_until(&mut s, &mut got, b"data: x").await;
    drop(s);
    tokio::time::timeout(WAIT, stream.dropped)
        .await
        .expect("the body is dropped when the client leaves")
        .expect_err("dropped, not sent to");
}

#[tokio::test]
async fn a_client_that_keeps_sending_after_the_head_is_cut_off() {
    let mut server = server(16).await;
    let (mut s, stream, mut got) = open_stream(&mut server).await;
    // Within the limit: discarded, the stream goes on.
    s.write_all(&[b'x'; 1024]).await.unwrap();
    stream
        .feed
        .send(Bytes::from_static(b"data: still\n\n"))
        .unwrap();
    read_until(&mut s, &mut got, b"data: still").await;
    // Past it: the connection is closed and the body dropped.
    let flood = vec![b'x'; DISCARD_LIMIT + 1];
    let _ = s.write_all(&flood).await; // may fail once the server closes
    tokio::time::timeout(WAIT, stream.dropped)
        .await
        .expect("the body is dropped")
        .expect_err("dropped, not sent to");
}

#[tokio::test]
async fn a_request_pipelined_before_the_stream_is_answered_first() {
    let mut server = server(16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let mut both = b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    both.extend_from_slice(STREAM_REQUEST);
    s.write_all(&both).await.unwrap();
    let stream = next_stream(&mut server).await;
    stream
        .feed
        .send(Bytes::from_static(b"data: after\n\n"))
        .unwrap();
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"data: after\n\n\r\n").await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let plain = text.find("\r\n\r\nok").expect("the plain answer");
    let second = text.find("http/1.1 200 ok").map(|first| {
        first
            + 1
            + text[first + 1..]
                .find("http/1.1 200 ok")
                .expect("two responses")
    });
    let second = second.expect("two responses");
    assert!(plain < second, "the plain answer first: {text}");
    assert!(
        text[second..].contains("transfer-encoding: chunked"),
        "{text}"
    );
}

#[tokio::test]
async fn an_http_1_0_request_is_answered_by_hyper_and_not_handed_off() {
    let mut server = server(16).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"POST /stream HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let stream = next_stream(&mut server).await;
    stream
        .feed
        .send(Bytes::from_static(b"data: raw\n\n"))
        .unwrap();
    drop(stream.feed);
    let mut got = Vec::new();
    read_to_end(&mut s, &mut got).await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.0 200 ok\r\n"), "{text}");
    assert!(!text.contains("transfer-encoding"), "{text}");
    assert!(
        text.ends_with("\r\n\r\ndata: raw\n\n"),
        "close-delimited: {text}"
    );
}

#[tokio::test]
async fn a_handed_off_stream_keeps_its_connection_slot_and_shutdown_waits_for_it() {
    let mut server = server(1).await;
    let (mut s, stream, mut got) = open_stream(&mut server).await;
    // The only slot is the stream's: a second connection waits in the backlog.
    let mut other = TcpStream::connect(server.addr).await.unwrap();
    other
        .write_all(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), other.read(&mut buf))
            .await
            .is_err(),
        "not served while the stream holds the slot"
    );
    // The stream ends: its slot frees, the waiting connection is served.
    drop(stream.feed);
    read_to_end(&mut s, &mut got).await;
    let mut plain = Vec::new();
    read_until(&mut other, &mut plain, b"ok").await;
    drop(other);
    // A stream open at shutdown: serve returns once it ended.
    let (_s, stream, _) = open_stream(&mut server).await;
    server.shutdown.cancel();
    let mut served = std::pin::pin!(&mut server.served);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut served)
            .await
            .is_err(),
        "serve waits for the open stream"
    );
    drop(stream.feed);
    tokio::time::timeout(WAIT, served)
        .await
        .expect("serve returns once the stream ended")
        .unwrap();
}

/// A connected pair of sockets on loopback.
async fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    (l.accept().await.unwrap().0, client)
}

#[tokio::test]
async fn the_socket_passes_writes_through_until_armed_then_holds_them_for_the_hand_off() {
    let (server, mut client) = socket_pair().await;
    let handoff = Arc::new(HandoffState::default());
    let mut io = HandoffIo::new(server, handoff.clone());
    io.write_all(b"earlier answer|").await.unwrap();
    let (fed, rx) = mpsc::unbounded_channel();
    let (tx, _dropped) = oneshot::channel();
    *handoff.parts() = Some(Box::new(Parts {
        body: Body::new(Fed { rx, _dropped: tx }),
        held: Vec::new(),
        tcp: None,
    }));
    handoff.armed.store(true, Ordering::Release);
    io.write_all(b"HEAD\r\n\r\n").await.unwrap();
    let end = [io::IoSlice::new(b"0\r\n"), io::IoSlice::new(b"\r\n")];
    assert_eq!(io.write_vectored(&end).await.unwrap(), 5, "held whole");
    io.flush().await.unwrap();
    assert!(
        handoff.take().is_none(),
        "nothing to take before the shutdown"
    );
    io.shutdown().await.unwrap();
    drop(io); // as hyper drops it: the socket is no longer in it
    let stream = handoff.take().expect("handed over at the shutdown");
    assert_eq!(stream.held, b"HEAD\r\n\r\n0\r\n\r\n");
    let writing = tokio::spawn(stream.write());
    fed.send(Bytes::from_static(b"event")).unwrap();
    drop(fed);
    let mut got = Vec::new();
    read_to_end(&mut client, &mut got).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "earlier answer|HEAD\r\n\r\n5\r\nevent\r\n0\r\n\r\n"
    );
    writing.await.unwrap();
}

#[tokio::test]
async fn held_bytes_without_the_chunked_end_close_the_connection_unwritten() {
    let (server, mut client) = socket_pair().await;
    let (_fed, rx) = mpsc::unbounded_channel();
    let (tx, dropped) = oneshot::channel();
    let stream = HandedOff {
        tcp: server,
        held: b"HEAD\r\n\r\n".to_vec(),
        body: Body::new(Fed { rx, _dropped: tx }),
    };
    stream.write().await;
    assert!(dropped.await.is_err(), "the body is dropped");
    let mut got = Vec::new();
    read_to_end(&mut client, &mut got).await;
    assert!(got.is_empty(), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_is_closed_after_the_write_stall() {
    let (server, client) = socket_pair().await;
    let (fed, rx) = mpsc::unbounded_channel();
    let (tx, mut dropped) = oneshot::channel();
    let stream = HandedOff {
        tcp: server,
        held: b"HEAD\r\n\r\n0\r\n\r\n".to_vec(),
        body: Body::new(Fed { rx, _dropped: tx }),
    };
    let writing = tokio::spawn(stream.write());
    // More than the two sockets' buffers hold: the writer blocks with the client
    // connected and not reading.
    for _ in 0..64 {
        fed.send(Bytes::from(vec![b'x'; 1 << 20])).unwrap();
    }
    let start = tokio::time::Instant::now();
    tokio::time::timeout(WRITE_STALL * 2, writing)
        .await
        .expect("the writer gives up")
        .unwrap();
    assert!(start.elapsed() >= WRITE_STALL, "not before the stall bound");
    assert!(
        matches!(
            dropped.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ),
        "the body is dropped"
    );
    drop(client);
}

#[test]
fn chunk_size_lines_are_hex() {
    let mut out = [0u8; 18];
    for (len, want) in [
        (0usize, "0\r\n"),
        (1, "1\r\n"),
        (15, "F\r\n"),
        (16, "10\r\n"),
        (300, "12C\r\n"),
        (usize::MAX, "FFFFFFFFFFFFFFFF\r\n"),
    ] {
        let n = chunk_size_line(len, &mut out);
        assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), want);
    }
}
