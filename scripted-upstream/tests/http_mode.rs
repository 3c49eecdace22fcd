//! Integration tests for the HTTP mode (`scripted-upstream --http 127.0.0.1:0`): several
//! sessions and stateless requests against one shared server. No sleeps: every wait
//! reads a stream until the expected message, or polls `stats` until a condition
//! holds, with a timeout only as a safety net.

use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::header::CONTENT_TYPE;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const TIMEOUT: Duration = Duration::from_secs(20);
const MODERN: &str = "2026-07-28";
const SUB: &str = "io.modelcontextprotocol/subscriptionId";

/// One spawned `scripted-upstream --http` process.
struct Upstream {
    // Read by the unix-only SIGTERM test; elsewhere it only keeps the process (killed on
    // drop).
    #[cfg_attr(not(unix), allow(dead_code))]
    child: Child,
    url: String,
    http: reqwest::Client,
}

impl Upstream {
    async fn spawn(envs: &[(&str, &str)]) -> Self {
        Upstream::spawn_with(&["--http", "127.0.0.1:0"], envs).await
    }

    async fn spawn_with(args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_scripted-upstream"));
        for (key, _) in std::env::vars() {
            if key.starts_with("SCRIPTED_") {
                cmd.env_remove(key);
            }
        }
        cmd.args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn scripted-upstream --http");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(TIMEOUT, lines.next_line())
            .await
            .expect("no listening line")
            .unwrap()
            .expect("exited before listening");
        let url = line
            .strip_prefix("scripted-upstream listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp") && !url.contains(":0/"),
            "{url}"
        );
        Upstream {
            child,
            url,
            http: reqwest::Client::new(),
        }
    }

    /// A POST of one message, with `session` as `Mcp-Session-Id`.
    async fn post(&self, session: Option<&str>, msg: &Value) -> reqwest::Response {
        let mut rb = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(msg.to_string());
        if let Some(s) = session {
            rb = rb.header("mcp-session-id", s);
        }
        tokio::time::timeout(TIMEOUT, rb.send())
            .await
            .expect("POST timed out")
            .unwrap()
    }

    async fn get(&self, session: Option<&str>) -> reqwest::Response {
        let mut rb = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        if let Some(s) = session {
            rb = rb.header("mcp-session-id", s);
        }
        rb.send().await.unwrap()
    }

    async fn delete(&self, session: &str) -> StatusCode {
        let resp = self
            .http
            .delete(&self.url)
            .header("mcp-session-id", session)
            .send()
            .await
            .unwrap();
        resp.status()
    }

    /// A legacy session: `initialize` (whose answer names the session), then
    /// `notifications/initialized`.
    async fn session(&self) -> Session<'_> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
        let resp = self.post(None, &init).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let id = resp
            .headers()
            .get("mcp-session-id")
            .expect("initialize answer without Mcp-Session-Id")
            .to_str()
            .unwrap()
            .to_owned();
        let answer = answer_of(resp, &json!(0)).await;
        assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
        let s = Session {
            up: self,
            id: Some(id),
            next_id: 1,
        };
        let resp = s
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        s
    }

    /// Stateless (modern) requests.
    fn stateless(&self) -> Session<'_> {
        Session {
            up: self,
            id: None,
            next_id: 1000,
        }
    }
}

/// Reads a request's answer (JSON, or SSE until the response to `id`).
async fn answer_of(resp: reqwest::Response, id: &Value) -> Value {
    let (_, answer) = answer_with_events(resp, id).await;
    answer
}

/// The messages before the response (SSE only), and the response.
async fn answer_with_events(resp: reqwest::Response, id: &Value) -> (Vec<Value>, Value) {
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
    if ct.starts_with("application/json") {
        let body = tokio::time::timeout(TIMEOUT, resp.text())
            .await
            .unwrap()
            .unwrap();
        return (Vec::new(), serde_json::from_str(&body).unwrap());
    }
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut sse = Sse::new(resp);
    let mut before = Vec::new();
    loop {
        let msg = sse.next().await.expect("stream ended before the response");
        if msg.get("method").is_none() && msg["id"] == *id {
            assert!(
                sse.next().await.is_none(),
                "the stream goes on after the response"
            );
            return (before, msg);
        }
        before.push(msg);
    }
}

/// A request in flight: its answer once the headers arrive.
type Pending = tokio::task::JoinHandle<reqwest::Response>;

struct Session<'a> {
    up: &'a Upstream,
    /// `None`: stateless.
    id: Option<String>,
    next_id: u64,
}

impl Session<'_> {
    fn id(&self) -> &str {
        self.id.as_deref().unwrap()
    }

    async fn post(&self, msg: &Value) -> reqwest::Response {
        self.up.post(self.id.as_deref(), msg).await
    }

    /// Sends a request; returns its id and the (unread) HTTP answer.
    async fn send(&mut self, method: &str, params: Value) -> (Value, reqwest::Response) {
        let (id, pending) = self.start(method, params);
        let resp = tokio::time::timeout(TIMEOUT, pending)
            .await
            .expect("no answer")
            .unwrap();
        (id, resp)
    }

    /// Sends a request without waiting for the answer's headers (which come with its
    /// first message: later for a parked request).
    fn start(&mut self, method: &str, params: Value) -> (Value, Pending) {
        let id = json!(self.next_id);
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut rb = self
            .up
            .http
            .post(&self.up.url)
            .header("accept", "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(msg.to_string());
        if let Some(s) = &self.id {
            rb = rb.header("mcp-session-id", s);
        }
        (id, tokio::spawn(async move { rb.send().await.unwrap() }))
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let (id, resp) = self.send(method, params).await;
        answer_of(resp, &id).await
    }

    async fn call(&mut self, name: &str, arguments: Value) -> Value {
        let mut params = json!({"name": name, "arguments": arguments});
        if self.id.is_none() {
            params["_meta"] = modern_meta();
        }
        let resp = self.request("tools/call", params).await;
        resp.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{name} failed: {resp}"))
    }

    async fn stats(&mut self) -> Value {
        self.call("stats", json!({})).await["structuredContent"].clone()
    }

    /// Polls `stats` until `ok` holds.
    async fn stats_until(&mut self, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let s = self.stats().await;
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out waiting for {what}: {s}"
            );
        }
    }

    async fn get_stream(&self) -> Sse {
        let resp = self.up.get(self.id.as_deref()).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
        Sse::new(resp)
    }
}

fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}})
}

fn modern(mut params: Value) -> Value {
    params["_meta"] = modern_meta();
    params
}

/// The JSON-RPC messages of an SSE response.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

impl Sse {
    fn new(resp: reqwest::Response) -> Self {
        Sse {
            resp,
            buf: String::new(),
        }
    }

    /// The next message, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() || data.concat().trim().is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data.join("\n")).unwrap());
            }
            let chunk = tokio::time::timeout(TIMEOUT, self.resp.chunk())
                .await
                .expect("timed out waiting for an SSE event")
                .unwrap()?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    async fn next_some(&mut self) -> Value {
        self.next().await.expect("the stream ended")
    }
}

fn update(uri: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
}

#[tokio::test]
async fn sessions_share_one_state_but_each_has_its_own_subscriptions() {
    let up = Upstream::spawn(&[]).await;
    let (u1, u2) = ("test://static/1", "test://dynamic/two");
    let mut a = up.session().await;
    let mut b = up.session().await;
    assert_eq!((a.id(), b.id()), ("s1", "s2"));
    assert_eq!(
        a.call("session", json!({})).await["structuredContent"]["session"],
        "s1"
    );
    assert_eq!(
        b.call("session", json!({})).await["content"][0]["text"],
        "s2"
    );
    let mut a_get = a.get_stream().await;
    let mut b_get = b.get_stream().await;

    assert_eq!(
        a.request("resources/subscribe", json!({"uri": u1})).await["result"],
        json!({})
    );
    assert_eq!(
        b.request("resources/subscribe", json!({"uri": u2})).await["result"],
        json!({})
    );
    let s = a.stats().await;
    assert_eq!(s["subscribed"], json!([u2, u1]));
    assert_eq!(s["subscribers"], json!({u1: 1, u2: 1}));
    assert_eq!(
        s["sessions"],
        json!({"opened": 2, "open": 2, "ended": 0, "gone": 0, "streams": 2})
    );

    // A emits for B's URI, then for its own: B gets the first only, A the second only
    // (A's first message being u1's proves u2's never reached it).
    a.call("emit_update", json!({"uri": u2})).await;
    let r = a.call("emit_update", json!({"uri": u1})).await;
    assert_eq!(
        r["structuredContent"],
        json!({"uri": u1, "version": 1, "emitted": 1})
    );
    assert_eq!(b_get.next_some().await, update(u2));
    assert_eq!(a_get.next_some().await, update(u1));
    // B emits for its own URI: only B hears it.
    b.call("emit_updates", json!({"uri": u2, "count": 2})).await;
    a.call("emit_update", json!({"uri": u1})).await;
    assert_eq!(b_get.next_some().await, update(u2));
    assert_eq!(b_get.next_some().await, update(u2));
    assert_eq!(a_get.next_some().await, update(u1));

    // One state: versions, reads and counts sum over both sessions.
    let read = b.request("resources/read", json!({"uri": u1})).await;
    assert_eq!(read["result"]["contents"][0]["text"], format!("{u1} v2"));
    a.request("resources/read", json!({"uri": u1})).await;
    let s = b.stats().await;
    assert_eq!(s["versions"], json!({u1: 2, u2: 3}));
    assert_eq!(s["counts"]["initialize"], 2);
    assert_eq!(s["counts"]["notifications/initialized"], 2);
    assert_eq!(s["counts"]["resources/subscribe"], 2);
    assert_eq!(s["by_uri"]["resources/read"][u1], 2);
    assert_eq!(s["tools"]["session"], 2);
    assert_eq!(s["tools"]["emit_update"], 3);
    assert_eq!(s["tools"]["stats"], 2);

    // list_changed goes to every session's GET stream.
    b.call("emit_list_changed", json!({"kind": "tools"})).await;
    let changed =
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}});
    assert_eq!(a_get.next_some().await, changed);
    assert_eq!(b_get.next_some().await, changed);

    // Both subscribed to the same URI: two subscribers, one URI.
    b.request("resources/subscribe", json!({"uri": u1})).await;
    assert_eq!(a.stats().await["subscribers"], json!({u1: 2, u2: 1}));
    a.call("emit_update", json!({"uri": u1})).await;
    assert_eq!(a_get.next_some().await, update(u1));
    assert_eq!(b_get.next_some().await, update(u1));
    b.request("resources/unsubscribe", json!({"uri": u2})).await;
    assert_eq!(a.stats().await["subscribers"], json!({u1: 2}));

    // A newer GET replaces the session's stream: the old one ends.
    let mut a_get2 = a.get_stream().await;
    assert!(a_get.next().await.is_none());
    a.call("emit_update", json!({"uri": u1})).await;
    assert_eq!(a_get2.next_some().await, update(u1));
}

#[tokio::test]
async fn delete_ends_a_session_and_its_subscriptions() {
    let up = Upstream::spawn(&[]).await;
    let uri = "test://static/3";
    let mut a = up.session().await;
    let mut b = up.session().await;
    let mut a_get = a.get_stream().await;
    for s in [&mut a, &mut b] {
        s.request("resources/subscribe", json!({"uri": uri})).await;
    }
    assert_eq!(b.stats().await["subscribers"], json!({uri: 2}));

    assert_eq!(up.delete(a.id()).await, StatusCode::OK);
    assert!(
        a_get.next().await.is_none(),
        "the GET stream ends with its session"
    );
    let s = b.stats().await;
    assert_eq!(s["subscribers"], json!({uri: 1}));
    assert_eq!(s["subscribed"], json!([uri]));
    assert_eq!(
        s["sessions"],
        json!({"opened": 2, "open": 1, "ended": 1, "gone": 0, "streams": 0})
    );

    // The ended session, and one that never was: 404 on POST, GET and DELETE.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    for id in ["s1", "s99", "bogus"] {
        let resp = up.post(Some(id), &ping).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{id}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32001);
    }
    assert_eq!(up.get(Some("s1")).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(up.delete("s1").await, StatusCode::NOT_FOUND);
    // No session id on a legacy request (or a GET): 400.
    assert_eq!(up.post(None, &ping).await.status(), StatusCode::BAD_REQUEST);
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        up.post(None, &notification).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(up.get(None).await.status(), StatusCode::BAD_REQUEST);
    let s = b.stats().await;
    assert_eq!(
        s["refused"],
        json!({"missing_session": 3, "unknown_session": 5})
    );
    // Refused messages are still counted (as received).
    assert_eq!(s["counts"]["ping"], 4);

    // end_session: the caller's own; its answer still arrives, then 404.
    assert_eq!(
        b.call("end_session", json!({})).await["content"][0]["text"],
        "ended s2"
    );
    assert_eq!(b.post(&ping).await.status(), StatusCode::NOT_FOUND);
    let mut c = up.session().await;
    assert_eq!(c.id(), "s3");
    let s = c.stats().await;
    assert_eq!(s["subscribers"], json!({}));
    assert_eq!(
        s["sessions"],
        json!({"opened": 3, "open": 1, "ended": 2, "gone": 0, "streams": 0})
    );
}

#[tokio::test]
async fn a_session_whose_client_went_away_ends() {
    let up = Upstream::spawn(&[]).await;
    let uri = "test://static/4";
    let mut a = up.session().await;
    let mut b = up.session().await;
    let mut c = up.session().await;
    let a_get = a.get_stream().await;
    let b_get = b.get_stream().await;
    let c_get = c.get_stream().await;
    for s in [&mut a, &mut b, &mut c] {
        s.request("resources/subscribe", json!({"uri": uri})).await;
    }
    let mut watcher = up.session().await;
    assert_eq!(watcher.stats().await["subscribers"], json!({uri: 3}));

    // A's client goes away (its GET stream's connection closes, nothing else is open):
    // the session ends, its subscription with it.
    drop(a_get);
    let s = watcher
        .stats_until("A's end", |s| s["sessions"]["gone"] == 1)
        .await;
    assert_eq!(s["subscribers"], json!({uri: 2}), "{s}");
    assert_eq!(s["sessions"]["ended"], 1, "{s}");
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(a.post(&ping).await.status(), StatusCode::NOT_FOUND);

    // B still has a request open when its GET stream goes: B is still there.
    let (_, hung) = b.start("tools/call", json!({"name": "hang", "arguments": {}}));
    watcher
        .stats_until("B's hang", |s| s["pending"]["hung"] == 1)
        .await;
    drop(b_get);
    watcher
        .stats_until("B's GET stream closed", |s| s["sessions"]["streams"] == 1)
        .await;
    // C's GET is replaced by a newer one, then the newer one's client goes away.
    let c_get2 = c.get_stream().await;
    drop(c_get);
    drop(c_get2);
    let s = watcher
        .stats_until("C's end", |s| s["sessions"]["gone"] == 2)
        .await;
    // (Every GetGone of B's stream was handled before this stats call.)
    let s2 = watcher.stats().await;
    assert_eq!(
        s2["subscribers"],
        json!({uri: 1}),
        "B keeps its subscription: {s} {s2}"
    );
    assert_eq!(b.post(&ping).await.status(), StatusCode::OK);
    hung.abort();
}

#[tokio::test]
async fn server_requests_use_the_get_stream_and_notifications_the_post_stream() {
    let up = Upstream::spawn(&[]).await;
    let mut a = up.session().await;
    let mut b = up.session().await;
    let mut a_get = a.get_stream().await;
    let mut b_get = b.get_stream().await;

    // `sample`: the request on A's GET stream, the answer POSTed back, the result on
    // the tool call's own answer.
    let (call_id, pending) = a.start(
        "tools/call",
        json!({"name": "sample", "arguments": {"prompt": "hi"}}),
    );
    let req = a_get.next_some().await;
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(req["id"], "s1");
    let answer = json!({"jsonrpc": "2.0", "id": "s1", "result": {"role": "assistant",
        "content": {"type": "text", "text": "hello"}, "model": "m"}});
    assert_eq!(a.post(&answer).await.status(), StatusCode::ACCEPTED);
    let result = answer_of(pending.await.unwrap(), &call_id).await;
    assert_eq!(result["result"]["structuredContent"], answer["result"]);

    // Request-scoped notifications make the answer an SSE stream.
    let (id, resp) = a
        .send(
            "tools/call",
            json!({"name": "progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}),
        )
        .await;
    assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
    let (before, result) = answer_with_events(resp, &id).await;
    assert_eq!(before.len(), 2);
    assert_eq!(
        before[1]["params"],
        json!({"progressToken": "p", "progress": 2, "total": 2})
    );
    assert_eq!(
        result["result"]["structuredContent"],
        json!({"steps": 2, "sent": 2})
    );
    // Without notifications: plain JSON.
    let (_, resp) = a.send("ping", json!({})).await;
    assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");

    // A held read is answered on its own POST when another session releases it.
    let uri = "test://static/5";
    a.call("hold_reads", json!({"uri": uri})).await;
    let (read_id, held) = a.start("resources/read", json!({"uri": uri}));
    b.stats_until("the held read", |s| s["pending"]["held_reads"] == 1)
        .await;
    b.call("emit_update", json!({"uri": uri})).await;
    b.call("release_reads", json!({"uri": uri})).await;
    let read = answer_of(held.await.unwrap(), &read_id).await;
    assert_eq!(read["result"]["contents"][0]["text"], format!("{uri} v0"));

    // A `hang` cancelled by its session: nothing more; B's cancel of the same id does
    // not touch A's request.
    let (hang_id, _hung) = a.start("tools/call", json!({"name": "hang", "arguments": {}}));
    b.stats_until("the hang", |s| s["pending"]["hung"] == 1)
        .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": hang_id}});
    assert_eq!(b.post(&cancel).await.status(), StatusCode::ACCEPTED);
    assert_eq!(b.stats().await["pending"]["hung"], 1);
    assert_eq!(a.post(&cancel).await.status(), StatusCode::ACCEPTED);
    assert_eq!(b.stats().await["pending"]["hung"], 0);

    // Nothing of A's reached B's GET stream: its first message is this list_changed.
    a.call("emit_list_changed", json!({"kind": "prompts"}))
        .await;
    assert_eq!(
        b_get.next_some().await["method"],
        "notifications/prompts/list_changed"
    );
}

#[tokio::test]
async fn modern_listen_over_http_gets_ack_then_tagged_updates() {
    let up = Upstream::spawn(&[("SCRIPTED_ERA", "dual")]).await;
    let uri = "test://static/1";
    let mut m = up.stateless();
    let discover = m.request("server/discover", modern(json!({}))).await;
    assert_eq!(discover["result"]["resultType"], "complete");
    assert_eq!(
        m.call("session", json!({})).await["structuredContent"]["session"],
        "stateless"
    );
    // A legacy session subscribed to the same URI, next to the listen.
    let mut legacy = up.session().await;
    let mut legacy_get = legacy.get_stream().await;
    legacy
        .request("resources/subscribe", json!({"uri": uri}))
        .await;

    let (listen_id, resp) = m
        .send(
            "subscriptions/listen",
            modern(json!({"notifications": {"resourceSubscriptions": [uri], "toolsListChanged": true}})),
        )
        .await;
    assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
    let mut listen = Sse::new(resp);
    let ack = listen.next_some().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"],
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": [uri]},
            "_meta": {SUB: listen_id}})
    );
    m.call("emit_update", json!({"uri": uri, "meta": {"k": 1}}))
        .await;
    let tagged = listen.next_some().await;
    assert_eq!(
        tagged,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": {"k": 1, SUB: listen_id}}})
    );
    assert_eq!(
        legacy_get.next_some().await,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": {"k": 1}}})
    );
    legacy
        .call("emit_list_changed", json!({"kind": "tools"}))
        .await;
    let changed = listen.next_some().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(changed["params"]["_meta"][SUB], listen_id);
    let s = m.stats().await;
    assert_eq!(s["listens"]["opened"], 1);
    assert_eq!(s["listens"]["open"][0]["uris"], json!([uri]));

    // The client closes the stream: the listen ends.
    drop(listen);
    m.stats_until("the closed listen to end", |s| {
        s["listens"]["open"] == json!([])
    })
    .await;

    // A modern request whose stream is closed is cancelled too.
    let (_, hung) = m.start(
        "tools/call",
        modern(json!({"name": "hang", "arguments": {}})),
    );
    m.stats_until("the hang", |s| s["pending"]["hung"] == 1)
        .await;
    // Aborting the task drops the request and its connection.
    hung.abort();
    m.stats_until("the hang to be cancelled", |s| s["pending"]["hung"] == 0)
        .await;

    // end_listens: the graceful result ends the stream; `cancelled` too, after the
    // notification.
    let mut streams = vec![];
    for _ in 0..2 {
        let (id, resp) = m.send("subscriptions/listen", modern(json!({}))).await;
        let mut sse = Sse::new(resp);
        assert_eq!(
            sse.next_some().await["method"],
            "notifications/subscriptions/acknowledged"
        );
        streams.push((id, sse));
    }
    let r = m.call("end_listens", json!({})).await;
    assert_eq!(r["content"][0]["text"], "ended 2");
    for (id, sse) in &mut streams {
        assert_eq!(
            sse.next_some().await,
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete", "_meta": {SUB: id}}})
        );
        assert!(sse.next().await.is_none());
    }
    let (id, resp) = m.send("subscriptions/listen", modern(json!({}))).await;
    let mut sse = Sse::new(resp);
    sse.next_some().await;
    m.call("end_listens", json!({"how": "cancelled"})).await;
    assert_eq!(
        sse.next_some().await,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "server ended the subscription"}})
    );
    assert!(sse.next().await.is_none());
    assert_eq!(m.stats().await["listens"]["opened"], 4);

    // Dual mode: a legacy request without a session is still refused.
    let resp = up
        .post(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_modern_only_server_has_no_sessions() {
    let up = Upstream::spawn(&[("SCRIPTED_ERA", "modern")]).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    let resp = up.post(None, &init).await;
    assert!(resp.headers().get("mcp-session-id").is_none());
    assert_eq!(answer_of(resp, &json!(1)).await["error"]["code"], -32022);
    assert_eq!(
        up.get(Some("s1")).await.status(),
        StatusCode::METHOD_NOT_ALLOWED
    );
    // Mcp-Session-Id is ignored.
    let resp = up
        .post(Some("s42"), &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": modern(json!({}))}))
        .await;
    let tools = answer_of(resp, &json!(2)).await;
    assert_eq!(tools["result"]["resultType"], "complete");
    let s = up.stateless().stats().await;
    assert_eq!(
        s["sessions"],
        json!({"opened": 0, "open": 0, "ended": 0, "gone": 0, "streams": 0})
    );
}

#[cfg(unix)]
#[tokio::test]
async fn logs_every_message_and_exits_0_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("scripted-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.jsonl");
    let _ = std::fs::remove_file(&log);
    let up = Upstream::spawn(&[("SCRIPTED_LOG", log.to_str().unwrap())]).await;
    let mut a = up.session().await;
    a.request("ping", json!({})).await;
    // Pretty-printed bodies are logged on one line.
    let resp = a
        .post(
            &serde_json::from_str::<Value>(
                "{\"jsonrpc\": \"2.0\",\n \"method\": \"notifications/x\"}",
            )
            .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let resp = up
        .http
        .post(&up.url)
        .header("mcp-session-id", "s1")
        .body("{\"jsonrpc\": \"2.0\",\n \"method\": \"notifications/y\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = lines
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "ping",
            "notifications/x",
            "notifications/y"
        ]
    );

    assert_eq!(sigterm(up).await, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends SIGTERM; the exit code.
#[cfg(unix)]
async fn sigterm(mut up: Upstream) -> Option<i32> {
    let pid = up.child.id().unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(TIMEOUT, up.child.wait())
        .await
        .expect("still running after SIGTERM")
        .unwrap();
    status.code()
}

#[cfg(unix)]
#[tokio::test]
async fn scripted_http_env_starts_it_and_sigterm_right_after_the_line_exits_0() {
    let up = Upstream::spawn_with(&[], &[("SCRIPTED_HTTP", "127.0.0.1:0")]).await;
    assert_eq!(sigterm(up).await, Some(0));
}
