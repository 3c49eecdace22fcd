//! One interactive login to one upstream, start to end: discovery, the client to be,
//! the scopes to ask for, the loopback callback, the browser (or the printed URL), the
//! answer's checks (`state`; RFC 9207 `iss`), the code exchange, and the grant saved.
//! Used by `mcpmux login` and by `serve` when an upstream needs a login.
//!
//! Owns nothing between logins. Never logs a token or the authorization code.

use std::time::Duration;

use reqwest::Url;

use super::callback::Callback;
use super::challenge::Challenge;
use super::discovery::{self, Discovered};
use super::store::{Grant, TokenStore};
use super::{browser, flow, register, OAuthError};
use crate::config::OAuthServerConfig;

/// How long a login waits for the browser to come back (default 10 minutes: a person
/// may have to type a password and pass a second factor).
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);

/// The scope that asks for a refresh token where the server offers it.
pub const OFFLINE_ACCESS: &str = "offline_access";

/// The upstream a login is for.
pub struct LoginTarget<'a> {
    pub name: &'a str,
    pub url: &'a Url,
    pub cfg: &'a OAuthServerConfig,
    pub store: &'a TokenStore,
    /// A client that follows no redirect.
    pub http: &'a reqwest::Client,
    /// The daemon's own listener as the redirect target, when `serve` has a loopback
    /// one (else a listener of the login's own).
    pub daemon: Option<&'a std::sync::Arc<super::callback::DaemonCallback>>,
}

/// What to do with the authorization URL.
pub enum Opener<'a> {
    /// `$BROWSER`, else the platform's opener (the URL is printed too if that fails).
    Browser,
    /// Hand it over (`--no-browser` prints it).
    Show(&'a (dyn Fn(&str) + Send + Sync)),
}

/// Logs in to `t`, with the challenge that asked for it (if any) and the scopes held
/// before (a step-up asks for their union with the challenge's).
///
/// # Errors
/// Discovery, registration, the browser's answer or the token exchange failed.
pub async fn login(
    t: &LoginTarget<'_>,
    challenge: Option<&Challenge>,
    held_scopes: &[String],
    opener: Opener<'_>,
) -> Result<Grant, OAuthError> {
    let found = discovery::discover(t.http, t.url, challenge).await?;
    let scopes = scopes_for(t.cfg, challenge, &found, held_scopes);
    let meta = &found.server;
    let preferred = t
        .store
        .load_client(&meta.issuer)
        .await?
        .and_then(|r| r.redirect_uri)
        .and_then(|r| Callback::port_of(&r))
        .unwrap_or(0);
    let mut callback = match t.daemon.and_then(Callback::on_daemon) {
        Some(c) => c,
        None => Callback::bind(preferred).await?,
    };
    let reg =
        register::client_for(t.http, t.store, t.name, t.cfg, meta, &callback.redirect_uri).await?;
    let pending = flow::authorize(
        &reg,
        &meta.authorization_endpoint,
        &meta.token_endpoint,
        &callback.redirect_uri,
        &scopes,
        &found.resource,
    )?;
    callback.expect(pending.state.secret());
    match opener {
        Opener::Show(show) => show(pending.url.as_str()),
        Opener::Browser => {
            if let Err(e) = browser::open(pending.url.as_str()) {
                tracing::warn!(upstream = %t.name, error = %e, url = %pending.url, "open this URL to log in");
            }
        }
    }
    tracing::info!(upstream = %t.name, issuer = %meta.issuer, scopes = %scopes.join(" "), redirect_uri = %callback.redirect_uri, "waiting for the authorization server's answer");
    let answer = tokio::time::timeout(LOGIN_TIMEOUT, callback.answer())
        .await
        .map_err(|_| {
            OAuthError::Flow(format!(
                "no answer from the browser within {} s",
                LOGIN_TIMEOUT.as_secs()
            ))
        })?
        .ok_or_else(|| OAuthError::Flow("the callback listener stopped".into()))?;
    drop(callback);
    if answer.state.as_deref() != Some(pending.state.secret().as_str()) {
        return Err(OAuthError::Flow(
            "the answer's state does not match the request: refusing it".into(),
        ));
    }
    check_iss(
        meta.authorization_response_iss_parameter_supported,
        &meta.issuer,
        answer.iss.as_deref(),
    )?;
    if let Some(err) = answer.error {
        let desc = answer
            .error_description
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        return Err(OAuthError::Flow(format!(
            "the authorization server refused: {err}{desc}"
        )));
    }
    let code = answer
        .code
        .ok_or_else(|| OAuthError::Flow("the answer has no authorization code".into()))?;
    let grant = flow::exchange(
        t.http,
        &reg,
        &meta.authorization_endpoint,
        &meta.token_endpoint,
        pending,
        code,
        &found.resource,
        &meta.issuer,
        &scopes,
    )
    .await?;
    // A refresh another process is making of the old login saves first, and this
    // login then replaces it (the refreshing process takes it from the store at its
    // next refresh or 401).
    let _turn = t
        .store
        .lock_grant(t.name, super::store::GRANT_LOCK_WAIT)
        .await;
    t.store.save_grant(t.name, &grant).await?;
    tracing::info!(upstream = %t.name, issuer = %meta.issuer, "logged in");
    Ok(grant)
}

/// RFC 9207: an `iss` in the answer must be the issuer, compared as plain strings;
/// one is required when the server advertises it.
fn check_iss(advertised: bool, issuer: &str, iss: Option<&str>) -> Result<(), OAuthError> {
    match iss {
        Some(i) if i == issuer => Ok(()),
        Some(i) => Err(OAuthError::Flow(format!(
            "the answer's iss {i:?} is not the authorization server {issuer:?} (RFC 9207): refusing it"
        ))),
        None if advertised => Err(OAuthError::Flow(format!(
            "{issuer} advertises RFC 9207 but its answer carries no iss: refusing it"
        ))),
        None => Ok(()),
    }
}

/// The scopes to ask for: the config's; else the challenge's; else the resource's
/// `scopes_supported`; else none (the parameter is left out). A step-up adds the
/// scopes held before. `offline_access` is added where the authorization server
/// lists it, for a refresh token.
fn scopes_for(
    cfg: &OAuthServerConfig,
    challenge: Option<&Challenge>,
    found: &Discovered,
    held: &[String],
) -> Vec<String> {
    let mut scopes: Vec<String> = if !cfg.scopes.is_empty() {
        cfg.scopes.clone()
    } else if let Some(s) = challenge.map(Challenge::scopes).filter(|s| !s.is_empty()) {
        s
    } else {
        found
            .prm
            .as_ref()
            .and_then(|p| p.scopes_supported.clone())
            .unwrap_or_default()
    };
    for h in held {
        if !scopes.contains(h) {
            scopes.push(h.clone());
        }
    }
    let offered = found
        .server
        .scopes_supported
        .as_ref()
        .is_some_and(|s| s.iter().any(|x| x == OFFLINE_ACCESS));
    if offered && !scopes.is_empty() && !scopes.iter().any(|s| s == OFFLINE_ACCESS) {
        scopes.push(OFFLINE_ACCESS.into());
    }
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::discovery::{ResourceMetadata, ServerMetadata};

    fn found(prm_scopes: Option<Vec<&str>>, as_scopes: Option<Vec<&str>>) -> Discovered {
        let v = |s: Vec<&str>| s.into_iter().map(str::to_owned).collect::<Vec<_>>();
        Discovered {
            resource: "https://x/mcp".into(),
            prm: Some(ResourceMetadata {
                scopes_supported: prm_scopes.map(v),
                ..ResourceMetadata::default()
            }),
            server: ServerMetadata {
                scopes_supported: as_scopes.map(v),
                ..ServerMetadata::default()
            },
        }
    }

    #[test]
    fn scopes_come_from_the_challenge_then_scopes_supported_then_nowhere() {
        let cfg = OAuthServerConfig::default();
        let ch = Challenge {
            status: 401,
            scope: Some("a b".into()),
            ..Challenge::default()
        };
        let f = found(Some(vec!["x"]), None);
        assert_eq!(scopes_for(&cfg, Some(&ch), &f, &[]), ["a", "b"]);
        assert_eq!(scopes_for(&cfg, None, &f, &[]), ["x"]);
        assert!(scopes_for(&cfg, None, &found(None, None), &[]).is_empty());
    }

    #[test]
    fn step_up_keeps_held_scopes_and_offline_access_only_where_offered() {
        let cfg = OAuthServerConfig::default();
        let ch = Challenge {
            status: 403,
            scope: Some("write".into()),
            error: Some("insufficient_scope".into()),
            ..Challenge::default()
        };
        let f = found(None, Some(vec!["read", "write", "offline_access"]));
        assert_eq!(
            scopes_for(&cfg, Some(&ch), &f, &["read".into()]),
            ["write", "read", "offline_access"]
        );
        let f = found(None, Some(vec!["read", "write"]));
        assert_eq!(scopes_for(&cfg, Some(&ch), &f, &[]), ["write"]);
    }

    #[test]
    fn iss_is_compared_as_a_plain_string() {
        assert!(check_iss(true, "https://as", Some("https://as")).is_ok());
        assert!(check_iss(true, "https://as", Some("https://as/")).is_err());
        assert!(check_iss(true, "https://as", None).is_err());
        assert!(check_iss(false, "https://as", None).is_ok());
        assert!(check_iss(false, "https://as", Some("https://evil")).is_err());
    }
}
