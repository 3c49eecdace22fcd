//! Scenario 5: `memory`. mcpmux runs as a separate `mcpmux serve` child process so its
//! `/proc/<pid>/status` `VmRSS` holds only the proxy (the clients' sockets and buffers
//! live in this process). Each row starts a fresh daemon: RSS rarely shrinks after
//! frees, so rows must not share one.

use std::path::Path;
use std::sync::Arc;

use anyhow::{ensure, Result};
use futures_util::{StreamExt, TryStreamExt};
use serde_json::json;

use super::client::{http_pool, Parse, Receiver, Session, Tally};
use super::proxy::{config_toml, Daemon, Limits};
use super::scenarios::{CONNECT_CONCURRENCY, URI};

/// A fresh `mcpmux serve`, a control session that has reached the upstream once, and
/// the daemon's RSS then (the baseline).
async fn start(
    mcpmux: &Path,
    scripted: &Path,
    limits: Limits,
) -> Result<(Daemon, reqwest::Client, Session, u64)> {
    let daemon = Daemon::start(mcpmux, &config_toml(scripted, limits)).await?;
    let http = http_pool()?;
    let mut control = Session::connect(&http, &daemon.url).await?;
    control.tool("stats", json!({})).await?;
    let baseline = daemon.rss()?;
    Ok((daemon, http, control, baseline))
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct MemRow {
    pub sessions: usize,
    pub subscriptions: usize,
    /// RSS after start with the control session only.
    pub baseline: u64,
    /// RSS with `sessions` idle sessions (initialized, GET stream open).
    pub with_sessions: u64,
    /// RSS after each session also subscribed to `subscriptions / sessions` URIs.
    pub with_subscriptions: Option<u64>,
    /// Distinct URIs the upstream holds subscriptions for (from its `stats`).
    pub upstream_subscribed: usize,
    /// Time for one update of `URI` to reach every session (each holds it: subscribed
    /// after the RSS was read when the row subscribes to nothing else).
    pub one_update: std::time::Duration,
}

impl MemRow {
    pub fn per_session(&self) -> f64 {
        self.with_sessions.saturating_sub(self.baseline) as f64 / self.sessions.max(1) as f64
    }

    pub fn per_subscription(&self) -> Option<f64> {
        self.with_subscriptions
            .map(|s| s.saturating_sub(self.with_sessions) as f64 / self.subscriptions.max(1) as f64)
    }
}

/// `sessions` idle sessions, then (when `uris_per_session > 0`) each subscribes to
/// `test://static/1 ..= uris_per_session` (else to `URI` alone, after the RSS is read);
/// then one update of `URI` reaching them all.
///
/// # Errors
/// Spawn, connect or subscribe failures.
pub async fn memory(
    mcpmux: &Path,
    scripted: &Path,
    sessions: usize,
    uris_per_session: usize,
) -> Result<MemRow> {
    let limits = Limits {
        max_clients: sessions + 16,
        // One GET stream per session, plus the pool's POST connections.
        max_connections: 2 * sessions + 64,
        max_subscriptions_per_client: uris_per_session.max(1) + 16,
        ..Limits::default()
    };
    let (daemon, http, mut control, baseline) = start(mcpmux, scripted, limits).await?;

    let tally = Tally::new();
    let uri: Arc<str> = URI.into();
    let (http_ref, url) = (&http, daemon.url.as_str());
    let pairs: Vec<(Session, Receiver)> = futures_util::stream::iter(0..sessions)
        .map(|_| {
            let (uri, tally) = (uri.clone(), tally.clone());
            async move {
                let s = Session::connect(http_ref, url).await?;
                let r = s.open_stream(uri, tally, Parse::Light).await?;
                anyhow::Ok((s, r))
            }
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await?;
    let with_sessions = daemon.rss()?;

    let mut with_subscriptions = None;
    let (mut clients, _receivers): (Vec<Session>, Vec<Receiver>) = pairs.into_iter().unzip();
    if uris_per_session > 0 {
        futures_util::stream::iter(clients.iter_mut())
            .map(|c| async move {
                for i in 1..=uris_per_session {
                    let r = c
                        .call(
                            "resources/subscribe",
                            json!({"uri": format!("test://static/{i}")}),
                        )
                        .await?;
                    ensure!(r.get("result").is_some(), "subscribe failed: {r}");
                }
                Ok(())
            })
            .buffer_unordered(CONNECT_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        with_subscriptions = Some(daemon.rss()?);
    } else {
        futures_util::stream::iter(clients.iter_mut())
            .map(|c| async move {
                let r = c.call("resources/subscribe", json!({"uri": URI})).await?;
                ensure!(r.get("result").is_some(), "subscribe failed: {r}");
                Ok(())
            })
            .buffer_unordered(CONNECT_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
    }
    let one_update = one_update(&mut control, &tally, sessions).await?;
    let stats = control.tool("stats", json!({})).await?;
    let upstream_subscribed = stats["subscribed"].as_array().map_or(0, Vec::len);
    drop(clients);
    Ok(MemRow {
        sessions,
        subscriptions: sessions * uris_per_session,
        baseline,
        with_sessions,
        with_subscriptions,
        upstream_subscribed,
        one_update,
    })
}

/// Emits one update of `URI` and waits until all `holders` received it; how long that
/// took.
async fn one_update(
    control: &mut Session,
    tally: &Tally,
    holders: usize,
) -> Result<std::time::Duration> {
    let before = tally.delivered();
    tally.expect(before + holders as u64);
    let t = std::time::Instant::now();
    control.tool("emit_update", json!({"uri": URI})).await?;
    let got = tally.wait(std::time::Duration::from_secs(120)).await - before;
    let took = t.elapsed();
    ensure!(
        got == holders as u64,
        "the update reached {got} of {holders} holders"
    );
    Ok(took)
}

/// One measurement of idle 2026-07-28 listens.
#[derive(Debug, Clone)]
pub struct ListenRow {
    pub listens: usize,
    pub baseline: u64,
    pub with_listens: u64,
    /// Time for one update to reach every listen.
    pub one_update: std::time::Duration,
}

impl ListenRow {
    pub fn per_listen(&self) -> f64 {
        self.with_listens.saturating_sub(self.baseline) as f64 / self.listens.max(1) as f64
    }
}

/// `listens` idle `subscriptions/listen` streams on one URI (stateless: no session
/// each), then one update reaching them all.
///
/// # Errors
/// Spawn, connect or delivery failures.
pub async fn memory_listens(mcpmux: &Path, scripted: &Path, listens: usize) -> Result<ListenRow> {
    let limits = Limits {
        max_clients: listens + 16,
        max_connections: listens + 64,
        ..Limits::default()
    };
    let (daemon, http, mut control, baseline) = start(mcpmux, scripted, limits).await?;
    let tally = Tally::new();
    let uri: Arc<str> = URI.into();
    let (http_ref, url) = (&http, daemon.url.as_str());
    let receivers: Vec<Receiver> = futures_util::stream::iter(0..listens)
        .map(|_| {
            let (uri, tally) = (uri.clone(), tally.clone());
            super::client::open_listen(http_ref, url, uri, tally, Parse::Light)
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await?;
    // Every listen is a holder once acknowledged.
    let status = daemon.url.trim_end_matches("/mcp").to_owned() + "/status";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let s: serde_json::Value = http.get(&status).send().await?.json().await?;
        if s["subscriptions"]["holders"].as_u64() >= Some(listens as u64) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "not every listen held: {s}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let with_listens = daemon.rss()?;
    let one_update = one_update(&mut control, &tally, listens).await?;
    drop(receivers);
    Ok(ListenRow {
        listens,
        baseline,
        with_listens,
        one_update,
    })
}
