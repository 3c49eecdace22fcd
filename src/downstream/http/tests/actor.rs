//! The session actor without HTTP: backpressure and routing rules.

use super::*;
use crate::downstream::lane;
use http_body::Body;

/// Starts a bare session actor (no HTTP) on the fake hub.
fn actor(outbox_cap: usize) -> (lane::Sender<SessionCmd>, Arc<Outbox>, Closed) {
    let (hub, closed) = fake_hub();
    let outbox = Outbox::new(outbox_cap);
    let (fut, cmd) = session::start(session::SessionSpawn {
        id: "s".into(),
        client: ClientId(7),
        view: Default::default(),
        outbox: outbox.clone(),
        hub,
        sessions: Default::default(),
        idle: IDLE,
        replay_events: 8,
        shutdown: CancellationToken::new(),
    });
    tokio::spawn(fut);
    (cmd, outbox, closed)
}

fn outbound(kind: OutKind, related: Option<u64>, text: &str) -> Outbound {
    Outbound::new(
        bytes::Bytes::from(text.to_owned()),
        kind,
        related.map(RawId::from_u64),
    )
}

/// Attaches a plain GET stream; its body, which drains the outbox when polled.
async fn attach_get(
    cmd: &lane::Sender<SessionCmd>,
) -> impl Body<Data = bytes::Bytes, Error = std::convert::Infallible> + Unpin {
    let (tx, _unused) = lane::channel(1);
    let (ack, acked) = tokio::sync::oneshot::channel();
    cmd.send(SessionCmd::Get {
        last_event_id: None,
        tx,
        ack,
    })
    .await
    .unwrap();
    match acked.await.unwrap() {
        session::GetAck::Stream(body) => body,
        other => panic!("a plain GET got {other:?}"),
    }
}

/// The next chunk of events of a GET body (keep-alive comments aside); `None` when it
/// ended.
async fn next_chunk<B>(body: &mut B) -> Option<bytes::Bytes>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    loop {
        let frame = tokio::time::timeout(WAIT, body.frame()).await.unwrap()?;
        let data = frame.unwrap().into_data().unwrap();
        if &data[..] != crate::downstream::http::sse::KEEP_ALIVE_FRAME {
            return Some(data);
        }
    }
}

/// Yields until `cond` holds (the actor runs on the same thread between yields).
async fn until(mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

#[tokio::test]
async fn an_unread_get_stream_leaves_the_outbox_and_a_hub_close_ends_the_session() {
    let (cmd, outbox, mut closed) = actor(2);
    let mut body = attach_get(&cmd).await;
    outbox.push(outbound(OutKind::Notification, None, "a"));
    assert_eq!(
        &next_chunk(&mut body).await.unwrap()[..],
        b"id: 1\ndata: a\n\n"
    );
    // The body is not polled now (its client does not read: hyper polls a body only
    // when it can write): nothing drains the outbox, which keeps its policy.
    outbox.push(outbound(OutKind::Notification, None, "b"));
    outbox.push(outbound(OutKind::Notification, None, "c"));
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(outbox.len(), 2);
    // A response that cannot be queued makes the hub close the outbox: the session
    // ends though the body is not polled, and then the body ends too.
    outbox.push(outbound(OutKind::Response, Some(1), "r"));
    let (client, reason) = tokio::time::timeout(WAIT, closed.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(client, ClientId(7));
    assert!(reason.contains("too slow"), "{reason}");
    assert!(next_chunk(&mut body).await.is_none());
}

#[tokio::test]
async fn a_new_get_stream_ends_the_previous_one_and_the_actor_keeps_events_between() {
    let (cmd, outbox, _closed) = actor(8);
    let mut first = attach_get(&cmd).await;
    let mut second = attach_get(&cmd).await;
    assert!(next_chunk(&mut first).await.is_none(), "replaced: it ends");
    outbox.push(outbound(OutKind::Notification, None, "a"));
    assert_eq!(
        &next_chunk(&mut second).await.unwrap()[..],
        b"id: 1\ndata: a\n\n"
    );
    // With no GET stream, the actor drains the outbox into the replay buffer...
    drop(second);
    outbox.push(outbound(OutKind::Notification, None, "b"));
    until(|| outbox.is_empty()).await;
    // ...and the next GET stream gets what no stream received.
    let mut third = attach_get(&cmd).await;
    assert_eq!(
        &next_chunk(&mut third).await.unwrap()[..],
        b"id: 2\ndata: b\n\n"
    );
}

#[tokio::test]
async fn a_response_whose_post_is_gone_is_dropped_not_sent_on_the_get_stream() {
    let (cmd, outbox, _closed) = actor(8);
    let (post_tx, post_rx) = lane::channel(4);
    let (ack, acked) = tokio::sync::oneshot::channel();
    let sink = session::PostSink {
        tx: post_tx,
        sse: false,
        prime: false,
    };
    let ids = vec![RawId::from_u64(1)];
    let post = SessionCmd::Post {
        ids,
        sink: Some(sink),
        ack,
    };
    cmd.send(post).await.unwrap();
    assert_eq!(acked.await.unwrap(), Ok(()));
    drop(post_rx); // the client disconnected
    let mut body = attach_get(&cmd).await;
    outbox.push(outbound(OutKind::Response, Some(1), "resp"));
    outbox.push(outbound(OutKind::Notification, None, "note"));
    let chunk = next_chunk(&mut body).await;
    assert_eq!(&chunk.unwrap()[..], b"id: 1\ndata: note\n\n");
}

#[tokio::test]
async fn a_request_id_already_in_flight_is_refused() {
    let (cmd, _outbox, _closed) = actor(8);
    let mut keep = Vec::new();
    for want in [Ok(()), Err(RawId::from_u64(1))] {
        let (tx, rx) = lane::channel(4);
        keep.push(rx);
        let (ack, acked) = tokio::sync::oneshot::channel();
        let sink = session::PostSink {
            tx,
            sse: false,
            prime: false,
        };
        let ids = vec![RawId::from_u64(1)];
        cmd.send(SessionCmd::Post {
            ids,
            sink: Some(sink),
            ack,
        })
        .await
        .unwrap();
        assert_eq!(acked.await.unwrap(), want);
    }
}

async fn recv(rx: &mut lane::Receiver<bytes::Bytes>) -> Option<bytes::Bytes> {
    tokio::time::timeout(WAIT, rx.recv()).await.unwrap()
}

#[tokio::test]
async fn a_post_stream_whose_connection_dropped_is_resumed_by_last_event_id() {
    use crate::downstream::http::sse::LastEventId;
    let (cmd, outbox, _closed) = actor(8);
    let (post_tx, mut post_rx) = lane::channel(4);
    let (ack, acked) = tokio::sync::oneshot::channel();
    let sink = session::PostSink {
        tx: post_tx,
        sse: true,
        prime: true,
    };
    cmd.send(SessionCmd::Post {
        ids: vec![RawId::from_u64(1)],
        sink: Some(sink),
        ack,
    })
    .await
    .unwrap();
    assert_eq!(acked.await.unwrap(), Ok(()));
    // The priming event comes first, then the request's progress, each with an id.
    assert_eq!(
        &recv(&mut post_rx).await.unwrap()[..],
        b"id: p0-0\ndata: \n\n"
    );
    outbox.push(outbound(OutKind::Notification, Some(1), "progress"));
    assert_eq!(
        &recv(&mut post_rx).await.unwrap()[..],
        b"id: p0-1\ndata: progress\n\n"
    );
    drop(post_rx); // the connection dropped before the response
    outbox.push(outbound(OutKind::Response, Some(1), "resp"));
    // A GET naming a stream the session never had is refused...
    let (get_tx, _get_rx) = lane::channel(4);
    let (ack, acked) = tokio::sync::oneshot::channel();
    let resume = |stream, seq| Some(LastEventId::Post { stream, seq });
    cmd.send(SessionCmd::Get {
        last_event_id: resume(9, 0),
        tx: get_tx,
        ack,
    })
    .await
    .unwrap();
    assert!(matches!(acked.await.unwrap(), session::GetAck::Refused));
    // ...one naming the last event seen gets the rest (the response), then ends.
    let (get_tx, mut get_rx) = lane::channel(4);
    let (ack, acked) = tokio::sync::oneshot::channel();
    cmd.send(SessionCmd::Get {
        last_event_id: resume(0, 1),
        tx: get_tx,
        ack,
    })
    .await
    .unwrap();
    assert!(matches!(acked.await.unwrap(), session::GetAck::Resumed));
    assert_eq!(
        &recv(&mut get_rx).await.unwrap()[..],
        b"id: p0-2\ndata: resp\n\n"
    );
    assert!(recv(&mut get_rx).await.is_none(), "the resumed stream ends");
}

#[tokio::test]
async fn a_cancelled_requests_post_gets_request_cancelled() {
    let (cmd, outbox, _closed) = actor(8);
    let (post_tx, mut post_rx) = lane::channel(4);
    let (ack, acked) = tokio::sync::oneshot::channel();
    let sink = session::PostSink {
        tx: post_tx,
        sse: false,
        prime: false,
    };
    cmd.send(SessionCmd::Post {
        ids: vec![RawId::from_u64(4)],
        sink: Some(sink),
        ack,
    })
    .await
    .unwrap();
    assert_eq!(acked.await.unwrap(), Ok(()));
    outbox.push(outbound(OutKind::Release, Some(4), ""));
    let got = tokio::time::timeout(WAIT, post_rx.recv())
        .await
        .unwrap()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["id"], 4);
    assert_eq!(v["error"]["code"], -32800);
    assert!(post_rx.recv().await.is_none(), "the POST ends");
}

#[tokio::test]
async fn a_burst_larger_than_the_replay_buffer_reaches_the_get_stream_whole() {
    // replay_events is 8; 50 events are queued before the actor drains them in one
    // batch. None may be evicted before the GET stream got it (the loadgen run that
    // "lost" 487 of 200,000 updates: a 1,511-event batch through a 1,024-event buffer).
    let (cmd, outbox, _closed) = actor(1000);
    let mut body = attach_get(&cmd).await;
    for i in 0..50 {
        outbox.push(outbound(OutKind::Notification, None, &format!("n{i}")));
    }
    let mut text = String::new();
    while !text.contains("data: n49\n") {
        let chunk = next_chunk(&mut body)
            .await
            .expect("the GET stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let ids: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=50).collect::<Vec<u64>>(), "{text}");
}

#[tokio::test]
async fn runs_larger_than_the_replay_buffer_reach_the_get_stream_whole_and_in_order() {
    // replay_events is 8; runs of 20 (shared with other sessions, as the hub queues a
    // burst) are split by the bound, and a single event between them keeps its place.
    use crate::downstream::outbox::Run;
    let (cmd, outbox, _closed) = actor(1000);
    let mut body = attach_get(&cmd).await;
    let mut n = 0;
    for _ in 0..3 {
        let items: Vec<Outbound> = (0..20)
            .map(|_| {
                n += 1;
                outbound(OutKind::Notification, None, &format!("n{n}"))
            })
            .collect();
        let (closed, wake) = outbox.push_run_deferred(Run::new(items).unwrap());
        assert_eq!(closed, None);
        if wake {
            outbox.wake();
        }
        n += 1;
        outbox.push(outbound(OutKind::Notification, None, &format!("n{n}")));
    }
    let mut text = String::new();
    while !text.contains(&format!("data: n{n}\n")) {
        let chunk = next_chunk(&mut body)
            .await
            .expect("the GET stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let events: Vec<(u64, String)> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (id, data) = e.split_once('\n').unwrap();
            let id = id.strip_prefix("id: ").unwrap().parse().unwrap();
            (id, data.strip_prefix("data: ").unwrap().to_owned())
        })
        .collect();
    let want: Vec<(u64, String)> = (1..=n).map(|i| (i, format!("n{i}"))).collect();
    assert_eq!(events, want);
}
