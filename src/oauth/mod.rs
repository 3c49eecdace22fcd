//! OAuth toward upstreams (docs/architecture.md, "OAuth toward upstreams"): mcpmux is
//! the OAuth 2.1 client of each HTTP upstream that asks for authorization, per the MCP
//! authorization spec (2025-11-25 and 2026-07-28). One login per upstream serves every
//! host mcpmux serves.
//!
//! - [`challenge`]: the `WWW-Authenticate` challenge of a 401/403 (pure).
//! - [`discovery`]: RFC 9728 resource metadata, RFC 8414 / OpenID server metadata.
//! - [`register`]: pre-registered client, Client ID Metadata Document, or RFC 7591.
//! - [`flow`]: authorization code + PKCE S256, code exchange, refresh (`oauth2` crate).
//! - [`callback`]: the loopback redirect listener; [`browser`]: opening the URL.
//! - [`login`]: one interactive login, start to end; [`logins`]: a daemon's upstream
//!   clients by name, for the status page's link.
//! - [`cli`]: `mcpmux login` and `mcpmux logout`.
//! - [`store`]: tokens and registrations in the OS keychain or 0600 files.
//! - [`upstream`]: [`UpstreamAuth`], an upstream's token while mcpmux serves it.
//!
//! Never: forwards a downstream client's token upstream (no module here ever sees
//! one), logs a token or an authorization code, or follows a redirect from an OAuth
//! endpoint.

pub mod browser;
pub mod callback;
pub mod challenge;
pub mod cli;
pub mod discovery;
pub mod flow;
pub mod login;
pub mod logins;
pub mod register;
pub mod store;
pub mod upstream;

pub use challenge::Challenge;
pub use logins::{LoginAsked, Logins};
pub use store::{Grant, Registration, TokenStore};
pub use upstream::{Prepared, UpstreamAuth};

/// What an upstream actor needs for OAuth: the token store, whether this process may
/// open a browser by itself (`serve`: yes unless `auto_login = false`; `check`: never),
/// and the daemon's registry for the status page's link.
#[derive(Debug, Clone)]
pub struct OAuthCtx {
    pub store: std::sync::Arc<TokenStore>,
    pub interactive: bool,
    pub logins: Option<std::sync::Arc<Logins>>,
}

use std::time::Duration;

/// Connect timeout of OAuth requests (default 10 s, like the upstream transport's).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Overall timeout of one OAuth request (default 30 s): discovery, registration and
/// token requests are small; a hung authorization server must not hang a login.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an OAuth step failed. Every message is whole and holds no secret.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("discovery: {0}")]
    Discovery(String),
    #[error("client registration: {0}")]
    Registration(String),
    #[error("authorization: {0}")]
    Flow(String),
    #[error("token store: {0}")]
    Store(String),
}

/// The HTTP client of every OAuth request: follows no redirect (the `oauth2` crate's
/// advice against SSRF), bounded in time, and keeps no idle connection: OAuth requests
/// are few and far apart (a login waits for a person between the metadata and the
/// token request), and a pooled connection the server closed meanwhile would fail the
/// request written on it.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("a client without custom TLS roots always builds")
}
