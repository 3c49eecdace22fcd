//! Hot reload (SIGHUP) while 2026-07-28 listens hold URIs: a request in flight on a
//! removed server fails with an error naming the reason, a changed `[limits]
//! request_timeout_ms` is in force for the next request, and a listen on a kept server
//! keeps its updates; a changed server is restarted and the listen's URI is subscribed
//! again at its new process, whose updates reach the listen. What each upstream saw is
//! read from its `SCRIPTED_LOG` and `stats`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::http::{Daemon, HttpClient};
use common::modern::ModernClient;
use common::{scripted_upstream, temp_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const URI: &str = "test://static/1";
const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";

fn server(name: &str, prefix: &str, log: &Path, extra_env: &str) -> String {
    format!(
        "[servers.{name}]\ncommand = {cmd:?}\nprefix = \"{prefix}\"\nenv = {{ SCRIPTED_NAME = \"{name}\", SCRIPTED_LOG = {log:?}{extra_env} }}\n",
        cmd = scripted_upstream(),
    )
}

fn log_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "mcpmux-reload-listens-{}-{tag}.log",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Polls `f` until it returns `Some` (bounded by `EVENT_TIMEOUT`).
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < EVENT_TIMEOUT,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
    }
}

fn hup(d: &Daemon) {
    let pid = d.child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
}

/// A listen on alpha, and a request hanging on gamma.
async fn start(
    path: &Path,
) -> (
    Daemon,
    common::modern::EventStream,
    tokio::task::JoinHandle<(u16, Value)>,
) {
    let d = Daemon::start_at(path).await;
    let held = format!("a+{URI}");
    let (listen, ack) = ModernClient::new(&d.url).listen("listen:0", &[&held]).await;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([held]),
        "{ack}"
    );
    let hanging = tokio::spawn({
        let url = d.url.clone();
        async move {
            ModernClient::new(&url)
                .call(1, "tools/call", json!({"name": "c__hang", "arguments": {}}))
                .await
        }
    });
    (d, listen, hanging)
}

/// Reads the listen until the update carrying `_meta.n == n` (any "may have changed"
/// update before it is skipped).
async fn until_update(listen: &mut common::modern::EventStream, n: &str) {
    loop {
        let ev = listen.next().await.expect("the listen stays open");
        assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
        assert_eq!(ev["params"]["uri"], format!("a+{URI}"), "{ev}");
        if ev["params"]["_meta"]["n"] == n {
            return;
        }
    }
}

#[tokio::test]
async fn reload_fails_a_removed_servers_requests_and_applies_limits_under_a_listen() {
    let (log_a, log_c) = (log_path("a1"), log_path("c1"));
    let path = temp_config(&format!(
        "{LISTEN}{}{}",
        server("alpha", "a", &log_a, ""),
        server("gamma", "c", &log_c, "")
    ));
    let (d, mut listen, hanging) = start(&path).await;
    let mut control = HttpClient::connect(&d.url, json!({})).await;
    until("gamma's hang to arrive", || {
        received(&log_c)
            .iter()
            .any(|m| m["params"]["name"] == "hang")
            .then_some(())
    })
    .await;

    // Edit: gamma removed, a short request timeout; alpha unchanged.
    std::fs::write(
        &path,
        format!(
            "{LISTEN}[limits]\nrequest_timeout_ms = 3000\n{}",
            server("alpha", "a", &log_a, "")
        ),
    )
    .unwrap();
    hup(&d);

    // The request in flight on gamma fails, naming why.
    let (status, r) = tokio::time::timeout(EVENT_TIMEOUT, hanging)
        .await
        .expect("the request on the removed server was answered")
        .unwrap();
    assert_eq!(status, 200, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("gamma was removed from the configuration"),
        "{r}"
    );

    // The new request timeout is in force (the old one was 60 s, beyond EVENT_TIMEOUT).
    let r = tokio::time::timeout(
        EVENT_TIMEOUT,
        control.call("tools/call", json!({"name": "a__hang", "arguments": {}})),
    )
    .await
    .expect("the hang timed out under the reloaded limit");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("limits.request_timeout_ms"), "{r}");

    // The listen on the kept server still gets its updates, from the same process.
    control
        .tool(
            "a__emit_update",
            json!({"uri": URI, "meta": {"n": "after"}}),
        )
        .await;
    until_update(&mut listen, "after").await;
    let log = received(&log_a);
    let inits = log.iter().filter(|m| m["method"] == "initialize").count();
    assert_eq!(inits, 1, "alpha was not restarted: {log:?}");
}

/// A changed server is carried out as "removed + added" (`Core::reload`); its
/// holders keep its URIs, which the restarted process is asked to subscribe.
#[tokio::test]
async fn a_changed_server_is_restarted_and_the_listens_uri_subscribed_again() {
    let (log_a, log_c) = (log_path("a2"), log_path("c2"));
    let path = temp_config(&format!(
        "{LISTEN}{}{}",
        server("alpha", "a", &log_a, ""),
        server("gamma", "c", &log_c, "")
    ));
    let (d, mut listen, _hanging) = start(&path).await;
    let mut control = HttpClient::connect(&d.url, json!({})).await;

    // Edit: alpha changed (one more resource). SIGHUP.
    std::fs::write(
        &path,
        format!(
            "{LISTEN}{}{}",
            server("alpha", "a", &log_a, ", SCRIPTED_RESOURCES = \"21\""),
            server("gamma", "c", &log_c, "")
        ),
    )
    .unwrap();
    hup(&d);

    // alpha was restarted (a second initialize in its log) and the listen's URI
    // subscribed again at the new process.
    until("the listen's URI subscribed at the restarted alpha", || {
        let log = received(&log_a);
        let second = log
            .iter()
            .enumerate()
            .filter(|(_, m)| m["method"] == "initialize")
            .nth(1)?
            .0;
        log[second..]
            .iter()
            .any(|m| m["method"] == "resources/subscribe" && m["params"]["uri"] == URI)
            .then_some(())
    })
    .await;
    let stats = control.tool("a__stats", json!({})).await;
    assert_eq!(stats["subscribed"], json!([URI]), "{stats}");

    // The listen gets the new process's updates.
    control
        .tool(
            "a__emit_update",
            json!({"uri": URI, "meta": {"n": "after"}}),
        )
        .await;
    until_update(&mut listen, "after").await;
}
