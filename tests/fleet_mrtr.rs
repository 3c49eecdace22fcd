//! MRTR bridged by mcpmux across a fleet (docs/architecture.md, "Fleet", MRTR retries):
//! two `mcpmux serve` instances on a real `nats-server` in front of one scripted legacy
//! Streamable HTTP upstream. A 2026-07-28 client's `sample` call made at instance A is
//! answered `input_required`; its retry sent to instance B (as behind a load balancer)
//! gets the call's result, the server having been answered through A, which holds the
//! upstream request. After A restarts, a retry of a state it issued gets an error that
//! says the instance is gone, at B and at the restarted A alike.

use crate::common;
use crate::harness;

use std::time::Instant;

use common::fleet::{HttpUpstream, Nats};
use common::http::Daemon;
use common::modern::{request, ModernClient};
use common::EVENT_TIMEOUT;
use serde_json::{json, Value};

fn fleet_config(nats: &str, fleet: &str, upstream: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[fleet]\nnats = \"{nats}\"\nname = \"{fleet}\"\nlease_ms = 1500\n\n[servers.up]\nurl = \"{upstream}\"\n"
    )
}

/// Waits until instance `d` sees `n` live instances (so it has joined the fleet and
/// read the fleet's state key, which it does before its first view).
async fn joined(d: &Daemon, n: usize) {
    let base = d.url.trim_end_matches("/mcp");
    let start = Instant::now();
    loop {
        let s: Value = reqwest::get(format!("{base}/status"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if s["fleet"]["instances"].as_array().map(Vec::len) == Some(n) {
            return;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "fleet never formed: {s}");
        tokio::task::yield_now().await;
    }
}

fn sample_call(id: u64, extra: Value) -> Value {
    let mut params = json!({"name": "sample", "arguments": {"prompt": "hi"}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let mut body = request(json!(id), "tools/call", params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({"sampling": {}});
    body
}

async fn post(m: &ModernClient, body: &Value) -> Value {
    let resp = m.post_with(body, &[]).await;
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Round one at `m`: the requestState and the input key of the `input_required` answer.
async fn ask(m: &ModernClient) -> (String, String) {
    let r = post(m, &sample_call(1, json!({}))).await;
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let key = result["inputRequests"]
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .expect("one input request");
    (result["requestState"].as_str().unwrap().to_owned(), key)
}

fn retry(id: u64, state: &str, key: &str) -> Value {
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "sampled far away"}, "model": "m"});
    sample_call(
        id,
        json!({"inputResponses": {key: answer}, "requestState": state}),
    )
}

#[tokio::test]
async fn a_retry_at_another_instance_gets_the_result_and_after_a_restart_a_clear_error() {
    harness::ensure_peers();
    let nats = Nats::start().await;
    let up = HttpUpstream::start(&[]).await;
    let fleet = format!("m{}", std::process::id());
    let config = fleet_config(&nats.url(), &fleet, &up.url);
    let mut a = Daemon::start(&config).await;
    let b = Daemon::start(&config).await;
    joined(&a, 2).await;
    joined(&b, 2).await;

    // Asked at A, retried at B: the result, with the answer given at B.
    let (state, key) = ask(&ModernClient::new(&a.url)).await;
    let r = post(&ModernClient::new(&b.url), &retry(2, &state, &key)).await;
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(r["id"], 2, "{r}");
    assert!(r.to_string().contains("sampled far away"), "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");

    // The same state again (answered already): refused at the holder, via B.
    let r = post(&ModernClient::new(&b.url), &retry(3, &state, &key)).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // Asked at A; A restarts (a new instance id); the retry at B and at the new A
    // say the instance that held the request is gone.
    let (state, key) = ask(&ModernClient::new(&a.url)).await;
    let status = a.terminate().await;
    assert!(status.success(), "{status}");
    let a2 = Daemon::start(&config).await;
    joined(&a2, 2).await;
    joined(&b, 2).await;
    for d in [&b, &a2] {
        let r = post(&ModernClient::new(&d.url), &retry(4, &state, &key)).await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("is gone"), "{r}");
        assert!(msg.contains("without requestState"), "{r}");
    }
}
