//! Finding an upstream's authorization server: Protected Resource Metadata (RFC 9728,
//! from the challenge's `resource_metadata`, else the well-known paths), then the
//! authorization server's metadata (RFC 8414 and OpenID Connect Discovery, every
//! well-known variant the MCP spec lists), else the 2025-03-26 form (the MCP server is
//! its own authorization server, with `/authorize`, `/token`, `/register` as defaults).
//!
//! Owns the metadata types and the rules that check them (the PRM `resource` must
//! cover the server URL; the metadata's `issuer` must be the one asked for; PKCE S256
//! must be offered). Never sends a token; never follows a redirect (the HTTP client
//! it is given does not).

use reqwest::Url;
use serde::Deserialize;

use super::challenge::Challenge;
use super::OAuthError;

/// RFC 9728 Protected Resource Metadata (the fields mcpmux reads).
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ResourceMetadata {
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 / OpenID authorization server metadata (the fields mcpmux reads).
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ServerMetadata {
    #[serde(default)]
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// Everything a login needs to know about where to go.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The RFC 8707 `resource` to ask tokens for.
    pub resource: String,
    /// The Protected Resource Metadata, when the server has some (absent: 2025-03-26).
    pub prm: Option<ResourceMetadata>,
    pub server: ServerMetadata,
}

/// The canonical URI of an MCP server (RFC 8707 / MCP "Canonical Server URI"): no
/// fragment, no query, no lone trailing `/`.
pub fn canonical_resource(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    u.set_query(None);
    let s = u.to_string();
    if u.path() == "/" {
        s.trim_end_matches('/').to_owned()
    } else {
        s
    }
}

/// Discovers the authorization server of the MCP server at `server_url`.
///
/// # Errors
/// The metadata is missing, unreadable or contradicts itself (a PRM for another
/// resource, a metadata document for another issuer, no PKCE S256).
pub async fn discover(
    http: &reqwest::Client,
    server_url: &Url,
    challenge: Option<&Challenge>,
) -> Result<Discovered, OAuthError> {
    let prm = resource_metadata(http, server_url, challenge).await?;
    let Some(prm) = prm else {
        // 2025-03-26: the MCP server is its own authorization server.
        let base = origin(server_url);
        let server = match first_metadata(http, &base, &well_known_urls(&base)?).await? {
            Some(m) => m,
            None => ServerMetadata {
                issuer: base.clone(),
                authorization_endpoint: format!("{base}/authorize"),
                token_endpoint: format!("{base}/token"),
                registration_endpoint: Some(format!("{base}/register")),
                code_challenge_methods_supported: Some(vec!["S256".into()]),
                ..ServerMetadata::default()
            },
        };
        check_pkce(&server)?;
        return Ok(Discovered {
            resource: canonical_resource(server_url),
            prm: None,
            server,
        });
    };
    let resource = match &prm.resource {
        Some(r) => {
            if !resource_covers(r, server_url) {
                return Err(OAuthError::Discovery(format!(
                    "the protected resource metadata is for {r}, not for {server_url}: refusing it"
                )));
            }
            r.clone()
        }
        None => canonical_resource(server_url),
    };
    let issuer = prm.authorization_servers.first().cloned().ok_or_else(|| {
        OAuthError::Discovery(
            "the protected resource metadata names no authorization server".into(),
        )
    })?;
    let server = first_metadata(http, &issuer, &well_known_urls(&issuer)?)
        .await?
        .ok_or_else(|| {
            OAuthError::Discovery(format!(
                "no authorization server metadata for {issuer} (tried RFC 8414 and OpenID discovery)"
            ))
        })?;
    if server.issuer != issuer {
        return Err(OAuthError::Discovery(format!(
            "the authorization server metadata names issuer {:?}, but was fetched for {issuer:?}: refusing it (RFC 8414 §3.3)",
            server.issuer
        )));
    }
    check_pkce(&server)?;
    Ok(Discovered {
        resource,
        prm: Some(prm),
        server,
    })
}

/// The PRM: from the challenge's URL, else `/.well-known/oauth-protected-resource` with
/// the server's path, else without it. `None` when the server has none.
async fn resource_metadata(
    http: &reqwest::Client,
    server_url: &Url,
    challenge: Option<&Challenge>,
) -> Result<Option<ResourceMetadata>, OAuthError> {
    let mut urls = Vec::new();
    if let Some(u) = challenge.and_then(|c| c.resource_metadata.as_deref()) {
        urls.push(u.to_owned());
    }
    let base = origin(server_url);
    let path = server_url.path().trim_end_matches('/');
    if !path.is_empty() {
        urls.push(format!("{base}/.well-known/oauth-protected-resource{path}"));
    }
    urls.push(format!("{base}/.well-known/oauth-protected-resource"));
    for u in urls {
        if let Some(prm) = get_json::<ResourceMetadata>(http, &u).await? {
            tracing::debug!(url = %u, "protected resource metadata found");
            return Ok(Some(prm));
        }
    }
    Ok(None)
}

/// The well-known metadata URLs of an issuer, in the order the MCP spec gives: for
/// `https://as/tenant`, RFC 8414 with the path inserted, OpenID with the path inserted,
/// OpenID with the path appended; for `https://as`, RFC 8414 then OpenID.
pub fn well_known_urls(issuer: &str) -> Result<Vec<String>, OAuthError> {
    let url = Url::parse(issuer).map_err(|e| {
        OAuthError::Discovery(format!("bad authorization server URL {issuer:?}: {e}"))
    })?;
    let base = origin(&url);
    let path = url.path().trim_end_matches('/');
    Ok(if path.is_empty() {
        vec![
            format!("{base}/.well-known/oauth-authorization-server"),
            format!("{base}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{base}/.well-known/oauth-authorization-server{path}"),
            format!("{base}/.well-known/openid-configuration{path}"),
            format!("{base}{path}/.well-known/openid-configuration"),
        ]
    })
}

async fn first_metadata(
    http: &reqwest::Client,
    issuer: &str,
    urls: &[String],
) -> Result<Option<ServerMetadata>, OAuthError> {
    for u in urls {
        if let Some(m) = get_json::<ServerMetadata>(http, u).await? {
            tracing::debug!(%issuer, url = %u, "authorization server metadata found");
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// GETs a JSON document: `None` on a 4xx (not there), an error on anything else
/// that is not a readable 2xx.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<Option<T>, OAuthError> {
    let resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| OAuthError::Discovery(format!("GET {url}: {e}")))?;
    let status = resp.status();
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(OAuthError::Discovery(format!(
            "GET {url} answered HTTP {status}"
        )));
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| OAuthError::Discovery(format!("GET {url}: {e}")))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| OAuthError::Discovery(format!("GET {url}: not the expected metadata: {e}")))
}

/// PKCE S256 must be offered (the MCP spec: refuse to proceed otherwise).
fn check_pkce(m: &ServerMetadata) -> Result<(), OAuthError> {
    match &m.code_challenge_methods_supported {
        Some(methods) if methods.iter().any(|x| x == "S256") => Ok(()),
        _ => Err(OAuthError::Discovery(format!(
            "the authorization server {} does not offer PKCE S256 (code_challenge_methods_supported): refusing to log in",
            m.issuer
        ))),
    }
}

/// `scheme://host[:port]`.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// Whether the PRM's `resource` covers the server URL: same origin, and the server's
/// path is the resource's path or below it.
pub fn resource_covers(resource: &str, server_url: &Url) -> bool {
    let Ok(r) = Url::parse(resource) else {
        return false;
    };
    if r.origin() != server_url.origin() {
        return false;
    }
    let rp = r.path().trim_end_matches('/');
    let sp = server_url.path().trim_end_matches('/');
    sp == rp || sp.starts_with(&format!("{rp}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_variants_follow_the_spec_order() {
        assert_eq!(
            well_known_urls("https://as.example/tenant1").unwrap(),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            well_known_urls("https://as.example/").unwrap(),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn canonical_resource_drops_fragment_and_lone_slash() {
        let u = |s| Url::parse(s).unwrap();
        assert_eq!(
            canonical_resource(&u("HTTPS://Mcp.Example/#x")),
            "https://mcp.example"
        );
        assert_eq!(
            canonical_resource(&u("https://mcp.example/mcp?x=1")),
            "https://mcp.example/mcp"
        );
    }

    #[test]
    fn resource_must_cover_the_server() {
        let s = Url::parse("https://mcp.example/api/mcp").unwrap();
        assert!(resource_covers("https://mcp.example/api/mcp", &s));
        assert!(resource_covers("https://mcp.example/api", &s));
        assert!(resource_covers("https://mcp.example", &s));
        assert!(!resource_covers("https://mcp.example/ap", &s));
        assert!(!resource_covers("https://other.example/api/mcp", &s));
        assert!(!resource_covers("not a url", &s));
    }
}
