//! The `WWW-Authenticate: Bearer …` challenge of an upstream's 401 or 403 (RFC 6750
//! §3, RFC 9728 §5.1): `resource_metadata`, `scope` and `error`.
//!
//! Pure parsing: no I/O, no state. Never fails on odd input: what cannot be read is
//! left out (a 401 without any readable challenge still asks for authorization).

use reqwest::header::{HeaderMap, WWW_AUTHENTICATE};
use reqwest::StatusCode;

/// What an upstream said when it refused a request for want of authorization.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Challenge {
    /// 401 (no or a bad token) or 403 (`insufficient_scope`).
    pub status: u16,
    /// Where the Protected Resource Metadata is (RFC 9728).
    pub resource_metadata: Option<String>,
    /// The scopes the request needs, space-separated.
    pub scope: Option<String>,
    /// `invalid_token`, `insufficient_scope`, …
    pub error: Option<String>,
}

impl Challenge {
    /// The challenge of a response, when it is one: every 401, and a 403 whose
    /// challenge says `insufficient_scope` (another 403 is an ordinary refusal).
    pub fn from_response(status: StatusCode, headers: &HeaderMap) -> Option<Challenge> {
        let mut ch = Challenge {
            status: status.as_u16(),
            ..Challenge::default()
        };
        for value in headers.get_all(WWW_AUTHENTICATE) {
            if let Ok(text) = value.to_str() {
                for (k, v) in bearer_params(text) {
                    match k.to_ascii_lowercase().as_str() {
                        "resource_metadata" => ch.resource_metadata = Some(v),
                        "scope" => ch.scope = Some(v).filter(|s| !s.trim().is_empty()),
                        "error" => ch.error = Some(v),
                        _ => {}
                    }
                }
            }
        }
        match status {
            StatusCode::UNAUTHORIZED => Some(ch),
            StatusCode::FORBIDDEN if ch.is_step_up() => Some(ch),
            _ => None,
        }
    }

    /// A 403 asking for more scope (step-up authorization).
    pub fn is_step_up(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }

    /// The challenge's scopes, split.
    pub fn scopes(&self) -> Vec<String> {
        split_scopes(self.scope.as_deref())
    }
}

/// A space-separated scope string, split (empty entries dropped).
pub fn split_scopes(s: Option<&str>) -> Vec<String> {
    s.unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The auth-params of the `Bearer` challenge in one header value (which may hold
/// several challenges: `Basic realm="x", Bearer scope="a"`).
fn bearer_params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_bearer = false;
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (token, after) = take_token(rest);
        let after = after.trim_start();
        if token.is_empty() {
            // A stray separator: skip it.
            rest = rest[rest.chars().next().map_or(1, char::len_utf8)..].trim_start();
            continue;
        }
        if let Some(after_eq) = after.strip_prefix('=') {
            // An auth-param `token=value`.
            let (value, after) = take_value(after_eq.trim_start());
            if in_bearer {
                out.push((token.to_owned(), value));
            }
            rest = after.trim_start().trim_start_matches(',').trim_start();
        } else {
            // A new scheme.
            in_bearer = token.eq_ignore_ascii_case("bearer");
            rest = after.trim_start_matches(',').trim_start();
        }
    }
    out
}

fn take_token(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| c.is_whitespace() || c == '=' || c == ',' || c == '"')
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

fn take_value(s: &str) -> (String, &str) {
    if let Some(q) = s.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = q.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => return (value, &q[i + 1..]),
                _ => value.push(c),
            }
        }
        (value, "")
    } else {
        let end = s
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(s.len());
        (s[..end].to_owned(), &s[end..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn challenge(status: u16, value: &str) -> Option<Challenge> {
        let mut h = HeaderMap::new();
        h.insert(WWW_AUTHENTICATE, HeaderValue::from_str(value).unwrap());
        Challenge::from_response(StatusCode::from_u16(status).unwrap(), &h)
    }

    #[test]
    fn reads_resource_metadata_and_scope() {
        let c = challenge(
            401,
            r#"Bearer resource_metadata="https://x/.well-known/oauth-protected-resource/mcp", scope="a b""#,
        )
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scopes(), ["a", "b"]);
        assert!(!c.is_step_up());
    }

    #[test]
    fn step_up_is_a_403_with_insufficient_scope() {
        let c = challenge(
            403,
            r#"Bearer error="insufficient_scope", scope="mcp:write", error_description="no \"write\"""#,
        )
        .unwrap();
        assert!(c.is_step_up());
        assert_eq!(c.scope.as_deref(), Some("mcp:write"));
        assert!(challenge(403, r#"Bearer error="invalid_token""#).is_none());
    }

    #[test]
    fn only_the_bearer_challenge_counts() {
        let c = challenge(
            401,
            r#"Basic realm="r", scope="nope", Bearer scope=x, error=invalid_token"#,
        )
        .unwrap();
        assert_eq!(c.scope.as_deref(), Some("x"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
    }

    #[test]
    fn a_401_without_a_readable_challenge_is_still_one() {
        let c = challenge(401, "garbage \"unterminated").unwrap();
        assert_eq!(
            c,
            Challenge {
                status: 401,
                ..Challenge::default()
            }
        );
        let none = Challenge::from_response(StatusCode::UNAUTHORIZED, &HeaderMap::new()).unwrap();
        assert_eq!(none.status, 401);
        assert!(Challenge::from_response(StatusCode::OK, &HeaderMap::new()).is_none());
    }
}
