//! The read cache end to end (issue 3): `mcpmux serve` in front of the scripted
//! upstream, which counts every `resources/read` it receives.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::*;
use futures_util::future::join_all;
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";

async fn daemon() -> Daemon {
    Daemon::start(&scripted_config(LISTEN, "", "")).await
}

/// Subscribes `c` to `uri` and asserts the answer was a success (`{}`): every test
/// below relies on the subscription for the read to be cached (or not).
async fn subscribe(c: &mut HttpClient, uri: &str) {
    let r = c.call("resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(r.get("result"), Some(&json!({})), "subscribe {uri}: {r}");
}

async fn upstream_reads(c: &mut HttpClient, uri: &str) -> u64 {
    let stats = c.tool("stats", json!({})).await;
    stats["by_uri"]["resources/read"][uri].as_u64().unwrap_or(0)
}

async fn clients(url: &str, n: usize) -> Vec<HttpClient> {
    join_all((0..n).map(|_| HttpClient::connect(url, json!({})))).await
}

async fn read_all(cs: &mut [HttpClient], uri: &str) -> Vec<Value> {
    join_all(
        cs.iter_mut()
            .map(|c| c.call("resources/read", json!({"uri": uri}))),
    )
    .await
}

#[tokio::test]
async fn fifty_readers_one_upstream_read_per_change() {
    let d = daemon().await;
    let uri = "test://static/1";
    let mut cs = clients(&d.url, 50).await;
    for c in cs.iter_mut() {
        subscribe(c, uri).await;
    }
    let answers = read_all(&mut cs, uri).await;
    for a in &answers {
        assert_eq!(
            a["result"], answers[0]["result"],
            "every reader sees the same contents"
        );
    }
    assert_eq!(
        answers[0]["result"]["contents"][0]["text"],
        format!("{uri} v0")
    );
    assert_eq!(
        upstream_reads(&mut cs[0], uri).await,
        1,
        "50 concurrent reads, one upstream read"
    );

    cs[0].tool("emit_update", json!({"uri": uri})).await;
    for c in cs.iter_mut() {
        assert_eq!(c.next_event().await["params"]["uri"], uri);
    }
    let answers = read_all(&mut cs, uri).await;
    for a in &answers {
        assert_eq!(
            a["result"]["contents"][0]["text"],
            format!("{uri} v1"),
            "{a}"
        );
    }
    assert_eq!(
        upstream_reads(&mut cs[0], uri).await,
        2,
        "one more upstream read after the update"
    );
}

#[tokio::test]
async fn a_read_that_raced_an_update_is_not_cached() {
    let d = daemon().await;
    let uri = "test://static/3";
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    let mut ctl = HttpClient::connect(&d.url, json!({})).await;
    subscribe(&mut c, uri).await;
    ctl.tool("hold_reads", json!({"uri": uri})).await;
    let url = d.url.clone();
    let reader = tokio::spawn(async move {
        let mut r = HttpClient::connect(&url, json!({})).await;
        r.call("resources/read", json!({"uri": uri})).await
    });
    // Wait until the upstream holds the read, then change the resource under it.
    wait_for(&mut ctl, |s| s["pending"]["held_reads"] == 1).await;
    ctl.tool("emit_update", json!({"uri": uri})).await;
    ctl.tool("release_reads", json!({"uri": uri})).await;
    let stale = reader.await.unwrap();
    assert_eq!(stale["result"]["contents"][0]["text"], format!("{uri} v0"));
    // The stale result was not stored: the next read goes upstream and is fresh.
    let fresh = c.call("resources/read", json!({"uri": uri})).await;
    assert_eq!(fresh["result"]["contents"][0]["text"], format!("{uri} v1"));
    assert_eq!(upstream_reads(&mut ctl, uri).await, 2);
}

#[tokio::test]
async fn reads_of_unsubscribed_uris_all_go_upstream() {
    let d = daemon().await;
    let uri = "test://static/5";
    let mut cs = clients(&d.url, 5).await;
    for c in cs.iter_mut() {
        c.call("resources/read", json!({"uri": uri})).await;
    }
    assert_eq!(upstream_reads(&mut cs[0], uri).await, 5);
}

#[tokio::test]
async fn an_upstream_read_error_reaches_every_waiter_and_is_not_cached() {
    let d = daemon().await;
    let uri = "test://static/7";
    let mut cs = clients(&d.url, 10).await;
    for c in cs.iter_mut() {
        subscribe(c, uri).await;
    }
    let mut ctl = HttpClient::connect(&d.url, json!({})).await;
    ctl.tool(
        "fail_reads",
        json!({"uri": uri, "code": -32603, "message": "disk on fire"}),
    )
    .await;
    ctl.tool("hold_reads", json!({"uri": uri})).await;
    let readers = tokio::spawn(async move {
        let mut cs = cs;
        read_all(&mut cs, uri).await
    });
    wait_for(&mut ctl, |s| s["pending"]["held_reads"] == 1).await;
    ctl.tool("release_reads", json!({"uri": uri})).await;
    let answers = readers.await.unwrap();
    assert_eq!(answers.len(), 10);
    for a in &answers {
        assert_eq!(a["error"]["message"], "disk on fire", "{a}");
    }
    assert_eq!(
        upstream_reads(&mut ctl, uri).await,
        1,
        "one shared upstream read"
    );
    ctl.tool("clear_faults", json!({})).await;
    let mut again = HttpClient::connect(&d.url, json!({})).await;
    subscribe(&mut again, uri).await;
    let ok = again.call("resources/read", json!({"uri": uri})).await;
    assert!(ok.get("result").is_some(), "{ok}");
    assert_eq!(
        upstream_reads(&mut ctl, uri).await,
        2,
        "the error was not cached"
    );
}

#[tokio::test]
async fn a_blob_round_trips_byte_exact_through_the_cache() {
    let d = daemon().await;
    let uri = "test://static/2";
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    subscribe(&mut c, uri).await;
    let first = c.call("resources/read", json!({"uri": uri})).await;
    let cached = c.call("resources/read", json!({"uri": uri})).await;
    assert_eq!(
        upstream_reads(&mut c, uri).await,
        1,
        "the second read was a hit"
    );
    let b1 = first["result"]["contents"][0]["blob"].as_str().unwrap();
    let b2 = cached["result"]["contents"][0]["blob"].as_str().unwrap();
    assert_eq!(b1, b2);
    let bytes = base64_decode(b1);
    assert_eq!(
        &bytes[..256],
        &(0..=255u8).collect::<Vec<_>>()[..],
        "every byte value survives"
    );
    assert_eq!(
        first["result"]["contents"][0]["mimeType"],
        cached["result"]["contents"][0]["mimeType"]
    );
}

/// Polls the upstream's stats until `pred` holds (no event exists for "the upstream
/// has received a read", so this is the one place a test polls).
async fn wait_for(c: &mut HttpClient, pred: impl Fn(&Value) -> bool) {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        let s = c.tool("stats", json!({})).await;
        if pred(&s) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition never held: {s}"
        );
        tokio::task::yield_now().await;
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for ch in s.bytes().filter(|b| *b != b'=') {
        let v = A.iter().position(|a| *a == ch).expect("base64 alphabet") as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    out
}
