//! `lazy = true`: the upstream is not started at boot, only when the first client
//! initializes, and that client's handshake waits for it.

mod common;

use common::http::{Daemon, HttpClient};
use common::*;
use serde_json::json;

#[tokio::test]
async fn a_lazy_upstream_starts_with_the_first_client() {
    let log = std::env::temp_dir().join(format!("mcpmux-lazy-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let server_extra = format!(
        "lazy = true\nenv = {{ SCRIPTED_LOG = {:?} }}\n",
        log.to_str().unwrap()
    );
    let d = Daemon::start(&scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\n",
        "",
        &server_extra,
    ))
    .await;
    // mcpmux is listening; a lazy upstream has not been started, so it has logged nothing.
    assert!(!log.exists(), "the lazy upstream started at boot");
    let mut c = HttpClient::connect(&d.url, json!({})).await;
    // The handshake waited for it (subscribe below works only if mcpmux declared the
    // upstream's resources.subscribe in that answer).
    let text = std::fs::read_to_string(&log).expect("the upstream started for the first client");
    assert!(text.contains("\"initialize\""), "{text}");
    assert_eq!(
        c.tool("echo", json!({"text": "woke"})).await["content"][0]["text"],
        "woke"
    );
    assert_eq!(
        c.call("resources/subscribe", json!({"uri": "test://static/1"}))
            .await["result"],
        json!({})
    );
    let _ = std::fs::remove_file(&log);
}
