//! A fleet owner killed (SIGKILL) while a follower's read waits on it: the follower's
//! read still completes, without an error, within a bound (the follower stops waiting
//! for the owner and reads upstream itself). Two real `mcpmux serve` instances over a
//! real `nats-server`, one scripted Streamable HTTP upstream whose held reads keep the
//! owner's read in flight; what the upstream saw is read from its own `stats`.

use crate::common;
use crate::harness;

use std::time::Instant;

use common::fleet::{HttpUpstream, Nats};
use common::http::{Daemon, HttpClient};
use common::EVENT_TIMEOUT;
use serde_json::{json, Value};

const URI: &str = "test://static/1";

fn fleet_config(nats: &str, upstream: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[fleet]\nnats = \"{nats}\"\nname = \"k{}\"\nlease_ms = 1500\n\n[servers.up]\nurl = \"{upstream}\"\n",
        std::process::id()
    )
}

/// Polls an instance's `/status` until its fleet key has `role`.
async fn role_until(d: &Daemon, role: &str) {
    let start = Instant::now();
    loop {
        let s: Value = reqwest::get(format!("{}/status", d.origin()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if s["fleet"]["keys"][0]["role"] == role {
            return;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "never {role}: {s}");
        tokio::task::yield_now().await;
    }
}

/// Polls the upstream's stats (through `c`) until `ok` holds.
async fn stats_until(c: &mut HttpClient, what: &str, ok: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        let s = c.tool("stats", json!({})).await;
        if ok(&s) {
            return;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "never {what}: {s}");
        tokio::task::yield_now().await;
    }
}

async fn subscribe(c: &mut HttpClient) {
    let r = c.call("resources/subscribe", json!({"uri": URI})).await;
    assert_eq!(r["result"], json!({}), "{r}");
}

#[tokio::test]
async fn a_followers_read_completes_when_the_owner_dies_while_serving_it() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &up.url);
    let mut owner = Daemon::start(&cfg).await;
    let mut owner_holder = HttpClient::connect(&owner.url, json!({})).await;
    subscribe(&mut owner_holder).await;
    role_until(&owner, "own").await;
    let follower = Daemon::start(&cfg).await;
    let mut holder = HttpClient::connect(&follower.url, json!({})).await;
    subscribe(&mut holder).await;
    role_until(&follower, "follow").await;

    let mut control = HttpClient::connect(&follower.url, json!({})).await;
    control.tool("hold_reads", json!({"uri": URI})).await;
    // Upstream reads of the URI that arrived (held ones included; the dead owner's may
    // be dropped when the upstream ends its session).
    let reads = |n: u64| move |s: &Value| s["by_uri"]["resources/read"][URI].as_u64() >= Some(n);

    let mut reader = HttpClient::connect(&follower.url, json!({})).await;
    let read = reader.call("resources/read", json!({"uri": URI}));
    let kill = async {
        // The follower's read reached the owner, whose upstream read is now held.
        stats_until(&mut control, "the owner's read held upstream", reads(1)).await;
        owner.child.start_kill().unwrap();
        owner.child.wait().await.unwrap();
        drop(owner_holder);
        // The follower reads for itself; then the upstream answers.
        stats_until(&mut control, "the follower's own read", reads(2)).await;
        control.tool("release_reads", json!({"uri": URI})).await;
    };
    let (r, ()) = tokio::time::timeout(EVENT_TIMEOUT, async { tokio::join!(read, kill) })
        .await
        .expect("the follower's read completed after its owner died");
    assert!(r.get("error").is_none(), "no error: {r}");
    assert_eq!(
        r["result"]["contents"][0]["text"],
        format!("{URI} v0"),
        "{r}"
    );
}
