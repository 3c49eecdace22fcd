//! Interop tests: official MCP SDK clients through a real `mcpmux serve`, with the reference
//! server (`@modelcontextprotocol/server-everything`, stdio) as the upstream.
//!
//! The peers are installed by `tests/interop/setup.sh` (pinned by `package-lock.json` and
//! `python/requirements.lock`), run once per test binary by [`ensure_peers`]. The upstream
//! is wrapped by `tests/interop/record.mjs`, which appends every line mcpmux sends to the
//! upstream to a JSON-lines log (written before the line is forwarded), so a test can count
//! what actually reached the server: one `initialize`, one `resources/subscribe`, one
//! `resources/unsubscribe` however many clients asked.
//!
//! server-everything facts these tests lean on (checked against 2026.8.31): tools `echo` and
//! `toggle-subscriber-updates`; static resources `demo://resource/static/document/<file>.md`;
//! `resources.subscribe: true`; no `notifications/resources/updated` until the toggle tool is
//! called on that (upstream) session, then one at once and one every 5 s for every URI the
//! session subscribed; a second toggle switches them off. Through mcpmux every client shares
//! one upstream session, so exactly one client toggles.
//!
//! Cleanup is deterministic: mcpmux runs in its own process group, which is SIGKILLed on
//! drop (record.mjs also stops its child 1.5 s after its stdin closes, should mcpmux have
//! moved upstreams to another group). No fixed ports (`127.0.0.1:0`), no sleeps: every wait
//! is on a process event, bounded by a timeout that only guards against hangs.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Bound on mcpmux printing its listening line (it may start upstreams first).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one scenario script (its own waits are bounded at ~20 s + a 6 s quiet window).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);
/// A subscribable resource that server-everything lists first.
const DOC_URI: &str = "demo://resource/static/document/architecture.md";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn interop_dir() -> PathBuf {
    manifest_dir().join("tests").join("interop")
}

/// Runs `tests/interop/setup.sh` once per test binary; every caller fails with its output
/// if it failed.
fn ensure_peers() {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    let outcome = SETUP.get_or_init(|| {
        let out = Command::new("bash")
            .arg(interop_dir().join("setup.sh"))
            .current_dir(manifest_dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run bash tests/interop/setup.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "tests/interop/setup.sh failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// A file under the system temp dir with a unique name, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(stem: &str, ext: &str) -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "mcpmux-interop-{}-{}-{}-{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            nanos,
            stem,
            ext
        );
        TempPath(std::env::temp_dir().join(name))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn read(&self) -> String {
        fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// SIGKILLs a whole process group (the child was started with `process_group(0)`).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A running `mcpmux serve`; its process group is killed on drop.
struct Mcpmux {
    child: Child,
    _config: TempPath,
    stderr: TempPath,
}

impl Mcpmux {
    /// The tail of mcpmux's stderr (its logs), for failure messages.
    fn logs(&self) -> String {
        tail(&self.stderr.read(), 60)
    }
}

impl Drop for Mcpmux {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts `mcpmux serve --config <tmpfile>` and waits (bounded) for its one stdout line
/// `mcpmux listening on http://HOST:PORT/PATH`. Returns the process guard and the URL.
fn start_mcpmux(config_toml: &str) -> (Mcpmux, String) {
    let config = TempPath::new("config", "toml");
    fs::write(config.path(), config_toml).expect("write mcpmux config");
    let stderr = TempPath::new("mcpmux-stderr", "log");
    let stderr_file = File::create(stderr.path()).expect("create mcpmux stderr log");

    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpmux"))
        .arg("serve")
        .arg("--config")
        .arg(config.path())
        .current_dir(manifest_dir())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr_file))
        .process_group(0)
        .spawn()
        .expect("spawn mcpmux");

    // Read stdout on a thread: the first line goes back over the channel, the rest is
    // drained (mcpmux must never block on a full pipe) and reported as a contract breach.
    let stdout = child.stdout.take().expect("mcpmux stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if first {
                        first = false;
                        let _ = tx.send(line.trim_end_matches(['\r', '\n']).to_string());
                    } else {
                        eprintln!("mcpmux printed an extra stdout line: {}", line.trim_end());
                    }
                }
            }
        }
    });

    let mut guard = Mcpmux {
        child,
        _config: config,
        stderr,
    };
    let line = match rx.recv_timeout(LISTEN_TIMEOUT) {
        Ok(line) => line,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // stdout closed without a line: mcpmux exited (or closed stdout) early.
            let status = match guard.child.try_wait() {
                Ok(Some(s)) => s.to_string(),
                Ok(None) => "still running".to_string(),
                Err(e) => e.to_string(),
            };
            panic!(
                "mcpmux serve closed stdout without printing `mcpmux listening on …` (exit: {status}).\n\
                 config:\n{config_toml}\n--- mcpmux stderr ---\n{}",
                guard.logs()
            );
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "mcpmux serve printed no listening line within {LISTEN_TIMEOUT:?}.\n--- mcpmux stderr ---\n{}",
            guard.logs()
        ),
    };
    let url = match line.strip_prefix("mcpmux listening on ") {
        Some(url) if url.starts_with("http://") => url.to_string(),
        _ => panic!(
            "mcpmux serve's first stdout line is not `mcpmux listening on http://HOST:PORT/PATH`: {line:?}\n\
             --- mcpmux stderr ---\n{}",
            guard.logs()
        ),
    };
    assert!(
        !url.ends_with(":0/mcp") && !url.contains(":0/"),
        "mcpmux printed port 0 instead of the real port: {url}"
    );
    (guard, url)
}

/// TOML basic string for a value (JSON string escapes are valid TOML escapes).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("string to JSON")
}

/// The `command`/`args` of a stdio upstream running server-everything wrapped by
/// record.mjs, which logs what mcpmux sends it to `log` (a TOML fragment).
fn everything_stdio(log: &Path) -> String {
    let dir = interop_dir();
    let record = dir.join("record.mjs");
    let everything = everything_entry();
    let args = [
        record.display().to_string(),
        log.display().to_string(),
        "--".into(),
        "node".into(),
        everything.display().to_string(),
        "stdio".into(),
    ];
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    format!("command = \"node\"\nargs = [{}]\n", args.join(", "))
}

/// server-everything's entry point (installed by setup.sh).
fn everything_entry() -> PathBuf {
    let everything =
        interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        everything.is_file(),
        "server-everything entry point missing: {}",
        everything.display()
    );
    everything
}

/// A config with one stdio upstream `everything`: server-everything wrapped by record.mjs,
/// which logs what mcpmux sends it to `log`.
fn everything_config(log: &Path) -> String {
    format!(
        "[listen]\n\
         http = \"127.0.0.1:0\"\n\
         path = \"/mcp\"\n\
         \n\
         [servers.everything]\n\
         {}",
        everything_stdio(log)
    )
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    /// What a failing assertion shows: the peer's exit, its output, mcpmux's stderr.
    fn report(&self, what: &str, mcpmux: &Mcpmux) -> String {
        format!(
            "{what} exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- mcpmux stderr ---\n{}",
            self.status,
            self.stdout,
            self.stderr,
            mcpmux.logs()
        )
    }
}

/// Runs a peer script to completion, bounded by `timeout` (then its process group is
/// killed and the test fails).
fn run_peer(program: &Path, args: &[&str], timeout: Duration) -> Run {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(manifest_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let pid = child.id();
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    let timed_out = rx.recv_timeout(timeout).is_err();
    if timed_out {
        kill_group(pid);
    }
    let status = waiter
        .join()
        .expect("waiter thread")
        .expect("wait for peer");
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    assert!(
        !timed_out,
        "{} {:?} did not finish within {timeout:?} and was killed.\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        program.display(),
        args
    );
    Run {
        status,
        stdout,
        stderr,
    }
}

/// Every line mcpmux sent to the upstream, parsed.
fn upstream_messages(log: &TempPath) -> Vec<Value> {
    log.read()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("upstream log line is not JSON ({e}): {l}"))
        })
        .collect()
}

fn count_method(msgs: &[Value], method: &str, uri: Option<&str>) -> usize {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some(method))
        .filter(|m| uri.is_none_or(|u| m.pointer("/params/uri").and_then(Value::as_str) == Some(u)))
        .count()
}

fn count_tool_calls(msgs: &[Value], tool: &str) -> usize {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        .filter(|m| m.pointer("/params/name").and_then(Value::as_str) == Some(tool))
        .count()
}

/// What reached the upstream, one method per line, for failure messages.
fn summarize(msgs: &[Value]) -> String {
    msgs.iter()
        .map(|m| {
            let method = m
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or("<response>");
            match m
                .pointer("/params/uri")
                .or_else(|| m.pointer("/params/name"))
            {
                Some(v) => format!("{method} {v}"),
                None => method.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The checks both tests make on what reached server-everything through mcpmux.
fn assert_one_upstream_subscription(msgs: &[Value], uri: &str, context: &str) {
    let report = format!("{context}\n--- upstream received ---\n{}", summarize(msgs));
    assert_eq!(
        count_method(msgs, "initialize", None),
        1,
        "expected exactly one upstream initialize (one shared session)\n{report}"
    );
    assert_eq!(
        count_method(msgs, "resources/subscribe", Some(uri)),
        1,
        "expected exactly one upstream resources/subscribe for {uri}\n{report}"
    );
    assert_eq!(
        count_method(msgs, "resources/unsubscribe", Some(uri)),
        1,
        "expected exactly one upstream resources/unsubscribe for {uri}\n{report}"
    );
    assert_eq!(
        count_tool_calls(msgs, "toggle-subscriber-updates"),
        2,
        "expected the toggle tool to reach the upstream exactly twice (on, off)\n{report}"
    );
    assert_eq!(
        count_method(msgs, "server/discover", None),
        0,
        "server/discover must be answered by mcpmux, not forwarded\n{report}"
    );
}

fn node() -> PathBuf {
    PathBuf::from("node")
}

#[test]
fn ts_sdk_clients_share_one_upstream_subscription() {
    ensure_peers();
    let log = TempPath::new("upstream", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[script, "fanout", &url, "--clients", "3", "--uri", DOC_URI],
        SCENARIO_TIMEOUT,
    );
    let context = || run.report("clients.mjs fanout", &mcpmux);
    assert!(
        run.status.success(),
        "TS SDK fanout scenario failed through mcpmux\n{}",
        context()
    );

    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("clients.mjs printed no JSON result ({e})\n{}", context()));
    assert_eq!(result["clients"], 3, "{}", context());
    assert_eq!(result["uri"], DOC_URI, "{}", context());
    assert_eq!(result["toggles"], 1, "{}", context());
    assert!(
        result["tools"].as_u64().unwrap_or(0) >= 2,
        "tools/list through mcpmux is too short\n{}",
        context()
    );
    let per_client = result["updatesPerClient"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(per_client.len(), 3, "{}", context());
    assert!(
        per_client.iter().all(|n| n.as_u64().unwrap_or(0) >= 1),
        "every client must receive the update fanned out from the one upstream subscription\n{}",
        context()
    );
    assert_eq!(
        result["afterUnsubscribe"],
        0,
        "updates reached clients after they unsubscribed\n{}",
        context()
    );

    assert_one_upstream_subscription(&upstream_messages(&log), DOC_URI, &context());
}

#[test]
fn python_client_subscribes_through_mcpmux() {
    ensure_peers();
    let log = TempPath::new("upstream", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));

    let python = interop_dir().join(".venv/bin/python");
    let script = interop_dir().join("python/subscribe.py");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(&python, &[script, &url, DOC_URI], SCENARIO_TIMEOUT);
    let context = || run.report("subscribe.py", &mcpmux);
    assert!(
        run.status.success(),
        "Python SDK client failed through mcpmux\n{}",
        context()
    );

    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("subscribe.py printed no JSON result ({e})\n{}", context()));
    assert_eq!(result["uri"], DOC_URI, "{}", context());
    assert!(
        result["updates"].as_u64().unwrap_or(0) >= 1,
        "{}",
        context()
    );

    assert_one_upstream_subscription(&upstream_messages(&log), DOC_URI, &context());
}

#[test]
fn ts_sdk_clients_rereading_on_every_update_cost_one_upstream_read_per_update() {
    ensure_peers();
    let log = TempPath::new("upstream-reread", "jsonl");
    let (mcpmux, url) = start_mcpmux(&everything_config(log.path()));
    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[
            script,
            "reread",
            &url,
            "--clients",
            "5",
            "--uri",
            DOC_URI,
            "--updates",
            "2",
        ],
        SCENARIO_TIMEOUT,
    );
    let context = || run.report("clients.mjs reread", &mcpmux);
    assert!(
        run.status.success(),
        "TS SDK reread scenario failed through mcpmux\n{}",
        context()
    );
    let line = run.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("clients.mjs printed no JSON result ({e})\n{}", context()));
    let updates: Vec<u64> = result["updatesPerClient"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let reads: Vec<u64> = result["readsPerClient"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(updates.len(), 5, "{}", context());
    assert!(updates.iter().all(|n| *n >= 2), "{}", context());
    assert_eq!(
        updates,
        reads,
        "every client re-read once per update\n{}",
        context()
    );
    let msgs = upstream_messages(&log);
    let upstream_reads = count_method(&msgs, "resources/read", Some(DOC_URI)) as u64;
    let update_count = *updates.iter().max().expect("five clients");
    let client_reads: u64 = reads.iter().sum();
    eprintln!(
        "reread: {client_reads} client reads over {update_count} updates -> {upstream_reads} upstream reads \
         (hit ratio {:.2})",
        1.0 - upstream_reads as f64 / client_reads as f64
    );
    assert_eq!(
        upstream_reads,
        update_count,
        "expected exactly one upstream resources/read per update\n{}\n{}",
        summarize(&msgs),
        context()
    );
}

// ---- two upstreams: server-everything over stdio (`local`) and over Streamable HTTP (`remote`)

/// Bound on server-everything (streamableHttp) printing its listening line.
const HTTP_LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A loopback port free at the time of asking (bound to 0, read, released).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// server-everything in streamableHttp mode on `127.0.0.1:PORT`, in its own process
/// group, SIGKILLed on drop (or by [`EverythingHttp::kill`]).
struct EverythingHttp {
    child: Option<Child>,
    port: u16,
    stderr: Arc<Mutex<String>>,
}

impl EverythingHttp {
    /// Starts it on `port` and waits (bounded) for its "listening on port" line on stderr.
    fn start(port: u16) -> Self {
        let mut child = Command::new(node())
            .arg(everything_entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(manifest_dir())
            .stdin(Stdio::null())
            // One line per request ("Received MCP POST request"): not needed.
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn server-everything streamableHttp");
        let stderr = child.stderr.take().expect("server-everything stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<()>();
        let sink = log.clone();
        // Keeps draining stderr after the listening line, so the server never blocks on it.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let listening = line.contains("listening on port");
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
                if listening {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        let guard = EverythingHttp {
            child: Some(child),
            port,
            stderr: log,
        };
        match rx.recv_timeout(HTTP_LISTEN_TIMEOUT) {
            Ok(()) => guard,
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                "server-everything streamableHttp on port {port} exited without listening:\n{}",
                guard.logs()
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "server-everything streamableHttp on port {port} did not listen within {HTTP_LISTEN_TIMEOUT:?}:\n{}",
                guard.logs()
            ),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn logs(&self) -> String {
        self.stderr.lock().map(|l| tail(&l, 30)).unwrap_or_default()
    }

    /// SIGKILLs the server and reaps it: once this returns its port is free again.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        self.kill();
    }
}

/// mcpmux with `[servers.local]` (server-everything over stdio through record.mjs, which
/// logs to `log`) and `[servers.remote]` (the Streamable HTTP server at `remote_url`),
/// namespaced `local` and `remote`.
fn local_and_remote_config(log: &Path, remote_url: &str) -> String {
    format!(
        "[listen]\n\
         http = \"127.0.0.1:0\"\n\
         path = \"/mcp\"\n\
         \n\
         [servers.local]\n\
         prefix = \"local\"\n\
         {}\
         \n\
         [servers.remote]\n\
         prefix = \"remote\"\n\
         url = {}\n",
        everything_stdio(log),
        toml_str(remote_url)
    )
}

/// Kills a peer's process group on drop unless disarmed (it has been reaped).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            kill_group(pid);
        }
    }
}

/// Like [`run_peer`], but the peer talks to the test: every stdout line is handed to
/// `on_line`, and what it returns (if anything) is written to the peer's stdin as a line.
fn run_peer_interactive(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    mut on_line: impl FnMut(&str) -> Option<String>,
) -> Run {
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(manifest_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let mut guard = GroupGuard(Some(child.id()));
    let mut stdin = child.stdin.take().expect("stdin");
    let out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let (line_tx, line_rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let mut timed_out = false;
    loop {
        match line_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                stdout.push_str(&line);
                stdout.push('\n');
                if let Some(reply) = on_line(&line) {
                    // A peer that already exited cannot read it; its exit status tells.
                    let _ = writeln!(stdin, "{reply}").and_then(|()| stdin.flush());
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                kill_group(child.id());
                break;
            }
        }
    }
    drop(stdin);
    // stdout is closed: the peer is exiting. Still bounded, in case it closed stdout early.
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    if rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5))
        .is_err()
    {
        timed_out = true;
        if let Some(pid) = guard.0 {
            kill_group(pid);
        }
    }
    let status = waiter
        .join()
        .expect("waiter thread")
        .expect("wait for peer");
    guard.0 = None;
    let stderr = err_t.join().unwrap_or_default();
    assert!(
        !timed_out,
        "{} {:?} did not finish within {timeout:?} and was killed.\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        program.display(),
        args
    );
    Run {
        status,
        stdout,
        stderr,
    }
}

/// The peer's last stdout line as JSON (its result).
fn result_json(run: &Run, context: &dyn Fn() -> String) -> Value {
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the peer printed no JSON result ({e})\n{}", context()))
}

fn tool_call_args<'a>(msgs: &'a [Value], tool: &str) -> Vec<&'a Value> {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        .filter(|m| m.pointer("/params/name").and_then(Value::as_str) == Some(tool))
        .filter_map(|m| m.pointer("/params/arguments"))
        .collect()
}

#[test]
fn ts_sdk_clients_see_a_stdio_and_an_http_upstream_as_one_server() {
    ensure_peers();
    let started = Instant::now();
    let remote = EverythingHttp::start(free_port());
    let log = TempPath::new("upstream-local", "jsonl");
    let (mcpmux, url) = start_mcpmux(&local_and_remote_config(log.path(), &remote.url()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let run = run_peer(
        &node(),
        &[script, "multi", &url, "--uri", DOC_URI, "--updates", "2"],
        SCENARIO_TIMEOUT,
    );
    let context = || {
        format!(
            "{}\n--- remote server-everything stderr ---\n{}",
            run.report("clients.mjs multi", &mcpmux),
            remote.logs()
        )
    };
    assert!(
        run.status.success(),
        "TS SDK multi scenario failed through mcpmux\n{}",
        context()
    );
    let result = result_json(&run, &context);
    let local_uri = format!("local+{DOC_URI}");
    let remote_uri = format!("remote+{DOC_URI}");
    for (who, want) in [("x", &local_uri), ("y", &remote_uri)] {
        let got = result["updates"][who]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            vec![want],
            "client {who} must receive updates for {want} and nothing else\n{}",
            context()
        );
        assert!(
            got[want.as_str()].as_u64().unwrap_or(0) >= 2,
            "client {who}: too few updates for {want}\n{}",
            context()
        );
    }

    // What reached the stdio upstream: its own half of the traffic, URIs and names unprefixed.
    let msgs = upstream_messages(&log);
    let report = format!(
        "--- local upstream received ---\n{}\n{}",
        summarize(&msgs),
        context()
    );
    assert_eq!(
        count_method(&msgs, "initialize", None),
        1,
        "one local session\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/subscribe", Some(DOC_URI)),
        1,
        "exactly one upstream resources/subscribe for {DOC_URI} on the local upstream\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/subscribe", None),
        1,
        "the remote client's subscription must not reach the local upstream\n{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/unsubscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_tool_calls(&msgs, "toggle-subscriber-updates"),
        2,
        "only the local toggles (on, off) reach the local upstream\n{report}"
    );
    let echoes = tool_call_args(&msgs, "echo");
    assert_eq!(
        echoes.len(),
        2,
        "each client's local__echo (and only those) reach the local upstream\n{report}"
    );
    assert!(
        echoes.iter().all(|a| a["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("local "))),
        "a remote__echo reached the local upstream\n{report}"
    );
    assert!(
        msgs.iter()
            .all(|m| !m.to_string().contains("local__") && !m.to_string().contains("local+")),
        "a namespaced name or URI reached the upstream unstripped\n{report}"
    );
    // mcpmux maps a namespaced resources/read to the upstream but does not namespace
    // the answer's contents[].uri; reported here, not asserted (see clients.mjs).
    eprintln!(
        "multi: scenario {} ms, test {} ms; resources/read contents[0].uri: {} / {}",
        result["elapsedMs"],
        started.elapsed().as_millis(),
        result["reads"]["local"]["contentsUri"],
        result["reads"]["remote"]["contentsUri"]
    );
}

#[test]
fn http_upstream_restart_keeps_clients_receiving_updates() {
    ensure_peers();
    let started = Instant::now();
    let port = free_port();
    let mut remote = EverythingHttp::start(port);
    let log = TempPath::new("upstream-local", "jsonl");
    let (mcpmux, url) = start_mcpmux(&local_and_remote_config(log.path(), &remote.url()));

    let script = interop_dir().join("clients.mjs");
    let script = script.to_str().expect("utf-8 path");
    let mut restarts = 0;
    let mut restart_took = Duration::ZERO;
    let run = run_peer_interactive(
        &node(),
        &[script, "restart", &url, "--uri", DOC_URI, "--updates", "2"],
        SCENARIO_TIMEOUT,
        |line| {
            if line != "READY-FOR-RESTART" {
                return None;
            }
            let t = Instant::now();
            remote.kill();
            // Same port: mcpmux's next GET on its old session meets a server that never
            // heard of it (400), which is how it learns the session is gone.
            remote = EverythingHttp::start(port);
            restart_took = t.elapsed();
            restarts += 1;
            Some("RESTARTED".into())
        },
    );
    let context = || {
        format!(
            "{}\n--- remote server-everything stderr ---\n{}",
            run.report("clients.mjs restart", &mcpmux),
            remote.logs()
        )
    };
    assert!(
        run.status.success(),
        "TS SDK restart scenario failed through mcpmux\n{}",
        context()
    );
    assert_eq!(restarts, 1, "{}", context());
    let result = result_json(&run, &context);
    assert!(
        result["updatesBeforeRestart"].as_u64().unwrap_or(0) >= 1,
        "{}",
        context()
    );
    assert!(
        result["updatesOnReReady"].as_u64().unwrap_or(0) >= 1,
        "the holder must be told about the re-established subscription\n{}",
        context()
    );
    assert!(
        result["updatesAfterToggle"].as_u64().unwrap_or(0) >= 2,
        "updates from the new upstream session must keep flowing\n{}",
        context()
    );
    assert_eq!(
        result["localUpdates"],
        0,
        "the remote's restart must not notify holders of the local upstream\n{}",
        context()
    );
    assert!(
        mcpmux.stderr.read().contains("session expired (HTTP 4"),
        "mcpmux should have found the old session gone (HTTP 400/404 from the new server)\n{}",
        context()
    );

    // The stdio upstream is not disturbed by the remote's restart.
    let msgs = upstream_messages(&log);
    let report = format!(
        "--- local upstream received ---\n{}\n{}",
        summarize(&msgs),
        context()
    );
    assert_eq!(count_method(&msgs, "initialize", None), 1, "{report}");
    assert_eq!(
        count_method(&msgs, "resources/subscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_method(&msgs, "resources/unsubscribe", Some(DOC_URI)),
        1,
        "{report}"
    );
    assert_eq!(
        count_tool_calls(&msgs, "toggle-subscriber-updates"),
        0,
        "{report}"
    );
    eprintln!("restart: {result}");
    eprintln!(
        "restart: server restart {} ms, mcpmux re-ready seen {} ms after it, scenario {} ms, test {} ms",
        restart_took.as_millis(),
        result["reReadyMs"],
        result["elapsedMs"],
        started.elapsed().as_millis()
    );
}
