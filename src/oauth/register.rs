//! Which client mcpmux is toward one authorization server, in the order the MCP spec
//! prefers: pre-registered credentials from the config; a Client ID Metadata Document
//! URL (`client_metadata_url`) where the server supports them; Dynamic Client
//! Registration (RFC 7591) otherwise, kept per issuer in the store and reused.
//!
//! Owns the choice of token endpoint authentication (what the metadata offers:
//! `client_secret_basic`, `client_secret_post`, `none`). Never logs a secret.

use serde_json::json;

use super::discovery::ServerMetadata;
use super::store::{Registration, TokenStore};
use super::OAuthError;
use crate::config::OAuthServerConfig;

/// The client name mcpmux registers under.
pub const CLIENT_NAME: &str = "mcpmux";

/// The client to use with `meta`'s server for a login whose callback is
/// `redirect_uri`.
///
/// # Errors
/// `client_secret_env` names an unset variable; the server offers no way to register
/// and none is configured; the registration was refused.
pub async fn client_for(
    http: &reqwest::Client,
    store: &TokenStore,
    server: &str,
    cfg: &OAuthServerConfig,
    meta: &ServerMetadata,
    redirect_uri: &str,
) -> Result<Registration, OAuthError> {
    if let Some(id) = &cfg.client_id {
        let secret = match &cfg.client_secret_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                OAuthError::Registration(format!(
                    "servers.{server}.oauth.client_secret_env names {var}, which is not set"
                ))
            })?),
            None => None,
        };
        let auth_method = auth_method(meta, secret.is_some());
        return Ok(Registration {
            client_id: id.clone(),
            client_secret: secret,
            auth_method,
            redirect_uri: None,
        });
    }
    if let Some(url) = &cfg.client_metadata_url {
        if meta.client_id_metadata_document_supported {
            return Ok(Registration {
                client_id: url.clone(),
                client_secret: None,
                auth_method: "none".into(),
                redirect_uri: None,
            });
        }
    }
    if let Some(reg) = store.load_client(&meta.issuer).await? {
        if reg.redirect_uri.as_deref() == Some(redirect_uri) {
            return Ok(reg);
        }
    }
    let Some(endpoint) = &meta.registration_endpoint else {
        return Err(OAuthError::Registration(format!(
            "the authorization server {} offers no dynamic client registration{}: register mcpmux there and set servers.{server}.oauth.client_id",
            meta.issuer,
            if meta.client_id_metadata_document_supported {
                " (it takes Client ID Metadata Documents: or set servers.NAME.oauth.client_metadata_url)"
            } else {
                ""
            }
        )));
    };
    let wanted = if offers(meta, "none") {
        "none"
    } else if offers(meta, "client_secret_basic") {
        "client_secret_basic"
    } else if offers(meta, "client_secret_post") {
        "client_secret_post"
    } else {
        "none"
    };
    let body = json!({
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted,
        "application_type": "native",
    });
    let resp = http
        .post(endpoint)
        .json(&body)
        .send()
        .await
        .map_err(|e| OAuthError::Registration(format!("POST {endpoint}: {e}")))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(OAuthError::Registration(format!(
            "dynamic client registration at {endpoint} answered HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        )));
    }
    #[derive(serde::Deserialize)]
    struct RegistrationAnswer {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let a: RegistrationAnswer = serde_json::from_str(&text).map_err(|e| {
        OAuthError::Registration(format!(
            "dynamic client registration answer unreadable: {e}"
        ))
    })?;
    let auth_method = a.token_endpoint_auth_method.unwrap_or_else(|| {
        if a.client_secret.is_some() && wanted == "none" {
            auth_method(meta, true)
        } else {
            wanted.to_owned()
        }
    });
    let reg = Registration {
        client_id: a.client_id,
        client_secret: a.client_secret,
        auth_method,
        redirect_uri: Some(redirect_uri.to_owned()),
    };
    tracing::info!(%server, issuer = %meta.issuer, client_id = %reg.client_id, "registered with the authorization server");
    store.save_client(&meta.issuer, &reg).await?;
    Ok(reg)
}

fn offers(meta: &ServerMetadata, method: &str) -> bool {
    meta.token_endpoint_auth_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|x| x == method))
}

/// How a client authenticates at the token endpoint: `none` without a secret; with
/// one, `client_secret_basic` when offered (the RFC 8414 default when the metadata
/// says nothing), else `client_secret_post`.
fn auth_method(meta: &ServerMetadata, has_secret: bool) -> String {
    if !has_secret {
        return "none".into();
    }
    match &meta.token_endpoint_auth_methods_supported {
        Some(m)
            if !m.iter().any(|x| x == "client_secret_basic")
                && m.iter().any(|x| x == "client_secret_post") =>
        {
            "client_secret_post".into()
        }
        _ => "client_secret_basic".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_endpoint_auth_follows_the_metadata() {
        let mut m = ServerMetadata::default();
        assert_eq!(auth_method(&m, false), "none");
        assert_eq!(auth_method(&m, true), "client_secret_basic");
        m.token_endpoint_auth_methods_supported = Some(vec!["client_secret_post".into()]);
        assert_eq!(auth_method(&m, true), "client_secret_post");
        m.token_endpoint_auth_methods_supported = Some(vec![
            "client_secret_post".into(),
            "client_secret_basic".into(),
        ]);
        assert_eq!(auth_method(&m, true), "client_secret_basic");
    }
}
