//! The conformance suite's own fixture servers (`everything-server.ts`, vendored from
//! the conformance repository under `tests/interop/conformance/fixtures/<tag>/` with its
//! licence) run by `tsx` on a free loopback port, and the comparison of one suite run
//! against a fixture directly with the same run through mcpmux.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::harness::{free_port, interop_dir, kill_group, OwnGroup};

/// Bound on a fixture printing its listening line (tsx compiles the file first).
const FIXTURE_START: Duration = Duration::from_secs(60);

/// A running fixture server; its process group is killed on drop.
pub struct Fixture {
    child: Child,
    pub url: String,
}

impl Fixture {
    /// Starts `conformance/fixtures/<tag>/everything-server.ts` on a free port (another
    /// port if that one was taken meanwhile).
    pub fn start(tag: &str) -> Fixture {
        let file = interop_dir()
            .join("conformance")
            .join("fixtures")
            .join(tag)
            .join("everything-server.ts");
        let tsx = interop_dir().join("node_modules").join(".bin").join("tsx");
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port();
            let mut child = Command::new(&tsx)
                .arg(&file)
                .env("PORT", port.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .own_process_group()
                .spawn()
                .unwrap_or_else(|e| panic!("run {}: {e}", tsx.display()));
            let (tx, rx) = mpsc::channel::<String>();
            for pipe in [
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
                Box::new(child.stderr.take().unwrap()),
            ] {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        let _ = tx.send(line);
                    }
                });
            }
            drop(tx);
            let deadline = std::time::Instant::now() + FIXTURE_START;
            let mut seen = String::new();
            let ready = loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok(line) => {
                        seen.push_str(&line);
                        seen.push('\n');
                        if line.contains("running on") {
                            break true;
                        }
                    }
                    Err(_) => break false,
                }
            };
            if ready {
                // Keep draining its output so it never blocks on a full pipe.
                std::thread::spawn(move || for _ in rx {});
                return Fixture {
                    child,
                    url: format!("http://127.0.0.1:{port}/mcp"),
                };
            }
            kill_group(child.id());
            let _ = child.wait();
            last = seen;
        }
        panic!("the fixture {tag} did not start:\n{last}");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which conformance CLI to run.
#[derive(Clone, Copy)]
pub enum Suite {
    /// 0.1.16 (`@modelcontextprotocol/conformance-0.1.16`), its active suite.
    V0116,
    /// The pinned 0.2.0 release, with a requirement set.
    V020(&'static str),
}

/// The outcome of one suite run: status list per (scenario, check id).
pub type Checks = BTreeMap<(String, String), Vec<String>>;

/// Runs the suite against `url`, its results saved under a new temporary folder.
pub fn run_suite(suite: Suite, url: &str) -> (Checks, String) {
    let out = tempdir("conformance-out");
    let package = match suite {
        Suite::V0116 => "conformance-0.1.16",
        Suite::V020(_) => "conformance",
    };
    let cli = interop_dir()
        .join("node_modules")
        .join("@modelcontextprotocol")
        .join(package)
        .join("dist")
        .join("index.js");
    let mut cmd = Command::new("bash");
    cmd.arg(interop_dir().join("conformance.sh"))
        .arg("--cli")
        .arg(&cli)
        .args(["server", "--url", url, "-o"])
        .arg(&out);
    if let Suite::V020(set) = suite {
        cmd.args(["--requirements", set]);
    }
    let run = cmd.output().expect("run conformance.sh");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let checks = read_checks(&out);
    let _ = std::fs::remove_dir_all(&out);
    (checks, text)
}

fn tempdir(stem: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcpmux-{stem}-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("create a temporary folder");
    dir
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish()
}

/// `DIR/server-<scenario>-<timestamp>/checks.json` → statuses per (scenario, check).
fn read_checks(dir: &Path) -> Checks {
    let mut out = Checks::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("server-") else {
            continue;
        };
        // The timestamp is `YYYY-MM-DDTHH-MM-SS-mmmZ`: 24 characters and a dash.
        let Some(scenario) = rest.get(..rest.len().saturating_sub(25)) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path().join("checks.json")) else {
            continue;
        };
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
        for c in checks {
            out.entry((
                scenario.to_owned(),
                c["id"].as_str().unwrap_or_default().to_owned(),
            ))
            .or_default()
            .push(c["status"].as_str().unwrap_or_default().to_owned());
        }
    }
    out
}

/// A status the suite counts as failing (a WARNING is a failed SHOULD).
fn failing(status: &str) -> bool {
    status == "FAILURE" || status == "WARNING"
}

/// (checks passed, checks failed) of a run, as the suite counts them.
pub fn totals(c: &Checks) -> (usize, usize) {
    let all = c.values().flatten();
    let failed = all.clone().filter(|s| failing(s)).count();
    let passed = all.filter(|s| *s == "SUCCESS").count();
    (passed, failed)
}

/// What passes directly and not through mcpmux:
/// - a scenario that ran directly and did not run through mcpmux;
/// - a scenario with no failing check directly that has one through mcpmux (the suite
///   may take another branch, with other check ids, on another valid answer shape);
/// - a check that passes directly and fails through mcpmux.
pub fn regressions(direct: &Checks, through: &Checks) -> Vec<String> {
    let scenarios = |c: &Checks| c.keys().map(|(s, _)| s.clone()).collect::<BTreeSet<_>>();
    let clean = |c: &Checks, s: &str| {
        c.iter()
            .filter(|((sc, _), _)| sc == s)
            .all(|(_, st)| !st.iter().any(|x| failing(x)))
    };
    let mut out = Vec::new();
    let through_scenarios = scenarios(through);
    for s in scenarios(direct) {
        if !through_scenarios.contains(&s) {
            out.push(format!("{s}: ran directly, not through mcpmux"));
            continue;
        }
        if clean(direct, &s) && !clean(through, &s) {
            for ((_, id), st) in through.iter().filter(|((sc, _), _)| *sc == s) {
                if st.iter().any(|x| failing(x)) {
                    out.push(format!(
                        "{s}:{id}: {st:?} through mcpmux, scenario clean directly"
                    ));
                }
            }
            continue;
        }
        for ((sc, id), st) in direct.iter().filter(|((sc, _), _)| *sc == s) {
            let passed = !st.iter().any(|x| failing(x));
            let failed_through = through
                .get(&(sc.clone(), id.clone()))
                .is_some_and(|t| t.iter().any(|x| failing(x)));
            if passed && failed_through {
                out.push(format!(
                    "{sc}:{id}: {st:?} directly, {:?} through mcpmux",
                    through[&(sc.clone(), id.clone())]
                ));
            }
        }
    }
    out
}
