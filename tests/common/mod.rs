//! Shared helpers for integration tests: temporary config files, the scripted
//! upstream's path, and a line-JSON client for `mcpmux stdio`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long any single expected event may take before a test fails (a safety net,
/// never a wait).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// The `scripted-upstream` binary of this workspace (a member of its own, so
/// `cargo install mcpmux` never installs it). `cargo test` at the top builds it with
/// everything else; a narrower `cargo test --test integration` may not, so it is built here on
/// first use when it is missing or older than its sources.
pub fn scripted_upstream() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let mcpmux = std::path::Path::new(env!("CARGO_BIN_EXE_mcpmux"));
        let path =
            mcpmux.with_file_name(format!("scripted-upstream{}", std::env::consts::EXE_SUFFIX));
        if stale(&path) {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let release = mcpmux.parent().and_then(|d| d.file_name()) == Some("release".as_ref());
            let mut cmd = std::process::Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "scripted-upstream"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if release {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build -p scripted-upstream");
            assert!(status.success(), "cargo build -p scripted-upstream failed");
        }
        path.to_string_lossy().into_owned()
    })
}

/// Whether the scripted upstream at `bin` is missing or older than a source file.
fn stale(bin: &std::path::Path) -> bool {
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return true;
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripted-upstream");
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                if p.file_name() != Some("tests".as_ref()) {
                    dirs.push(p);
                }
            } else if entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
            {
                return true;
            }
        }
    }
    false
}

pub fn mcpmux_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcpmux")
}

/// Writes a config to a unique temporary file.
pub fn temp_config(toml: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "mcpmux-test-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, toml).expect("write temp config");
    path
}

/// A config with one scripted upstream named `scripted` and the given extra TOML.
pub fn scripted_config(listen: &str, extra: &str, server_extra: &str) -> String {
    format!(
        "{listen}\n{extra}\n[servers.scripted]\ncommand = {cmd:?}\n{server_extra}\n",
        cmd = scripted_upstream()
    )
}

/// The `structuredContent` of a `tools/call` response, or its whole result.
///
/// # Panics
/// When the call failed.
pub fn tool_output(name: &str, response: &Value) -> Value {
    let result = response
        .get("result")
        .unwrap_or_else(|| panic!("tool {name} failed: {response}"));
    result
        .get("structuredContent")
        .cloned()
        .unwrap_or_else(|| result.clone())
}

/// A client speaking newline-delimited JSON-RPC to a child process.
pub struct LineClient {
    /// Held so that dropping the client kills the process (`kill_on_drop`).
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Notifications read while waiting for responses.
    pub notifications: Vec<Value>,
}

impl LineClient {
    pub fn spawn(program: &str, args: &[&str]) -> LineClient {
        Self::spawn_with_env(program, args, &[])
    }

    /// [`LineClient::spawn`] with extra environment variables for the program.
    pub fn spawn_with_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> LineClient {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        LineClient {
            _child: child,
            stdin,
            lines,
            next_id: 0,
            notifications: vec![],
        }
    }

    pub async fn send_raw(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        let m = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&m.to_string()).await;
    }

    /// Reads the next message of any kind.
    pub async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(EVENT_TIMEOUT, self.lines.next_line())
            .await
            .expect("timed out waiting for a message")
            .unwrap()
            .expect("stream ended");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"))
    }

    /// Sends a request and returns its response; notifications that arrive first are
    /// kept in `notifications`.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let m = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&m.to_string()).await;
        loop {
            let v = self.read().await;
            if v["id"] == json!(id) && v.get("method").is_none() {
                return v;
            }
            self.notifications.push(v);
        }
    }

    pub async fn initialize(&mut self, capabilities: Value) -> Value {
        let r = self
            .call(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                       "clientInfo": {"name": "test", "version": "0"}}),
            )
            .await;
        self.notify("notifications/initialized", json!({})).await;
        r
    }

    /// Calls a tool and returns its `structuredContent` (or the whole result).
    pub async fn tool(&mut self, name: &str, args: Value) -> Value {
        let r = self
            .call("tools/call", json!({"name": name, "arguments": args}))
            .await;
        tool_output(name, &r)
    }

    /// Waits for a notification with this method (already read or still to come).
    pub async fn expect_notification(&mut self, method: &str) -> Value {
        if let Some(i) = self
            .notifications
            .iter()
            .position(|n| n["method"] == method)
        {
            return self.notifications.remove(i);
        }
        loop {
            let v = self.read().await;
            if v["method"] == method {
                return v;
            }
            self.notifications.push(v);
        }
    }
}
pub mod fleet;
pub mod fuzz_check;
pub mod http;
pub mod inproc;
pub mod modern;
