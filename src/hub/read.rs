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
use serde_json::value::RawValue;

use super::Hub;
use crate::protocol::methods;
use crate::protocol::{code, Message, Raw, RawId};
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
    /// The params of each waiting read of a 2026-07-28 upstream, as its client sent
    /// them: when the shared read asks for input, each read goes again as its client's
    /// own, with its own params (its `_meta`: trace context, the client's own keys).
    /// An entry leaves with its waiter: answered, cancelled, or its client gone.
    own_params: std::collections::HashMap<(ClientId, RawId), Box<RawValue>>,
}

/// A waiter of a shared read, with the params it was sent with when they were kept
/// ([`Reads::start`]).
pub(super) type AloneRead = (ClientId, RawId, Option<Box<RawValue>>);

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
            own_params: Default::default(),
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

    /// `client`'s read `id` of `key`, at `now`. `params` (a 2026-07-28 upstream's
    /// read, whose answer may ask for input) are kept while it waits.
    pub(super) fn start(
        &mut self,
        key: &SubKey,
        client: ClientId,
        id: &RawId,
        params: Option<Raw<'_>>,
        now: Instant,
    ) -> ReadStart {
        let start = match self.cache.read_at(key, (client, id.clone()), now) {
            ReadPlan::Hit(result) => ReadStart::Answer(response_bytes(id, "result", &result)),
            ReadPlan::Fresh { result, remaining } => {
                let body = with_ttl_left(&result, remaining);
                ReadStart::Answer(response_bytes(id, "result", &body))
            }
            ReadPlan::Joined => ReadStart::Joined,
            ReadPlan::Fetch { generation } => ReadStart::Fetch { generation },
        };
        if let (Some(params), ReadStart::Joined | ReadStart::Fetch { .. }) = (params, &start) {
            self.own_params
                .insert((client, id.clone()), params.to_raw_value());
        }
        start
    }

    /// The shared read of `key` sent at `generation` asked for input: its waiters,
    /// each with the params it was sent with, to send again one by one. Nothing is
    /// kept.
    pub(super) fn alone(&mut self, key: &SubKey, generation: u64, now: Instant) -> Vec<AloneRead> {
        let waiters = self
            .cache
            .complete_keep(key, generation, None, Keep::Not, now);
        waiters
            .into_iter()
            .map(|(client, id)| {
                let params = self.own_params.remove(&(client, id.clone()));
                (client, id, params)
            })
            .collect()
    }

    /// `client`'s read `id` is not to be answered (cancelled), or none of its reads
    /// (`None`: it left). The reads themselves go on.
    pub(super) fn forget(&mut self, client: ClientId, id: Option<&RawId>) {
        self.cache.forget_waiter(client, id);
        if self.own_params.is_empty() {
            return;
        }
        match id {
            Some(id) => {
                self.own_params.remove(&(client, id.clone()));
            }
            None => self.own_params.retain(|(c, _), _| *c != client),
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
        if !self.own_params.is_empty() {
            for (client, id) in &waiters {
                self.own_params.remove(&(*client, id.clone()));
            }
        }
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
        let stateless = self.upstream_is_stateless(upstream);
        if self.reads.asks_input(&key, Instant::now()) || !Reads::shared(watched, stateless, &msg) {
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
        // Only a 2026-07-28 upstream's answer may ask for input (`read_each_alone`).
        let params = msg.params().filter(|_| stateless);
        match self.reads.start(&key, client, &id, params, Instant::now()) {
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
        let waiters = self.reads.alone(key, generation, now);
        let exposed = self.catalog.expose_uri(key.upstream, &key.uri).into_owned();
        for (client, id, params) in waiters {
            let mut msg = Message::request(&id, methods::RESOURCES_READ, None);
            match params {
                // As its client sent it, `_meta` and all.
                Some(params) => msg.set_member("params", params),
                None => msg.set_params(&serde_json::json!({ "uri": exposed })),
            }
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
        let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &a, None, now) else {
            panic!("a miss fetches");
        };
        assert_eq!(
            r.start(&key(), ClientId(2), &b, None, now),
            ReadStart::Joined
        );
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
        let ReadStart::Answer(hit) = r.start(&key(), ClientId(3), &RawId::from_u64(3), None, now)
        else {
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
        let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &id, None, t0) else {
            panic!("a miss fetches");
        };
        r.finish(&key(), generation, Ok(r#"{"ttlMs":1000}"#), false, t0);
        let later = t0 + Duration::from_millis(400);
        let ReadStart::Answer(hit) = r.start(&key(), ClientId(1), &id, None, later) else {
            panic!("kept for its ttl");
        };
        assert_eq!(
            text(&hit),
            r#"{"jsonrpc":"2.0","id":1,"result":{"ttlMs":600}}"#
        );
        let gone = t0 + Duration::from_millis(1000);
        assert!(matches!(
            r.start(&key(), ClientId(1), &id, None, gone),
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
            let ReadStart::Fetch { generation } = r.start(&key(), ClientId(1), &id, None, now)
            else {
                panic!("nothing kept: fetched again");
            };
            let answers = r.finish(&key(), generation, outcome, true, now);
            if outcome.is_err() {
                let v: serde_json::Value = serde_json::from_slice(&answers[0].2).unwrap();
                assert_eq!(v["error"]["code"], -32002);
            }
        }
        assert!(matches!(
            r.start(&key(), ClientId(1), &id, None, now),
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

    /// What each waiter sent is kept while it waits on a 2026-07-28 upstream's read,
    /// given back when the read asks for input, and dropped with the waiter otherwise.
    #[test]
    fn a_waiters_own_params_leave_with_it() {
        let mut r = Reads::new(10, 1 << 20);
        let now = Instant::now();
        let raw = |t: &str| RawValue::from_string(t.to_owned()).unwrap();
        let pa = raw(r#"{"uri":"x://1","_meta":{"k":"a"}}"#);
        let pb = raw(r#"{"uri":"x://1","_meta":{"k":"b"}}"#);
        let (a, b, c) = (RawId::from_u64(1), RawId::from_u64(2), RawId::from_u64(3));
        let ReadStart::Fetch { generation } =
            r.start(&key(), ClientId(1), &a, Some((&*pa).into()), now)
        else {
            panic!("a miss fetches");
        };
        assert_eq!(
            r.start(&key(), ClientId(2), &b, Some((&*pb).into()), now),
            ReadStart::Joined
        );
        assert_eq!(
            r.start(&key(), ClientId(3), &c, Some((&*pb).into()), now),
            ReadStart::Joined
        );
        // Cancelled, and gone: their params go.
        r.forget(ClientId(3), Some(&c));
        assert_eq!(r.own_params.len(), 2);
        let alone = r.alone(&key(), generation, now);
        let got: Vec<(ClientId, &str)> = alone
            .iter()
            .map(|(c, _, p)| (*c, p.as_deref().map(RawValue::get).unwrap()))
            .collect();
        assert_eq!(got, [(ClientId(1), pa.get()), (ClientId(2), pb.get())]);
        assert!(r.own_params.is_empty());
        // Answered, or its client left: nothing stays behind either.
        let ReadStart::Fetch { generation } =
            r.start(&key(), ClientId(1), &a, Some((&*pa).into()), now)
        else {
            panic!("nothing kept: fetched again");
        };
        r.start(&key(), ClientId(2), &b, Some((&*pb).into()), now);
        r.forget(ClientId(2), None);
        assert_eq!(r.own_params.len(), 1);
        r.finish(&key(), generation, Ok(r#"{"contents":[]}"#), false, now);
        assert!(r.own_params.is_empty());
    }
}
