//! `[servers.NAME]`: one upstream's settings and the enums they use (transport, era,
//! cache scope, the capabilities mcpmux declares to it, the unrelated-messages policy),
//! and the ordered server table.
//!
//! Plain data read by serde; validation is `validate.rs`'s. Never reads the environment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[servers.NAME]`: one upstream. Exactly one of `command` and `url`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
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
    /// Client capabilities mcpmux declares to this server in `initialize`: the
    /// server→client requests it may send, which mcpmux routes to the client whose
    /// request they belong to (when that client declared the capability too).
    #[serde(default = "ClientCapability::all")]
    pub client_capabilities: Vec<ClientCapability>,
    /// Where this server's messages that belong to no client request go.
    #[serde(default)]
    pub unrelated_messages: UnrelatedPolicy,
    /// `ttlMs` told 2026-07-28 clients for this server's cacheable results when it
    /// gives none (legacy servers never do). 0 = do not reuse.
    #[serde(default)]
    pub ttl_ms: u64,
    /// `cacheScope` told 2026-07-28 clients likewise.
    #[serde(default)]
    pub cache_scope: CacheScope,
    /// Which protocol era mcpmux speaks to this server (docs/architecture.md,
    /// "Upstreams of both eras").
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// Globs on the server's own tool names: what every view shows (docs/architecture.md,
    /// "Profiles"). The same for prompts, and for resource URIs and URI templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts_deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources_deny: Vec<String>,
    /// The server's own tool name → the name clients see (before any prefix).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_rename: BTreeMap<String, String>,
    /// The server's own tool name → the description clients see.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_descriptions: BTreeMap<String, String>,
    /// `[servers.NAME.oauth]`: how mcpmux logs in when the server asks for OAuth (HTTP
    /// only). Absent = the defaults: mcpmux still logs in when the server asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<super::OAuthServerConfig>,
}

/// The protocol era mcpmux uses with one upstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// Probe as the spec's dual-era rules say (a modern request first), fall back
    /// to the `initialize` handshake.
    #[default]
    Auto,
    /// Only the `initialize` handshake (2025-11-25 and earlier).
    Legacy,
    /// Only stateless 2026-07-28 requests.
    Modern,
}

/// Who may reuse a cached result (`cacheScope` of 2026-07-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Only within one authorization context.
    #[default]
    Private,
    /// Any shared intermediary may serve it to anyone.
    Public,
}

/// A client capability mcpmux can declare upstream and route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientCapability {
    /// `sampling/createMessage`.
    Sampling,
    /// `elicitation/create`, form and URL modes.
    Elicitation,
    /// `roots/list`, with `notifications/roots/list_changed` forwarded.
    Roots,
}

impl ClientCapability {
    pub fn all() -> Vec<ClientCapability> {
        vec![Self::Sampling, Self::Elicitation, Self::Roots]
    }

    /// The key in `ClientCapabilities`.
    pub fn key(self) -> &'static str {
        match self {
            Self::Sampling => "sampling",
            Self::Elicitation => "elicitation",
            Self::Roots => "roots",
        }
    }

    /// The `capabilities` object of mcpmux's `initialize` for these.
    pub fn declared(caps: &[ClientCapability]) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for c in caps {
            let v = match c {
                Self::Sampling => serde_json::json!({}),
                Self::Elicitation => serde_json::json!({"form": {}, "url": {}}),
                Self::Roots => serde_json::json!({"listChanged": true}),
            };
            out.insert(c.key().to_owned(), v);
        }
        serde_json::Value::Object(out)
    }
}

/// Where a server's messages go that belong to no client request (a log line or an
/// unknown notification sent on its own, or on stdio while several clients wait):
/// docs/architecture.md, "Server messages and their clients".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnrelatedPolicy {
    /// Delivered to nobody (written to mcpmux's own log at debug level). Nothing a
    /// client did not ask for can leak.
    #[default]
    None,
    /// Log messages go to the clients that asked for logs with `logging/setLevel`
    /// (filtered by their level); other notifications to nobody.
    LogLevel,
    /// Everything to every client (log messages filtered by each client's level).
    All,
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

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
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
