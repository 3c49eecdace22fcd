//! A minimal 2026-07-28 client for tests: stateless POSTs with the era's `_meta` and
//! headers, answered as JSON or read event by event as SSE (`subscriptions/listen`).

use std::pin::Pin;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};

use super::EVENT_TIMEOUT;

pub const VERSION: &str = "2026-07-28";

/// The `_meta` every modern request carries (no client capabilities declared).
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    })
}

/// A request body with `params` plus the standard `_meta`.
pub fn request(id: Value, method: &str, mut params: Value) -> Value {
    if !params.is_object() {
        params = json!({});
    }
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub struct ModernClient {
    pub http: reqwest::Client,
    pub url: String,
}

impl ModernClient {
    pub fn new(url: &str) -> Self {
        ModernClient {
            http: reqwest::Client::new(),
            url: url.to_owned(),
        }
    }

    /// POSTs `body` with the headers the era requires (computed from the body), plus
    /// `extra` headers (which replace computed ones of the same name).
    pub async fn post_with(&self, body: &Value, extra: &[(&str, &str)]) -> reqwest::Response {
        let method = body["method"].as_str().unwrap_or_default().to_owned();
        let mut headers: Vec<(String, String)> = vec![
            (
                "accept".into(),
                "application/json, text/event-stream".into(),
            ),
            ("content-type".into(), "application/json".into()),
            ("mcp-protocol-version".into(), VERSION.into()),
            ("mcp-method".into(), method.clone()),
        ];
        let name = match method.as_str() {
            "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
            "resources/read" => body["params"]["uri"].as_str(),
            _ => None,
        };
        if let Some(n) = name {
            headers.push(("mcp-name".into(), n.to_owned()));
        }
        for (k, v) in extra {
            headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
            if !v.is_empty() {
                headers.push(((*k).to_owned(), (*v).to_owned()));
            }
        }
        let mut req = self.http.post(&self.url).body(body.to_string());
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send().await.unwrap()
    }

    /// A request answered as JSON: (HTTP status, body).
    pub async fn call(&self, id: u64, method: &str, params: Value) -> (u16, Value) {
        let resp = self
            .post_with(&request(json!(id), method, params), &[])
            .await;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A request whose answer is read as an SSE stream (listen, or progress).
    pub async fn open_stream(&self, body: &Value) -> EventStream {
        let resp = self
            .post_with(body, &[("accept", "text/event-stream")])
            .await;
        assert_eq!(resp.status(), 200, "stream request refused");
        let events = resp
            .bytes_stream()
            .eventsource()
            .filter_map(|e| async move { e.ok().and_then(|e| serde_json::from_str(&e.data).ok()) });
        EventStream {
            events: Box::pin(events),
        }
    }

    /// Opens `subscriptions/listen` with id `id` for `uris` and returns the stream
    /// after its acknowledgement (which is returned too).
    pub async fn listen(&self, id: &str, uris: &[&str]) -> (EventStream, Value) {
        let body = request(
            json!(id),
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": uris}}),
        );
        let mut s = self.open_stream(&body).await;
        let ack = s.next().await.expect("an acknowledgement");
        (s, ack)
    }
}

/// The messages of one SSE answer, in order.
pub struct EventStream {
    events: Pin<Box<dyn Stream<Item = Value> + Send>>,
}

impl EventStream {
    /// The next message; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(EVENT_TIMEOUT, self.events.next())
            .await
            .expect("timed out waiting for an event")
    }
}
