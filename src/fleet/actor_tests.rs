//! Unit tests of the fleet actor's decisions that need no NATS server: an actor built
//! without a connection (as when NATS is unreachable) answers the hub's commands with
//! the documented roles (direct, and the "holders are back" answers of owned and
//! followed keys), keeps its two key maps in step, relays updates only for followed
//! keys, reports a read it cannot send to an owner as a fleet failure (so the hub reads
//! itself), and lists only known owners in its view.
//!
//! Not covered here (each needs a live `kv::Store`/`async_nats::Client`, so a real
//! nats-server; `tests/fleet.rs` runs them): taking a free lease, following a taken
//! one, renewals by compare-and-set, the takeover of a lease gone, releasing an idle
//! key no instance is interested in, and the transitions on losing NATS.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::*;
use crate::state::ids::UpstreamId;

/// An actor with no NATS connection, and the receiving end of its events.
fn actor() -> (FleetActor, mpsc::Receiver<FleetEvent>) {
    let (events, rx) = mpsc::channel(64);
    let (hub_tx, _hub_rx) = mpsc::channel(1);
    let (inbound, _nats_rx) = mpsc::channel(1);
    let actor = FleetActor {
        cfg: FleetConfig {
            nats: "nats://127.0.0.1:1".into(),
            name: "unit".into(),
            lease_ms: 1_500,
            token_env: None,
        },
        instance: "iself".into(),
        events,
        clients: ClientLink::new(hub_tx),
        conn: None,
        keys: HashMap::new(),
        kids: HashMap::new(),
        reader: None,
        inbound,
        presence: Bytes::new(),
        connection: 0,
    };
    (actor, rx)
}

fn key(upstream: usize, uri: &str) -> SubKey {
    SubKey {
        upstream: UpstreamId(upstream),
        uri: Arc::from(uri),
    }
}

fn want(k: &SubKey, upstream_name: &str) -> FleetCmd {
    FleetCmd::Want {
        key: k.clone(),
        upstream_name: upstream_name.into(),
    }
}

/// Every event sent so far.
fn drain(rx: &mut mpsc::Receiver<FleetEvent>) -> Vec<FleetEvent> {
    let mut out = vec![];
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn update_message(subject: String) -> async_nats::Message {
    async_nats::Message {
        subject: subject.into(),
        reply: None,
        payload: Bytes::from_static(b"{\"uri\":\"x\"}"),
        headers: None,
        status: None,
        description: None,
        length: 0,
    }
}

#[tokio::test]
async fn without_nats_a_wanted_key_is_held_directly_and_subscribed_once() {
    let (mut a, mut rx) = actor();
    let k = key(0, "test://a");
    a.on_cmd(want(&k, "files")).await;
    let ev = drain(&mut rx);
    assert!(
        matches!(&ev[..], [FleetEvent::Direct { key, subscribe: true }] if *key == k),
        "{ev:?}"
    );
    let kid = keys::key_id("files", "test://a");
    assert_eq!(a.kids.get(&k), Some(&kid));
    assert_eq!(a.keys[&kid].role, Role::Direct);
    assert_eq!(a.keys[&kid].owner, None);

    // Wanted again (holders came back before the release reached the actor): still
    // direct, and the hub already holds the subscription.
    a.on_cmd(want(&k, "files")).await;
    let ev = drain(&mut rx);
    assert!(
        matches!(
            &ev[..],
            [FleetEvent::Direct {
                subscribe: false,
                ..
            }]
        ),
        "{ev:?}"
    );
    assert_eq!((a.keys.len(), a.kids.len()), (1, 1));
}

/// A reload replaced the upstream (same name, new hub id) while this instance owned
/// the key for other instances: the new upstream's want moves the key to its hub key,
/// and the new session is told to subscribe.
#[tokio::test]
async fn a_key_wanted_under_a_replaced_upstream_moves_to_it() {
    let (mut a, mut rx) = actor();
    let (old, new) = (key(0, "test://a"), key(3, "test://a"));
    a.on_cmd(want(&old, "files")).await;
    drain(&mut rx);
    let kid = keys::key_id("files", "test://a");
    a.keys.get_mut(&kid).unwrap().role = Role::Own {
        revision: 1,
        idle: true,
    };
    a.on_cmd(want(&new, "files")).await;
    let ev = drain(&mut rx);
    assert!(
        matches!(&ev[..], [FleetEvent::Own { key, subscribe: true }] if *key == new),
        "{ev:?}"
    );
    assert_eq!(a.keys[&kid].key, new);
    assert_eq!(a.kids.get(&new), Some(&kid));
    assert!(!a.kids.contains_key(&old));
}

/// A reload moved an owned key to a new hub key (`Move`), or removed its upstream
/// (`Forfeit`): the key is known by its new hub key, then forgotten.
#[tokio::test]
async fn a_moved_key_keeps_its_role_and_a_forfeited_one_is_forgotten() {
    let (mut a, mut rx) = actor();
    let (old, new) = (key(0, "test://a"), key(2, "test://a"));
    a.on_cmd(want(&old, "files")).await;
    drain(&mut rx);
    let kid = keys::key_id("files", "test://a");
    let owned = Role::Own {
        revision: 1,
        idle: true,
    };
    a.keys.get_mut(&kid).unwrap().role = owned;
    a.on_cmd(FleetCmd::Move {
        from: old.clone(),
        to: new.clone(),
    })
    .await;
    assert!(drain(&mut rx).is_empty(), "nothing to tell the hub");
    assert_eq!(a.keys[&kid].key, new);
    assert_eq!(a.keys[&kid].role, owned, "still owned, still idle");
    assert_eq!(a.kids.get(&new), Some(&kid));
    assert!(!a.kids.contains_key(&old));
    a.on_cmd(FleetCmd::Forfeit { key: new }).await;
    assert!(a.keys.is_empty() && a.kids.is_empty());
}

#[tokio::test]
async fn releasing_a_direct_key_unsubscribes_and_forgets_it() {
    let (mut a, mut rx) = actor();
    let k = key(0, "test://a");
    a.on_cmd(want(&k, "files")).await;
    drain(&mut rx);
    a.on_cmd(FleetCmd::Release { key: k.clone() }).await;
    let ev = drain(&mut rx);
    assert!(
        matches!(&ev[..], [FleetEvent::Unsubscribe { key }] if *key == k),
        "{ev:?}"
    );
    assert!(a.keys.is_empty() && a.kids.is_empty());

    // A key never wanted (or already released): nothing happens.
    a.on_cmd(FleetCmd::Release { key: k }).await;
    assert!(drain(&mut rx).is_empty());
}

#[tokio::test]
async fn the_same_uri_of_two_upstreams_is_two_keys() {
    let (mut a, mut rx) = actor();
    let (k0, k1) = (key(0, "test://a"), key(1, "test://a"));
    a.on_cmd(want(&k0, "files")).await;
    a.on_cmd(want(&k1, "notes")).await;
    assert_eq!(drain(&mut rx).len(), 2);
    assert_eq!(a.keys.len(), 2);
    assert_ne!(a.kids[&k0], a.kids[&k1]);
    a.on_cmd(FleetCmd::Release { key: k0 }).await;
    assert_eq!(a.keys.len(), 1);
    assert!(a.keys.contains_key(&a.kids[&k1]));
}

#[tokio::test]
async fn holders_back_on_an_owned_or_followed_key_keep_its_role() {
    let (mut a, mut rx) = actor();
    let (owned, followed) = (key(0, "test://own"), key(0, "test://follow"));
    a.on_cmd(want(&owned, "files")).await;
    a.on_cmd(want(&followed, "files")).await;
    drain(&mut rx);
    let (ko, kf) = (a.kids[&owned].clone(), a.kids[&followed].clone());
    a.keys.get_mut(&ko).unwrap().role = Role::Own {
        revision: 7,
        idle: true,
    };
    a.keys.get_mut(&kf).unwrap().role = Role::Follow;

    a.on_cmd(want(&owned, "files")).await;
    a.on_cmd(want(&followed, "files")).await;
    let ev = drain(&mut rx);
    assert!(
        matches!(
            &ev[..],
            [
                FleetEvent::Own {
                    subscribe: false,
                    ..
                },
                FleetEvent::Follow {
                    drop_upstream: false,
                    ..
                }
            ]
        ),
        "{ev:?}"
    );
    assert_eq!(
        a.keys[&ko].role,
        Role::Own {
            revision: 7,
            idle: false
        },
        "an owned key with holders again is no longer idle (same lease revision)"
    );
}

#[tokio::test]
async fn an_owned_key_released_stays_owned_and_idle_until_interest_is_checked() {
    let (mut a, mut rx) = actor();
    let k = key(0, "test://own");
    a.on_cmd(want(&k, "files")).await;
    drain(&mut rx);
    let kid = a.kids[&k].clone();
    a.keys.get_mut(&kid).unwrap().role = Role::Own {
        revision: 3,
        idle: false,
    };
    a.on_cmd(FleetCmd::Release { key: k }).await;
    // Without NATS it cannot ask whether another instance is interested: it keeps the
    // lease (idle) and tells the hub nothing yet.
    assert!(drain(&mut rx).is_empty());
    assert_eq!(
        a.keys[&kid].role,
        Role::Own {
            revision: 3,
            idle: true
        }
    );
}

#[tokio::test]
async fn updates_are_relayed_for_followed_keys_only() {
    let (mut a, mut rx) = actor();
    let (followed, direct) = (key(0, "test://f"), key(0, "test://d"));
    a.on_cmd(want(&followed, "files")).await;
    a.on_cmd(want(&direct, "files")).await;
    drain(&mut rx);
    let kf = a.kids[&followed].clone();
    let kd = a.kids[&direct].clone();
    a.keys.get_mut(&kf).unwrap().role = Role::Follow;

    let subject = |kid: &str| keys::update_subject(&a.cfg.name, kid);
    let (sf, sd) = (subject(&kf), subject(&kd));
    a.on_inbound(FleetInbound::Update(update_message(sf))).await;
    a.on_inbound(FleetInbound::Update(update_message(sd))).await;
    a.on_inbound(FleetInbound::Update(update_message(
        "mcpmux.unit.upd.unknown".into(),
    )))
    .await;
    let ev = drain(&mut rx);
    assert!(
        matches!(&ev[..], [FleetEvent::Update { key, update }]
            if *key == followed && update.as_ref() == b"{\"uri\":\"x\"}"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn publishing_or_losing_nats_without_a_connection_does_nothing() {
    let (mut a, mut rx) = actor();
    let k = key(0, "test://a");
    a.on_cmd(want(&k, "files")).await;
    drain(&mut rx);
    a.on_cmd(FleetCmd::Publish {
        key: k.clone(),
        update: Bytes::from_static(b"{}"),
    })
    .await;
    a.on_inbound(FleetInbound::Lost).await;
    a.maintain().await;
    assert!(drain(&mut rx).is_empty());
    assert_eq!(a.keys[&a.kids[&k]].role, Role::Direct);
}

#[tokio::test]
async fn a_read_with_no_owner_to_ask_fails_as_a_fleet_failure() {
    let (mut a, mut rx) = actor();
    let k = key(0, "test://a");
    a.on_cmd(want(&k, "files")).await;
    drain(&mut rx);
    a.on_cmd(FleetCmd::Read {
        key: k.clone(),
        exposed_uri: "test://a".into(),
        generation: 42,
    })
    .await;
    // The read is a task of its own: wait (bounded) for its answer.
    let ev = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a ReadDone")
        .expect("the channel is open");
    let FleetEvent::ReadDone {
        key,
        generation,
        outcome,
    } = ev
    else {
        panic!("not a ReadDone: {ev:?}");
    };
    assert_eq!((key, generation), (k, 42));
    let err: serde_json::Value = serde_json::from_str(&outcome.unwrap_err()).unwrap();
    assert!(
        err["fleet"].is_string(),
        "the hub reads itself on a `fleet` error: {err}"
    );
}

#[tokio::test]
async fn the_view_lists_only_known_owners() {
    let (mut a, mut rx) = actor();
    let (known, unknown) = (key(0, "test://k"), key(0, "test://u"));
    a.on_cmd(want(&known, "files")).await;
    a.on_cmd(want(&unknown, "files")).await;
    drain(&mut rx);
    let kid = a.kids[&known].clone();
    a.keys.get_mut(&kid).unwrap().owner = Some("iother".into());
    a.view(vec!["iother".into(), "iself".into()]).await;
    let ev = drain(&mut rx);
    let [FleetEvent::View {
        instance,
        instances,
        owners,
    }] = &ev[..]
    else {
        panic!("{ev:?}");
    };
    assert_eq!(instance, "iself");
    assert_eq!(instances, &["iother", "iself"]);
    assert_eq!(owners, &[(known, "iother".to_owned())]);
}
