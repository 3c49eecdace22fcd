//! Request guards for the Streamable HTTP endpoint: `Host`, `Origin`, bearer token,
//! `Content-Type`, `Accept` and `MCP-Protocol-Version`.
//!
//! Owns: the pure decisions on header values (docs/architecture.md, "Security"; the MCP
//! specification's Streamable HTTP transport).
//! Never: reads a body, touches a session or the hub, or allocates per request beyond
//! the error message. Every function takes header values (`None` when absent) and the
//! configured lists, and is unit-tested below.
//!
//! Decisions recorded here:
//! - `Host` is required (HTTP/1.1 makes it mandatory); loopback names with any port are
//!   always accepted, `allowed_hosts` entries match the whole value or the host part,
//!   ASCII case-insensitively.
//! - `Origin` is optional (non-browser clients send none); when present it must equal an
//!   `allowed_origins` entry, or equal one once its `:port` is removed.
//! - The bearer token is compared with `subtle` so timing reveals nothing but length.
//! - `Accept` absent means "anything" (lenient; the SDKs always send it). Media ranges
//!   with `q=0` are refused as RFC 9110 says.

use subtle::ConstantTimeEq;

use crate::protocol::SUPPORTED_VERSIONS;

/// Host names that are always accepted (DNS-rebinding defence for a loopback bind).
const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

/// Why a guard refused a request; the HTTP layer maps it to a status and a JSON-RPC
/// error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GuardError {
    #[error("forbidden: Host header {0:?} is not allowed (see listen.allowed_hosts)")]
    Host(String),
    #[error("forbidden: Origin {0:?} is not allowed (see listen.allowed_origins)")]
    Origin(String),
    #[error("unauthorized: missing or invalid bearer token")]
    Unauthorized,
}

/// Strips an optional `:port` from a `Host` value (`[::1]:8080` → `[::1]`).
fn host_part(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Checks `Host` against loopback names and `allowed`.
pub(crate) fn check_host(host: Option<&str>, allowed: &[String]) -> Result<(), GuardError> {
    let Some(host) = host.map(str::trim) else {
        return Err(GuardError::Host(String::new()));
    };
    let name = host_part(host);
    let ok = LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(name))
        || allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(name));
    if ok {
        Ok(())
    } else {
        Err(GuardError::Host(host.to_owned()))
    }
}

/// Strips a trailing `:port` from an origin (`http://localhost:5173` →
/// `http://localhost`); returns `None` when there is no port.
fn origin_without_port(origin: &str) -> Option<&str> {
    let after_scheme = origin.find("://")? + 3;
    let (head, port) = origin.rsplit_once(':')?;
    (head.len() >= after_scheme && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        .then_some(head)
}

/// Checks `Origin` (when present) against `allowed`.
pub(crate) fn check_origin(origin: Option<&str>, allowed: &[String]) -> Result<(), GuardError> {
    let Some(origin) = origin.map(str::trim) else {
        return Ok(());
    };
    let bare = origin_without_port(origin);
    let ok = allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(origin) || bare.is_some_and(|b| a.eq_ignore_ascii_case(b)));
    if ok {
        Ok(())
    } else {
        Err(GuardError::Origin(origin.to_owned()))
    }
}

/// Checks `Authorization: Bearer <token>` when a token is configured.
pub(crate) fn check_auth(
    authorization: Option<&str>,
    token: Option<&str>,
) -> Result<(), GuardError> {
    let Some(token) = token else {
        return Ok(());
    };
    let presented = authorization
        .map(str::trim)
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    match presented {
        Some(p) if bool::from(p.as_bytes().ct_eq(token.as_bytes())) => Ok(()),
        _ => Err(GuardError::Unauthorized),
    }
}

/// True when `Content-Type` is `application/json` (parameters such as `charset`
/// allowed).
pub(crate) fn is_json_content_type(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// What an `Accept` header allows among the two types we can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepts {
    pub json: bool,
    pub sse: bool,
}

/// Reads `Accept`. Absent means both.
pub(crate) fn accepts(accept: Option<&str>) -> Accepts {
    let Some(accept) = accept else {
        return Accepts {
            json: true,
            sse: true,
        };
    };
    let mut out = Accepts {
        json: false,
        sse: false,
    };
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let mime = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.len() >= 2
                && p[..2].eq_ignore_ascii_case("q=")
                && p[2..].trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
        });
        if refused {
            continue;
        }
        let is = |m: &str| mime.eq_ignore_ascii_case(m);
        if is("*/*") {
            out.json = true;
            out.sse = true;
        } else if is("application/json") || is("application/*") {
            out.json = true;
        } else if is("text/event-stream") || is("text/*") {
            out.sse = true;
        }
    }
    out
}

/// Checks an `MCP-Protocol-Version` header value. `Ok(None)` when absent.
pub(crate) fn protocol_version(header: Option<&str>) -> Result<Option<&'static str>, String> {
    match header.map(str::trim) {
        None => Ok(None),
        Some(v) => SUPPORTED_VERSIONS
            .iter()
            .find(|s| **s == v)
            .map(|s| Some(*s))
            .ok_or_else(|| {
                format!(
                    "unsupported MCP-Protocol-Version {v:?} (supported: {})",
                    SUPPORTED_VERSIONS.join(", ")
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn host_accepts_loopback_with_any_port() {
        for h in [
            "localhost",
            "LOCALHOST:7878",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:8080",
        ] {
            assert_eq!(check_host(Some(h), &[]), Ok(()), "{h}");
        }
    }

    #[test]
    fn host_refuses_foreign_and_missing() {
        for h in [
            "evil.example",
            "evil.example:7878",
            "127.0.0.2",
            "localhost.evil",
        ] {
            assert!(check_host(Some(h), &[]).is_err(), "{h}");
        }
        assert!(check_host(None, &[]).is_err());
    }

    #[test]
    fn host_accepts_configured_names_case_insensitively() {
        let allowed = list(&["MyBox.lan"]);
        assert_eq!(check_host(Some("mybox.lan:7878"), &allowed), Ok(()));
        assert!(check_host(Some("other.lan"), &allowed).is_err());
    }

    #[test]
    fn origin_matches_exactly_or_with_any_port() {
        let allowed = list(&["http://localhost", "https://app.example:8443"]);
        assert_eq!(check_origin(None, &allowed), Ok(()));
        assert_eq!(check_origin(Some("http://localhost"), &allowed), Ok(()));
        assert_eq!(
            check_origin(Some("http://localhost:5173"), &allowed),
            Ok(())
        );
        assert_eq!(
            check_origin(Some("https://app.example:8443"), &allowed),
            Ok(())
        );
        for bad in [
            "http://evil.example",
            "https://localhost",
            "http://localhost.evil",
            "http://localhost:abc",
            "null",
            "https://app.example",
        ] {
            assert!(check_origin(Some(bad), &allowed).is_err(), "{bad}");
        }
    }

    #[test]
    fn bearer_token_is_checked_only_when_configured() {
        assert_eq!(check_auth(None, None), Ok(()));
        assert_eq!(check_auth(Some("Bearer s3cret"), Some("s3cret")), Ok(()));
        assert_eq!(check_auth(Some("bearer  s3cret "), Some("s3cret")), Ok(()));
        for bad in [
            None,
            Some("Bearer nope"),
            Some("Basic s3cret"),
            Some("s3cret"),
        ] {
            assert_eq!(
                check_auth(bad, Some("s3cret")),
                Err(GuardError::Unauthorized),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn content_type_allows_parameters() {
        assert!(is_json_content_type(Some("application/json")));
        assert!(is_json_content_type(Some(
            "Application/JSON; charset=utf-8"
        )));
        assert!(!is_json_content_type(Some("text/plain")));
        assert!(!is_json_content_type(None));
    }

    #[test]
    fn accept_parsing() {
        let a = |s| accepts(Some(s));
        assert_eq!(
            a("application/json, text/event-stream"),
            Accepts {
                json: true,
                sse: true
            }
        );
        assert_eq!(
            a("text/event-stream"),
            Accepts {
                json: false,
                sse: true
            }
        );
        assert_eq!(
            a("*/*"),
            Accepts {
                json: true,
                sse: true
            }
        );
        assert_eq!(
            a("text/html"),
            Accepts {
                json: false,
                sse: false
            }
        );
        assert_eq!(
            a("application/json;q=0, text/event-stream"),
            Accepts {
                json: false,
                sse: true
            }
        );
        assert_eq!(
            accepts(None),
            Accepts {
                json: true,
                sse: true
            }
        );
    }

    #[test]
    fn protocol_version_header() {
        assert_eq!(protocol_version(None), Ok(None));
        assert_eq!(protocol_version(Some("2025-06-18")), Ok(Some("2025-06-18")));
        assert!(protocol_version(Some("1999-01-01")).is_err());
    }
}
