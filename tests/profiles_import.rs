//! `mcpmux import` of three hosts' files (Claude Desktop, Cursor, a project's VS Code
//! file) → one profile per host, served: a client at each profile URL the import
//! advises sees exactly the servers that host had. The servers are scripted upstreams,
//! each with one tool only it offers (`SCRIPTED_EXTRA_TOOL`), so a tool list tells which
//! servers a view holds.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::http::{Daemon, HttpClient};
use common::{mcpmux_bin, scripted_upstream};
use serde_json::json;

fn entry(name: &str) -> serde_json::Value {
    json!({
        "command": scripted_upstream(),
        "env": {"SCRIPTED_NAME": name, "SCRIPTED_EXTRA_TOOL": format!("only_{name}")}
    })
}

fn write(path: &Path, value: &serde_json::Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpmux-profiles-import-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn three_host_files_become_three_profiles_with_the_hosts_servers() {
    let dir = temp_dir();
    let desktop = dir.join("claude_desktop_config.json");
    let cursor = dir.join("home/.cursor/mcp.json");
    let vscode = dir.join("myproj/.vscode/mcp.json");
    write(
        &desktop,
        &json!({"mcpServers": {"alpha": entry("alpha"), "beta": entry("beta")}}),
    );
    // `alpha` again, identical: imported once, listed in both profiles.
    write(
        &cursor,
        &json!({"mcpServers": {"alpha": entry("alpha"), "gamma": entry("gamma")}}),
    );
    let mut delta = entry("delta");
    delta["type"] = json!("stdio");
    write(&vscode, &json!({"servers": {"delta": delta}}));

    let out_path = dir.join("mcpmux.toml");
    let out = Command::new(mcpmux_bin())
        .arg("import")
        .args([&desktop, &cursor, &vscode])
        .arg("--output")
        .arg(&out_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each host is told its own profile's URL.
    for profile in ["claude-desktop", "cursor", "vscode-myproj"] {
        assert!(
            stdout.contains(&format!("/mcp/{profile}\"")),
            "{profile}: {stdout}"
        );
    }

    // Served on a free port (the import writes the default 127.0.0.1:7878).
    let config = std::fs::read_to_string(&out_path).unwrap();
    let config = config.replace("http = \"127.0.0.1:7878\"", "http = \"127.0.0.1:0\"");
    assert!(config.contains("http = \"127.0.0.1:0\""), "{config}");
    std::fs::write(&out_path, config).unwrap();
    let d = Daemon::start_at(&out_path).await;
    for (profile, expected) in [
        ("claude-desktop", vec!["only_alpha", "only_beta"]),
        ("cursor", vec!["only_alpha", "only_gamma"]),
        ("vscode-myproj", vec!["only_delta"]),
    ] {
        let url = format!("{}/mcp/{profile}", d.origin());
        let mut c = HttpClient::connect(&url, json!({})).await;
        let r = c.call("tools/list", json!({})).await;
        let mut own: Vec<&str> = r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .filter_map(|t| t["name"].as_str())
            .filter(|n| n.starts_with("only_"))
            .collect();
        own.sort_unstable();
        assert_eq!(own, expected, "{profile}");
        let who = c.tool(expected[0], json!({})).await;
        assert!(
            who.to_string().contains(&expected[0]["only_".len()..]),
            "{who}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
