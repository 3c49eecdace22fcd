//! Happy paths and per-request failures on one live session.

use axum::http::Method;
use serde_json::json;

use super::fake::Script;
use super::{echo_of, error_text, Harness, CONFIGURED};
use crate::protocol::{code, Kind, RawId, LATEST_VERSION};
use crate::upstream::{Related, UpstreamEvent};

#[tokio::test]
async fn auto_probes_with_server_discover_then_falls_back_to_initialize() {
    let mut h = Harness::start_auto(Script::default()).await;
    let info = h.ready().await;
    assert_eq!(info.era, crate::upstream::Era::Legacy);
    let seen = h.seen_until(|s| s.method == Method::GET).await;
    let methods: Vec<_> = seen.iter().map(|s| s.rpc_method()).collect();
    assert_eq!(
        methods,
        vec![
            Some("server/discover"),
            Some("initialize"),
            Some("notifications/initialized"),
            None
        ],
        "{seen:?}"
    );
    let probe = &seen[0];
    assert_eq!(probe.header("mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(probe.header("mcp-method"), Some("server/discover"));
    assert_eq!(probe.header("mcp-session-id"), None);
    let meta = &probe.body["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
}

#[tokio::test]
async fn json_handshake_sends_headers_and_opens_one_get_stream() {
    let mut h = Harness::start(Script::default()).await;
    let info = h.ready().await;
    assert_eq!(info.protocol_version, "2025-06-18");
    assert_eq!(info.capabilities["resources"]["subscribe"], true);
    assert_eq!(info.server_info["name"], "fake");

    let seen = h.seen_until(|s| s.method == Method::GET).await;
    assert_eq!(seen.len(), 3, "initialize, initialized, GET: {seen:?}");
    let (init, initialized, get) = (&seen[0], &seen[1], &seen[2]);

    assert_eq!(init.rpc_method(), Some("initialize"));
    assert_eq!(init.body["params"]["protocolVersion"], LATEST_VERSION);
    assert_eq!(init.body["params"]["clientInfo"]["name"], "mcpmux");
    assert_eq!(init.body["params"]["capabilities"], json!({}));
    assert_eq!(
        init.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("content-type"), Some("application/json"));
    assert_eq!(init.header(CONFIGURED.0), Some(CONFIGURED.1));
    assert_eq!(init.header("mcp-session-id"), None);

    assert_eq!(initialized.rpc_method(), Some("notifications/initialized"));
    for s in [initialized, get] {
        assert_eq!(s.header("mcp-session-id"), Some("s1"), "{s:?}");
        assert_eq!(s.header("mcp-protocol-version"), Some("2025-06-18"));
        assert_eq!(s.header(CONFIGURED.0), Some(CONFIGURED.1));
    }
    assert_eq!(get.header("accept"), Some("text/event-stream"));

    h.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":{"a":1}}"#);
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(7)));
    assert_eq!(echo_of(&m), json!({"a": 1}));
    let seen = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    let echo = seen.last().unwrap();
    assert_eq!(echo.header("mcp-session-id"), Some("s1"));
    assert_eq!(echo.header("mcp-protocol-version"), Some("2025-06-18"));
    assert_eq!(echo.header(CONFIGURED.0), Some(CONFIGURED.1));
    assert!(
        seen.iter().all(|s| s.method != Method::GET),
        "a second GET stream was opened: {seen:?}"
    );
}

#[tokio::test]
async fn sse_handshake_answer_skips_messages_before_it() {
    let mut h = Harness::start(Script {
        init_sse: true,
        ..Script::default()
    })
    .await;
    // The log notification before the answer is not forwarded: Ready comes first.
    let info = h.ready().await;
    assert_eq!(info.protocol_version, "2025-06-18");
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}"#);
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(1)));
    let seen = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    assert_eq!(seen.last().unwrap().header("mcp-session-id"), Some("s1"));
}

#[tokio::test]
async fn sse_answer_forwards_notification_before_response() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":5,"method":"sse","params":{"x":2}}"#);
    let first = h.message().await;
    assert_eq!(first.kind(), Kind::Notification);
    assert_eq!(first.method(), Some("notifications/progress"));
    let second = h.message().await;
    assert_eq!(second.id(), Some(&RawId::from_u64(5)));
    assert_eq!(echo_of(&second), json!({"x": 2}));
}

#[tokio::test]
async fn json_batch_answer_forwards_every_message() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":"b","method":"batch"}"#);
    assert_eq!(h.message().await.method(), Some("notifications/message"));
    assert_eq!(
        h.message().await.id(),
        Some(&RawId::parse("\"b\"").unwrap())
    );
}

#[tokio::test]
async fn get_stream_notification_reaches_the_hub() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.get_opened().await;
    let note = r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}"#;
    assert!(h.fake.push(&format!("id: g1\ndata: {note}\n\n")));
    let m = h.message().await;
    assert_eq!(m.method(), Some("notifications/resources/updated"));
    assert_eq!(m.to_json(), note, "forwarded verbatim");
}

#[tokio::test]
async fn get_stream_reconnects_with_last_event_id() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    let first = h.get_opened().await;
    assert_eq!(first.header("last-event-id"), None);
    assert!(h
        .fake
        .push("id: g1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n\n"));
    assert_eq!(h.message().await.method(), Some("a"));
    // A 2025-11-25 priming event (id, empty data) moves the resume point silently.
    assert!(h.fake.push("id: p1\ndata:\n\n"));
    h.fake.close_get();
    let again = h.get_opened().await;
    assert_eq!(again.header("last-event-id"), Some("p1"));
    assert_eq!(again.header("mcp-session-id"), Some("s1"));
    assert!(h
        .fake
        .push("id: g2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"b\"}\n\n"));
    assert_eq!(h.message().await.method(), Some("b"));
}

/// A server that no longer knows the event id to resume from (400) gets a GET without
/// it: the stream opens again, rather than never.
#[tokio::test]
async fn a_get_stream_whose_event_id_is_forgotten_reopens_without_it() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.get_opened().await;
    assert!(h
        .fake
        .push("id: g1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n\n"));
    assert_eq!(h.message().await.method(), Some("a"));
    h.fake.forget_event_ids();
    h.fake.close_get();
    let refused = h.get_opened().await;
    assert_eq!(refused.header("last-event-id"), Some("g1"));
    let again = h.get_opened().await;
    assert_eq!(again.header("last-event-id"), None);
    assert!(h
        .fake
        .push("id: g2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"b\"}\n\n"));
    assert_eq!(h.message().await.method(), Some("b"));
}

#[tokio::test]
async fn slow_request_does_not_block_another() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"hold"}"#);
    h.seen_until(|s| s.rpc_method() == Some("hold")).await;
    h.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(2)));
    h.fake.release();
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(1)));
}

/// A request mcpmux cancels (its client gave up, or it timed out) gets no answer from
/// most servers, and their stream for it stays open: its POST is dropped once the
/// cancellation is sent, so more of them than the session runs at once never wedge it.
#[tokio::test]
async fn cancelled_requests_do_not_hold_the_sessions_posts() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    // Every permit held by a request the server will never answer, and more waiting;
    // then they are all cancelled (as when each times out in the hub).
    let n = 2 * super::super::MAX_IN_FLIGHT as u64;
    for id in 1..=n {
        h.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"hold"}}"#));
    }
    for id in 1..=n {
        h.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        ));
    }
    h.send(r#"{"jsonrpc":"2.0","id":1000,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(1000)));
}

/// A subscribe of a URI whose unsubscribe is still unanswered waits for it (the POSTs
/// run concurrently: the server could otherwise apply them the other way round);
/// requests about anything else do not wait.
#[tokio::test]
async fn a_subscribe_waits_for_the_unsubscribe_of_its_uri_before_it() {
    let mut h = Harness::start(Script {
        hold_unsubscribe: true,
        ..Script::default()
    })
    .await;
    h.ready().await;
    let uri = |m: &str, id: u64, uri: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{m}","params":{{"uri":"{uri}"}}}}"#)
    };
    h.send(&uri("resources/unsubscribe", 1, "a://x"));
    h.seen_until(|s| s.rpc_method() == Some("resources/unsubscribe"))
        .await;
    h.send(&uri("resources/subscribe", 2, "a://x"));
    h.send(&uri("resources/subscribe", 3, "a://other"));
    h.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#);
    let before = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    let seen_uris: Vec<&str> = before
        .iter()
        .filter(|s| s.rpc_method() == Some("resources/subscribe"))
        .map(|s| s.body["params"]["uri"].as_str().unwrap_or_default())
        .collect();
    assert!(
        !seen_uris.contains(&"a://x"),
        "sent before the unsubscribe was answered"
    );
    h.fake.release();
    let mut answered = vec![];
    for _ in 0..4 {
        answered.push(h.message().await.id().cloned().unwrap());
    }
    let pos = |n| {
        answered
            .iter()
            .position(|id| *id == RawId::from_u64(n))
            .unwrap()
    };
    assert!(pos(1) < pos(2), "{answered:?}");
}

#[tokio::test]
async fn http_500_answers_the_request_with_an_error() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.fake.fail_next(500);
    h.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#);
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(3)));
    let err: serde_json::Value = serde_json::from_str(m.error().unwrap().get()).unwrap();
    assert_eq!(err["code"], code::UPSTREAM_UNAVAILABLE);
    let text = error_text(&m);
    assert!(text.contains("remote") && text.contains("500"), "{text}");

    // A failed notification is only logged: the next event is the next answer.
    h.fake.fail_next(500);
    h.send(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#);
    h.seen_until(|s| s.rpc_method() == Some("notifications/x"))
        .await;
    h.send(r#"{"jsonrpc":"2.0","id":4,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(4)));
}

#[tokio::test]
async fn request_without_an_answer_gets_an_error() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    // 202 to a request: nothing will ever answer it.
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"no-answer"}"#);
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(1)));
    assert!(error_text(&m).contains("202"), "{}", error_text(&m));
    // An SSE answer that ends before the response: the progress goes through, then
    // the request is answered with an error.
    h.send(r#"{"jsonrpc":"2.0","id":2,"method":"sse-cut"}"#);
    assert_eq!(h.message().await.method(), Some("notifications/progress"));
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(2)));
    assert!(
        error_text(&m).contains("ended before the answer"),
        "{}",
        error_text(&m)
    );
}

#[tokio::test]
async fn get_405_is_tolerated_and_not_retried() {
    let mut h = Harness::start(Script {
        get_405: true,
        ..Script::default()
    })
    .await;
    h.ready().await;
    h.get_opened().await;
    for id in 1..=3 {
        h.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo"}}"#));
        assert_eq!(h.message().await.id(), Some(&RawId::from_u64(id)));
    }
    let seen = h.seen_until(|s| s.body["id"] == 3).await;
    assert!(
        seen.iter().all(|s| s.method != Method::GET),
        "GET retried after 405: {seen:?}"
    );
}

#[tokio::test]
async fn a_post_stream_closed_early_is_resumed_with_get_and_last_event_id() {
    post_stream_resumed_after_refusals(0).await;
}

/// A resumption the server refuses (409 while it still holds the old connection) is
/// tried again, as one that brought nothing; the answer comes on a later one.
#[tokio::test]
async fn a_refused_resumption_is_tried_again() {
    post_stream_resumed_after_refusals(2).await;
}

async fn post_stream_resumed_after_refusals(refuse_resumes: u32) {
    // SEP-1699: priming event, progress, `retry: 10`, connection closed; the answer
    // comes on a GET that names the last event seen.
    let mut h = Harness::start(Script {
        refuse_resumes,
        ..Script::default()
    })
    .await;
    h.ready().await;
    h.get_opened().await;
    h.send(r#"{"jsonrpc":"2.0","id":7,"method":"sse-poll"}"#);
    match h.event().await {
        UpstreamEvent::Message(m, related) => {
            assert_eq!(m.method(), Some("notifications/progress"));
            assert_eq!(related, Related::Request(RawId::from_u64(7)));
        }
        other => panic!("expected the progress, got {other:?}"),
    }
    let resumed = h
        .seen_until(|s| s.method == Method::GET && s.header("last-event-id").is_some())
        .await
        .pop()
        .unwrap();
    assert_eq!(resumed.header("last-event-id"), Some("poll1-2"));
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(7)));
    assert!(m.result().is_some(), "the answer, not an error: {m:?}");
}

#[tokio::test]
async fn a_400_fails_only_its_request_and_keeps_the_session() {
    let mut h = Harness::start(Script::default()).await;
    h.ready().await;
    h.send(r#"{"jsonrpc":"2.0","id":1,"method":"bad-params"}"#);
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(1)));
    assert!(
        error_text(&m).contains("Invalid params"),
        "{}",
        error_text(&m)
    );
    // The session checks itself with a ping, which succeeds: no re-initialize.
    let probe = h.seen_until(|s| s.rpc_method() == Some("ping")).await;
    let probe = probe.last().unwrap();
    assert_eq!(probe.header("mcp-session-id"), Some("s1"));
    h.send(r#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#);
    // The next event is the echo's answer: no Down, no second Ready in between.
    let m = h.message().await;
    assert_eq!(m.id(), Some(&RawId::from_u64(2)));
    let seen = h.seen_until(|s| s.rpc_method() == Some("echo")).await;
    assert!(seen.iter().all(|s| s.rpc_method() != Some("initialize")));
    assert_eq!(seen.last().unwrap().header("mcp-session-id"), Some("s1"));
}

#[tokio::test]
async fn a_307_is_followed_with_the_same_post_and_headers() {
    let (mut fake, seen) = super::fake::Fake::start(Script::default()).await;
    fake.url = fake.url.replace("/mcp", "/moved");
    let mut h = Harness::start_at(fake, seen, super::restart());
    let info = h.ready().await;
    assert_eq!(info.protocol_version, "2025-06-18");
    let seen = h.seen_until(|s| s.method == Method::GET).await;
    let init = &seen[0];
    assert_eq!(init.rpc_method(), Some("initialize"));
    assert_eq!(init.header(CONFIGURED.0), Some(CONFIGURED.1));
    h.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":{"x":1}}"#);
    let m = h.message().await;
    assert_eq!(echo_of(&m), json!({"x": 1}));
}

#[tokio::test]
async fn an_upstream_behind_a_proxy_is_reached_through_it() {
    use crate::upstream::http::client::{HttpClient, Request};
    use hyper_util::client::proxy::matcher::Matcher;
    let (fake, mut seen) = super::fake::Fake::start(Script::default()).await;
    let proxy = fake.url.trim_end_matches("/mcp").to_owned();
    let proxies = Matcher::builder().http(proxy).build();
    // A host that does not resolve: only the proxy can reach it.
    let url: hyper::Uri = "http://mcp.invalid/mcp".parse().unwrap();
    let secs = std::time::Duration::from_secs(5);
    let client = HttpClient::with_proxies(&proxies, &url, secs, secs).unwrap();
    assert!(matches!(client, HttpClient::Proxied(_)), "{client:?}");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let req = Request::new(hyper::Method::POST, url, Default::default())
        .header(
            hyper::header::ACCEPT,
            hyper::header::HeaderValue::from_static("application/json, text/event-stream"),
        )
        .header(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        )
        .body(bytes::Bytes::from_static(body.as_bytes()));
    let resp = client.send(req).await.expect("sent through the proxy");
    assert_eq!(resp.status(), 200);
    let s = seen.recv().await.unwrap();
    assert_eq!(s.rpc_method(), Some("initialize"));
    assert_eq!(s.header("host"), Some("mcp.invalid"));
    // A proxy whose exceptions (`NO_PROXY`) name the host, or no proxy at all: direct.
    let excepted = Matcher::builder()
        .http("http://127.0.0.1:9")
        .no("mcp.invalid")
        .build();
    let url: hyper::Uri = "http://mcp.invalid/mcp".parse().unwrap();
    let direct = HttpClient::with_proxies(&excepted, &url, secs, secs).unwrap();
    assert!(matches!(direct, HttpClient::Direct(_)), "{direct:?}");
    let none = Matcher::builder().build();
    let url: hyper::Uri = "http://mcp.invalid/mcp".parse().unwrap();
    let direct = HttpClient::with_proxies(&none, &url, secs, secs).unwrap();
    assert!(matches!(direct, HttpClient::Direct(_)), "{direct:?}");
}

#[tokio::test]
async fn an_https_url_is_spoken_to_in_tls_only() {
    use crate::upstream::http::client::{HttpClient, Request};
    use hyper_util::client::proxy::matcher::Matcher;
    // The fake speaks plain HTTP: a TLS client must fail its handshake there, never
    // fall back to sending the request in the clear.
    let (fake, mut seen) = super::fake::Fake::start(Script::default()).await;
    let url: hyper::Uri = fake.url.replace("http://", "https://").parse().unwrap();
    let secs = std::time::Duration::from_secs(5);
    let client = HttpClient::with_proxies(&Matcher::builder().build(), &url, secs, secs).unwrap();
    let req = Request::new(hyper::Method::POST, url, Default::default())
        .body(bytes::Bytes::from_static(b"{}"));
    let err = client.send(req).await.expect_err("no TLS server there");
    let text = super::super::handshake::error_chain(&err);
    assert!(text.contains("error sending request"), "{text}");
    assert!(
        seen.try_recv().is_err(),
        "a request reached the plain server"
    );
}

/// A token refresh that the authorization server does not answer runs beside the
/// session: requests are still served meanwhile.
#[tokio::test]
async fn a_hanging_token_refresh_does_not_hold_up_requests() {
    use crate::config::OAuthServerConfig;
    use crate::oauth::{Grant, Registration, TokenStore, UpstreamAuth};
    // The token endpoint: says it was asked, then never answers.
    let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token_url = format!("http://{}/token", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move || {
        let _ = asked_tx.send(());
        std::future::pending::<()>()
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (fake, seen) = super::fake::Fake::start(Script::default()).await;
    let store = TokenStore::for_test("http-refresh");
    let now = crate::oauth::flow::now_secs();
    // Due for a refresh three seconds after the session starts.
    let grant = Grant {
        resource: fake.url.clone(),
        issuer: "https://as".into(),
        token_endpoint: token_url,
        client: Registration {
            client_id: "c".into(),
            client_secret: None,
            auth_method: "none".into(),
            redirect_uri: None,
        },
        access_token: "a".into(),
        refresh_token: Some("r".into()),
        expires_at: Some(now + 4),
        issued_at: Some(now),
        scope: None,
    };
    store.save_grant("remote", &grant).await.unwrap();
    let url = reqwest::Url::parse(&fake.url).unwrap();
    let auth = UpstreamAuth::new(
        "remote",
        url,
        OAuthServerConfig::default(),
        std::sync::Arc::new(store),
        None,
    );
    let mut h = Harness::start_authed(fake, seen, auth);
    h.ready().await;
    tokio::time::timeout(super::WAIT, asked.recv())
        .await
        .expect("the refresh started")
        .unwrap();
    h.send(r#"{"jsonrpc":"2.0","id":9,"method":"echo"}"#);
    assert_eq!(h.message().await.id(), Some(&RawId::from_u64(9)));
}
