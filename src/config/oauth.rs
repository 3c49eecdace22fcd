//! `[servers.NAME.oauth]` and `[auth]`: how mcpmux logs in to an HTTP upstream that
//! asks for OAuth (docs/architecture.md, "OAuth toward upstreams"), and where it keeps
//! the tokens.
//!
//! Plain data read by serde; validation is `validate.rs`'s. Never reads the environment
//! (the secret named by `client_secret_env` is read by the OAuth client when it needs
//! it, so `check` never sees it) and never holds a token.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[servers.NAME.oauth]`: optional. A server that supports a Client ID Metadata
/// Document or Dynamic Client Registration needs none of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthServerConfig {
    /// A client id registered with the server's authorization server beforehand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The name of the environment variable holding that client's secret (a
    /// confidential client); absent = a public client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// An `https` URL serving mcpmux's Client ID Metadata Document, used as the
    /// client id where the authorization server supports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for, overriding the server's challenge and `scopes_supported`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Whether `serve` opens the browser by itself when the server needs a login
    /// (default true); false = wait for `mcpmux login NAME`.
    #[serde(default = "OAuthServerConfig::default_auto_login")]
    pub auto_login: bool,
}

impl OAuthServerConfig {
    pub const DEFAULT_AUTO_LOGIN: bool = true;

    fn default_auto_login() -> bool {
        Self::DEFAULT_AUTO_LOGIN
    }
}

impl Default for OAuthServerConfig {
    fn default() -> Self {
        OAuthServerConfig {
            client_id: None,
            client_secret_env: None,
            client_metadata_url: None,
            scopes: Vec::new(),
            auto_login: Self::DEFAULT_AUTO_LOGIN,
        }
    }
}

/// `[auth]`: where upstream OAuth tokens and client registrations are kept.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub store: TokenStoreKind,
    /// The folder of the file store (default: `mcpmux/oauth` under the platform's
    /// config directory). Only read when the file store is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_dir: Option<PathBuf>,
}

impl AuthConfig {
    /// Whether every field is its default (then `check` leaves the table out).
    pub fn is_default(&self) -> bool {
        *self == AuthConfig::default()
    }
}

/// `[auth] store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TokenStoreKind {
    /// The OS keychain when one answers, else the file.
    #[default]
    Auto,
    /// The OS keychain only (an error when there is none).
    Keyring,
    /// A file with mode 0600 per server.
    File,
}
