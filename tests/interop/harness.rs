//! The interop harness shared by the interop tests: installs the pinned peers
//! (`setup.sh`), starts `mcpmux serve` and server-everything (stdio through record.mjs, or
//! Streamable HTTP on a free port), runs peer scripts bounded in time, and reads what the
//! upstream received. See `tests/interop.rs` for the facts the tests lean on.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Bound on mcpmux printing its listening line (it may start upstreams first).
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one scenario script (its own waits are bounded at ~20 s + a 6 s quiet window).
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);
/// A subscribable resource that server-everything lists first.
pub const DOC_URI: &str = "demo://resource/static/document/architecture.md";

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn interop_dir() -> PathBuf {
    manifest_dir().join("tests").join("interop")
}

/// Runs `tests/interop/setup.sh` once per test process; every caller fails with its output
/// if it failed.
pub fn ensure_peers() {
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
pub struct TempPath(PathBuf);

impl TempPath {
    pub fn new(stem: &str, ext: &str) -> Self {
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

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn read(&self) -> String {
        fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Starts a child in a process group of its own (unix), so [`kill_group`] ends it with
/// everything it started; elsewhere a no-op (these peers are run on Linux in CI; the
/// Windows build only has to compile).
pub trait OwnGroup {
    fn own_process_group(&mut self) -> &mut Self;
}

impl OwnGroup for Command {
    fn own_process_group(&mut self) -> &mut Self {
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(self, 0);
        self
    }
}

/// SIGKILLs a whole process group (the child was started with `own_process_group`).
pub fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A running `mcpmux serve`; its process group is killed on drop.
pub struct Mcpmux {
    child: Child,
    _config: TempPath,
    pub stderr: TempPath,
}

impl Mcpmux {
    /// The tail of mcpmux's stderr (its logs), for failure messages.
    pub fn logs(&self) -> String {
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

/// A finished command's stdout and stderr, as one text (for reports and failures).
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts `mcpmux serve --config <tmpfile>` and waits (bounded) for its one stdout line
/// `mcpmux listening on http://HOST:PORT/PATH`. Returns the process guard and the URL.
pub fn start_mcpmux(config_toml: &str) -> (Mcpmux, String) {
    let config = TempPath::new("config", "toml");
    fs::write(config.path(), config_toml).expect("write mcpmux config");
    let stderr = TempPath::new("mcpmux-stderr", "log");
    let stderr_file = File::create(stderr.path()).expect("create mcpmux stderr log");

    let mut child = Command::new(mcpmux_bin())
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
        .own_process_group()
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
pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("string to JSON")
}

/// The `command`/`args` of a stdio upstream running server-everything wrapped by
/// record.mjs, which logs what mcpmux sends it to `log` (a TOML fragment).
pub fn everything_stdio(log: &Path) -> String {
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
pub fn everything_entry() -> PathBuf {
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
pub fn everything_config(log: &Path) -> String {
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

pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// What a failing assertion shows: the peer's exit, its output, mcpmux's stderr.
    pub fn report(&self, what: &str, mcpmux: &Mcpmux) -> String {
        format!(
            "{what} exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- mcpmux stderr ---\n{}",
            self.status,
            self.stdout,
            self.stderr,
            mcpmux.logs()
        )
    }
}

/// Starts a peer script in its own process group (so a failing test can kill all of
/// it), in the crate's directory, with stdout and stderr piped.
fn spawn_peer(program: &Path, args: &[&str], stdin: Stdio) -> Child {
    Command::new(program)
        .args(args)
        .current_dir(manifest_dir())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .own_process_group()
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()))
}

/// Runs a peer script to completion, bounded by `timeout` (then its process group is
/// killed and the test fails).
pub fn run_peer(program: &Path, args: &[&str], timeout: Duration) -> Run {
    let mut child = spawn_peer(program, args, Stdio::null());
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
pub fn upstream_messages(log: &TempPath) -> Vec<Value> {
    log.read()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("upstream log line is not JSON ({e}): {l}"))
        })
        .collect()
}

pub fn count_method(msgs: &[Value], method: &str, uri: Option<&str>) -> usize {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some(method))
        .filter(|m| uri.is_none_or(|u| m.pointer("/params/uri").and_then(Value::as_str) == Some(u)))
        .count()
}

pub fn count_tool_calls(msgs: &[Value], tool: &str) -> usize {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        .filter(|m| m.pointer("/params/name").and_then(Value::as_str) == Some(tool))
        .count()
}

/// What reached the upstream, one method per line, for failure messages.
pub fn summarize(msgs: &[Value]) -> String {
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
pub fn assert_one_upstream_subscription(msgs: &[Value], uri: &str, context: &str) {
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
    // mcpmux's own era probe (protocol = "auto") is the only server/discover: a
    // client's is answered by mcpmux, never forwarded.
    let forwarded = msgs
        .iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("server/discover"))
        .filter(|m| m.get("id") != Some(&serde_json::json!("mcpmux-discover")))
        .count();
    assert_eq!(
        forwarded, 0,
        "server/discover must be answered by mcpmux, not forwarded\n{report}"
    );
}

pub fn node() -> PathBuf {
    PathBuf::from("node")
}

// ---- two upstreams: server-everything over stdio (`local`) and over Streamable HTTP (`remote`)

/// Bound on server-everything (streamableHttp) printing its listening line.
pub const HTTP_LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A loopback port free at the time of asking (bound to 0, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// server-everything in streamableHttp mode on `127.0.0.1:PORT`, in its own process
/// group, SIGKILLed on drop (or by [`EverythingHttp::kill`]).
pub struct EverythingHttp {
    child: Option<Child>,
    pub port: u16,
    stderr: Arc<Mutex<String>>,
}

impl EverythingHttp {
    /// Starts it on `port` and waits (bounded) for its "listening on port" line on stderr.
    pub fn start(port: u16) -> Self {
        let mut child = Command::new(node())
            .arg(everything_entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(manifest_dir())
            .stdin(Stdio::null())
            // One line per request ("Received MCP POST request"): not needed.
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .own_process_group()
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

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn logs(&self) -> String {
        self.stderr.lock().map(|l| tail(&l, 30)).unwrap_or_default()
    }

    /// SIGKILLs the server and reaps it: once this returns its port is free again.
    pub fn kill(&mut self) {
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
pub fn local_and_remote_config(log: &Path, remote_url: &str) -> String {
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
pub struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            kill_group(pid);
        }
    }
}

/// Like [`run_peer`], but the peer talks to the test: every stdout line is handed to
/// `on_line`, and what it returns (if anything) is written to the peer's stdin as a line.
pub fn run_peer_interactive(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    mut on_line: impl FnMut(&str) -> Option<String>,
) -> Run {
    let deadline = Instant::now() + timeout;
    let mut child = spawn_peer(program, args, Stdio::piped());
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

/// A peer script that runs alongside the test rather than to completion first: its stdout
/// lines arrive as it prints them ([`Peer::wait_line`]), the test answers on its stdin
/// ([`Peer::send_line`]), and [`Peer::finish`] reaps it (bounded). Its process group is
/// SIGKILLed on drop unless it was reaped, so a failing test never leaves it behind.
pub struct Peer {
    what: String,
    pid: u32,
    child: Option<Child>,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
    stdout: String,
    stderr: Arc<Mutex<String>>,
    stderr_done: mpsc::Receiver<()>,
}

impl Peer {
    pub fn spawn(program: &Path, args: &[&str]) -> Peer {
        let mut child = spawn_peer(program, args, Stdio::piped());
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let (line_tx, lines) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let (done_tx, stderr_done) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
            let _ = done_tx.send(());
        });
        Peer {
            what: format!("{} {args:?}", program.display()),
            pid: child.id(),
            child: Some(child),
            stdin,
            lines,
            stdout: String::new(),
            stderr,
            stderr_done,
        }
    }

    /// What it printed so far (stdout, then stderr), for failure messages.
    pub fn output(&self) -> String {
        format!(
            "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.stdout,
            self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
        )
    }

    /// Waits (bounded by `timeout`) for a stdout line for which `ok` holds and returns it;
    /// the lines before it are kept for [`Peer::output`] and the final [`Run`].
    pub fn wait_line(
        &mut self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                    if ok(&line) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "the peer printed no {what} within {timeout:?}\n{}",
                    self.output()
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "the peer closed stdout before printing {what}\n{}",
                    self.output()
                ),
            }
        }
    }

    /// Writes one line to its stdin.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open until finish");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("write {line:?} to the peer: {e}\n{}", self.output()));
    }

    /// Closes its stdin, reads the rest of its stdout and reaps it, all within `timeout`
    /// (else its process group is killed and the test fails).
    pub fn finish(mut self, timeout: Duration) -> Run {
        let deadline = Instant::now() + timeout;
        drop(self.stdin.take());
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "the peer did not finish within {timeout:?}\n{}",
                        self.output()
                    )
                }
            }
        }
        // stdout is closed: it is exiting. Still bounded, in case it closed stdout early.
        let mut child = self.child.take().expect("not reaped yet");
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send(());
            status
        });
        if rx
            .recv_timeout(
                deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5),
            )
            .is_err()
        {
            kill_group(self.pid);
            panic!("the peer closed stdout but did not exit\n{}", self.output());
        }
        let status = waiter
            .join()
            .expect("waiter thread")
            .expect("wait for peer");
        // Its stderr ends with it (bounded: a leftover grandchild could hold the pipe).
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(5));
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        Run {
            status,
            stdout: std::mem::take(&mut self.stdout),
            stderr,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(self.pid);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The peer's last stdout line as JSON (its result).
pub fn result_json(run: &Run, context: &dyn Fn() -> String) -> Value {
    let line = run.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the peer printed no JSON result ({e})\n{}", context()))
}

pub fn tool_call_args<'a>(msgs: &'a [Value], tool: &str) -> Vec<&'a Value> {
    msgs.iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        .filter(|m| m.pointer("/params/name").and_then(Value::as_str) == Some(tool))
        .filter_map(|m| m.pointer("/params/arguments"))
        .collect()
}

/// The mcpmux binary under test (each test binary of this package knows it).
fn mcpmux_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcpmux")
}
