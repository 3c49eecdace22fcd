//! One client that never reads cannot cost the others anything, and cannot make
//! mcpmux's memory grow (docs/architecture.md, "Slow clients"): 50 HTTP clients read their GET
//! streams while one more opens its GET stream on a raw socket with a tiny receive
//! buffer and never reads it. First the stalled client alone is sent updates (on a URI
//! only it holds) until its outbox is full — so it is provably stalled, not just
//! buffered by the kernel. Then the upstream emits 1,000 updates for the URI everyone
//! holds: every reading client receives all 1,000, the hub's largest queue stays
//! within `limits.client_queue` plus one coalesced entry per URI or list kind, and the
//! stalled client stays connected with its updates coalesced (it owes no response, so
//! nothing forces a disconnect).
//!
//! Why `client_queue` is 1,024: more than the whole burst (1,000 updates and the
//! marker), so a reading client can never be coalesced, however late its session task
//! runs. A client that keeps up still sees the hub push a whole batch of upstream
//! messages (up to a few hundred) before its session task runs: measured here (debug
//! build, 2 idle cores) with `client_queue = 64` the reading clients got only ~490–610
//! of 1,000 updates each (the rest coalesced, as designed for a full queue), the same
//! with or without the stalled client; with 256 or more they lost none and their
//! deepest queue was 215–256. How deep it gets depends on scheduling, so on a loaded
//! machine any queue smaller than the burst could make this test fail for a reason
//! that has nothing to do with the stalled client. What this test asserts about the
//! stalled client (its queue stays bounded, it stays connected) does not depend on
//! the queue's size.

use crate::common;

use std::time::{Duration, Instant};

use common::http::{post, read_body, HttpClient};
use common::inproc::InProc;
use common::{scripted_config, EVENT_TIMEOUT};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FAST_CLIENTS: usize = 50;
const UPDATES: u64 = 1000;
/// Holds the whole burst and the marker (see the header).
const CLIENT_QUEUE: usize = 1024;
/// Coalesced entries the stalled client may hold beyond its queue in this test: one
/// per URI, one for the `tools/list_changed` marker.
const COALESCED_KEYS: usize = 3;
const URI: &str = "test://static/7";
/// Held by the stalled client only; used to fill its queue first.
const STALLED_URI: &str = "test://static/8";
/// `_meta` bytes of the updates that fill the stalled client's pipeline.
const FILL_META_BYTES: usize = 4096;
/// Bytes of `_meta` per update, so the burst is realistic.
const META_BYTES: usize = 512;
/// How long the readers may take to receive the burst: a safety net, never a wait.
/// Measured 2–4 s on 2 idle cores and 13–15 s at load average 8–10.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(300);

const _: () = assert!(
    CLIENT_QUEUE > UPDATES as usize + 1,
    "a reading client's queue must hold the whole burst and the marker"
);

/// A session whose GET stream is attached on a raw socket that is never read.
struct Stalled {
    _socket: TcpStream,
}

async fn stalled_client(url: &str) -> Stalled {
    let http = reqwest::Client::new();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "stalled", "version": "0"}}});
    let resp = post(&http, url, None, &init).await;
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    read_body(resp).await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&http, url, Some(&session), &note).await.status(), 202);
    for (id, uri) in [(1, URI), (3, STALLED_URI)] {
        let sub = json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe",
                         "params": {"uri": uri}});
        let r = read_body(post(&http, url, Some(&session), &sub).await).await;
        assert_eq!(r[0]["result"], json!({}), "{r:?}");
    }

    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket
        .connect(authority.parse().unwrap())
        .await
        .expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read the response head only: the GET was accepted and handed to the session.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(EVENT_TIMEOUT, stream.read(&mut byte))
            .await
            .expect("GET response head")
            .unwrap();
        assert_eq!(
            n,
            1,
            "connection closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A request after the GET passes through the same session actor, so once it is
    // answered the GET stream is attached.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let r = read_body(post(&http, url, Some(&session), &ping).await).await;
    assert_eq!(r[0]["result"], json!({}));
    Stalled { _socket: stream }
}

/// Counts `notifications/resources/updated` for [`URI`] until the marker arrives.
async fn count_until_marker(mut c: HttpClient) -> u64 {
    let mut n = 0;
    loop {
        let ev: Value = c.next_event().await;
        match ev["method"].as_str() {
            Some("notifications/resources/updated") if ev["params"]["uri"] == URI => {
                assert_eq!(
                    ev["params"]["_meta"]["pad"].as_str().unwrap().len(),
                    META_BYTES
                );
                n += 1;
            }
            Some("notifications/tools/list_changed") => return n,
            _ => panic!("unexpected event {ev}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_readers_get_every_update_while_a_stalled_reader_stays_bounded() {
    let proxy = InProc::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        &format!("[limits]\nclient_queue = {CLIENT_QUEUE}\n"),
        "",
    ))
    .await;
    let url = proxy.url.clone();
    let mut fast: Vec<HttpClient> =
        join_all((0..FAST_CLIENTS).map(|_| HttpClient::connect(&url, json!({})))).await;
    for r in join_all(
        fast.iter_mut()
            .map(|c| c.call("resources/subscribe", json!({"uri": URI}))),
    )
    .await
    {
        assert_eq!(r["result"], json!({}), "{r}");
    }
    let stalled = stalled_client(&url).await;
    let mut control = HttpClient::connect(&url, json!({})).await;

    // Fill the stalled client's socket, HTTP buffers and outbox with updates nobody
    // else holds, until the hub reports a full queue (no event says "queue full").
    let fill = json!({"pad": "y".repeat(FILL_META_BYTES)});
    let mut filled = 0;
    while proxy.stats().await.peak_queue < CLIENT_QUEUE {
        assert!(filled < 20_000, "the stalled client's queue never filled");
        control
            .tool(
                "emit_updates",
                json!({"uri": STALLED_URI, "count": 100, "meta": fill}),
            )
            .await;
        filled += 100;
    }

    let readers: Vec<_> = fast
        .into_iter()
        .map(|c| tokio::spawn(count_until_marker(c)))
        .collect();
    let started = Instant::now();
    let meta = json!({"pad": "x".repeat(META_BYTES)});
    let r = control
        .tool(
            "emit_updates",
            json!({"uri": URI, "count": UPDATES, "meta": meta}),
        )
        .await;
    assert_eq!(r["emitted"], UPDATES);
    // Broadcast after the last update: each reader stops counting at it.
    control
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let counts: Vec<u64> = tokio::time::timeout(DELIVERY_TIMEOUT, join_all(readers))
        .await
        .expect("readers finished")
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let delivered = started.elapsed();
    let lost: u64 = counts.iter().map(|n| UPDATES - n).sum();

    let stats = proxy.stats().await;
    eprintln!(
        "slow consumer: stalled client full after {filled} updates of its own; \
         {FAST_CLIENTS} readers got {counts:?} updates ({lost} lost) in {delivered:?}; \
         peak queue {} (client_queue {CLIENT_QUEUE}); hub: {stats:?}",
        stats.peak_queue
    );
    assert_eq!(lost, 0, "updates lost by reading clients: {counts:?}");
    assert!(
        stats.peak_queue <= CLIENT_QUEUE + COALESCED_KEYS,
        "peak queue {} over client_queue {CLIENT_QUEUE} + {COALESCED_KEYS}",
        stats.peak_queue
    );
    // The stalled client is still connected: updates coalesce, and it owes no
    // response that could not be queued.
    assert_eq!(stats.clients, FAST_CLIENTS + 2, "{stats:?}");
    // One subscription per reader, two for the stalled client.
    assert_eq!(stats.client_subscriptions, FAST_CLIENTS + 2, "{stats:?}");
    drop(stalled);
    proxy.stop().await;
}
