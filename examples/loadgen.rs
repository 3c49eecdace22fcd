//! `loadgen`: mcpmux's load generator. Starts mcpmux in this process (hub + Streamable
//! HTTP on `127.0.0.1:0`, on a runtime of its own) in front of the scripted upstream,
//! drives real HTTP sessions at it from a second runtime, and prints Markdown tables.
//!
//! ```text
//! cargo build --release --bins --examples
//! target/release/examples/loadgen <scenario> [options]
//!   scenarios: storm | fanout | read-storm | modern-upstream | metrics | forwarding | memory
//!              | fleet | peer | all
//!   --clients 1,10,100     client counts (storm, fanout, read-storm, modern-upstream, fleet)
//!   --updates K            burst size per fanout row (default: 500,000 / N, 1,000..20,000)
//!   --iso E                isolated updates per fanout and fleet row (default 50)
//!   --rounds K             update+re-read rounds per read-storm and fleet row, read
//!                          rounds per TTL read-storm row (default 50)
//!   --calls M              echo round trips per forwarding path (default 5,000)
//!   --sessions 1000,10000  idle sessions per memory row
//!   --uris U               URIs each of the first memory row's sessions subscribes to (default 100)
//!   --peer PATH            `peer`: path of npm mcp-proxy's dist/bin/mcp-proxy.mjs
//!                          (default $MCP_PROXY_MJS); `peer` is skipped by `all` without it
//!   `fleet` needs a nats-server ($NATS_SERVER, else tests/interop/.venv/bin/nats-server,
//!   installed by `bash tests/interop/setup.sh`): skipped with a message (and by `all`,
//!   and by --smoke) without one
//!   --parse light|full     fanout receivers: byte scan (default) or eventsource-stream + serde
//!   --no-raw               fanout: skip the raw baseline (for profiling mcpmux alone)
//!   --no-eras              fanout: skip the by-era rows (legacy holders only)
//!   --repeat R             fanout: burst rounds per N, the median shown (default 3)
//!   --warmup W             fanout: rounds per N run first and not counted (default 1):
//!                          the receivers' first reads in a process page-fault their
//!                          buffers in, whichever side runs then
//!   --smoke                tiny sizes; checks counts only (never time); exit 1 on a miss
//!   OTEL_EXPORTER_OTLP_ENDPOINT=URL (with OTEL_TRACES_SAMPLER(_ARG)): the in-process
//!                          mcpmux and the `mcpmux stdio` children export spans there
//!                          (BENCHMARKS.md, "Tracing overhead"); `forwarding` reports
//!                          how many spans the in-process mcpmux created
//! target/release/examples/loadgen relay PROGRAM [ARGS...]
//!                          not a scenario: the minimal stdio relay `forwarding` measures
//!                          as the floor of a process in between (loadgen/relay.rs)
//! target/release/examples/loadgen drive --calls N PROGRAM [ARGS...]
//!                          not a scenario: N echo calls through one stdio program (`{config}`
//!                          in ARGS: a mcpmux config for the scripted upstream), for a
//!                          profiler wrapping it (loadgen/drive.rs)
//! ```
//!
//! Why two runtimes in one process: client tasks (parsing SSE, building requests) must
//! not queue in front of the proxy's tasks on the same workers, yet everything should
//! stay one command. Both runtimes have 2 workers on a 2-core machine, so the clients'
//! CPU still competes with the proxy's (as in any same-machine benchmark); the raw
//! baseline gets exactly the same arrangement and clients, so the ratio is fair.
//! `memory` runs `mcpmux serve` as a child process instead, so its RSS is the proxy's;
//! so does `fleet`, whose instances are separate processes (see `loadgen/fleet.rs`).
//!
//! The scripted upstream and `mcpmux` are found next to this executable's parent
//! directory (`target/<profile>/`), so build the bins first (command above).

#[path = "loadgen/mod.rs"]
mod harness;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use harness::client::Parse;
use harness::fleet::{fleet_row, Side};
use harness::memory::memory;
use harness::peer::{peer_echo, peer_fanout, peer_storm};
use harness::proxy::{config_toml, Limits, Proxy};
use harness::scenarios::{
    fanout_holders, fanout_holders_on, fanout_mcpmux, fanout_raw, forwarding, read_storm, smoke,
    storm, ttl_read_storm, Bins, Env, Fanout, Holders, Isolated,
};
use harness::stats::{dms, group, mib, ms, rate};

// The allocator the mcpmux binary ships with (src/main.rs), so the in-process proxy and
// the raw baselines beside it are measured on it too.
#[cfg(unix)]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Parsed command line.
#[derive(Debug, Clone)]
struct Args {
    scenario: String,
    clients: Option<Vec<usize>>,
    updates: Option<u64>,
    iso: u64,
    rounds: u64,
    calls: usize,
    sessions: Vec<usize>,
    uris: usize,
    parse: Parse,
    peer: Option<PathBuf>,
    no_raw: bool,
    no_eras: bool,
    smoke: bool,
    /// Burst rounds per N in `fanout` (mcpmux and the batched raw writer each round).
    repeat: usize,
    /// Rounds per N in `fanout` run before those and not counted.
    warmup: usize,
}

fn list(v: &str) -> Result<Vec<usize>> {
    v.split(',')
        .map(|x| x.trim().replace('_', "").parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("not a list of numbers: {v}"))
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        scenario: String::new(),
        clients: None,
        updates: None,
        iso: 50,
        rounds: 50,
        calls: 5000,
        sessions: vec![1000, 10_000],
        uris: 100,
        parse: Parse::Light,
        peer: std::env::var_os("MCP_PROXY_MJS").map(PathBuf::from),
        no_raw: false,
        no_eras: false,
        smoke: false,
        repeat: 3,
        warmup: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{arg} needs a value"));
        match arg.as_str() {
            "--clients" => a.clients = Some(list(&value()?)?),
            "--updates" => a.updates = Some(value()?.parse()?),
            "--iso" => a.iso = value()?.parse()?,
            "--rounds" => a.rounds = value()?.parse()?,
            "--calls" => a.calls = value()?.parse()?,
            "--sessions" => a.sessions = list(&value()?)?,
            "--uris" => a.uris = value()?.parse()?,
            "--parse" => {
                a.parse = match value()?.as_str() {
                    "light" => Parse::Light,
                    "full" => Parse::Full,
                    other => bail!("--parse light|full, not {other}"),
                }
            }
            "--peer" => a.peer = Some(value()?.into()),
            "--no-raw" => a.no_raw = true,
            "--no-eras" => a.no_eras = true,
            "--smoke" => a.smoke = true,
            "--repeat" => a.repeat = value()?.parse::<usize>()?.max(1),
            "--warmup" => a.warmup = value()?.parse()?,
            "-h" | "--help" => {
                println!("usage: loadgen storm|fanout|read-storm|modern-upstream|metrics|forwarding|memory|fleet|peer|all [--clients 1,10] [--updates K] [--iso E] [--rounds K] [--calls M] [--sessions 1000,10000] [--uris U] [--repeat R] [--warmup W] [--parse light|full] [--peer mcp-proxy.mjs] [--no-raw] [--no-eras] [--smoke]");
                std::process::exit(0);
            }
            s if !s.starts_with('-') && a.scenario.is_empty() => a.scenario = s.to_owned(),
            s => bail!("unknown argument {s}"),
        }
    }
    if a.scenario.is_empty() {
        a.scenario = if a.smoke {
            "all".into()
        } else {
            bail!("name a scenario (or all)")
        };
    }
    Ok(a)
}

/// `target/<profile>/` (this executable lives in `target/<profile>/examples/`).
fn bins() -> Result<Bins> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .ok_or_else(|| anyhow!("cannot locate target dir from {}", exe.display()))?;
    let scripted = dir.join("scripted-upstream");
    if !scripted.exists() {
        bail!(
            "{} not found: run `cargo build --release --bins --examples` first",
            scripted.display()
        );
    }
    let mcpmux: PathBuf = dir.join("mcpmux");
    Ok(Bins {
        scripted,
        mcpmux: mcpmux.exists().then_some(mcpmux),
        relay: Some(exe),
    })
}

fn main() -> Result<()> {
    let mut argv = std::env::args().skip(1);
    match argv.next().as_deref() {
        Some("relay") => {
            let Some(program) = argv.next() else {
                bail!("usage: loadgen relay PROGRAM [ARGS...]");
            };
            return harness::relay::run(&program, &argv.collect::<Vec<_>>());
        }
        Some("drive") => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            return rt.block_on(harness::drive::run(&bins()?, argv));
        }
        _ => {}
    }
    let args = parse_args()?;
    // The in-process mcpmux (and the raw writer beside it) runs as `mcpmux serve` does
    // by default.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(mcpmux::run::SERVE_WORKERS.get())
        .thread_name("mcpmux")
        .enable_all()
        .build()?;
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("clients")
        .enable_all()
        .build()?;
    let telemetry = harness::otel::init(server.handle())?;
    let env = Env {
        server: server.handle().clone(),
        server_threads: Some("mcpmux".into()),
        bins: bins()?,
        parse: args.parse,
    };
    let result = clients.block_on(run(&args, &env));
    if let Some(t) = telemetry {
        t.shutdown();
    }
    clients.shutdown_timeout(Duration::from_secs(5));
    server.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn run(args: &Args, env: &Env) -> Result<()> {
    if args.smoke {
        smoke(env).await?;
        match harness::fleet::peers(env) {
            Ok(peers) => harness::fleet::smoke(env, &peers).await?,
            Err(why) => eprintln!("loadgen --smoke: fleet skipped: {why}"),
        }
        println!("loadgen --smoke: all counts as expected");
        return Ok(());
    }
    let all = args.scenario == "all";
    let mut known = false;
    let mut run_it = |name: &str| {
        let yes = all || args.scenario == name;
        known |= yes;
        yes
    };
    if run_it("storm") {
        run_storm(args, env).await?;
    }
    if run_it("fanout") {
        run_fanout(args, env).await?;
    }
    if run_it("read-storm") {
        run_read_storm(args, env).await?;
    }
    if run_it("modern-upstream") {
        run_modern_upstream(args, env).await?;
    }
    if run_it("metrics") {
        run_metrics_overhead(args, env).await?;
    }
    if run_it("forwarding") {
        run_forwarding(args, env).await?;
    }
    if run_it("memory") {
        run_memory(args, env).await?;
    }
    if args.scenario == "fleet" || all {
        known = true;
        match harness::fleet::peers(env) {
            Ok(peers) => run_fleet(args, env, &peers).await?,
            Err(why) if all => eprintln!("loadgen all: fleet skipped: {why}"),
            Err(why) => println!("\n### fleet: skipped ({why})"),
        }
    }
    if args.scenario == "peer" || (all && args.peer.is_some()) {
        known = true;
        run_peer(args, env).await?;
    }
    if !known {
        bail!("unknown scenario {}", args.scenario);
    }
    Ok(())
}

async fn run_storm(args: &Args, env: &Env) -> Result<()> {
    println!("\n### subscribe-storm: N clients subscribe to one URI at once\n");
    println!("| N | confirmed | upstream `resources/subscribe` | hub keys | hub (client, key) pairs | storm wall ms | setup ms (init+GET, not measured) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in args.clients.as_deref().unwrap_or(&[1, 10, 100, 1000]) {
        let r = storm(env, n).await?;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            group(n as u64),
            r.confirmed,
            r.upstream_subscribes,
            r.hub_keys,
            r.hub_client_subs,
            dms(r.wall),
            dms(r.connect)
        );
    }
    Ok(())
}

/// Events per chunk in the batched raw baseline (the scripted upstream yields to its
/// writer every 256 updates, so mcpmux sees bursts of about that size too).
const RAW_BATCH: u64 = 256;

fn default_burst(n: usize) -> u64 {
    (500_000 / n.max(1) as u64).clamp(1000, 20_000)
}

async fn run_fanout(args: &Args, env: &Env) -> Result<()> {
    let ns = args.clients.clone().unwrap_or_else(|| vec![10, 100, 1000]);
    let mut rows: Vec<(usize, Fanout, Fanout, Fanout)> = vec![];
    let mut spreads: Vec<(usize, Vec<f64>)> = vec![];
    let mut iso_spreads: Vec<(usize, Vec<f64>)> = vec![];
    let mut warmups: Vec<Vec<f64>> = vec![];
    for &n in &ns {
        let k = args.updates.unwrap_or_else(|| default_burst(n));
        // The first bursts at a size warm the process for both sides: the receivers'
        // buffers and sample vectors are page-faulted in then (BENCHMARKS.md, "Warm-up").
        let mut warm = vec![];
        for _ in 0..args.warmup {
            let m = fanout_mcpmux(env, n, k, args.iso).await?;
            if !args.no_raw {
                let rb = fanout_raw(env, n, k, args.iso, RAW_BATCH).await?;
                warm.push(m.burst.per_sec() / rb.burst.per_sec().max(1e-9));
            }
        }
        warmups.push(warm);
        let mut m = fanout_mcpmux(env, n, k, args.iso).await?;
        let (mut r, mut rb) = if args.no_raw {
            (Fanout::default(), Fanout::default())
        } else {
            (
                fanout_raw(env, n, k, args.iso, 1).await?,
                fanout_raw(env, n, k, 0, RAW_BATCH).await?,
            )
        };
        if !args.no_raw && args.repeat > 1 {
            // Bursts again, mcpmux and the batched raw writer back to back each round
            // (the one-event raw writer is never the best at N ≥ 10 and takes longest),
            // each side's isolated updates too: the rows shown are the round of median
            // burst ratio and the round of median isolated ratio, the others give the
            // spread. The side that runs first alternates (the raw writer first in the
            // even rounds after the first), so neither side always runs in a process
            // the other has just warmed.
            let ratio = |m: &Fanout, rb: &Fanout| {
                m.burst.per_sec() / r.burst.per_sec().max(rb.burst.per_sec()).max(1e-9)
            };
            let iso_ratio =
                |m: &Isolated, raw: &Isolated| m.all.p50 as f64 / (raw.all.p50 as f64).max(1.0);
            let mut rounds = vec![(ratio(&m, &rb), m.clone(), rb.clone())];
            let mut isos = vec![(iso_ratio(&m.iso, &r.iso), m.iso.clone(), r.iso.clone())];
            for _ in 1..args.repeat {
                let (m2, rb2) = if rounds.len() % 2 == 1 {
                    let rb2 = fanout_raw(env, n, k, args.iso, RAW_BATCH).await?;
                    (fanout_mcpmux(env, n, k, args.iso).await?, rb2)
                } else {
                    let m2 = fanout_mcpmux(env, n, k, args.iso).await?;
                    (m2, fanout_raw(env, n, k, args.iso, RAW_BATCH).await?)
                };
                isos.push((
                    iso_ratio(&m2.iso, &rb2.iso),
                    m2.iso.clone(),
                    rb2.iso.clone(),
                ));
                rounds.push((ratio(&m2, &rb2), m2, rb2));
            }
            let ratios: Vec<f64> = rounds.iter().map(|r| r.0).collect();
            rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (_, mid_m, mid_rb) = rounds.swap_remove(rounds.len() / 2);
            spreads.push((n, ratios));
            if args.iso > 0 {
                iso_spreads.push((n, isos.iter().map(|i| i.0).collect()));
            }
            isos.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (_, mid_iso, mid_raw_iso) = isos.swap_remove(isos.len() / 2);
            m = Fanout {
                iso: mid_iso,
                ..mid_m
            };
            r.iso = mid_raw_iso;
            rb = mid_rb;
        }
        rows.push((n, m, r, rb));
    }
    println!(
        "\n### fanout, burst: the upstream emits K updates as fast as it can; N clients hold the URI (receivers: {:?})\n",
        args.parse
    );
    println!("| N | K | side | delivered / expected | wall ms | deliveries/s | mcpmux/best raw | server CPU µs/delivery | rest of the machine's CPU µs/delivery | machine busy | events per client read | latency p50 ms | p99 ms | max ms |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, m, r, rb) in &rows {
        let best = r.burst.per_sec().max(rb.burst.per_sec()).max(1e-9);
        let ratio = m.burst.per_sec() / best;
        let ratio = if args.no_raw {
            "–".to_owned()
        } else {
            format!("{ratio:.2}")
        };
        let batched = format!("raw SSE, {RAW_BATCH} events/send");
        let sides = [
            ("mcpmux", m, ratio),
            ("raw SSE, 1 event/send", r, String::new()),
            (batched.as_str(), rb, String::new()),
        ];
        for (side, f, ratio) in sides.into_iter().take(if args.no_raw { 1 } else { 3 }) {
            let b = &f.burst;
            println!(
                "| {} | {} | {side} | {} / {} | {} | {} | {ratio} | {:.2} | {:.2} | {:.0} % | {:.0} | {} | {} | {} |",
                group(*n as u64),
                group(b.k),
                group(b.delivered),
                group(b.expected),
                dms(b.wall),
                rate(b.per_sec()),
                b.cpu_us_per_delivery(),
                b.rest_us_per_delivery(),
                b.machine_busy_pct(),
                b.events_per_read(),
                ms(b.lat.p50),
                ms(b.lat.p99),
                ms(b.lat.max)
            );
        }
    }
    if !spreads.is_empty() {
        println!("\nmcpmux/best raw, burst, each round in the order run (the row above is the median round; mcpmux runs first in the odd rounds, the raw writer in the even ones; the warm-up rounds ran before them and are not counted):");
        for ((n, ratios), warm) in spreads.iter().zip(&warmups) {
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let warm: Vec<String> = warm.iter().map(|r| format!("{r:.2}")).collect();
            let warm = if warm.is_empty() {
                String::new()
            } else {
                format!(" (warm-up: {})", warm.join(" / "))
            };
            println!("- N = {}: {}{warm}", group(*n as u64), each.join(" / "));
        }
    }
    if args.iso > 0 {
        println!(
            "\n### fanout, isolated: one update at a time, the next only after all N received it\n"
        );
        println!("| N | events | side | delivered / expected | per delivery p50 ms | p99 ms | max ms | to all N: p50 ms | p99 ms | mcpmux/raw (to all, p50) |");
        println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for (n, m, r, _) in &rows {
            let ratio = m.iso.all.p50 as f64 / (r.iso.all.p50 as f64).max(1.0);
            let sides = [
                ("mcpmux", m, format!("{ratio:.1}×")),
                ("raw SSE", r, String::new()),
            ];
            for (side, f, ratio) in sides.into_iter().take(if args.no_raw { 1 } else { 2 }) {
                let i = &f.iso;
                println!(
                    "| {} | {} | {side} | {} / {} | {} | {} | {} | {} | {} | {ratio} |",
                    group(*n as u64),
                    i.events,
                    group(i.delivered),
                    group(i.expected),
                    ms(i.lat.p50),
                    ms(i.lat.p99),
                    ms(i.lat.max),
                    ms(i.all.p50),
                    ms(i.all.p99)
                );
            }
        }
        if !iso_spreads.is_empty() {
            println!("\nmcpmux/raw, isolated (to all, p50), each round in the order run (the row above is the median round):");
            for (n, ratios) in &iso_spreads {
                let each: Vec<String> = ratios.iter().map(|r| format!("{r:.1}×")).collect();
                println!("- N = {}: {}", group(*n as u64), each.join(" / "));
            }
        }
    }
    let peaks: Vec<String> = rows
        .iter()
        .map(|(n, m, _, _)| {
            format!(
                "N={n}: peak outbox {}, coalesced {}, lost {}",
                m.peak_queue,
                m.coalesced,
                m.lost()
            )
        })
        .collect();
    println!("\nmcpmux burst: {}", peaks.join("; "));
    if args.no_eras {
        return Ok(());
    }
    run_fanout_eras(args, env, &rows).await
}

/// The same fan-out with 2026-07-28 listen streams as holders, and with half of each
/// era, beside the legacy rows of the same run.
async fn run_fanout_eras(
    args: &Args,
    env: &Env,
    rows: &[(usize, Fanout, Fanout, Fanout)],
) -> Result<()> {
    println!(
        "\n### fanout by era: the same burst and isolated updates, holders of each protocol era\n"
    );
    println!("| N | holders | deliveries/s | ÷ legacy | to all N p50 ms | ÷ legacy | latency p50 ms | coalesced | lost |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (n, first, _, _) in rows {
        let k = first.burst.k;
        // Every era measured here, back to back, legacy included: the main table's
        // legacy row ran first in the process and before the raw writer, so it is not
        // the one to compare with.
        let mut eras = vec![];
        for h in [Holders::Legacy, Holders::Modern, Holders::Mixed] {
            eras.push((h, fanout_holders(env, *n, k, args.iso, h).await?));
        }
        let legacy = eras[0].1.clone();
        for (h, f) in &eras {
            let rate_ratio = f.burst.per_sec() / legacy.burst.per_sec().max(1e-9);
            let all_ratio = f.iso.all.p50 as f64 / (legacy.iso.all.p50 as f64).max(1.0);
            println!(
                "| {} | {} | {} | {rate_ratio:.2} | {} | {all_ratio:.2} | {} | {} | {} |",
                group(*n as u64),
                h.label(),
                rate(f.burst.per_sec()),
                ms(f.iso.all.p50),
                ms(f.burst.lat.p50),
                f.coalesced,
                f.lost()
            );
        }
    }
    Ok(())
}

async fn run_read_storm(args: &Args, env: &Env) -> Result<()> {
    println!("\n### read-storm: K rounds of (one update → all N re-read at once)\n");
    println!("| N | K | client reads | upstream reads | upstream reads / update | hit ratio | cache hits / joined / fetches | mcpmux read p50 ms | p99 ms | direct stdio p50 ms | p99 ms |");
    println!("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for &n in args.clients.as_deref().unwrap_or(&[1, 10, 100]) {
        let r = read_storm(env, n, args.rounds).await?;
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.3} | {} / {} / {} | {} | {} | {} | {} |",
            n,
            r.k,
            group(r.client_reads),
            r.upstream_reads,
            r.reads_per_update(),
            r.hit_ratio(),
            r.cache_hits,
            r.cache_joined,
            r.cache_fetches,
            ms(r.lat.p50),
            ms(r.lat.p99),
            ms(r.direct.p50),
            ms(r.direct.p99)
        );
    }
    Ok(())
}

/// The fan-out with and without a client scraping `/metrics` every 10 ms (Prometheus
/// scrapes every 15 s by default: this is 1,500× that), in one run, alternating.
async fn run_metrics_overhead(args: &Args, env: &Env) -> Result<()> {
    println!("\n### metrics overhead: the same fan-out, /metrics scraped every 10 ms or not (legacy holders)\n");
    println!("| N | scraping | scrapes | deliveries/s | ÷ unscraped | to all N p50 ms | ÷ unscraped | lost |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let every = Some(Duration::from_millis(10));
    for &n in args.clients.as_deref().unwrap_or(&[100, 1000]) {
        let k = args.updates.unwrap_or_else(|| default_burst(n));
        let off = fanout_holders_on(env, n, k, args.iso, Holders::Legacy, "legacy", None).await?;
        let on = fanout_holders_on(env, n, k, args.iso, Holders::Legacy, "legacy", every).await?;
        for (label, f) in [("no", &off), ("every 10 ms", &on)] {
            println!(
                "| {} | {label} | {} | {} | {:.2} | {} | {:.2} | {} |",
                group(n as u64),
                f.scrapes,
                rate(f.burst.per_sec()),
                f.burst.per_sec() / off.burst.per_sec().max(1e-9),
                ms(f.iso.all.p50),
                f.iso.all.p50 as f64 / (off.iso.all.p50 as f64).max(1.0),
                f.lost()
            );
        }
    }
    Ok(())
}

/// The same fan-out (half legacy sessions, half listens) through a 2026-07-28
/// upstream (mcpmux's one union listen) beside a legacy one, in one run; then a read
/// storm of a URI nobody holds, served by the TTL cache from the modern upstream.
async fn run_modern_upstream(args: &Args, env: &Env) -> Result<()> {
    println!("\n### modern upstream: the same burst and isolated updates through a legacy and a 2026-07-28 upstream (holders: half and half)\n");
    println!("| N | upstream | deliveries/s | ÷ legacy upstream | to all N p50 ms | ÷ legacy upstream | coalesced | lost |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for &n in args.clients.as_deref().unwrap_or(&[10, 100, 1000]) {
        let k = args.updates.unwrap_or_else(|| default_burst(n));
        let legacy = fanout_holders_on(env, n, k, args.iso, Holders::Mixed, "legacy", None).await?;
        let modern = fanout_holders_on(env, n, k, args.iso, Holders::Mixed, "modern", None).await?;
        for (label, f) in [("legacy", &legacy), ("2026-07-28", &modern)] {
            let rate_ratio = f.burst.per_sec() / legacy.burst.per_sec().max(1e-9);
            let all_ratio = f.iso.all.p50 as f64 / (legacy.iso.all.p50 as f64).max(1.0);
            println!(
                "| {} | {label} | {} | {rate_ratio:.2} | {} | {all_ratio:.2} | {} | {} |",
                group(n as u64),
                rate(f.burst.per_sec()),
                ms(f.iso.all.p50),
                f.coalesced,
                f.lost()
            );
        }
    }
    println!("\n### TTL read storm: K rounds of N concurrent reads of a URI nobody holds (`ttlMs` 600000 from the 2026-07-28 upstream; none from the legacy one)\n");
    println!("| upstream | N | K | client reads | upstream reads | read p50 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for era in ["legacy", "modern"] {
        for &n in &[10, 100] {
            let r = ttl_read_storm(env, n, args.rounds, era).await?;
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.era,
                r.n,
                r.k,
                group(r.client_reads),
                r.upstream_reads,
                ms(r.lat.p50),
                ms(r.lat.p99)
            );
        }
    }
    Ok(())
}

async fn run_forwarding(args: &Args, env: &Env) -> Result<()> {
    let warmup = (args.calls / 10).clamp(1, 500);
    let spans0 = harness::otel::spans();
    let rows = forwarding(env, args.calls, warmup).await?;
    let spans = harness::otel::spans() - spans0;
    println!(
        "\n### forwarding: sequential `tools/call echo`, {} calls per path (after {warmup} warm-up), interleaved\n",
        group(args.calls as u64)
    );
    println!(
        "Tracing {}: the in-process mcpmux created {} spans ({:.2} per HTTP call).\n",
        if mcpmux::telemetry::enabled() {
            "on (OTEL_EXPORTER_OTLP_ENDPOINT)"
        } else {
            "off"
        },
        group(spans),
        spans as f64 / (warmup + args.calls) as f64
    );
    println!("| path | p50 ms | p99 ms | mean ms | added p50 vs direct ms | ratio p50 |");
    println!("|---|---:|---:|---:|---:|---:|");
    // The stateless rows (the direct stateless call and those after it) are compared
    // with the direct stateless call, every other one with direct stdio.
    let first_stateless = rows
        .iter()
        .position(|r| r.path.starts_with("direct stateless"))
        .unwrap_or(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let base = if i >= first_stateless {
            rows[first_stateless].lat
        } else {
            rows[0].lat
        };
        println!(
            "| {} | {} | {} | {} | {} | {:.2} |",
            r.path,
            ms(r.lat.p50),
            ms(r.lat.p99),
            ms(r.lat.mean),
            ms(r.lat.p50.saturating_sub(base.p50)),
            r.lat.p50 as f64 / (base.p50 as f64).max(1.0)
        );
    }
    println!(
        "\nThe stateless rows compare with the direct stateless call; the others with \
         direct stdio."
    );
    Ok(())
}

async fn run_memory(args: &Args, env: &Env) -> Result<()> {
    let Some(mcpmux) = env.bins.mcpmux.clone() else {
        bail!("memory needs target/<profile>/mcpmux: cargo build --release --bins");
    };
    println!("\n### memory: RSS of `mcpmux serve` (child process) with idle sessions and held subscriptions\n");
    println!("| sessions | subscriptions | upstream URIs subscribed | RSS baseline MiB | RSS with sessions MiB | bytes / session | RSS with subscriptions MiB | bytes / subscription | one update to all, ms |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut to_sessions = std::collections::HashMap::new();
    for (i, &s) in args.sessions.iter().enumerate() {
        let uris = if i == 0 { args.uris } else { 0 };
        let r = memory(&mcpmux, &env.bins.scripted, s, uris).await?;
        to_sessions.insert(s, r.one_update);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            group(s as u64),
            group(r.subscriptions as u64),
            r.upstream_subscribed,
            mib(r.baseline),
            mib(r.with_sessions),
            group(r.per_session().round() as u64),
            r.with_subscriptions.map_or("–".into(), mib),
            r.per_subscription()
                .map_or("–".into(), |b| group(b.round() as u64)),
            dms(r.one_update)
        );
    }
    let listens = args.sessions.iter().copied().max().unwrap_or(10_000);
    let r = harness::memory::memory_listens(&mcpmux, &env.bins.scripted, listens).await?;
    println!("\n### memory: idle 2026-07-28 `subscriptions/listen` streams on one URI (no session each)\n");
    println!("| listens | RSS baseline MiB | RSS with listens MiB | bytes / listen | one update to all, ms | ÷ to as many sessions |");
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {} | {} | {} |",
        group(listens as u64),
        mib(r.baseline),
        mib(r.with_listens),
        group(r.per_listen().round() as u64),
        dms(r.one_update),
        to_sessions.get(&listens).map_or("–".into(), |s| format!(
            "{:.2}",
            r.one_update.as_secs_f64() / s.as_secs_f64()
        ))
    );
    Ok(())
}

/// N clients over three instances with one `[fleet]`, beside one instance holding all
/// N and three instances without `[fleet]`, in one run (`loadgen/fleet.rs`).
async fn run_fleet(args: &Args, env: &Env, peers: &harness::fleet::Peers) -> Result<()> {
    let nats = harness::fleet::start_nats(peers).await?;
    let ns = args.clients.clone().unwrap_or_else(|| vec![30, 300]);
    let mut rows = vec![];
    for &n in &ns {
        for side in Side::ALL {
            let r = fleet_row(
                env,
                &peers.mcpmux,
                Some(&nats),
                side,
                n,
                args.iso,
                args.rounds,
            );
            rows.push(r.await?);
        }
    }
    drop(nats);
    println!("\n### fleet: N clients spread over 3 `mcpmux serve` instances with one `[fleet]` (NATS), beside 1 instance holding all N and 3 instances without `[fleet]`; one Streamable HTTP scripted upstream\n");
    println!("| N | side | upstream `resources/subscribe` | upstream sessions holding the URI | isolated: delivered / expected | to all N p50 ms | p99 ms | ÷ 1 instance (p50 / p99) | per delivery p50 ms | read rounds | client reads | upstream reads | upstream reads / update | read p50 ms | p99 ms |");
    println!("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let one = rows
            .iter()
            .find(|o| o.n == r.n && o.side == Side::One)
            .unwrap_or(r);
        let ratio = |a: u64, b: u64| a as f64 / (b as f64).max(1.0);
        println!(
            "| {} | {} | {} | {} | {} / {} | {} | {} | {:.2} / {:.2} | {} | {} | {} | {} | {:.2} | {} | {} |",
            group(r.n as u64),
            r.side.label(),
            r.upstream_subscribes,
            r.upstream_subscribers,
            group(r.iso.delivered),
            group(r.iso.expected),
            ms(r.iso.all.p50),
            ms(r.iso.all.p99),
            ratio(r.iso.all.p50, one.iso.all.p50),
            ratio(r.iso.all.p99, one.iso.all.p99),
            ms(r.iso.lat.p50),
            r.rounds,
            group(r.client_reads),
            r.upstream_reads,
            r.reads_per_update(),
            ms(r.read_lat.p50),
            ms(r.read_lat.p99)
        );
    }
    Ok(())
}

async fn run_peer(args: &Args, env: &Env) -> Result<()> {
    let Some(script) = args.peer.clone() else {
        bail!("peer needs --peer PATH/TO/mcp-proxy/dist/bin/mcp-proxy.mjs (or $MCP_PROXY_MJS)");
    };
    let scripted = &env.bins.scripted;
    println!("\n### peer: npm mcp-proxy vs mcpmux, same scripted upstream, same clients\n");
    println!("| measurement | mcp-proxy | mcpmux | mcpmux/mcp-proxy |");
    println!("|---|---:|---:|---:|");
    let calls = args.calls.min(2000);
    let proxy = Proxy::start(&env.server, &config_toml(scripted, Limits::default()))?;
    let (p, m) = peer_echo(&script, scripted, &proxy.url, calls, 100).await?;
    proxy.stop().await;
    println!(
        "| echo round trip over HTTP, p50 ms ({calls} calls, interleaved) | {} | {} | {:.2} |",
        ms(p.p50),
        ms(m.p50),
        m.p50 as f64 / p.p50.max(1) as f64
    );
    println!(
        "| echo round trip over HTTP, p99 ms | {} | {} | {:.2} |",
        ms(p.p99),
        ms(m.p99),
        m.p99 as f64 / p.p99.max(1) as f64
    );
    for n in [10, 100] {
        let (pc, pu, pw) = peer_storm(&script, scripted, n).await?;
        let m = storm(env, n).await?;
        println!(
            "| storm N={n}: confirmed / upstream subscribes / wall ms | {pc} / {pu} / {} | {} / {} / {} | |",
            dms(pw),
            m.confirmed,
            m.upstream_subscribes,
            dms(m.wall)
        );
    }
    let (n, k) = (100, 1000);
    let pb = peer_fanout(&script, scripted, n, k, args.parse).await?;
    let mb = fanout_mcpmux(env, n, k, 0).await?.burst;
    println!(
        "| fanout N={n} K={k}: delivered / expected | {} / {} | {} / {} | |",
        group(pb.delivered),
        group(pb.expected),
        group(mb.delivered),
        group(mb.expected)
    );
    println!(
        "| fanout N={n} K={k}: deliveries/s | {} | {} | {:.2} |",
        rate(pb.per_sec()),
        rate(mb.per_sec()),
        mb.per_sec() / pb.per_sec().max(1e-9)
    );
    println!(
        "| fanout N={n} K={k}: stamped deliveries (`_meta` kept) / latency p50 ms | {} / {} | {} / {} | |",
        group(pb.lat.n as u64),
        ms(pb.lat.p50),
        group(mb.lat.n as u64),
        ms(mb.lat.p50)
    );
    Ok(())
}
