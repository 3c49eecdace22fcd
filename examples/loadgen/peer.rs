//! Scenario 6: `peer`, the npm `mcp-proxy` (punkpeye) fronting the same scripted
//! upstream over stdio, reached over Streamable HTTP like mcpmux. It is not installed
//! by the project: pass the path of its `dist/bin/mcp-proxy.mjs` (see BENCHMARKS.md).
//! Started on a port picked by binding `127.0.0.1:0` and releasing it (a small race,
//! retried never: a failure is reported).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::client::{http_pool, ns_since, MachineCpu, Parse, Session};
use super::scenarios::{drain_samples, upstream_count, wait_for, Bench, Burst, URI};
use super::stats::{pct, Pct};

/// A running `mcp-proxy`; killed on drop.
pub struct Peer {
    _child: Child,
    pub url: String,
}

impl Peer {
    /// Starts `node <script> --port P --host 127.0.0.1 --server stream -- <scripted>`
    /// and waits for its "starting server" line and an accepting port.
    ///
    /// # Errors
    /// Spawn failure or no readiness within 30 s.
    pub async fn start(script: &Path, scripted: &Path) -> Result<Peer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut child = Command::new("node")
            .arg(script)
            .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
            .args(["--server", "stream", "--"])
            .arg(scripted)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawn node mcp-proxy")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, lines.next_line())
                .await
                .context("mcp-proxy did not start")??
                .ok_or_else(|| anyhow!("mcp-proxy exited"))?;
            if line.contains("starting server") {
                break;
            }
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(Peer {
                    _child: child,
                    url: format!("http://127.0.0.1:{port}/mcp"),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        bail!("mcp-proxy is not accepting on port {port}")
    }
}

/// A storm against the peer: (confirmed, upstream subscribes, wall).
pub async fn peer_storm(
    script: &Path,
    scripted: &Path,
    n: usize,
) -> Result<(usize, u64, Duration)> {
    let peer = Peer::start(script, scripted).await?;
    let mut b = Bench::connect(&peer.url, n, Parse::Full).await?;
    let t = Instant::now();
    let confirmed = b.subscribe_all().await?;
    let wall = t.elapsed();
    let ups = upstream_count(&mut b.control, "resources/subscribe", URI).await?;
    b.stop().await;
    Ok((confirmed, ups, wall))
}

/// A burst of `k` updates to `n` subscribed sessions through the peer.
pub async fn peer_fanout(
    script: &Path,
    scripted: &Path,
    n: usize,
    k: u64,
    parse: Parse,
) -> Result<Burst> {
    let peer = Peer::start(script, scripted).await?;
    let mut b = Bench::connect(&peer.url, n, parse).await?;
    let confirmed = b.subscribe_all().await?;
    if confirmed != n {
        bail!("mcp-proxy confirmed {confirmed} of {n} subscribes");
    }
    let before = b.tally.delivered();
    let expected = n as u64 * k;
    let t = Instant::now();
    b.control
        .tool(
            "emit_updates",
            json!({"uri": URI, "count": k, "stamp": true}),
        )
        .await?;
    let got = wait_for(&b.tally, before + expected).await - before;
    let wall = t.elapsed();
    let mut lats: Vec<u64> = drain_samples(&b.receivers).iter().map(|s| s.1).collect();
    b.stop().await;
    Ok(Burst {
        n,
        k,
        expected,
        delivered: got,
        wall,
        lat: pct(&mut lats),
        server_cpu: Duration::ZERO,
        machine: MachineCpu::default(),
        reads: 0,
    })
}

/// Sequential echo round trips, interleaved: (via mcp-proxy, via mcpmux at `mcpmux_url`).
pub async fn peer_echo(
    script: &Path,
    scripted: &Path,
    mcpmux_url: &str,
    calls: usize,
    warmup: usize,
) -> Result<(Pct, Pct)> {
    let peer = Peer::start(script, scripted).await?;
    let http = http_pool()?;
    let mut p = Session::connect(&http, &peer.url).await?;
    let mut m = Session::connect(&http, mcpmux_url).await?;
    let (mut pl, mut ml) = (vec![], vec![]);
    for i in 0..warmup + calls {
        let t = Instant::now();
        p.tool("echo", json!({"text": "hi"})).await?;
        if i >= warmup {
            pl.push(ns_since(t));
        }
        let t = Instant::now();
        m.tool("echo", json!({"text": "hi"})).await?;
        if i >= warmup {
            ml.push(ns_since(t));
        }
    }
    Ok((pct(&mut pl), pct(&mut ml)))
}
