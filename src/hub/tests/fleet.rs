//! The hub's side of the fleet, in process: the fleet actor is played by the test (its
//! commands read from a channel, its events sent to the hub), the shared upstream
//! through the upstream command channel.

use super::*;
use crate::fleet::{FleetCmd, FleetEvent, FleetHandle};
use crate::state::ids::SubKey;

const URI: &str = "test://a";

struct FleetRig {
    rig: Rig,
    cmds: mpsc::UnboundedReceiver<FleetCmd>,
}

/// A hub whose one upstream is shared by the fleet.
async fn fleet_rig() -> FleetRig {
    let (tx, cmds) = mpsc::unbounded_channel();
    let info = InitInfo {
        protocol_version: "2025-11-25".into(),
        capabilities: json!({"resources": {"subscribe": true}}),
        ..InitInfo::default()
    };
    let shared = |tx| UpstreamSlot {
        shared: true,
        ..slot("up", tx, None)
    };
    let rig = rig_of_hub(settings(), info, shared, Some(FleetHandle::played_by(tx))).await;
    FleetRig { rig, cmds }
}

impl FleetRig {
    /// The commands the hub sent the fleet actor so far.
    async fn cmds(&mut self) -> Vec<FleetCmd> {
        self.rig.sync().await;
        let mut out = vec![];
        while let Ok(cmd) = self.cmds.try_recv() {
            out.push(cmd);
        }
        out
    }

    async fn event(&self, ev: FleetEvent) {
        self.rig.hub.fleet_events().send(ev).await.unwrap();
        self.rig.sync().await;
    }

    /// `c` holds [`URI`], and this instance owns it (its upstream subscribed).
    async fn own_held(&mut self, c: &mut Client) {
        c.send("resources/subscribe", json!({"uri": URI})).await;
        let cmds = self.cmds().await;
        assert!(
            matches!(&cmds[..], [FleetCmd::Want { key, .. }] if &*key.uri == URI),
            "{cmds:?}"
        );
        let key = SubKey::new(UpstreamId(0), URI);
        self.event(FleetEvent::Own {
            key,
            subscribe: true,
        })
        .await;
        let up = self.rig.upstream_msgs().await;
        assert_eq!(methods_of(&up), ["resources/subscribe"]);
        self.rig.answer(&up[0], json!({})).await;
        assert_eq!(c.next().await["result"], json!({}));
        let cmds = self.cmds().await;
        assert!(
            matches!(&cmds[..], [FleetCmd::Publish { update, .. }] if is_watched(update)),
            "the followers are told the owner watches the key now: {cmds:?}"
        );
    }

    /// `c` holds [`URI`] as a follower.
    async fn follow_held(&mut self, c: &mut Client) {
        c.send("resources/subscribe", json!({"uri": URI})).await;
        let cmds = self.cmds().await;
        assert!(matches!(&cmds[..], [FleetCmd::Want { .. }]), "{cmds:?}");
        let key = SubKey::new(UpstreamId(0), URI);
        self.event(FleetEvent::Follow {
            key,
            drop_upstream: false,
        })
        .await;
        assert_eq!(c.next().await["result"], json!({}));
        assert!(self.rig.upstream_msgs().await.is_empty());
    }

    /// `c` reads [`URI`]: through the owner (answered with `text`) when `via_owner`,
    /// else from this instance's cache.
    async fn read(&mut self, c: &mut Client, via_owner: bool, text: &str) {
        c.send("resources/read", json!({"uri": URI})).await;
        let cmds = self.cmds().await;
        if via_owner {
            let [FleetCmd::Read {
                key, generation, ..
            }] = &cmds[..]
            else {
                panic!("a read through the owner: {cmds:?}");
            };
            let result = json!({"contents": [{"uri": URI, "text": text}]}).to_string();
            self.event(FleetEvent::ReadDone {
                key: key.clone(),
                generation: *generation,
                outcome: Ok(result),
            })
            .await;
        } else {
            assert!(cmds.is_empty(), "read from the cache: {cmds:?}");
        }
        let r = c.next().await;
        assert_eq!(r["result"]["contents"][0]["text"], text, "{r}");
    }
}

impl FleetRig {
    /// `reader` reads [`URI`]; the upstream answers with `text` what reaches it.
    /// Returns how many reads reached the upstream.
    async fn reads_upstream(&mut self, reader: &mut Client, text: &str) -> usize {
        reader.send("resources/read", json!({"uri": URI})).await;
        let up = self.rig.upstream_msgs().await;
        for m in &up {
            let contents = json!({"contents": [{"uri": URI, "text": text}]});
            self.rig.answer(m, contents).await;
        }
        let r = reader.next().await;
        assert_eq!(r["result"]["contents"][0]["text"], text, "{r}");
        up.len()
    }
}

fn is_watched(update: &bytes::Bytes) -> bool {
    Message::parse(update).is_ok_and(|m| m.method() == Some(crate::fleet::keys::WATCHED))
}

/// A rig whose instance owns [`URI`] for other instances alone: its one local holder
/// subscribed, then left (the fleet actor keeps the key for its followers).
async fn owned_for_others() -> FleetRig {
    let mut f = fleet_rig().await;
    let mut c = f.rig.client(json!({})).await;
    f.own_held(&mut c).await;
    c.call("resources/unsubscribe", json!({"uri": URI})).await;
    f.cmds().await;
    f
}

fn updated(uri: &str) -> Message {
    Message::notification(
        "notifications/resources/updated",
        Some(&json!({ "uri": uri })),
    )
}

/// A key this instance owns is wanted again (its last local holder left, a new one
/// came) while other instances follow it: until the fleet actor answers, the owner's
/// upstream updates are still published to them.
#[tokio::test]
async fn an_owner_publishes_while_its_key_is_wanted_again() {
    let mut f = fleet_rig().await;
    let mut c = f.rig.client(json!({})).await;
    f.own_held(&mut c).await;
    c.call("resources/unsubscribe", json!({"uri": URI})).await;
    let cmds = f.cmds().await;
    assert!(matches!(&cmds[..], [FleetCmd::Release { .. }]), "{cmds:?}");
    c.send("resources/subscribe", json!({"uri": URI})).await;
    let cmds = f.cmds().await;
    assert!(matches!(&cmds[..], [FleetCmd::Want { .. }]), "{cmds:?}");
    f.rig.inject(updated(URI)).await;
    let cmds = f.cmds().await;
    assert!(
        matches!(&cmds[..], [FleetCmd::Publish { key, .. }] if &*key.uri == URI),
        "the followers hear of the update: {cmds:?}"
    );
}

/// A follower keeps the reads it got through the owner until the owner says it watches
/// the key from now on: a read the owner made before its upstream confirmed the
/// subscription may miss a change, and is read again. The holders hear nothing of it.
#[tokio::test]
async fn a_follower_drops_its_kept_reads_when_the_owner_starts_watching() {
    let mut f = fleet_rig().await;
    let mut c = f.rig.client(json!({})).await;
    f.follow_held(&mut c).await;
    f.read(&mut c, true, "v0").await;
    f.read(&mut c, false, "v0").await;
    let watched = Message::notification(crate::fleet::keys::WATCHED, Some(&json!({ "uri": URI })));
    f.event(FleetEvent::Update {
        key: SubKey::new(UpstreamId(0), URI),
        update: watched.to_bytes(),
    })
    .await;
    assert!(c.pending().is_empty(), "nothing for the holder");
    f.read(&mut c, true, "v1").await;
    f.read(&mut c, false, "v1").await;
}

/// An owner whose last local holder left keeps the key for the other instances: their
/// reads through it are kept until the key changes, as for a held key (one upstream
/// read per change for the whole fleet); once the key is let go, they are not.
#[tokio::test]
async fn an_owner_keeps_the_reads_of_a_key_it_owns_for_others_alone() {
    let mut f = owned_for_others().await;
    // The fleet actor's reads for followers come as any client's.
    let mut reader = f.rig.client(json!({})).await;
    assert_eq!(f.reads_upstream(&mut reader, "v0").await, 1);
    assert_eq!(f.reads_upstream(&mut reader, "v0").await, 0, "kept");
    f.rig.inject(updated(URI)).await;
    f.rig.sync().await;
    assert_eq!(
        f.reads_upstream(&mut reader, "v1").await,
        1,
        "read again after a change"
    );
    assert_eq!(f.reads_upstream(&mut reader, "v1").await, 0, "kept");
    f.event(FleetEvent::Unsubscribe {
        key: SubKey::new(UpstreamId(0), URI),
    })
    .await;
    let up = f.rig.upstream_msgs().await;
    assert_eq!(methods_of(&up), ["resources/unsubscribe"]);
    assert_eq!(
        f.reads_upstream(&mut reader, "v2").await,
        1,
        "not watched: not kept"
    );
    assert_eq!(
        f.reads_upstream(&mut reader, "v2").await,
        1,
        "not watched: not kept"
    );
}

/// A reload replaces the shared upstream while this instance owns a key for other
/// instances alone: the key moves to the new upstream with its lease, and the new
/// session subscribes it once ready.
#[tokio::test]
async fn a_key_owned_for_others_moves_with_a_replaced_upstream() {
    let mut f = owned_for_others().await;
    f.rig.upstream_msgs().await;
    // The changed server: a new slot, UpstreamId(1).
    let (tx, mut new_rx) = mpsc::channel(1024);
    let plan = super::super::reload::ReloadPlan {
        settings: settings(),
        removed: vec![UpstreamId(0)],
        added: vec![UpstreamSlot {
            shared: true,
            ..slot("up", tx, None)
        }],
        replaced: vec![(UpstreamId(0), 0)],
        retuned: vec![],
        order: vec![UpstreamId(1)],
    };
    f.rig.hub.reload(plan).await.unwrap();
    let cmds = f.cmds().await;
    let moved = SubKey::new(UpstreamId(1), URI);
    assert!(
        matches!(&cmds[..], [FleetCmd::Move { to, .. }] if *to == moved),
        "{cmds:?}"
    );
    let info = InitInfo {
        protocol_version: "2025-11-25".into(),
        capabilities: json!({"resources": {"subscribe": true}}),
        ..InitInfo::default()
    };
    f.rig
        .hub
        .upstream_event(UpstreamId(1), UpstreamEvent::Ready(info))
        .await
        .unwrap();
    f.rig.sync().await;
    let mut sent = vec![];
    while let Ok(cmd) = new_rx.try_recv() {
        sent.push(Message::parse(&cmd.into_bytes()).unwrap());
    }
    assert!(
        sent.iter()
            .any(|m| m.method() == Some("resources/subscribe")),
        "subscribed on the new session: {:?}",
        methods_of(&sent)
    );
}

/// A reload that removes the shared upstream gives up the leases of the keys this
/// instance owned for others alone (a follower takes over at once).
#[tokio::test]
async fn a_removed_upstreams_keys_owned_for_others_are_given_up() {
    let mut f = owned_for_others().await;
    let plan = super::super::reload::ReloadPlan {
        settings: settings(),
        removed: vec![UpstreamId(0)],
        added: vec![],
        replaced: vec![],
        retuned: vec![],
        order: vec![],
    };
    f.rig.hub.reload(plan).await.unwrap();
    let cmds = f.cmds().await;
    assert!(
        matches!(&cmds[..], [FleetCmd::Forfeit { key }] if &*key.uri == URI),
        "{cmds:?}"
    );
}

/// The shutdown drain waits for a follower's read through the owner, which has no
/// upstream request here, like any other request in flight.
#[tokio::test]
async fn the_drain_waits_for_a_read_through_the_owner() {
    let mut f = fleet_rig().await;
    let mut c = f.rig.client(json!({})).await;
    f.follow_held(&mut c).await;
    c.send("resources/read", json!({"uri": URI})).await;
    let cmds = f.cmds().await;
    let [FleetCmd::Read {
        key, generation, ..
    }] = &cmds[..]
    else {
        panic!("a read through the owner: {cmds:?}");
    };
    let hub = f.rig.hub.clone();
    let mut drain = tokio::spawn(async move { hub.drain(Duration::from_secs(600)).await });
    f.rig.sync().await;
    // Paused time: the wait below ends when the runtime is idle, long before the drain's
    // own deadline.
    tokio::time::pause();
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut drain)
            .await
            .is_err(),
        "the drain ended with a read in flight"
    );
    let result = json!({"contents": [{"uri": URI, "text": "t"}]}).to_string();
    f.event(FleetEvent::ReadDone {
        key: key.clone(),
        generation: *generation,
        outcome: Ok(result),
    })
    .await;
    assert_eq!(c.next().await["result"]["contents"][0]["text"], "t");
    assert_eq!(drain.await.unwrap().ok(), Some(0));
}
