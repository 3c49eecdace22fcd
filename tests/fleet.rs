//! A fleet of three `mcpmux serve` instances sharing one scripted Streamable HTTP
//! upstream over a real `nats-server` (JetStream): one upstream subscription and one
//! upstream read per change for the whole fleet, updates to every holder on every
//! instance and nobody else, and a killed owner replaced within the lease without
//! losing a holder. What the upstream saw is read from its own `stats`.

use crate::common;
use crate::harness;

use std::time::Instant;

use common::fleet::{HttpUpstream, Nats};
use common::http::{Daemon, HttpClient};
use common::EVENT_TIMEOUT;
use futures_util::StreamExt;
use serde_json::{json, Value};

const URI: &str = "test://static/1";
const LEASE_MS: u64 = 1500;

fn fleet_config(nats: &str, fleet: &str, upstream: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[fleet]\nnats = \"{nats}\"\nname = \"{fleet}\"\nlease_ms = {LEASE_MS}\n\n[servers.up]\nurl = \"{upstream}\"\n"
    )
}

fn fleet_name() -> String {
    format!("t{}", std::process::id())
}

async fn stats(c: &mut HttpClient) -> Value {
    c.tool("stats", json!({})).await
}

/// Polls the upstream's stats until `ok` holds.
async fn stats_until(c: &mut HttpClient, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let s = stats(c).await;
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

fn base(d: &Daemon) -> String {
    d.url.trim_end_matches("/mcp").to_owned()
}

/// Polls an instance's `/status` until its `fleet` satisfies `ok`; returns `fleet`.
async fn status_until(d: &Daemon, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let s: Value = reqwest::get(format!("{}/status", base(d)))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if ok(&s["fleet"]) {
            return s["fleet"].clone();
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "timed out waiting for {what}: {s}"
        );
        tokio::task::yield_now().await;
    }
}

async fn subscribe_all(clients: &mut [HttpClient]) {
    for c in clients {
        let r = c.call("resources/subscribe", json!({"uri": URI})).await;
        assert_eq!(r["result"], json!({}), "{r}");
    }
}

#[tokio::test]
async fn three_instances_share_one_subscription_and_one_read_per_change() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &fleet_name(), &up.url);
    let mut instances = vec![];
    for _ in 0..3 {
        instances.push(Daemon::start(&cfg).await);
    }
    // 10 holders per instance; the first instance's first holder takes the lease.
    let mut holders: Vec<Vec<HttpClient>> = vec![];
    for d in &instances {
        let mut cs = vec![];
        for _ in 0..10 {
            cs.push(HttpClient::connect(&d.url, json!({})).await);
        }
        subscribe_all(&mut cs).await;
        holders.push(cs);
    }
    let mut bystanders = vec![];
    for d in &instances {
        bystanders.push(HttpClient::connect(&d.url, json!({})).await);
    }
    let s = stats(&mut bystanders[0]).await;
    assert_eq!(
        s["counts"]["resources/subscribe"], 1,
        "one upstream subscription for 30 holders on 3 instances: {s}"
    );

    // Each instance's /status shows the fleet: the three instances, and the same owner
    // for the key (the one instance that says it owns it); /metrics counts them.
    let mut views = vec![];
    for d in &instances {
        views.push(
            status_until(d, "3 instances and the key's owner", |f| {
                f["instances"].as_array().map(Vec::len) == Some(3)
                    && f["keys"][0]["owner"].is_string()
            })
            .await,
        );
    }
    let ids: Vec<&Value> = views.iter().map(|f| &f["instance"]).collect();
    for f in &views {
        assert_eq!(f["instances"], views[0]["instances"], "{f}");
        assert_eq!(f["keys"][0]["uri"], URI, "{f}");
        assert_eq!(f["keys"][0]["owner"], views[0]["keys"][0]["owner"], "{f}");
        for id in &ids {
            assert!(f["instances"].as_array().unwrap().contains(id), "{f}");
        }
    }
    let owners: Vec<&Value> = views
        .iter()
        .filter(|f| f["keys"][0]["role"] == "own")
        .map(|f| &f["instance"])
        .collect();
    assert_eq!(owners, vec![&views[0]["keys"][0]["owner"]], "{views:?}");
    let metrics = reqwest::get(format!("{}/metrics", base(&instances[1])))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "mcpmux_fleet_instances 3"),
        "{metrics}"
    );

    // One update reaches all 30, through the owner's one upstream session.
    bystanders[1]
        .tool("emit_update", json!({"uri": URI, "meta": {"n": 1}}))
        .await;
    for cs in &mut holders {
        for c in cs.iter_mut() {
            let ev = c.next_event().await;
            assert_eq!(ev["params"]["uri"], URI, "{ev}");
            assert_eq!(ev["params"]["_meta"]["n"], 1);
        }
    }
    // 30 readers after the update: one upstream read for the fleet.
    let before = stats(&mut bystanders[0]).await["by_uri"]["resources/read"][URI]
        .as_u64()
        .unwrap_or(0);
    for cs in &mut holders {
        let reads = cs
            .iter_mut()
            .map(|c| c.call("resources/read", json!({"uri": URI})));
        for r in futures_util::future::join_all(reads).await {
            assert_eq!(
                r["result"]["contents"][0]["text"],
                format!("{URI} v1"),
                "{r}"
            );
        }
    }
    let s = stats(&mut bystanders[0]).await;
    let reads = s["by_uri"]["resources/read"][URI].as_u64().unwrap_or(0) - before;
    assert_eq!(reads, 1, "one upstream read for 30 readers: {s}");
    // Nobody else heard of it. Every instance has fanned the update out (its holders
    // got it), so a list_changed the upstream sends now to every instance follows,
    // on each bystander's GET stream, anything its instance sent it of that fan-out.
    bystanders[0]
        .tool("emit_list_changed", json!({"kind": "tools"}))
        .await;
    for b in &mut bystanders {
        let before = b.events_until("notifications/tools/list_changed").await;
        assert!(
            before
                .iter()
                .all(|m| m["method"] != "notifications/resources/updated"),
            "a bystander got the update: {before:?}"
        );
    }
    drop(holders);
    drop(instances);
    drop(nats);
}

#[tokio::test]
async fn a_killed_owner_is_replaced_within_the_lease_and_nothing_is_left_behind() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let fleet = fleet_name();
    let cfg = fleet_config(&nats.url(), &fleet, &up.url);
    let mut instances = vec![];
    for _ in 0..3 {
        instances.push(Daemon::start(&cfg).await);
    }
    let mut holders: Vec<Vec<HttpClient>> = vec![];
    for d in &instances {
        let mut cs = vec![];
        for _ in 0..10 {
            cs.push(HttpClient::connect(&d.url, json!({})).await);
        }
        subscribe_all(&mut cs).await;
        holders.push(cs);
    }
    let mut watcher = HttpClient::connect(&instances[1].url, json!({})).await;
    let s = stats(&mut watcher).await;
    assert_eq!(s["counts"]["resources/subscribe"], 1, "{s}");
    assert_eq!(s["subscribers"][URI], 1, "{s}");
    assert_eq!(s["sessions"]["gone"], 0, "{s}");

    // The first instance took the lease: kill it without a goodbye.
    let killed = Instant::now();
    let mut owner = instances.remove(0);
    owner.child.kill().await.unwrap();
    let _dead = holders.remove(0);
    // The upstream sees the dead owner's session end (its GET stream's connection
    // closed), and another instance owns the key within the lease: a second upstream
    // subscribe.
    let s = stats_until(&mut watcher, "a new owner's subscribe", |s| {
        s["counts"]["resources/subscribe"] == 2
    })
    .await;
    let took = killed.elapsed();
    // Within a few leases (the lease, a follower's tick, its subscribe), with room for
    // a loaded machine.
    println!("takeover took {took:?} (lease {LEASE_MS} ms)");
    assert!(
        took.as_millis() < u128::from(LEASE_MS) * 8,
        "takeover took {took:?} (lease {LEASE_MS} ms): {s}"
    );
    let s = stats_until(&mut watcher, "the killed owner's session to end", |s| {
        s["sessions"]["gone"] == 1
    })
    .await;
    assert_eq!(
        s["subscribers"][URI], 1,
        "exactly one live session holds the subscription after the takeover: {s}"
    );
    // Every holder on both instances hears that the URI may have changed in the gap
    // (the new owner's from it, the other's through the fleet); then updates flow
    // again to all 20.
    for (i, cs) in holders.iter_mut().enumerate() {
        for c in cs.iter_mut() {
            let ev = c.next_event().await;
            assert_eq!(ev["method"], "notifications/resources/updated", "{i}: {ev}");
            assert_eq!(ev["params"]["uri"], URI, "{i}: {ev}");
            assert!(
                ev["params"]["_meta"].is_null(),
                "the notice first: {i}: {ev}"
            );
        }
    }
    watcher
        .tool("emit_update", json!({"uri": URI, "meta": {"n": 2}}))
        .await;
    for cs in &mut holders {
        for c in cs.iter_mut() {
            let start = Instant::now();
            loop {
                let ev = c.next_event().await;
                if ev["params"]["_meta"]["n"] == 2 {
                    break;
                }
                assert!(
                    start.elapsed() < EVENT_TIMEOUT,
                    "no update after the takeover"
                );
            }
        }
    }
    // Everyone leaves: the new owner releases; nothing stays subscribed by a live
    // session, and no lease is left.
    for cs in &mut holders {
        for c in cs.iter_mut() {
            c.call("resources/unsubscribe", json!({"uri": URI})).await;
        }
    }
    let s = stats_until(&mut watcher, "the last upstream unsubscribe", |s| {
        s["counts"]["resources/unsubscribe"] == 1
    })
    .await;
    assert_eq!(
        s["subscribers"],
        json!({}),
        "no live upstream subscription is left: {s}"
    );
    assert_eq!(s["sessions"]["gone"], 1, "{s}");
    // ... and no lease is left in the bucket.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let start = Instant::now();
    while leased(&js, &fleet, URI).await {
        assert!(start.elapsed() < EVENT_TIMEOUT, "a lease is left for {URI}");
        tokio::task::yield_now().await;
    }
    drop(owner);
    drop(nats);
}

/// Whether a lease for `uri` of upstream `up` is in the fleet's leases bucket.
async fn leased(js: &async_nats::jetstream::Context, fleet: &str, uri: &str) -> bool {
    let Ok(bucket) = js
        .get_key_value(mcpmux::fleet::keys::lease_bucket(fleet))
        .await
    else {
        return false;
    };
    let kid = mcpmux::fleet::keys::key_id("up", uri);
    matches!(
        bucket.entry(kid).await,
        Ok(Some(e)) if e.operation == async_nats::jetstream::kv::Operation::Put
    )
}

/// `n` instances on `cfg`, each with one holder of [`URI`], and a watcher of the
/// upstream's stats on the last: the fleet holds one upstream subscription.
struct HeldFleet {
    _instances: Vec<Daemon>,
    holders: Vec<HttpClient>,
    watcher: HttpClient,
}

impl HeldFleet {
    async fn start(cfg: &str, n: usize) -> HeldFleet {
        let mut instances = vec![];
        for _ in 0..n {
            instances.push(Daemon::start(cfg).await);
        }
        let mut holders = vec![];
        for d in &instances {
            let mut c = vec![HttpClient::connect(&d.url, json!({})).await];
            subscribe_all(&mut c).await;
            holders.push(c.pop().unwrap());
        }
        let mut watcher = HttpClient::connect(&instances[n - 1].url, json!({})).await;
        assert_eq!(stats(&mut watcher).await["subscribers"][URI], 1);
        HeldFleet {
            _instances: instances,
            holders,
            watcher,
        }
    }

    /// Waits until the upstream counts `n` subscribers of [`URI`].
    async fn subscribers(&mut self, what: &str, n: u64) {
        stats_until(&mut self.watcher, what, |s| s["subscribers"][URI] == n).await;
    }

    /// The upstream emits an update marked `n`, and every holder gets it.
    async fn update_reaches_every_holder(&mut self, n: &str) {
        self.watcher
            .tool("emit_update", json!({"uri": URI, "meta": {"n": n}}))
            .await;
        for c in &mut self.holders {
            let start = Instant::now();
            while c.next_event().await["params"]["_meta"]["n"] != n {
                assert!(
                    start.elapsed() < EVENT_TIMEOUT,
                    "a holder missed the update {n}"
                );
            }
        }
    }
}

#[tokio::test]
async fn nats_stopped_and_restarted_instances_fall_back_and_rejoin() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &fleet_name(), &up.url);
    let mut f = HeldFleet::start(&cfg, 3).await;

    // NATS goes away: every instance holds its subscription directly.
    let port = nats.stop().await;
    f.subscribers("every instance subscribed directly", 3).await;
    f.update_reaches_every_holder("away").await;

    // NATS is back (same port): they rejoin, one subscription again, and the last
    // update reaches every holder.
    let _nats = Nats::start_on(port).await;
    f.subscribers("one subscription after the rejoin", 1).await;
    f.update_reaches_every_holder("back").await;
}

/// NATS goes away and is back before any lease tick (the lease here is far longer than
/// the test): each instance hears of the disconnection from its client at once, holds
/// its subscription directly, and an update made meanwhile reaches every holder.
#[tokio::test]
async fn a_short_nats_outage_between_ticks_is_noticed() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &fleet_name(), &up.url)
        .replace(&format!("lease_ms = {LEASE_MS}"), "lease_ms = 300000");
    let mut f = HeldFleet::start(&cfg, 2).await;
    let port = nats.stop().await;
    let _nats = Nats::start_on(port).await;
    f.subscribers("both instances subscribed directly", 2).await;
    f.update_reaches_every_holder("gap").await;
}

#[tokio::test]
async fn leases_follow_holders_across_instances() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let fleet = fleet_name() + "m";
    let cfg = fleet_config(&nats.url(), &fleet, &up.url);
    let mut instances = vec![];
    for _ in 0..3 {
        instances.push(Daemon::start(&cfg).await);
    }
    let uris = ["test://static/1", "test://static/2", "test://static/3"];
    // Two clients per instance; model: held[instance][client][uri].
    let mut clients = vec![];
    for d in &instances {
        clients.push(vec![
            HttpClient::connect(&d.url, json!({})).await,
            HttpClient::connect(&d.url, json!({})).await,
        ]);
    }
    let mut held = [[[false; 3]; 2]; 3];
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for step in 0..40 {
        let (i, c, u) = (next(3) as usize, next(2) as usize, next(3) as usize);
        let method = if held[i][c][u] {
            "resources/unsubscribe"
        } else {
            "resources/subscribe"
        };
        let r = clients[i][c].call(method, json!({"uri": uris[u]})).await;
        assert_eq!(r["result"], json!({}), "step {step}: {r}");
        held[i][c][u] = !held[i][c][u];
        // Quiet point: exactly one lease per URI held anywhere, none otherwise.
        for (k, uri) in uris.iter().enumerate() {
            let want = held.iter().any(|inst| inst.iter().any(|cl| cl[k]));
            let start = Instant::now();
            while leased(&js, &fleet, uri).await != want {
                assert!(
                    start.elapsed() < EVENT_TIMEOUT,
                    "step {step}: {uri} held = {want} but the lease says otherwise"
                );
                tokio::task::yield_now().await;
            }
        }
    }
    // Upstream: one subscription per held URI.
    let s = stats(&mut clients[0][0]).await;
    for (k, uri) in uris.iter().enumerate() {
        let want = held.iter().any(|inst| inst.iter().any(|cl| cl[k]));
        let n = s["subscribers"][uri].as_u64().unwrap_or(0);
        assert_eq!(n, u64::from(want), "{uri}: {s}");
    }
}

/// The fleet actor never waits for another instance: while a follower's read waits for
/// the owner's answer (here the test plays the owner, holds the lease, and answers the
/// read only once the follower has relayed a later update), updates still reach the
/// follower's holders. An actor that awaited the answer in its loop would relay the
/// update only after giving up on the owner (3 s), then read upstream itself: the
/// client would get the upstream's text, not the owner's.
#[tokio::test]
async fn a_follower_relays_updates_while_its_read_waits_for_the_owner() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let fleet = fleet_name() + "r";
    let kid = mcpmux::fleet::keys::key_id("up", URI);
    // The test is the owner: it holds the lease, renewing it, and listens for reads.
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc.clone());
    let leases = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: mcpmux::fleet::keys::lease_bucket(&fleet),
            history: 1,
            max_age: std::time::Duration::from_millis(LEASE_MS),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut revision = leases.create(&kid, "itest-owner".into()).await.unwrap();
    let renew = {
        let (leases, kid) = (leases.clone(), kid.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(LEASE_MS / 3));
            loop {
                tick.tick().await;
                revision = leases
                    .update(&kid, "itest-owner".into(), revision)
                    .await
                    .expect("the test keeps its lease");
            }
        })
    };
    let mut reads = nc
        .subscribe(mcpmux::fleet::keys::read_subject(&fleet, &kid))
        .await
        .unwrap();
    nc.flush().await.unwrap();

    let d = Daemon::start(&fleet_config(&nats.url(), &fleet, &up.url)).await;
    let mut holder = HttpClient::connect(&d.url, json!({})).await;
    subscribe_all(std::slice::from_mut(&mut holder)).await;
    let mut reader = HttpClient::connect(&d.url, json!({})).await;
    let s = stats(&mut reader).await;
    assert_eq!(
        s["counts"]["resources/subscribe"].as_u64().unwrap_or(0),
        0,
        "a follower: {s}"
    );

    let update = |n: u64| {
        bytes::Bytes::from(
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": URI, "_meta": {"n": n}}})
            .to_string(),
        )
    };
    let upd = mcpmux::fleet::keys::update_subject(&fleet, &kid);
    let read = reader.call("resources/read", json!({"uri": URI}));
    let owner = async {
        // The follower's read arrives; while it waits, an update is published.
        let req = tokio::time::timeout(EVENT_TIMEOUT, reads.next())
            .await
            .expect("the follower's read reaches the owner")
            .unwrap();
        assert_eq!(&req.payload[..], URI.as_bytes());
        nc.publish(upd.clone(), update(7)).await.unwrap();
        let start = Instant::now();
        loop {
            let ev = holder.next_event().await;
            if ev["params"]["_meta"]["n"] == 7 {
                break;
            }
            assert!(start.elapsed() < EVENT_TIMEOUT, "no update");
        }
        // Only now does the owner answer the read.
        let body = json!({"result": {"contents": [{"uri": URI, "text": "from the owner"}]}});
        nc.publish(req.reply.unwrap(), body.to_string().into())
            .await
            .unwrap();
    };
    let (r, ()) = tokio::join!(read, owner);
    assert_eq!(
        r["result"]["contents"][0]["text"], "from the owner",
        "the read was answered by the owner: {r}"
    );
    let s = stats(&mut reader).await;
    assert_eq!(
        s["by_uri"]["resources/read"][URI].as_u64().unwrap_or(0),
        0,
        "no upstream read: {s}"
    );
    renew.abort();
}

/// An update of a sub-resource reaches the holders of its parent URI on every
/// instance: the owner of the parent publishes it to the parent's followers.
#[tokio::test]
async fn a_sub_resource_update_reaches_the_parents_holders_on_every_instance() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &(fleet_name() + "p"), &up.url);
    let (owner, follower) = (Daemon::start(&cfg).await, Daemon::start(&cfg).await);
    let parent = "test://static/";
    let mut a = HttpClient::connect(&owner.url, json!({})).await;
    let r = a.call("resources/subscribe", json!({"uri": parent})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    status_until(&owner, "the parent owned", |f| {
        f["keys"][0]["role"] == "own"
    })
    .await;
    let mut b = HttpClient::connect(&follower.url, json!({})).await;
    let r = b.call("resources/subscribe", json!({"uri": parent})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    status_until(&follower, "the parent followed", |f| {
        f["keys"][0]["role"] == "follow"
    })
    .await;
    a.tool("emit_update", json!({"uri": URI})).await;
    for (who, c) in [
        ("the owner's holder", &mut a),
        ("the follower's holder", &mut b),
    ] {
        let ev = c.next_event().await;
        assert_eq!(
            ev["method"], "notifications/resources/updated",
            "{who}: {ev}"
        );
        assert_eq!(ev["params"]["uri"], URI, "{who}: {ev}");
    }
}

/// When the owner's upstream session ends (the server forgot it), the owner takes the
/// fleet's subscription again on the new session: updates keep reaching every holder.
#[tokio::test]
async fn the_owner_subscribes_again_after_its_upstream_session_restarts() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let cfg = fleet_config(&nats.url(), &(fleet_name() + "s"), &up.url);
    let (owner, follower) = (Daemon::start(&cfg).await, Daemon::start(&cfg).await);
    let mut a = HttpClient::connect(&owner.url, json!({})).await;
    subscribe_all(std::slice::from_mut(&mut a)).await;
    status_until(&owner, "the key owned", |f| f["keys"][0]["role"] == "own").await;
    let mut b = HttpClient::connect(&follower.url, json!({})).await;
    subscribe_all(std::slice::from_mut(&mut b)).await;
    status_until(&follower, "the key followed", |f| {
        f["keys"][0]["role"] == "follow"
    })
    .await;
    // The owner's upstream session ends, as a server restart would end it.
    a.tool("end_session", json!({})).await;
    let start = Instant::now();
    loop {
        // (Calls fail while the owner's upstream session is being made again.)
        let r = a
            .call("tools/call", json!({"name": "stats", "arguments": {}}))
            .await;
        let counts = &r["result"]["structuredContent"]["counts"];
        if counts["resources/subscribe"] == 2 {
            break;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "the owner did not subscribe again on its new session: {r}"
        );
        tokio::task::yield_now().await;
    }
    a.tool("emit_update", json!({"uri": URI, "meta": {"n": 3}}))
        .await;
    for (who, c) in [("owner", &mut a), ("follower", &mut b)] {
        let start = Instant::now();
        loop {
            let ev = c.next_event().await;
            if ev["params"]["_meta"]["n"] == 3 {
                break;
            }
            assert!(
                start.elapsed() < EVENT_TIMEOUT,
                "{who}: no update after the restart"
            );
        }
    }
}
