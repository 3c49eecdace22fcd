//! Tests for loading and validation. The process environment is never touched: `${NAME}`
//! goes through `parse_with_env` with the fixed lookup below.

use std::collections::BTreeMap;

use super::*;

const ORIGIN: &str = "test.toml";

fn env(name: &str) -> Option<String> {
    match name {
        "REMOTE_TOKEN" => Some("tok-123".into()),
        "BIN_DIR" => Some("/opt/bin".into()),
        "HOST" => Some("example.com".into()),
        "WEIRD" => Some("a${b}".into()),
        _ => None,
    }
}

fn ok(text: &str) -> Config {
    match parse_with_env(text, ORIGIN, env) {
        Ok(config) => config,
        Err(e) => panic!("expected a valid config, got: {e}"),
    }
}

/// The error message for `text`, which must be rejected.
fn err(text: &str) -> String {
    match parse_with_env(text, ORIGIN, env) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(e) => e.to_string(),
    }
}

const ONE_SERVER: &str = "[servers.a]\ncommand = \"a\"\n";

const FULL: &str = r#"
[listen]
http = "0.0.0.0:0"
path = "/proxy"
allowed_origins = ["https://app.example"]
allowed_hosts = ["mux.local"]
auth_token_env = "MUX_TOKEN"
session_idle_ms = 5000
sse_replay_events = 0

[subscriptions]
client_capability = "required"
linger_ms = 1500

[cache]
max_entries = 0
max_bytes = 1024

[limits]
max_message_bytes = 1000
max_clients = 2
max_subscriptions_per_client = 3
client_queue = 4
request_timeout_ms = 5
max_pending_per_client = 6
max_connections = 7
header_read_timeout_ms = 8

[restart]
initial_backoff_ms = 10
max_backoff_ms = 20
max_failures = 3
init_timeout_ms = 40

[servers.local]
command = "${BIN_DIR}/server"
args = ["--flag", "$${LITERAL}", "${HOST}"]
env = { API_KEY = "k-${REMOTE_TOKEN}", PLAIN = "x" }
cwd = "${BIN_DIR}/work"
prefix = "loc"
force_subscribe = true
lazy = true
uri_prefixes = ["file:///srv/"]

[servers.remote]
url = "https://${HOST}/mcp"
headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }
"#;

#[test]
fn full_config_parses_with_every_value() {
    let c = ok(FULL);
    assert_eq!(c.listen.http, "0.0.0.0:0".parse().expect("literal address"));
    assert_eq!(c.listen.path, "/proxy");
    assert_eq!(c.listen.allowed_origins, ["https://app.example"]);
    assert_eq!(c.listen.allowed_hosts, ["mux.local"]);
    assert_eq!(c.listen.auth_token_env.as_deref(), Some("MUX_TOKEN"));
    assert_eq!(
        (c.listen.session_idle_ms, c.listen.sse_replay_events),
        (5000, 0)
    );
    assert_eq!(
        c.subscriptions.client_capability,
        ClientCapabilityPolicy::Required
    );
    assert_eq!(c.subscriptions.linger_ms, 1500);
    assert!(!c.cache.is_enabled(), "max_entries = 0 turns the cache off");
    let l = &c.limits;
    assert_eq!(
        (
            l.max_message_bytes,
            l.max_clients,
            l.max_subscriptions_per_client
        ),
        (1000, 2, 3)
    );
    assert_eq!(
        (
            l.client_queue,
            l.request_timeout_ms,
            l.max_pending_per_client
        ),
        (4, 5, 6)
    );
    assert_eq!((l.max_connections, l.header_read_timeout_ms), (7, 8));
    let r = &c.restart;
    assert_eq!(
        (
            r.initial_backoff_ms,
            r.max_backoff_ms,
            r.max_failures,
            r.init_timeout_ms
        ),
        (10, 20, 3, 40)
    );

    let [local, remote] = &c.servers.0[..] else {
        panic!("two servers")
    };
    assert_eq!(local.name, "local");
    assert_eq!(
        local.transport(),
        UpstreamTransport::Stdio {
            command: "/opt/bin/server".into(),
            args: vec!["--flag".into(), "${LITERAL}".into(), "example.com".into()],
            env: BTreeMap::from([
                ("API_KEY".into(), "k-tok-123".into()),
                ("PLAIN".into(), "x".into())
            ]),
            cwd: Some("/opt/bin/work".into()),
        }
    );
    assert_eq!(local.prefix.as_deref(), Some("loc"));
    assert!(local.force_subscribe && local.lazy);
    assert_eq!(local.uri_prefixes, ["file:///srv/"]);
    assert_eq!(remote.name, "remote");
    assert_eq!(
        remote.transport(),
        UpstreamTransport::Http {
            url: "https://example.com/mcp".into(),
            headers: BTreeMap::from([("Authorization".into(), "Bearer tok-123".into())]),
        }
    );
    assert!(!remote.force_subscribe && !remote.lazy && remote.prefix.is_none());
}

#[test]
fn absent_sections_take_the_defaults() {
    let c = ok(ONE_SERVER);
    assert_eq!(c.listen, ListenConfig::default());
    assert_eq!(c.listen.http.to_string(), ListenConfig::DEFAULT_HTTP);
    assert_eq!(c.listen.path, ListenConfig::DEFAULT_PATH);
    assert_eq!(c.listen.auth_token_env, None);
    assert_eq!(c.subscriptions, SubscriptionsConfig::default());
    assert_eq!(
        c.subscriptions.client_capability,
        ClientCapabilityPolicy::Offered
    );
    assert_eq!(
        c.subscriptions.linger_ms,
        SubscriptionsConfig::DEFAULT_LINGER_MS
    );
    assert_eq!(c.cache.max_entries, CacheConfig::DEFAULT_MAX_ENTRIES);
    assert!(c.cache.is_enabled());
    assert_eq!(c.limits, LimitsConfig::default());
    assert_eq!(c.limits.client_queue, LimitsConfig::DEFAULT_CLIENT_QUEUE);
    assert_eq!(c.restart, RestartConfig::default());
    let s = &c.servers.0[0];
    assert!(s.args.is_empty() && s.env.is_empty() && s.cwd.is_none() && !s.lazy);
}

#[test]
fn example_file_parses_and_documents_the_real_defaults() {
    let c = ok(include_str!("../../config.example.toml"));
    assert_eq!(c.listen, ListenConfig::default());
    assert_eq!(c.subscriptions, SubscriptionsConfig::default());
    assert_eq!(c.cache, CacheConfig::default());
    assert_eq!(c.limits, LimitsConfig::default());
    assert_eq!(c.restart, RestartConfig::default());
    let [everything] = &c.servers.0[..] else {
        panic!("one server")
    };
    assert_eq!(everything.name, "everything");
    assert_eq!(everything.command.as_deref(), Some("npx"));
    assert_eq!(
        everything.args,
        [
            "-y",
            "@modelcontextprotocol/server-everything@2026.8.31",
            "stdio"
        ]
    );
}

#[test]
fn server_order_follows_the_file_not_the_alphabet() {
    let c = ok("[servers.zeta]\ncommand = \"z\"\n[servers.alpha]\nurl = \"http://a\"\n[servers.mid]\ncommand = \"m\"\n");
    let names: Vec<_> = c.servers.0.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
}

#[test]
fn unknown_keys_are_named_with_file_and_line() {
    let e = err("bogus = 1\n[servers.a]\ncommand = \"a\"\n");
    assert!(e.starts_with("test.toml:1:1: unknown field `bogus`"), "{e}");
    let e = err("[listen]\npath = \"/mcp\"\nprot = 1\n[servers.a]\ncommand = \"a\"\n");
    assert!(
        e.starts_with("test.toml:3:1: unknown field `prot`, expected one of"),
        "{e}"
    );
    let e = err("[servers.a]\ncommand = \"a\"\n\nlazzy = true\n");
    assert!(e.starts_with("test.toml:4:1: unknown field `lazzy`"), "{e}");
    let e = err("[servers.a]\ncommand = \"a\"\nenv = { X = \"1\" }\n[servers.a.options]\nx = 1\n");
    assert!(
        e.starts_with("test.toml:4:") && e.contains("unknown field `options`"),
        "{e}"
    );
}

#[test]
fn bad_types_and_enum_values_name_the_line() {
    let e = err("[subscriptions]\nclient_capability = \"sometimes\"\n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
    assert!(
        e.contains("unknown variant `sometimes`, expected `offered` or `required`"),
        "{e}"
    );
    let e = err("[limits]\nclient_queue = -1\n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
    let e = err("[listen]\nhttp = \"localhost\"\n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
    let e = err("[servers\n");
    assert!(e.starts_with("test.toml:1:"), "{e}");
}

#[test]
fn a_server_needs_exactly_one_of_command_and_url() {
    let e = err("[servers.a]\ncommand = \"a\"\n\n[servers.broken]\nlazy = true\n");
    assert_eq!(e, "test.toml:4: servers.broken needs `command` (a stdio upstream) or `url` (an HTTP upstream)");
    let e = err("[servers.both]\ncommand = \"a\"\nurl = \"http://x\"\n");
    assert!(
        e.starts_with("test.toml:1: servers.both has both `command`"),
        "{e}"
    );
}

#[test]
fn zero_servers_is_an_error() {
    let expected = "test.toml: no [servers.NAME] table: mcpmux needs at least one upstream";
    assert_eq!(err("[listen]\npath = \"/mcp\"\n"), expected);
    assert_eq!(err(""), expected);
    assert_eq!(
        err("[servers]\n"),
        "test.toml:1: no [servers.NAME] table: mcpmux needs at least one upstream"
    );
}

#[test]
fn empty_server_name_is_an_error() {
    let e = err("[servers.\"\"]\ncommand = \"a\"\n");
    assert_eq!(
        e,
        "test.toml:1: servers.\"\": a server name must not be empty"
    );
}

#[test]
fn duplicate_prefixes_name_both_servers() {
    let e = err("[servers.a]\ncommand = \"a\"\nprefix = \"p\"\n[servers.b]\ncommand = \"b\"\n[servers.c]\nurl = \"http://c\"\nprefix = \"p\"\n");
    assert_eq!(e, "test.toml:8: servers.c.prefix = \"p\" is already used by servers.a.prefix; prefixes must be unique");
}

#[test]
fn prefix_must_be_non_empty_without_whitespace_or_separators() {
    for bad in [
        "\"\"",
        "\"my tools\"",
        "\"tab\\there\"",
        "\"a__b\"",
        "\"a+b\"",
        "\"a_\"",
    ] {
        let e = err(&format!("[servers.a]\ncommand = \"a\"\nprefix = {bad}\n"));
        assert!(
            e.starts_with(
                "test.toml:3: servers.a.prefix must be non-empty, without whitespace, `__` or `+`, and not end in `_`"
            ),
            "{e}"
        );
    }
    assert!(parse(
        "[servers.a]\ncommand = \"a\"\nprefix = \"a_b-c.d\"\n",
        "test.toml"
    )
    .is_ok());
}

#[test]
fn listen_path_must_start_with_a_slash() {
    let e = err(&format!("[listen]\npath = \"mcp\"\n{ONE_SERVER}"));
    assert_eq!(
        e,
        "test.toml:2: listen.path must start with `/` (got \"mcp\")"
    );
}

/// Paths the router could not serve beside its own routes are refused by `check`
/// rather than panicking `serve`; the operator's pages give way to the endpoint.
#[test]
fn listen_path_may_not_be_a_route_mcpmux_needs_or_hold_route_syntax() {
    for path in [
        "/oauth/callback",
        "/login/x",
        "/mcp/{id}",
        "/a/{",
        "/mcp/:id",
        "/mcp/*x",
    ] {
        let e = err(&format!("[listen]\npath = {path:?}\n{ONE_SERVER}"));
        assert!(e.starts_with("test.toml:2: listen.path = "), "{path}: {e}");
    }
    for path in ["/", "/status", "/mcp/v1", "/login"] {
        let c = ok(&format!("[listen]\npath = {path:?}\n{ONE_SERVER}"));
        assert_eq!(c.listen.path, path);
    }
}

#[test]
fn limits_that_make_no_sense_at_zero_are_rejected() {
    let keys = [
        "max_message_bytes",
        "max_clients",
        "max_subscriptions_per_client",
        "client_queue",
        "request_timeout_ms",
        "max_pending_per_client",
        "max_connections",
        "header_read_timeout_ms",
    ];
    for key in keys {
        let e = err(&format!("[limits]\n{key} = 0\n{ONE_SERVER}"));
        assert_eq!(
            e,
            format!("test.toml:2: limits.{key} must be greater than 0")
        );
    }
    for (table, key) in [
        ("listen", "session_idle_ms"),
        ("restart", "initial_backoff_ms"),
        ("restart", "max_failures"),
        ("restart", "init_timeout_ms"),
    ] {
        let e = err(&format!("[{table}]\n{key} = 0\n{ONE_SERVER}"));
        assert_eq!(
            e,
            format!("test.toml:2: {table}.{key} must be greater than 0")
        );
    }
    let e = err(&format!("[restart]\nmax_backoff_ms = 10\n{ONE_SERVER}"));
    assert!(
        e.starts_with("test.toml:2: restart.max_backoff_ms (10) must be at least"),
        "{e}"
    );
}

#[test]
fn zero_means_off_for_cache_replay_and_linger() {
    let c = ok(&format!("[cache]\nmax_bytes = 0\n[listen]\nsse_replay_events = 0\n[subscriptions]\nlinger_ms = 0\n{ONE_SERVER}"));
    assert!(!c.cache.is_enabled());
    assert_eq!(c.listen.sse_replay_events, 0);
}

#[test]
fn url_must_be_http_or_https() {
    for bad in [
        "ftp://x/mcp",
        "localhost:3001/mcp",
        "http://",
        "${HOST}/mcp",
    ] {
        let e = err(&format!("[servers.r]\n\nurl = \"{bad}\"\n"));
        assert!(
            e.starts_with("test.toml:3: servers.r.url must start with http:// or https://"),
            "{e}"
        );
    }
    ok("[servers.r]\nurl = \"HTTPS://Example.com/mcp\"\n");
}

#[test]
fn keys_of_the_other_transport_are_rejected() {
    let e = err("[servers.s]\ncommand = \"s\"\nheaders = { X = \"1\" }\n");
    assert_eq!(
        e,
        "test.toml:3: servers.s.headers only applies to an HTTP upstream (`url`)"
    );
    let e = err("[servers.h]\nurl = \"http://h\"\ncwd = \"/\"\n");
    assert_eq!(
        e,
        "test.toml:3: servers.h.cwd only applies to a stdio upstream (`command`)"
    );
}

#[test]
fn malformed_headers_env_and_uri_prefixes_are_rejected() {
    let e = err("[servers.h]\nurl = \"http://h\"\nheaders = { \"Bad Name\" = \"1\" }\n");
    assert!(
        e.starts_with("test.toml:3: servers.h.headers.\"Bad Name\":"),
        "{e}"
    );
    let e = err("[servers.h]\nurl = \"http://h\"\nheaders = { X = \"a\\r\\nInjected: 1\" }\n");
    assert!(
        e.contains("servers.h.headers.X must not contain a line break"),
        "{e}"
    );
    let e = err("[servers.s]\ncommand = \"s\"\nenv = { \"A=B\" = \"1\" }\n");
    assert!(e.starts_with("test.toml:3: servers.s.env.\"A=B\":"), "{e}");
    let e = err("[servers.s]\ncommand = \"s\"\nuri_prefixes = [\"a://\", \"\"]\n");
    assert!(
        e.starts_with("test.toml:3: servers.s.uri_prefixes[1] must not be empty"),
        "{e}"
    );
}

#[test]
fn missing_env_var_names_the_variable_and_the_key() {
    let e = err("[servers.remote]\nurl = \"http://r\"\nheaders = { Authorization = \"Bearer ${NOPE_TOKEN}\" }\n");
    assert_eq!(
        e,
        "test.toml:3: servers.remote.headers.Authorization uses ${NOPE_TOKEN}, which is not set"
    );
    let e = err("[servers.s]\ncommand = \"s\"\nargs = [\"ok\",\n  \"${MISSING}\"]\n");
    assert_eq!(
        e,
        "test.toml:4: servers.s.args[1] uses ${MISSING}, which is not set"
    );
    let e = err("[servers.s]\ncommand = \"s\"\nargs = [\"${UNCLOSED\"]\n");
    assert!(
        e.starts_with("test.toml:3: servers.s.args[0] has a `${` without a closing `}`"),
        "{e}"
    );
}

#[test]
fn expansion_applies_only_to_the_listed_keys() {
    let c =
        ok("[servers.s]\ncommand = \"s\"\nprefix = \"${HOST}\"\nuri_prefixes = [\"${HOST}\"]\n");
    let s = &c.servers.0[0];
    assert_eq!(s.prefix.as_deref(), Some("${HOST}"));
    assert_eq!(s.uri_prefixes, ["${HOST}"]);
    // A value that itself contains `${` is not expanded again.
    let c = ok("[servers.s]\ncommand = \"${WEIRD}\"\n");
    assert_eq!(c.servers.0[0].command.as_deref(), Some("a${b}"));
}

#[test]
fn redacted_output_hides_headers_and_env_values() {
    let text = ok(FULL).to_toml_redacted();
    assert!(!text.contains("tok-123"), "{text}");
    assert!(text.contains("Authorization = \"<redacted>\""), "{text}");
    assert!(text.contains("API_KEY = \"<redacted>\""), "{text}");
    // Everything else is shown resolved, `${` escaped so it reads back literally.
    assert!(
        text.contains("/opt/bin/server") && text.contains("$${LITERAL}"),
        "{text}"
    );
    assert!(text.contains("request_timeout_ms = 5"), "{text}");
}

#[test]
fn redacted_output_parses_back_to_the_same_config() {
    let original = ok(FULL);
    let text = original.to_toml_redacted();
    let back = parse_with_env(&text, "redacted", |_| None)
        .unwrap_or_else(|e| panic!("redacted output must parse: {e}\n{text}"));
    let mut expected = original.clone();
    for server in &mut expected.servers.0 {
        server.env.values_mut().for_each(|v| *v = REDACTED.into());
        server
            .headers
            .values_mut()
            .for_each(|v| *v = REDACTED.into());
    }
    assert_eq!(back, expected);
    assert_eq!(back.to_toml_redacted(), text);
    // The defaults-only config round-trips too.
    let minimal = ok(ONE_SERVER);
    assert_eq!(ok(&minimal.to_toml_redacted()), minimal);
}

#[test]
fn auth_token_reads_the_named_variable() {
    let mut listen = ListenConfig::default();
    assert_eq!(listen.auth_token_with(|_| None).ok(), Some(None));
    listen.auth_token_env = Some("MUX_TOKEN".into());
    let token = listen.auth_token_with(|n| (n == "MUX_TOKEN").then(|| "t0k".to_owned()));
    assert_eq!(token.ok(), Some(Some("t0k".to_owned())));
    let unset = listen.auth_token_with(|_| None).map_err(|e| e.to_string());
    assert_eq!(
        unset,
        Err("listen.auth_token_env names MUX_TOKEN, which is not set or is empty".into())
    );
    assert!(listen.auth_token_with(|_| Some(String::new())).is_err());
    let e = err(&format!(
        "[listen]\nauth_token_env = \"${{MUX_TOKEN}}\"\n{ONE_SERVER}"
    ));
    assert!(
        e.starts_with("test.toml:2: listen.auth_token_env must be the name"),
        "{e}"
    );
}

#[test]
fn config_path_is_flag_then_env_then_default() {
    let flag = Some(PathBuf::from("flag.toml"));
    let env = Some(OsString::from("env.toml"));
    assert_eq!(
        resolve_path_with(flag, env.clone()),
        PathBuf::from("flag.toml")
    );
    assert_eq!(resolve_path_with(None, env), PathBuf::from("env.toml"));
    assert_eq!(
        resolve_path_with(None, Some(OsString::new())),
        PathBuf::from("mcpmux.toml")
    );
    assert_eq!(resolve_path_with(None, None), PathBuf::from("mcpmux.toml"));
}

#[test]
fn load_names_a_missing_file() {
    let path = Path::new("/nonexistent/mcpmux-test/none.toml");
    let e = load(path).map(|_| ()).map_err(|e| e.to_string());
    let e = e.expect_err("no such file");
    assert!(
        e.starts_with("cannot read config file /nonexistent/mcpmux-test/none.toml: "),
        "{e}"
    );
}

const TWO_SERVERS: &str = "[servers.a]\ncommand = \"a\"\n[servers.b]\ncommand = \"b\"\n";

#[test]
fn profiles_parse_with_their_default_paths_and_filters() {
    let c = ok(&format!(
        "{TWO_SERVERS}tools_deny = [\"rm_*\"]\ntool_rename = {{ echo = \"say\" }}\n\
         [profiles.desk]\nservers = [\"a\"]\n\
         [profiles.proj]\nservers = [\"a\", \"b\"]\npath = \"/p\"\nauth_token_env = \"PROJ\"\n\
         tools_allow = [\"b__*\"]\n"
    ));
    assert_eq!(c.profiles["desk"].path(), "/mcp/desk");
    assert_eq!(c.profiles["proj"].path(), "/p");
    assert_eq!(c.profiles["proj"].name, "proj");
    assert!(c.profiles["proj"].tool_filter().allows("b__x"));
    assert!(!c.profiles["proj"].tool_filter().allows("a__x"));
    let b = &c.servers.0[1];
    assert!(!b.view().tools.allows("rm_rf"));
    assert_eq!(
        b.view()
            .shown(crate::state::catalog::ListKind::Tools, "echo"),
        Some("say")
    );
    // Filters alone changed: the same session.
    let mut plain = b.clone();
    plain.tools_deny.clear();
    assert!(plain.same_session(b) && plain != *b);
    plain.command = Some("other".into());
    assert!(!plain.same_session(b));
    // The token is read through the lookup, never stored.
    assert_eq!(
        c.profiles["proj"]
            .auth_token_with(|v| (v == "PROJ").then(|| "t".into()))
            .unwrap(),
        Some("t".into())
    );
    assert!(c.profiles["proj"].auth_token_with(|_| None).is_err());
}

#[test]
fn bad_profiles_and_filters_name_the_key() {
    let e = err(&format!(
        "{TWO_SERVERS}[profiles.x]\nservers = [\"a\", \"nope\"]\n"
    ));
    assert!(
        e.contains("profiles.x.servers[1]") && e.contains("\"nope\""),
        "{e}"
    );
    let e = err(&format!("{TWO_SERVERS}tools_allow = [\"ok*\", \"bad[\"]\n"));
    assert!(
        e.contains("servers.b.tools_allow[1]") && e.contains("bad glob"),
        "{e}"
    );
    let e = err(&format!(
        "{TWO_SERVERS}tool_rename = {{ x = \"same\", y = \"same\" }}\n"
    ));
    assert!(
        e.contains("servers.b.tool_rename.y") && e.contains("collides"),
        "{e}"
    );
    let e = err(&format!(
        "{TWO_SERVERS}[profiles.x]\nservers = [\"a\"]\npath = \"/mcp\"\n"
    ));
    assert!(
        e.contains("profiles.x.path") && e.contains("listen.path"),
        "{e}"
    );
    let e = err(&format!(
        "{TWO_SERVERS}[profiles.x]\nservers = [\"a\"]\npath = \"/same\"\n\
         [profiles.y]\nservers = [\"b\"]\npath = \"/same\"\n"
    ));
    assert!(
        e.contains("profiles.y.path") && e.contains("profiles.x.path"),
        "{e}"
    );
    for taken in ["/metrics", "/oauth/callback", "/login/a"] {
        let e = err(&format!(
            "{TWO_SERVERS}[profiles.x]\nservers = [\"a\"]\npath = \"{taken}\"\n"
        ));
        assert!(e.contains("operator"), "{taken}: {e}");
    }
    let e = err(&format!("{TWO_SERVERS}[profiles.x]\nservers = []\n"));
    assert!(e.contains("profiles.x.servers names no server"), "{e}");
    let e = err(&format!(
        "{TWO_SERVERS}[profiles.\"a b\"]\nservers = [\"a\"]\n"
    ));
    assert!(e.contains("letters, digits"), "{e}");
    let e = err(&format!(
        "{TWO_SERVERS}[profiles.x]\nservers = [\"a\"]\nbogus = 1\n"
    ));
    assert!(e.contains("unknown field `bogus`"), "{e}");
}

#[test]
fn telemetry_needs_an_http_endpoint_and_a_ratio_in_range() {
    let c = ok(&format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nsample_ratio = 0.25\n{ONE_SERVER}"
    ));
    let t = c.telemetry.unwrap();
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    assert_eq!(t.sample_ratio, Some(0.25));
    let e = err(&format!(
        "[telemetry]\notlp_endpoint = \"127.0.0.1:4318\"\n{ONE_SERVER}"
    ));
    assert!(
        e.contains("telemetry.otlp_endpoint must start with http://"),
        "{e}"
    );
    let e = err(&format!("[telemetry]\nsample_ratio = 1.5\n{ONE_SERVER}"));
    assert!(
        e.contains("telemetry.sample_ratio must be between 0.0 and 1.0"),
        "{e}"
    );
    let e = err(&format!("[telemetry]\nendpoint = \"x\"\n{ONE_SERVER}"));
    assert!(e.contains("unknown field `endpoint`"), "{e}");
}

#[test]
fn oauth_keys_and_the_auth_table_parse_with_defaults() {
    let c = ok(
        "[auth]\nstore = \"file\"\nstore_dir = \"/var/lib/mcpmux\"\n\n[servers.r]\nurl = \"https://x/mcp\"\n\n\
         [servers.r.oauth]\nclient_id = \"abc\"\nclient_secret_env = \"R_SECRET\"\nscopes = [\"read\", \"write\"]\n",
    );
    assert_eq!(c.auth.store, TokenStoreKind::File);
    let o = c.servers.0[0].oauth.clone().unwrap();
    assert_eq!(o.client_id.as_deref(), Some("abc"));
    assert!(o.auto_login, "auto_login defaults to true");
    assert_eq!(ok(ONE_SERVER).auth, AuthConfig::default());
    // `check` prints what parses back, and never the secret (only its variable's name).
    let shown = c.to_toml_redacted();
    assert!(
        shown.contains("client_secret_env = \"R_SECRET\""),
        "{shown}"
    );
    assert_eq!(parse(&shown, ORIGIN).unwrap().auth, c.auth);
}

#[test]
fn oauth_mistakes_are_named() {
    let e = err("[servers.a]\ncommand = \"a\"\n[servers.a.oauth]\nclient_id = \"x\"\n");
    assert!(
        e.contains("servers.a.oauth only applies to an HTTP upstream"),
        "{e}"
    );
    let e = err("[servers.r]\nurl = \"https://x\"\n[servers.r.oauth]\nclient_metadata_url = \"http://x/cimd.json\"\n");
    assert!(
        e.contains("servers.r.oauth.client_metadata_url must be an https URL"),
        "{e}"
    );
    let e = err("[servers.r]\nurl = \"https://x\"\n[servers.r.oauth]\nclient_secret_env = \"S\"\n");
    assert!(e.contains("needs `client_id` beside it"), "{e}");
    let e = err("[servers.r]\nurl = \"https://x\"\n[servers.r.oauth]\nscopes = [\"a b\"]\n");
    assert!(e.contains("servers.r.oauth.scopes[0]"), "{e}");
    let e = err("[auth]\nstore = \"vault\"\n[servers.a]\ncommand = \"a\"\n");
    assert!(e.contains("vault"), "{e}");
}
