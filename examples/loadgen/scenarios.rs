//! The measured scenarios, parametrized by size. Each returns figures; none asserts on
//! time. [`smoke`] runs them at tiny sizes and checks only counts.
//!
//! Every row starts its own proxy (and so its own scripted upstream), so upstream
//! counters start at zero, and its own connection pool, so no connection outlives it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use futures_util::future::join_all;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::{json, Value};
use tokio::runtime::Handle;

use super::client::{
    http_pool, machine_cpu, ns_since, open_listen, receive, stateless_tool, thread_cpu, LineClient,
    MachineCpu, Parse, Receiver, Session, Tally,
};
use super::proxy::{config_toml, config_toml_era, Daemon, Limits, Proxy, TempFile};
use super::raw::RawServer;
use super::stats::{pct, Pct};

/// The one URI every client holds.
pub const URI: &str = "test://static/1";
/// Sessions connected at once while setting up (setup is not measured).
pub const CONNECT_CONCURRENCY: usize = 64;
/// The longest a scenario waits for deliveries in total.
const WAIT_MAX: Duration = Duration::from_secs(120);
/// A wait for deliveries gives up after this long without progress.
const WAIT_STALL: Duration = Duration::from_secs(5);

/// The executables next to the harness.
#[derive(Debug, Clone)]
pub struct Bins {
    pub scripted: PathBuf,
    /// `mcpmux` itself, for `mcpmux stdio` and `mcpmux serve`; optional.
    pub mcpmux: Option<PathBuf>,
    /// A program that runs as `PROGRAM relay CMD ARGS…`: the floor of any process
    /// between a host and its stdio server (`loadgen relay`, see
    /// `examples/loadgen/relay.rs`); optional, its `forwarding` row is left out without it.
    pub relay: Option<PathBuf>,
}

/// Where the systems under test run.
#[derive(Debug, Clone)]
pub struct Env {
    /// The runtime that hosts mcpmux and the raw baseline (clients run on the caller's).
    pub server: Handle,
    /// Thread-name prefix of `server`'s threads, for CPU accounting (`None`: not
    /// measured, e.g. when clients and server share one runtime).
    pub server_threads: Option<String>,
    pub bins: Bins,
    /// How fanout receivers parse their streams.
    pub parse: Parse,
}

impl Env {
    fn server_cpu(&self) -> Duration {
        self.server_threads
            .as_deref()
            .map_or(Duration::ZERO, thread_cpu)
    }
}

/// Which protocol era the holders of the URI speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holders {
    /// Legacy sessions (`initialize`, GET stream, `resources/subscribe`).
    Legacy,
    /// 2026-07-28 `subscriptions/listen` streams.
    Modern,
    /// Every other holder of each era.
    Mixed,
}

impl Holders {
    fn modern(self, i: usize) -> bool {
        match self {
            Holders::Legacy => false,
            Holders::Modern => true,
            Holders::Mixed => i % 2 == 1,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Holders::Legacy => "legacy sessions",
            Holders::Modern => "2026-07-28 listens",
            Holders::Mixed => "half and half",
        }
    }
}

/// A proxy, a control session (not subscribed) and `n` sessions with GET streams.
pub struct Bench {
    /// mcpmux in-process; `None` for a peer proxy reached by URL.
    proxy: Option<Proxy>,
    pub control: Session,
    pub clients: Vec<Session>,
    pub receivers: Vec<Receiver>,
    pub tally: Arc<Tally>,
}

impl Bench {
    async fn start(env: &Env, n: usize, limits: Limits, parse: Parse) -> Result<Bench> {
        let proxy = Proxy::start(&env.server, &config_toml(&env.bins.scripted, limits))?;
        let mut b = Bench::connect(&proxy.url, n, parse).await?;
        b.proxy = Some(proxy);
        Ok(b)
    }

    /// `n` sessions with GET streams, plus a control session, at `url`.
    ///
    /// # Errors
    /// Any session failing to connect.
    pub async fn connect(url: &str, n: usize, parse: Parse) -> Result<Bench> {
        Self::connect_holders(url, n, parse, Holders::Legacy).await
    }

    /// Like [`Bench::connect`], with holders of the given era(s): a modern holder is a
    /// listen stream (already holding `URI`), with no session.
    ///
    /// # Errors
    /// Any session or stream failing to connect.
    pub async fn connect_holders(
        url: &str,
        n: usize,
        parse: Parse,
        holders: Holders,
    ) -> Result<Bench> {
        Self::connect_spread(url, &[url], n, parse, holders).await
    }

    /// `n` holders spread evenly over `urls` (holder `i` at `urls[i % urls.len()]`),
    /// all counted in one tally, and a control session at `control_url` (which may be
    /// the upstream itself).
    ///
    /// # Errors
    /// Any session or stream failing to connect.
    pub async fn connect_spread(
        control_url: &str,
        urls: &[&str],
        n: usize,
        parse: Parse,
        holders: Holders,
    ) -> Result<Bench> {
        ensure!(!urls.is_empty(), "no URL to connect holders to");
        let http = http_pool()?;
        let control = Session::connect(&http, control_url).await?;
        let tally = Tally::new();
        let uri: Arc<str> = URI.into();
        let http = &http;
        let pairs: Vec<(Option<Session>, Receiver)> = futures_util::stream::iter(0..n)
            .map(|i| {
                let (uri, tally) = (uri.clone(), tally.clone());
                let url = urls[i % urls.len()];
                async move {
                    if holders.modern(i) {
                        let r = open_listen(http, url, uri, tally, parse).await?;
                        return anyhow::Ok((None, r));
                    }
                    let s = Session::connect(http, url).await?;
                    let r = s.open_stream(uri, tally, parse).await?;
                    anyhow::Ok((Some(s), r))
                }
            })
            .buffer_unordered(CONNECT_CONCURRENCY)
            .try_collect()
            .await?;
        let (clients, receivers): (Vec<Option<Session>>, Vec<Receiver>) = pairs.into_iter().unzip();
        let clients = clients.into_iter().flatten().collect();
        Ok(Bench {
            proxy: None,
            control,
            clients,
            receivers,
            tally,
        })
    }

    fn core(&self) -> Result<&mcpmux::run::Core> {
        self.proxy
            .as_ref()
            .map(|p| &p.core)
            .ok_or_else(|| anyhow::anyhow!("not an in-process mcpmux"))
    }

    /// Every client subscribes to `URI` at once; returns how many were confirmed.
    pub async fn subscribe_all(&mut self) -> Result<usize> {
        let answers = join_all(
            self.clients
                .iter_mut()
                .map(|c| c.call("resources/subscribe", json!({"uri": URI}))),
        )
        .await;
        let mut ok = 0;
        for a in answers {
            if a?.get("result").is_some() {
                ok += 1;
            }
        }
        Ok(ok)
    }

    /// `iso` isolated updates (stamped), each sent only after every holder received
    /// the previous one (or the wait gave up: see [`wait_for`]).
    ///
    /// # Errors
    /// The control session's `emit_update` failing.
    pub async fn isolated(&mut self, iso: u64) -> Result<Isolated> {
        let n = self.receivers.len() as u64;
        let mut delivered = 0;
        for _ in 0..iso {
            let before = self.tally.delivered();
            self.control
                .tool("emit_update", json!({"uri": URI, "stamp": true}))
                .await?;
            delivered += wait_for(&self.tally, before + n).await - before;
        }
        let samples = drain_samples(&self.receivers);
        Ok(isolated_from(iso, iso * n, delivered, &samples))
    }

    /// `k` rounds of one update (waited for at every holder), then every session
    /// reading `URI` at once.
    ///
    /// # Errors
    /// A failed `emit_update`, or a read failing at the HTTP level.
    pub async fn read_rounds(&mut self, k: u64) -> Result<Rounds> {
        let n = self.receivers.len() as u64;
        let mut r = Rounds::default();
        for _ in 0..k {
            let seen = self.tally.delivered();
            self.control
                .tool("emit_update", json!({"uri": URI}))
                .await?;
            r.updates_delivered += wait_for(&self.tally, seen + n).await - seen;
            let answers = join_all(self.clients.iter_mut().map(|c| async move {
                let t = Instant::now();
                let a = c.call("resources/read", json!({"uri": URI})).await;
                (ns_since(t), a)
            }))
            .await;
            for (ns, a) in answers {
                if a?.get("result").is_some() {
                    r.client_reads += 1;
                    r.lats.push(ns);
                }
            }
        }
        Ok(r)
    }

    pub async fn stop(self) {
        drop(self.receivers);
        drop(self.clients);
        if let Some(p) = self.proxy {
            p.stop().await;
        }
    }
}

/// How many requests of `method` for `uri` the scripted upstream has received.
pub async fn upstream_count(control: &mut Session, method: &str, uri: &str) -> Result<u64> {
    let stats = control.tool("stats", json!({})).await?;
    Ok(by_uri(&stats, method, uri))
}

/// Requests of `method` for `uri` in the scripted upstream's `stats` output.
pub fn by_uri(stats: &Value, method: &str, uri: &str) -> u64 {
    stats["by_uri"][method][uri].as_u64().unwrap_or(0)
}

/// What [`Bench::read_rounds`] saw.
#[derive(Debug, Clone, Default)]
pub struct Rounds {
    /// Updates received by the holders (N per round when none is missed).
    pub updates_delivered: u64,
    /// Reads answered with a result.
    pub client_reads: u64,
    /// Their latencies, ns.
    pub lats: Vec<u64>,
}

/// Waits until `tally` reaches `target`, or nothing arrived for [`WAIT_STALL`], or
/// [`WAIT_MAX`] passed. Returns the count then.
pub async fn wait_for(tally: &Tally, target: u64) -> u64 {
    tally.expect(target);
    let start = Instant::now();
    let mut last = tally.delivered();
    let mut last_change = Instant::now();
    loop {
        let d = tally.wait(Duration::from_millis(500)).await;
        if d >= target || start.elapsed() > WAIT_MAX {
            return d;
        }
        if d != last {
            last = d;
            last_change = Instant::now();
        } else if last_change.elapsed() > WAIT_STALL {
            return d;
        }
    }
}

pub fn drain_samples(receivers: &[Receiver]) -> Vec<(u64, u64)> {
    let mut out = vec![];
    for r in receivers {
        out.append(&mut r.samples.lock().unwrap_or_else(|p| p.into_inner()));
    }
    out
}

/// Scenario 1: `subscribe-storm`.
#[derive(Debug, Clone)]
pub struct StormRow {
    pub n: usize,
    /// Setting up the `n` sessions (initialize + GET), not part of the storm.
    pub connect: Duration,
    pub confirmed: usize,
    pub upstream_subscribes: u64,
    /// From the first subscribe sent until the last one was answered.
    pub wall: Duration,
    pub hub_keys: usize,
    pub hub_client_subs: usize,
}

pub async fn storm(env: &Env, n: usize) -> Result<StormRow> {
    let t0 = Instant::now();
    let limits = Limits {
        max_clients: n + 16,
        max_connections: 2 * n + 64,
        ..Limits::default()
    };
    let mut b = Bench::start(env, n, limits, Parse::Full).await?;
    let connect = t0.elapsed();
    let t = Instant::now();
    let confirmed = b.subscribe_all().await?;
    let wall = t.elapsed();
    let upstream_subscribes = upstream_count(&mut b.control, "resources/subscribe", URI).await?;
    let hub = b.core()?.hub.stats().await?;
    b.stop().await;
    Ok(StormRow {
        n,
        connect,
        confirmed,
        upstream_subscribes,
        wall,
        hub_keys: hub.subscription_keys,
        hub_client_subs: hub.client_subscriptions,
    })
}

/// Deliveries of a burst of `k` updates to `n` streams.
#[derive(Debug, Clone, Default)]
pub struct Burst {
    pub n: usize,
    pub k: u64,
    pub expected: u64,
    pub delivered: u64,
    /// From the emit request until the last client received the last update.
    pub wall: Duration,
    /// Emit → receipt, per delivery.
    pub lat: Pct,
    /// CPU used by the server runtime's threads during the burst (zero if unmeasured).
    pub server_cpu: Duration,
    /// The whole machine's CPU during the burst: what the server used, the clients, the
    /// upstream and the kernel's work for them (and anything else running).
    pub machine: MachineCpu,
    /// Body chunks the light receivers read during the burst (zero for full ones).
    pub reads: u64,
}

impl Burst {
    pub fn per_sec(&self) -> f64 {
        self.delivered as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Events per body chunk read by a client (0 when not counted).
    pub fn events_per_read(&self) -> f64 {
        if self.reads == 0 {
            return 0.0;
        }
        self.delivered as f64 / self.reads as f64
    }

    /// Server CPU per delivery, in microseconds.
    pub fn cpu_us_per_delivery(&self) -> f64 {
        self.server_cpu.as_secs_f64() * 1e6 / self.delivered.max(1) as f64
    }

    /// The rest of the machine's CPU per delivery (clients, upstream, everything but
    /// the server's threads), in microseconds.
    pub fn rest_us_per_delivery(&self) -> f64 {
        self.machine
            .busy
            .saturating_sub(self.server_cpu)
            .as_secs_f64()
            * 1e6
            / self.delivered.max(1) as f64
    }

    /// How busy the machine's cores were during the burst, in percent.
    pub fn machine_busy_pct(&self) -> f64 {
        100.0 * self.machine.busy.as_secs_f64() / self.machine.all.as_secs_f64().max(1e-9)
    }
}

/// Isolated updates: each is sent only after the previous one reached every client.
#[derive(Debug, Clone, Default)]
pub struct Isolated {
    pub events: u64,
    pub expected: u64,
    pub delivered: u64,
    /// Emit → receipt, per delivery.
    pub lat: Pct,
    /// Emit → receipt by the last of the `n` clients, per event.
    pub all: Pct,
}

fn isolated_from(events: u64, expected: u64, delivered: u64, samples: &[(u64, u64)]) -> Isolated {
    let mut per_event: HashMap<u64, u64> = HashMap::new();
    for &(t, lat) in samples {
        let e = per_event.entry(t).or_default();
        *e = (*e).max(lat);
    }
    let mut lats: Vec<u64> = samples.iter().map(|s| s.1).collect();
    let mut all: Vec<u64> = per_event.into_values().collect();
    Isolated {
        events,
        expected,
        delivered,
        lat: pct(&mut lats),
        all: pct(&mut all),
    }
}

/// Scenario 2: `fanout`, one side (mcpmux or the raw baseline).
#[derive(Debug, Clone, Default)]
pub struct Fanout {
    pub iso: Isolated,
    pub burst: Burst,
    /// mcpmux only: the largest client outbox seen.
    pub peak_queue: usize,
    /// mcpmux only: burst updates coalesced by the slow-client policy (fewer deliveries
    /// by design, each URI's last update still delivered).
    pub coalesced: u64,
    /// `/metrics` scrapes completed during the run (when scraping was asked for).
    pub scrapes: u64,
}

impl Fanout {
    /// Burst updates that neither arrived nor were coalesced: lost.
    pub fn lost(&self) -> u64 {
        self.burst
            .expected
            .saturating_sub(self.burst.delivered + self.coalesced)
    }
}

/// `n` subscribed clients; `iso` isolated updates, then a burst of `k`.
pub async fn fanout_mcpmux(env: &Env, n: usize, k: u64, iso: u64) -> Result<Fanout> {
    fanout_holders(env, n, k, iso, Holders::Legacy).await
}

/// [`fanout_mcpmux`] with holders of the given era(s).
pub async fn fanout_holders(
    env: &Env,
    n: usize,
    k: u64,
    iso: u64,
    holders: Holders,
) -> Result<Fanout> {
    fanout_holders_on(env, n, k, iso, holders, "legacy", None).await
}

/// [`fanout_holders`] with the scripted upstream in protocol era `upstream_era`.
pub async fn fanout_holders_on(
    env: &Env,
    n: usize,
    k: u64,
    iso: u64,
    holders: Holders,
    upstream_era: &str,
    scrape_every: Option<Duration>,
) -> Result<Fanout> {
    let limits = Limits {
        max_clients: n + 16,
        max_connections: 2 * n + 64,
        // Deep enough that a burst never coalesces: this measures delivery, not policy.
        client_queue: (k as usize + 64).max(Limits::default().client_queue),
        ..Limits::default()
    };
    let config = config_toml_era(&env.bins.scripted, limits, upstream_era);
    let proxy = Proxy::start(&env.server, &config)?;
    let mut b = Bench::connect_holders(&proxy.url, n, env.parse, holders).await?;
    b.proxy = Some(proxy);
    let legacy = b.clients.len();
    ensure!(
        b.subscribe_all().await? == legacy,
        "not every subscribe confirmed"
    );
    // Listens hold the URI once acknowledged; wait until the hub has every holder.
    let deadline = Instant::now() + WAIT_MAX;
    while b.core()?.hub.stats().await?.client_subscriptions < n {
        ensure!(Instant::now() < deadline, "not every holder registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A Prometheus stand-in scraping `/metrics` for the whole measurement.
    let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let scraper = scrape_every.map(|every| {
        let url = format!(
            "{}/metrics",
            b.proxy
                .as_ref()
                .map(|p| p.url.trim_end_matches("/mcp").to_owned())
                .unwrap_or_default()
        );
        let scrapes = scrapes.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            loop {
                if let Ok(r) = http.get(&url).send().await {
                    if r.text().await.is_ok() {
                        scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(every).await;
            }
        })
    });
    let n64 = n as u64;
    let iso = b.isolated(iso).await?;

    let before = b.tally.delivered();
    let expected = n64 * k;
    b.tally.expect(before + expected);
    let coalesced0 = b.core()?.hub.stats().await?.coalesced;
    let reads0 = b.tally.reads();
    let cpu0 = env.server_cpu();
    let machine0 = machine_cpu();
    let t = Instant::now();
    b.control
        .tool(
            "emit_updates",
            json!({"uri": URI, "count": k, "stamp": true}),
        )
        .await?;
    let got = wait_for(&b.tally, before + expected).await - before;
    let wall = t.elapsed();
    let server_cpu = env.server_cpu().saturating_sub(cpu0);
    let machine = machine_cpu().since(machine0);
    let reads = b.tally.reads() - reads0;
    let mut lats: Vec<u64> = drain_samples(&b.receivers).iter().map(|s| s.1).collect();
    let stats = b.core()?.hub.stats().await?;
    if let Some(s) = scraper {
        s.abort();
    }
    b.stop().await;
    Ok(Fanout {
        scrapes: scrapes.load(std::sync::atomic::Ordering::Relaxed),
        iso,
        burst: Burst {
            n,
            k,
            expected,
            delivered: got,
            wall,
            lat: pct(&mut lats),
            server_cpu,
            machine,
            reads,
        },
        peak_queue: stats.peak_queue,
        coalesced: stats.coalesced - coalesced0,
    })
}

/// The same as [`fanout_mcpmux`] against the raw SSE writer, sending the burst
/// `batch` events per chunk.
pub async fn fanout_raw(env: &Env, n: usize, k: u64, iso: u64, batch: u64) -> Result<Fanout> {
    let server = RawServer::start(&env.server, k as usize + 64)?;
    let http = http_pool()?;
    let tally = Tally::new();
    let uri: Arc<str> = URI.into();
    let (http_ref, url) = (&http, server.url.as_str());
    let receivers: Vec<Receiver> = futures_util::stream::iter(0..n)
        .map(|_| {
            let (uri, tally) = (uri.clone(), tally.clone());
            async move {
                let resp = http_ref
                    .get(url)
                    .header("accept", "text/event-stream")
                    .send()
                    .await?;
                anyhow::Ok(receive(resp, uri, tally, env.parse))
            }
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await?;
    // The handler registers its stream before answering, so all are connected now.
    ensure!(
        server.connected() == n,
        "raw: {} of {n} streams",
        server.connected()
    );
    let n64 = n as u64;
    let mut next_id = 1;
    let mut delivered = 0;
    for _ in 0..iso {
        let before = tally.delivered();
        tally.expect(before + n64);
        server.broadcast(URI, 1, next_id, 1).await?;
        next_id += 1;
        delivered += wait_for(&tally, before + n64).await - before;
    }
    let iso = isolated_from(iso, iso * n64, delivered, &drain_samples(&receivers));

    let before = tally.delivered();
    let expected = n64 * k;
    tally.expect(before + expected);
    let reads0 = tally.reads();
    let cpu0 = env.server_cpu();
    let machine0 = machine_cpu();
    let t = Instant::now();
    server.broadcast(URI, k, next_id, batch).await?;
    let got = wait_for(&tally, before + expected).await - before;
    let wall = t.elapsed();
    let server_cpu = env.server_cpu().saturating_sub(cpu0);
    let machine = machine_cpu().since(machine0);
    let reads = tally.reads() - reads0;
    let mut lats: Vec<u64> = drain_samples(&receivers).iter().map(|s| s.1).collect();
    server.close_streams();
    drop(receivers);
    Ok(Fanout {
        iso,
        burst: Burst {
            n,
            k,
            expected,
            delivered: got,
            wall,
            lat: pct(&mut lats),
            server_cpu,
            machine,
            reads,
        },
        peak_queue: 0,
        coalesced: 0,
        scrapes: 0,
    })
}

/// Scenario 3: `read-storm`.
#[derive(Debug, Clone)]
pub struct ReadRow {
    pub n: usize,
    pub k: u64,
    pub updates_delivered: u64,
    pub client_reads: u64,
    pub upstream_reads: u64,
    /// Client read latency through mcpmux (HTTP), all N reading at once.
    pub lat: Pct,
    /// The same N reads pipelined on one direct stdio session to a scripted upstream.
    pub direct: Pct,
    pub cache_hits: u64,
    pub cache_joined: u64,
    pub cache_fetches: u64,
}

impl ReadRow {
    pub fn reads_per_update(&self) -> f64 {
        self.upstream_reads as f64 / self.k.max(1) as f64
    }

    pub fn hit_ratio(&self) -> f64 {
        1.0 - self.upstream_reads as f64 / self.client_reads.max(1) as f64
    }
}

/// `n` subscribed clients; `k` times: one update, then all `n` re-read at once.
pub async fn read_storm(env: &Env, n: usize, k: u64) -> Result<ReadRow> {
    let limits = Limits {
        max_clients: n + 16,
        max_connections: 2 * n + 64,
        ..Limits::default()
    };
    let mut b = Bench::start(env, n, limits, Parse::Full).await?;
    ensure!(
        b.subscribe_all().await? == n,
        "not every subscribe confirmed"
    );
    let before = upstream_count(&mut b.control, "resources/read", URI).await?;
    let Rounds {
        updates_delivered,
        client_reads,
        mut lats,
    } = b.read_rounds(k).await?;
    let upstream_reads = upstream_count(&mut b.control, "resources/read", URI).await? - before;
    let cache = b.core()?.hub.stats().await?.cache;
    b.stop().await;

    let mut direct = LineClient::start(&env.bins.scripted, &[]).await?;
    let mut direct_lats = vec![];
    for _ in 0..k {
        let mut sent = HashMap::new();
        for _ in 0..n {
            let id = direct.send("resources/read", json!({"uri": URI})).await?;
            sent.insert(id, Instant::now());
        }
        for _ in 0..n {
            let r = direct.next_response().await?;
            let Some(at) = r["id"].as_u64().and_then(|id| sent.remove(&id)) else {
                bail!("direct read: unexpected response {r}");
            };
            direct_lats.push(ns_since(at));
        }
    }
    Ok(ReadRow {
        n,
        k,
        updates_delivered,
        client_reads,
        upstream_reads,
        lat: pct(&mut lats),
        direct: pct(&mut direct_lats),
        cache_hits: cache.hits,
        cache_joined: cache.joined,
        cache_fetches: cache.fetches,
    })
}

/// A read storm without subscriptions: `k` rounds of `n` concurrent reads of one URI
/// that nobody holds, whose results carry `ttlMs` 600 000 from a 2026-07-28 upstream
/// (`upstream_era = "modern"`), or none from a legacy one.
#[derive(Debug, Clone)]
pub struct TtlRow {
    pub era: String,
    pub n: usize,
    pub k: u64,
    pub client_reads: u64,
    pub upstream_reads: u64,
    pub lat: Pct,
}

/// [`TtlRow`] for one upstream era.
pub async fn ttl_read_storm(env: &Env, n: usize, k: u64, upstream_era: &str) -> Result<TtlRow> {
    const TTL_URI: &str = "test://dynamic/ttl?ttl=600000&scope=public";
    let limits = Limits {
        max_clients: n + 16,
        max_connections: 2 * n + 64,
        ..Limits::default()
    };
    let config = config_toml_era(&env.bins.scripted, limits, upstream_era);
    let proxy = Proxy::start(&env.server, &config)?;
    let mut b = Bench::connect(&proxy.url, n, Parse::Full).await?;
    b.proxy = Some(proxy);
    let mut lats = vec![];
    let mut client_reads = 0;
    for _ in 0..k {
        let answers = join_all(b.clients.iter_mut().map(|c| async move {
            let t = Instant::now();
            let r = c.call("resources/read", json!({"uri": TTL_URI})).await;
            (ns_since(t), r)
        }))
        .await;
        for (ns, r) in answers {
            if r?.get("result").is_some() {
                client_reads += 1;
                lats.push(ns);
            }
        }
    }
    let upstream_reads = upstream_count(&mut b.control, "resources/read", TTL_URI).await?;
    b.stop().await;
    Ok(TtlRow {
        era: upstream_era.to_owned(),
        n,
        k,
        client_reads,
        upstream_reads,
        lat: pct(&mut lats),
    })
}

/// Scenario 4: one path of `forwarding`.
#[derive(Debug, Clone)]
pub struct FwdRow {
    pub path: &'static str,
    pub lat: Pct,
}

/// Sequential `tools/call echo` round trips on each path, interleaved call by call so
/// background noise hits every path alike. `warmup` calls per path are not counted.
pub async fn forwarding(env: &Env, calls: usize, warmup: usize) -> Result<Vec<FwdRow>> {
    let echo = || json!({"text": "hello from loadgen"});
    let mut direct = LineClient::start(&env.bins.scripted, &[]).await?;
    let config = TempFile::new("toml", &config_toml(&env.bins.scripted, Limits::default()))?;
    let mut via_stdio = match &env.bins.mcpmux {
        Some(bin) => {
            let path = config.0.to_string_lossy().into_owned();
            Some(LineClient::start(bin, &["stdio", "--config", &path]).await?)
        }
        None => None,
    };
    let mut via_relay = match &env.bins.relay {
        Some(bin) => {
            let scripted = env.bins.scripted.to_string_lossy().into_owned();
            Some(LineClient::start(bin, &["relay", &scripted]).await?)
        }
        None => None,
    };
    let proxy = Proxy::start(
        &env.server,
        &config_toml(&env.bins.scripted, Limits::default()),
    )?;
    let http = http_pool()?;
    let mut via_http = Session::connect(&http, &proxy.url).await?;
    // The 2026-07-28 request path: a stateless call made directly to a 2026-07-28 HTTP
    // upstream, and the same call through mcpmux (a new hub client per request).
    let modern_up = super::fleet_peers::HttpUpstream::spawn(
        &env.bins.scripted,
        &[("SCRIPTED_ERA", "modern")],
        WAIT_MAX,
    )
    .await?;
    let modern_toml = format!(
        "{}protocol = \"modern\"\n",
        super::proxy::config_toml_http(&modern_up.url, Limits::default(), None)
    );
    let modern_proxy = Proxy::start(&env.server, &modern_toml)?;
    // The same through `mcpmux serve` as a child process: the daemon as users run it,
    // with its own runtime (`serve --workers`, default one worker thread).
    let modern_daemon = match &env.bins.mcpmux {
        Some(bin) => Some(Daemon::start(bin, &modern_toml).await?),
        None => None,
    };
    let (mut md, mut mm, mut ms) = (vec![], vec![], vec![]);

    let (mut d, mut r, mut s, mut h) = (vec![], vec![], vec![], vec![]);
    for i in 0..warmup + calls {
        let keep = i >= warmup;
        let t = Instant::now();
        check_echo(stateless_tool(&http, &modern_up.url, i as u64, "echo", echo()).await?)?;
        if keep {
            md.push(ns_since(t));
        }
        let t = Instant::now();
        check_echo(stateless_tool(&http, &modern_proxy.url, i as u64, "echo", echo()).await?)?;
        if keep {
            mm.push(ns_since(t));
        }
        if let Some(daemon) = &modern_daemon {
            let t = Instant::now();
            check_echo(stateless_tool(&http, &daemon.url, i as u64, "echo", echo()).await?)?;
            if keep {
                ms.push(ns_since(t));
            }
        }
        let t = Instant::now();
        check_echo(direct.tool("echo", echo()).await?)?;
        if keep {
            d.push(ns_since(t));
        }
        if let Some(c) = via_relay.as_mut() {
            let t = Instant::now();
            check_echo(c.tool("echo", echo()).await?)?;
            if keep {
                r.push(ns_since(t));
            }
        }
        if let Some(c) = via_stdio.as_mut() {
            let t = Instant::now();
            check_echo(c.tool("echo", echo()).await?)?;
            if keep {
                s.push(ns_since(t));
            }
        }
        let t = Instant::now();
        check_echo(via_http.tool("echo", echo()).await?)?;
        if keep {
            h.push(ns_since(t));
        }
    }
    drop(via_http);
    proxy.stop().await;
    modern_proxy.stop().await;
    let mut rows = vec![FwdRow {
        path: "direct stdio → scripted-upstream",
        lat: pct(&mut d),
    }];
    if via_relay.is_some() {
        rows.push(FwdRow {
            path: "minimal relay (`loadgen relay`: two blocking copy threads) → scripted-upstream",
            lat: pct(&mut r),
        });
    }
    if via_stdio.is_some() {
        rows.push(FwdRow {
            path: "mcpmux stdio (child process) → scripted-upstream",
            lat: pct(&mut s),
        });
    }
    rows.push(FwdRow {
        path: "mcpmux Streamable HTTP (in-process) → scripted-upstream",
        lat: pct(&mut h),
    });
    rows.push(FwdRow {
        path: "direct stateless 2026-07-28 HTTP → scripted-upstream (HTTP, 2026-07-28)",
        lat: pct(&mut md),
    });
    rows.push(FwdRow {
        path:
            "mcpmux stateless 2026-07-28 HTTP (in-process) → scripted-upstream (HTTP, 2026-07-28)",
        lat: pct(&mut mm),
    });
    if modern_daemon.is_some() {
        rows.push(FwdRow {
            path: "`mcpmux serve` (child process), stateless 2026-07-28 HTTP → scripted-upstream (HTTP, 2026-07-28)",
            lat: pct(&mut ms),
        });
    }
    Ok(rows)
}

/// Checks a `tools/call echo` result of `forwarding` and `drive`.
///
/// # Errors
/// Any other result.
pub fn check_echo(v: Value) -> Result<()> {
    ensure!(
        v["content"][0]["text"] == "hello from loadgen",
        "unexpected echo result: {v}"
    );
    Ok(())
}

/// Every scenario at tiny sizes, checking counts only: one upstream subscribe for N
/// clients, every client receives every update, one upstream read per update.
///
/// # Errors
/// The first count that is off, with the figures.
pub async fn smoke(env: &Env) -> Result<()> {
    for n in [1, 3] {
        let r = storm(env, n).await?;
        ensure!(r.confirmed == n, "storm: {r:?}");
        ensure!(r.upstream_subscribes == 1, "storm: {r:?}");
        ensure!(r.hub_keys == 1 && r.hub_client_subs == n, "storm: {r:?}");
    }
    let (n, k, iso) = (3, 3, 2);
    for (side, f) in [
        ("mcpmux", fanout_mcpmux(env, n, k, iso).await?),
        (
            "mcpmux, listen holders",
            fanout_holders(env, n, k, iso, Holders::Modern).await?,
        ),
        (
            "mcpmux, mixed holders",
            fanout_holders(env, n, k, iso, Holders::Mixed).await?,
        ),
        (
            "mcpmux, mixed holders, 2026-07-28 upstream",
            fanout_holders_on(env, n, k, iso, Holders::Mixed, "modern", None).await?,
        ),
        (
            "mcpmux, scraped",
            fanout_holders_on(
                env,
                n,
                k,
                iso,
                Holders::Legacy,
                "legacy",
                Some(Duration::from_millis(5)),
            )
            .await?,
        ),
        ("raw", fanout_raw(env, n, k, iso, 1).await?),
        ("raw batched", fanout_raw(env, n, k, iso, 2).await?),
    ] {
        ensure!(
            f.lost() == 0 && f.coalesced == 0,
            "{side} fanout lost {} and coalesced {}: {f:?}",
            f.lost(),
            f.coalesced
        );
        ensure!(f.iso.delivered == f.iso.expected, "{side} fanout: {f:?}");
        ensure!(f.burst.lat.n as u64 == f.burst.expected, "{side}: {f:?}");
    }
    let r = read_storm(env, 3, 3).await?;
    ensure!(r.updates_delivered == 9, "read-storm: {r:?}");
    ensure!(r.client_reads == 9, "read-storm: {r:?}");
    ensure!(r.upstream_reads == 3, "read-storm: {r:?}");
    ensure!(r.direct.n == 9, "read-storm: {r:?}");
    let r = ttl_read_storm(env, 3, 2, "modern").await?;
    ensure!(
        r.client_reads == 6 && r.upstream_reads == 1,
        "ttl read-storm: {r:?}"
    );
    let r = ttl_read_storm(env, 3, 2, "legacy").await?;
    ensure!(
        r.client_reads == 6 && r.upstream_reads == 6,
        "ttl read-storm: {r:?}"
    );
    let rows = forwarding(env, 5, 1).await?;
    for row in &rows {
        ensure!(row.lat.n == 5, "forwarding: {row:?}");
    }
    Ok(())
}
