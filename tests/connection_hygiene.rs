//! Connection hygiene of the real daemon (`mcpmux serve` in front of the scripted
//! upstream, on 127.0.0.1:0): connections that send half a request header and then
//! nothing neither starve real clients nor stay open, even when they outnumber the
//! daemon's open-file limit; and the header read timeout never cuts a long-lived SSE
//! stream.
//!
//! Unix only: the daemon's open-file limit is pinned with setrlimit before it runs, low
//! (256) so that outnumbering it takes few descriptors on the test's side: the test
//! needs an open-file hard limit of about 520 and fails, saying how to raise it, when it
//! cannot have that many (it never skips).
#![cfg(unix)]

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::http::{Daemon, HttpClient};
use common::{scripted_config, EVENT_TIMEOUT};
use futures_util::future::join_all;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The attack: more half-open connections than the daemon has file descriptors.
const HALF_OPEN: usize = 320;
/// The daemon's open-file limit, pinned soft and hard (its connection budget is then
/// 192: three quarters).
const DAEMON_NOFILE: u64 = 256;
/// Descriptors this test needs besides the half-open sockets (its client, the runtime,
/// the test harness).
const OWN_HEADROOM: u64 = 200;
/// `limits.header_read_timeout_ms` in the attack test.
const HEADER_TIMEOUT_MS: u64 = 2_000;
/// A real client must be served this soon after the attack is in place.
const SERVED_WITHIN: Duration = Duration::from_secs(15);
/// Every half-open connection must have been closed this soon after the last one was
/// opened: at most two header timeouts in turn (the daemon holds at most 3/4 of 256 at
/// once; the rest wait in the backlog), plus generous slack for a loaded machine.
const CLOSED_WITHIN: Duration = Duration::from_secs(30);
/// A request header cut off before its blank line.
const HALF_HEADER: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n";

fn config(header_read_timeout_ms: u64) -> String {
    scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        &format!("[limits]\nheader_read_timeout_ms = {header_read_timeout_ms}\n"),
        "",
    )
}

/// `127.0.0.1:PORT` of `http://127.0.0.1:PORT/mcp`.
fn socket_addr(url: &str) -> SocketAddr {
    let rest = url.strip_prefix("http://").expect("an http:// url");
    let authority = rest.split('/').next().expect("an authority");
    authority.parse().expect("an IP:port authority")
}

/// Connects and sends [`HALF_HEADER`], then nothing more.
async fn half_open(addr: SocketAddr) -> TcpStream {
    let mut s = tokio::time::timeout(EVENT_TIMEOUT, TcpStream::connect(addr))
        .await
        .expect("connect timed out (listen backlog full?)")
        .expect("connect");
    s.write_all(HALF_HEADER).await.expect("write half a header");
    s
}

/// Reads `s` until the peer closes it (EOF or reset); `false` if `deadline` comes first.
async fn closed_by_peer(mut s: TcpStream, deadline: tokio::time::Instant) -> bool {
    let mut buf = [0u8; 512];
    let closed = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {} // e.g. a 408 before the close
            }
        }
    };
    tokio::time::timeout_at(deadline, closed).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_beyond_the_fd_limit_neither_starve_clients_nor_stay_open() {
    let ours = rlimit::increase_nofile_limit(u64::MAX).expect("raise our own open-file limit");
    let needed = HALF_OPEN as u64 + OWN_HEADROOM;
    assert!(
        ours >= needed,
        "this test opens {HALF_OPEN} sockets and needs an open-file limit of {needed}, but \
         the hard limit here is {ours}: raise it (e.g. `ulimit -Hn {needed}` as root, or \
         `LimitNOFILE=` / `nofile` in /etc/security/limits.conf for the CI user) and run \
         it again"
    );
    let d = Daemon::start_with_nofile_limit(&config(HEADER_TIMEOUT_MS), DAEMON_NOFILE).await;
    #[cfg(target_os = "linux")]
    {
        let pid = d.child.id().expect("running");
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("a Max open files line");
        let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
        let pinned = DAEMON_NOFILE.to_string();
        assert_eq!(numbers, [pinned.as_str(), pinned.as_str()], "{line}");
    }
    let addr = socket_addr(&d.url);

    let started = tokio::time::Instant::now();
    let attack = join_all((0..HALF_OPEN).map(|_| half_open(addr))).await;
    let in_place = tokio::time::Instant::now();
    eprintln!("attack in place after {:?}", in_place - started);

    let mut client = tokio::time::timeout(SERVED_WITHIN, HttpClient::connect(&d.url, json!({})))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "a real client was not served within {SERVED_WITHIN:?} while {HALF_OPEN} \
                 half-sent headers were open"
            )
        });
    let served_after = in_place.elapsed();
    let pong = tokio::time::timeout(EVENT_TIMEOUT, client.call("ping", json!({})))
        .await
        .expect("ping answered");
    assert_eq!(pong["result"], json!({}), "{pong}");

    let deadline = in_place + CLOSED_WITHIN;
    let closed = join_all(attack.into_iter().map(|s| closed_by_peer(s, deadline))).await;
    let still_open = closed.iter().filter(|c| !**c).count();
    assert_eq!(
        still_open, 0,
        "{still_open} of {HALF_OPEN} half-open connections still open {CLOSED_WITHIN:?} \
         after the attack was in place (header timeout {HEADER_TIMEOUT_MS} ms)"
    );
    eprintln!(
        "client served {served_after:?} after the attack was in place; every half-open \
         connection closed within {:?}",
        in_place.elapsed()
    );

    // The daemon is healthy afterwards: a new client is served at once.
    let mut late = tokio::time::timeout(EVENT_TIMEOUT, HttpClient::connect(&d.url, json!({})))
        .await
        .expect("a client after the attack is served");
    assert_eq!(late.call("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn a_long_lived_sse_stream_outlives_the_header_read_timeout() {
    let d = Daemon::start(&config(1_000)).await;
    let mut client = HttpClient::connect(&d.url, json!({})).await;
    // `connect` returns once the GET stream's response has started. A half-sent header
    // opened now is closed by the header timeout: when that has happened, the GET
    // stream has been open for longer than the timeout.
    let probe = half_open(socket_addr(&d.url)).await;
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    assert!(
        closed_by_peer(probe, deadline).await,
        "the header read timeout did not close a half-sent header"
    );
    client
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let event = client.next_event().await;
    assert_eq!(
        event["method"], "notifications/tools/list_changed",
        "{event}"
    );
}
