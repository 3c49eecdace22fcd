//! Traces over OTLP/HTTP, decoded by a real receiver (tests/interop/python/
//! otlp_receiver.py, with the official opentelemetry-proto definitions): a `tools/call`
//! whose `_meta` carries a `traceparent` gives a SERVER span and a CLIENT span in that
//! trace, named and attributed as the MCP semantic conventions say, for a legacy session
//! and a 2026-07-28 client; the upstream receives mcpmux's CLIENT span as its parent;
//! two readers of one URI give one upstream read span, which the joined read links to;
//! the two duration histograms arrive; and with tracing off nothing is exported.

use crate::common;
use crate::harness;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use common::http::{post, Daemon, HttpClient, PostStream};
use common::modern::{request, ModernClient};
use common::{scripted_upstream, EVENT_TIMEOUT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const URI: &str = "test://static/1";

/// The receiver process and what it printed so far.
struct Receiver {
    _child: Child,
    port: u16,
    rx: mpsc::UnboundedReceiver<Value>,
    seen: Vec<Value>,
}

impl Receiver {
    async fn start() -> Receiver {
        harness::ensure_peers();
        let dir = harness::interop_dir();
        let mut child = Command::new(dir.join(".venv/bin/python"))
            .arg(dir.join("python/otlp_receiver.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the OTLP receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
            .await
            .expect("the receiver did not start")
            .unwrap()
            .expect("the receiver exited");
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&l) {
                    let _ = tx.send(v);
                }
            }
        });
        Receiver {
            _child: child,
            port,
            rx,
            seen: Vec::new(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits until `pred` holds for what was received; returns every line so far.
    async fn until(&mut self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let start = Instant::now();
        while !pred(&self.seen) {
            let left = EVENT_TIMEOUT.saturating_sub(start.elapsed());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(v)) => {
                    assert_ne!(v["signal"], "error", "the receiver could not decode: {v}");
                    self.seen.push(v);
                }
                _ => panic!("timed out waiting for {what}; received: {:#?}", self.seen),
            }
        }
        self.seen.clone()
    }

    /// Everything received without waiting.
    fn drain(&mut self) -> Vec<Value> {
        while let Ok(v) = self.rx.try_recv() {
            self.seen.push(v);
        }
        self.seen.clone()
    }
}

fn spans<'a>(all: &'a [Value], trace: &str) -> Vec<&'a Value> {
    all.iter()
        .filter(|v| v["signal"] == "span" && v["traceId"] == trace)
        .collect()
}

fn find<'a>(all: &'a [Value], trace: &str, kind: &str, method: &str) -> Option<&'a Value> {
    spans(all, trace)
        .into_iter()
        .find(|s| s["kind"] == kind && s["attributes"]["mcp.method.name"] == method)
}

fn log_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mcpmux-tracing-{}-{tag}.log", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn config(telemetry: Option<&str>, log: &Path) -> String {
    let t = telemetry.map_or(String::new(), |e| {
        format!("[telemetry]\notlp_endpoint = \"{e}\"\nservice_name = \"mcpmux-test\"\n")
    });
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n{t}[servers.s]\ncommand = {:?}\n\
         env = {{ SCRIPTED_NAME = \"s\", SCRIPTED_LOG = {log:?} }}\n",
        scripted_upstream()
    )
}

/// Export quickly: spans within 50 ms, metrics every 200 ms.
const FAST: [(&str, &str); 2] = [
    ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
];

/// The `tools/call` requests the upstream received.
fn upstream_calls(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call")
        .collect()
}

/// One `tools/call echo` through a new session at `url`, answered.
async fn call_echo(url: &str) {
    let mut c = HttpClient::connect(url, json!({})).await;
    let r = c
        .call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
}

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

#[tokio::test]
async fn a_traceparent_in_meta_joins_mcpmux_and_the_upstream_to_the_callers_trace() {
    let mut rx = Receiver::start().await;
    let log = log_path("call");
    let mut d = Daemon::start_with_env(&config(Some(&rx.endpoint()), &log), &FAST).await;
    let (legacy_trace, legacy_parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let (modern_trace, modern_parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");

    let mut legacy = HttpClient::connect(&d.url, json!({})).await;
    let r = legacy
        .call(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"},
                   "_meta": {"traceparent": traceparent(legacy_trace, legacy_parent)}}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let mut body = request(
        json!(7),
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    );
    body["params"]["_meta"]["traceparent"] = json!(traceparent(modern_trace, modern_parent));
    let resp = ModernClient::new(&d.url).post_with(&body, &[]).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    for (trace, parent, session) in [
        (legacy_trace, legacy_parent, true),
        (modern_trace, modern_parent, false),
    ] {
        let all = rx
            .until("a SERVER and a CLIENT span", |all| {
                find(all, trace, "SERVER", "tools/call").is_some()
                    && find(all, trace, "CLIENT", "tools/call").is_some()
            })
            .await;
        let server = find(&all, trace, "SERVER", "tools/call").unwrap();
        let client = find(&all, trace, "CLIENT", "tools/call").unwrap();
        assert_eq!(server["name"], "tools/call echo", "{server}");
        assert_eq!(
            server["parentSpanId"], parent,
            "the caller's span: {server}"
        );
        assert_eq!(server["service"], "mcpmux-test");
        let a = &server["attributes"];
        assert_eq!(a["gen_ai.tool.name"], "echo", "{server}");
        assert_eq!(a["gen_ai.operation.name"], "execute_tool", "{server}");
        assert_eq!(a["network.transport"], "tcp", "{server}");
        assert!(a["jsonrpc.request.id"].is_string(), "{server}");
        assert!(a["mcp.protocol.version"].is_string(), "{server}");
        assert_eq!(
            a.get("mcp.session.id").is_some(),
            session,
            "mcp.session.id on legacy sessions only: {server}"
        );
        if !session {
            assert_eq!(a["mcp.protocol.version"], "2026-07-28", "{server}");
        }
        assert_eq!(client["name"], "tools/call echo", "{client}");
        assert_eq!(client["parentSpanId"], server["spanId"], "{client}");
        assert_eq!(client["attributes"]["mcpmux.upstream"], "s", "{client}");
        assert_eq!(client["attributes"]["gen_ai.tool.name"], "echo", "{client}");
        // The upstream's request names mcpmux's CLIENT span as its parent.
        let wanted = traceparent(trace, client["spanId"].as_str().unwrap());
        assert!(
            upstream_calls(&log)
                .iter()
                .any(|m| m["params"]["_meta"]["traceparent"] == wanted.as_str()),
            "the upstream got no {wanted}: {:#?}",
            upstream_calls(&log)
        );
    }

    // The two histograms of the conventions, flushed at shutdown at the latest.
    d.terminate().await;
    rx.until("both duration histograms", |all| {
        [
            "mcp.server.operation.duration",
            "mcp.client.operation.duration",
        ]
        .iter()
        .all(|n| {
            all.iter()
                .any(|v| v["signal"] == "metric" && v["name"] == *n)
        })
    })
    .await;
    let _ = std::fs::remove_file(&log);
}

/// A request its client cancels gets no response, yet its SERVER span ends (marked
/// cancelled) while the client stays connected, rather than when it leaves.
#[tokio::test]
async fn a_cancelled_request_ends_its_server_span() {
    let mut rx = Receiver::start().await;
    let log = log_path("cancel");
    let d = Daemon::start_with_env(&config(Some(&rx.endpoint()), &log), &FAST).await;
    let c = HttpClient::connect(&d.url, json!({})).await;
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let call = json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
        "params": {"name": "hang", "arguments": {},
                   "_meta": {"traceparent": traceparent(trace, "00f067aa0ba902b8")}}});
    let _stream = PostStream::open(&c, &call).await;
    let start = Instant::now();
    while upstream_calls(&log).is_empty() {
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "the call never reached the upstream"
        );
        tokio::task::yield_now().await;
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "slow", "reason": "the user gave up"}});
    assert_eq!(c.post(&cancel).await.status(), 202);
    let all = rx
        .until("the cancelled call's SERVER span", |all| {
            find(all, trace, "SERVER", "tools/call").is_some()
        })
        .await;
    let server = find(&all, trace, "SERVER", "tools/call").unwrap();
    assert_eq!(server["attributes"]["error.type"], "cancelled", "{server}");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_joined_read_links_to_the_one_upstream_read() {
    let mut rx = Receiver::start().await;
    let log = log_path("read");
    let d = Daemon::start_with_env(&config(Some(&rx.endpoint()), &log), &FAST).await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let mut b = HttpClient::connect(&d.url, json!({})).await;
    // A held URI's reads are shared; the upstream holds its reads until released.
    let r = a.call("resources/subscribe", json!({"uri": URI})).await;
    assert!(r.get("result").is_some(), "{r}");
    a.tool("hold_reads", json!({"uri": URI})).await;
    let (ta, tb) = (
        "11111111111111111111111111111111",
        "22222222222222222222222222222222",
    );
    // A read in its own task, in the trace `trace`; the task yields the HTTP status.
    let read = |session: String, trace: &'static str| {
        let body = json!({"jsonrpc": "2.0", "id": 50, "method": "resources/read",
               "params": {"uri": URI, "_meta": {"traceparent": traceparent(trace, "0102030405060708")}}});
        let url = d.url.clone();
        tokio::spawn(async move {
            let c = reqwest::Client::new();
            post(&c, &url, Some(&session), &body)
                .await
                .status()
                .as_u16()
        })
    };
    let first = read(a.session.clone(), ta);
    // The first read is at the upstream before the second is sent.
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("\"resources/read\"")
    {
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "the first read never reached the upstream"
        );
        tokio::task::yield_now().await;
    }
    let second = read(b.session.clone(), tb);
    // Released once the second has joined (the hub counts joins).
    let start = Instant::now();
    loop {
        let s: Value = reqwest::get(format!("{}/status", d.origin()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if s["cache"]["joined"].as_u64().unwrap_or(0) >= 1 {
            break;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "the second read never joined: {s}"
        );
        tokio::task::yield_now().await;
    }
    b.tool("release_reads", json!({"uri": URI})).await;
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200);

    let all = rx
        .until("both reads' SERVER spans and the upstream read", |all| {
            find(all, ta, "SERVER", "resources/read").is_some()
                && find(all, tb, "SERVER", "resources/read").is_some()
                && find(all, ta, "CLIENT", "resources/read").is_some()
        })
        .await;
    let upstream_reads: Vec<&Value> = all
        .iter()
        .filter(|v| v["kind"] == "CLIENT" && v["attributes"]["mcp.method.name"] == "resources/read")
        .collect();
    assert_eq!(
        upstream_reads.len(),
        1,
        "one upstream read: {upstream_reads:#?}"
    );
    let fetch = upstream_reads[0];
    let (sa, sb) = (
        find(&all, ta, "SERVER", "resources/read").unwrap(),
        find(&all, tb, "SERVER", "resources/read").unwrap(),
    );
    assert_eq!(
        fetch["parentSpanId"], sa["spanId"],
        "the first reader's read: {fetch}"
    );
    assert_eq!(sa["attributes"]["mcpmux.cache"], "miss", "{sa}");
    assert_eq!(sa["attributes"]["mcp.resource.uri"], URI, "{sa}");
    assert_eq!(sb["attributes"]["mcpmux.cache"], "join", "{sb}");
    assert_eq!(
        sb["links"],
        json!([{"traceId": ta, "spanId": fetch["spanId"]}]),
        "the joined read links to the upstream read: {sb}"
    );
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_and_the_variable_turns_it_on() {
    let mut rx = Receiver::start().await;
    let log = log_path("off");
    // Off: no [telemetry], no OTEL_EXPORTER_OTLP_ENDPOINT. A daemon that exported
    // would flush at exit, before `terminate` returns.
    let mut off = Daemon::start_with_env(
        &config(None, &log),
        &[("OTEL_SERVICE_NAME", "mcpmux-off"), FAST[0]],
    )
    .await;
    call_echo(&off.url).await;
    off.terminate().await;
    // On through the standard variable alone.
    let endpoint = rx.endpoint();
    let mut on = Daemon::start_with_env(
        &config(None, &log),
        &[
            ("OTEL_SERVICE_NAME", "mcpmux-env"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            FAST[0],
        ],
    )
    .await;
    call_echo(&on.url).await;
    on.terminate().await;
    rx.until("the env-configured daemon's spans", |all| {
        all.iter().any(|v| v["service"] == "mcpmux-env")
    })
    .await;
    let all = rx.drain();
    assert!(
        !all.iter().any(|v| v["service"] == "mcpmux-off"),
        "tracing off exported: {all:#?}"
    );
    let _ = std::fs::remove_file(&log);
}

/// The standard variables win over the config, as for the service name: a config that
/// keeps no trace (`sample_ratio = 0.0`) exports one under `OTEL_TRACES_SAMPLER=always_on`.
#[tokio::test]
async fn the_sampler_variable_wins_over_the_configs_ratio() {
    let mut rx = Receiver::start().await;
    let log = log_path("sampler");
    let cfg = config(Some(&rx.endpoint()), &log).replace(
        "service_name = \"mcpmux-test\"\n",
        "service_name = \"mcpmux-test\"\nsample_ratio = 0.0\n",
    );
    assert!(cfg.contains("sample_ratio"), "{cfg}");
    let mut d = Daemon::start_with_env(
        &cfg,
        &[
            ("OTEL_SERVICE_NAME", "mcpmux-sampled"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            FAST[0],
        ],
    )
    .await;
    call_echo(&d.url).await;
    d.terminate().await;
    rx.until("a span of the always-on daemon", |all| {
        all.iter()
            .any(|v| v["signal"] == "span" && v["service"] == "mcpmux-sampled")
    })
    .await;
    let _ = std::fs::remove_file(&log);
}
