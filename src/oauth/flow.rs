//! The authorization code flow with PKCE S256 and the refresh grant, through the
//! `oauth2` crate on mcpmux's reqwest client: the authorization URL (with `state`,
//! RFC 8707 `resource`, the scopes), the code exchange and the refresh (with
//! rotation: a new refresh token replaces the old one, else the old one stays).
//!
//! Owns no state between calls. Never hand-rolls PKCE, `state` or token parsing, and
//! never logs a token.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use oauth2::basic::{BasicClient, BasicTokenResponse};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken, Scope,
    TokenResponse, TokenUrl,
};

use super::store::{Grant, Registration};
use super::OAuthError;

type Client = BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// An authorization request on its way: the URL to open and what the answer must
/// match.
pub struct Pending {
    pub url: reqwest::Url,
    pub state: CsrfToken,
    pub verifier: PkceCodeVerifier,
    pub redirect_uri: String,
}

fn client(
    reg: &Registration,
    auth_url: &str,
    token_url: &str,
    redirect: Option<&str>,
) -> Result<Client, OAuthError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| OAuthError::Flow(format!("bad {what}: {e}"));
    let mut c = BasicClient::new(ClientId::new(reg.client_id.clone()))
        .set_auth_uri(
            AuthUrl::new(auth_url.to_owned()).map_err(|e| bad("authorization_endpoint", &e))?,
        )
        .set_token_uri(TokenUrl::new(token_url.to_owned()).map_err(|e| bad("token_endpoint", &e))?)
        .set_auth_type(if reg.auth_method == "client_secret_basic" {
            AuthType::BasicAuth
        } else {
            AuthType::RequestBody
        });
    if let Some(secret) = &reg.client_secret {
        if reg.auth_method != "none" {
            c = c.set_client_secret(ClientSecret::new(secret.clone()));
        }
    }
    if let Some(r) = redirect {
        c = c
            .set_redirect_uri(RedirectUrl::new(r.to_owned()).map_err(|e| bad("redirect URI", &e))?);
    }
    Ok(c)
}

/// The authorization URL for `reg` at `authorization_endpoint`.
///
/// # Errors
/// An endpoint or the redirect URI is not a URL.
pub fn authorize(
    reg: &Registration,
    authorization_endpoint: &str,
    token_endpoint: &str,
    redirect_uri: &str,
    scopes: &[String],
    resource: &str,
) -> Result<Pending, OAuthError> {
    let c = client(
        reg,
        authorization_endpoint,
        token_endpoint,
        Some(redirect_uri),
    )?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state) = c
        .authorize_url(CsrfToken::new_random)
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .add_extra_param("resource", resource)
        .set_pkce_challenge(challenge)
        .url();
    Ok(Pending {
        url,
        state,
        verifier,
        redirect_uri: redirect_uri.to_owned(),
    })
}

/// Exchanges the code for tokens.
///
/// # Errors
/// The token endpoint refused, or answered something unreadable.
#[allow(clippy::too_many_arguments)]
pub async fn exchange(
    http: &reqwest::Client,
    reg: &Registration,
    authorization_endpoint: &str,
    token_endpoint: &str,
    pending: Pending,
    code: String,
    resource: &str,
    issuer: &str,
    asked: &[String],
) -> Result<Grant, OAuthError> {
    let c = client(
        reg,
        authorization_endpoint,
        token_endpoint,
        Some(&pending.redirect_uri),
    )?;
    let redirect = RedirectUrl::new(pending.redirect_uri.clone())
        .map_err(|e| OAuthError::Flow(format!("bad redirect URI: {e}")))?;
    let tok = c
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(pending.verifier)
        .set_redirect_uri(Cow::Owned(redirect))
        .add_extra_param("resource", resource)
        .request_async(http)
        .await
        .map_err(|e| OAuthError::Flow(format!("the token request failed: {}", describe(&e))))?;
    Ok(grant_from(
        &tok,
        reg,
        resource,
        issuer,
        token_endpoint,
        None,
        asked,
    ))
}

/// Refreshes `grant`, keeping its refresh token unless the server rotated it.
///
/// # Errors
/// No refresh token, or the token endpoint refused (the refresh token was revoked or
/// expired: a new login is needed).
/// Why a refresh did not give a token.
#[derive(Debug)]
pub enum RefreshError {
    /// The authorization server answered with an OAuth error (`invalid_grant`, say):
    /// this grant will not be refreshed; only a login helps.
    Refused(OAuthError),
    /// No answer, or one that is not an OAuth error (the network, a 5xx, a timeout):
    /// the same refresh token may work later.
    Unreachable(OAuthError),
}

impl std::fmt::Display for RefreshError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefreshError::Refused(e) | RefreshError::Unreachable(e) => e.fmt(f),
        }
    }
}

/// Exchanges the grant's refresh token for a new grant.
///
/// # Errors
/// [`RefreshError`]: refused by the authorization server, or not answered.
pub async fn refresh(http: &reqwest::Client, grant: &Grant) -> Result<Grant, RefreshError> {
    let Some(rt) = &grant.refresh_token else {
        return Err(RefreshError::Refused(OAuthError::Flow(
            "no refresh token".into(),
        )));
    };
    // The authorization URL is not used by a refresh; the token URL stands in.
    let c = client(
        &grant.client,
        &grant.token_endpoint,
        &grant.token_endpoint,
        None,
    )
    .map_err(RefreshError::Refused)?;
    let rt = RefreshToken::new(rt.clone());
    let tok = c
        .exchange_refresh_token(&rt)
        .add_extra_param("resource", grant.resource.clone())
        .request_async(http)
        .await
        .map_err(|e| {
            let why = OAuthError::Flow(format!("the refresh failed: {}", describe(&e)));
            if matches!(e, oauth2::RequestTokenError::ServerResponse(_)) {
                RefreshError::Refused(why)
            } else {
                RefreshError::Unreachable(why)
            }
        })?;
    let asked: Vec<String> = super::challenge::split_scopes(grant.scope.as_deref());
    Ok(grant_from(
        &tok,
        &grant.client,
        &grant.resource,
        &grant.issuer,
        &grant.token_endpoint,
        grant.refresh_token.clone(),
        &asked,
    ))
}

fn grant_from(
    tok: &BasicTokenResponse,
    reg: &Registration,
    resource: &str,
    issuer: &str,
    token_endpoint: &str,
    old_refresh: Option<String>,
    asked: &[String],
) -> Grant {
    let now = now_secs();
    let expires_at = tok.expires_in().map(|d| now.saturating_add(d.as_secs()));
    let scope = match tok.scopes() {
        Some(s) => Some(s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")),
        None if asked.is_empty() => None,
        None => Some(asked.join(" ")),
    };
    Grant {
        resource: resource.to_owned(),
        issuer: issuer.to_owned(),
        token_endpoint: token_endpoint.to_owned(),
        client: reg.clone(),
        access_token: tok.access_token().secret().clone(),
        refresh_token: tok
            .refresh_token()
            .map(|r| r.secret().clone())
            .or(old_refresh),
        expires_at,
        issued_at: Some(now),
        scope,
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A token request error without any token in it (the server's `error` and
/// `error_description`, or the transport failure).
fn describe<RE: std::error::Error + 'static>(
    e: &oauth2::RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
) -> String {
    match e {
        oauth2::RequestTokenError::ServerResponse(r) => {
            let mut s = r.error().to_string();
            if let Some(d) = r.error_description() {
                s.push_str(": ");
                s.push_str(d);
            }
            s
        }
        oauth2::RequestTokenError::Request(e) => {
            // The whole chain: "client error" alone does not say what went wrong.
            let mut s = format!("request failed: {e}");
            let mut src = e.source();
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            s
        }
        oauth2::RequestTokenError::Parse(e, _) => format!("unreadable answer: {e}"),
        oauth2::RequestTokenError::Other(s) => s.clone(),
    }
}
