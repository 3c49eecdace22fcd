//! Scenario `fleet`: N clients spread evenly over three `mcpmux serve` instances with
//! the same `[fleet]` (one `nats-server -js`), all holding one URI of one scripted
//! upstream in Streamable HTTP mode; beside it, in the same run and with the same
//! upstream kind, ONE instance holding all N (no `[fleet]`), and three instances
//! without `[fleet]` (what the fleet saves). Per side: the upstream's own count of
//! `resources/subscribe` (its `stats`), K isolated updates (the next only after all N
//! received the previous) with update-to-all latency, then rounds of one update and N
//! readers with the upstream reads they cost.
//!
//! The instances are **child processes** ([`Daemon`]), not in-process `Core`s: a fleet
//! is several processes, each with its own runtime, its own NATS connection and its own
//! place in the kernel's scheduling; three `Core`s on one runtime would share its 2
//! workers and one allocator, which no deployment does. The one-instance side is a
//! child process too, so every side pays the same process boundaries (client → instance
//! → upstream, plus NATS for the fleet); clients run in loadgen. Everything shares the
//! machine's cores, as in every scenario here.
//!
//! Owns the sides and their rows. Each row starts its own upstream (counters from zero)
//! and its own instances; the rows share one nats-server per run, each row under a fleet
//! name of its own, so no row sees another's leases. The control session talks to the
//! upstream directly (`emit_update`, `stats`), so no instance is special but the owner
//! the fleet itself picks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Result};
use serde_json::json;

use super::fleet_peers::{free_port, nats_server_bin, runs, HttpUpstream, Nats};
use super::proxy::{config_toml_http, Daemon, Limits};
use super::scenarios::{by_uri, upstream_count, Bench, Env, Holders, Isolated, Rounds, URI};
use super::stats::{pct, Pct};

/// Instances in the fleet (and in the fleet-less three).
pub const INSTANCES: usize = 3;
/// The longest a peer (nats-server, the upstream) may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The executables the scenario needs besides the harness's own.
#[derive(Debug, Clone)]
pub struct Peers {
    pub mcpmux: PathBuf,
    pub nats_server: PathBuf,
}

/// The peers, or why the scenario cannot run here.
///
/// # Errors
/// A sentence naming what is missing.
pub fn peers(env: &Env) -> Result<Peers, String> {
    let Some(mcpmux) = env.bins.mcpmux.clone() else {
        return Err("needs target/<profile>/mcpmux: cargo build --release --bins".into());
    };
    let nats_server = nats_server_bin();
    if !runs(&nats_server) {
        return Err(format!(
            "no nats-server: {} does not run (set $NATS_SERVER, or run bash tests/interop/setup.sh)",
            nats_server.display()
        ));
    }
    Ok(Peers {
        mcpmux,
        nats_server,
    })
}

/// Starts the run's nats-server on a free loopback port.
///
/// # Errors
/// It does not start.
pub async fn start_nats(peers: &Peers) -> Result<Nats> {
    Nats::spawn(&peers.nats_server, free_port()?, START_TIMEOUT).await
}

/// How the N clients are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// One instance holds all N (no `[fleet]`).
    One,
    /// [`INSTANCES`] instances with the same `[fleet]`.
    Fleet,
    /// [`INSTANCES`] instances without `[fleet]`: each subscribes and reads itself.
    Apart,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::One, Side::Fleet, Side::Apart];

    pub fn instances(self) -> usize {
        match self {
            Side::One => 1,
            Side::Fleet | Side::Apart => INSTANCES,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Side::One => "1 instance",
            Side::Fleet => "3 instances, one `[fleet]`",
            Side::Apart => "3 instances, no `[fleet]`",
        }
    }
}

/// One side at one N.
#[derive(Debug, Clone)]
pub struct FleetRow {
    pub side: Side,
    pub n: usize,
    /// Client subscribes confirmed.
    pub confirmed: usize,
    /// `resources/subscribe` for `URI` the upstream received (its `stats.by_uri`).
    pub upstream_subscribes: u64,
    /// Upstream sessions holding `URI` (its `stats.subscribers`).
    pub upstream_subscribers: u64,
    pub iso: Isolated,
    /// Update + N reads rounds.
    pub rounds: u64,
    pub updates_delivered: u64,
    pub client_reads: u64,
    /// `resources/read` for `URI` the upstream received during the rounds.
    pub upstream_reads: u64,
    pub read_lat: Pct,
}

impl FleetRow {
    pub fn reads_per_update(&self) -> f64 {
        self.upstream_reads as f64 / self.rounds.max(1) as f64
    }
}

/// A fleet name no other row (or run) uses: letters, digits and `_`.
fn fleet_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "loadgen_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One row: a fresh upstream and `side.instances()` fresh instances, `n` clients
/// spread over them (receivers parse as `env.parse` says), `iso` isolated updates,
/// `rounds` read rounds. `nats` is needed for
/// [`Side::Fleet`] only.
///
/// # Errors
/// A peer or instance that does not start, a client that cannot connect, or a
/// subscribe not confirmed.
pub async fn fleet_row(
    env: &Env,
    mcpmux: &Path,
    nats: Option<&Nats>,
    side: Side,
    n: usize,
    iso: u64,
    rounds: u64,
) -> Result<FleetRow> {
    let up = HttpUpstream::spawn(&env.bins.scripted, &[], START_TIMEOUT).await?;
    let per = n.div_ceil(side.instances());
    let limits = Limits {
        max_clients: per + 16,
        max_connections: 2 * per + 64,
        ..Limits::default()
    };
    let (nats_url, name) = (nats.map(Nats::url), fleet_name());
    let fleet = match (side, &nats_url) {
        (Side::Fleet, Some(url)) => Some((url.as_str(), name.as_str())),
        (Side::Fleet, None) => anyhow::bail!("the fleet side needs a nats-server"),
        _ => None,
    };
    let config = config_toml_http(&up.url, limits, fleet);
    let mut daemons = vec![];
    for _ in 0..side.instances() {
        daemons.push(Daemon::start(mcpmux, &config).await?);
    }
    let urls: Vec<&str> = daemons.iter().map(|d| d.url.as_str()).collect();
    let mut b = Bench::connect_spread(&up.url, &urls, n, env.parse, Holders::Legacy).await?;
    let confirmed = b.subscribe_all().await?;
    ensure!(
        confirmed == n,
        "{}: {confirmed} of {n} subscribes confirmed",
        side.label()
    );
    let stats = b.control.tool("stats", json!({})).await?;
    let upstream_subscribes = by_uri(&stats, "resources/subscribe", URI);
    let upstream_subscribers = stats["subscribers"][URI].as_u64().unwrap_or(0);
    let iso = b.isolated(iso).await?;
    let before = upstream_count(&mut b.control, "resources/read", URI).await?;
    let Rounds {
        updates_delivered,
        client_reads,
        mut lats,
    } = b.read_rounds(rounds).await?;
    let upstream_reads = upstream_count(&mut b.control, "resources/read", URI).await? - before;
    b.stop().await;
    drop(daemons);
    drop(up);
    Ok(FleetRow {
        side,
        n,
        confirmed,
        upstream_subscribes,
        upstream_subscribers,
        iso,
        rounds,
        updates_delivered,
        client_reads,
        upstream_reads,
        read_lat: pct(&mut lats),
    })
}

/// Every side at a tiny size, counts only (never time): all subscribes confirmed, every
/// holder gets every update, and the upstream sees 1 subscription and 1 read per
/// update for one instance and for the fleet, 3 and 3 for three instances apart.
///
/// # Errors
/// The first count that is off, with the figures.
pub async fn smoke(env: &Env, peers: &Peers) -> Result<()> {
    let nats = start_nats(peers).await?;
    let (n, iso, rounds) = (6u64, 2, 2);
    for side in Side::ALL {
        let r = fleet_row(
            env,
            &peers.mcpmux,
            Some(&nats),
            side,
            n as usize,
            iso,
            rounds,
        )
        .await?;
        let per_key = match side {
            Side::One | Side::Fleet => 1,
            Side::Apart => INSTANCES as u64,
        };
        ensure!(
            r.upstream_subscribes == per_key && r.upstream_subscribers == per_key,
            "fleet smoke, {}: upstream subscriptions: {r:?}",
            side.label()
        );
        ensure!(
            r.iso.delivered == n * iso && r.iso.all.n as u64 == iso,
            "fleet smoke, {}: isolated updates: {r:?}",
            side.label()
        );
        ensure!(
            r.updates_delivered == n * rounds && r.client_reads == n * rounds,
            "fleet smoke, {}: read rounds: {r:?}",
            side.label()
        );
        ensure!(
            r.upstream_reads == per_key * rounds,
            "fleet smoke, {}: upstream reads: {r:?}",
            side.label()
        );
    }
    drop(nats);
    Ok(())
}
