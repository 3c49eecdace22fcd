//! The integration tests, built as one test binary: each `tests/<area>.rs` is a module
//! here. `cargo test` runs test binaries one after another, so one binary lets the slow
//! tests (the ones that wait on Node peers, NATS or the conformance suite) run side by side
//! with the rest, and links the crate into one executable rather than forty. Run one
//! area with `cargo test --test integration <area>::`.
//!
//! Shared by the areas: `common` (configs, the scripted upstream, clients), the interop
//! `harness` and the conformance `fixture` (under `tests/interop/`), and the load
//! generator's library (`examples/loadgen/`) for the benchmark smoke test.

mod common;
#[path = "interop/fixture.rs"]
mod fixture;
#[path = "interop/harness.rs"]
mod harness;
#[path = "../examples/loadgen/mod.rs"]
mod loadgen;

mod aggregation;
mod bench_smoke;
mod cache;
mod churn;
mod cli;
mod conformance;
mod connect_bridge;
mod connection_hygiene;
mod core_http;
mod dual_faces;
mod fidelity;
mod fleet;
mod fleet_mrtr;
mod fleet_owner_killed;
mod fuzz_corpus;
mod hostile_table;
mod hot_reload;
mod http_upstream_association;
mod import;
mod interop;
mod interop_modern;
mod interop_modern_upstream;
mod lazy_upstream;
mod listen_release;
mod log_levels;
mod modern_http;
mod modern_upstream;
mod oauth_conformance;
mod oauth_e2e;
mod oauth_store;
mod openmetrics_strict;
mod operator_view;
mod profiles;
mod profiles_import;
mod reload_listens;
mod shutdown;
mod slow_consumer;
mod status_page;
mod stdio_mode;
mod stdio_pipes;
mod tracing;
mod upstream_faults;

/// Every `tests/<area>.rs` is declared above: with `autotests = false` cargo builds no
/// test file on its own, so a file left out here would never run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let declared = include_str!("integration.rs");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut missing = vec![];
    for entry in std::fs::read_dir(&dir).expect("read tests/") {
        let path = entry.expect("a tests/ entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_rs = path.extension().is_some_and(|e| e == "rs");
        if is_rs && stem != "integration" && !declared.contains(&format!("\nmod {stem};\n")) {
            missing.push(format!("tests/{stem}.rs"));
        }
    }
    assert!(
        missing.is_empty(),
        "not modules of tests/integration.rs, so never run: {}",
        missing.join(", ")
    );
}
