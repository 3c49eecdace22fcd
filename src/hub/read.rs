//! `resources/read` through the cache: hits answered locally, concurrent misses for
//! one key sharing one upstream read, results stored only under the rules of
//! [`crate::state::cache`]. Reads of URIs nobody holds go upstream as plain requests.

use bytes::Bytes;

use super::Hub;
use crate::protocol::methods;
use crate::protocol::{code, Message, RawId};
use crate::state::cache::{Keep, ReadPlan};

use crate::state::ids::{ClientId, SubKey};
use crate::state::pending::Origin;
use std::time::Duration;

impl Hub {
    /// Whether `u` is up and stateless (`InitInfo::is_stateless`).
    pub(super) fn upstream_is_stateless(&self, u: crate::state::ids::UpstreamId) -> bool {
        self.upstream_ready(u).is_some_and(|i| i.is_stateless())
    }

    pub(super) fn on_read(&mut self, client: ClientId, id: RawId, msg: Message) {
        let Some(uri) = self.uri_param_or_reply(client, &id, &msg) else {
            return;
        };
        let Some(key) = self.uri_key_or_reply(client, &id, &uri) else {
            return;
        };
        let (upstream, upstream_uri) = (key.upstream, key.uri.to_string());
        // Reads of watched URIs, and every read of a 2026-07-28 upstream (its results
        // carry a `ttlMs`), are shared and cached; a request with a progress token
        // keeps its own stream of progress, and an MRTR retry is never cached.
        let cacheable =
            self.holders.registry.is_active(&key) || self.upstream_is_stateless(upstream);
        if !cacheable || methods::progress_token(msg.params()).is_some() || is_mrtr_retry(&msg) {
            return self.forward_request(client, id, msg);
        }
        if self.upstream_ready(upstream).is_none() {
            let why = self.unavailable(upstream);
            return self.reply_error(client, &id, code::UPSTREAM_UNAVAILABLE, &why);
        }
        match self
            .cache
            .read_at(&key, (client, id.clone()), std::time::Instant::now())
        {
            ReadPlan::Hit(result) => {
                self.trace_read(client, &id, &key, "hit");
                let bytes = response_bytes(&id, "result", &result);
                self.push_response_bytes(client, id, bytes);
            }
            ReadPlan::Fresh { result, remaining } => {
                self.trace_read(client, &id, &key, "hit");
                let body = with_ttl_left(&result, remaining);
                let bytes = response_bytes(&id, "result", &body);
                self.push_response_bytes(client, id, bytes);
            }
            ReadPlan::Joined => self.trace_read(client, &id, &key, "join"),
            ReadPlan::Fetch { generation }
                if self.fleet_role(&key) == Some(super::fleet::FleetRole::Follow) =>
            {
                // The owner reads, once for the whole fleet.
                self.fleet_read(key, uri, generation);
            }
            ReadPlan::Fetch { generation } => {
                self.trace_read(client, &id, &key, "miss");
                let origin = Origin::Read { key, generation };
                let pid = self
                    .pending
                    .register(upstream, origin)
                    .expect("internal ids are unique");
                let mut msg = msg;
                if upstream_uri != uri {
                    super::routing::set_param(&mut msg, &["uri"], &upstream_uri);
                }
                msg.set_id(&RawId::from_u64(pid.0));
                self.dispatch_upstream(upstream, pid, &msg);
            }
        }
    }

    /// Answers every waiter of a shared read with `Ok(result)` or `Err(error object)`
    /// (both raw JSON text), each under its own id; stores a success if allowed.
    pub(super) fn finish_read(
        &mut self,
        key: &SubKey,
        generation: u64,
        outcome: Result<&str, &str>,
    ) {
        let still_active = self.holders.registry.is_active(key);
        let keep = match outcome {
            Ok(result) => keep_rule(result, still_active),
            Err(_) => Keep::Not,
        };
        let stored = outcome.ok().map(std::sync::Arc::<str>::from);
        let waiters =
            self.cache
                .complete_keep(key, generation, stored, keep, std::time::Instant::now());
        let (member, body) = match outcome {
            Ok(r) => ("result", r),
            Err(e) => ("error", e),
        };
        // A "not found" is -32002 inside mcpmux, whichever way the upstream said it
        // (a stateless upstream answers -32602 naming the URI in `data.uri`); the edge
        // of a stateless client gives it back that shape (`protocol::shape`).
        let not_found = outcome.err().and_then(not_found_body);
        let body = not_found.as_deref().unwrap_or(body);
        for (client, id) in waiters {
            let bytes = response_bytes(&id, member, body);
            self.push_response_bytes(client, id, bytes);
        }
    }
}

/// A read error as mcpmux keeps a "not found" (-32002, the URI in `data.uri`), when
/// the upstream said it as -32602 naming the URI.
fn not_found_body(error: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(error).ok()?;
    if v["code"] != code::INVALID_PARAMS || !v["data"]["uri"].is_string() {
        return None;
    }
    v["code"] = serde_json::json!(code::RESOURCE_NOT_FOUND);
    Some(v.to_string())
}

/// How long a read result may be kept: until its update while mcpmux holds the
/// URI's subscription; else for the `ttlMs` a 2026-07-28 upstream gave it; an
/// `input_required` result never.
fn keep_rule(result: &str, still_active: bool) -> Keep {
    let ttl = if result.contains("\"ttlMs\"") || result.contains("input_required") {
        let v: serde_json::Value = serde_json::from_str(result).unwrap_or_default();
        if v["resultType"] == "input_required" {
            return Keep::Not;
        }
        v["ttlMs"].as_u64().map(Duration::from_millis)
    } else {
        None
    };
    match (still_active, ttl) {
        (true, ttl) => Keep::UntilChanged { ttl },
        (false, Some(ttl)) => Keep::For(ttl),
        (false, None) => Keep::Not,
    }
}

/// A cached result with `ttlMs` set to the time it has left.
fn with_ttl_left(result: &str, remaining: Duration) -> String {
    match serde_json::from_str::<serde_json::Value>(result) {
        Ok(mut v) if v.is_object() => {
            v["ttlMs"] = serde_json::json!(remaining.as_millis() as u64);
            v.to_string()
        }
        _ => result.to_owned(),
    }
}

/// Whether a request is the retry of a multi round-trip request.
fn is_mrtr_retry(msg: &Message) -> bool {
    msg.params().is_some_and(|p| {
        let t = p.get();
        t.contains("\"requestState\"") || t.contains("\"inputResponses\"")
    })
}

/// `{"jsonrpc":"2.0","id":<id>,"<member>":<body>}` without re-encoding `body`.
fn response_bytes(id: &RawId, member: &str, body: &str) -> Bytes {
    let mut s = String::with_capacity(40 + id.as_json().len() + body.len());
    s.push_str(r#"{"jsonrpc":"2.0","id":"#);
    s.push_str(id.as_json());
    s.push_str(",\"");
    s.push_str(member);
    s.push_str("\":");
    s.push_str(body);
    s.push('}');
    Bytes::from(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_not_found_naming_the_uri_is_32002() {
        let e = r#"{"code":-32602,"message":"Resource not found","data":{"uri":"x://1"}}"#;
        let l: serde_json::Value =
            serde_json::from_str(&super::not_found_body(e).unwrap()).unwrap();
        assert_eq!(l["code"], -32002);
        assert_eq!(l["data"]["uri"], "x://1");
        // Other invalid params stay as they are.
        assert!(super::not_found_body(r#"{"code":-32602,"message":"uri is required"}"#).is_none());
        assert!(
            super::not_found_body(r#"{"code":-32603,"message":"x","data":{"uri":"x://1"}}"#)
                .is_none()
        );
    }
}
