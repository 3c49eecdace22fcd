//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/interop/package-lock.json`, run by `tests/interop/conformance.sh`) against
//! `mcpmux serve` in front of one scripted upstream (with the suite's fixture surface,
//! `SCRIPTED_CONFORMANCE=1`, in dual era, `SCRIPTED_ERA=dual`: mcpmux speaks 2026-07-28
//! to it, so the legacy set goes through mcpmux's legacy side in front of a modern
//! upstream and the modern set reaches the upstream's MRTR and diagnostic fixtures), for
//! the requirement sets `2025-11-25` and `2026-07-28`, one after the other against the
//! same mcpmux. Every scenario must pass except those listed, each
//! with its reason, in `tests/interop/conformance/expected-failures.scripted.*.yml`; the
//! suite fails the run on a new failure *and* on a listed one that now passes, so the
//! lists cannot go stale. `docs/notes/conformance.md` has the scenarios and what each
//! needs.

mod common;
#[path = "interop/harness.rs"]
mod harness;

use std::process::Command;

use harness::*;

fn run_set(url: &str, requirements: &str) -> (bool, String) {
    let dir = interop_dir();
    let expected = dir
        .join("conformance")
        .join(format!("expected-failures.scripted.{requirements}.yml"));
    let out = Command::new("bash")
        .arg(dir.join("conformance.sh"))
        .args(["server", "--url", url, "--requirements", requirements])
        .arg("--expected-failures")
        .arg(&expected)
        .output()
        .expect("run conformance.sh");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn conformance_suite_2025_11_25_and_2026_07_28() {
    ensure_peers();
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.scripted]\ncommand = {}\n\
         env = {{ SCRIPTED_CONFORMANCE = \"1\", SCRIPTED_ERA = \"dual\" }}\n",
        serde_json::to_string(common::scripted_upstream()).unwrap()
    );
    let (mcpmux, url) = start_mcpmux(&config);
    for set in ["2025-11-25", "2026-07-28"] {
        let (ok, text) = run_set(&url, set);
        assert!(
            ok,
            "conformance {set}: a failure not in the expected list, or a listed one that passes now\n{}\n--- mcpmux ---\n{}",
            tail(&text, 80),
            mcpmux.logs()
        );
    }
}
