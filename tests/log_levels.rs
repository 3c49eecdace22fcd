//! `logging/setLevel` is kept per client (README "Behaviour worth knowing"): the shared
//! upstream session is set to the most verbose level any client asked for, and each
//! client receives a `notifications/message` only at or above its own level.
//!
//! Which client receives a log message emitted during ANOTHER client's request is
//! deliberately not asserted here: these tests look only at each client's own
//! messages (tagged with its name in `data`).

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::http::{read_body, Daemon, HttpClient};
use common::*;
use serde_json::{json, Value};

/// One client's log calls: (level, whether its own level lets it through).
type Plan = &'static [(&'static str, bool)];

/// Sends one request with a string id of our own (HttpClient numbers its ids) and
/// returns every message the POST answered with: the response and, when the answer
/// is SSE, the notifications related to the request.
async fn post_collect(c: &HttpClient, id: &str, method: &str, params: Value) -> Vec<Value> {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let msgs = read_body(c.post(&req).await).await;
    let response = msgs
        .iter()
        .find(|m| m["id"] == id && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no response to {method} {id}: {msgs:?}"));
    assert!(
        response.get("result").is_some(),
        "{method} failed: {response}"
    );
    msgs
}

/// Calls the scripted `log` tool once per planned level, each message tagged
/// `{client: name, level}`, then returns the levels of this client's own tagged
/// messages that reached it — on the POST answers or on its GET stream.
///
/// The upstream writes each log notification before that call's result, and the hub
/// keeps one upstream's order per client, so a log message for this client is either
/// in its call's POST answer or on its GET stream before `marker`: a
/// `notifications/<marker>/list_changed` broadcast requested after the last log call.
async fn own_levels(c: &mut HttpClient, name: &str, plan: Plan, marker: &str) -> BTreeSet<String> {
    let mut seen = vec![];
    for (i, (level, _)) in plan.iter().enumerate() {
        let args = json!({"level": level, "data": {"client": name, "level": level}});
        seen.extend(
            post_collect(
                c,
                &format!("{name}-log-{i}"),
                "tools/call",
                json!({"name": "log", "arguments": args}),
            )
            .await,
        );
    }
    post_collect(
        c,
        &format!("{name}-marker"),
        "tools/call",
        json!({"name": "emit_list_changed", "arguments": {"kind": marker}}),
    )
    .await;
    let marker_method = format!("notifications/{marker}/list_changed");
    loop {
        let ev = c.next_event().await;
        if ev["method"] == marker_method.as_str() {
            break;
        }
        seen.push(ev);
    }
    seen.iter()
        .filter(|m| m["method"] == "notifications/message" && m["params"]["data"]["client"] == name)
        .map(|m| {
            assert_eq!(m["params"]["level"], m["params"]["data"]["level"], "{m}");
            m["params"]["level"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn expected(plan: Plan) -> BTreeSet<String> {
    plan.iter()
        .filter(|(_, shown)| *shown)
        .map(|(level, _)| (*level).to_owned())
        .collect()
}

/// The `level` of every `logging/setLevel` the upstream received, in order.
fn upstream_set_levels(log: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "logging/setLevel")
        .map(|m| m["params"]["level"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn each_client_gets_its_own_log_messages_only_at_or_above_its_own_level() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let log = std::env::temp_dir().join(format!(
        "mcpmux-log-levels-{}-{nanos}.jsonl",
        std::process::id()
    ));
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        &format!("env = {{ SCRIPTED_LOG = {:?} }}\n", log.to_str().unwrap()),
    ))
    .await;
    let mut a = HttpClient::connect(&d.url, json!({})).await;
    let mut b = HttpClient::connect(&d.url, json!({})).await;
    for (c, level) in [(&mut a, "error"), (&mut b, "debug")] {
        let r = c.call("logging/setLevel", json!({"level": level})).await;
        assert_eq!(r["result"], json!({}), "{r}");
    }

    const A: Plan = &[
        ("debug", false),
        ("info", false),
        ("warning", false),
        ("error", true),
        ("critical", true),
    ];
    const B: Plan = &[("debug", true), ("info", true), ("error", true)];
    assert_eq!(
        own_levels(&mut a, "A", A, "tools").await,
        expected(A),
        "A (level error) got its own messages at these levels"
    );
    assert_eq!(
        own_levels(&mut b, "B", B, "prompts").await,
        expected(B),
        "B (level debug) got its own messages at these levels"
    );

    // The one upstream session was set to the most verbose level asked for so far
    // (sent before the log calls above, which the upstream has answered since).
    assert_eq!(upstream_set_levels(&log), ["error", "debug"]);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_level_change_applies_to_the_next_messages() {
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        "",
    ))
    .await;
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    // No level set: everything is delivered.
    const ALL: Plan = &[("debug", true), ("emergency", true)];
    assert_eq!(
        own_levels(&mut c, "C-unset", ALL, "tools").await,
        expected(ALL),
        "no level set"
    );
    let r = c
        .call("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    const WARNING: Plan = &[("info", false), ("notice", false), ("warning", true)];
    assert_eq!(
        own_levels(&mut c, "C-warning", WARNING, "prompts").await,
        expected(WARNING),
        "level warning"
    );
    let r = c.call("logging/setLevel", json!({"level": "debug"})).await;
    assert_eq!(r["result"], json!({}), "{r}");
    const DEBUG: Plan = &[("debug", true), ("info", true)];
    assert_eq!(
        own_levels(&mut c, "C-debug", DEBUG, "resources").await,
        expected(DEBUG),
        "level debug"
    );
    // An unknown level is refused and changes nothing.
    let r = c.call("logging/setLevel", json!({"level": "loud"})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(
        own_levels(&mut c, "C-still-debug", DEBUG, "tools").await,
        expected(DEBUG),
        "still level debug after a refused setLevel"
    );
}
