//! The session's life: expiry and re-initialize, failed starts, marking down,
//! dropping commands of a dead session, and shutdown.

use axum::http::Method;

use super::fake::{Fake, Script};
use super::{error_text, restart, Harness, WAIT};
use crate::config::RestartConfig;
use crate::protocol::RawId;
use crate::upstream::UpstreamEvent;

#[tokio::test]
async fn expired_session_404_reinitializes_and_reports_ready_again() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.get_opened().await;
    h.fake.expire();
    h.send(r#"{"jsonrpc":"2.0","id":9,"method":"echo"}"#);

    let (reason, retrying) = h.down().await;
    assert_eq!(reason, "session expired (HTTP 404)");
    assert!(retrying);
    // The request that found out is answered after Down (the hub has failed it by
    // then, so this finds nothing there).
    let orphan = h.message().await;
    assert_eq!(orphan.id(), Some(&RawId::from_u64(9)));
    assert!(error_text(&orphan).contains("session expired (HTTP 404)"));
    let info = h.ready().await;
    assert_eq!(info.protocol_version, "2025-06-18");

    let seen = h
        .seen_until(|s| s.method == Method::GET && s.header("mcp-session-id") == Some("s2"))
        .await;
    let reinit = seen
        .iter()
        .find(|s| s.rpc_method() == Some("initialize"))
        .expect("a second initialize");
    assert_eq!(reinit.header("mcp-session-id"), None, "a fresh session");
    assert!(
        seen.iter().filter(|s| s.method == Method::GET).count() == 1,
        "one GET stream per session: {seen:?}"
    );

    h.send(r#"{"jsonrpc":"2.0","id":10,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(10)));
    let seen = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    assert_eq!(seen.last().unwrap().header("mcp-session-id"), Some("s2"));
}

#[tokio::test]
async fn expired_session_400_with_session_id_reinitializes() {
    // server-everything answers an unknown session with 400.
    let mut h = Harness::start(Script {
        expired_status: 400,
        ..Script::default()
    })
    .await;
    h.ready().await;
    h.fake.expire();
    // A notification finds out too; it has no id, so nothing is synthesized. A 400 is
    // not proof of expiry: the session's own ping probe, also refused, is.
    h.send(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#);
    let (reason, retrying) = h.down().await;
    assert_eq!(reason, "session expired (HTTP 400 to a ping)");
    assert!(retrying);
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(1)));
}

#[tokio::test]
async fn get_stream_404_reinitializes() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.get_opened().await;
    h.fake.expire();
    h.fake.close_get();
    let (reason, retrying) = h.down().await;
    assert_eq!(reason, "session expired (HTTP 404)");
    assert!(retrying);
    h.ready().await;
    let get = h.get_opened().await;
    // The reconnect attempt on s1 is the one that got 404; the next GET is s2's.
    let get = if get.header("mcp-session-id") == Some("s1") {
        h.get_opened().await
    } else {
        get
    };
    assert_eq!(get.header("mcp-session-id"), Some("s2"));
}

#[tokio::test]
async fn failing_initialize_retries_then_marks_down() {
    let mut h = Harness::start_with(
        Script {
            init_status: Some(500),
            ..Script::default()
        },
        RestartConfig {
            max_failures: 2,
            ..restart()
        },
    )
    .await;
    let (reason, retrying) = h.down().await;
    assert!(reason.contains("initialize answered HTTP 500"), "{reason}");
    assert!(retrying);
    let (_, retrying) = h.down().await;
    assert!(!retrying, "marked down after restart.max_failures");
    h.shutdown.cancel();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn initialize_timeout_marks_down() {
    let mut h = Harness::start_with(
        Script {
            hang_init: true,
            ..Script::default()
        },
        RestartConfig {
            max_failures: 1,
            init_timeout_ms: 50,
            ..restart()
        },
    )
    .await;
    let (reason, retrying) = h.down().await;
    assert!(reason.contains("restart.init_timeout_ms"), "{reason}");
    assert!(!retrying);
}

#[tokio::test]
async fn connection_refused_reports_down_and_retries() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let (mut fake, seen) = Fake::start(Script::default()).await;
    fake.url = format!("http://{addr}/mcp");
    let mut h = Harness::start_at(fake, seen, restart());
    let (reason, retrying) = h.down().await;
    assert!(reason.starts_with("initialize failed"), "{reason}");
    assert!(retrying);
    let (_, retrying) = h.down().await;
    assert!(retrying, "keeps retrying below restart.max_failures");
}

#[tokio::test]
async fn commands_queued_while_down_do_not_reach_the_next_session() {
    let mut h = Harness::start_with(
        Script {
            init_status: Some(503),
            ..Script::default()
        },
        RestartConfig {
            // Long enough that the stale command is queued during the backoff.
            initial_backoff_ms: 300,
            max_backoff_ms: 300,
            ..restart()
        },
    )
    .await;
    let (_, retrying) = h.down().await;
    assert!(retrying);
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"stale"}"#);
    h.fake.set_init_status(None);
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(2)));
    let seen = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    assert!(
        seen.iter().all(|s| s.rpc_method() != Some("stale")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn shutdown_flushes_queued_commands_then_deletes_session() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.get_opened().await;
    h.send(r#"{"jsonrpc":"2.0","id":11,"method":"resources/unsubscribe","params":{"uri":"file:///a"}}"#);
    h.send(r#"{"jsonrpc":"2.0","method":"notifications/last"}"#);
    h.shutdown.cancel();
    tokio::time::timeout(WAIT, &mut h.task)
        .await
        .unwrap()
        .unwrap();

    let seen = h.seen_until(|s| s.method == Method::DELETE).await;
    let delete = seen.last().unwrap();
    assert_eq!(delete.header("mcp-session-id"), Some("s1"));
    assert_eq!(delete.header("mcp-protocol-version"), Some("2025-06-18"));
    for method in ["resources/unsubscribe", "notifications/last"] {
        assert!(
            seen.iter().any(|s| s.rpc_method() == Some(method)),
            "{method} not flushed before DELETE: {seen:?}"
        );
    }
    // The unsubscribe's answer was forwarded before the actor returned.
    let mut answered = false;
    while let Ok(ev) = h.hub.try_recv() {
        if let (_, UpstreamEvent::Message(m, _)) = ev {
            answered |= m.id() == Some(&RawId::from_u64(11));
        }
    }
    assert!(answered);
}
