//! `resources/read` through the cache (docs/architecture.md, "Read cache"): hits
//! answered locally, concurrent misses for one key sharing one upstream read, results
//! stored only under the rules of [`crate::state::cache`]. Reads of URIs nobody holds
//! (of an upstream whose answers carry no `ttlMs`) go upstream as plain requests.
//!
//! [`Reads`] is the hub's part: the read cache with the reads in flight and their
//! waiters, and the hub's rules on top of it (which reads are shared, how long a result
//! keeps, what each waiter is answered, byte for byte). The glue here routes a read,
//! sends the one upstream read (or asks the fleet's owner) and queues the answers.
//!
//! Never re-encodes a cached result (it is spliced into each response), and never
//! stores a result that raced an update.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Hub;
use crate::protocol::methods;
use crate::protocol::{code, Message, RawId};
use crate::state::cache::{Keep, ReadCache, ReadPlan};
use crate::state::ids::{ClientId, SubKey};
use crate::state::pending::Origin;

/// The hub's part for reads: the read cache, with the reads in flight and their
/// waiters.
#[derive(Debug)]
pub(super) struct Reads {
    pub(super) cache: ReadCache,
    /// URIs whose read was answered `input_required`, and when: their reads go as
    /// each client's own (a request for input is one client's), not shared. Forgotten
    /// when the URI changes, when its upstream is lost, and after [`ASKS_INPUT_FOR`]
    /// (then a read is shared again, and asks afresh); at most [`ASKS_INPUT_MAX`].
    asks_input: std::collections::HashMap<SubKey, Instant>,
}

/// How many URIs known to ask for input are remembered (then all are forgotten).
const ASKS_INPUT_MAX: usize = 4096;

/// How long a URI is taken to ask for input.
const ASKS_INPUT_FOR: Duration = Duration::from_secs(60);

/// How a client's shared read goes.
#[derive(Debug, PartialEq)]
pub(super) enum ReadStart {
    /// Answered from the cache: the response.
    Answer(Bytes),
    /// Joined the read in flight: answered with it.
    Joined,
    /// The one read to send, at this generation of the key.
    Fetch { generation: u64 },
}

impl Reads {
    /// At most `entries` results and `bytes` bytes of them (either 0: nothing stored).
    pub(super) fn new(entries: usize, bytes: usize) -> Self {
        Reads {
            cache: ReadCache::new(entries, bytes),
            asks_input: Default::default(),
        }
    }

    /// Whether a read is shared and cached: of a watched key (`watched`: the upstream
    /// confirmed its subscription) or of an upstream whose answers carry a `ttlMs`
    /// (`ttl_upstream`); and never one with a progress token (it keeps its own stream
    /// of progress) or an MRTR retry.
    pub(super) fn shared(watched: bool, ttl_upstream: bool, msg: &Message) -> bool {
        (watched || ttl_upstream)
            && methods::progress_token(msg.params()).is_none()
            && !is_mrtr_retry(msg)
    }

    /// Whether reads of `key` go as each client's own at `now`: a recent answer of it
    /// asked for input.
    pub(super) fn asks_input(&self, key: &SubKey, now: Instant) -> bool {
        !self.asks_input.is_empty()
            && self
                .asks_input
                .get(key)
                .is_some_and(|at| now.duration_since(*at) < ASKS_INPUT_FOR)
    }

    /// `key` changed: whether it asks for input is to be seen again.
    pub(super) fn changed(&mut self, key: &SubKey) {
        if !self.asks_input.is_empty() {
            self.asks_input.remove(key);
        }
    }

    /// `upstream`'s session is gone (or the upstream removed): what its URIs asked is
    /// to be seen again.
    pub(super) fn upstream_gone(&mut self, upstream: crate::state::ids::UpstreamId) {
        self.asks_input.retain(|k, _| k.upstream != upstream);
    }

    /// `client`'s read `id` of `key`, at `now`.
    pub(super) fn start(
        &mut self,
        key: &SubKey,
        client: ClientId,
        id: &RawId,
        now: Instant,
    ) -> ReadStart {
        match self.cache.read_at(key, (client, id.clone()), now) {
            ReadPlan::Hit(result) => ReadStart::Answer(response_bytes(id, "result", &result)),
            ReadPlan::Fresh { result, remaining } => {
                let body = with_ttl_left(&result, remaining);
                ReadStart::Answer(response_bytes(id, "result", &body))
            }
            ReadPlan::Joined => ReadStart::Joined,
            ReadPlan::Fetch { generation } => ReadStart::Fetch { generation },
        }
    }

    /// The shared read of `key` sent at `generation` ended with `Ok(result)` or
    /// `Err(error object)` (both raw JSON text), at `now`; `still_active`: the key is
    /// still watched. Stores a success if allowed; gives every waiter with its
    /// response, under its own id.
    pub(super) fn finish(
        &mut self,
        key: &SubKey,
        generation: u64,
        outcome: Result<&str, &str>,
        still_active: bool,
        now: Instant,
    ) -> Vec<(ClientId, RawId, Bytes)> {
        let keep = match outcome {
            Ok(result) => keep_rule(result, still_active),
            Err(_) => Keep::Not,
        };
        let stored = outcome.ok().map(Arc::<str>::from);
        let waiters = self.cache.complete_keep(key, generation, stored, keep, now);
        let (member, body) = match outcome {
            Ok(r) => ("result", r),
            Err(e) => ("error", e),
        };
        // A "not found" is -32002 inside mcpmux, whichever way the upstream said it
        // (a stateless upstream answers -32602 naming the URI in `data.uri`); the edge
        // of a stateless client gives it back that shape (`protocol::shape`).
        let not_found = outcome.err().and_then(not_found_body);
        let body = not_found.as_deref().unwrap_or(body);
        waiters
            .into_iter()
            .map(|(client, id)| {
                let bytes = response_bytes(&id, member, body);
                (client, id, bytes)
            })
            .collect()
    }
}

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
        // carry a `ttlMs`), are shared and cached.
        let watched = self.watched(&key);
        if self.reads.asks_input(&key, Instant::now())
            || !Reads::shared(watched, self.upstream_is_stateless(upstream), &msg)
        {
            return self.forward_request(client, id, msg);
        }
        if self.upstream_ready(upstream).is_none() {
            let why = self.unavailable(upstream);
            return self.reply_error(client, &id, code::UPSTREAM_UNAVAILABLE, &why);
        }
        // A read the cache answers is not refused: it waits on nothing.
        if !self.reads.cache.answers_at(&key, Instant::now()) && self.refused_at_limit(client, &id)
        {
            return;
        }
        match self.reads.start(&key, client, &id, Instant::now()) {
            ReadStart::Answer(bytes) => {
                self.trace_read(client, &id, &key, "hit");
                self.push_response_bytes(client, id, bytes);
            }
            ReadStart::Joined => self.trace_read(client, &id, &key, "join"),
            ReadStart::Fetch { generation }
                if self.fleet_role(&key) == Some(super::fleet::FleetRole::Follow) =>
            {
                // The owner reads, once for the whole fleet.
                self.fleet_read(key, uri, generation);
            }
            ReadStart::Fetch { generation } => {
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
        if self.upstream_is_stateless(key.upstream) && outcome.is_ok_and(asks_for_input) {
            return self.read_each_alone(key, generation);
        }
        let still_active = self.watched(key);
        let answers = self
            .reads
            .finish(key, generation, outcome, still_active, Instant::now());
        for (client, id, bytes) in answers {
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

impl Hub {
    /// The shared read of `key` was answered `input_required`: a request for input
    /// belongs to one client's request, not to all who joined it (each may be asked
    /// only what it declared it can answer, and a legacy session's must be bridged to
    /// its own elicitation or sampling). Each waiter's read is sent again as its own
    /// request, under its own client; and so are later reads of the URI, until it
    /// changes.
    fn read_each_alone(&mut self, key: &SubKey, generation: u64) {
        if self.reads.asks_input.len() >= ASKS_INPUT_MAX {
            self.reads.asks_input.clear();
        }
        let now = Instant::now();
        self.reads.asks_input.insert(key.clone(), now);
        let waiters = self
            .reads
            .cache
            .complete_keep(key, generation, None, Keep::Not, now);
        let exposed = self.catalog.expose_uri(key.upstream, &key.uri).into_owned();
        for (client, id) in waiters {
            let params = serde_json::json!({ "uri": exposed });
            let msg = Message::request(&id, methods::RESOURCES_READ, Some(&params));
            self.forward_request(client, id, msg);
        }
    }
}

/// Whether a result is `input_required` (MRTR, 2026-07-28).
fn asks_for_input(result: &str) -> bool {
    result.contains("input_required")
        && serde_json::from_str::<serde_json::Value>(result)
            .is_ok_and(|v| v["resultType"] == "input_required")
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
        if t.contains("\"requestState\"") || t.contains("\"inputResponses\"") {
            return true;
        }
        // An escape could spell either name (`"request\u0053tate"`): read the params
        // as the server will, so such a retry is not shared (nor its answer kept).
        t.contains('\\')
            && serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t)
                .is_ok_and(|m| m.contains_key("requestState") || m.contains_key("inputResponses"))
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
    use super::*;
    use crate::state::ids::UpstreamId;

    fn key() -> SubKey {
        SubKey::new(UpstreamId(0), "x://1")
    }

    fn text(b: &Bytes) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    /// An MRTR retry is never shared, however its member names are spelled.
    #[test]
    fn retries_are_not_shared_even_when_their_names_are_escaped() {
        let read = |params: &str| {
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{params}}}"#
            );
            Message::parse(text.as_bytes()).unwrap()
        };
        let plain = read(r#"{"uri":"a://x"}"#);
        assert!(Reads::shared(true, false, &plain));
        for retry in [
            r#"{"uri":"a://x","requestState":"s"}"#,
            r#"{"uri":"a://x","requestState":"s"}"#,
            r#"{"uri":"a://x","inputResponses":{}}"#,
        ] {
            assert!(!Reads::shared(true, true, &read(retry)), "{retry}");
        }
        assert!(Reads::shared(true, false, &read(r#"{"uri":"a://x"}"#)));
    }

    #[test]
    fn a_watched_read_is_fetched_once_answered_to_every_waiter_and_then_kept() {
        let mut r = Reads::new(10, 1 << 20);
        let now = Instant::now();
        let (a, b) = (RawId::from_u64(1), RawId::from_u64(2));
        let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &a, now) else {
            panic!("a miss fetches");
        };
        assert_eq!(r.start(&key(), ClientId(2), &b, now), ReadStart::Joined);
        let answers = r.finish(&key(), generation, Ok(r#"{"contents":[]}"#), true, now);
        let answers: Vec<(ClientId, &str)> =
            answers.iter().map(|(c, _, b)| (*c, text(b))).collect();
        assert_eq!(
            answers,
            [
                (
                    ClientId(1),
                    r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#
                ),
                (
                    ClientId(2),
                    r#"{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}"#
                )
            ]
        );
        let ReadStart::Answer(hit) = r.start(&key(), ClientId(3), &RawId::from_u64(3), now) else {
            panic!("kept while watched");
        };
        assert_eq!(
            text(&hit),
            r#"{"jsonrpc":"2.0","id":3,"result":{"contents":[]}}"#
        );
    }

    #[test]
    fn an_unwatched_result_keeps_for_its_ttl_and_tells_the_time_left() {
        let mut r = Reads::new(10, 1 << 20);
        let t0 = Instant::now();
        let id = RawId::from_u64(1);
        let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &id, t0) else {
            panic!("a miss fetches");
        };
        r.finish(&key(), generation, Ok(r#"{"ttlMs":1000}"#), false, t0);
        let later = t0 + Duration::from_millis(400);
        let ReadStart::Answer(hit) = r.start(&key(), ClientId(1), &id, later) else {
            panic!("kept for its ttl");
        };
        assert_eq!(
            text(&hit),
            r#"{"jsonrpc":"2.0","id":1,"result":{"ttlMs":600}}"#
        );
        let gone = t0 + Duration::from_millis(1000);
        assert!(matches!(
            r.start(&key(), ClientId(1), &id, gone),
            ReadStart::Fetch { .. }
        ));
    }

    #[test]
    fn input_required_and_errors_are_never_kept_and_not_found_is_32002() {
        let mut r = Reads::new(10, 1 << 20);
        let now = Instant::now();
        let id = RawId::from_u64(1);
        for outcome in [
            Ok(r#"{"resultType":"input_required","ttlMs":5000}"#),
            Err(r#"{"code":-32602,"message":"Resource not found","data":{"uri":"x://1"}}"#),
        ] {
            let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &id, now) else {
                panic!("nothing kept: fetched again");
            };
            let answers = r.finish(&key(), generation, outcome, true, now);
            if outcome.is_err() {
                let v: serde_json::Value = serde_json::from_slice(&answers[0].2).unwrap();
                assert_eq!(v["error"]["code"], -32002);
            }
        }
        assert!(matches!(
            r.start(&key(), ClientId(1), &id, now),
            ReadStart::Fetch { .. }
        ));
    }

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
