//! The operator's view against the real daemon and the scripted upstream: `/metrics`
//! parsed by a Prometheus text parser and checked against the upstream's own counts,
//! `/status`, the guard in front of both, and `mcpmux status` against a daemon and
//! against nothing.

use crate::common;

use common::http::{Daemon, HttpClient};
use common::{mcpmux_bin, scripted_config, temp_config, EVENT_TIMEOUT};
use serde_json::{json, Value};

const LISTEN: &str = "[listen]\nhttp = \"127.0.0.1:0\"\n";
const URI: &str = "test://static/1";

fn base(d: &Daemon) -> String {
    d.url.trim_end_matches("/mcp").to_owned()
}

async fn scrape(d: &Daemon) -> prometheus_parse::Scrape {
    let resp = reqwest::get(format!("{}/metrics", base(d))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let text = resp.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).expect("valid exposition")
}

/// The value of `name` (an exposed sample name) whose labels include `labels`.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let sample = s
        .samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"));
    match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name} is not a number: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_match_the_upstreams_own_counts() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    let mut clients = vec![];
    for _ in 0..10 {
        let mut c = HttpClient::connect(&d.url, json!({})).await;
        let r = c.call("resources/subscribe", json!({"uri": URI})).await;
        assert_eq!(r["result"], json!({}), "{r}");
        clients.push(c);
    }
    for round in 0..5 {
        let reads = clients
            .iter_mut()
            .map(|c| c.call("resources/read", json!({"uri": URI})));
        for r in futures_util::future::join_all(reads).await {
            assert!(r["result"].is_object(), "round {round}: {r}");
        }
    }
    let mut control = HttpClient::connect(&d.url, json!({})).await;
    control.tool("emit_update", json!({"uri": URI})).await;
    for c in &mut clients {
        assert_eq!(c.next_event().await["params"]["uri"], URI);
    }
    let stats = control.tool("stats", json!({})).await;
    let upstream_subscribes = stats["counts"]["resources/subscribe"].as_u64().unwrap();
    let upstream_reads = stats["by_uri"]["resources/read"][URI].as_u64().unwrap();
    assert_eq!(upstream_subscribes, 1, "{stats}");

    let m = scrape(&d).await;
    let up = [("upstream", "scripted")];
    assert_eq!(value(&m, "mcpmux_upstream_up", &up), 1.0);
    assert_eq!(value(&m, "mcpmux_upstream_era", &[("era", "legacy")]), 1.0);
    assert_eq!(
        value(&m, "mcpmux_upstream_subscribes_total", &[]),
        upstream_subscribes as f64
    );
    assert_eq!(value(&m, "mcpmux_client_subscribes_total", &[]), 10.0);
    assert_eq!(
        value(&m, "mcpmux_upstream_subscribes_saved_total", &[]),
        9.0
    );
    assert_eq!(
        value(&m, "mcpmux_cache_misses_total", &[]),
        upstream_reads as f64,
        "every cache miss is one upstream read"
    );
    assert_eq!(
        value(&m, "mcpmux_upstream_reads_saved_total", &[]),
        (50 - upstream_reads) as f64
    );
    assert_eq!(
        value(
            &m,
            "mcpmux_upstream_requests_total",
            &[("upstream", "scripted"), ("method", "resources/read")]
        ),
        upstream_reads as f64
    );
    assert_eq!(
        value(
            &m,
            "mcpmux_upstream_requests_total",
            &[("method", "resources/subscribe")]
        ),
        upstream_subscribes as f64
    );
    assert!(value(&m, "mcpmux_fanout_deliveries_total", &[]) >= 10.0);
    assert_eq!(value(&m, "mcpmux_subscriptions_uris", &[]), 1.0);
    assert_eq!(value(&m, "mcpmux_subscriptions_holders", &[]), 10.0);
    assert_eq!(
        value(
            &m,
            "mcpmux_clients",
            &[("transport", "http"), ("era", "legacy")]
        ),
        11.0
    );
    let hist = m
        .samples
        .iter()
        .find(|x| x.metric == "mcpmux_upstream_request_duration_seconds")
        .expect("the latency histogram");
    assert!(matches!(&hist.value, prometheus_parse::Value::Histogram(b) if !b.is_empty()));

    // /status says the same.
    let s: Value = reqwest::get(format!("{}/status", base(&d)))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s["upstreams"][0]["state"], "up", "{s}");
    assert_eq!(s["subscriptions"]["upstreamSubscribesSaved"], 9);
    assert_eq!(s["topUris"][0], json!({"uri": URI, "holders": 10}));
    assert_eq!(s["cache"]["upstreamReadsSaved"], 50 - upstream_reads);
}

#[tokio::test]
async fn the_views_are_behind_the_same_guard() {
    let toml = scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\nauth_token_env = \"MCPMUX_TEST_TOKEN\"\n",
        "",
        "",
    );
    let d = Daemon::start_with_env(&toml, &[("MCPMUX_TEST_TOKEN", "sesame")]).await;
    let http = reqwest::Client::new();
    for path in ["/metrics", "/status", "/"] {
        let url = format!("{}{path}", base(&d));
        assert_eq!(http.get(&url).send().await.unwrap().status(), 401, "{path}");
        let foreign = http
            .get(&url)
            .bearer_auth("sesame")
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403, "{path}");
        let ok = http.get(&url).bearer_auth("sesame").send().await.unwrap();
        assert_eq!(ok.status(), 200, "{path}");
    }
    let page = http
        .get(format!("{}/", base(&d)))
        .bearer_auth("sesame")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("<title>mcpmux status</title>"));
}

#[tokio::test]
async fn mcpmux_status_against_a_daemon_and_against_nothing() {
    let d = Daemon::start(&scripted_config(LISTEN, "", "")).await;
    // The daemon listens before its upstream has finished its handshake; while the
    // upstream is still `starting` the command says so and exits non-zero. Wait for
    // the upstream to come up (bounded), then the command must succeed.
    let start = std::time::Instant::now();
    loop {
        let out = tokio::time::timeout(
            EVENT_TIMEOUT,
            tokio::process::Command::new(mcpmux_bin())
                .args(["status", "--url", &d.url])
                .output(),
        )
        .await
        .unwrap()
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("starting") {
            assert!(!out.status.success(), "{text}");
            assert!(start.elapsed() < EVENT_TIMEOUT, "never up: {text}");
            continue;
        }
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("scripted") && text.contains("up"), "{text}");
        break;
    }

    // A port nobody listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let out = tokio::process::Command::new(mcpmux_bin())
        .args(["status", "--url", &format!("http://127.0.0.1:{port}")])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not running"), "{err}");

    // A config named but not there is an error, not a quiet fall-back to the default
    // address.
    let out = tokio::process::Command::new(mcpmux_bin())
        .args(["status", "--config", "/nonexistent/mcpmux.toml"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/mcpmux.toml"), "{err}");

    // A daemon whose upstream is down: non-zero, and the table says why.
    let cfg = format!(
        "{LISTEN}[restart]\nmax_failures = 1\n[servers.broken]\ncommand = {:?}\nenv = {{ SCRIPTED_CRASH_ON_START = \"1\" }}\n",
        common::scripted_upstream()
    );
    let d = Daemon::start(&cfg).await;
    let path = temp_config(&cfg);
    let start = std::time::Instant::now();
    loop {
        let out = tokio::process::Command::new(mcpmux_bin())
            .args(["status", "--url", &d.url, "--config"])
            .arg(&path)
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("down") {
            assert!(!out.status.success(), "{text}");
            break;
        }
        assert!(start.elapsed() < EVENT_TIMEOUT, "never down: {text}");
    }
}

/// The token-guarded daemon of the tests below: `auth_token_env` names
/// `MCPMUX_TEST_TOKEN`, which holds `sesame`.
async fn daemon_with_token() -> Daemon {
    let toml = scripted_config(
        "[listen]\nhttp = \"127.0.0.1:0\"\nauth_token_env = \"MCPMUX_TEST_TOKEN\"\n",
        "",
        "",
    );
    Daemon::start_with_env(&toml, &[("MCPMUX_TEST_TOKEN", "sesame")]).await
}

#[tokio::test]
async fn reload_and_the_event_stream_are_behind_the_same_guard() {
    let d = daemon_with_token().await;
    let http = reqwest::Client::new();
    let events = format!("{}/status/events", base(&d));
    let reload = format!("{}/reload", base(&d));
    let requests = || {
        [
            ("/status/events", http.get(&events)),
            ("/reload", http.post(&reload)),
        ]
    };
    for (path, req) in requests() {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without a token");
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{path}");
    }
    for (path, req) in requests() {
        let r = req.bearer_auth("wrong").send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} with a wrong token");
    }
    for (path, req) in requests() {
        let r = req
            .bearer_auth("sesame")
            .header("origin", "http://evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path} from a foreign Origin");
    }
    for (path, req) in requests() {
        let r = req.bearer_auth("sesame").send().await.unwrap();
        assert_eq!(r.status(), 200, "{path} with the token");
    }
}

/// An empty directory, so the commands below find no `./mcpmux.toml`.
fn empty_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpmux-operator-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `mcpmux ARGS` with no config and no token in its environment but `env`.
async fn mcpmux_cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let out = tokio::process::Command::new(mcpmux_bin())
        .args(args)
        .current_dir(empty_dir())
        .env_remove("MCPMUX_CONFIG")
        .env_remove("MCPMUX_TOKEN")
        .envs(env.iter().copied())
        .output();
    tokio::time::timeout(EVENT_TIMEOUT, out)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn status_and_reload_take_the_token_from_mcpmux_token_or_token_env() {
    let d = daemon_with_token().await;
    for cmd in ["status", "reload"] {
        // No token: refused, and the message says how to pass one.
        let out = mcpmux_cli(&[cmd, "--url", &d.url], &[]).await;
        assert!(!out.status.success(), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("needs a bearer token")
                && err.contains("MCPMUX_TOKEN")
                && err.contains("--token-env"),
            "{cmd}: {err}"
        );
        // A wrong one: refused as such.
        let out = mcpmux_cli(&[cmd, "--url", &d.url], &[("MCPMUX_TOKEN", "wrong")]).await;
        assert!(!out.status.success(), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refused the bearer token"), "{cmd}: {err}");
        // --token-env naming an unset variable: said so before asking.
        let out = mcpmux_cli(
            &[cmd, "--url", &d.url, "--token-env", "MCPMUX_TEST_UNSET"],
            &[],
        )
        .await;
        assert!(!out.status.success(), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("MCPMUX_TEST_UNSET"), "{cmd}: {err}");
    }

    // With the token, from $MCPMUX_TOKEN or from the variable --token-env names.
    let ways: [(&[&str], (&str, &str)); 2] = [
        (&[], ("MCPMUX_TOKEN", "sesame")),
        (&["--token-env", "MY_TOKEN"], ("MY_TOKEN", "sesame")),
    ];
    for (extra, env) in ways {
        let mut args = vec!["reload", "--url", &d.url];
        args.extend_from_slice(extra);
        let out = mcpmux_cli(&args, &[env]).await;
        assert!(
            out.status.success(),
            "reload {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The upstream may still be starting (non-zero, "starting" in the table).
        let start = std::time::Instant::now();
        args[0] = "status";
        loop {
            let out = mcpmux_cli(&args, &[env]).await;
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("starting") && start.elapsed() < EVENT_TIMEOUT {
                continue;
            }
            assert!(
                out.status.success(),
                "status {extra:?}: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("scripted") && text.contains("up"), "{text}");
            break;
        }
    }
}
