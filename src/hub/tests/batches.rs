//! A stdio server's batch of messages (`UpstreamEvent::Messages`): handled over as
//! many turns as it takes, in order, before anything else from the upstreams.

use super::*;
use crate::downstream::outbox::Queued;

fn update(n: u64) -> Message {
    Message::notification(
        "notifications/resources/updated",
        Some(&json!({"uri": "test://a", "_meta": {"n": n}})),
    )
}

/// A client of `r` holding `test://a`, its outbox deep enough for `cap` messages.
async fn holder(r: &mut Rig, cap: usize) -> Client {
    let mut c = r.client_on(Outbox::new(cap), json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    let up = r.upstream_msgs().await;
    assert_eq!(methods_of(&up), vec!["resources/subscribe"]);
    r.answer(&up[0], json!({})).await;
    assert_eq!(c.next().await["result"], json!({}));
    c
}

/// Another client of `r` holding `test://a`, which the upstream already holds.
async fn another_holder(r: &Rig, cap: usize) -> Client {
    let mut c = r.client_on(Outbox::new(cap), json!({})).await;
    c.send("resources/subscribe", json!({"uri": "test://a"}))
        .await;
    assert_eq!(c.next().await["result"], json!({}), "held upstream already");
    c
}

/// Hands `r`'s hub one batch of `count` updates and waits until it handled it.
async fn burst(r: &Rig, count: u64) {
    let batch: Vec<Message> = (0..count).map(update).collect();
    r.hub
        .upstream_event(UpstreamId(0), UpstreamEvent::Messages(batch))
        .await
        .unwrap();
    r.sync().await;
}

/// The `_meta.n` of every update queued for `c`, waiting until `count` came.
async fn updates(c: &Client, count: usize) -> Vec<u64> {
    let mut seen = vec![];
    let mut out = vec![];
    while seen.len() < count {
        c.outbox.drain(&mut out).unwrap();
        seen.extend(out.drain(..).map(|o| {
            let v: Value = serde_json::from_slice(&o.bytes).unwrap();
            v["params"]["_meta"]["n"].as_u64().unwrap()
        }));
        if seen.len() < count {
            tokio::time::timeout(Duration::from_secs(10), c.outbox.ready())
                .await
                .expect("the rest of the updates");
        }
    }
    seen
}

#[tokio::test]
async fn a_batch_longer_than_a_turn_keeps_its_order_before_later_messages() {
    // One holder: a turn ends after about TURN_PUSHES updates, so this batch takes two turns,
    // and the update sent after it waits in the hub's inbox meanwhile. It must not
    // overtake the batch's rest.
    let mut r = rig().await;
    let total = TURN_PUSHES + 100;
    let c = holder(&mut r, total + 10).await;
    let batch: Vec<Message> = (0..total as u64).map(update).collect();
    r.hub
        .upstream_event(UpstreamId(0), UpstreamEvent::Messages(batch))
        .await
        .unwrap();
    r.inject(update(total as u64)).await;
    let seen = updates(&c, total + 1).await;
    assert!(
        seen.iter().copied().eq(0..=total as u64),
        "out of order: {:?}",
        seen.windows(2).find(|w| w[1] != w[0] + 1)
    );
    assert_eq!(r.hub.stats().await.unwrap().coalesced, 0);
}

#[tokio::test]
async fn each_message_of_a_batch_is_handled_as_if_sent_alone() {
    // Updates, a response to a client's request and a log message in one batch: each
    // reaches whom it would have reached alone, in the order the server wrote them.
    let mut r = rig().await;
    let mut c = holder(&mut r, 64).await;
    c.send("resources/read", json!({"uri": "test://a"})).await;
    let read = r.upstream_msgs().await;
    assert_eq!(methods_of(&read), vec!["resources/read"]);
    let answer = Message::response(read[0].id().unwrap(), &json!({"contents": []}));
    let batch = vec![update(1), answer, update(2)];
    r.hub
        .upstream_event(UpstreamId(0), UpstreamEvent::Messages(batch))
        .await
        .unwrap();
    r.sync().await;
    let got = c.pending();
    let shape: Vec<String> = got
        .iter()
        .map(|m| match m["params"]["_meta"]["n"].as_u64() {
            Some(n) => format!("u{n}"),
            None => format!("answer {}", m["result"]),
        })
        .collect();
    assert_eq!(shape, ["u1", "answer {\"contents\":[]}", "u2"]);
}

#[tokio::test]
async fn a_batch_of_a_removed_upstream_is_dropped() {
    // An id the hub does not know (as after a reload removed the server): nothing of
    // the batch reaches anyone, and the hub goes on.
    let mut r = rig().await;
    let c = holder(&mut r, 64).await;
    r.hub
        .upstream_event(
            UpstreamId(7),
            UpstreamEvent::Messages(vec![update(1), update(2)]),
        )
        .await
        .unwrap();
    r.inject(update(3)).await;
    assert_eq!(updates(&c, 1).await, [3]);
}

#[tokio::test]
async fn the_sessions_holding_a_uri_share_one_run_of_a_bursts_updates() {
    // Ten updates in one batch reach both holders in one turn: each outbox gets one
    // entry, the same array (one reference per holder, not one per update); a lone
    // update later is queued as itself.
    let mut r = rig().await;
    let a = holder(&mut r, 64).await;
    let b = another_holder(&r, 64).await;
    burst(&r, 10).await;
    let (mut of_a, mut of_b) = (vec![], vec![]);
    a.outbox.drain_entries(&mut of_a).unwrap();
    b.outbox.drain_entries(&mut of_b).unwrap();
    assert_eq!((of_a.len(), of_b.len()), (1, 1), "one entry each");
    let (ra, rb) = (of_a[0].as_slice(), of_b[0].as_slice());
    assert_eq!(ra.len(), 10);
    assert!(std::ptr::eq(ra.as_ptr(), rb.as_ptr()), "one shared run");
    let n: Vec<u64> = ra
        .iter()
        .map(|o| {
            serde_json::from_slice::<Value>(&o.bytes).unwrap()["params"]["_meta"]["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(n.iter().copied().eq(0..10), "{n:?}");
    r.inject(update(10)).await;
    r.sync().await;
    a.outbox.drain_entries(&mut of_a).unwrap();
    assert!(
        matches!(of_a[1..], [Queued::One(_)]),
        "a lone update: {:?}",
        &of_a[1..]
    );
}

#[tokio::test]
async fn a_burst_to_many_holders_takes_one_turn_as_to_a_few() {
    // A turn's budget counts a held fan-out once per holder plus once per update: 2,000
    // updates to 90 holders fit one turn, so each holder gets them as one run. (Counted
    // per delivery, a turn ended every 45 updates: 45 runs to every holder, each a
    // lock, a push and a writer's wake.)
    let mut r = rig().await;
    let first = holder(&mut r, 2048).await;
    let mut all = vec![first];
    for _ in 1..90 {
        all.push(another_holder(&r, 2048).await);
    }
    burst(&r, 2000).await;
    for c in &all {
        let mut entries = vec![];
        c.outbox.drain_entries(&mut entries).unwrap();
        let lens: Vec<usize> = entries.iter().map(Queued::len).collect();
        assert_eq!(lens, [2000], "one run of the whole burst");
    }
}

#[tokio::test]
async fn a_burst_to_many_listen_ids_is_split_by_the_copies_it_makes() {
    // Each update makes a tagged copy per listen id among its holders: with 40 ids a
    // turn's budget holds about a hundred updates, not thousands, so one turn never
    // makes millions of copies. Every listen still gets every update, in order.
    let mut r = rig().await;
    let session = holder(&mut r, 4096).await;
    let mut listens = vec![];
    for id in 1..=40u64 {
        let outbox = Outbox::new(4096);
        let kind = stateless_kind(None);
        let client = r.hub.clients().open(outbox.clone(), kind).await.unwrap();
        let params = json!({"notifications": {"resourceSubscriptions": ["test://a"]}});
        let listen = Message::request(&RawId::from_u64(id), "subscriptions/listen", Some(&params));
        r.hub.client_message(client, listen).await.unwrap();
        r.sync().await;
        let mut ack = vec![];
        outbox.drain(&mut ack).unwrap();
        assert_eq!(ack.len(), 1, "the acknowledgement: {ack:?}");
        listens.push(outbox);
    }
    // Not through `burst`: its wait for the hub, if handled first, takes the whole
    // batch at once. The first turn is the hub's own once the first run is queued.
    let batch: Vec<Message> = (0..2000).map(update).collect();
    r.hub
        .upstream_event(UpstreamId(0), UpstreamEvent::Messages(batch))
        .await
        .unwrap();
    while listens[0].is_empty() {
        tokio::time::timeout(Duration::from_secs(10), listens[0].ready())
            .await
            .expect("the first turn's run");
    }
    r.sync().await;
    for outbox in &listens {
        let mut entries = vec![];
        outbox.drain_entries(&mut entries).unwrap();
        // The first turn's share: about 4,096 ÷ 41 updates (the rest may come in one
        // run: the test's wait for the hub takes what is left at once).
        let first = entries[0].len();
        assert!(
            (50..=128).contains(&first),
            "the first turn held {first} updates"
        );
        let mut n = vec![];
        for e in &entries {
            for o in e.as_slice() {
                let v: Value = serde_json::from_slice(&o.bytes).unwrap();
                n.push(v["params"]["_meta"]["n"].as_u64().unwrap());
            }
        }
        assert!(n.iter().copied().eq(0..2000), "every update, in order");
    }
    let mut entries = vec![];
    session.outbox.drain_entries(&mut entries).unwrap();
    assert_eq!(entries.iter().map(Queued::len).sum::<usize>(), 2000);
}
