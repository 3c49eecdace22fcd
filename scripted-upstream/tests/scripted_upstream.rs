//! Integration tests for the `scripted-upstream` test server: spawn the binary and speak
//! newline-delimited JSON-RPC to it. No sleeps: every wait reads lines until the expected
//! message arrives, with a timeout only as a safety net.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const TIMEOUT: Duration = Duration::from_secs(20);

/// A tiny line-JSON client for one spawned `scripted-upstream` process.
struct Upstream {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Upstream {
    fn spawn(envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_scripted-upstream"));
        for key in [
            "SCRIPTED_NAME",
            "SCRIPTED_RESOURCES",
            "SCRIPTED_PAGE_SIZE",
            "SCRIPTED_NO_SUBSCRIBE",
            "SCRIPTED_LOG",
            "SCRIPTED_CRASH_ON_START",
            "SCRIPTED_IGNORE_EOF",
            "SCRIPTED_CONFORMANCE",
            "SCRIPTED_ERA",
            "SCRIPTED_TTL_MS",
            "SCRIPTED_CACHE_SCOPE",
            "SCRIPTED_ACK_DELAY_MS",
        ] {
            cmd.env_remove(key);
        }
        cmd.envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn scripted-upstream");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Upstream {
            child,
            stdin,
            lines,
            next_id: 1,
        }
    }

    async fn send(&mut self, msg: Value) {
        self.send_all(&[msg]).await;
    }

    /// Writes several messages at once (one write, so the server reads them together).
    async fn send_all(&mut self, msgs: &[Value]) {
        let mut lines = String::new();
        for msg in msgs {
            lines.push_str(&msg.to_string());
            lines.push('\n');
        }
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(lines.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next message, or `None` on EOF.
    async fn recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(TIMEOUT, self.lines.next_line())
            .await
            .expect("timed out waiting for a line from scripted-upstream")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}")))
    }

    async fn recv_some(&mut self) -> Value {
        self.recv().await.expect("unexpected EOF")
    }

    /// Sends a request and returns its id without waiting.
    async fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Reads until the response to `id`; returns what came before it, and the response.
    async fn until_response(&mut self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let msg = self.recv_some().await;
            if msg.get("method").is_none() && msg.get("id") == Some(id) {
                return (before, msg);
            }
            before.push(msg);
        }
    }

    /// Request → full response message (ignoring anything before it).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.until_response(&id).await.1
    }

    /// Request → `result`, panicking on an error response.
    async fn result(&mut self, method: &str, params: Value) -> Value {
        let resp = self.request(method, params).await;
        resp.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{method} failed: {resp}"))
    }

    /// `tools/call` → (messages before the result, result).
    async fn call(&mut self, name: &str, arguments: Value) -> (Vec<Value>, Value) {
        let id = self
            .send_request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        let (before, resp) = self.until_response(&id).await;
        let result = resp
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tool {name} failed: {resp}"));
        (before, result)
    }

    async fn initialize(&mut self, version: &str) -> Value {
        let result = self
            .result(
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {"sampling": {}},
                    "clientInfo": {"name": "test", "version": "0"},
                }),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        result
    }

    async fn stats(&mut self) -> Value {
        let (_, result) = self.call("stats", json!({})).await;
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"]);
        result["structuredContent"].clone()
    }

    async fn read(&mut self, uri: &str) -> Value {
        self.request("resources/read", json!({"uri": uri})).await
    }

    /// Closes stdin (if still open) and waits for the exit code.
    async fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .expect("process did not exit")
            .unwrap();
        status.code()
    }
}

/// Standard base64 decoder (with padding), for checking blobs.
fn base64_decode(s: &str) -> Vec<u8> {
    fn value(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("invalid base64 byte {c}"),
        }
    }
    assert_eq!(s.len() % 4, 0, "unpadded base64");
    let mut out = Vec::new();
    for quad in s.as_bytes().chunks(4) {
        let pad = quad.iter().filter(|&&c| c == b'=').count();
        let n = quad
            .iter()
            .map(|&c| if c == b'=' { 0 } else { value(c) })
            .fold(0u32, |acc, v| (acc << 6) | v);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

#[tokio::test]
async fn initialize_ping_and_errors() {
    let mut up = Upstream::spawn(&[("SCRIPTED_NAME", "alpha")]);
    let init = up.initialize("2025-06-18").await;
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(
        init["serverInfo"],
        json!({"name": "alpha", "version": "1.0.0"})
    );
    assert_eq!(
        init["capabilities"],
        json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "logging": {},
            "completions": {},
        })
    );
    // An unsupported version gets the latest.
    let init = up.initialize("1999-01-01").await;
    assert_eq!(init["protocolVersion"], "2025-11-25");

    assert_eq!(up.result("ping", json!({})).await, json!({}));
    let resp = up.request("no/such/method", json!({})).await;
    assert_eq!(resp["error"]["code"], -32601);
    let resp = up
        .request("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(resp["error"]["code"], -32602);

    let tools = up.result("tools/list", json!({})).await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in [
        "echo",
        "emit_update",
        "emit_updates",
        "emit_list_changed",
        "stats",
        "hold_reads",
        "release_reads",
        "fail_reads",
        "clear_faults",
        "hang",
        "exit",
        "progress",
        "sample",
        "log",
    ] {
        assert!(names.contains(&expected), "missing tool {expected}");
    }
    for t in tools["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
    let (_, echoed) = up.call("echo", json!({"text": "hi"})).await;
    assert_eq!(echoed["content"][0], json!({"type": "text", "text": "hi"}));

    let prompt = up
        .result(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(prompt["messages"][0]["content"]["text"], "Hello, Ada!");
    let templates = up.result("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "test://dynamic/{id}"
    );
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn emit_update_writes_notification_before_result_and_keeps_meta() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let uri = "test://static/1";
    let meta = json!({"example.com/tag": "x", "n": 1});
    let (before, result) = up
        .call("emit_update", json!({"uri": uri, "meta": meta}))
        .await;
    assert_eq!(
        before,
        vec![json!({
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": meta},
        })]
    );
    assert_eq!(result["structuredContent"]["version"], 1);

    // Without meta, no `_meta` key at all; sent even though nobody subscribed.
    let (before, _) = up.call("emit_update", json!({"uri": uri})).await;
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["params"], json!({"uri": uri}));

    let read = up.read(uri).await;
    assert_eq!(read["result"]["contents"][0]["text"], "test://static/1 v2");

    let (before, result) = up
        .call("emit_updates", json!({"uri": uri, "count": 500}))
        .await;
    assert_eq!(before.len(), 500);
    assert!(before
        .iter()
        .all(|m| m["method"] == "notifications/resources/updated"));
    assert_eq!(result["structuredContent"]["version"], 502);

    let (before, _) = up
        .call("emit_list_changed", json!({"kind": "prompts"}))
        .await;
    assert_eq!(before[0]["method"], "notifications/prompts/list_changed");
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn stats_count_subscriptions_and_reads_per_uri() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let (a, b) = ("test://static/1", "test://dynamic/b");
    for uri in [a, a, b] {
        assert_eq!(
            up.result("resources/subscribe", json!({"uri": uri})).await,
            json!({})
        );
    }
    assert_eq!(
        up.result("resources/unsubscribe", json!({"uri": b})).await,
        json!({})
    );
    up.read(a).await;
    up.read(a).await;
    up.read(b).await;

    let stats = up.stats().await;
    assert_eq!(stats["counts"]["initialize"], 1);
    assert_eq!(stats["counts"]["notifications/initialized"], 1);
    assert_eq!(stats["counts"]["resources/subscribe"], 3);
    assert_eq!(stats["counts"]["resources/unsubscribe"], 1);
    assert_eq!(stats["counts"]["resources/read"], 3);
    // The stats call itself is counted on arrival.
    assert_eq!(stats["counts"]["tools/call"], 1);
    assert_eq!(stats["tools"]["stats"], 1);
    assert_eq!(stats["by_uri"]["resources/subscribe"], json!({a: 2, b: 1}));
    assert_eq!(stats["by_uri"]["resources/unsubscribe"], json!({b: 1}));
    assert_eq!(stats["by_uri"]["resources/read"], json!({a: 2, b: 1}));
    assert_eq!(stats["subscribed"], json!([a]));
    assert_eq!(
        stats["pending"],
        json!({"held_reads": 0, "hung": 0, "sampling": 0})
    );
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn held_read_is_answered_with_content_as_of_arrival() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let uri = "test://static/3";
    up.call("hold_reads", json!({"uri": uri})).await;
    let held_id = up.send_request("resources/read", json!({"uri": uri})).await;
    // The held read does not block other traffic, and is not answered yet.
    let (before, _) = up.call("emit_update", json!({"uri": uri})).await;
    assert!(before.iter().all(|m| m.get("id") != Some(&held_id)));
    let other = up.read("test://static/1").await;
    assert_eq!(other["result"]["contents"][0]["text"], "test://static/1 v0");
    assert_eq!(up.stats().await["pending"]["held_reads"], 1);

    let (before, result) = up.call("release_reads", json!({"uri": uri})).await;
    assert_eq!(result["structuredContent"]["released"], 1);
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["id"], held_id);
    // Stale: the read arrived before the update.
    assert_eq!(
        before[0]["result"]["contents"][0],
        json!({"uri": uri, "mimeType": "text/plain", "text": "test://static/3 v0"})
    );
    // Released: later reads are answered at once, fresh.
    let fresh = up.read(uri).await;
    assert_eq!(fresh["result"]["contents"][0]["text"], "test://static/3 v1");
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn fail_reads_until_clear_faults_and_not_found() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let (a, b) = ("test://static/1", "test://dynamic/x");
    up.call("fail_reads", json!({"uri": a})).await;
    up.call(
        "fail_reads",
        json!({"uri": b, "code": -32000, "message": "boom"}),
    )
    .await;
    let resp = up.read(a).await;
    assert_eq!(resp["error"]["code"], -32603);
    let resp = up.read(b).await;
    assert_eq!(resp["error"]["code"], -32000);
    assert_eq!(resp["error"]["message"], "boom");
    // Other URIs are unaffected.
    assert!(up.read("test://static/5").await.get("result").is_some());

    up.call("clear_faults", json!({})).await;
    assert_eq!(
        up.read(a).await["result"]["contents"][0]["text"],
        "test://static/1 v0"
    );
    assert!(up.read(b).await.get("result").is_some());

    for missing in ["test://static/21", "test://static/0", "file:///nope"] {
        let resp = up.read(missing).await;
        assert_eq!(resp["error"]["code"], -32002, "{missing}");
        assert_eq!(resp["error"]["message"], "Resource not found");
        assert_eq!(resp["error"]["data"], json!({"uri": missing}));
    }
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn blob_contents_round_trip_through_base64() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    up.call("emit_update", json!({"uri": "test://static/2"}))
        .await;
    for (uri, version) in [("test://static/2", 1), ("test://dynamic/blob-7", 0)] {
        let resp = up.read(uri).await;
        let content = &resp["result"]["contents"][0];
        assert_eq!(content["uri"], uri);
        assert_eq!(content["mimeType"], "application/octet-stream");
        assert!(content.get("text").is_none());
        let bytes = base64_decode(content["blob"].as_str().unwrap());
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(&bytes[..256], &all[..]);
        assert_eq!(&bytes[256..], format!(" {uri} v{version}").as_bytes());
    }
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn resources_list_paginates_with_opaque_cursor() {
    let mut up = Upstream::spawn(&[("SCRIPTED_RESOURCES", "5"), ("SCRIPTED_PAGE_SIZE", "2")]);
    up.initialize("2025-11-25").await;
    let mut cursor = None;
    let mut pages = 0;
    let mut seen = Vec::new();
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = up.result("resources/list", params).await;
        pages += 1;
        for r in page["resources"].as_array().unwrap() {
            seen.push((
                r["uri"].as_str().unwrap().to_owned(),
                r["mimeType"].as_str().unwrap().to_owned(),
            ));
        }
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.as_str().unwrap().to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<(String, String)> = (1..=5)
        .map(|k| {
            let mime = if k % 2 == 0 {
                "application/octet-stream"
            } else {
                "text/plain"
            };
            (format!("test://static/{k}"), mime.to_owned())
        })
        .collect();
    assert_eq!(seen, expected);
    let resp = up
        .request("resources/list", json!({"cursor": "garbage"}))
        .await;
    assert_eq!(resp["error"]["code"], -32602);
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn progress_notifications_precede_the_result() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let id = up
        .send_request(
            "tools/call",
            json!({"name": "progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok"}}),
        )
        .await;
    let (before, resp) = up.until_response(&id).await;
    let expected: Vec<Value> = (1..=3)
        .map(|i| {
            json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "tok", "progress": i, "total": 3},
            })
        })
        .collect();
    assert_eq!(before, expected);
    assert_eq!(resp["result"]["structuredContent"]["sent"], 3);

    // Without a token, no progress.
    let (before, _) = up.call("progress", json!({"steps": 2})).await;
    assert!(before.is_empty());
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn sample_round_trips_a_server_request() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let call_id = up
        .send_request(
            "tools/call",
            json!({"name": "sample", "arguments": {"prompt": "2+2?"}}),
        )
        .await;
    let req = up.recv_some().await;
    assert_eq!(req["method"], "sampling/createMessage");
    assert_eq!(req["id"], "s1");
    assert_eq!(
        req["params"]["messages"][0]["content"],
        json!({"type": "text", "text": "2+2?"})
    );
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"});
    up.send(json!({"jsonrpc": "2.0", "id": "s1", "result": answer}))
        .await;
    let (_, resp) = up.until_response(&call_id).await;
    assert_eq!(resp["result"]["structuredContent"], answer);
    let text: Value =
        serde_json::from_str(resp["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, answer);
    assert_eq!(up.stats().await["counts"]["<response>"], 1);
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn cancelled_hang_is_dropped() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let hang_id = up
        .send_request("tools/call", json!({"name": "hang", "arguments": {}}))
        .await;
    let stats = up.stats().await;
    assert_eq!(stats["tools"]["hang"], 1);
    assert_eq!(stats["pending"]["hung"], 1);
    up.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": hang_id}}))
        .await;
    let id = up.send_request("ping", json!({})).await;
    let (before, _) = up.until_response(&id).await;
    assert!(before.is_empty(), "cancelled hang must not be answered");
    let stats = up.stats().await;
    assert_eq!(stats["counts"]["notifications/cancelled"], 1);
    assert_eq!(stats["pending"]["hung"], 0);
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn exit_tool_flushes_and_exits_with_code() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    up.send_request(
        "tools/call",
        json!({"name": "log", "arguments": {"level": "warning", "data": "bye"}}),
    )
    .await;
    up.send_request(
        "tools/call",
        json!({"name": "exit", "arguments": {"code": 7}}),
    )
    .await;
    let log = up.recv_some().await;
    assert_eq!(log["method"], "notifications/message");
    assert_eq!(log["params"]["level"], "warning");
    assert_eq!(log["params"]["data"], "bye");
    let logged = up.recv_some().await;
    assert_eq!(logged["result"]["content"][0]["text"], "logged");
    assert_eq!(up.recv().await, None, "no result for exit");
    assert_eq!(up.finish().await, Some(7));
}

#[tokio::test]
async fn no_subscribe_env_hides_the_capability_but_still_answers() {
    let mut up = Upstream::spawn(&[("SCRIPTED_NO_SUBSCRIBE", "1")]);
    let init = up.initialize("2024-11-05").await;
    assert_eq!(init["protocolVersion"], "2024-11-05");
    assert_eq!(
        init["capabilities"]["resources"],
        json!({"listChanged": true})
    );
    assert_eq!(
        up.result("resources/subscribe", json!({"uri": "test://static/1"}))
            .await,
        json!({})
    );
    assert_eq!(up.stats().await["subscribed"], json!(["test://static/1"]));
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn crash_on_start_logs_the_first_line_and_exits_3() {
    let path = std::env::temp_dir().join(format!(
        "scripted-upstream-test-{}-{:?}.log",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let path_str = path.to_str().unwrap().to_owned();
    for _ in 0..2 {
        let mut up = Upstream::spawn(&[
            ("SCRIPTED_CRASH_ON_START", "1"),
            ("SCRIPTED_LOG", &path_str),
        ]);
        up.send_request("initialize", json!({"protocolVersion": "2025-11-25"}))
            .await;
        assert_eq!(up.recv().await, None, "no answer before crashing");
        assert_eq!(up.finish().await, Some(3));
    }
    let log = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one line per start: {log}");
    assert!(lines.iter().all(|l| l["method"] == "initialize"));
}

/// `params` plus a valid modern `_meta`.
fn modern(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    params
}

#[tokio::test]
async fn modern_era_process_discover_listen_and_stats() {
    let mut up = Upstream::spawn(&[
        ("SCRIPTED_ERA", "modern"),
        ("SCRIPTED_NAME", "m"),
        ("SCRIPTED_TTL_MS", "1000"),
        ("SCRIPTED_CACHE_SCOPE", "public"),
        ("SCRIPTED_ACK_DELAY_MS", "200"),
    ]);
    let resp = up
        .request("initialize", json!({"protocolVersion": "2025-11-25"}))
        .await;
    assert_eq!(resp["error"]["code"], -32022);
    assert_eq!(resp["error"]["data"]["supported"], json!(["2026-07-28"]));
    let d = up.result("server/discover", modern(json!({}))).await;
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"],
        json!({"name": "m", "version": "0.0.0"})
    );
    assert_eq!(
        (d["ttlMs"].clone(), d["cacheScope"].clone()),
        (json!(1000), json!("public"))
    );

    let uri = "test://dynamic/x";
    // Served while the acknowledgement is delayed (sent together, so no timing race).
    let (listen_id, echo_id) = (json!("listen"), json!("echo"));
    up.send_all(&[
        json!({"jsonrpc": "2.0", "id": listen_id, "method": "subscriptions/listen",
            "params": modern(json!({"notifications":
                {"resourceSubscriptions": [uri, "test://nack/x"]}}))}),
        json!({"jsonrpc": "2.0", "id": echo_id, "method": "tools/call",
            "params": modern(json!({"name": "echo", "arguments": {"text": "hi"}}))}),
    ])
    .await;
    let (before, echo) = up.until_response(&echo_id).await;
    assert!(before.is_empty());
    assert_eq!(echo["result"]["resultType"], "complete");
    let ack = up.recv_some().await;
    assert_eq!(
        ack["params"],
        json!({"notifications": {"resourceSubscriptions": [uri]},
            "_meta": {"io.modelcontextprotocol/subscriptionId": listen_id}})
    );
    let id = up
        .send_request(
            "tools/call",
            modern(json!({"name": "emit_update", "arguments": {"uri": uri}})),
        )
        .await;
    let (before, _) = up.until_response(&id).await;
    assert_eq!(
        before,
        vec![
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": {"io.modelcontextprotocol/subscriptionId": listen_id}}})
        ]
    );
    let id = up
        .send_request(
            "tools/call",
            modern(json!({"name": "stats", "arguments": {}})),
        )
        .await;
    let stats = up.until_response(&id).await.1["result"]["structuredContent"].clone();
    assert_eq!(stats["era"], "modern");
    assert_eq!(
        stats["listens"],
        json!({"opened": 1, "open": [{"id": listen_id, "uris": [uri],
            "tools": false, "prompts": false, "resources": false}]})
    );
    let id = up
        .send_request(
            "tools/call",
            modern(json!({"name": "end_listens", "arguments": {"how": "result"}})),
        )
        .await;
    let (before, _) = up.until_response(&id).await;
    assert_eq!(before[0]["id"], listen_id);
    assert_eq!(before[0]["result"]["resultType"], "complete");
    assert_eq!(up.finish().await, Some(0));
}

#[tokio::test]
async fn legacy_default_has_no_modern_surface_but_reports_era() {
    let mut up = Upstream::spawn(&[]);
    up.initialize("2025-11-25").await;
    let resp = up.request("server/discover", modern(json!({}))).await;
    assert_eq!(resp["error"]["code"], -32601);
    let resp = up
        .request("tools/call", json!({"name": "ask", "arguments": {}}))
        .await;
    assert_eq!(resp["error"]["code"], -32602);
    let stats = up.stats().await;
    assert_eq!(stats["era"], "legacy");
    assert_eq!(stats["listens"], json!({"opened": 0, "open": []}));
    assert_eq!(up.finish().await, Some(0));
}
