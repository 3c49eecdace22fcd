//! Benchmark clients: a Streamable HTTP MCP session (POST + GET stream) over a shared
//! `reqwest` pool, the GET-stream receiver that counts updates and records their
//! latency, and a newline-JSON stdio client for direct and `mcpmux stdio` paths.
//!
//! Owns: nothing global. Each [`Session`] is one MCP session; one `reqwest::Client` is
//! shared by all sessions of a scenario row (one client per session would load the TLS
//! roots 10,000 times), so POSTs reuse pooled keep-alive connections and each GET
//! stream holds its own connection.
//! Never: sleeps, or waits without a deadline: every wait takes a timeout.

use std::borrow::Cow;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Notify;

/// The longest any single request may take before a scenario fails.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The protocol version every benchmark client asks for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// A fresh connection pool for one scenario row (dropping it closes its connections).
pub fn http_pool() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()?)
}

/// Nanoseconds since the UNIX epoch: the clock the scripted upstream stamps `_meta.t` with.
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Deliveries counted across all receivers of a row, with one waiter.
#[derive(Debug, Default)]
pub struct Tally {
    delivered: AtomicU64,
    /// Receivers wake the waiter only once `delivered` reaches this.
    target: AtomicU64,
    notify: Notify,
    /// Body chunks the receivers read (each is one or more TCP reads' worth).
    reads: AtomicU64,
}

impl Tally {
    pub fn new() -> Arc<Tally> {
        Arc::new(Tally::default())
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// Body chunks read so far by the light receivers (zero for the full ones).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Acquire)
    }

    fn add(&self) {
        let now = self.delivered.fetch_add(1, Ordering::AcqRel) + 1;
        if now >= self.target.load(Ordering::Acquire) {
            self.notify.notify_one();
        }
    }

    /// Sets the count to wait for; call before triggering the deliveries.
    pub fn expect(&self, target: u64) {
        self.target.store(target, Ordering::Release);
    }

    /// Waits until `delivered >= target` (set with [`Tally::expect`]) or `timeout`
    /// passes; returns the count then.
    pub async fn wait(&self, timeout: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let d = self.delivered();
            if d >= self.target.load(Ordering::Acquire) {
                return d;
            }
            // notify_one stores a permit, so a wake between the check and here is kept.
            if tokio::time::timeout_at(deadline, self.notify.notified())
                .await
                .is_err()
            {
                return self.delivered();
            }
        }
    }
}

/// One `(emitted_at_unix_ns, latency_ns)` per stamped update received.
pub type Samples = Arc<Mutex<Vec<(u64, u64)>>>;

/// A GET stream being read by its own task; aborted on drop.
pub struct Receiver {
    pub samples: Samples,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Deserialize)]
struct Note<'a> {
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<NoteParams<'a>>,
}

#[derive(Deserialize)]
struct NoteParams<'a> {
    #[serde(borrow)]
    uri: Option<Cow<'a, str>>,
    #[serde(rename = "_meta")]
    meta: Option<NoteMeta>,
}

#[derive(Deserialize)]
struct NoteMeta {
    t: Option<u64>,
}

/// How a receiver reads its SSE stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parse {
    /// `eventsource-stream` + `serde_json` on every event: what a real client does.
    #[default]
    Full,
    /// A byte scan for the event boundary, the method, the URI and `"t":`, so that the
    /// clients (which share the 2 cores with the server) cost as little as possible.
    Light,
}

/// Reads an SSE response, counting each `notifications/resources/updated` for `uri`
/// into `tally` and recording its latency when it carries `_meta.t`.
pub fn receive(
    resp: reqwest::Response,
    uri: Arc<str>,
    tally: Arc<Tally>,
    parse: Parse,
) -> Receiver {
    let samples: Samples = Arc::new(Mutex::new(Vec::new()));
    let mine = samples.clone();
    let task = match parse {
        Parse::Full => tokio::spawn(async move {
            let mut events = resp.bytes_stream().eventsource();
            while let Some(Ok(ev)) = events.next().await {
                let Ok(note) = serde_json::from_str::<Note<'_>>(&ev.data) else {
                    continue;
                };
                if note.method.as_deref() != Some("notifications/resources/updated") {
                    continue;
                }
                let Some(params) = note.params else { continue };
                if params.uri.as_deref() != Some(&*uri) {
                    continue;
                }
                if let Some(t) = params.meta.and_then(|m| m.t) {
                    let lat = unix_nanos().saturating_sub(t);
                    mine.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((t, lat));
                }
                tally.add();
            }
        }),
        Parse::Light => tokio::spawn(async move {
            let needle = format!("\"uri\":\"{uri}\"");
            // Each searcher is built once per receiver, not per search.
            let events_end = memchr::memmem::Finder::new(b"\n\n");
            let updated = memchr::memmem::Finder::new(b"notifications/resources/updated");
            let this_uri = memchr::memmem::Finder::new(needle.as_bytes());
            let stamp = memchr::memmem::Finder::new(b"\"t\":");
            let mut stream = resp.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                tally.reads.fetch_add(1, Ordering::Relaxed);
                buf.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some(end) = events_end.find(&buf[start..]) {
                    let ev = &buf[start..start + end];
                    start += end + 2;
                    if updated.find(ev).is_none() || this_uri.find(ev).is_none() {
                        continue;
                    }
                    if let Some(t) = stamp_of(ev, &stamp) {
                        let lat = unix_nanos().saturating_sub(t);
                        mine.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((t, lat));
                    }
                    tally.add();
                }
                buf.drain(..start);
            }
        }),
    };
    Receiver { samples, task }
}

/// The number after the first `"t":` in an event (`stamp` finds `"t":`). The light
/// receivers share the 2 cores with the servers, so their scans are SIMD searches with
/// searchers built once.
fn stamp_of(ev: &[u8], stamp: &memchr::memmem::Finder<'_>) -> Option<u64> {
    let at = stamp.find(ev)? + 4;
    let digits = ev[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&ev[at..at + digits]).ok()?.parse().ok()
}

/// Opens a 2026-07-28 `subscriptions/listen` stream for `uri` (stateless: no session)
/// and starts counting its updates.
///
/// # Errors
/// Any HTTP failure or a non-success status.
pub async fn open_listen(
    http: &reqwest::Client,
    url: &str,
    uri: Arc<str>,
    tally: Arc<Tally>,
    parse: Parse,
) -> Result<Receiver> {
    let params = json!({"notifications": {"resourceSubscriptions": [&*uri]}});
    let resp = stateless_post(
        http,
        url,
        json!("listen:0"),
        "subscriptions/listen",
        None,
        params,
    )
    .await?;
    if !resp.status().is_success() {
        bail!("subscriptions/listen: HTTP {}", resp.status());
    }
    Ok(receive(resp, uri, tally, parse))
}

/// The 2026-07-28 protocol version (listen holders).
pub const MODERN_VERSION: &str = "2026-07-28";

/// One stateless 2026-07-28 request: `params` with the era's `_meta`, and the era's
/// headers (`Mcp-Name` when `name` is given).
async fn stateless_post(
    http: &reqwest::Client,
    url: &str,
    id: Value,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> Result<reqwest::Response> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN_VERSION)
        .header("mcp-method", method);
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    req.body(body.to_string())
        .send()
        .await
        .with_context(|| method.to_owned())
}

/// One stateless 2026-07-28 `tools/call` (no session; the era's `_meta` and headers),
/// answered as JSON; returns its result.
///
/// # Errors
/// Any HTTP failure, a non-JSON answer or a JSON-RPC error.
pub async fn stateless_tool(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    name: &str,
    args: Value,
) -> Result<Value> {
    let params = json!({"name": name, "arguments": args});
    let resp = stateless_post(http, url, json!(id), "tools/call", Some(name), params).await?;
    let r = read_messages(resp)
        .await?
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .ok_or_else(|| anyhow!("no answer to tools/call {name}"))?;
    tool_result(name, r)
}

/// One MCP session over Streamable HTTP.
pub struct Session {
    http: reqwest::Client,
    url: Arc<str>,
    pub id: String,
    version: String,
    next_id: u64,
}

impl Session {
    /// `initialize` + `notifications/initialized`.
    ///
    /// # Errors
    /// Any HTTP failure or a non-success status.
    pub async fn connect(http: &reqwest::Client, url: &str) -> Result<Session> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "loadgen", "version": "0"}}});
        let resp = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .context("initialize")?;
        if !resp.status().is_success() {
            bail!("initialize: HTTP {}", resp.status());
        }
        let id = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow!("initialize: no Mcp-Session-Id"))?
            .to_owned();
        let body = read_messages(resp).await?;
        let version = body
            .first()
            .and_then(|m| m["result"]["protocolVersion"].as_str())
            .unwrap_or(PROTOCOL_VERSION)
            .to_owned();
        let s = Session {
            http: http.clone(),
            url: url.into(),
            id,
            version,
            next_id: 0,
        };
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let status = s.post(&note).await?.status();
        if status != 202 {
            bail!("notifications/initialized: HTTP {status}");
        }
        Ok(s)
    }

    /// Opens the GET stream and starts counting updates of `uri` on it.
    ///
    /// # Errors
    /// Any HTTP failure or a non-success status.
    pub async fn open_stream(
        &self,
        uri: Arc<str>,
        tally: Arc<Tally>,
        parse: Parse,
    ) -> Result<Receiver> {
        let resp = self
            .http
            .get(&*self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .context("GET stream")?;
        if !resp.status().is_success() {
            bail!("GET stream: HTTP {}", resp.status());
        }
        Ok(receive(resp, uri, tally, parse))
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response> {
        Ok(self
            .http
            .post(&*self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", &self.version)
            .body(body.to_string())
            .timeout(CALL_TIMEOUT)
            .send()
            .await?)
    }

    /// Sends a request; returns its response message (`result` or `error` inside).
    ///
    /// # Errors
    /// HTTP failures, or no response with the request's id in the body.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(&req).await.with_context(|| method.to_owned())?;
        read_messages(resp)
            .await?
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .ok_or_else(|| anyhow!("no response to {method}"))
    }

    /// Calls a tool; returns `structuredContent` (or the whole result).
    ///
    /// # Errors
    /// As [`Session::call`], or a JSON-RPC error.
    pub async fn tool(&mut self, name: &str, args: Value) -> Result<Value> {
        let r = self
            .call("tools/call", json!({"name": name, "arguments": args}))
            .await?;
        tool_result(name, r)
    }
}

fn tool_result(name: &str, r: Value) -> Result<Value> {
    let result = r
        .get("result")
        .ok_or_else(|| anyhow!("tool {name} failed: {r}"))?;
    Ok(result
        .get("structuredContent")
        .cloned()
        .unwrap_or_else(|| result.clone()))
}

/// Reads a JSON or SSE response body as a list of messages.
async fn read_messages(resp: reqwest::Response) -> Result<Vec<Value>> {
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if sse {
        let mut out = vec![];
        let mut events = resp.bytes_stream().eventsource();
        while let Some(ev) = events.next().await {
            out.push(serde_json::from_str(&ev?.data)?);
        }
        Ok(out)
    } else {
        let status = resp.status();
        let bytes = resp.bytes().await?;
        match serde_json::from_slice::<Value>(&bytes)
            .with_context(|| format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)))?
        {
            Value::Array(items) => Ok(items),
            v => Ok(vec![v]),
        }
    }
}

/// A client speaking newline-delimited JSON-RPC to a child process's stdio.
pub struct LineClient {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl LineClient {
    /// Spawns `program args` (killed on drop) and initializes an MCP session with it.
    ///
    /// # Errors
    /// Spawn failure or a failed `initialize`.
    pub async fn start(program: &std::path::Path, args: &[&str]) -> Result<LineClient> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", program.display()))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut c = LineClient {
            _child: child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
        };
        let params = json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                            "clientInfo": {"name": "loadgen", "version": "0"}});
        let r = c.call("initialize", params).await?;
        if r.get("result").is_none() {
            bail!("initialize failed: {r}");
        }
        c.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(c)
    }

    /// Ends the child's stdin and waits for it to exit.
    ///
    /// # Errors
    /// Waiting for the child failed.
    pub async fn finish(self) -> Result<std::process::ExitStatus> {
        let LineClient {
            mut _child, stdin, ..
        } = self;
        drop(stdin);
        Ok(_child.wait().await?)
    }

    async fn write(&mut self, msg: &Value) -> Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Sends a request without waiting; returns its id.
    ///
    /// # Errors
    /// The child's stdin is closed.
    pub async fn send(&mut self, method: &str, params: Value) -> Result<u64> {
        self.next_id += 1;
        let id = self.next_id;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(id)
    }

    /// The next response (notifications and server requests are skipped).
    ///
    /// # Errors
    /// EOF, a timeout or a line that is not JSON.
    pub async fn next_response(&mut self) -> Result<Value> {
        loop {
            let line = tokio::time::timeout(CALL_TIMEOUT, self.lines.next_line())
                .await
                .context("timed out waiting for a response")??
                .ok_or_else(|| anyhow!("stdout ended"))?;
            let v: Value = serde_json::from_str(&line)?;
            if v.get("method").is_none() {
                return Ok(v);
            }
        }
    }

    /// Sends a request and waits for its response.
    ///
    /// # Errors
    /// As [`LineClient::send`] and [`LineClient::next_response`].
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.send(method, params).await?;
        loop {
            let v = self.next_response().await?;
            if v["id"] == json!(id) {
                return Ok(v);
            }
        }
    }

    /// Calls a tool; returns `structuredContent` (or the whole result).
    ///
    /// # Errors
    /// As [`LineClient::call`], or a JSON-RPC error.
    pub async fn tool(&mut self, name: &str, args: Value) -> Result<Value> {
        let r = self
            .call("tools/call", json!({"name": name, "arguments": args}))
            .await?;
        tool_result(name, r)
    }
}

/// Time since `start`, in nanoseconds.
pub fn ns_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// CPU time (user + system) of this process's threads whose name starts with `prefix`,
/// from `/proc/self/task/*/stat`; zero where `/proc` is unavailable. Resolution is one
/// clock tick (usually 10 ms), so use it on runs of a second or more.
/// The machine's CPU time so far, from `/proc/stat`: (busy, all), summed over every
/// core (busy: all but idle and I/O wait). Zero where there is no `/proc/stat`.
pub fn machine_cpu() -> MachineCpu {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return MachineCpu::default();
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return MachineCpu::default();
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let all: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    // CLK_TCK is 100 on every Linux configuration this runs on.
    MachineCpu {
        busy: Duration::from_millis(all.saturating_sub(idle) * 10),
        all: Duration::from_millis(all * 10),
    }
}

/// A reading of [`machine_cpu`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineCpu {
    pub busy: Duration,
    pub all: Duration,
}

impl MachineCpu {
    /// What was used between `earlier` and this reading.
    pub fn since(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            all: self.all.saturating_sub(earlier.all),
        }
    }
}

pub fn thread_cpu(prefix: &str) -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut ticks = 0u64;
    for task in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        // Fields after the name: state is field 3; utime and stime are fields 14 and 15.
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
    }
    // CLK_TCK is 100 on every Linux configuration this runs on.
    Duration::from_millis(ticks * 10)
}
