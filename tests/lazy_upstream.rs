//! `lazy = true`: the upstream is not started at boot, only when the first client
//! initializes, and that client's handshake waits for it.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::http::{Daemon, HttpClient};
use common::*;
use serde_json::{json, Value};

/// A fresh path for one server's `SCRIPTED_LOG` (unique per process, test and name).
fn log_path(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = std::env::temp_dir().join(format!(
        "mcpmux-lazy-{}-{nanos}-{name}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// The methods of the requests and notifications a scripted upstream recorded, in order.
fn recorded_methods(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .collect()
}

/// Polls a `SCRIPTED_LOG` file until it holds a message with `method` (no event tells
/// a test that a child process has read a line; each poll reads the file once).
async fn wait_recorded(log: &Path, method: &str) {
    let start = Instant::now();
    loop {
        if recorded_methods(log).iter().any(|m| m == method) {
            return;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "{} never recorded {method}: {:?}",
            log.display(),
            recorded_methods(log)
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_lazy_upstream_starts_with_the_first_client() {
    // Two servers started by the same boot: `lazy` (first in config order, so an
    // eager mcpmux would start it no later than the other) and `control`, which is not
    // lazy. `control` does not offer resources.subscribe, so a client is offered
    // subscriptions only if its handshake waited for `lazy`.
    let lazy_log = log_path("lazy");
    let control_log = log_path("control");
    let cmd = scripted_upstream();
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\
         [servers.lazy]\ncommand = {cmd:?}\nlazy = true\nprefix = \"lazy\"\n\
         env = {{ SCRIPTED_NAME = \"lazy\", SCRIPTED_LOG = {lazy:?} }}\n\
         [servers.control]\ncommand = {cmd:?}\nprefix = \"control\"\n\
         env = {{ SCRIPTED_NAME = \"control\", SCRIPTED_NO_SUBSCRIBE = \"1\", SCRIPTED_LOG = {control:?} }}\n",
        lazy = lazy_log.to_str().unwrap(),
        control = control_log.to_str().unwrap(),
    );
    let d = Daemon::start(&config).await;

    // The control server's start is complete: handshake done and its catalog fetched
    // (several round trips after its spawn). The lazy server had the same chance to
    // start, and an upstream records its first line before it answers anything.
    wait_recorded(&control_log, "initialize").await;
    wait_recorded(&control_log, "tools/list").await;
    assert!(
        !lazy_log.exists(),
        "the lazy upstream started at boot: {:?}",
        recorded_methods(&lazy_log)
    );

    let mut c = HttpClient::connect(&d.url, json!({})).await;
    // The handshake waited for the lazy upstream's start, so its initialize is
    // recorded by now (it records a line before answering it).
    // (First the era probe, protocol = "auto", then the handshake.)
    let started = recorded_methods(&lazy_log);
    assert_eq!(
        started
            .iter()
            .take(2)
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["server/discover", "initialize"],
        "the upstream started for the first client: {started:?}"
    );
    assert_eq!(
        c.tool("lazy__echo", json!({"text": "woke"})).await["content"][0]["text"],
        "woke"
    );
    // Subscriptions were offered in the handshake: only the lazy server offers them.
    assert_eq!(
        c.call(
            "resources/subscribe",
            json!({"uri": "lazy+test://static/1"})
        )
        .await["result"],
        json!({})
    );
    let stats = c.tool("lazy__stats", json!({})).await;
    assert_eq!(stats["counts"]["initialize"], 1, "one start: {stats}");
    assert_eq!(stats["subscribed"], json!(["test://static/1"]), "{stats}");
    let _ = std::fs::remove_file(&lazy_log);
    let _ = std::fs::remove_file(&control_log);
}
