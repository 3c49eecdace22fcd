//! The load generator's scenarios at tiny sizes, in-process, asserting counts only
//! (never time): one upstream subscribe for N clients, every client receives every
//! update (0 lost) on mcpmux and on the raw SSE baseline, one upstream read per update,
//! and every forwarding path answers; and the fleet's sides, with the nats-server
//! `tests/interop/setup.sh` installs (or `$NATS_SERVER`): the test runs setup.sh and
//! fails, naming what is missing, when no nats-server runs. Shares its code with
//! `examples/loadgen.rs`.

use crate::common;
use crate::harness as interop;
use crate::loadgen as harness;

use harness::client::Parse;
use harness::scenarios::{
    fanout_holders, fanout_mcpmux, fanout_raw, forwarding, read_storm, storm, Bins, Env, Holders,
    URI,
};

fn env_with(parse: Parse) -> Env {
    Env {
        server: tokio::runtime::Handle::current(),
        server_threads: None,
        bins: Bins {
            scripted: common::scripted_upstream().into(),
            mcpmux: Some(env!("CARGO_BIN_EXE_mcpmux").into()),
            relay: None,
        },
        parse,
    }
}

fn env() -> Env {
    env_with(Parse::Full)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_of_n_clients_sends_one_upstream_subscribe() {
    for n in [1, 3] {
        let r = storm(&env(), n).await.unwrap();
        assert_eq!(r.confirmed, n, "{r:?}");
        assert_eq!(r.upstream_subscribes, 1, "{URI}: {r:?}");
        assert_eq!((r.hub_keys, r.hub_client_subs), (1, n), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_delivers_every_update_to_every_client_of_either_era() {
    let mut runs = vec![];
    for parse in [Parse::Full, Parse::Light] {
        let env = env_with(parse);
        runs.push(fanout_mcpmux(&env, 3, 3, 2).await.unwrap());
        for holders in [Holders::Modern, Holders::Mixed] {
            runs.push(fanout_holders(&env, 3, 3, 2, holders).await.unwrap());
        }
        runs.push(fanout_raw(&env, 3, 3, 2, 1).await.unwrap());
        runs.push(fanout_raw(&env, 3, 3, 2, 2).await.unwrap());
    }
    for f in &runs {
        assert_eq!(f.iso.delivered, 6, "{f:?}");
        assert_eq!(
            f.iso.all.n, 2,
            "two isolated events, each seen by all: {f:?}"
        );
        assert_eq!(f.burst.delivered, 9, "0 lost: {f:?}");
        assert_eq!(f.burst.lat.n, 9, "every update carried its stamp: {f:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_storm_costs_one_upstream_read_per_update() {
    let r = read_storm(&env(), 3, 3).await.unwrap();
    assert_eq!(r.updates_delivered, 9, "{r:?}");
    assert_eq!(r.client_reads, 9, "{r:?}");
    assert_eq!(r.upstream_reads, 3, "{r:?}");
    assert_eq!(r.direct.n, 9, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_paths_all_answer() {
    let rows = forwarding(&env(), 5, 1).await.unwrap();
    // direct stdio, mcpmux stdio, mcpmux HTTP; the stateless 2026-07-28 calls direct,
    // through the in-process mcpmux and through a `mcpmux serve` child.
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(rows[5].path.contains("mcpmux serve"), "{rows:?}");
    for row in &rows {
        assert_eq!(row.lat.n, 5, "{row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_sides_cost_one_upstream_subscription_and_read_per_update() {
    interop::ensure_peers();
    let env = env();
    let peers = harness::fleet::peers(&env)
        .unwrap_or_else(|why| panic!("the fleet smoke test cannot run: {why}"));
    harness::fleet::smoke(&env, &peers)
        .await
        .unwrap_or_else(|e| panic!("the fleet smoke test failed: {e:#}"));
}

/// `loadgen drive` (the callgrind driver of BENCHMARKS.md): N echo calls through
/// `mcpmux stdio` with the `{config}` it writes, then a clean exit; bad arguments and a
/// program that is no MCP server are errors, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_runs_calls_through_mcpmux_stdio_and_waits_for_its_exit() {
    let bins = env().bins;
    let mcpmux = env!("CARGO_BIN_EXE_mcpmux").to_owned();
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let ok = argv(&["--calls", "3", &mcpmux, "stdio", "--config", "{config}"]);
    harness::drive::run(&bins, ok.into_iter()).await.unwrap();
    let no_count = argv(&["--calls", "many", &mcpmux]);
    assert!(harness::drive::run(&bins, no_count.into_iter())
        .await
        .is_err());
    let not_mcp = argv(&["--calls", "1", "true"]);
    assert!(harness::drive::run(&bins, not_mcp.into_iter())
        .await
        .is_err());
}
