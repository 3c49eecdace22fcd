//! The OAuth state of one upstream: challenges, step-ups, refresh timing and failures,
//! and which stored login it takes.

use super::*;
use reqwest::header::{HeaderValue, WWW_AUTHENTICATE};

fn auth() -> Arc<UpstreamAuth> {
    auth_at("https://mcp.example/mcp")
}

/// An upstream `up` at `url`, with a file store of its own (per test thread).
fn auth_at(url: &str) -> Arc<UpstreamAuth> {
    let store = TokenStore::for_test("upauth");
    UpstreamAuth::new(
        "up",
        Url::parse(url).unwrap(),
        OAuthServerConfig::default(),
        Arc::new(store),
        None,
    )
}

/// A grant for `resource` with this access token, a refresh token, and a token
/// endpoint at `token_endpoint`.
fn grant_for(resource: &str, access: &str, token_endpoint: &str) -> Grant {
    let now = flow::now_secs();
    Grant {
        resource: resource.into(),
        issuer: "https://as".into(),
        token_endpoint: token_endpoint.into(),
        client: super::super::Registration {
            client_id: "c".into(),
            client_secret: None,
            auth_method: "none".into(),
            redirect_uri: None,
        },
        access_token: access.into(),
        refresh_token: Some("r".into()),
        expires_at: Some(now + 3600),
        issued_at: Some(now),
        scope: None,
    }
}

fn challenge(status: u16, value: &str) -> (StatusCode, HeaderMap) {
    let mut h = HeaderMap::new();
    h.insert(WWW_AUTHENTICATE, HeaderValue::from_str(value).unwrap());
    (StatusCode::from_u16(status).unwrap(), h)
}

#[tokio::test]
async fn a_401_without_tokens_needs_a_login_naming_the_command() {
    let a = auth();
    assert_eq!(
        a.prepare().await,
        Prepared::Ready,
        "no challenge yet: try without a token"
    );
    let mut seen = a.challenges();
    seen.mark_unchanged();
    let (s, h) = challenge(401, r#"Bearer resource_metadata="https://mcp.example/prm""#);
    assert!(a.observe(s, &h));
    assert!(seen.has_changed().unwrap(), "a challenge ends the session");
    match a.prepare().await {
        Prepared::NeedsLogin(r) => assert!(r.contains("run `mcpmux login up`"), "{r}"),
        other => panic!("{other:?}"),
    }
    assert!(!a.observe(StatusCode::OK, &HeaderMap::new()));
    assert!(
        !a.observe(StatusCode::FORBIDDEN, &HeaderMap::new()),
        "a plain 403 is no challenge"
    );
}

#[tokio::test]
async fn step_ups_for_one_scope_stop_after_the_limit() {
    let a = auth();
    for n in 1..=MAX_STEP_UPS {
        let (s, h) = challenge(403, r#"Bearer error="insufficient_scope", scope="admin""#);
        a.observe(s, &h);
        assert!(
            matches!(a.prepare().await, Prepared::NeedsLogin(_)),
            "step-up {n}"
        );
    }
    let (s, h) = challenge(403, r#"Bearer error="insufficient_scope", scope="admin""#);
    a.observe(s, &h);
    match a.prepare().await {
        Prepared::Failed(r) => assert!(r.contains("admin"), "{r}"),
        other => panic!("{other:?}"),
    }
    // Another scope still gets its step-ups.
    let (s, h) = challenge(403, r#"Bearer error="insufficient_scope", scope="write""#);
    a.observe(s, &h);
    assert!(matches!(a.prepare().await, Prepared::NeedsLogin(_)));
}

#[tokio::test]
async fn refresh_timing_follows_the_token_lifetime() {
    let a = auth();
    assert_eq!(a.refresh_in(), None, "no token, no refresh");
    let now = flow::now_secs();
    let grant = |lifetime: u64, refresh: bool| Grant {
        resource: "https://mcp.example/mcp".into(),
        issuer: "https://as".into(),
        token_endpoint: "https://as/token".into(),
        client: super::super::Registration {
            client_id: "c".into(),
            client_secret: None,
            auth_method: "none".into(),
            redirect_uri: None,
        },
        access_token: "a".into(),
        refresh_token: refresh.then(|| "r".into()),
        expires_at: Some(now + lifetime),
        issued_at: Some(now),
        scope: None,
    };
    a.install(grant(3600, true));
    let d = a.refresh_in().unwrap();
    assert!(
        d <= Duration::from_secs(3600 - 60) && d >= Duration::from_secs(3600 - 62),
        "{d:?}"
    );
    a.install(grant(10, true));
    let d = a.refresh_in().unwrap();
    assert!(
        d <= Duration::from_secs(8) && d >= Duration::from_secs(6),
        "a third of 10 s: {d:?}"
    );
    a.install(grant(10, false));
    assert_eq!(a.refresh_in(), None, "nothing to refresh with");
}

#[tokio::test]
async fn a_stored_login_is_used_only_for_the_url_it_was_issued_for() {
    let a = auth();
    let other = grant_for(
        "https://other.example/mcp",
        "other-token",
        "https://as/token",
    );
    a.store.save_grant("up", &other).await.unwrap();
    assert_eq!(a.prepare().await, Prepared::Ready);
    assert_eq!(a.bearer(), None, "a login for another URL is not sent here");

    let b = auth();
    let own = grant_for("https://mcp.example", "own-token", "https://as/token");
    b.store.save_grant("up", &own).await.unwrap();
    assert_eq!(b.prepare().await, Prepared::Ready);
    assert_eq!(
        b.bearer().as_deref(),
        Some("own-token"),
        "the origin covers /mcp"
    );
}

#[tokio::test]
async fn after_the_step_up_limit_a_stored_login_starts_over() {
    let a = auth();
    let step_up = || challenge(403, r#"Bearer error="insufficient_scope", scope="admin""#);
    for _ in 0..=MAX_STEP_UPS {
        let (s, h) = step_up();
        a.observe(s, &h);
        a.prepare().await;
    }
    assert!(
        matches!(a.prepare().await, Prepared::Ready),
        "no challenge pending"
    );
    let (s, h) = step_up();
    a.observe(s, &h);
    assert!(
        matches!(a.prepare().await, Prepared::Failed(_)),
        "still over"
    );
    // `mcpmux login up` stores a new login: the count starts over.
    let fresh = grant_for("https://mcp.example/mcp", "fresh", "https://as/token");
    a.store.save_grant("up", &fresh).await.unwrap();
    assert_eq!(a.prepare().await, Prepared::Ready);
    assert_eq!(a.bearer().as_deref(), Some("fresh"));
    let (s, h) = step_up();
    a.observe(s, &h);
    assert!(matches!(a.prepare().await, Prepared::NeedsLogin(_)));
}

/// A token endpoint on a free loopback port answering its `n`th request (from 0) with
/// the status and JSON body `answer(n)` gives; its base URL.
async fn token_server(answer: fn(usize) -> (u16, &'static str)) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().fallback(move || {
        let (status, body) = answer(served.fetch_add(1, Ordering::SeqCst));
        async move {
            (
                axum::http::StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body,
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A token endpoint granting the first refresh (the refresh token rotated to r2) and
/// refusing every later request as a reused refresh token.
fn rotates_once(n: usize) -> (u16, &'static str) {
    match n {
        0 => (
            200,
            r#"{"access_token":"new","token_type":"bearer","expires_in":3600,"refresh_token":"r2"}"#,
        ),
        _ => (400, r#"{"error":"invalid_grant"}"#),
    }
}

#[tokio::test]
async fn a_refresh_the_server_does_not_answer_keeps_the_login() {
    // The 5xx has no OAuth error in it: the authorization server is having trouble.
    let base = token_server(|_| (503, "{}")).await;
    let a = auth_at(&format!("{base}/mcp"));
    let g = grant_for(&format!("{base}/mcp"), "old", &format!("{base}/token"));
    a.store.save_grant("up", &g).await.unwrap();
    let (s, h) = challenge(401, "Bearer");
    a.observe(s, &h);
    match a.prepare().await {
        Prepared::Failed(why) => assert!(why.contains("could not be refreshed"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        a.bearer().as_deref(),
        Some("old"),
        "the grant is kept for a retry"
    );
}

#[tokio::test]
async fn a_refresh_the_server_refuses_needs_a_login() {
    let base = token_server(|_| (400, r#"{"error":"invalid_grant"}"#)).await;
    let a = auth_at(&format!("{base}/mcp"));
    let g = grant_for(&format!("{base}/mcp"), "old", &format!("{base}/token"));
    a.store.save_grant("up", &g).await.unwrap();
    let (s, h) = challenge(401, "Bearer");
    a.observe(s, &h);
    assert!(matches!(a.prepare().await, Prepared::NeedsLogin(_)));
    assert_eq!(a.bearer(), None, "the refused grant is dropped");
}

/// Two processes on one store hold the same login: once one refreshed it (rotating the
/// refresh token), the other goes on with the stored grant instead of spending the
/// old refresh token, which the authorization server would refuse.
#[tokio::test]
async fn a_login_another_process_refreshed_is_taken_from_the_store() {
    // The first answer grants a refresh (the refresh token rotated to r2); every later
    // request is refused as a reused refresh token (b's rediscovery's included).
    let base = token_server(rotates_once).await;
    let url = format!("{base}/mcp");
    let g = Grant {
        // What rediscovery finds (the server as its own authorization server).
        issuer: base.clone(),
        ..grant_for(&url, "old", &format!("{base}/token"))
    };
    let (a, b) = (auth_at(&url), auth_at(&url));
    a.store.save_grant("up", &g).await.unwrap();
    assert_eq!(a.prepare().await, Prepared::Ready);
    assert_eq!(b.prepare().await, Prepared::Ready);
    assert!(a.refresh_now().await, "the first refresh is granted");
    assert_eq!(a.bearer().as_deref(), Some("new"));
    // b's token is refused (it was replaced): b takes the stored one.
    let (s, h) = challenge(401, "Bearer");
    b.observe(s, &h);
    assert_eq!(b.prepare().await, Prepared::Ready);
    assert_eq!(b.bearer().as_deref(), Some("new"));
}

/// Two refreshes at once (the timer's, and one for a 401 that came meanwhile) spend the
/// refresh token once: the second waits for the first and goes on with its token.
#[tokio::test]
async fn concurrent_refreshes_spend_a_rotating_refresh_token_once() {
    let base = token_server(rotates_once).await;
    let url = format!("{base}/mcp");
    let a = auth_at(&url);
    a.store
        .save_grant("up", &grant_for(&url, "old", &format!("{base}/token")))
        .await
        .unwrap();
    assert_eq!(a.prepare().await, Prepared::Ready);
    let (first, second) = tokio::join!(a.refresh_now(), a.refresh_now());
    assert!(first && second, "both refreshes end with a token");
    assert_eq!(a.bearer().as_deref(), Some("new"));
    assert_eq!(a.refresh_in().map(|d| d > Duration::ZERO), Some(true));
}

/// Two processes on one store refreshing the same login at the same moment (each with
/// its own in-process gate): the store's lock makes them take turns, so the rotating
/// refresh token is spent once and both end with the new token.
#[tokio::test]
async fn two_processes_refreshing_at_once_spend_a_rotating_refresh_token_once() {
    let base = token_server(rotates_once).await;
    let url = format!("{base}/mcp");
    let (a, b) = (auth_at(&url), auth_at(&url));
    a.store
        .save_grant("up", &grant_for(&url, "old", &format!("{base}/token")))
        .await
        .unwrap();
    assert_eq!(a.prepare().await, Prepared::Ready);
    assert_eq!(b.prepare().await, Prepared::Ready);
    let (first, second) = tokio::join!(a.refresh_now(), b.refresh_now());
    assert!(first && second, "both refreshes end with a token");
    assert_eq!(a.bearer().as_deref(), Some("new"));
    assert_eq!(b.bearer().as_deref(), Some("new"));
}
