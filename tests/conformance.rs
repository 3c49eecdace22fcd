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
//!
//! Then the suite against **its own fixture servers** (`tests/interop/fixture.rs`): the
//! 0.1.16 fixture with the 0.1.16 suite, and the dual-era fixture of the 0.2.0 line with
//! both requirement sets, each run once against the fixture directly and once through
//! `mcpmux serve` with the fixture as its one `url =` upstream (`protocol = "auto"`). A
//! check that passes directly and fails through mcpmux fails the test; no expected
//! failures are listed for these runs (what fails directly may fail through mcpmux).

use crate::common;
use crate::fixture;
use crate::harness;

use std::process::Command;

use fixture::{regressions, run_suite, totals, Fixture, Suite};
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
    let text = output_text(&out);
    (out.status.success(), text)
}

#[test]
fn conformance_suite_2025_11_25_and_2026_07_28() {
    ensure_peers();
    // A profile of the one server: its URL must pass as the default one does.
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.scripted]\ncommand = {cmd}\n\
         env = {{ SCRIPTED_CONFORMANCE = \"1\", SCRIPTED_ERA = \"dual\" }}\n\n\
         [profiles.conf]\nservers = [\"scripted\"]\n",
        cmd = serde_json::to_string(common::scripted_upstream()).unwrap()
    );
    let (mcpmux, url) = start_mcpmux(&config);
    let profile = format!("{url}/conf");
    for target in [&url, &profile] {
        for set in ["2025-11-25", "2026-07-28"] {
            let (ok, text) = run_set(target, set);
            assert!(
                ok,
                "conformance {set} at {target}: a failure not in the expected list, or a listed one that passes now\n{}\n--- mcpmux ---\n{}",
                tail(&text, 80),
                mcpmux.logs()
            );
        }
    }
}

/// Runs `suite` against `fixture` directly and through a fresh mcpmux in front of it;
/// fails on what passes directly and not through mcpmux. Prints both totals.
fn compare(name: &str, fixture: &Fixture, suite: Suite) {
    let (direct, direct_text) = run_suite(suite, &fixture.url);
    assert!(
        !direct.is_empty(),
        "{name}: the suite saved no results directly\n{}",
        tail(&direct_text, 60)
    );
    let config = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\n\n[servers.fixture]\nurl = {}\n",
        toml_str(&fixture.url)
    );
    let (mcpmux, url) = start_mcpmux(&config);
    let (through, through_text) = run_suite(suite, &url);
    let (dp, df) = totals(&direct);
    let (tp, tf) = totals(&through);
    eprintln!(
        "{name}: directly {dp} passed / {df} failed; through mcpmux {tp} passed / {tf} failed"
    );
    let lost = regressions(&direct, &through);
    assert!(
        lost.is_empty(),
        "{name}: passes directly, fails through mcpmux:\n  {}\n--- suite through mcpmux ---\n{}\n--- mcpmux ---\n{}",
        lost.join("\n  "),
        tail(&through_text, 60),
        mcpmux.logs()
    );
}

#[test]
fn the_0_1_16_suite_passes_through_mcpmux_as_against_its_own_fixture() {
    ensure_peers();
    let fixture = Fixture::start("0.1.16");
    compare("0.1.16 suite, 0.1.16 fixture", &fixture, Suite::V0116);
}

#[test]
fn the_0_2_0_suite_passes_through_mcpmux_as_against_its_dual_era_fixture() {
    ensure_peers();
    let fixture = Fixture::start("0.2.0-alpha.11");
    for set in ["2025-11-25", "2026-07-28"] {
        compare(
            &format!("0.2.0-alpha.12 suite, requirements {set}, dual-era fixture"),
            &fixture,
            Suite::V020(set),
        );
    }
}
