//! Configuration: the TOML file (docs/architecture.md, "Commands and configuration"),
//! validated, with `${ENV}` expanded.
//!
//! Owns: the config types, their defaults (`DEFAULT_*`), loading, `${NAME}` expansion,
//! validation, and the redacted rendering printed by `mcpmux check`.
//! Never: starts anything, or does I/O beyond reading the file and the environment
//! (only [`load`], [`parse`], [`resolve_path`] and [`ListenConfig::auth_token`] read it;
//! the `*_with` variants take a lookup closure instead, for tests).
//!
//! Every error message is one line, `FILE:LINE[:COLUMN]: message` (the line is left out
//! when the key is not in the file), and names the key. Loading stops at the first one:
//!
//! ```text
//! mcpmux.toml:7:1: unknown field `bogus`, expected one of `command`, `args`, ...
//! mcpmux.toml:12: servers.remote.url must start with http:// or https:// (got "ftp://x")
//! mcpmux.toml:14: servers.remote.headers.Authorization uses ${REMOTE_TOKEN}, which is not set
//! mcpmux.toml: no [servers.NAME] table: mcpmux needs at least one upstream
//! ```
//!
//! Rules beyond the types (decisions recorded here):
//! - At least one `[servers.NAME]`; a non-empty NAME; exactly one of `command` (stdio)
//!   and `url` (HTTP). Keys of the other transport are an error rather than ignored:
//!   `headers` on a stdio server, `args`/`env`/`cwd` on an HTTP one.
//! - `url` starts with `http://` or `https://`; `prefix` is non-empty without whitespace,
//!   `__` or `+` (the separators it is joined with) and does not end in `_`, and is
//!   unique across servers; `uri_prefixes` entries are non-empty; header names are
//!   HTTP tokens and header values hold no line break.
//! - `listen.path` starts with `/`. `listen.auth_token_env` is a variable *name*; it is
//!   read only by [`ListenConfig::auth_token`], so `check` does not need the secret.
//! - Zero is rejected where it would make the proxy unusable: every `[limits]` key,
//!   `listen.session_idle_ms`, `restart.initial_backoff_ms`, `restart.max_failures`,
//!   `restart.init_timeout_ms`; `restart.max_backoff_ms >= restart.initial_backoff_ms`.
//! - `limits.request_max_total_ms` is taken as at least `limits.request_timeout_ms`
//!   (raising only the timeout must not make a file invalid).
//! - Zero is allowed and means "off" for: `limits.drain_ms` (cut in-flight requests at
//!   once on shutdown), `cache.max_entries` or `cache.max_bytes`
//!   (either one 0 disables the response cache, see [`CacheConfig::is_enabled`]),
//!   `listen.sse_replay_events` (no `Last-Event-ID` replay), `subscriptions.linger_ms`
//!   (unsubscribe upstream at once).
//! - `${NAME}` is expanded (rules in [`expand_env`]) in `command`, `args`, `env` values,
//!   `cwd`, `url` and `headers` values, and nowhere else. `$${` is a literal `${`.

mod expand;
mod oauth;
mod problem;
mod profile;
mod server;
mod telemetry;
#[cfg(test)]
mod tests;
mod validate;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use expand::{expand as expand_env, ExpandError};
pub use oauth::{AuthConfig, OAuthServerConfig, TokenStoreKind};
use problem::{line_of_offset, Problem};
pub use profile::ProfileConfig;
pub use server::*;
pub use telemetry::TelemetryConfig;
pub use validate::is_header_name;

/// The file read when neither `--config` nor `$MCPMUX_CONFIG` is given.
pub const DEFAULT_CONFIG_FILE: &str = "mcpmux.toml";
/// The environment variable naming the config file when `--config` is absent.
pub const CONFIG_ENV: &str = "MCPMUX_CONFIG";
/// What `headers` and `env` values become in [`Config::to_toml_redacted`].
pub const REDACTED: &str = "<redacted>";

/// Why a config could not be loaded. Each message is complete on its own (file, line,
/// key, reason), so the variants carry no `source()` chain to print twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Rejected while deserializing: TOML syntax, a wrong type, an unknown key, a bad
    /// enum value or address.
    #[error("{origin}{}: {message}", at(*line, *column))]
    Toml {
        origin: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// Well-typed but breaks a rule; `message` names the key.
    #[error("{origin}{}: {message}", at(*line, None))]
    Invalid {
        origin: String,
        line: Option<usize>,
        key: String,
        message: String,
    },
    /// A `${var}` used in `key` is not set.
    #[error("{origin}{}: {key} uses ${{{var}}}, which is not set", at(*line, None))]
    MissingEnv {
        origin: String,
        line: Option<usize>,
        key: String,
        var: String,
    },
    /// `listen.auth_token_env` names a variable that is unset or empty.
    #[error("listen.auth_token_env names {var}, which is not set or is empty")]
    AuthToken { var: String },
}

/// `:LINE` or `:LINE:COLUMN`, or nothing when the key is not in the file.
fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

/// The config file to read: the `--config` value, else `$MCPMUX_CONFIG` (if non-empty),
/// else `./mcpmux.toml`.
pub fn resolve_path(cli: Option<PathBuf>) -> PathBuf {
    resolve_path_with(cli, std::env::var_os(CONFIG_ENV))
}

fn resolve_path_with(cli: Option<PathBuf>, env: Option<OsString>) -> PathBuf {
    cli.or_else(|| env.filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE))
}

/// Reads, parses and validates the file at `path`, expanding `${NAME}` from the process
/// environment. Messages name the file as `path` was given.
///
/// # Errors
///
/// [`ConfigError::Read`] if the file cannot be read, otherwise as [`parse`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses and validates `text`, expanding `${NAME}` from the process environment.
/// `origin` names the text in messages (usually the file name).
///
/// # Errors
///
/// [`ConfigError::Toml`], [`ConfigError::Invalid`] or [`ConfigError::MissingEnv`]; see
/// the module docs for the rules.
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_with_env(text, origin, |name| std::env::var(name).ok())
}

/// [`parse`] with `${NAME}` looked up through `env` instead of the process environment.
///
/// # Errors
///
/// As [`parse`].
pub fn parse_with_env(
    text: &str,
    origin: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut config: Config = toml::from_str(text).map_err(|e| {
        let span = e.span();
        ConfigError::Toml {
            origin: origin.to_owned(),
            line: span.as_ref().map(|s| line_of_offset(text, s.start)),
            column: span.map(|s| column_of_offset(text, s.start)),
            message: e.message().trim_end().to_owned(),
        }
    })?;
    validate::validate(&mut config, &env).map_err(|problem| match problem {
        Problem::Invalid { at, message } => ConfigError::Invalid {
            origin: origin.to_owned(),
            line: at.line_in(text),
            key: at.to_string(),
            message,
        },
        Problem::MissingVar { at, var } => ConfigError::MissingEnv {
            origin: origin.to_owned(),
            line: at.line_in(text),
            key: at.to_string(),
            var,
        },
    })?;
    Ok(config)
}

/// 1-based column (in characters) of a byte offset.
fn column_of_offset(text: &str, offset: usize) -> usize {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    before[line_start..].chars().count() + 1
}

impl Config {
    /// The resolved config (defaults filled in, `${NAME}` expanded) as TOML, for
    /// `mcpmux check`. `headers` and `env` values become `"<redacted>"` since they
    /// often hold secrets; `${` in other strings is written as `$${` so the output
    /// parses back (with [`parse`]) to this config, redactions aside.
    pub fn to_toml_redacted(&self) -> String {
        let mut shown = self.clone();
        for server in &mut shown.servers.0 {
            server
                .env
                .values_mut()
                .for_each(|v| *v = REDACTED.to_owned());
            server
                .headers
                .values_mut()
                .for_each(|v| *v = REDACTED.to_owned());
            if let Some(command) = &mut server.command {
                *command = expand::escape(command);
            }
            server.args.iter_mut().for_each(|a| *a = expand::escape(a));
            if let Some(cwd) = &mut server.cwd {
                *cwd = expand::escape(&cwd.to_string_lossy()).into();
            }
            if let Some(url) = &mut server.url {
                *url = expand::escape(url);
            }
        }
        // Serializing these plain structs cannot fail; if it ever did, say so in the output
        // (which then fails to parse) rather than panic in `check`.
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot render the config: {e}\n"))
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub listen: ListenConfig,
    #[serde(default)]
    pub subscriptions: SubscriptionsConfig,
    #[serde(default)]
    pub cache: CacheConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub restart: RestartConfig,
    /// `[telemetry]`: OpenTelemetry export; absent = off (unless the OTLP variables are
    /// set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryConfig>,
    /// `[fleet]`: several instances sharing upstream subscriptions over NATS; absent =
    /// one instance on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetConfig>,
    /// `[auth]`: where upstream OAuth tokens are kept.
    #[serde(default, skip_serializing_if = "AuthConfig::is_default")]
    pub auth: AuthConfig,
    /// Upstreams in config order (the order decides collisions).
    #[serde(default)]
    pub servers: indexmap_like::OrderedServers,
    /// `[profiles.NAME]`: views of some servers at their own paths.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub profiles: std::collections::BTreeMap<String, ProfileConfig>,
}

/// `[listen]`: the downstream Streamable HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    /// Bind address; port 0 picks a free port.
    pub http: SocketAddr,
    /// The one Streamable HTTP endpoint; starts with `/`.
    pub path: String,
    /// `Origin` values accepted; a request with any other `Origin` gets 403.
    pub allowed_origins: Vec<String>,
    /// `Host` values accepted besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Name of the variable holding the bearer token; see [`ListenConfig::auth_token`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_token_env: Option<String>,
    /// A session with no request and no open stream for this long expires.
    pub session_idle_ms: u64,
    /// Events kept per session for `Last-Event-ID` replay on the GET stream.
    pub sse_replay_events: usize,
}

impl ListenConfig {
    pub const DEFAULT_HTTP: &'static str = "127.0.0.1:7878";
    pub const DEFAULT_PATH: &'static str = "/mcp";
    pub const DEFAULT_SESSION_IDLE_MS: u64 = 30 * 60 * 1000;
    pub const DEFAULT_SSE_REPLAY_EVENTS: usize = 1024;

    /// The bearer token clients must present, read from the variable named by
    /// `auth_token_env`; `None` when no token is configured.
    ///
    /// # Errors
    ///
    /// [`ConfigError::AuthToken`] if the variable is unset, empty or not UTF-8.
    pub fn auth_token(&self) -> Result<Option<String>, ConfigError> {
        self.auth_token_with(|name| std::env::var(name).ok())
    }

    /// [`ListenConfig::auth_token`] with the variable looked up through `env`.
    ///
    /// # Errors
    ///
    /// As [`ListenConfig::auth_token`].
    pub fn auth_token_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        token_from(self.auth_token_env.as_deref(), env)
    }
}

/// The bearer token in the variable `var` names (`None` when no variable is named).
///
/// # Errors
/// [`ConfigError::AuthToken`] if the variable is unset, empty or not UTF-8.
pub(crate) fn token_from(
    var: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let Some(var) = var else {
        return Ok(None);
    };
    match env(var) {
        Some(token) if !token.is_empty() => Ok(Some(token)),
        _ => Err(ConfigError::AuthToken {
            var: var.to_owned(),
        }),
    }
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            http: Self::DEFAULT_HTTP.parse().expect("valid default address"),
            path: Self::DEFAULT_PATH.into(),
            allowed_origins: vec!["http://localhost".into(), "http://127.0.0.1".into()],
            allowed_hosts: vec![],
            auth_token_env: None,
            session_idle_ms: Self::DEFAULT_SESSION_IDLE_MS,
            sse_replay_events: Self::DEFAULT_SSE_REPLAY_EVENTS,
        }
    }
}

/// How a client's subscribe capability is judged (docs/architecture.md, "Capability
/// gating").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClientCapabilityPolicy {
    /// Negotiated unless the client declared `resources.subscribe: false`.
    #[default]
    Offered,
    /// Negotiated only if the client declared `resources.subscribe: true`.
    Required,
}

/// `[subscriptions]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SubscriptionsConfig {
    pub client_capability: ClientCapabilityPolicy,
    /// Delay before the upstream unsubscribe after the last holder leaves; a
    /// re-subscribe within it cancels the unsubscribe. 0 = unsubscribe at once.
    pub linger_ms: u64,
}

impl SubscriptionsConfig {
    pub const DEFAULT_LINGER_MS: u64 = 0;
}

/// `[cache]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// LRU bound in entries (default 10 000); 0 disables the cache.
    pub max_entries: usize,
    /// LRU bound in bytes of cached results (default 64 MiB); 0 disables the cache.
    pub max_bytes: usize,
}

impl CacheConfig {
    pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
    pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

    /// False when either bound is 0: the config's way of turning the cache off.
    pub fn is_enabled(&self) -> bool {
        self.max_entries > 0 && self.max_bytes > 0
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Longest accepted message (line or HTTP body); longer ones are rejected unread.
    pub max_message_bytes: usize,
    /// Concurrent downstream sessions.
    pub max_clients: usize,
    /// Distinct URIs one client may hold.
    pub max_subscriptions_per_client: usize,
    /// Depth of each client's outbound queue before the slow-client policy applies.
    pub client_queue: usize,
    /// A request unanswered this long fails and the upstream gets `notifications/cancelled`.
    pub request_timeout_ms: u64,
    /// Requests one client may have in flight at once.
    pub max_pending_per_client: usize,
    /// Each progress notification restarts a request's `request_timeout_ms`, but never
    /// past this long after it was sent (taken as at least `request_timeout_ms`).
    pub request_max_total_ms: u64,
    /// On shutdown, requests in flight get this long to be answered before they are
    /// cut with an error. 0 = cut at once.
    pub drain_ms: u64,
    /// Open downstream TCP connections; at the bound the listener stops accepting
    /// until one closes (new connections wait in the kernel's listen backlog). The
    /// bound in force is the smaller of this and three quarters of the open-file limit
    /// (see `downstream::http::listener`).
    pub max_connections: usize,
    /// A connection has this long to send a complete request header, and this is also
    /// how long a keep-alive connection may sit idle between requests. It never limits
    /// a request body or a response (a long-lived SSE stream).
    pub header_read_timeout_ms: u64,
}

impl LimitsConfig {
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
    pub const DEFAULT_MAX_CLIENTS: usize = 1024;
    pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 4096;
    pub const DEFAULT_CLIENT_QUEUE: usize = 1024;
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
    pub const DEFAULT_MAX_PENDING_PER_CLIENT: usize = 1024;
    pub const DEFAULT_REQUEST_MAX_TOTAL_MS: u64 = 600_000;
    pub const DEFAULT_DRAIN_MS: u64 = 10_000;
    /// Well above what a local proxy's clients need (a session uses one to three
    /// connections), and clamped at run time to what the open-file limit allows.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
    /// Long enough for any real client on a loaded machine, and above the idle
    /// keep-alive timeouts of the common client stacks (undici 4 s, httpx 5 s), so a
    /// client closes an idle connection before the server does.
    pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            max_clients: Self::DEFAULT_MAX_CLIENTS,
            max_subscriptions_per_client: Self::DEFAULT_MAX_SUBSCRIPTIONS_PER_CLIENT,
            client_queue: Self::DEFAULT_CLIENT_QUEUE,
            request_timeout_ms: Self::DEFAULT_REQUEST_TIMEOUT_MS,
            max_pending_per_client: Self::DEFAULT_MAX_PENDING_PER_CLIENT,
            request_max_total_ms: Self::DEFAULT_REQUEST_MAX_TOTAL_MS,
            drain_ms: Self::DEFAULT_DRAIN_MS,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            header_read_timeout_ms: Self::DEFAULT_HEADER_READ_TIMEOUT_MS,
        }
    }
}

/// `[fleet]`: instances sharing one upstream subscription per URI over NATS
/// (docs/architecture.md, "Fleet").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// The NATS server, `nats://HOST:PORT` (JetStream enabled).
    pub nats: String,
    /// The fleet's name: instances with the same name share; it prefixes every subject
    /// and bucket. Letters, digits, `-` and `_`.
    #[serde(default = "FleetConfig::default_name")]
    pub name: String,
    /// How long an owner's lease lives unless renewed (a dead owner is replaced within
    /// about this long).
    #[serde(default = "FleetConfig::default_lease_ms")]
    pub lease_ms: u64,
    /// Environment variable holding a NATS token, if the server wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
}

impl FleetConfig {
    pub const DEFAULT_LEASE_MS: u64 = 10_000;
    fn default_name() -> String {
        "mcpmux".to_owned()
    }
    fn default_lease_ms() -> u64 {
        Self::DEFAULT_LEASE_MS
    }
}

/// `[restart]`: how a dead upstream is brought back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RestartConfig {
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// Consecutive failed starts after which the upstream is marked down.
    pub max_failures: u32,
    /// How long `initialize` may take before the start counts as failed.
    pub init_timeout_ms: u64,
}

impl RestartConfig {
    pub const DEFAULT_INITIAL_BACKOFF_MS: u64 = 250;
    pub const DEFAULT_MAX_BACKOFF_MS: u64 = 30_000;
    pub const DEFAULT_MAX_FAILURES: u32 = 8;
    pub const DEFAULT_INIT_TIMEOUT_MS: u64 = 30_000;
}

impl Default for RestartConfig {
    fn default() -> Self {
        RestartConfig {
            initial_backoff_ms: Self::DEFAULT_INITIAL_BACKOFF_MS,
            max_backoff_ms: Self::DEFAULT_MAX_BACKOFF_MS,
            max_failures: Self::DEFAULT_MAX_FAILURES,
            init_timeout_ms: Self::DEFAULT_INIT_TIMEOUT_MS,
        }
    }
}
