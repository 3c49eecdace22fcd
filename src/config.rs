//! Configuration: the TOML file of DESIGN.md §5, validated, with `${ENV}` expanded.
//!
//! Owns: the config types, their defaults (`DEFAULT_*`), loading and validation.
//! Never: starts anything or does I/O beyond reading the file and the environment.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// Upstreams in config order (the order decides collisions).
    #[serde(default)]
    pub servers: indexmap_like::OrderedServers,
}

/// `[listen]`: the downstream Streamable HTTP endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenConfig {
    pub http: SocketAddr,
    pub path: String,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
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

/// How a client's subscribe capability is judged (DESIGN.md "Capability gating").
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
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SubscriptionsConfig {
    pub client_capability: ClientCapabilityPolicy,
    /// Delay before the upstream unsubscribe after the last holder leaves.
    pub linger_ms: u64,
}

/// `[cache]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub max_entries: usize,
    pub max_bytes: usize,
}

impl CacheConfig {
    pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
    pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;
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
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_message_bytes: usize,
    pub max_clients: usize,
    pub max_subscriptions_per_client: usize,
    pub client_queue: usize,
    pub request_timeout_ms: u64,
    pub max_pending_per_client: usize,
}

impl LimitsConfig {
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
    pub const DEFAULT_MAX_CLIENTS: usize = 1024;
    pub const DEFAULT_MAX_SUBSCRIPTIONS_PER_CLIENT: usize = 4096;
    pub const DEFAULT_CLIENT_QUEUE: usize = 1024;
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
    pub const DEFAULT_MAX_PENDING_PER_CLIENT: usize = 1024;
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
        }
    }
}

/// `[restart]`: how a dead upstream is brought back.
#[derive(Debug, Clone, Deserialize, Serialize)]
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

/// `[servers.NAME]`: one upstream. Exactly one of `command` and `url`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Set from the table key after loading.
    #[serde(skip)]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default)]
    pub force_subscribe: bool,
    #[serde(default)]
    pub lazy: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uri_prefixes: Vec<String>,
}

/// The transport of one upstream, derived from its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTransport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl ServerConfig {
    pub fn transport(&self) -> UpstreamTransport {
        match (&self.command, &self.url) {
            (Some(command), _) => UpstreamTransport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
                cwd: self.cwd.clone(),
            },
            (None, Some(url)) => UpstreamTransport::Http {
                url: url.clone(),
                headers: self.headers.clone(),
            },
            (None, None) => unreachable!("validated: a server has a command or a url"),
        }
    }
}

/// Server tables in file order.
pub mod indexmap_like {
    use super::ServerConfig;
    use serde::de::{MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Debug, Clone, Default)]
    pub struct OrderedServers(pub Vec<ServerConfig>);

    impl<'de> Deserialize<'de> for OrderedServers {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = OrderedServers;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a table of server tables")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some(name) = m.next_key::<String>()? {
                        let mut s: ServerConfig = m.next_value()?;
                        s.name = name;
                        out.push(s);
                    }
                    Ok(OrderedServers(out))
                }
            }
            d.deserialize_map(V)
        }
    }

    impl Serialize for OrderedServers {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for server in &self.0 {
                m.serialize_entry(&server.name, server)?;
            }
            m.end()
        }
    }
}
