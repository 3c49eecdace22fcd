//! `mcpmux login NAME` and `mcpmux logout NAME`: a login to one configured HTTP
//! upstream from the command line (the browser, or the URL printed with
//! `--no-browser`; the callback on a loopback port), saved in the token store where a
//! running `serve` picks it up (it re-reads the store while the server needs a login).
//!
//! Never prints a token: only the authorization URL and where the tokens went.

use std::sync::Arc;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Url;

use super::challenge::Challenge;
use super::login::{self, LoginTarget, Opener};
use super::{http_client, OAuthError, TokenStore};
use crate::config::{Config, ServerConfig};

/// Logs in to server `name` of `cfg`; returns a line saying where the tokens went.
/// `show` gets the authorization URL when `no_browser` (else the browser opens it).
///
/// # Errors
/// No such HTTP server, or the login failed.
pub async fn login(
    cfg: &Config,
    name: &str,
    no_browser: bool,
    show: &(dyn Fn(&str) + Send + Sync),
) -> Result<String, OAuthError> {
    let (server, url) = http_server(cfg, name)?;
    let store = Arc::new(TokenStore::new(&cfg.auth)?);
    let http = http_client();
    let challenge = first_challenge(&http, &url).await;
    let oauth = server.oauth.clone().unwrap_or_default();
    let t = LoginTarget {
        name,
        url: &url,
        cfg: &oauth,
        store: &store,
        http: &http,
        daemon: None,
    };
    let opener = if no_browser {
        Opener::Show(show)
    } else {
        Opener::Browser
    };
    login::login(&t, challenge.as_ref(), &[], opener).await?;
    Ok(format!(
        "logged in to {name}; tokens kept in {}",
        store.describe().await
    ))
}

/// Forgets server `name`'s tokens.
///
/// # Errors
/// No such HTTP server, or the store failed.
pub async fn logout(cfg: &Config, name: &str) -> Result<String, OAuthError> {
    http_server(cfg, name)?;
    let store = TokenStore::new(&cfg.auth)?;
    Ok(if store.forget_grant(name).await? {
        format!("logged out of {name}")
    } else {
        format!("no login of {name} was stored")
    })
}

fn http_server<'a>(cfg: &'a Config, name: &str) -> Result<(&'a ServerConfig, Url), OAuthError> {
    let server = cfg
        .servers
        .0
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| OAuthError::Flow(format!("no [servers.{name}] in the config")))?;
    let url = server.url.as_deref().ok_or_else(|| {
        OAuthError::Flow(format!(
            "servers.{name} is a stdio server: only HTTP servers log in"
        ))
    })?;
    let url = Url::parse(url).map_err(|e| OAuthError::Flow(format!("servers.{name}.url: {e}")))?;
    Ok((server, url))
}

/// What the server says to a request without a token: its challenge, if it is a 401
/// (a server that lets `initialize` through gives none; discovery then goes by the
/// well-known paths alone).
async fn first_challenge(http: &reqwest::Client, url: &Url) -> Option<Challenge> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": "mcpmux-login",
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let resp = http
        .post(url.clone())
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .ok()?;
    Challenge::from_response(resp.status(), resp.headers())
}
