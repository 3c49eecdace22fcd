//! Profiles (`[profiles.NAME]`): views of some servers at their own paths over the
//! same upstream sessions. Three scripted upstreams `a`, `b`, `c` (prefixed by their
//! names); profile `p1` = a + b, `p2` = a + c. Checked: one upstream subscribe for a URI
//! held through both profiles and the update reaching both; each profile's tool list;
//! a hidden tool answering as an unknown one; a rename both ways; a per-profile token;
//! and a reload of one profile's filter announced to its clients only (legacy sessions
//! and 2026-07-28 listens).

use crate::common;

use std::path::{Path, PathBuf};

use common::http::{Daemon, HttpClient};
use common::modern::{request, ModernClient};
use common::{scripted_upstream, temp_config};
use serde_json::{json, Value};

const URI: &str = "test://static/1";

fn log_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mcpmux-profiles-{}-{tag}.log", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn server(name: &str, log: &Path, extra: &str) -> String {
    format!(
        "[servers.{name}]\ncommand = {cmd:?}\nprefix = \"{name}\"\n{extra}\
         env = {{ SCRIPTED_NAME = \"{name}\", SCRIPTED_LOG = {log:?} }}\n",
        cmd = scripted_upstream(),
    )
}

/// The config: `p2_filter` is profile p2's extra keys (what the reload test changes).
fn config(logs: &[PathBuf; 3], p2_filter: &str, tokens: bool) -> String {
    let token = |var: &str| {
        if tokens {
            format!("auth_token_env = \"{var}\"\n")
        } else {
            String::new()
        }
    };
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n{}{}{}\
         [profiles.p1]\nservers = [\"a\", \"b\"]\n{}\
         [profiles.p2]\nservers = [\"a\", \"c\"]\n{}{p2_filter}",
        server(
            "a",
            &logs[0],
            "tools_deny = [\"hang\"]\ntool_rename = { echo = \"say\" }\n"
        ),
        server("b", &logs[1], ""),
        server("c", &logs[2], ""),
        token("P1_TOKEN"),
        token("P2_TOKEN"),
    )
}

fn logs(tag: &str) -> [PathBuf; 3] {
    ["a", "b", "c"].map(|n| log_path(&format!("{tag}-{n}")))
}

/// Requests with `method` an upstream received (from its `SCRIPTED_LOG`).
fn received(log: &Path, method: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == method && m.get("id").is_some())
        .count()
}

/// `POST /reload` to the daemon: its status and body.
async fn reload(d: &Daemon) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{}/reload", d.origin()))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn profile_url(d: &Daemon, name: &str) -> String {
    format!("{}/mcp/{name}", d.origin())
}

async fn tool_names(c: &mut HttpClient) -> Vec<String> {
    let r = c.call("tools/list", json!({})).await;
    let mut names: Vec<String> = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn two_profiles_share_one_subscription_and_each_sees_its_own_tools() {
    let logs = logs("share");
    let d = Daemon::start(&config(
        &logs,
        "tools_allow = [\"a__*\", \"c__echo\"]\n",
        false,
    ))
    .await;
    let mut p1 = HttpClient::connect(&profile_url(&d, "p1"), json!({})).await;
    let mut p2 = HttpClient::connect(&profile_url(&d, "p2"), json!({})).await;
    let mut all = HttpClient::connect(&d.url, json!({})).await;

    // Each profile lists its own servers' tools, filtered and renamed.
    let t1 = tool_names(&mut p1).await;
    let t2 = tool_names(&mut p2).await;
    assert!(
        t1.contains(&"a__say".into()) && t1.contains(&"b__echo".into()),
        "{t1:?}"
    );
    assert!(!t1.iter().any(|n| n.starts_with("c__")), "{t1:?}");
    assert!(
        !t1.contains(&"a__echo".into()) && !t1.contains(&"a__hang".into()),
        "{t1:?}"
    );
    assert!(
        t2.contains(&"a__say".into()) && t2.contains(&"c__echo".into()),
        "{t2:?}"
    );
    assert!(
        t2.iter().all(|n| n.starts_with("a__") || n == "c__echo"),
        "p2's own filter: {t2:?}"
    );
    let every = tool_names(&mut all).await;
    assert!(every.contains(&"b__echo".into()) && every.contains(&"c__stats".into()));

    // A hidden tool is an unknown one: the same error as a name nobody has.
    let hidden = p2
        .call("tools/call", json!({"name": "c__stats", "arguments": {}}))
        .await;
    let nobody = p2
        .call("tools/call", json!({"name": "zz__none", "arguments": {}}))
        .await;
    assert_eq!(hidden["error"]["code"], nobody["error"]["code"], "{hidden}");
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    assert_eq!(hidden["error"]["message"], "unknown tool: c__stats");
    let other_profile = p1
        .call("tools/call", json!({"name": "c__echo", "arguments": {}}))
        .await;
    assert_eq!(
        other_profile["error"]["message"], "unknown tool: c__echo",
        "{other_profile}"
    );
    let denied = p1
        .call("tools/call", json!({"name": "a__hang", "arguments": {}}))
        .await;
    assert_eq!(
        denied["error"]["message"], "unknown tool: a__hang",
        "{denied}"
    );

    // A rename works both ways: the new name reaches the original, the old one is gone.
    let said = p1.tool("a__say", json!({"text": "hi"})).await;
    assert!(said.to_string().contains("hi"), "{said}");
    let old = p1
        .call(
            "tools/call",
            json!({"name": "a__echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(old["error"]["message"], "unknown tool: a__echo", "{old}");

    // A URI of a held through both profiles: one upstream subscribe; the update reaches
    // the holders of both.
    let held = format!("a+{URI}");
    for c in [&mut p1, &mut p2] {
        let r = c.call("resources/subscribe", json!({"uri": held})).await;
        assert!(r.get("result").is_some(), "{r}");
    }
    assert_eq!(received(&logs[0], "resources/subscribe"), 1);
    // c's URIs are not p1's.
    let r = p1
        .call("resources/subscribe", json!({"uri": format!("c+{URI}")}))
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    all.tool("a__emit_update", json!({"uri": URI})).await;
    for c in [&mut p1, &mut p2] {
        let ev = c.next_event().await;
        assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
        assert_eq!(ev["params"]["uri"], held);
    }
    // A session belongs to its endpoint: p1's session id is unknown on p2's path.
    let resp = reqwest::Client::new()
        .post(profile_url(&d, "p2"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &p1.session)
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    // The operator's view counts clients per profile.
    let get = |path: &str| {
        let url = format!("{}{path}", d.origin());
        async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
    };
    let metrics = get("/metrics").await;
    for (profile, n) in [("p1", 1), ("p2", 1), ("", 1)] {
        let line = format!("mcpmux_profile_clients{{profile=\"{profile}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    let status: Value = serde_json::from_str(&get("/status").await).unwrap();
    assert_eq!(
        status["profiles"],
        json!([{"profile": null, "clients": 1}, {"profile": "p1", "clients": 1},
               {"profile": "p2", "clients": 1}]),
        "{status}"
    );
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}

#[tokio::test]
async fn a_profile_token_opens_that_profile_only() {
    let logs = logs("token");
    let d = Daemon::start_with_env(
        &config(&logs, "", true),
        &[("P1_TOKEN", "one-token"), ("P2_TOKEN", "two-token")],
    )
    .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    let post = |url: String, token: &'static str| {
        let body = init.to_string();
        async move {
            reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("authorization", format!("Bearer {token}"))
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(post(profile_url(&d, "p1"), "one-token").await, 200);
    assert_eq!(post(profile_url(&d, "p2"), "one-token").await, 401);
    assert_eq!(post(profile_url(&d, "p2"), "two-token").await, 200);
    assert_eq!(post(profile_url(&d, "p1"), "two-token").await, 401);
    // The default endpoint has no token here; a profile's does not matter to it.
    assert_eq!(post(d.url.clone(), "two-token").await, 200);
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}

/// A 2026-07-28 listen on `url` for tool-list changes and `uri`'s updates.
async fn listen(url: &str, uri: &str) -> common::modern::EventStream {
    let body = request(
        json!("l"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": [uri]}}),
    );
    let mut s = ModernClient::new(url).open_stream(&body).await;
    let ack = s.next().await.expect("an acknowledgement");
    assert!(ack.get("error").is_none(), "{ack}");
    s
}

#[tokio::test]
async fn a_reload_of_one_profiles_filter_is_announced_to_its_clients_only() {
    let logs = logs("reload");
    let path = temp_config(&config(&logs, "", false));
    let d = Daemon::start_at(&path).await;
    let mut p1 = HttpClient::connect(&profile_url(&d, "p1"), json!({})).await;
    let mut p2 = HttpClient::connect(&profile_url(&d, "p2"), json!({})).await;
    let mut l1 = listen(&profile_url(&d, "p1"), &format!("a+{URI}")).await;
    let mut l2 = listen(&profile_url(&d, "p2"), &format!("a+{URI}")).await;
    let r = p1
        .call("resources/subscribe", json!({"uri": format!("a+{URI}")}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert!(tool_names(&mut p2).await.contains(&"c__stats".into()));

    // p2 loses c's tools but c__echo; p1 is untouched.
    std::fs::write(
        &path,
        config(&logs, "tools_allow = [\"a__*\", \"c__echo\"]\n", false),
    )
    .unwrap();
    let (status, body) = reload(&d).await;
    assert_eq!(status, 200, "{body}");

    // p2's clients hear it: the legacy session and the listen.
    let ev = p2.next_event().await;
    assert_eq!(ev["method"], "notifications/tools/list_changed", "{ev}");
    let ev = l2.next().await.expect("p2's listen stays open");
    assert_eq!(ev["method"], "notifications/tools/list_changed", "{ev}");
    assert!(!tool_names(&mut p2).await.contains(&"c__stats".into()));

    // p1's clients do not: the next thing each gets is the update emitted after the
    // reload was applied.
    p1.tool("a__emit_update", json!({"uri": URI})).await;
    let before = p1.events_until("notifications/resources/updated").await;
    assert!(before.is_empty(), "p1's session heard: {before:?}");
    let ev = l1.next().await.expect("p1's listen stays open");
    assert_eq!(
        ev["method"], "notifications/resources/updated",
        "p1's listen heard: {ev}"
    );
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}

#[tokio::test]
async fn stdio_serves_one_profile_and_names_an_unknown_one() {
    let logs = logs("stdio");
    let path = temp_config(&config(&logs, "", false));
    let path = path.to_str().unwrap();
    let mut c = common::LineClient::spawn(
        common::mcpmux_bin(),
        &["stdio", "--config", path, "--profile", "p2"],
    );
    c.initialize(json!({})).await;
    let r = c.call("tools/list", json!({})).await;
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"c__echo") && names.contains(&"a__say"),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.starts_with("b__")), "{names:?}");
    drop(c);

    let out = std::process::Command::new(common::mcpmux_bin())
        .args(["stdio", "--config", path, "--profile", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--profile nope") && stderr.contains("p1, p2"),
        "{stderr}"
    );
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}

#[tokio::test]
async fn a_reload_of_a_servers_filter_keeps_its_session_and_tells_its_views() {
    let logs = logs("retune");
    let path = temp_config(&config(&logs, "", false));
    let d = Daemon::start_at(&path).await;
    let mut p1 = HttpClient::connect(&profile_url(&d, "p1"), json!({})).await;
    let mut p2 = HttpClient::connect(&profile_url(&d, "p2"), json!({})).await;
    let r = p2
        .call("resources/subscribe", json!({"uri": format!("c+{URI}")}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert!(tool_names(&mut p1).await.contains(&"b__stats".into()));

    // b hides `stats`: b is in p1 only.
    let text = config(&logs, "", false).replace(
        &server("b", &logs[1], ""),
        &server("b", &logs[1], "tools_deny = [\"stats\"]\n"),
    );
    std::fs::write(&path, text).unwrap();
    let (_, body) = reload(&d).await;
    assert!(body.contains("its session stays"), "{body}");
    let ev = p1.next_event().await;
    assert_eq!(ev["method"], "notifications/tools/list_changed", "{ev}");
    assert!(!tool_names(&mut p1).await.contains(&"b__stats".into()));
    assert_eq!(received(&logs[1], "initialize"), 1, "b was not restarted");
    p2.tool("c__emit_update", json!({"uri": URI})).await;
    let before = p2.events_until("notifications/resources/updated").await;
    assert!(before.is_empty(), "p2 does not show b: {before:?}");
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}

/// `[listen]` changes apply after a restart: a reload that moves `listen.path` and gives
/// the running one to a profile is refused (the listener would keep serving every
/// server there, not the profile's view).
#[tokio::test]
async fn a_reload_giving_the_running_listen_path_to_a_profile_is_refused() {
    let logs = logs("listen-path");
    let path = temp_config(&config(&logs, "", false));
    let d = Daemon::start_at(&path).await;
    let moved = config(&logs, "", false)
        .replacen(
            "[listen]\nhttp = \"127.0.0.1:0\"\n",
            "[listen]\nhttp = \"127.0.0.1:0\"\npath = \"/api\"\n",
            1,
        )
        .replacen(
            "[profiles.p1]\nservers = [\"a\", \"b\"]\n",
            "[profiles.p1]\nservers = [\"a\", \"b\"]\npath = \"/mcp\"\n",
            1,
        );
    assert!(moved.contains("path = \"/api\"") && moved.contains("path = \"/mcp\""));
    std::fs::write(&path, moved).unwrap();
    let (status, body) = reload(&d).await;
    assert_ne!(status, 200, "{body}");
    assert!(
        body.contains("profiles.p1.path") && body.contains("restart"),
        "{body}"
    );
}

/// A reload that hides a held URI from its holder (the server's `resources_deny` now
/// covers it) releases the hold: the last holder gone, the upstream is unsubscribed.
#[tokio::test]
async fn a_reload_that_hides_a_held_uri_releases_it() {
    let logs = logs("hide");
    let path = temp_config(&config(&logs, "", false));
    let d = Daemon::start_at(&path).await;
    let mut p2 = HttpClient::connect(&profile_url(&d, "p2"), json!({})).await;
    let r = p2
        .call("resources/subscribe", json!({"uri": format!("c+{URI}")}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let text = config(&logs, "", false).replace(
        &server("c", &logs[2], ""),
        &server("c", &logs[2], "resources_deny = [\"test://static/*\"]\n"),
    );
    std::fs::write(&path, text).unwrap();
    let (status, body) = reload(&d).await;
    assert_eq!(status, 200, "{body}");
    let deadline = std::time::Instant::now() + common::EVENT_TIMEOUT;
    while received(&logs[2], "resources/unsubscribe") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "c was not unsubscribed after the reload hid the URI"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for l in &logs {
        let _ = std::fs::remove_file(l);
    }
}
