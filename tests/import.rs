//! `mcpmux import` end to end with the real binary: host configs of each dialect
//! (fixtures in tests/fixtures/import/) → a config `mcpmux check` accepts, with every
//! server and the right transport; what is not imported is reported on stderr; an
//! existing file is kept without `--force`; malformed JSON names the file and line.
//! Never: touches the fixtures (output goes to a temporary directory).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

fn mcpmux() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcpmux"));
    cmd.env("SOURCE_DATE_EPOCH", "1700000000");
    cmd
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The four dialects: Claude Desktop (stdio + env), Cursor (url + headers), VS Code
/// (`servers`, `type`, `inputs`, comments), Windsurf (`serverUrl`).
fn all_fixtures() -> Vec<String> {
    [
        "claude_desktop_config.json",
        "cursor/.cursor/mcp.json",
        "project/.vscode/mcp.json",
        "windsurf_mcp_config.json",
    ]
    .into_iter()
    .map(fixture)
    .collect()
}

/// The variables the imported fixtures use, as `mcpmux import` lists them.
const VARIABLES: [&str; 4] = [
    "DOCS_TOKEN",
    "GITHUB_TOKEN",
    "INPUT_API_KEY",
    "LINEAR_TOKEN",
];

/// A fresh empty directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcpmux-import-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn import(files: &[String], extra: &[&str]) -> Output {
    mcpmux()
        .arg("import")
        .args(files)
        .args(extra)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_dialect_imports_into_a_config_check_accepts() {
    let dir = TempDir::new();
    let out_path = dir.path("mcpmux.toml");
    let out = import(&all_fixtures(), &["--output", &out_path]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let written = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        written.starts_with(
            "# mcpmux configuration written by `mcpmux import` on 2023-11-14T22:13:20Z from:"
        ),
        "{written}"
    );
    assert!(
        written.contains("claude_desktop_config.json (Claude Desktop, mcpServers): 2 servers"),
        "{written}"
    );
    assert!(written.contains("[listen]\n"), "{written}");
    assert!(
        written.contains("\n# From ") && written.contains(".vscode/mcp.json, servers.search"),
        "each server names its source file: {written}"
    );

    // `mcpmux check` needs the variables the config expands, and accepts it with them.
    let mut check = mcpmux();
    check.args(["check", "--config", &out_path]);
    for var in VARIABLES {
        check.env(var, format!("value-of-{var}"));
    }
    let checked = check.output().unwrap();
    assert!(checked.status.success(), "{}", text(&checked.stderr));
    let resolved: toml::Table = text(&checked.stdout).parse().unwrap();
    let servers = resolved["servers"].as_table().unwrap();
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "filesystem",
            "github",
            "linear",
            "github-2",
            "local-tools",
            "search",
            "docs"
        ],
        "file order; Cursor's identical filesystem merged, its different github renamed"
    );
    for (name, stdio) in [
        ("filesystem", true),
        ("github", true),
        ("linear", false),
        ("github-2", true),
        ("local-tools", true),
        ("search", false),
        ("docs", false),
    ] {
        let s = servers[name].as_table().unwrap();
        assert_eq!(s.contains_key("command"), stdio, "{name}: {s:?}");
        assert_eq!(s.contains_key("url"), !stdio, "{name}: {s:?}");
    }
    assert_eq!(
        servers["docs"]["url"].as_str(),
        Some("https://docs.example/mcp")
    );
    assert_eq!(
        servers["local-tools"]["args"][0].as_str(),
        Some(fixture("project/tools/server.py").as_str()),
        "${{workspaceFolder}} is the folder holding .vscode"
    );
    let mut envs: Vec<&str> = servers["filesystem"]["env"]
        .as_table()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    envs.sort_unstable();
    assert_eq!(envs, ["LOG_LEVEL", "PORT"]);
    assert!(servers["search"]["headers"].get("X-Api-Key").is_some());

    // Without the variables, check names the missing one.
    let unset = mcpmux()
        .args(["check", "--config", &out_path])
        .env_remove("GITHUB_TOKEN")
        .output()
        .unwrap();
    assert!(!unset.status.success());
    assert!(
        text(&unset.stderr).contains("${GITHUB_TOKEN}"),
        "{}",
        text(&unset.stderr)
    );

    // What to put in each host instead: its own profile's URL (one profile per host
    // file) for HTTP hosts, `mcpmux connect` to it for Claude Desktop.
    let url = |profile: &str| format!("http://127.0.0.1:7878/mcp/{profile}");
    let snippets: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect();
    assert_eq!(snippets.len(), 4, "{stdout}");
    let at = |i: usize, pointer: &str| snippets[i].pointer(pointer).cloned();
    assert_eq!(
        at(0, "/mcpServers/mcpmux/args"),
        Some(serde_json::json!(["connect", url("claude-desktop")]))
    );
    assert_eq!(
        at(1, "/mcpServers/mcpmux/url"),
        Some(url("cursor").into()),
        "Cursor"
    );
    assert_eq!(
        at(2, "/servers/mcpmux/url"),
        Some(url("vscode-project").into()),
        "VS Code"
    );
    assert_eq!(
        at(2, "/servers/mcpmux/type"),
        Some("http".into()),
        "VS Code"
    );
    assert_eq!(
        at(3, "/mcpServers/mcpmux/serverUrl"),
        Some(url("windsurf").into()),
        "Windsurf"
    );
    // Each host keeps its own servers: Cursor's identical `filesystem` was imported once
    // and is in both profiles.
    let profiles = resolved["profiles"].as_table().expect("[profiles]");
    let servers_of = |p: &str| -> Vec<&str> {
        profiles[p]["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect()
    };
    assert_eq!(profiles.len(), 4, "{profiles:?}");
    assert_eq!(servers_of("claude-desktop"), ["filesystem", "github"]);
    assert!(servers_of("cursor").contains(&"filesystem"), "{profiles:?}");
    assert!(servers_of("cursor").contains(&"github-2"), "{profiles:?}");
    assert!(
        stdout.contains(&format!("mcpmux serve --config {out_path}")),
        "{stdout}"
    );
    for var in VARIABLES {
        assert!(stderr.contains(var), "{var} is listed: {stderr}");
    }
}

#[test]
fn what_is_not_imported_is_reported_on_stderr() {
    let out = import(&all_fixtures(), &["--output", "-"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for (file_line, key, why) in [
        (
            "claude_desktop_config.json",
            "(top level)",
            "globalShortcut",
        ),
        (
            "claude_desktop_config.json:16",
            "mcpServers.github.autoApprove",
            "not imported",
        ),
        (
            "claude_desktop_config.json:17",
            "mcpServers.github.timeout",
            "not imported",
        ),
        (
            "claude_desktop_config.json:19",
            "mcpServers.\"old thing\"",
            "`disabled: true`",
        ),
        (
            ".vscode/mcp.json:17",
            "servers.local-tools.envFile",
            "not imported",
        ),
        (
            ".vscode/mcp.json:18",
            "servers.local-tools.dev",
            "not imported",
        ),
        (
            ".vscode/mcp.json:23",
            "servers.search.headers.X-Api-Key",
            "${INPUT_API_KEY}",
        ),
        (".vscode/mcp.json:25", "servers.legacy-events", "HTTP+SSE"),
        (
            "windsurf_mcp_config.json:6",
            "mcpServers.docs.disabledTools",
            "not imported",
        ),
        (
            ".cursor/mcp.json:12",
            "mcpServers.github",
            "servers.github-2",
        ),
    ] {
        let found = stderr
            .lines()
            .any(|l| l.contains(&format!("{file_line}: {key}: ")) && l.contains(why));
        assert!(found, "{file_line} {key} {why}:\n{stderr}");
    }
    assert!(stderr.contains("2 skipped"), "{stderr}");

    // With `--output -` the config is stdout (and parses), the advice goes to stderr.
    let config: toml::Table = text(&out.stdout).parse().expect("stdout is the TOML");
    assert_eq!(config["servers"].as_table().unwrap().len(), 7);
    assert!(stderr.contains("\"mcpmux\""), "{stderr}");
}

#[test]
fn an_existing_output_is_kept_without_force() {
    let dir = TempDir::new();
    let out_path = dir.path("mcpmux.toml");
    std::fs::write(&out_path, "# mine\n").unwrap();
    let files = [fixture("windsurf_mcp_config.json")];
    let refused = import(&files, &["--output", &out_path]);
    assert!(!refused.status.success());
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(&out_path) && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "# mine\n");

    let forced = import(&files, &["--output", &out_path, "--force"]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(std::fs::read_to_string(&out_path)
        .unwrap()
        .contains("[servers.docs]"));
}

#[test]
fn the_short_flags_o_and_f_work_as_output_and_force() {
    let dir = TempDir::new();
    let out_path = dir.path("short.toml");
    let files = [fixture("windsurf_mcp_config.json")];
    let written = import(&files, &["-o", &out_path]);
    assert!(written.status.success(), "{}", text(&written.stderr));
    assert!(std::fs::read_to_string(&out_path)
        .unwrap()
        .contains("[servers.docs]"));

    std::fs::write(&out_path, "# mine\n").unwrap();
    let refused = import(&files, &["-o", &out_path]);
    assert!(!refused.status.success());
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "# mine\n");
    let forced = import(&files, &["-o", &out_path, "-f"]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(std::fs::read_to_string(&out_path)
        .unwrap()
        .contains("[servers.docs]"));
}

#[test]
fn the_default_output_is_mcpmux_toml_in_the_current_directory() {
    let dir = TempDir::new();
    let out = mcpmux()
        .args(["import", &fixture("cursor/.cursor/mcp.json")])
        .current_dir(&dir.0)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(dir.path("mcpmux.toml")).unwrap();
    assert!(written.contains("[servers.linear]"), "{written}");
    let again = mcpmux()
        .args(["import", &fixture("cursor/.cursor/mcp.json")])
        .current_dir(&dir.0)
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "a second run does not overwrite it"
    );
}

#[test]
fn malformed_json_names_the_file_and_line_and_writes_nothing() {
    let dir = TempDir::new();
    let out_path = dir.path("mcpmux.toml");
    let broken = fixture("broken.json");
    let out = import(
        &[fixture("windsurf_mcp_config.json"), broken.clone()],
        &["--output", &out_path],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{broken}:4:")) && stderr.contains("invalid JSON"),
        "{stderr}"
    );
    assert!(!Path::new(&out_path).exists(), "nothing is written");

    let not_host = dir.path("settings.json");
    std::fs::write(&not_host, "{ \"editor.fontSize\": 12, // JSONC\n }").unwrap();
    let out = import(std::slice::from_ref(&not_host), &["--output", &out_path]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&not_host) && stderr.contains("mcpServers"),
        "{stderr}"
    );
}
