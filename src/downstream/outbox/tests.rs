//! The outbox's policy and its batch push, without a transport.

use super::*;
use crate::protocol::RawId;
use crate::state::ids::SubKey;
use bytes::Bytes;

fn msg(kind: OutKind, text: &str) -> Outbound {
    Outbound::new(Bytes::from(text.to_owned()), kind, None)
}
fn upd(uri: &str, n: u32) -> Outbound {
    msg(
        OutKind::Coalescible(CoalesceKey::Update(SubKey::new(
            crate::state::ids::UpstreamId(0),
            uri,
        ))),
        &format!("{uri}#{n}"),
    )
}

#[test]
fn queues_in_order_below_cap() {
    let mut s = OutboxState::new(3);
    assert_eq!(s.push(upd("a", 1)), Pushed::Queued);
    assert_eq!(s.push(msg(OutKind::Response, "r")), Pushed::Queued);
    let mut out = vec![];
    s.drain_into(&mut out);
    assert_eq!(out.len(), 2);
    assert!(s.is_empty());
}

#[test]
fn full_queue_coalesces_updates_per_uri_keeping_newest() {
    let mut s = OutboxState::new(2);
    s.push(upd("x", 0));
    s.push(upd("y", 0));
    assert_eq!(s.push(upd("a", 1)), Pushed::Coalesced);
    assert_eq!(s.push(upd("b", 1)), Pushed::Coalesced);
    assert_eq!(s.push(upd("a", 2)), Pushed::Coalesced);
    assert_eq!(s.len(), 4);
    let mut out = vec![];
    s.drain_into(&mut out);
    let texts: Vec<_> = out
        .iter()
        .map(|o| String::from_utf8(o.bytes.to_vec()).unwrap())
        .collect();
    assert_eq!(texts, vec!["x#0", "y#0", "a#2", "b#1"]);
    assert_eq!(s.merged, 1);
    assert_eq!(s.peak, 4);
}

#[test]
fn full_queue_drops_plain_notifications() {
    let mut s = OutboxState::new(1);
    s.push(msg(OutKind::Notification, "n1"));
    assert_eq!(s.push(msg(OutKind::Notification, "n2")), Pushed::Dropped);
    assert_eq!(s.dropped, 1);
}

#[test]
fn response_that_cannot_be_queued_closes() {
    let mut s = OutboxState::new(1);
    s.push(msg(OutKind::Notification, "n1"));
    assert_eq!(
        s.push(msg(OutKind::Response, "r")),
        Pushed::Closed(CloseReason::QueueFull)
    );
    assert_eq!(s.push(upd("a", 1)), Pushed::Closed(CloseReason::QueueFull));
    assert!(s.is_empty());
}

#[test]
fn too_many_distinct_coalesced_keys_closes() {
    let mut s = OutboxState::new(2);
    s.push(upd("q1", 0));
    s.push(upd("q2", 0));
    s.push(upd("a", 0));
    s.push(upd("b", 0));
    assert_eq!(
        s.push(upd("c", 0)),
        Pushed::Closed(CloseReason::CoalesceOverflow)
    );
}

#[test]
fn a_batch_is_queued_in_order_under_the_same_policy() {
    let ob = Outbox::new(3);
    let mut batch = vec![upd("a", 1), msg(OutKind::Response, "r"), upd("a", 2)];
    // Empty before: the writer must be woken.
    assert_eq!(ob.push_all_deferred(&mut batch), (None, true));
    assert!(batch.is_empty());
    // Not empty: no wake-up is due; past the cap an update coalesces.
    let mut more = vec![upd("b", 3)];
    assert_eq!(ob.push_all_deferred(&mut more), (None, false));
    assert_eq!(ob.merged(), 0);
    let mut out = vec![];
    ob.drain(&mut out).unwrap();
    let texts: Vec<_> = out.iter().map(|o| o.bytes.clone()).collect();
    assert_eq!(texts, ["a#1", "r", "a#2", "b#3"]);
    // A response that finds the queue full closes it; the rest is not queued.
    let mut full = vec![upd("x", 0), upd("y", 0), upd("z", 0)];
    ob.push_all_deferred(&mut full);
    let mut refused = vec![msg(OutKind::Response, "r2"), upd("w", 0)];
    assert_eq!(
        ob.push_all_deferred(&mut refused),
        (Some(CloseReason::QueueFull), true)
    );
    assert!(ob.is_closed());
}

#[test]
fn memory_stays_bounded_under_a_flood() {
    let mut s = OutboxState::new(8);
    for i in 0..10_000 {
        s.push(upd(&format!("u{}", i % 4), i));
    }
    assert!(s.len() <= 8 + 4);
    assert!(s.closed().is_none());
}

#[tokio::test]
async fn outbox_wakes_the_writer() {
    let ob = Outbox::new(4);
    let ob2 = ob.clone();
    let t = tokio::spawn(async move {
        ob2.ready().await;
        let mut out = vec![];
        ob2.drain(&mut out).unwrap();
        out.len()
    });
    ob.push(upd("a", 1));
    assert_eq!(t.await.unwrap(), 1);
    ob.close(CloseReason::Closed);
    let mut out = vec![];
    assert_eq!(ob.drain(&mut out), Err(CloseReason::Closed));
}

#[test]
fn a_listen_update_is_tagged_once_for_every_stream_of_its_listen_id() {
    let plain = Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x://1"}}"#,
    );
    let id = RawId::parse("\"listen:0\"").unwrap();
    let o = Outbound::new(plain.clone(), OutKind::Notification, Some(id));
    let (a, b) = (o.clone().listen_bytes(), o.listen_bytes());
    // The same allocation: the second stream reuses the first one's tagging.
    assert_eq!(a.as_ptr(), b.as_ptr());
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(
        v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen:0"
    );
    assert_eq!(v["params"]["uri"], "x://1");
    // Related to no listen: the plain bytes.
    let p = Outbound::new(plain.clone(), OutKind::Notification, None);
    assert_eq!(p.listen_bytes(), plain);
}

/// On an outbox several clients share (a stdio connection's session and its listens),
/// each holder's copy of an update is its own pending entry: one recipient's copy must
/// neither replace nor be swallowed by another's.
#[test]
fn full_shared_queue_coalesces_per_recipient() {
    let key = || {
        OutKind::Coalescible(CoalesceKey::Update(SubKey::new(
            crate::state::ids::UpstreamId(0),
            "x",
        )))
    };
    let to = |related: Option<u64>, n: u32| {
        Outbound::new(
            Bytes::from(format!("x#{n}")),
            key(),
            related.map(RawId::from_u64),
        )
    };
    let mut s = OutboxState::new(1);
    s.push(to(None, 0));
    // The newest queued message is the session's copy: the listen's is still kept.
    assert_eq!(s.push(to(Some(7), 1)), Pushed::Coalesced);
    // The session's next copy is already said by its queued one, and leaves the
    // listen's pending copy alone...
    assert_eq!(s.push(to(None, 2)), Pushed::Coalesced);
    // ...and the listen's next copy replaces only its own.
    assert_eq!(s.push(to(Some(7), 3)), Pushed::Coalesced);
    let mut out = vec![];
    s.drain_into(&mut out);
    let got: Vec<_> = out
        .iter()
        .map(|o| {
            let text = String::from_utf8(o.bytes.to_vec()).unwrap();
            (o.related.as_ref().map(|r| r.as_json().to_owned()), text)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (None, "x#0".to_owned()),
            (Some("7".to_owned()), "x#3".to_owned()),
        ]
    );
}

fn texts_of(out: &[Outbound]) -> Vec<String> {
    out.iter()
        .map(|o| String::from_utf8(o.bytes.to_vec()).unwrap())
        .collect()
}

#[test]
fn a_run_with_room_is_one_shared_entry_and_drains_either_way() {
    let run = Run::new(vec![upd("a", 1), upd("a", 2), upd("b", 1)]).unwrap();
    let array = run.as_slice().as_ptr();
    let ob = Outbox::new(4);
    assert_eq!(
        ob.push_run_deferred(run.clone()),
        (None, true),
        "empty before: the writer is woken"
    );
    assert_eq!(ob.len(), 3, "a run counts each of its messages");
    let mut entries = vec![];
    ob.drain_entries(&mut entries).unwrap();
    assert_eq!(entries.len(), 1, "one entry");
    assert!(
        std::ptr::eq(entries[0].as_slice().as_ptr(), array),
        "the hub's array itself, not a copy"
    );
    // The same again, drained message by message.
    ob.push_run_deferred(run);
    ob.push(msg(OutKind::Response, "r"));
    let mut out = vec![];
    ob.drain(&mut out).unwrap();
    assert_eq!(texts_of(&out), ["a#1", "a#2", "b#1", "r"]);
    assert!(ob.is_empty());
}

#[test]
fn a_run_without_room_is_queued_message_by_message_under_the_policy() {
    let mut s = OutboxState::new(3);
    s.push(upd("x", 0));
    s.push(upd("y", 0));
    // One slot left: "a#1" is queued, the rest coalesce per URI.
    let run = Run::new(vec![upd("a", 1), upd("b", 1), upd("b", 2), upd("c", 1)]);
    assert_eq!(s.push_run(run.unwrap()), None);
    assert_eq!(s.merged, 1);
    let mut out = vec![];
    s.drain_into(&mut out);
    assert_eq!(texts_of(&out), ["x#0", "y#0", "a#1", "b#2", "c#1"]);
    // A closed outbox takes nothing.
    let mut s = OutboxState::new(1);
    s.push(msg(OutKind::Notification, "n"));
    s.push(msg(OutKind::Response, "r"));
    let run = Run::new(vec![upd("a", 1)]).unwrap();
    assert_eq!(s.push_run(run), Some(CloseReason::QueueFull));
    assert!(s.is_empty());
}

#[test]
fn an_update_after_a_run_coalesces_with_the_runs_last_message() {
    let mut s = OutboxState::new(2);
    let run = Run::new(vec![upd("b", 1), upd("a", 1)]).unwrap();
    assert_eq!(s.push_run(run), None);
    assert_eq!(s.push(upd("a", 2)), Pushed::Coalesced);
    let mut out = vec![];
    s.drain_into(&mut out);
    assert_eq!(
        texts_of(&out),
        ["b#1", "a#1"],
        "the queued one says the same"
    );
}

/// The mark that a shared outbox's request ended is queued even when the queue is full
/// (it closes nothing), and takes the request's pending coalesced copies with it: those
/// would be written after the mark, as if a later request of the same id had them.
#[test]
fn an_ended_mark_is_queued_past_the_bound_and_takes_its_requests_pending_copies() {
    let to = |related: Option<u64>, n: u32| {
        let kind = OutKind::Coalescible(CoalesceKey::Update(SubKey::new(
            crate::state::ids::UpstreamId(0),
            "x",
        )));
        Outbound::new(
            Bytes::from(format!("x#{n}")),
            kind,
            related.map(RawId::from_u64),
        )
    };
    let mut s = OutboxState::new(2);
    s.push(to(None, 0));
    s.push(msg(OutKind::Response, "r"));
    assert_eq!(s.push(to(Some(7), 1)), Pushed::Coalesced);
    assert_eq!(s.push(to(Some(8), 2)), Pushed::Coalesced);
    let end = Outbound::new(Bytes::new(), OutKind::Ended, Some(RawId::from_u64(7)));
    assert_eq!(s.push(end), Pushed::Queued);
    let mut out = vec![];
    s.drain_into(&mut out);
    let got: Vec<_> = out
        .iter()
        .map(|o| {
            (
                o.kind.clone(),
                o.related.as_ref().map(|r| r.as_json().to_owned()),
            )
        })
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(texts_of(&out[..2]), ["x#0", "r"]);
    assert_eq!(got[2], (OutKind::Ended, Some("7".to_owned())));
    assert_eq!(
        texts_of(&out[3..]),
        ["x#2"],
        "the other request's copy stays"
    );
    assert!(s.is_empty());
    // Past the bound, but not without one: at twice it, a mark closes the outbox.
    let end = || Outbound::new(Bytes::new(), OutKind::Ended, Some(RawId::from_u64(9)));
    for _ in 0..4 {
        assert_eq!(s.push(end()), Pushed::Queued);
    }
    assert_eq!(s.push(end()), Pushed::Closed(CloseReason::QueueFull));
}
