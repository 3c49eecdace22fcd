//! Hot reload against the real daemon: servers added, removed and kept across an edit
//! of the config file and SIGHUP (or `mcpmux reload`), with a client holding a
//! subscription on the kept server the whole time; an invalid edit is refused and
//! changes nothing. What each upstream saw is read from its `stats` and its
//! `SCRIPTED_LOG`.

use crate::common;

use std::path::Path;
use std::time::Instant;

use common::http::{Daemon, HttpClient};
use common::{mcpmux_bin, scripted_upstream, temp_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const URI: &str = "test://static/1";

fn server(name: &str, prefix: &str, log: &Path) -> String {
    format!(
        "[servers.{name}]\ncommand = {cmd:?}\nprefix = \"{prefix}\"\nenv = {{ SCRIPTED_NAME = \"{name}\", SCRIPTED_LOG = {log:?} }}\n",
        cmd = scripted_upstream(),
    )
}

fn log_path(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("mcpmux-reload-{}-{tag}.log", std::process::id()));
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

fn count(msgs: &[Value], method: &str) -> usize {
    msgs.iter().filter(|m| m["method"] == method).count()
}

async fn tool_names(c: &mut HttpClient) -> Vec<String> {
    let r = c.call("tools/list", json!({})).await;
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Pids of running processes whose environment has `entry` (`KEY=value`).
#[cfg(target_os = "linux")]
fn processes_with_env(entry: &str) -> Vec<u32> {
    let mut pids = vec![];
    for dir in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = dir.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(dir.path().join("environ")) else {
            continue;
        };
        let running =
            std::fs::read_to_string(dir.path().join("stat")).is_ok_and(|s| !s.contains(") Z "));
        if running && env.split(|b| *b == 0).any(|e| e == entry.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

fn hup(d: &Daemon) {
    let pid = d.child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
}

async fn status(d: &Daemon) -> Value {
    reqwest::get(format!("{}/status", d.origin()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn sighup_adds_and_removes_servers_without_touching_the_others() {
    let (log_a, log_b, log_c) = (log_path("a"), log_path("b"), log_path("c"));
    let listen = "[listen]\nhttp = \"127.0.0.1:0\"\n";
    let path = temp_config(&format!(
        "{listen}{}{}",
        server("alpha", "a", &log_a),
        server("gamma", "c", &log_c)
    ));
    let d = Daemon::start_at(&path).await;
    let mut client = HttpClient::connect(&d.url, json!({})).await;
    let held = format!("a+{URI}");
    let r = client
        .call("resources/subscribe", json!({"uri": held}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let gamma_uri = format!("c+{URI}");
    let mut gamma_holder = HttpClient::connect(&d.url, json!({})).await;
    let r = gamma_holder
        .call("resources/subscribe", json!({"uri": gamma_uri}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    assert!(tool_names(&mut client)
        .await
        .contains(&"c__echo".to_owned()));

    // Edit: gamma out, beta in. SIGHUP.
    std::fs::write(
        &path,
        format!(
            "{listen}{}{}",
            server("alpha", "a", &log_a),
            server("beta", "b", &log_b)
        ),
    )
    .unwrap();
    hup(&d);
    let start = Instant::now();
    let tools = loop {
        let ev = client.next_event().await;
        if ev["method"] == "notifications/tools/list_changed" {
            let tools = tool_names(&mut client).await;
            if tools.contains(&"b__echo".to_owned()) {
                break tools;
            }
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "beta's tools never came");
    };
    assert!(!tools.contains(&"c__echo".to_owned()), "{tools:?}");

    // gamma: its held URI was unsubscribed, then its process ended (stdin closed).
    let start = Instant::now();
    loop {
        let st = status(&d).await;
        let names: Vec<&str> = st["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["name"].as_str().unwrap())
            .collect();
        if names == ["alpha", "beta"] && st["upstreams"][1]["state"] == "up" {
            break;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "{st}");
    }
    // Its record is complete only once it has exited: wait (bounded) for that, then
    // read all of it.
    #[cfg(target_os = "linux")]
    {
        let marker = format!("SCRIPTED_LOG={}", log_c.display());
        let start = Instant::now();
        while !processes_with_env(&marker).is_empty() {
            assert!(
                start.elapsed() < EVENT_TIMEOUT,
                "gamma's process is still running"
            );
            tokio::task::yield_now().await;
        }
        let alpha_marker = format!("SCRIPTED_LOG={}", log_a.display());
        assert_eq!(
            processes_with_env(&alpha_marker).len(),
            1,
            "alpha still runs"
        );
    }
    // Elsewhere there is no portable way to see the process go: wait for the record.
    #[cfg(not(target_os = "linux"))]
    {
        let start = Instant::now();
        while count(&received(&log_c), "resources/unsubscribe") == 0 {
            assert!(start.elapsed() < EVENT_TIMEOUT, "gamma got no unsubscribe");
            tokio::task::yield_now().await;
        }
    }
    let gamma = received(&log_c);
    assert_eq!(count(&gamma, "resources/unsubscribe"), 1, "{gamma:?}");
    assert_eq!(
        gamma.last().map(|m| &m["method"]),
        Some(&json!("resources/unsubscribe")),
        "the unsubscribe is the last thing gamma got: {gamma:?}"
    );
    let r = gamma_holder
        .call("resources/read", json!({"uri": gamma_uri}))
        .await;
    assert!(r["error"].is_object(), "gamma is gone: {r}");

    // alpha: one initialize, one subscribe, no unsubscribe; the client still gets its
    // updates without having done anything.
    let alpha = received(&log_a);
    assert_eq!(count(&alpha, "initialize"), 1, "{alpha:?}");
    assert_eq!(count(&alpha, "resources/subscribe"), 1);
    assert_eq!(count(&alpha, "resources/unsubscribe"), 0);
    let mut other = HttpClient::connect(&d.url, json!({})).await;
    other.tool("a__emit_update", json!({"uri": URI})).await;
    let start = Instant::now();
    loop {
        let ev = client.next_event().await;
        if ev["method"] == "notifications/resources/updated" {
            assert_eq!(ev["params"]["uri"], held);
            break;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT);
    }

    // An invalid edit is refused (same error as `check`) and nothing changes.
    std::fs::write(
        &path,
        format!("{listen}[servers.broken]\nurl = \"ftp://x\"\n"),
    )
    .unwrap();
    let out = tokio::process::Command::new(mcpmux_bin())
        .args(["reload", "--url", &d.url])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let check = std::process::Command::new(mcpmux_bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let check_err = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success());
    let reason = check_err.trim().trim_start_matches("mcpmux: ");
    assert!(err.contains(reason), "reload: {err}\ncheck: {check_err}");
    let st = status(&d).await;
    assert_eq!(st["upstreams"].as_array().unwrap().len(), 2, "{st}");
    assert_eq!(count(&received(&log_a), "initialize"), 1);

    // `mcpmux reload` with the valid file again: nothing to change.
    std::fs::write(
        &path,
        format!(
            "{listen}{}{}",
            server("alpha", "a", &log_a),
            server("beta", "b", &log_b)
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(mcpmux_bin())
        .args(["reload", "--url", &d.url])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no change");
}
