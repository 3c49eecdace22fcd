//! A 2026-07-28 `subscriptions/listen` whose client vanishes releases its share: a
//! listen whose TCP connection is reset mid-stream (`mcpmux serve`), and a `mcpmux
//! stdio` whose client exits (closes its end of the pipes) while holding a listen. In
//! both the upstream gets its URI released, and another holder of another URI keeps its
//! subscription and its updates. What the upstream holds is read from its own `stats`.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::fleet::HttpUpstream;
use common::http::{Daemon, HttpClient};
use common::modern::{request, ModernClient, VERSION};
use common::{mcpmux_bin, scripted_config, temp_config, EVENT_TIMEOUT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const GONE: &str = "test://static/1";
const KEPT: &str = "test://static/2";

/// Polls the upstream's stats (through `c`) until `ok` holds (bounded).
async fn stats_until(c: &mut HttpClient, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let s = c.tool("stats", json!({})).await;
        if ok(&s) {
            return s;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "timed out waiting for {what}: {s}"
        );
        tokio::task::yield_now().await;
    }
}

/// Opens a listen for `uri` on a raw TCP connection and returns it once the
/// acknowledgement has arrived.
async fn raw_listen(url: &str, uri: &str) -> TcpStream {
    raw_listen_read(url, uri).await.0
}

/// [`raw_listen`], with what was read up to the acknowledgement (the head too).
async fn raw_listen_read(url: &str, uri: &str) -> (TcpStream, Vec<u8>) {
    let authority = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .expect("http://HOST:PORT/mcp");
    let body = request(
        json!("listen:raw"),
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri]}}),
    )
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut s = TcpStream::connect(authority).await.expect("connect");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(EVENT_TIMEOUT, async {
        while !String::from_utf8_lossy(&got).contains("notifications/subscriptions/acknowledged") {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before the acknowledgement: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the listen's acknowledgement");
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    (s, got)
}

#[tokio::test]
async fn a_listen_is_written_on_its_own_connection_and_shutdown_ends_it_cleanly() {
    let listen = "[listen]\nhttp = \"127.0.0.1:0\"\n";
    let mut d = Daemon::start(&scripted_config(listen, "", "")).await;
    let (mut s, got) = raw_listen_read(&d.url, GONE).await;
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    // Off hyper's connection (src/downstream/http/handoff.rs): chunked, and the
    // connection is the stream's alone.
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\ncontent-type: text/event-stream\r\n"),
        "{head}"
    );
    let status = d.terminate().await;
    assert!(status.success(), "{status:?}");
    let mut rest = Vec::new();
    tokio::time::timeout(EVENT_TIMEOUT, s.read_to_end(&mut rest))
        .await
        .expect("the stream ends at shutdown")
        .expect("a clean close, not a reset");
    assert!(
        rest.ends_with(b"0\r\n\r\n"),
        "the chunked end last: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

#[tokio::test]
async fn a_listen_whose_connection_is_reset_releases_its_uri_and_only_it() {
    let listen = "[listen]\nhttp = \"127.0.0.1:0\"\n";
    let d = Daemon::start(&scripted_config(listen, "", "")).await;
    let m = ModernClient::new(&d.url);
    let (mut kept, _) = m.listen("listen:0", &[KEPT]).await;
    let gone = raw_listen(&d.url, GONE).await;
    let mut control = HttpClient::connect(&d.url, json!({})).await;
    let s = stats_until(&mut control, "both URIs subscribed upstream", |s| {
        s["subscribed"] == json!([GONE, KEPT])
    })
    .await;
    assert_eq!(s["counts"]["resources/subscribe"], 2, "{s}");

    // The client's side resets the connection (SO_LINGER 0: an RST, no FIN).
    #[allow(deprecated)] // SO_LINGER 0 never blocks: the close sends an RST at once.
    gone.set_linger(Some(Duration::ZERO)).unwrap();
    drop(gone);
    let s = stats_until(&mut control, "the reset listen's URI released", |s| {
        s["subscribed"] == json!([KEPT])
    })
    .await;
    assert_eq!(s["by_uri"]["resources/unsubscribe"][GONE], 1, "{s}");
    assert!(
        s["by_uri"]["resources/unsubscribe"].get(KEPT).is_none(),
        "{s}"
    );

    // The other holder still gets its updates.
    control.tool("emit_update", json!({"uri": KEPT})).await;
    let ev = kept.next().await.expect("the update");
    assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
    assert_eq!(ev["params"]["uri"], KEPT, "{ev}");
}

#[tokio::test]
async fn a_mcpmux_stdio_whose_client_exits_while_listening_releases_its_uri() {
    // An upstream shared with another holder: the scripted upstream in HTTP mode, with
    // a session of its own (direct, no mcpmux) holding another URI.
    let up = HttpUpstream::start(&[]).await;
    let mut other = HttpClient::connect(&up.url, json!({})).await;
    let r = other
        .call("resources/subscribe", json!({"uri": KEPT}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");

    let cfg = temp_config(&format!("[servers.up]\nurl = \"{}\"\n", up.url));
    let mut child = tokio::process::Command::new(mcpmux_bin())
        .args(["stdio", "--config"])
        .arg(&cfg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcpmux stdio");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listen = request(
        json!("listen:0"),
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [GONE]}}),
    );
    stdin
        .write_all(format!("{listen}\n").as_bytes())
        .await
        .unwrap();
    let ack = tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
        .await
        .expect("the acknowledgement")
        .unwrap()
        .expect("a line");
    let ack: Value = serde_json::from_str(&ack).unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([GONE]),
        "{ack}"
    );
    stats_until(&mut other, "the listen's URI subscribed upstream", |s| {
        s["subscribers"][GONE] == 1
    })
    .await;

    // The client exits: both pipes close on its side.
    drop(stdin);
    drop(lines);
    let status = tokio::time::timeout(EVENT_TIMEOUT, child.wait())
        .await
        .expect("mcpmux stdio exits when its client is gone")
        .unwrap();
    assert!(status.success(), "{status}");
    let s = stats_until(&mut other, "the listen's URI released", |s| {
        s["subscribers"].get(GONE).is_none()
    })
    .await;
    assert_eq!(s["subscribers"][KEPT], 1, "the other holder keeps it: {s}");
    assert_eq!(s["subscribed"], json!([KEPT]), "{s}");
    // mcpmux released it itself (unsubscribe or DELETE), not the upstream's rule for
    // a session whose client died.
    assert_eq!(s["sessions"]["gone"], 0, "{s}");

    // And still gets its updates.
    other.tool("emit_update", json!({"uri": KEPT})).await;
    let ev = other.next_event().await;
    assert_eq!(ev["params"]["uri"], KEPT, "{ev}");
}
