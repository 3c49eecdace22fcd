//! The shape of an answer to a stateless (2026-07-28) request, applied by the edge
//! that writes it (docs/architecture.md, "Where each era is handled"): every result
//! carries `resultType`, a cacheable one the `ttlMs`/`cacheScope` the hub attached as
//! [`CacheHints`] (unless the upstream set its own), and a read's "resource not found"
//! becomes -32602 with the URI in `data.uri`.
//!
//! A listen stream likewise tags each shared update it writes with its own
//! `subscriptionId` ([`listen_update`]): the hub hands every holder the same bytes.
//!
//! Owns: those rewrites, and the hints' merge rule. Never: decides the hints (the hub
//! knows the upstreams behind an answer), or touches an answer to a session client.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{code, Message};

/// How long, and by whom, a result may be reused: the smallest TTL of the upstreams
/// behind it, and private if any of them is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHints {
    pub ttl_ms: u64,
    pub private: bool,
}

impl CacheHints {
    /// What nothing is known about: reuse it nowhere.
    pub const NONE: CacheHints = CacheHints {
        ttl_ms: 0,
        private: true,
    };

    /// The hints of an answer made of two parts.
    #[must_use]
    pub fn merge(self, other: CacheHints) -> CacheHints {
        CacheHints {
            ttl_ms: self.ttl_ms.min(other.ttl_ms),
            private: self.private || other.private,
        }
    }

    /// Sets `ttlMs` and `cacheScope` on a result object.
    pub fn set_on(self, result: &mut Value) {
        result["ttlMs"] = json!(self.ttl_ms);
        result["cacheScope"] = json!(if self.private { "private" } else { "public" });
    }
}

/// Gives a response the stateless era's shape. `read_uri` is the URI when the request
/// was a `resources/read`. Bytes that need no change (or are no response) come back
/// as they were; only the member that changes is re-encoded, so the envelope keeps its
/// order.
#[must_use]
pub fn response(bytes: Bytes, hints: Option<CacheHints>, read_uri: Option<&str>) -> Bytes {
    match Message::parse(&bytes) {
        Ok(msg) => response_parsed(msg, bytes, hints, read_uri),
        Err(_) => bytes,
    }
}

/// [`response`] of a message already parsed (the hub's, kept with the answer for the
/// edge), whose wire bytes are `bytes`: its text is not read again.
#[must_use]
pub fn response_parsed(
    mut msg: Message,
    bytes: Bytes,
    hints: Option<CacheHints>,
    read_uri: Option<&str>,
) -> Bytes {
    if let Some(result) = msg.result() {
        return match typed(result.get(), hints) {
            Some(text) => {
                msg.set_member_text("result", text);
                msg.to_bytes()
            }
            None => bytes,
        };
    }
    let Some(error) = msg.error() else {
        return bytes;
    };
    let Ok(mut v) = serde_json::from_str::<Value>(error.get()) else {
        return bytes;
    };
    if v["code"] == json!(code::RESOURCE_NOT_FOUND)
        || (read_uri.is_some() && v["code"] == json!(code::INVALID_PARAMS))
    {
        // A read's "not found" (legacy servers answer -32002, or -32602 as the
        // TypeScript SDK v1 does) is -32602 with the URI in `data`.
        v["code"] = json!(code::INVALID_PARAMS);
        if let Some(uri) = read_uri {
            if !v["data"].is_object() {
                v["data"] = json!({});
            }
            if v["data"].get("uri").is_none() {
                v["data"]["uri"] = json!(uri);
            }
        }
    } else {
        return bytes;
    }
    match serde_json::value::RawValue::from_string(v.to_string()) {
        Ok(raw) => {
            msg.set_member("error", raw);
            msg.to_bytes()
        }
        Err(_) => bytes,
    }
}

/// A shared update as one listen stream writes it: tagged with the stream's
/// `subscriptionId` (its listen request's id), by splicing bytes (`super::tag`).
#[must_use]
pub fn listen_update(bytes: &Bytes, listen: &super::RawId) -> Bytes {
    super::tag::with_meta(
        bytes,
        super::stateless::meta::SUBSCRIPTION_ID,
        listen.as_json(),
    )
}

/// The URI a `resources/read` request asks for (what [`response`] names in a "not
/// found"); `None` for any other request.
pub fn read_uri(msg: &Message) -> Option<String> {
    (msg.method() == Some(super::methods::RESOURCES_READ))
        .then(|| super::methods::parse_params::<super::methods::UriParams>(msg.params()))
        .flatten()
        .map(|p| p.uri)
}

/// The result with the era's members written in front of its own, every byte of
/// which stays as it was: `resultType` unless it has one, and with hints `ttlMs` and
/// `cacheScope` unless it has a `ttlMs`. `None` when there is nothing to add, or the
/// result is no object (or names a member twice): then it passes as it came.
fn typed(result: &str, hints: Option<CacheHints>) -> Option<String> {
    let rest = result.strip_prefix('{')?;
    // The usual result's text spells neither name (nor holds an escape that could):
    // then neither member is there, and the members are not read.
    let (has_type, has_ttl) = if result.contains('\\')
        || result.contains("\"resultType\"")
        || (hints.is_some() && result.contains("\"ttlMs\""))
    {
        let members = super::object_members(result)?;
        let has = |name: &str| members.iter().any(|(k, _)| k == name);
        (has("resultType"), has("ttlMs"))
    } else {
        (false, false)
    };
    let add_hints = hints.filter(|_| !has_ttl);
    if has_type && add_hints.is_none() {
        return None;
    }
    let mut out = String::with_capacity(result.len() + 64);
    out.push('{');
    if !has_type {
        out.push_str(r#""resultType":"complete""#);
    }
    if let Some(h) = add_hints {
        let scope = if h.private { "private" } else { "public" };
        let sep = if has_type { "" } else { "," };
        out.push_str(&format!(
            r#"{sep}"ttlMs":{},"cacheScope":"{scope}""#,
            h.ttl_ms
        ));
    }
    if !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(text: &str, hints: Option<CacheHints>, uri: Option<&str>) -> Value {
        let out = response(Bytes::from(text.to_owned()), hints, uri);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn hints_merge_to_the_smallest_ttl_and_private_if_any() {
        let a = CacheHints {
            ttl_ms: 5,
            private: false,
        };
        let b = CacheHints {
            ttl_ms: 9,
            private: true,
        };
        assert_eq!(
            a.merge(b),
            CacheHints {
                ttl_ms: 5,
                private: true
            }
        );
        let p = a.merge(CacheHints {
            ttl_ms: 7,
            private: false,
        });
        assert!(!p.private);
    }

    #[test]
    fn a_result_gets_its_type_and_the_hints_unless_the_upstream_gave_its_own() {
        let h = Some(CacheHints {
            ttl_ms: 30,
            private: false,
        });
        let v = shaped(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, h, None);
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(v["result"]["ttlMs"], 30);
        assert_eq!(v["result"]["cacheScope"], "public");
        let v = shaped(
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","ttlMs":5}}"#,
            h,
            None,
        );
        assert_eq!(v["result"]["ttlMs"], 5);
        assert!(v["result"].get("cacheScope").is_none());
        let v = shaped(
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            None,
            None,
        );
        assert_eq!(v["result"]["resultType"], "complete");
        assert!(v["result"].get("ttlMs").is_none());
        // An empty result, and one whose text mentions the names only below its top
        // level (read member by member): typed all the same.
        for (text, members) in [
            (r#"{"jsonrpc":"2.0","id":1,"result":{ }}"#, 3),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"text":"\"resultType\""}]}}"#,
                4,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{"x":{"ttlMs":1}}}"#, 4),
        ] {
            let v = shaped(text, h, None);
            assert_eq!(v["result"]["resultType"], "complete", "{text}");
            assert_eq!(v["result"].as_object().unwrap().len(), members, "{text}");
        }
    }

    #[test]
    fn a_results_content_is_kept_as_it_was_written() {
        // Already typed, no hints to add: the very same bytes.
        let typed = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[{"text":"\u00e9 x"}]}}"#,
        );
        assert_eq!(response(typed.clone(), None, None), typed);
        // Typed here: the other members keep their text, escapes and spacing included.
        let out = response(
            Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":1,"result":{"content":[ {"text":"\u00e9"} ]}}"#,
            ),
            None,
            None,
        );
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains(r#"[ {"text":"\u00e9"} ]"#), "{text}");
        assert!(text.contains(r#""resultType":"complete""#), "{text}");
    }

    #[test]
    fn typed_results_get_the_hints_and_odd_ones_pass_as_they_came() {
        let h = Some(CacheHints {
            ttl_ms: 7,
            private: true,
        });
        // Typed already: the hints go in front, and `resultType` stays the only one.
        let v = shaped(
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete"}}"#,
            h,
            None,
        );
        assert_eq!(v["result"]["ttlMs"], 7);
        assert_eq!(v["result"]["cacheScope"], "private");
        assert_eq!(v["result"].as_object().unwrap().len(), 4);
        // A result that names a member twice is passed on as it came.
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","a":1,"a":2}}"#;
        let out = response(Bytes::from_static(text.as_bytes()), h, None);
        assert_eq!(&out[..], text.as_bytes());
    }

    #[test]
    fn a_read_not_found_becomes_invalid_params_with_the_uri() {
        for code in [code::RESOURCE_NOT_FOUND, code::INVALID_PARAMS] {
            let text =
                format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"no"}}}}"#);
            let v = shaped(&text, None, Some("x://1"));
            assert_eq!(v["error"]["code"], code::INVALID_PARAMS);
            assert_eq!(v["error"]["data"]["uri"], "x://1");
        }
        // Other errors, and -32602 of a request that is no read, pass unchanged.
        let text = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#;
        let out = response(Bytes::from_static(text.as_bytes()), None, None);
        assert_eq!(&out[..], text.as_bytes());
        let text = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}"#;
        let out = response(Bytes::from_static(text.as_bytes()), None, Some("x://1"));
        assert_eq!(&out[..], text.as_bytes());
    }
}
