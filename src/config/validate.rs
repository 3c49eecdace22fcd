//! Checks a deserialized [`Config`] and expands `${NAME}` in its server strings.
//!
//! Owns: every rule a well-typed config can still break (see the parent module docs for
//! the list) and the mapping from a key path back to its line in the file.
//! Never: reads the environment itself (a lookup closure is passed in) or the file.

use super::expand::{self, ExpandError};
use super::problem::{invalid, KeyPath, Problem};
use super::{Config, LimitsConfig, ListenConfig, RestartConfig, ServerConfig};

/// Expands the server strings in place, then checks every rule; stops at the first problem.
pub(super) fn validate(
    cfg: &mut Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Problem> {
    check_listen(&cfg.listen)?;
    check_limits(&cfg.limits)?;
    check_restart(&cfg.restart)?;
    if let Some(fleet) = &cfg.fleet {
        check_fleet(fleet)?;
    }
    if let Some(t) = &cfg.telemetry {
        super::telemetry::check(t)?;
    }
    if cfg.servers.0.is_empty() {
        return Err(invalid(
            &KeyPath::new(&["servers"]),
            "no [servers.NAME] table: mcpmux needs at least one upstream",
        ));
    }
    for server in &mut cfg.servers.0 {
        expand_server(server, env)?;
        check_server(server)?;
    }
    let servers = &cfg.servers.0;
    for (i, server) in servers.iter().enumerate() {
        let Some(prefix) = &server.prefix else {
            continue;
        };
        if let Some(first) = servers[..i]
            .iter()
            .find(|s| s.prefix.as_ref() == Some(prefix))
        {
            let at = KeyPath::server(&server.name).child("prefix");
            return Err(invalid(
                &at,
                format!(
                    "{at} = {prefix:?} is already used by {}; prefixes must be unique",
                    KeyPath::server(&first.name).child("prefix")
                ),
            ));
        }
    }
    super::profile::check_views(cfg)
}

fn positive(at: &[&str], value: u64) -> Result<(), Problem> {
    if value == 0 {
        let at = KeyPath::new(at);
        return Err(invalid(&at, format!("{at} must be greater than 0")));
    }
    Ok(())
}

/// `listen.path` is a route of the HTTP router next to the operator's: it may not be
/// one of the routes that cannot give way to it (`/oauth/callback`, `/login/NAME`),
/// nor hold the router's own syntax (`{name}` captures, `:` and `*` segments). The
/// operator's pages (`/`, `/status`, ...) do give way: the endpoint may be served there.
fn check_listen_path(path: &str) -> Result<(), Problem> {
    let at = KeyPath::new(&["listen", "path"]);
    let why = if path == crate::oauth::callback::DAEMON_CALLBACK_PATH || path.starts_with("/login/")
    {
        Some("is a path mcpmux's OAuth logins use")
    } else if path.contains(['{', '}'])
        || path
            .split('/')
            .any(|segment| segment.starts_with([':', '*']))
    {
        Some("may not hold `{`, `}`, or a segment starting with `:` or `*`")
    } else {
        None
    };
    match why {
        Some(why) => Err(invalid(&at, format!("{at} = {path:?} {why}"))),
        None => Ok(()),
    }
}

fn check_listen(listen: &ListenConfig) -> Result<(), Problem> {
    if !listen.path.starts_with('/') {
        let at = KeyPath::new(&["listen", "path"]);
        let message = format!("{at} must start with `/` (got {:?})", listen.path);
        return Err(invalid(&at, message));
    }
    check_listen_path(&listen.path)?;
    positive(&["listen", "session_idle_ms"], listen.session_idle_ms)?;
    if let Some(var) = &listen.auth_token_env {
        if var.is_empty() || var.contains(['=', '\0', '$', '{', '}']) {
            let at = KeyPath::new(&["listen", "auth_token_env"]);
            let message = format!(
                "{at} must be the name of an environment variable, such as \"MCPMUX_TOKEN\" \
                 (not the token, and not ${{...}}); got {var:?}"
            );
            return Err(invalid(&at, message));
        }
    }
    Ok(())
}

fn check_limits(limits: &LimitsConfig) -> Result<(), Problem> {
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    positive(
        &["limits", "max_message_bytes"],
        as_u64(limits.max_message_bytes),
    )?;
    positive(&["limits", "max_clients"], as_u64(limits.max_clients))?;
    positive(
        &["limits", "max_subscriptions_per_client"],
        as_u64(limits.max_subscriptions_per_client),
    )?;
    positive(&["limits", "client_queue"], as_u64(limits.client_queue))?;
    positive(&["limits", "request_timeout_ms"], limits.request_timeout_ms)?;
    positive(
        &["limits", "max_pending_per_client"],
        as_u64(limits.max_pending_per_client),
    )?;
    positive(
        &["limits", "max_connections"],
        as_u64(limits.max_connections),
    )?;
    positive(
        &["limits", "header_read_timeout_ms"],
        limits.header_read_timeout_ms,
    )
}

fn check_fleet(fleet: &crate::config::FleetConfig) -> Result<(), Problem> {
    if !fleet.nats.starts_with("nats://") && !fleet.nats.starts_with("tls://") {
        let at = KeyPath::new(&["fleet", "nats"]);
        return Err(invalid(
            &at,
            format!(
                "{at} must start with nats:// or tls:// (got {:?})",
                fleet.nats
            ),
        ));
    }
    let ok = !fleet.name.is_empty()
        && fleet
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        let at = KeyPath::new(&["fleet", "name"]);
        return Err(invalid(
            &at,
            format!(
                "{at} must be letters, digits, - and _ (got {:?})",
                fleet.name
            ),
        ));
    }
    if fleet.lease_ms < 500 {
        let at = KeyPath::new(&["fleet", "lease_ms"]);
        return Err(invalid(&at, format!("{at} must be at least 500")));
    }
    Ok(())
}

fn check_restart(restart: &RestartConfig) -> Result<(), Problem> {
    positive(
        &["restart", "initial_backoff_ms"],
        restart.initial_backoff_ms,
    )?;
    positive(
        &["restart", "max_failures"],
        u64::from(restart.max_failures),
    )?;
    positive(&["restart", "init_timeout_ms"], restart.init_timeout_ms)?;
    if restart.max_backoff_ms < restart.initial_backoff_ms {
        let at = KeyPath::new(&["restart", "max_backoff_ms"]);
        let message = format!(
            "{at} ({}) must be at least restart.initial_backoff_ms ({})",
            restart.max_backoff_ms, restart.initial_backoff_ms
        );
        return Err(invalid(&at, message));
    }
    Ok(())
}

/// Expands `${NAME}` in `command`, `args`, `env` values, `cwd`, `url` and `headers` values.
fn expand_server(
    server: &mut ServerConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Problem> {
    let base = KeyPath::server(&server.name);
    let one = |value: &mut String, at: KeyPath| -> Result<(), Problem> {
        match expand::expand(value, env) {
            Ok(expanded) => {
                *value = expanded;
                Ok(())
            }
            Err(ExpandError::Unset(var)) => Err(Problem::MissingVar { at, var }),
            Err(ExpandError::Unterminated) => Err(invalid(
                &at,
                format!(
                    "{at} has a `${{` without a closing `}}` (write `$${{` for a literal `${{`)"
                ),
            )),
            Err(ExpandError::BadName(name)) => Err(invalid(
                &at,
                format!(
                    "{at} uses ${{{name}}}, which is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
                ),
            )),
        }
    };
    if let Some(command) = &mut server.command {
        one(command, base.child("command"))?;
    }
    for (i, arg) in server.args.iter_mut().enumerate() {
        one(arg, base.child("args").at(i))?;
    }
    for (key, value) in &mut server.env {
        one(value, base.child("env").child(key))?;
    }
    if let Some(cwd) = &mut server.cwd {
        if let Some(text) = cwd.to_str() {
            let mut text = text.to_owned();
            one(&mut text, base.child("cwd"))?;
            *cwd = text.into();
        }
    }
    if let Some(url) = &mut server.url {
        one(url, base.child("url"))?;
    }
    for (key, value) in &mut server.headers {
        one(value, base.child("headers").child(key))?;
    }
    Ok(())
}

/// An HTTP header name: RFC 9110 `token` characters.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_server(server: &ServerConfig) -> Result<(), Problem> {
    let base = KeyPath::server(&server.name);
    if server.name.is_empty() {
        return Err(invalid(
            &base,
            format!("{base}: a server name must not be empty"),
        ));
    }
    match (&server.command, &server.url) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                &base,
                format!("{base} has both `command` (stdio) and `url` (HTTP); set exactly one"),
            ))
        }
        (None, None) => {
            return Err(invalid(
                &base,
                format!("{base} needs `command` (a stdio upstream) or `url` (an HTTP upstream)"),
            ))
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                let at = base.child("command");
                return Err(invalid(&at, format!("{at} must not be empty")));
            }
            if server.oauth.is_some() {
                let at = base.child("oauth");
                let message = format!("{at} only applies to an HTTP upstream (`url`)");
                return Err(invalid(&at, message));
            }
            if !server.headers.is_empty() {
                let at = base.child("headers");
                let message = format!("{at} only applies to an HTTP upstream (`url`)");
                return Err(invalid(&at, message));
            }
        }
        (None, Some(url)) => {
            let lower = url.to_ascii_lowercase();
            let rest = lower
                .strip_prefix("http://")
                .or_else(|| lower.strip_prefix("https://"));
            if rest.is_none_or(str::is_empty) {
                let at = base.child("url");
                let message = format!("{at} must start with http:// or https:// (got {url:?})");
                return Err(invalid(&at, message));
            }
            let stdio_only = [
                ("args", !server.args.is_empty()),
                ("env", !server.env.is_empty()),
                ("cwd", server.cwd.is_some()),
            ];
            if let Some((key, _)) = stdio_only.iter().find(|(_, set)| *set) {
                let at = base.child(key);
                let message = format!("{at} only applies to a stdio upstream (`command`)");
                return Err(invalid(&at, message));
            }
        }
    }
    for (key, value) in &server.env {
        let at = base.child("env").child(key);
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            let message = format!("{at}: an environment variable name must be non-empty without `=`, and no NUL byte may appear");
            return Err(invalid(&at, message));
        }
    }
    for (key, value) in &server.headers {
        let at = base.child("headers").child(key);
        if !is_header_name(key) {
            let message = format!("{at}: {key:?} is not a valid HTTP header name");
            return Err(invalid(&at, message));
        }
        if value.contains(['\r', '\n', '\0']) {
            let message = format!("{at} must not contain a line break or NUL byte");
            return Err(invalid(&at, message));
        }
    }
    if let Some(oauth) = &server.oauth {
        let at = base.child("oauth");
        if oauth
            .client_id
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            let at = at.child("client_id");
            return Err(invalid(&at, format!("{at} must not be empty")));
        }
        if oauth.client_secret_env.is_some() && oauth.client_id.is_none() {
            let at = at.child("client_secret_env");
            let message = format!(
                "{at} needs `client_id` beside it (a secret belongs to a pre-registered client)"
            );
            return Err(invalid(&at, message));
        }
        if let Some(env) = &oauth.client_secret_env {
            if env.is_empty() || env.contains(['=', '\0', '$']) {
                let at = at.child("client_secret_env");
                let message = format!("{at} is the name of an environment variable (got {env:?})");
                return Err(invalid(&at, message));
            }
        }
        if let Some(cimd) = &oauth.client_metadata_url {
            let ok = reqwest::Url::parse(cimd)
                .is_ok_and(|u| u.scheme() == "https" && u.path() != "/" && u.fragment().is_none());
            if !ok {
                let at = at.child("client_metadata_url");
                let message = format!("{at} must be an https URL with a path, as a Client ID Metadata Document's URL is (got {cimd:?})");
                return Err(invalid(&at, message));
            }
        }
        if let Some(i) = oauth
            .scopes
            .iter()
            .position(|s| s.is_empty() || s.contains(char::is_whitespace))
        {
            let at = at.child("scopes").at(i);
            let message = format!("{at} must be one non-empty scope without whitespace");
            return Err(invalid(&at, message));
        }
    }
    if let Some(prefix) = &server.prefix {
        // The separators (`p__tool`, `p+uri`) inside a prefix, or a `_` before `__`,
        // would make two prefixes overlap (`a` and `a__b`, `a` and `a_`), and a name
        // of one read as the other's.
        if prefix.is_empty()
            || prefix.contains(char::is_whitespace)
            || prefix.contains("__")
            || prefix.contains('+')
            || prefix.ends_with('_')
        {
            let at = base.child("prefix");
            let message = format!(
                "{at} must be non-empty, without whitespace, `__` or `+`, and not end in `_` (got {prefix:?})"
            );
            return Err(invalid(&at, message));
        }
    }
    if let Some(i) = server.uri_prefixes.iter().position(String::is_empty) {
        let at = base.child("uri_prefixes").at(i);
        let message = format!("{at} must not be empty (it would claim every URI)");
        return Err(invalid(&at, message));
    }
    Ok(())
}
