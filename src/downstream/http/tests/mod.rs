//! In-process tests of the Streamable HTTP transport: the real axum server on
//! `127.0.0.1:0`, driven with reqwest, in front of a fake hub that answers `initialize`
//! and `echo`, emits unrelated notifications on `x/emit`, closes the outbox on
//! `x/kill` and records every `ClientClosed`. No sleeps: events are awaited on
//! channels (with a generous timeout so a bug fails instead of hanging).
//!
//! This file holds the harness; `flows` covers the happy paths, `hostile` the refused
//! inputs, `lifecycle` session ends, `actor` the session actor without HTTP,
//! `connections` the accept loop (connection bound, header timeout).

mod actor;
mod connections;
mod flows;
mod hostile;
mod lifecycle;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::session::{self, SessionCmd};
use super::{serve_http, HttpSettings};
use crate::downstream::link::{ClientEvent, ClientLink};
use crate::downstream::outbox::{CloseReason, OutKind, Outbound, Outbox};
use crate::protocol::{methods, Kind, Message, RawId};
use crate::state::ids::ClientId;

pub(super) const WAIT: Duration = Duration::from_secs(10);
pub(super) const IDLE: Duration = Duration::from_secs(60);

pub(super) type Closed = mpsc::UnboundedReceiver<(ClientId, &'static str)>;

/// Runs the fake hub; returns its handle and the `ClientClosed` record.
pub(super) fn fake_hub() -> (ClientLink, Closed) {
    let (tx, mut rx) = mpsc::channel(64);
    let (closed_tx, closed_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut outboxes: HashMap<ClientId, Arc<Outbox>> = HashMap::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                ClientEvent::Opened {
                    client,
                    outbox,
                    reply,
                    ..
                } => {
                    outboxes.insert(client, outbox);
                    let _ = reply.send(Ok(()));
                }
                ClientEvent::Message { client, msg } => {
                    if let Some(ob) = outboxes.get(&client) {
                        answer(ob, &msg);
                    }
                }
                ClientEvent::Closed { client, reason } => {
                    outboxes.remove(&client);
                    let _ = closed_tx.send((client, reason));
                }
            }
        }
    });
    (ClientLink::new(tx), closed_rx)
}

pub(super) fn push(ob: &Outbox, kind: OutKind, related: Option<&RawId>, msg: &Message) {
    ob.push(Outbound::new(msg.to_bytes(), kind, related.cloned()));
}

pub(super) fn answer(ob: &Outbox, msg: &Message) {
    let params: Value = msg
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    match (msg.kind(), msg.method()) {
        (Kind::Request, Some("initialize")) => {
            let id = msg.id().unwrap();
            let v = params["protocolVersion"].as_str().unwrap_or("2025-06-18");
            let reply = if v == "fail" {
                Message::error_response(Some(id), -32602, "unsupported", None)
            } else {
                Message::response(id, &json!({"protocolVersion": v, "capabilities": {}}))
            };
            push(ob, OutKind::Response, Some(id), &reply);
        }
        (Kind::Request, Some("echo")) => {
            let id = msg.id().unwrap();
            if methods::progress_token(msg.params()).is_some() {
                let p = Message::notification("notifications/progress", Some(&json!({"p":1})));
                push(ob, OutKind::Notification, Some(id), &p);
            }
            let reply = Message::response(id, &json!({"echo": params}));
            push(ob, OutKind::Response, Some(id), &reply);
        }
        (Kind::Notification, Some("x/emit")) => {
            for n in 0..params["n"].as_u64().unwrap_or(1) {
                let ev = Message::notification("x/event", Some(&json!({"n": n})));
                push(ob, OutKind::Notification, None, &ev);
            }
        }
        (Kind::Notification, Some("x/kill")) => ob.close(CloseReason::QueueFull),
        _ => {}
    }
}

pub(super) struct Server {
    pub(super) url: String,
    pub(super) http: reqwest::Client,
    pub(super) closed: Closed,
    pub(super) shutdown: CancellationToken,
    pub(super) task: tokio::task::JoinHandle<std::io::Result<()>>,
}

pub(super) fn settings() -> HttpSettings {
    HttpSettings {
        path: "/mcp".into(),
        allowed_origins: vec!["http://localhost".into()],
        allowed_hosts: vec![],
        auth_token: None,
        session_idle: IDLE,
        sse_replay_events: 8,
        max_message_bytes: 4096,
        client_queue: 64,
        max_connections: 64,
        header_read_timeout: Duration::from_secs(10),
        profiles: Default::default(),
    }
}

pub(super) async fn start(settings: HttpSettings) -> Server {
    let (hub, closed) = fake_hub();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_http(listener, settings, hub, shutdown.clone()));
    Server {
        url,
        http: reqwest::Client::new(),
        closed,
        shutdown,
        task,
    }
}

pub(super) fn rpc(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string()
}

pub(super) fn note(method: &str, params: Value) -> String {
    json!({"jsonrpc":"2.0","method":method,"params":params}).to_string()
}

impl Server {
    pub(super) fn post(
        &self,
        sid: Option<&str>,
        body: impl Into<String>,
    ) -> reqwest::RequestBuilder {
        let accept = "application/json, text/event-stream";
        self.post_with(sid, body, "application/json", accept)
    }

    /// reqwest appends headers, so overriding a default means not setting it here.
    pub(super) fn post_with(
        &self,
        sid: Option<&str>,
        body: impl Into<String>,
        content_type: &str,
        accept: &str,
    ) -> reqwest::RequestBuilder {
        let mut r = self
            .http
            .post(&self.url)
            .header("content-type", content_type)
            .header("accept", accept)
            .body(body.into());
        if let Some(sid) = sid {
            r = r.header("mcp-session-id", sid);
        }
        r
    }

    pub(super) fn get(&self, sid: &str) -> reqwest::RequestBuilder {
        self.http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", sid)
    }

    pub(super) async fn initialize_version(&self, version: &str) -> String {
        let body = rpc(0, "initialize", json!({"protocolVersion": version}));
        let resp = self.post(None, body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["result"]["protocolVersion"], version);
        sid
    }

    pub(super) async fn initialize(&self) -> String {
        self.initialize_version("2025-06-18").await
    }

    /// Asserts the session answers `echo` with the client's own id.
    pub(super) async fn assert_echo(&self, sid: &str) {
        let resp = self
            .post(Some(sid), rpc(41, "echo", json!({"x": 1})))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":41,"result":{"echo":{"x":1}}})
        );
    }

    pub(super) async fn next_closed(&mut self) -> (ClientId, &'static str) {
        tokio::time::timeout(WAIT, self.closed.recv())
            .await
            .expect("client_closed in time")
            .expect("hub alive")
    }
}

/// Reads an SSE body until `needle` has appeared `times` times; returns the text.
pub(super) async fn read_until(resp: reqwest::Response, needle: &str, times: usize) -> String {
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    tokio::time::timeout(WAIT, async {
        while text.matches(needle).count() < times {
            let chunk = stream.next().await.expect("stream open").unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {needle:?} in {text:?}"));
    text
}

pub(super) async fn error_code(resp: reqwest::Response) -> i64 {
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["id"], Value::Null, "{v}");
    v["error"]["code"].as_i64().unwrap()
}
