//! `scripted-upstream`: a small, deterministic MCP server over stdio, used by mcpmux's
//! tests and benchmarks as an upstream.
//!
//! It deliberately does not depend on the `mcpmux` library: it is an independent peer
//! that speaks the wire protocol (newline-delimited JSON-RPC 2.0, one compact message per
//! line, MCP only on stdout, diagnostics on stderr), so it can catch proxy bugs that a
//! shared codec would hide. It exits 0 on stdin EOF.
//!
//! # Concurrency
//!
//! One reader loop owns all state and handles messages in arrival order; one writer task
//! drains an unbounded channel to stdout (batching lines, flushing when the channel is
//! empty). Requests that must wait (held reads, `hang`, `sample`) are parked in the
//! state and answered later, so they never block the reader. Everything a handler sends
//! goes through the same channel, so stdout order equals send order (e.g. an
//! `emit_update` notification is always written before that tool call's result).
//!
//! # MCP surface
//!
//! - `initialize` echoes a supported `protocolVersion` (2025-11-25, 2025-06-18,
//!   2025-03-26, 2024-11-05; anything else gets 2025-11-25) and declares tools, prompts,
//!   resources (subscribe + listChanged), logging and completions.
//! - `ping`, `logging/setLevel` → `{}`; `completion/complete` → a few fixed values.
//! - `resources/list` (paginated), `resources/templates/list` (`test://dynamic/{id}`),
//!   `resources/read`, `resources/subscribe`, `resources/unsubscribe` (both `{}`).
//! - `prompts/list`, `prompts/get` (one prompt, `greet {name}`).
//! - `tools/list`, `tools/call` (the control tools below).
//! - Unknown methods → `-32601`. Notifications are recorded and otherwise ignored, except
//!   `notifications/cancelled {requestId}`, which drops a parked request (a held read, a
//!   `hang`, or a `sample` call, in which case the outstanding `sampling/createMessage`
//!   is cancelled towards the client too).
//!
//! Resources: `test://static/1` … `test://static/N` (odd = text, even = blob) and
//! `test://dynamic/<anything non-empty>` (text, or blob when the URI contains `blob`).
//! Other URIs → `-32002 "Resource not found"` with `data: {uri}`. Text content is
//! `"<uri> v<version>"`; blob content is base64 of the bytes `0..=255` followed by
//! `" <uri> v<version>"`. `version` is the number of updates emitted for that URI.
//!
//! # Control tools (`tools/call`)
//!
//! | tool | arguments | effect |
//! |---|---|---|
//! | `echo` | `{text}` | returns `text` |
//! | `emit_update` | `{uri, meta?, stamp?}` | bumps the version, sends `notifications/resources/updated {uri, _meta?}` (whether or not subscribed), then the result |
//! | `emit_updates` | `{uri, count, meta?, stamp?}` | `count` updates as fast as possible, then the result |
//!
//! With `stamp: true` each update's `_meta.t` is set to its emission time in
//! nanoseconds since the UNIX epoch (a clock every process on the machine shares), so a
//! benchmark client can measure emit→receipt latency.
//! | `emit_list_changed` | `{kind: tools\|prompts\|resources}` | sends `notifications/<kind>/list_changed` |
//! | `stats` | `{}` | the JSON below, as `structuredContent` and as text |
//! | `hold_reads` | `{uri}` | later reads of `uri` are parked, not answered |
//! | `release_reads` | `{uri}` | answers the parked reads (oldest first), then the result |
//! | `fail_reads` | `{uri, code?, message?}` | reads of `uri` answer an error (default `-32603`) |
//! | `clear_faults` | `{}` | removes every `fail_reads` fault |
//! | `hang` | `{}` | never answered (until cancelled) |
//! | `regional` | `{region, query?}` | answers `"<region>: <query>"`; `region` carries `x-mcp-header: "Region"` in its schema |
//! | `delay` | `{ms, text?}` | answers `text` after `ms` milliseconds; other requests are served meanwhile |
//! | `exit` | `{code?}` | flushes stdout and exits with `code` (default 0), no result |
//! | `progress` | `{steps, interval_ms?}` | with `_meta.progressToken`, sends `steps` progress notifications (one every `interval_ms`, default at once), then the result |
//! | `sample` | `{prompt}` | sends `sampling/createMessage` (ids `s1`, `s2`, …); the client's answer becomes the result |
//! | `log` | `{level?, data?}` | sends `notifications/message` |
//!
//! `stats` returns (maps sorted by key; the `stats` call itself is already counted):
//!
//! ```text
//! { "name":       "<SCRIPTED_NAME>",            // which server answered (aggregation tests)
//!   "counts":     { "<method>" | "<response>" | "<parse_error>" | "<invalid>": n },
//!   "by_uri":     { "<method>": { "<params.uri>": n } },
//!   "tools":      { "<tools/call params.name>": n },
//!   "subscribed": [ "<uri>", ... ],             // sorted
//!   "versions":   { "<uri>": updates emitted },
//!   "pending":    { "held_reads": n, "hung": n, "sampling": n } }
//! ```
//!
//! Held reads are answered with the response computed when the read **arrived** (stale
//! content, or the fault/not-found error in force then), not at release time: tests use
//! this to race a read against an update.
//!
//! # Environment
//!
//! - `SCRIPTED_NAME`: `serverInfo.name` (default `scripted`).
//! - `SCRIPTED_RESOURCES`: N static resources (default 20).
//! - `SCRIPTED_PAGE_SIZE`: `resources/list` page size (default 100).
//! - `SCRIPTED_NO_SUBSCRIBE=1`: declare `resources: {listChanged: true}` without
//!   `subscribe` (subscribe requests are still answered `{}`).
//! - `SCRIPTED_LOG=<path>`: append every received line to this file, flushed per line.
//! - `SCRIPTED_CRASH_ON_START=1`: exit 3 right after reading (and logging) the first line.
//! - `SCRIPTED_IGNORE_EOF=1`: keep running after stdin closes, until SIGTERM, which is
//!   recorded in `SCRIPTED_LOG` as the line `<sigterm>` before exiting 0 (to test how a
//!   client stops a server that does not exit on EOF).
//! - `SCRIPTED_CONFORMANCE=1`: also offer the MCP conformance suite's fixtures
//!   (`conformance.rs`: `test_*` tools and prompts, `test://static-text`,
//!   `test://static-binary`, `test://template/{id}/data`).

mod base64;
mod conformance;
mod recorder;
mod server;
mod tools;

use std::path::PathBuf;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::mpsc;

use server::{Flow, Server};

/// Settings read once from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub no_subscribe: bool,
    pub resources: u64,
    pub page_size: usize,
    pub log_path: Option<PathBuf>,
    pub crash_on_start: bool,
    pub ignore_eof: bool,
    pub conformance: bool,
}

impl Config {
    fn from_env() -> Self {
        Config {
            name: std::env::var("SCRIPTED_NAME").unwrap_or_else(|_| "scripted".to_owned()),
            no_subscribe: env_flag("SCRIPTED_NO_SUBSCRIBE"),
            resources: env_number("SCRIPTED_RESOURCES", 20),
            page_size: env_number("SCRIPTED_PAGE_SIZE", 100).max(1) as usize,
            log_path: std::env::var_os("SCRIPTED_LOG")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            crash_on_start: env_flag("SCRIPTED_CRASH_ON_START"),
            ignore_eof: env_flag("SCRIPTED_IGNORE_EOF"),
            conformance: env_flag("SCRIPTED_CONFORMANCE"),
        }
    }
}

fn env_flag(key: &str) -> bool {
    std::env::var(key).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

fn env_number(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Err(_) => default,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("[scripted] ignoring {key}={v:?}: not a number; using {default}");
            default
        }),
    }
}

/// What the reader hands to the writer task.
#[derive(Debug)]
pub enum Out {
    /// One serialized JSON-RPC message, without the trailing newline.
    Line(String),
    /// Flush everything queued before this, then exit the process with this code.
    Exit(i32),
}

async fn write_loop(mut rx: mpsc::UnboundedReceiver<Out>) {
    let mut stdout = BufWriter::new(tokio::io::stdout());
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(item) = next {
            match item {
                Out::Line(line) => {
                    let written = async {
                        stdout.write_all(line.as_bytes()).await?;
                        stdout.write_all(b"\n").await
                    }
                    .await;
                    if let Err(e) = written {
                        eprintln!("[scripted] stdout write failed: {e}; writer stopping");
                        return;
                    }
                }
                Out::Exit(code) => {
                    let _ = stdout.flush().await;
                    std::process::exit(code);
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = stdout.flush().await {
            eprintln!("[scripted] stdout flush failed: {e}; writer stopping");
            return;
        }
    }
}

#[cfg(unix)]
async fn sigterm() {
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
    }
}

#[cfg(not(unix))]
async fn sigterm() {
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let config = Config::from_env();
    let crash_on_start = config.crash_on_start;
    let ignore_eof = config.ignore_eof;
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(rx));
    let mut server = Server::new(config, tx);

    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut buf = Vec::with_capacity(4096);
    loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("[scripted] stdin read failed: {e}");
                break;
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        server.log_line(line);
        if crash_on_start {
            eprintln!("[scripted] SCRIPTED_CRASH_ON_START: exiting with 3");
            std::process::exit(3);
        }
        if server.handle_line(line).await == Flow::Exit {
            // The writer flushes what is queued and exits the process.
            std::future::pending::<()>().await;
        }
    }
    if ignore_eof {
        eprintln!("[scripted] stdin closed; SCRIPTED_IGNORE_EOF: waiting for SIGTERM");
        sigterm().await;
        server.log_line("<sigterm>");
        std::process::exit(0);
    }
    // EOF: drop the sender so the writer drains the queue and stops, then exit 0.
    drop(server);
    let _ = writer.await;
}
