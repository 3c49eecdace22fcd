//! A server that answers both eras and offers less on its 2026-07-28 face (the scripted
//! upstream in HTTP mode, `SCRIPTED_ERA=dual` with `SCRIPTED_DISCOVER_NO_SUBSCRIBE=1`:
//! `server/discover` declares no `resources.subscribe`, `initialize` does), behind
//! `mcpmux serve` with `protocol = "auto"`: mcpmux keeps a session per face, a legacy
//! client and a 2026-07-28 client each get subscriptions, the server sees ONE
//! `resources/subscribe` for a URI both hold (on its `initialize` face, and no listen
//! covering it), and one update reaches both. `/status` and `check --probe` say "dual".
//!
//! The suite's own dual-era fixture, whose faces differ the same way, is run through
//! mcpmux by `tests/conformance.rs`. Waits are bounded reads; no sleeps.

use crate::common;

use common::fleet::HttpUpstream;
use common::http::{Daemon, HttpClient};
use common::modern::ModernClient;
use common::{mcpmux_bin, temp_config};
use serde_json::{json, Value};

const URI: &str = "test://static/3";

fn config(url: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.up]\nurl = {}\n",
        serde_json::to_string(url).unwrap()
    )
}

#[tokio::test]
async fn both_eras_get_subscriptions_from_one_upstream_subscription() {
    let up = HttpUpstream::start(&[
        ("SCRIPTED_ERA", "dual"),
        ("SCRIPTED_DISCOVER_NO_SUBSCRIBE", "1"),
    ])
    .await;
    let d = Daemon::start(&config(&up.url)).await;

    // Both eras are offered subscriptions (the union of the faces).
    let mut legacy = HttpClient::connect(&d.url, json!({})).await;
    let modern = ModernClient::new(&d.url);
    let (_, discover) = modern.call(1, "server/discover", json!({})).await;
    assert_eq!(
        discover["result"]["capabilities"]["resources"]["subscribe"], true,
        "{discover}"
    );
    let r = legacy
        .call("resources/subscribe", json!({"uri": URI}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let (mut listen, ack) = modern.listen("l1", &[URI]).await;
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([URI]),
        "{ack}"
    );

    // One upstream subscription, on the initialize face; no listen holds the URI.
    let stats = legacy.tool("stats", json!({})).await;
    assert_eq!(stats["counts"]["resources/subscribe"], 1, "{stats}");
    assert_eq!(stats["subscribers"][URI], 1, "{stats}");
    let open = stats["listens"]["open"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        open.iter()
            .all(|l| !l["uris"].as_array().unwrap().contains(&json!(URI))),
        "{stats}"
    );

    // One update reaches both.
    let r = legacy.tool("emit_update", json!({"uri": URI})).await;
    assert_eq!(r["emitted"], 1, "{r}");
    let ev = legacy.next_event().await;
    assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
    assert_eq!(ev["params"]["uri"], URI, "{ev}");
    let ev = listen.next().await.expect("the update on the listen");
    assert_eq!(ev["method"], "notifications/resources/updated", "{ev}");
    assert_eq!(ev["params"]["uri"], URI, "{ev}");
    assert_eq!(
        ev["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l1",
        "{ev}"
    );

    // Each era's calls are served.
    let r = legacy.tool("echo", json!({"text": "l"})).await;
    assert!(r.to_string().contains('l'), "{r}");
    let (status, r) = modern
        .call(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "from modern"}}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert!(r.to_string().contains("from modern"), "{r}");

    // The operator sees the two faces as one upstream of era "dual".
    let base = d.url.trim_end_matches("/mcp").to_owned();
    let status: Value = reqwest::get(format!("{base}/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["upstreams"][0]["era"], "dual", "{status}");
}

#[tokio::test]
async fn check_probe_prints_both_faces_and_the_choice() {
    let up = HttpUpstream::start(&[
        ("SCRIPTED_ERA", "dual"),
        ("SCRIPTED_DISCOVER_NO_SUBSCRIBE", "1"),
    ])
    .await;
    let path = temp_config(&config(&up.url));
    let out = tokio::time::timeout(
        common::EVENT_TIMEOUT * 3,
        tokio::process::Command::new(mcpmux_bin())
            .args(["check", "--probe", "--config"])
            .arg(&path)
            .output(),
    )
    .await
    .expect("check --probe finishes")
    .expect("run mcpmux");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &Value| v["server"] == "up")
        })
        .unwrap_or_else(|| panic!("no report for up: {stdout}"));
    assert_eq!(report["era"], "dual", "{report}");
    assert_eq!(
        report["faces"]["legacy"]["capabilities"]["resources"]["subscribe"], true,
        "{report}"
    );
    assert!(
        report["faces"]["modern"]["capabilities"]["resources"]
            .get("subscribe")
            .is_none(),
        "{report}"
    );
    assert!(
        report["choice"]
            .as_str()
            .unwrap()
            .contains("one session each"),
        "{report}"
    );
}
