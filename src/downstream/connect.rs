//! `mcpmux connect URL`: a stdio ↔ Streamable HTTP bridge, so a host that can only
//! launch stdio servers shares a running mcpmux daemon.
//!
//! Each stdin line is POSTed (requests concurrently, so a slow call does not hold up
//! the others; notifications and responses in order). JSON and SSE answers are written
//! to stdout one message per line; after `initialize` succeeds a GET stream carries the
//! daemon's own messages, resumed with `Last-Event-ID` when it drops. A request the
//! daemon cannot answer gets a JSON-RPC error line, so the host never waits forever.
//!
//! A 2026-07-28 request (its `_meta` names the modern version) is POSTed statelessly
//! with the era's headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and
//! `Mcp-Param-*` from the tool's `x-mcp-header` annotations, learned from the
//! `tools/list` answers that pass through); its stream (a listen's, say) is closed when
//! the host sends `notifications/cancelled` naming it, which is how stdio ends a
//! listen (docs/architecture.md, "Stdio mode and mcpmux connect").
//! Never writes anything but MCP to stdout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{SinkExt, StreamExt};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::task::AbortOnDropHandle;

use crate::config::LimitsConfig;
use crate::protocol::codec::{Frame, JsonLines};
use crate::protocol::stateless::{self, meta};
use crate::protocol::{code, methods, Kind, Message, RawId};

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";

/// Session state learned from the daemon.
#[derive(Default)]
struct Session {
    id: Option<String>,
    version: Option<String>,
    /// `inputSchema` of each tool seen in a `tools/list` answer (for `Mcp-Param-*`).
    tools: HashMap<String, serde_json::Value>,
    /// Modern requests in flight: closing their stream cancels them.
    modern: HashMap<RawId, tokio::task::AbortHandle>,
}

/// Runs the bridge until the input ends; every request carries `token` as its bearer
/// token, when given (a daemon or profile with `auth_token_env`).
///
/// # Errors
/// When stdout cannot be written, or the token is not a valid header value.
pub async fn bridge<R, W>(
    url: &str,
    token: Option<String>,
    input: R,
    output: W,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let max = LimitsConfig::DEFAULT_MAX_MESSAGE_BYTES;
    let mut headers = HeaderMap::new();
    if let Some(t) = token {
        let mut v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the bearer token is not a valid header value",
            )
        })?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .map_err(std::io::Error::other)?;
    let session = Arc::new(Mutex::new(Session::default()));
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(1024);
    let writer = tokio::spawn(async move {
        let mut out = FramedWrite::new(output, JsonLines::new(max));
        while let Some(line) = out_rx.recv().await {
            out.send(line).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut lines = FramedRead::new(input, JsonLines::new(max));
    let mut tasks = tokio::task::JoinSet::new();
    // The session's GET stream, once `initialize` gave a session id.
    let mut get: Option<AbortOnDropHandle<()>> = None;
    while let Some(frame) = lines.next().await {
        let line = match frame? {
            Frame::Line(l) if l.trim().is_empty() => continue,
            Frame::Line(l) => l,
            Frame::TooLong => {
                let e =
                    Message::error_response(None, code::INVALID_REQUEST, "message too long", None);
                let _ = out_tx.send(e.to_bytes()).await;
                continue;
            }
            Frame::NotUtf8 => {
                let e = Message::error_response(None, code::PARSE_ERROR, "line is not UTF-8", None);
                let _ = out_tx.send(e.to_bytes()).await;
                continue;
            }
        };
        let msg = match Message::parse(line.as_bytes()) {
            Ok(m) => m,
            Err(e) => {
                let id = Message::salvage_id(line.as_bytes());
                let e = Message::error_response(id.as_ref(), e.code(), &e.to_string(), None);
                let _ = out_tx.send(e.to_bytes()).await;
                continue;
            }
        };
        if let Some(target) = modern_cancel_target(&msg, &session) {
            // Closing a modern request's stream is its cancellation.
            if let Some(task) = session.lock().expect("not poisoned").modern.remove(&target) {
                task.abort();
            }
            continue;
        }
        let post = BridgePost {
            http: http.clone(),
            url: url.to_owned(),
            session: session.clone(),
            out: out_tx.clone(),
        };
        let is_init = msg.method() == Some(methods::INITIALIZE);
        if msg.kind() == Kind::Request && modern_version(&msg).is_some() {
            let id = msg.id().cloned().expect("requests have ids");
            let task = tasks.spawn(async move { post.send(msg).await });
            let mut s = session.lock().expect("not poisoned");
            s.modern.retain(|_, t| !t.is_finished());
            s.modern.insert(id, task);
        } else if msg.kind() == Kind::Request && !is_init {
            tasks.spawn(async move { post.send(msg).await });
        } else {
            post.send(msg).await;
        }
        if is_init && get.is_none() && session.lock().expect("not poisoned").id.is_some() {
            get = Some(AbortOnDropHandle::new(tokio::spawn(get_stream(
                http.clone(),
                url.to_owned(),
                session.clone(),
                out_tx.clone(),
            ))));
        }
        // Finished requests are let go as the bridge goes, not kept until input ends.
        while tasks.try_join_next().is_some() {}
    }
    // Input ended: let in-flight requests finish briefly, end the session, stop.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    drop(get);
    let id = session.lock().expect("not poisoned").id.clone();
    if let Some(id) = id {
        let _ = http.delete(url).header(SESSION, id).send().await;
    }
    drop(out_tx);
    writer.await.unwrap_or(Ok(()))
}

struct BridgePost {
    http: reqwest::Client,
    url: String,
    session: Arc<Mutex<Session>>,
    out: mpsc::Sender<Bytes>,
}

impl BridgePost {
    async fn send(self, msg: Message) {
        let request_id = (msg.kind() == Kind::Request)
            .then(|| msg.id().cloned())
            .flatten();
        let is_init = msg.method() == Some(methods::INITIALIZE);
        let result = match modern_version(&msg) {
            Some(v) if msg.kind() == Kind::Request => self.try_send_modern(msg, &v).await,
            _ => self.try_send(msg, is_init).await,
        };
        if let Some(id) = &request_id {
            self.session.lock().expect("not poisoned").modern.remove(id);
        }
        if let Err(why) = result {
            tracing::warn!(%why, "bridge request failed");
            if let Some(id) = request_id {
                let e = Message::error_response(Some(&id), code::INTERNAL_ERROR, &why, None);
                let _ = self.out.send(e.to_bytes()).await;
            }
        }
    }

    /// A 2026-07-28 request: stateless, with the era's headers.
    async fn try_send_modern(&self, msg: Message, version: &str) -> Result<(), String> {
        let mut headers = base_headers();
        let mut put = |name: &str, value: &str| {
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(n, v);
            }
        };
        put(VERSION, version);
        let method = msg.method().unwrap_or_default().to_owned();
        put("mcp-method", &method);
        let params: serde_json::Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        if let Some(name) = stateless::mcp_name(&msg) {
            put("mcp-name", &stateless::encode_header_value(&name));
        }
        if method == methods::TOOLS_CALL {
            let schema = params["name"].as_str().and_then(|n| {
                let s = self.session.lock().expect("not poisoned");
                s.tools.get(n).cloned()
            });
            if let Some(schema) = schema {
                for (name, value) in stateless::param_headers(&schema, &params["arguments"]) {
                    put(&format!("mcp-param-{name}"), &value);
                }
            }
        }
        let lists_tools = method == "tools/list";
        self.exchange(headers, msg, false, lists_tools).await
    }

    async fn try_send(&self, msg: Message, is_init: bool) -> Result<(), String> {
        let mut headers = base_headers();
        {
            let s = self.session.lock().expect("not poisoned");
            if let Some(id) = s.id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                headers.insert(SESSION, id);
            }
            if let Some(v) = s
                .version
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                headers.insert(VERSION, v);
            }
        }
        let lists_tools = msg.method() == Some("tools/list");
        self.exchange(headers, msg, is_init, lists_tools).await
    }

    /// POSTs `msg` and writes what comes back; learns tool schemas from a
    /// `tools/list` answer (`lists_tools`).
    async fn exchange(
        &self,
        headers: HeaderMap,
        msg: Message,
        is_init: bool,
        lists_tools: bool,
    ) -> Result<(), String> {
        // The response an event stream must carry before it ends (a request's).
        let awaited = (msg.kind() == Kind::Request)
            .then(|| msg.id().cloned())
            .flatten();
        let resp = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(msg.to_json())
            .send()
            .await
            .map_err(|e| format!("cannot reach mcpmux at {}: {e}", self.url))?;
        let status = resp.status();
        if is_init {
            if let Some(id) = resp.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
                self.session.lock().expect("not poisoned").id = Some(id.to_owned());
            }
        }
        if status == reqwest::StatusCode::ACCEPTED {
            return Ok(());
        }
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_sse {
            let mut events = resp.bytes_stream().eventsource();
            let mut answered = awaited.is_none();
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    // After the answer, a broken stream loses nothing the host waits for
                    // (an error now would answer the request twice).
                    Err(_) if answered => return Ok(()),
                    Err(e) => return Err(format!("event stream broke: {e}")),
                };
                answered = answered
                    || Message::parse(ev.data.as_bytes())
                        .is_ok_and(|m| m.kind() == Kind::Response && m.id() == awaited.as_ref());
                self.emit(ev.data.as_bytes(), is_init, lists_tools).await;
            }
            // Ended by the daemon without the answer (it gave up on this client, say):
            // the host must hear that its request (a listen, too) is over.
            return if answered {
                Ok(())
            } else {
                Err("mcpmux ended the request's event stream without its response".into())
            };
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the answer failed: {e}"))?;
        if body.is_empty() {
            return if status.is_success() {
                Ok(())
            } else {
                Err(format!("mcpmux answered HTTP {status}"))
            };
        }
        // JSON-RPC error bodies of HTTP errors are forwarded when they carry our id;
        // otherwise the caller turns the status into an error for the request.
        let parsed = Message::parse(&body)
            .ok()
            .filter(|m| m.kind() == Kind::Response);
        match parsed {
            Some(m) if m.id().is_some() || status.is_success() => {
                self.emit(&body, is_init, lists_tools).await;
                Ok(())
            }
            _ if status.is_success() => {
                self.emit(&body, is_init, lists_tools).await;
                Ok(())
            }
            _ => Err(format!(
                "mcpmux answered HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )),
        }
    }

    /// Writes one message from the daemon to stdout (compacted to one line).
    async fn emit(&self, data: &[u8], is_init: bool, lists_tools: bool) {
        if data.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if is_init || lists_tools {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
                let mut s = self.session.lock().expect("not poisoned");
                if let Some(ver) = v["result"]["protocolVersion"].as_str().filter(|_| is_init) {
                    s.version = Some(ver.to_owned());
                }
                for tool in v["result"]["tools"].as_array().into_iter().flatten() {
                    if let Some(name) = tool["name"].as_str() {
                        s.tools.insert(name.to_owned(), tool["inputSchema"].clone());
                    }
                }
            }
        }
        let line = if data.contains(&b'\n') {
            match serde_json::from_slice::<serde_json::Value>(data) {
                Ok(v) => Bytes::from(v.to_string()),
                Err(_) => return,
            }
        } else {
            Bytes::copy_from_slice(data)
        };
        let _ = self.out.send(line).await;
    }
}

fn base_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers
}

/// The modern protocol version a request's `_meta` names, if it names one.
fn modern_version(msg: &Message) -> Option<String> {
    let params = msg.params()?.get();
    if !params.contains(meta::PROTOCOL_VERSION) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(params).ok()?;
    let version = v["_meta"][meta::PROTOCOL_VERSION].as_str()?;
    stateless::is_modern(version).then(|| version.to_owned())
}

/// The modern request a `notifications/cancelled` names, when one is in flight.
fn modern_cancel_target(msg: &Message, session: &Mutex<Session>) -> Option<RawId> {
    if msg.method() != Some(methods::CANCELLED) {
        return None;
    }
    let id = methods::parse_params::<methods::CancelledParams>(msg.params())?
        .request_id
        .and_then(|r| RawId::parse(r.get()))?;
    let s = session.lock().expect("not poisoned");
    s.modern.contains_key(&id).then_some(id)
}

/// Keeps a GET stream open for the daemon's own messages, resuming after drops.
async fn get_stream(
    http: reqwest::Client,
    url: String,
    session: Arc<Mutex<Session>>,
    out: mpsc::Sender<Bytes>,
) {
    let mut last_event: Option<String> = None;
    let mut failures = 0u32;
    while failures < 10 {
        let mut req = http.get(&url).header(ACCEPT, "text/event-stream");
        {
            let s = session.lock().expect("not poisoned");
            if let Some(id) = &s.id {
                req = req.header(SESSION, id);
            }
            if let Some(v) = &s.version {
                req = req.header(VERSION, v);
            }
        }
        if let Some(id) = &last_event {
            req = req.header("last-event-id", id);
        }
        match req.send().await {
            Ok(resp) if resp.status().is_success() => {
                failures = 0;
                let mut events = resp.bytes_stream().eventsource();
                while let Some(Ok(ev)) = events.next().await {
                    if !ev.id.is_empty() {
                        last_event = Some(ev.id.clone());
                    }
                    if !ev.data.trim().is_empty()
                        && out.send(Bytes::from(compact(&ev.data))).await.is_err()
                    {
                        return;
                    }
                }
            }
            Ok(resp) if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED => return,
            Ok(resp) if resp.status() == reqwest::StatusCode::NOT_FOUND => {
                tracing::warn!("mcpmux no longer knows this session; the host must reconnect");
                return;
            }
            _ => {}
        }
        failures += 1;
        tokio::time::sleep(Duration::from_millis(100 << failures.min(6))).await;
    }
}

fn compact(data: &str) -> String {
    if data.contains('\n') {
        serde_json::from_str::<serde_json::Value>(data)
            .map_or_else(|_| data.replace('\n', " "), |v| v.to_string())
    } else {
        data.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon's event stream that ends without the request's response (the daemon
    /// gave up on the client) ends the request for the host with an error for its id,
    /// after what the stream did carry.
    #[tokio::test]
    async fn an_event_stream_that_ends_without_the_response_is_an_error_for_its_id() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(|| async {
            (
                [("content-type", "text/event-stream")],
                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n",
            )
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let (out, mut written) = mpsc::channel(8);
        let post = BridgePost {
            http: reqwest::Client::new(),
            url,
            session: Arc::default(),
            out,
        };
        let id = RawId::from_u64(5);
        post.send(Message::request(
            &id,
            "tools/call",
            Some(&serde_json::json!({"name": "x"})),
        ))
        .await;
        let first = written.recv().await.expect("the progress");
        assert!(std::str::from_utf8(&first).unwrap().contains("progress"));
        let last = Message::parse(&written.recv().await.expect("an error")).unwrap();
        assert_eq!(last.id(), Some(&id));
        assert!(last.error().is_some(), "{last:?}");
    }
}
