//! The conformance suite's CLIENT scenarios with mcpmux as the client of the scenario's
//! server (docs/architecture.md, "OAuth toward upstreams"): `conformance client --command
//! "node tests/interop/oauth_driver.mjs" --requirements 2025-11-25`, then the same with
//! `2026-07-28`. The driver starts `mcpmux serve` (this test's binary) with the scenario's
//! URL as its one upstream and a headless `$BROWSER`, and drives an SDK client through it;
//! every `auth/*` scenario of both sets is mcpmux logging in by itself (discovery,
//! registration, PKCE, `resource`, `iss`, scopes, step-up, refresh tokens, a changed
//! authorization server). Every scenario must pass except those listed, each with its
//! reason, in `tests/interop/conformance/expected-failures.oauth-client.*.yml` (none is a
//! required auth scenario); a listed one that passes fails the run too.

use crate::harness;

use std::process::Command;

use harness::*;

/// Per-scenario bound the suite enforces (the default 30 s is tight for a login with a
/// browser process on a loaded two-core machine).
const SCENARIO_TIMEOUT_MS: &str = "90000";

fn run_client_set(requirements: &str) {
    let dir = interop_dir();
    let expected = dir
        .join("conformance")
        .join(format!("expected-failures.oauth-client.{requirements}.yml"));
    let driver = dir.join("oauth_driver.mjs");
    let out = Command::new("bash")
        .arg(dir.join("conformance.sh"))
        .args(["client", "--command"])
        .arg(format!("node {}", driver.display()))
        .args([
            "--requirements",
            requirements,
            "--timeout",
            SCENARIO_TIMEOUT_MS,
        ])
        .arg("--expected-failures")
        .arg(&expected)
        .env("MCPMUX_BIN", env!("CARGO_BIN_EXE_mcpmux"))
        .output()
        .expect("run conformance.sh");
    let text = output_text(&out);
    let summary = text
        .find("=== SUITE SUMMARY ===")
        .map_or(tail(&text, 120), |i| text[i..].to_owned());
    println!("conformance client {requirements}:\n{summary}");
    assert!(
        out.status.success(),
        "conformance client {requirements}: a failure not in the expected list, or a listed one that passes now\n{}",
        tail(&text, 200)
    );
}

// One test per set, so the two sets run side by side: 36-44 s for both in three runs on
// two cores, against 79 s one after the other (each set runs its scenarios in parallel
// too; much of their time is spent starting processes: the driver, mcpmux, a browser).

#[test]
fn conformance_client_scenarios_2025_11_25_with_mcpmux_as_the_client() {
    ensure_peers();
    run_client_set("2025-11-25");
}

#[test]
fn conformance_client_scenarios_2026_07_28_with_mcpmux_as_the_client() {
    ensure_peers();
    run_client_set("2026-07-28");
}
