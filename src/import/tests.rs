//! Unit tests of `mcpmux import`'s rules: JSONC reading, transport choice, field and
//! variable mapping, names, host detection, and that the rendered config loads.
//! Never: touches the file system or the process environment.

use std::path::{Path, PathBuf};

use super::map::{plan, sanitize_name, NoteKind, Plan, Transport};
use super::render;
use super::source::{detect, parse, strip_jsonc, workspace_of, Host, HostFile};
use super::{render_config, ImportError};

fn host_file(path: &str, text: &str) -> HostFile {
    parse(text, path, Path::new(path), Some(Path::new("/home/me"))).expect("parses")
}

fn import(path: &str, text: &str) -> (Vec<HostFile>, Plan) {
    let files = vec![host_file(path, text)];
    let plan = plan(&files);
    (files, plan)
}

fn notes(plan: &Plan) -> Vec<String> {
    plan.notes
        .iter()
        .map(|n| format!("{:?} {}: {}", n.kind, n.key, n.text))
        .collect()
}

fn has_note(plan: &Plan, kind: NoteKind, key: &str, text: &str) -> bool {
    plan.notes
        .iter()
        .any(|n| n.kind == kind && n.key == key && n.text.contains(text))
}

fn stdio(plan: &Plan, name: &str) -> (String, Vec<String>, Vec<(String, String)>) {
    let server = plan.servers.iter().find(|s| s.name == name).expect(name);
    match &server.transport {
        Transport::Stdio {
            command, args, env, ..
        } => (
            command.clone(),
            args.clone(),
            env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ),
        other => panic!("{name} is {other:?}"),
    }
}

fn http(plan: &Plan, name: &str) -> (String, Vec<(String, String)>) {
    let server = plan.servers.iter().find(|s| s.name == name).expect(name);
    match &server.transport {
        Transport::Http { url, headers, .. } => (
            url.clone(),
            headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => panic!("{name} is {other:?}"),
    }
}

#[test]
fn jsonc_comments_and_trailing_commas_are_blanked_in_place() {
    let text = "{ // line\n  \"a\": \"x // y /* z */ ,}\", /* block\n  */ \"b\": [1, 2,],\n}";
    let clean = strip_jsonc(text).unwrap();
    assert_eq!(clean.len(), text.len(), "byte offsets are kept");
    assert_eq!(
        clean.lines().count(),
        text.lines().count(),
        "lines are kept"
    );
    let v: serde_json::Value = serde_json::from_str(&clean).unwrap();
    assert_eq!(v["a"], "x // y /* z */ ,}", "strings are untouched");
    assert_eq!(v["b"], serde_json::json!([1, 2]));
    // An escaped quote does not end the string.
    let clean = strip_jsonc(r#"{"a": "q\" // no", }"#).unwrap();
    let v: serde_json::Value = serde_json::from_str(&clean).unwrap();
    assert_eq!(v["a"], "q\" // no");
    // Multi-byte characters in comments keep the text valid UTF-8.
    assert!(strip_jsonc("{} // héllo ✓\n").is_ok());
    assert_eq!(
        strip_jsonc("{\n  /* never closed").unwrap_err().0,
        2,
        "the error names the comment's line"
    );
}

#[test]
fn a_syntax_error_names_the_file_line_and_column() {
    let err = parse(
        "{\n  // c\n  \"mcpServers\": {\n    \"a\": {}\n    \"b\": {}\n  }\n}",
        "x.json",
        Path::new("/p/x.json"),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ImportError::Syntax { file, line: 5, .. } if file == "x.json"),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("x.json:5:"), "{err}");
    let err = parse("[]", "x.json", Path::new("/x.json"), None).unwrap_err();
    assert!(matches!(err, ImportError::NotHostConfig { .. }), "{err:?}");
    let err = parse(r#"{"theme": 1}"#, "x.json", Path::new("/x.json"), None).unwrap_err();
    assert!(err.to_string().contains("mcpServers"), "{err}");
}

#[test]
fn stdio_servers_keep_command_args_env_and_cwd() {
    let (_, plan) = import(
        "/c/claude_desktop_config.json",
        r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "srv", 3],
            "env": {"A": "1", "PORT": 8080, "BAD=KEY": "x", "OBJ": {}}, "cwd": "/tmp"}}}"#,
    );
    let (command, args, env) = stdio(&plan, "fs");
    assert_eq!(command, "npx");
    assert_eq!(args, ["-y", "srv", "3"]);
    assert_eq!(
        env,
        [("A".into(), "1".into()), ("PORT".into(), "8080".into())]
    );
    let n = notes(&plan);
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "mcpServers.fs.args[2]",
            "3 written as"
        ),
        "{n:?}"
    );
    assert!(
        has_note(&plan, NoteKind::Changed, "mcpServers.fs.env.PORT", "8080"),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.fs.env.\"BAD=KEY\"",
            "name"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.fs.env.OBJ",
            "not a string"
        ),
        "{n:?}"
    );
    assert!(matches!(
        &plan.servers[0].transport,
        Transport::Stdio { cwd: Some(c), .. } if c == "/tmp"
    ));
}

#[test]
fn http_servers_take_url_or_server_url_and_headers() {
    let (_, plan) = import(
        "/w/.codeium/windsurf/mcp_config.json",
        r#"{"mcpServers": {
            "a": {"serverUrl": "https://a.example/mcp", "headers": {"X-Key": "k", "bad name": "v"}},
            "b": {"url": "http://b.example/mcp", "serverUrl": "http://other/mcp"},
            "c": {"type": "streamable-http", "url": "https://c.example/mcp", "env": {"A": "1"}},
            "d": {"url": "ftp://d.example"}
        }}"#,
    );
    assert_eq!(
        http(&plan, "a"),
        (
            "https://a.example/mcp".into(),
            vec![("X-Key".into(), "k".into())]
        )
    );
    assert_eq!(http(&plan, "b").0, "http://b.example/mcp");
    assert_eq!(http(&plan, "c").0, "https://c.example/mcp");
    let n = notes(&plan);
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.a.headers.\"bad name\"",
            "header name"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.b.serverUrl",
            "`url` is used"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.c.env",
            "stdio server"
        ),
        "{n:?}"
    );
    assert!(
        has_note(&plan, NoteKind::Skipped, "mcpServers.d", "http://"),
        "{n:?}"
    );
}

#[test]
fn transports_mcpmux_cannot_serve_are_skipped_with_a_reason() {
    let (_, plan) = import(
        "/p/.vscode/mcp.json",
        r#"{"servers": {
            "sse": {"type": "sse", "url": "https://x/sse"},
            "ws": {"type": "websocket", "url": "ws://x"},
            "both": {"command": "a", "url": "http://x"},
            "none": {"args": ["x"]},
            "off": {"command": "a", "disabled": true},
            "off2": {"command": "a", "enabled": false},
            "notobj": 3,
            "stdio-without-command": {"type": "stdio", "url": "http://x"},
            "ok": {"type": "stdio", "command": "a", "url": "http://x", "disabled": false}
        }}"#,
    );
    let n = notes(&plan);
    for (key, why) in [
        ("sse", "HTTP+SSE"),
        ("ws", "unknown transport"),
        ("both", "both `command` and a URL"),
        ("none", "neither"),
        ("off", "`disabled: true`"),
        ("off2", "`enabled: false`"),
        ("notobj", "not a JSON object"),
        ("stdio-without-command", "no `command`"),
    ] {
        assert!(
            has_note(&plan, NoteKind::Skipped, &format!("servers.{key}"), why),
            "{key}: {n:?}"
        );
    }
    assert_eq!(plan.servers.len(), 1, "{n:?}");
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "servers.ok.url",
            "HTTP server (this one is stdio)"
        ),
        "{n:?}"
    );
}

#[test]
fn every_unknown_or_unsupported_field_is_reported() {
    let (_, plan) = import(
        "/x/mcp.json",
        r#"{"mcpServers": {"s": {"command": "a", "autoApprove": ["t"], "alwaysAllow": [],
            "timeout": 30, "envFile": ".env", "disabledTools": [], "whatever": 1}}}"#,
    );
    let n = notes(&plan);
    for (key, why) in [
        ("autoApprove", "host's decision"),
        ("alwaysAllow", "host's decision"),
        ("timeout", "timeouts are global"),
        ("envFile", "no env file"),
        ("disabledTools", "does not filter"),
        ("whatever", "not a key mcpmux knows"),
    ] {
        assert!(
            has_note(
                &plan,
                NoteKind::NotImported,
                &format!("mcpServers.s.{key}"),
                why
            ),
            "{key}: {n:?}"
        );
    }
    assert_eq!(plan.servers[0].notes.len(), 6, "each is a comment too");
}

#[test]
fn host_variables_become_mcpmux_variables_or_are_reported() {
    let (_, plan) = import(
        "/home/me/proj/.vscode/mcp.json",
        r#"{"inputs": [{"id": "api-key", "description": "Key", "password": true}],
            "servers": {"s": {"command": "${userHome}/bin/srv",
            "args": ["${workspaceFolder}/x", "${workspaceFolderBasename}", "${env:TOKEN}",
                     "${PLAIN}", "${MODE:-fast}", "${file}", "${config:a.b}", "a${pathSeparator}b",
                     "${unterminated", "$HOME", "$5"],
            "env": {"K": "${input:api-key}", "U": "${input:undeclared}"}}}}"#,
    );
    let (command, args, env) = stdio(&plan, "s");
    let home = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    let sep = std::path::MAIN_SEPARATOR;
    assert_eq!(command, format!("${{{home}}}/bin/srv"));
    assert_eq!(
        args,
        [
            "/home/me/proj/x".to_owned(),
            "proj".into(),
            "${TOKEN}".into(),
            "${PLAIN}".into(),
            "${MODE}".into(),
            "$${file}".into(),
            "$${config:a.b}".into(),
            format!("a{sep}b"),
            "$${unterminated".into(),
            "$HOME".into(),
            "$5".into(),
        ]
    );
    assert_eq!(
        env,
        [
            ("K".into(), "${INPUT_API_KEY}".into()),
            ("U".into(), "${INPUT_UNDECLARED}".into())
        ]
    );
    let n = notes(&plan);
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "servers.s.env.K",
            "(\"Key\"), a secret"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "servers.s.env.U",
            "does not declare"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "servers.s.args[4]",
            "\"fast\" is dropped"
        ),
        "{n:?}"
    );
    assert!(
        has_note(&plan, NoteKind::NotImported, "servers.s.args[5]", "${file}"),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "servers.s.args[6]",
            "${config:a.b}"
        ),
        "{n:?}"
    );
    let vars: Vec<&str> = plan.variables.iter().map(String::as_str).collect();
    let mut want = vec![
        home,
        "INPUT_API_KEY",
        "INPUT_UNDECLARED",
        "MODE",
        "PLAIN",
        "TOKEN",
    ];
    want.sort_unstable();
    assert_eq!(vars, want);
}

#[test]
fn workspace_folder_is_known_only_for_project_files() {
    let home = Some(Path::new("/home/me"));
    assert_eq!(
        workspace_of(Path::new("/home/me/p/.vscode/mcp.json"), home),
        Some(PathBuf::from("/home/me/p"))
    );
    assert_eq!(
        workspace_of(Path::new("/home/me/p/.cursor/mcp.json"), home),
        Some(PathBuf::from("/home/me/p"))
    );
    assert_eq!(
        workspace_of(Path::new("/home/me/.cursor/mcp.json"), home),
        None
    );
    assert_eq!(workspace_of(Path::new("/home/me/p/mcp.json"), home), None);
    let (_, plan) = import(
        "/home/me/.cursor/mcp.json",
        r#"{"mcpServers": {"s": {"command": "a", "args": ["${workspaceFolder}"]}}}"#,
    );
    assert_eq!(stdio(&plan, "s").1, ["$${workspaceFolder}"]);
    assert!(has_note(
        &plan,
        NoteKind::NotImported,
        "mcpServers.s.args[0]",
        "no workspace folder"
    ));
}

#[test]
fn a_dollar_right_before_a_variable_cannot_be_written() {
    let (_, plan) = import(
        "/x/mcp.json",
        r#"{"mcpServers": {"s": {"command": "a", "args": ["$${X}"]}}}"#,
    );
    assert!(plan.servers.is_empty());
    assert!(
        has_note(&plan, NoteKind::Skipped, "mcpServers.s", "`$` right before"),
        "{:?}",
        notes(&plan)
    );
}

#[test]
fn names_are_sanitized_and_unique_and_identical_duplicates_merge() {
    assert_eq!(sanitize_name("my server"), "my-server");
    assert_eq!(sanitize_name("io.github/foo--bar"), "io-github-foo-bar");
    assert_eq!(sanitize_name("ok_name-1"), "ok_name-1");
    assert_eq!(sanitize_name("..."), "server");
    assert_eq!(sanitize_name("ünï"), "n");
    let files = vec![
        host_file(
            "/a/claude_desktop_config.json",
            r#"{"mcpServers": {"fs": {"command": "a"}, "git hub": {"command": "g"},
                "dup": {"command": "first"}, "dup": {"command": "second"}}}"#,
        ),
        host_file(
            "/b/.cursor/mcp.json",
            r#"{"mcpServers": {"fs": {"command": "a"}, "git-hub": {"command": "other"}}}"#,
        ),
    ];
    let plan = plan(&files);
    let names: Vec<&str> = plan.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["fs", "git-hub", "dup", "git-hub-2"]);
    assert_eq!(
        stdio(&plan, "dup").0,
        "second",
        "the later duplicate key wins"
    );
    let n = notes(&plan);
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "mcpServers.\"git hub\"",
            "imported as servers.git-hub"
        ),
        "{n:?}"
    );
    assert!(
        has_note(&plan, NoteKind::Changed, "mcpServers.fs", "imported once"),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "mcpServers.git-hub",
            "servers.git-hub-2"
        ),
        "{n:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.dup",
            "defined twice"
        ),
        "{n:?}"
    );
}

/// A server that two files share, differing from a third file's of the same name, is
/// imported once beside that one, however many files list it.
#[test]
fn a_renamed_duplicate_in_a_third_file_is_imported_once() {
    let files = vec![
        host_file(
            "/a/claude_desktop_config.json",
            r#"{"mcpServers": {"fs": {"command": "fs", "args": ["A"]}}}"#,
        ),
        host_file(
            "/b/.cursor/mcp.json",
            r#"{"mcpServers": {"fs": {"command": "fs", "args": ["B"]}}}"#,
        ),
        host_file(
            "/c/.vscode/mcp.json",
            r#"{"servers": {"fs": {"command": "fs", "args": ["B"]}}}"#,
        ),
    ];
    let plan = plan(&files);
    let names: Vec<&str> = plan.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["fs", "fs-2"], "{:?}", notes(&plan));
    assert_eq!(stdio(&plan, "fs-2").1, ["B"]);
    assert!(
        has_note(&plan, NoteKind::Changed, "servers.fs", "servers.fs-2"),
        "{:?}",
        notes(&plan)
    );
}

#[test]
fn hosts_are_recognized_by_location_then_by_shape() {
    let entries = |text: &str| host_file("/x/y.json", text).entries;
    let stdio_only = entries(r#"{"mcpServers": {"a": {"command": "x"}}}"#);
    let with_url = entries(r#"{"mcpServers": {"a": {"url": "http://x"}}}"#);
    let with_server_url = entries(r#"{"mcpServers": {"a": {"serverUrl": "http://x"}}}"#);
    let at = |p: &str, e| detect(Path::new(p), "mcpServers", e);
    assert_eq!(
        at("/Library/Claude/claude_desktop_config.json", &with_url),
        Host::ClaudeDesktop
    );
    assert_eq!(at("/home/me/.cursor/mcp.json", &stdio_only), Host::Cursor);
    assert_eq!(
        at("/home/me/.codeium/windsurf/mcp_config.json", &stdio_only),
        Host::Windsurf
    );
    assert_eq!(at("/x/mcp.json", &with_server_url), Host::Windsurf);
    assert_eq!(at("/p/.mcp.json", &stdio_only), Host::ClaudeCode);
    assert_eq!(at("/x/mcp.json", &with_url), Host::Other { http: true });
    assert_eq!(at("/x/mcp.json", &stdio_only), Host::Other { http: false });
    assert_eq!(
        detect(Path::new("/x/mcp.json"), "servers", &stdio_only),
        Host::VsCode
    );
    let settings = host_file(
        "/u/settings.json",
        r#"{"editor.fontSize": 12, "mcp": {"servers": {"a": {"command": "x"}}}}"#,
    );
    assert_eq!(
        (settings.host, settings.container),
        (Host::VsCode, "mcp.servers")
    );
}

#[test]
fn client_snippets_are_json_for_each_host() {
    let url = "http://127.0.0.1:7878/mcp";
    let cases = [
        (
            "/c/claude_desktop_config.json",
            r#"{"mcpServers": {"a": {"command": "x"}}}"#,
            "/mcpServers/mcpmux/args/1",
        ),
        (
            "/p/.cursor/mcp.json",
            r#"{"mcpServers": {"a": {"command": "x"}}}"#,
            "/mcpServers/mcpmux/url",
        ),
        (
            "/w/windsurf/mcp_config.json",
            r#"{"mcpServers": {"a": {"command": "x"}}}"#,
            "/mcpServers/mcpmux/serverUrl",
        ),
        (
            "/p/.vscode/mcp.json",
            r#"{"servers": {"a": {"command": "x"}}}"#,
            "/servers/mcpmux/url",
        ),
        (
            "/u/settings.json",
            r#"{"mcp": {"servers": {"a": {"command": "x"}}}}"#,
            "/mcp/servers/mcpmux/url",
        ),
    ];
    for (path, text, pointer) in cases {
        let file = host_file(path, text);
        let snippet = render::client_snippet(&file, url, "/opt/mc\"pmux");
        let v: serde_json::Value = serde_json::from_str(&snippet).expect(&snippet);
        assert_eq!(
            v.pointer(pointer).and_then(|u| u.as_str()),
            Some(url),
            "{snippet}"
        );
    }
    assert_eq!(render::default_url(), url);
}

#[test]
fn the_rendered_config_loads_and_keeps_every_server() {
    let files = vec![
        host_file(
            "/c/claude_desktop_config.json",
            r#"{"mcpServers": {"weird \"name\"": {"command": "a\\b", "args": ["x\ny"],
                "env": {"k.with dot": "v\"q"}}}}"#,
        ),
        host_file(
            "/p/.vscode/mcp.json",
            r#"{"servers": {"h": {"type": "http", "url": "https://h/mcp",
                "headers": {"Authorization": "Bearer ${input:tok}"}}}}"#,
        ),
    ];
    let plan = plan(&files);
    let text = render_config(&files, &plan, &render::utc_timestamp(0)).unwrap();
    assert!(
        text.starts_with(
            "# mcpmux configuration written by `mcpmux import` on 1970-01-01T00:00:00Z"
        ),
        "{text}"
    );
    assert!(
        text.contains("# From /c/claude_desktop_config.json, mcpServers."),
        "{text}"
    );
    let cfg = crate::config::parse_with_env(&text, "t", |_| Some("T".into())).expect(&text);
    let names: Vec<&str> = cfg.servers.0.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["weird-name", "h"]);
    let s = &cfg.servers.0[0];
    assert_eq!(
        (s.command.as_deref(), s.args.as_slice()),
        (Some("a\\b"), &["x\ny".to_owned()][..])
    );
    assert_eq!(s.env.get("k.with dot").map(String::as_str), Some("v\"q"));
    assert_eq!(cfg.servers.0[1].headers["Authorization"], "Bearer T");
    assert_eq!(cfg.listen, crate::config::ListenConfig::default());

    let empty = import(
        "/x/mcp.json",
        r#"{"mcpServers": {"off": {"command": "a", "disabled": true}}}"#,
    );
    assert!(matches!(
        render_config(&empty.0, &empty.1, "t"),
        Err(ImportError::NothingToImport)
    ));
}

#[test]
fn timestamps_are_utc_civil_dates() {
    assert_eq!(render::utc_timestamp(0), "1970-01-01T00:00:00Z");
    assert_eq!(render::utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(render::utc_timestamp(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(render::utc_timestamp(4_102_444_799), "2099-12-31T23:59:59Z");
}

#[test]
fn toml_strings_and_keys_are_quoted_when_needed() {
    assert_eq!(render::string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    assert_eq!(render::key("plain_key-1"), "plain_key-1");
    assert_eq!(render::key("a.b"), r#""a.b""#);
    assert_eq!(render::key(""), r#""""#);
}

#[test]
fn mcp_remote_entries_become_native_url_servers_with_each_change_reported() {
    let text = r#"{"mcpServers": {
        "linear": {"command": "npx", "args": ["-y", "mcp-remote", "https://mcp.linear.app/mcp",
            "--header", "X-Team: ${TEAM}", "--static-oauth-client-info", "{\"client_id\":\"lin-1\",\"client_secret\":\"hush\"}"],
            "env": {"TEAM": "core"}},
        "old": {"command": "mcp-remote", "args": ["https://x.example/sse", "--transport", "sse-only"]}
    }}"#;
    let (files, plan) = import("/home/me/.config/Claude/claude_desktop_config.json", text);
    let (url, headers) = http(&plan, "linear");
    assert_eq!(url, "https://mcp.linear.app/mcp");
    assert_eq!(headers, [("X-Team".to_owned(), "${TEAM}".to_owned())]);
    let all = notes(&plan);
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "mcpServers.linear.command",
            "native `url =` server"
        ),
        "{all:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::Changed,
            "mcpServers.linear.args",
            "client_secret"
        ),
        "{all:?}"
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.linear.env.TEAM",
            "no environment"
        ),
        "{all:?}"
    );
    assert!(
        has_note(&plan, NoteKind::Skipped, "mcpServers.old", "HTTP+SSE"),
        "{all:?}"
    );
    let toml = render_config(&files, &plan, "now").expect("renders");
    assert!(
        toml.contains("[servers.linear.oauth]\nclient_id = \"lin-1\""),
        "{toml}"
    );
    assert!(
        !toml.contains("hush"),
        "the secret is never written:\n{toml}"
    );
}

/// Entries the config would refuse are left out (each with its note), and the rest is
/// imported: one bad entry never fails the whole import.
#[test]
fn entries_the_config_would_refuse_are_left_out_not_fatal() {
    let text = r#"{"mcpServers": {
        "spaced": {"command": "mcp-remote", "args": ["https://a.example/mcp", "--header", "X Api Key: v"]},
        "noid": {"command": "mcp-remote", "args": ["https://b.example/mcp", "--static-oauth-client-info", "{\"client_id\":\"\"}"]},
        "nul": {"command": "srv", "env": {"OK": "1", "BAD": "a\u0000b"}},
        "fine": {"command": "srv"}
    }}"#;
    let (files, plan) = import("/home/me/.config/Claude/claude_desktop_config.json", text);
    let names: Vec<&str> = plan.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["noid", "nul", "fine"], "{:?}", notes(&plan));
    assert!(
        has_note(&plan, NoteKind::Skipped, "mcpServers.spaced", "header"),
        "{:?}",
        notes(&plan)
    );
    assert!(
        has_note(
            &plan,
            NoteKind::NotImported,
            "mcpServers.nul.env.BAD",
            "NUL"
        ),
        "{:?}",
        notes(&plan)
    );
    assert_eq!(stdio(&plan, "nul").2, [("OK".to_owned(), "1".to_owned())]);
    let toml = render_config(&files, &plan, "now").expect("renders and validates");
    assert!(!toml.contains("client_id = "), "{toml}");
}
