//! Interop with a real 2026-07-28 upstream: `tests/interop/modern_server.mjs` (the
//! official TypeScript SDK v2 server, modern-only: `legacy: 'reject'`) behind `mcpmux
//! serve`, over Streamable HTTP and over stdio, used at the same time by an SDK v1 client
//! (2025-11-25) and an SDK v2 client pinned to 2026-07-28 (`tests/interop/both_eras.mjs`
//! runs both in one process).
//!
//! What the tests lean on:
//! - mcpmux probes with `server/discover` (id `mcpmux-discover`) and then speaks only the
//!   modern era to the server; over HTTP `protocol = "auto"` also asks the handshake face
//!   with one `initialize` (refused by this server: no session), then no GET or DELETE, no
//!   `Mcp-Session-Id`; every other request is a POST the server answers with 200.
//! - mcpmux opens one listen at start for the list-changed flags (no URIs), and one
//!   `subscriptions/listen` covering `test://modern/counter` while the legacy client holds
//!   it with `resources/subscribe` and the modern client with its own listen: the server
//!   sees exactly ONE listen whose `resourceSubscriptions` contains the URI. Once both have
//!   let go, mcpmux opens a listen without it (over stdio it also cancels the old one).
//! - `bump` reaches each client as one `notifications/resources/updated` (the modern one
//!   tagged with its own listen id, the legacy one untagged), and a read after it returns
//!   the fresh text (`… v1`) to both, although mcpmux cached the `… v0` read (ttlMs 60000).
//! - `confirm` answers `input_required` with an `elicitation/create`: for the legacy client
//!   mcpmux asks it with an `elicitation/create` request and retries upstream itself; for
//!   the modern client it passes `input_required` through and the SDK retries. Each
//!   client's elicitation handler runs once, for its own call only.
//!
//! The upstream's side is read from the server's `--trace` (HTTP: one JSON line per HTTP
//! request) or from `record.mjs` (stdio: every line mcpmux wrote to the server). Waits are
//! on conditions with generous bounds; no sleeps, no fixed ports.

use crate::common;
use crate::harness;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::*;
use serde_json::{json, Value};

const URI: &str = "test://modern/counter";
const LISTEN: &str = "subscriptions/listen";
/// Bound on a condition that is expected to hold at once or within moments.
const CONDITION_TIMEOUT: Duration = Duration::from_secs(20);

fn modern_server_script() -> PathBuf {
    interop_dir().join("modern_server.mjs")
}

/// `modern_server.mjs` over Streamable HTTP on a free loopback port (port 0), tracing
/// every request to `trace`; its process group is SIGKILLed on drop.
struct ModernServer {
    child: Child,
    url: String,
    stderr: Arc<Mutex<String>>,
}

impl ModernServer {
    fn start(trace: &Path) -> Self {
        let mut child = Command::new(node())
            .arg(modern_server_script())
            .args(["--port", "0", "--trace"])
            .arg(trace)
            .current_dir(manifest_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .own_process_group()
            .spawn()
            .expect("spawn node modern_server.mjs");
        let stdout = child.stdout.take().expect("modern_server stdout");
        let stderr = child.stderr.take().expect("modern_server stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut l) = sink.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let (tx, rx) = mpsc::channel::<String>();
        // The first stdout line is the URL; the rest (none expected) is drained.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line);
                }
            }
        });
        let mut server = ModernServer {
            child,
            url: String::new(),
            stderr: log,
        };
        let line = rx.recv_timeout(HTTP_LISTEN_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "modern_server.mjs printed no listening line ({e}):\n{}",
                server.logs()
            )
        });
        server.url = line
            .strip_prefix("modern_server listening on ")
            .filter(|u| u.starts_with("http://127.0.0.1:") && u.ends_with("/mcp"))
            .unwrap_or_else(|| panic!("unexpected first line of modern_server.mjs: {line:?}"))
            .to_owned();
        server
    }

    fn logs(&self) -> String {
        self.stderr.lock().map(|l| tail(&l, 30)).unwrap_or_default()
    }
}

impl Drop for ModernServer {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON lines of a file (the server's trace, or record.mjs's log).
fn json_lines(file: &TempPath) -> Vec<Value> {
    file.read()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The JSON-RPC messages in trace entries (a batch body counts as its members).
fn bodies(entries: &[Value]) -> Vec<Value> {
    entries
        .iter()
        .flat_map(|e| match &e["body"] {
            Value::Array(a) => a.clone(),
            Value::Null => vec![],
            b => vec![b.clone()],
        })
        .collect()
}

fn method_of(m: &Value) -> &str {
    m["method"].as_str().unwrap_or_default()
}

fn listen_uris(m: &Value) -> Vec<&str> {
    m.pointer("/params/notifications/resourceSubscriptions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The `subscriptions/listen` requests whose `resourceSubscriptions` contain `uri`.
fn listens_covering<'a>(msgs: &'a [Value], uri: &str) -> Vec<&'a Value> {
    msgs.iter()
        .filter(|m| method_of(m) == LISTEN && listen_uris(m).contains(&uri))
        .collect()
}

fn summarize_msgs(msgs: &[Value]) -> String {
    msgs.iter()
        .map(|m| {
            let method = m["method"].as_str().unwrap_or("<response>");
            let detail = match method {
                LISTEN => format!("{} {:?}", m["id"], listen_uris(m)),
                "tools/call" => format!("{} {}", m["params"]["name"], m["params"]["arguments"]),
                "notifications/cancelled" => m["params"]["requestId"].to_string(),
                _ => m["params"]["uri"].as_str().unwrap_or_default().to_owned(),
            };
            format!("{} {method} {detail}", m["id"])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads `file` until `ok` holds of its JSON lines (bounded); returns them.
fn lines_until(file: &TempPath, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let entries = json_lines(file);
        if ok(&entries) {
            return entries;
        }
        assert!(
            start.elapsed() < CONDITION_TIMEOUT,
            "timed out waiting for {what}; the upstream saw:\n{}",
            summarize_msgs(&bodies_or_lines(&entries))
        );
        std::thread::yield_now();
    }
}

/// Trace entries (HTTP: `{method, headers, body, …}`) to messages; record.mjs lines are
/// messages already.
fn bodies_or_lines(entries: &[Value]) -> Vec<Value> {
    if entries.iter().all(|e| e.get("body").is_some()) {
        bodies(entries)
    } else {
        entries.to_vec()
    }
}

/// Runs `both_eras.mjs URL --pause`; at its "holding" line, `at_holding` looks at the
/// upstream before the script goes on. Returns the script's result and run.
fn run_both_eras(url: &str, mcpmux: &Mcpmux, mut at_holding: impl FnMut()) -> (Run, Option<Value>) {
    let script = interop_dir().join("both_eras.mjs").display().to_string();
    let mut held = false;
    let run = run_peer_interactive(
        &node(),
        &[&script, url, "--pause"],
        SCENARIO_TIMEOUT,
        |line| {
            if line == r#"{"step":"holding"}"# {
                held = true;
                at_holding();
                Some("go".to_owned())
            } else {
                None
            }
        },
    );
    assert!(
        held,
        "never reached its holding step: {}",
        run.report("both_eras.mjs", mcpmux)
    );
    let result = run
        .stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    (run, result)
}

/// What both clients must have seen (either transport).
fn assert_clients(r: &Value, context: &dyn Fn() -> String) {
    let tools = json!(["bump", "confirm", "echo", "list_changed"]);
    assert_eq!(r["modernEra"], "modern", "{}", context());
    assert_eq!(r["tools"]["legacy"], tools, "{}", context());
    assert_eq!(r["tools"]["modern"], tools, "{}", context());
    assert_eq!(r["echo"]["legacy"], "from legacy", "{}", context());
    assert_eq!(r["echo"]["modern"], "from modern", "{}", context());
    let v0 = format!("{URI} v0");
    let v1 = format!("{URI} v1");
    assert_eq!(
        r["readsBefore"],
        json!({"legacy": v0, "modern": v0}),
        "{}",
        context()
    );
    assert_eq!(r["listen"]["id"], "listen:0", "{}", context());
    assert_eq!(
        r["listen"]["honoredFilter"]["resourceSubscriptions"],
        json!([URI]),
        "{}",
        context()
    );
    assert_eq!(
        r["updatesWhileHolding"],
        json!({"legacy": 0, "modern": 0}),
        "{}",
        context()
    );
    assert_eq!(r["bump"], format!("bumped {URI} to v1"), "{}", context());
    // Fresh after the update, for both (mcpmux had cached v0 for 60 s).
    assert_eq!(
        r["readsAfter"],
        json!({"legacy": v1, "modern": v1}),
        "{}",
        context()
    );
    // One bump, one update each: untagged for the legacy client, tagged with the modern
    // client's own listen id (never mcpmux's upstream listen id).
    assert_eq!(
        r["updates"]["legacy"],
        json!([{"uri": URI, "_meta": null}]),
        "{}",
        context()
    );
    assert_eq!(
        r["updates"]["modern"],
        json!([{"uri": URI, "_meta": {"io.modelcontextprotocol/subscriptionId": "listen:0"}}]),
        "{}",
        context()
    );
    assert_eq!(r["updates"]["legacyOther"], 0, "{}", context());
    assert_eq!(r["updates"]["modernOther"], 0, "{}", context());
    // MRTR: both complete; each handler ran once, for its own client's call only.
    assert_eq!(
        r["confirm"],
        json!({
            "legacy": {"text": "confirmed legacy-launch", "isError": false},
            "modern": {"text": "confirmed modern-launch", "isError": false},
        }),
        "{}",
        context()
    );
    assert_eq!(
        r["elicited"],
        json!({"legacy": ["Confirm legacy-launch?"], "modern": ["Confirm modern-launch?"]}),
        "{}",
        context()
    );
    assert_eq!(r["closed"], "local", "{}", context());
}

/// What the upstream must have received over the whole run (either transport).
fn assert_upstream(msgs: &[Value], face_probes: usize, context: &dyn Fn() -> String) {
    let report = || {
        format!(
            "{}\n--- upstream received ---\n{}",
            context(),
            summarize_msgs(msgs)
        )
    };
    let count = |method: &str| msgs.iter().filter(|m| method_of(m) == method).count();
    // Over HTTP `protocol = "auto"` asks both faces: one `initialize`, which a
    // modern-only server refuses, and nothing of the handshake era after it.
    assert_eq!(
        count("initialize"),
        face_probes,
        "face probes only, no session: {}",
        report()
    );
    assert_eq!(count("notifications/initialized"), 0, "{}", report());
    let discovers: Vec<&Value> = msgs
        .iter()
        .filter(|m| method_of(m) == "server/discover")
        .collect();
    assert_eq!(discovers.len(), 1, "only the probe: {}", report());
    assert_eq!(discovers[0]["id"], "mcpmux-discover", "{}", report());
    assert_eq!(
        listens_covering(msgs, URI).len(),
        1,
        "one upstream listen covered the URI for both clients: {}",
        report()
    );
    let first = msgs.iter().find(|m| method_of(m) == LISTEN);
    assert!(
        first.is_some_and(|m| listen_uris(m).is_empty()),
        "the listen opened at start holds no URI: {}",
        report()
    );
    let calls = |tool: &str| -> Vec<&Value> {
        msgs.iter()
            .filter(|m| method_of(m) == "tools/call" && m["params"]["name"] == tool)
            .map(|m| &m["params"])
            .collect()
    };
    assert_eq!(calls("echo").len(), 2, "{}", report());
    assert_eq!(calls("bump").len(), 1, "{}", report());
    // Each confirm reached the server twice: the first call, then the retry with the
    // accepted answer and the server's requestState (mcpmux's for the legacy client, the
    // SDK's for the modern one).
    for action in ["legacy-launch", "modern-launch"] {
        let legs: Vec<&Value> = calls("confirm")
            .into_iter()
            .filter(|p| p["arguments"]["action"] == action)
            .collect();
        assert_eq!(legs.len(), 2, "confirm {action}: {}", report());
        assert!(
            legs[0].get("inputResponses").is_none() && legs[0].get("requestState").is_none(),
            "confirm {action}: {}",
            report()
        );
        assert_eq!(
            legs[1]["inputResponses"],
            json!({"confirm": {"action": "accept", "content": {"confirm": true}}}),
            "confirm {action}: {}",
            report()
        );
        assert!(
            legs[1]["requestState"].is_string(),
            "confirm {action}: {}",
            report()
        );
        for leg in legs {
            assert_eq!(
                leg["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"],
                json!({"form": {}}),
                "confirm {action} carries its client's capabilities: {}",
                report()
            );
        }
    }
}

/// Once both clients let go: a later listen without the URI (mcpmux's listen for the list
/// flags only). Returns the messages then.
fn assert_released(
    file: &TempPath,
    to_msgs: fn(&[Value]) -> Vec<Value>,
    context: &dyn Fn() -> String,
) -> Vec<Value> {
    let entries = lines_until(file, "a listen without the URI after the release", |e| {
        let msgs = to_msgs(e);
        let Some(i) = msgs
            .iter()
            .position(|m| method_of(m) == LISTEN && listen_uris(m).contains(&URI))
        else {
            return false;
        };
        msgs[i + 1..]
            .iter()
            .any(|m| method_of(m) == LISTEN && !listen_uris(m).contains(&URI))
    });
    let msgs = to_msgs(&entries);
    assert_eq!(
        listens_covering(&msgs, URI).len(),
        1,
        "{}\n--- upstream received ---\n{}",
        context(),
        summarize_msgs(&msgs)
    );
    msgs
}

#[test]
fn legacy_and_modern_clients_share_one_listen_on_a_modern_http_server() {
    ensure_peers();
    let trace = TempPath::new("modern-server-trace", "jsonl");
    let server = ModernServer::start(trace.path());
    let (mcpmux, url) = start_mcpmux(&format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\npath = \"/mcp\"\n\n[servers.modern]\nurl = {}\n",
        toml_str(&server.url)
    ));

    let mut at_holding: Option<Vec<Value>> = None;
    let (run, result) = run_both_eras(&url, &mcpmux, || {
        at_holding = Some(bodies(&lines_until(
            &trace,
            "a listen covering the URI",
            |e| !listens_covering(&bodies(e), URI).is_empty(),
        )));
    });
    let context = || {
        format!(
            "{}\n--- modern_server stderr ---\n{}",
            run.report("both_eras.mjs (HTTP upstream)", &mcpmux),
            server.logs()
        )
    };
    assert!(run.status.success(), "{}", context());
    let result = result.unwrap_or_else(|| panic!("no JSON result\n{}", context()));
    assert_clients(&result, &context);

    // While both held the URI: exactly one upstream listen covering it.
    let held = at_holding.expect("checked at the holding step");
    assert_eq!(
        listens_covering(&held, URI).len(),
        1,
        "while both clients held {URI}\n{}\n--- upstream received ---\n{}",
        context(),
        summarize_msgs(&held)
    );

    let msgs = assert_released(&trace, bodies, &context);
    assert_upstream(&msgs, 1, &context);
    // The HTTP side of a modern-only server: POSTs only (no GET stream, no DELETE),
    // sessionless, every one with the version header, and all accepted but the one
    // `initialize` face probe (refused with 400).
    let entries = json_lines(&trace);
    for e in entries
        .iter()
        .filter(|e| e["body"]["method"] != "initialize")
    {
        let what = || format!("{e}\n{}", context());
        assert_eq!(e["method"], "POST", "{}", what());
        assert_eq!(e["status"], 200, "{}", what());
        assert_eq!(
            e["headers"]["mcp-protocol-version"],
            "2026-07-28",
            "{}",
            what()
        );
        assert!(e["headers"].get("mcp-session-id").is_none(), "{}", what());
    }
}

#[test]
fn legacy_and_modern_clients_share_one_listen_on_a_modern_stdio_server() {
    ensure_peers();
    // record.mjs logs every line mcpmux writes to the server (it is otherwise a
    // transparent stdio passthrough).
    let log = TempPath::new("modern-server-stdin", "jsonl");
    let record = interop_dir().join("record.mjs");
    let script = modern_server_script();
    let args = [
        record.display().to_string(),
        log.path().display().to_string(),
        "--".into(),
        "node".into(),
        script.display().to_string(),
        "--stdio".into(),
    ]
    .map(|a| toml_str(&a))
    .join(", ");
    let (mcpmux, url) = start_mcpmux(&format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\npath = \"/mcp\"\n\n[servers.modern]\ncommand = \"node\"\nargs = [{args}]\n"
    ));

    let mut at_holding: Option<Vec<Value>> = None;
    let (run, result) = run_both_eras(&url, &mcpmux, || {
        at_holding = Some(lines_until(&log, "a listen covering the URI", |m| {
            !listens_covering(m, URI).is_empty()
        }));
    });
    let context = || run.report("both_eras.mjs (stdio upstream)", &mcpmux);
    assert!(run.status.success(), "{}", context());
    let result = result.unwrap_or_else(|| panic!("no JSON result\n{}", context()));
    assert_clients(&result, &context);

    let held = at_holding.expect("checked at the holding step");
    assert_eq!(
        listens_covering(&held, URI).len(),
        1,
        "while both clients held {URI}\n{}\n--- upstream received ---\n{}",
        context(),
        summarize_msgs(&held)
    );
    let msgs = assert_released(&log, <[Value]>::to_vec, &context);
    assert_upstream(&msgs, 0, &context);
    // Over stdio a listen is stopped with notifications/cancelled: the covering listen
    // is cancelled once both clients let go.
    let covering = listens_covering(&msgs, URI)[0]["id"].clone();
    let msgs = lines_until(&log, "the covering listen cancelled", |m| {
        m.iter().any(|m| {
            method_of(m) == "notifications/cancelled" && m["params"]["requestId"] == covering
        })
    });
    let cancels = msgs
        .iter()
        .filter(|m| {
            method_of(m) == "notifications/cancelled" && m["params"]["requestId"] == covering
        })
        .count();
    assert_eq!(
        cancels,
        1,
        "{}\n--- upstream received ---\n{}",
        context(),
        summarize_msgs(&msgs)
    );
    drop(mcpmux);

    // `check --probe` on the plain command reports the modern era.
    let config = TempPath::new("probe-config", "toml");
    std::fs::write(
        config.path(),
        format!(
            "[servers.modern]\ncommand = \"node\"\nargs = [{}, \"--stdio\"]\n",
            toml_str(&script.display().to_string())
        ),
    )
    .expect("write the probe config");
    let config_arg = config.path().display().to_string();
    let check = run_peer(
        Path::new(common::mcpmux_bin()),
        &["check", "--probe", "--config", &config_arg],
        SCENARIO_TIMEOUT,
    );
    let what = || {
        format!(
            "mcpmux check --probe exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            check.status, check.stdout, check.stderr
        )
    };
    assert!(check.status.success(), "{}", what());
    let reports: Vec<Value> = check
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(reports.len(), 1, "{}", what());
    let r = &reports[0];
    assert_eq!(r["server"], "modern", "{}", what());
    assert_eq!(r["protocol"], "auto", "{}", what());
    assert_eq!(r["era"], "modern", "{}", what());
    assert_eq!(r["version"], "2026-07-28", "{}", what());
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]), "{}", what());
    assert_eq!(
        r["serverInfo"]["name"],
        "mcpmux-modern-server",
        "{}",
        what()
    );
}
