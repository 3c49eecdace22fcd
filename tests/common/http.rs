//! A minimal Streamable HTTP MCP client for tests, and a helper that starts
//! `mcpmux serve` on `127.0.0.1:0` and reads its listening line.

use std::pin::Pin;
use std::process::Stdio;

use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{mcpmux_bin, temp_config, EVENT_TIMEOUT};

/// A running `mcpmux serve`; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub url: String,
}

impl Daemon {
    /// Starts `mcpmux serve` on the given config (whose `[listen] http` should use port 0).
    pub async fn start(config_toml: &str) -> Daemon {
        Self::start_with_env(config_toml, &[]).await
    }

    /// Like `start`, with extra environment variables for the daemon.
    pub async fn start_with_env(config_toml: &str, env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Self::command(config_toml);
        cmd.envs(env.iter().copied());
        Self::spawn(cmd).await
    }

    /// Like `start`, with the daemon's open-file limit (soft and hard) set to `limit`
    /// before it runs, so it cannot raise it.
    #[cfg(unix)]
    pub async fn start_with_nofile_limit(config_toml: &str, limit: u64) -> Daemon {
        let mut cmd = Self::command(config_toml);
        // SAFETY: the closure runs in the forked child before exec; it only makes the
        // setrlimit system call (async-signal-safe) and allocates nothing.
        unsafe {
            cmd.pre_exec(move || rlimit::setrlimit(rlimit::Resource::NOFILE, limit, limit));
        }
        Self::spawn(cmd).await
    }

    /// Starts `mcpmux serve --config path` (a file the test may edit and reload).
    pub async fn start_at(path: &std::path::Path) -> Daemon {
        let mut cmd = Command::new(mcpmux_bin());
        cmd.args(["serve", "--config"]).arg(path);
        Self::spawn(cmd).await
    }

    /// `mcpmux serve --config <a temporary file holding config_toml>`.
    fn command(config_toml: &str) -> Command {
        let cfg = temp_config(config_toml);
        let mut cmd = Command::new(mcpmux_bin());
        cmd.args(["serve", "--config", cfg.to_str().unwrap()]);
        cmd
    }

    /// Spawns `cmd` and waits for its listening line.
    async fn spawn(mut cmd: Command) -> Daemon {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcpmux serve");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
            .await
            .expect("mcpmux did not start listening")
            .unwrap()
            .expect("mcpmux exited before listening");
        let url = line
            .strip_prefix("mcpmux listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        Daemon { child, url }
    }

    /// Sends SIGTERM and waits (bounded) for mcpmux to exit; returns how it exited.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running").to_string();
        let kill = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(kill.success());
        tokio::time::timeout(EVENT_TIMEOUT, self.child.wait())
            .await
            .expect("mcpmux did not exit after SIGTERM")
            .unwrap()
    }

    pub fn origin(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }
}

/// One MCP client session over Streamable HTTP.
pub struct HttpClient {
    pub http: reqwest::Client,
    pub url: String,
    pub session: String,
    pub version: String,
    next_id: u64,
    events: mpsc::UnboundedReceiver<Value>,
    get_task: Option<tokio::task::JoinHandle<()>>,
}

impl HttpClient {
    /// Initializes a session with `capabilities` and opens its GET stream.
    pub async fn connect(url: &str, capabilities: Value) -> HttpClient {
        Self::connect_with(url, capabilities, None).await
    }

    /// Like `connect`, sending `Authorization: Bearer <token>` on every request.
    pub async fn connect_with(url: &str, capabilities: Value, token: Option<&str>) -> HttpClient {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = token {
            headers.insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": {"name": "test", "version": "0"}}});
        let resp = post(&http, url, None, &init).await;
        assert!(
            resp.status().is_success(),
            "initialize: HTTP {}",
            resp.status()
        );
        let session = resp
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        let body = read_body(resp).await;
        let version = body[0]["result"]["protocolVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let (tx, events) = mpsc::unbounded_channel();
        let mut c = HttpClient {
            http,
            url: url.to_owned(),
            session,
            version,
            next_id: 0,
            events,
            get_task: None,
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(c.post(&note).await.status(), 202);
        c.open_get(tx).await;
        c
    }

    async fn open_get(&mut self, tx: mpsc::UnboundedSender<Value>) {
        let resp = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().is_success(),
            "GET stream: HTTP {}",
            resp.status()
        );
        self.get_task = Some(tokio::spawn(async move {
            let mut events = resp.bytes_stream().eventsource();
            while let Some(Ok(ev)) = events.next().await {
                if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        }));
    }

    pub async fn post(&self, body: &Value) -> reqwest::Response {
        self.try_post(body).await.unwrap()
    }

    /// [`HttpClient::post`], for a POST that may meet no answer (the daemon exits).
    pub async fn try_post(&self, body: &Value) -> reqwest::Result<reqwest::Response> {
        self.http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
            .body(body.to_string())
            .send()
            .await
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(&req).await;
        let msgs = read_body(resp).await;
        msgs.into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no response to {method}"))
    }

    /// Calls a tool; returns `structuredContent` (or the whole result).
    pub async fn tool(&mut self, name: &str, args: Value) -> Value {
        let r = self
            .call("tools/call", json!({"name": name, "arguments": args}))
            .await;
        super::tool_output(name, &r)
    }

    /// The next message on the GET stream.
    pub async fn next_event(&mut self) -> Value {
        tokio::time::timeout(EVENT_TIMEOUT, self.events.recv())
            .await
            .expect("timed out waiting for an event")
            .expect("GET stream ended")
    }

    /// Every message on the GET stream before the first whose method is `marker` (read
    /// and dropped; bounded by `EVENT_TIMEOUT`). For negative checks: make the daemon
    /// send `marker` after whatever must not arrive (e.g. `emit_list_changed`, which
    /// reaches every legacy client's GET stream), then check what came before it.
    pub async fn events_until(&mut self, marker: &str) -> Vec<Value> {
        let mut before = vec![];
        loop {
            let ev = self.next_event().await;
            if ev["method"] == marker {
                return before;
            }
            before.push(ev);
        }
    }

    pub async fn delete(mut self) -> reqwest::StatusCode {
        if let Some(t) = self.get_task.take() {
            t.abort();
        }
        self.http
            .delete(&self.url)
            .header("mcp-session-id", &self.session)
            .send()
            .await
            .unwrap()
            .status()
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        if let Some(t) = self.get_task.take() {
            t.abort();
        }
    }
}

pub async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    req.body(body.to_string()).send().await.unwrap()
}

/// Reads a JSON or SSE response body as a list of messages.
pub async fn read_body(resp: reqwest::Response) -> Vec<Value> {
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if sse {
        let mut out = vec![];
        let mut events = resp.bytes_stream().eventsource();
        while let Some(Ok(ev)) = events.next().await {
            if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                out.push(v);
            }
        }
        out
    } else {
        let text = resp.text().await.unwrap();
        match serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}")) {
            Value::Array(items) => items,
            v => vec![v],
        }
    }
}

/// A POST answered as SSE, read event by event.
pub struct PostStream {
    events: Pin<Box<dyn Stream<Item = Value> + Send>>,
}

impl PostStream {
    /// POSTs `body` asking for an SSE answer only.
    pub async fn open(c: &HttpClient, body: &Value) -> PostStream {
        let resp = c
            .http
            .post(&c.url)
            .header("accept", "text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &c.session)
            .header("mcp-protocol-version", &c.version)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let events = resp
            .bytes_stream()
            .eventsource()
            .filter_map(|e| async move { e.ok().and_then(|e| serde_json::from_str(&e.data).ok()) });
        PostStream {
            events: Box::pin(events),
        }
    }

    pub async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(EVENT_TIMEOUT, self.events.next())
            .await
            .expect("timed out waiting for an event on a POST stream")
    }

    /// Everything until the stream ends.
    pub async fn rest(mut self) -> Vec<Value> {
        let mut out = vec![];
        while let Some(v) = self.next().await {
            out.push(v);
        }
        out
    }
}
