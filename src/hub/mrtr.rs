//! Multi round-trip requests (MRTR) for 2026-07-28 clients in front of legacy
//! upstreams (docs/architecture.md, "Both protocol eras").
//!
//! A legacy server asks for input with a server→client request (sampling,
//! elicitation, roots) while it works on a client's request. A modern client takes no
//! such request: its request is answered `resultType: "input_required"` with the
//! server's request as an input request and a `requestState` minted here. The
//! upstream request stays in flight, parked (no client owns it), and the server's
//! request is held. The client's retry — same method, `inputResponses` and the
//! `requestState` — answers the held request upstream, and the retry takes the
//! parked request over: its final result (or the next round) goes to the retry.
//!
//! `requestState` is `<payload>.<mac>` (Base64url): the payload names the held
//! request, its expiry, this process (a boot id drawn at start) and, in a fleet, this
//! instance; the MAC is HMAC-SHA256 under a key drawn at start, or, once this instance
//! has joined a fleet, under the fleet's one key (kept in NATS), so any instance can
//! check any instance's states. A state cannot be forged or altered; a held request is
//! answered exactly once; an expired, unknown or tampered state gets -32602.
//! A retry that reaches another instance of the fleet is sent to the instance that
//! holds the request (`FleetCmd::ForwardRetry`), which serves it as a client of its
//! own hub and sends the answer back; a state whose instance or process is gone (a
//! restart) gets an error that says so.
//! Owns: the held requests and the keys. Never: asks a client other than the one
//! whose request it is (the state only names a held request; whoever retries with
//! it is that request's client — all clients of one mcpmux share the upstream's
//! authorization context).

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use bytes::Bytes;

use super::Hub;
use crate::protocol::{code, Message, RawId};
use crate::state::ids::{ClientId, ProxyId, UpstreamId};
use crate::state::pending::Origin;
pub use crate::upstream::stateless::bridge::MAX_ROUNDS;

/// What every `requestState` mcpmux mints starts with; a state without it was minted
/// by a 2026-07-28 upstream and goes to that upstream untouched.
const STATE_PREFIX: &str = "mcpmux2.";

/// The key of the one input request of a round.
const INPUT_KEY: &str = "mcpmux-input";

/// A server→client request held for a stateless client's retry.
#[derive(Debug)]
pub(super) struct Held {
    upstream: UpstreamId,
    /// The id the upstream gave its request (answered with the client's input).
    upstream_id: RawId,
    /// The parked client request it belongs to.
    pid: ProxyId,
    /// The parked request's method (the retry must be of the same).
    method: Box<str>,
    round: u32,
}

/// The MRTR state of the hub.
pub(super) struct Mrtr {
    /// This process's own key, and the fleet's once known (minting uses that one).
    key: [u8; 32],
    fleet_key: Option<[u8; 32]>,
    /// Drawn at start: a state of an earlier process of this instance is told apart.
    boot: u64,
    /// This instance's fleet id, once known ("" outside a fleet).
    pub(super) instance: String,
    next: u64,
    held: std::collections::HashMap<u64, Held>,
    /// Rounds taken so far per parked request.
    rounds: std::collections::HashMap<ProxyId, u32>,
}

impl Default for Mrtr {
    fn default() -> Self {
        Mrtr {
            key: rand::random(),
            fleet_key: None,
            boot: rand::random(),
            instance: String::new(),
            next: 0,
            held: Default::default(),
            rounds: Default::default(),
        }
    }
}

/// Where a genuine state's held request lives.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StateHome {
    /// Here: the held request's number.
    Here(u64),
    /// At another instance of the fleet.
    Instance(String),
}

impl Mrtr {
    fn mac(key: &[u8; 32], payload: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        mac.update(payload);
        mac
    }

    /// The fleet's key: states minted from now on are valid fleet-wide.
    pub(super) fn set_fleet_key(&mut self, key: [u8; 32]) {
        self.fleet_key = Some(key);
    }

    fn mint(&self, held: u64, expires_ms: u64) -> String {
        let payload = format!("{held}.{expires_ms}.{:x}.{}", self.boot, self.instance);
        let key = self.fleet_key.as_ref().unwrap_or(&self.key);
        let tag = Self::mac(key, payload.as_bytes()).finalize().into_bytes();
        format!("{STATE_PREFIX}{}.{}", B64.encode(payload), B64.encode(tag))
    }

    /// Where the held request a state names lives, if the state is genuine, not
    /// expired, and its process is still the one that holds it.
    fn verify(&self, state: &str, now_ms: u64) -> Result<StateHome, &'static str> {
        let state = state.strip_prefix(STATE_PREFIX).ok_or("malformed")?;
        let (payload, tag) = state.split_once('.').ok_or("malformed")?;
        let payload = B64.decode(payload).map_err(|_| "malformed")?;
        let tag = B64.decode(tag).map_err(|_| "malformed")?;
        let genuine = [Some(&self.key), self.fleet_key.as_ref()]
            .into_iter()
            .flatten()
            .any(|k| Self::mac(k, &payload).verify_slice(&tag).is_ok());
        if !genuine {
            return Err("not issued by this mcpmux or its fleet (or altered); \
                an mcpmux outside a fleet that restarted since cannot read it either: \
                send the request again without requestState");
        }
        let text = std::str::from_utf8(&payload).map_err(|_| "malformed")?;
        let mut parts = text.splitn(4, '.');
        let (Some(held), Some(expires), Some(boot), Some(instance)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("malformed");
        };
        let expires: u64 = expires.parse().map_err(|_| "malformed")?;
        if now_ms > expires {
            return Err("expired");
        }
        if !instance.is_empty() && instance != self.instance {
            return Ok(StateHome::Instance(instance.to_owned()));
        }
        if u64::from_str_radix(boot, 16).ok() != Some(self.boot) {
            return Err(
                "the mcpmux that issued it restarted since, and the request it \
                held is gone: send the request again without requestState",
            );
        }
        held.parse().map(StateHome::Here).map_err(|_| "malformed")
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Hub {
    /// A legacy server's request for input that belongs to stateless client `client`'s
    /// request `client_request` (forwarded as `pid`): answer that request
    /// `input_required` and hold the server's request for the retry.
    pub(super) fn bridge_to_input_required(
        &mut self,
        upstream: UpstreamId,
        msg: &Message,
        client: ClientId,
        client_request: RawId,
    ) -> Result<(), String> {
        let upstream_id = msg.id().cloned().expect("requests have ids");
        let pid = self
            .pending
            .find_client_request(client, &client_request)
            .ok_or("the request it belongs to is no longer in flight")?;
        let Some(Origin::Client { method, .. }) = self.pending.get(pid).map(|e| e.origin.clone())
        else {
            return Err("the request it belongs to is no longer in flight".into());
        };
        let round = self.mrtr.rounds.get(&pid).copied().unwrap_or(0) + 1;
        if round > MAX_ROUNDS {
            return Err(format!(
                "more than {MAX_ROUNDS} rounds of input for one request"
            ));
        }
        self.pending
            .reassign(
                pid,
                Origin::Held {
                    method: method.clone(),
                },
            )
            .map_err(|_| "internal: could not park the request")?;
        self.mrtr.rounds.insert(pid, round);
        let held_id = self.mrtr.next;
        self.mrtr.next += 1;
        let expires_ms = now_ms() + self.settings.request_timeout.as_millis() as u64;
        self.mrtr.held.insert(
            held_id,
            Held {
                upstream,
                upstream_id,
                pid,
                method,
                round,
            },
        );
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {INPUT_KEY: {"method": msg.method(), "params": params}},
            "requestState": self.mrtr.mint(held_id, expires_ms),
        });
        self.reply(client, &client_request, result);
        Ok(())
    }

    /// A stateless request carrying `requestState`: the retry of a request whose client
    /// was asked for input. Answers the held server request with the client's input
    /// and hands the parked request over to this retry. Returns `false` when the
    /// request carries no state (a plain request).
    pub(super) fn on_mrtr_retry(&mut self, client: ClientId, id: &RawId, msg: &Message) -> bool {
        // Most requests are no retry: params whose text neither names `requestState`
        // nor has an escape (which could spell it) are not parsed.
        let text = msg.params().map_or("", |p| p.get());
        if !text.contains("requestState") && !text.contains('\\') {
            return false;
        }
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let Some(state) = params.get("requestState") else {
            return false;
        };
        let refuse = |hub: &mut Hub, why: String| {
            hub.reply_error(client, id, code::INVALID_PARAMS, &why);
            true
        };
        let Some(state) = state.as_str() else {
            return refuse(self, "requestState must be a string".into());
        };
        if !state.starts_with(STATE_PREFIX) && self.routes_to_stateless(client, msg) {
            // The upstream's own state: its retry passes through.
            return false;
        }
        let held_id = match self.mrtr.verify(state, now_ms()) {
            Ok(StateHome::Here(h)) => h,
            Ok(StateHome::Instance(instance)) => {
                return match self.forward_retry(client, id, msg, instance) {
                    Ok(()) => true,
                    Err(why) => refuse(self, format!("invalid requestState: {why}")),
                }
            }
            Err(why) => return refuse(self, format!("invalid requestState: {why}")),
        };
        let Some(held) = self.mrtr.held.get(&held_id) else {
            return refuse(
                self,
                "invalid requestState: already answered, or its request ended".into(),
            );
        };
        if msg.method() != Some(&*held.method) {
            return refuse(
                self,
                format!(
                    "invalid requestState: it belongs to a {} request",
                    held.method
                ),
            );
        }
        let Some(input) = params["inputResponses"].get(INPUT_KEY).cloned() else {
            return refuse(
                self,
                format!("inputResponses[\"{INPUT_KEY}\"] is required with this requestState"),
            );
        };
        let held = self.mrtr.held.remove(&held_id).expect("checked");
        let origin = Origin::Client {
            client,
            id: id.clone(),
            method: held.method.clone(),
            progress: None,
        };
        if self.pending.reassign(held.pid, origin).is_err() {
            return refuse(self, "a request with this id is already in flight".into());
        }
        tracing::debug!(%client, round = held.round, "MRTR retry answers the held server request");
        let answer = if input.get("code").is_some() && input.get("message").is_some() {
            // The client declined with an error object.
            let c = input["code"].as_i64().unwrap_or(code::INTERNAL_ERROR);
            let m = input["message"].as_str().unwrap_or("declined");
            Message::error_response(Some(&held.upstream_id), c, m, input.get("data").cloned())
        } else {
            Message::response(&held.upstream_id, &input)
        };
        self.send_to_upstream(held.upstream, &answer);
        true
    }

    /// A retry whose held request lives at another instance of the fleet: that
    /// instance serves it (`FleetEvent::RetryDone` brings the answer back).
    fn forward_retry(
        &mut self,
        client: ClientId,
        id: &RawId,
        msg: &Message,
        instance: String,
    ) -> Result<(), String> {
        let Some(fleet) = &self.fleet.actor else {
            return Err(format!(
                "it was issued by mcpmux instance {instance} of a fleet this mcpmux is not in"
            ));
        };
        let init = self.clients.get(&client).and_then(|c| c.init.as_ref());
        let capabilities = init.map(|i| i.capabilities.clone()).unwrap_or_default();
        let log_level = self
            .log_levels
            .get(client)
            .and_then(super::lists::level_name)
            .map(str::to_owned);
        tracing::debug!(%client, %instance, "MRTR retry sent to the instance that holds its request");
        fleet.send(crate::fleet::FleetCmd::ForwardRetry {
            instance,
            client,
            id: id.clone(),
            request: msg.to_bytes(),
            capabilities,
            log_level,
        });
        Ok(())
    }

    /// The answer to a retry another instance served (or why it could not).
    pub(super) fn retry_done(
        &mut self,
        client: ClientId,
        id: RawId,
        answer: Result<Bytes, String>,
    ) {
        if !self.clients.contains_key(&client) {
            return;
        }
        match answer.map(|b| Message::parse(&b)) {
            Ok(Ok(mut m)) => {
                m.set_id(&id);
                self.push_response(client, &id, m);
            }
            Ok(Err(_)) => self.reply_error(
                client,
                &id,
                code::INTERNAL_ERROR,
                "the fleet instance that holds this request answered unreadably",
            ),
            Err(why) => self.reply_error(
                client,
                &id,
                code::INVALID_PARAMS,
                &format!("invalid requestState: {why}"),
            ),
        }
    }

    /// Whether `msg` goes to a 2026-07-28 upstream (which mints its own states).
    fn routes_to_stateless(&self, client: ClientId, msg: &Message) -> bool {
        let mut probe = msg.clone();
        self.route_request(self.view_of(client), &mut probe)
            .is_ok_and(|u| self.upstream_is_stateless(u))
    }

    /// The parked request `pid` ended (answered, failed, timed out): its held server
    /// request, if any, is forgotten (a late retry gets "already answered").
    pub(super) fn drop_held_for(&mut self, pid: ProxyId) {
        self.mrtr.held.retain(|_, h| h.pid != pid);
        self.mrtr.rounds.remove(&pid);
    }

    /// Forgets the rounds of a request that ended (`drop_request_timer`, on every way
    /// a request ends).
    pub(super) fn mrtr_finished(&mut self, pid: ProxyId) {
        if !self.mrtr.rounds.is_empty() {
            self.mrtr.rounds.remove(&pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_verify_only_unaltered_and_unexpired() {
        let m = Mrtr::default();
        let s = m.mint(7, 1_000);
        assert_eq!(m.verify(&s, 999), Ok(StateHome::Here(7)));
        assert_eq!(m.verify(&s, 1_001), Err("expired"));
        // Another key (another mcpmux, or after a restart) never verifies.
        assert!(Mrtr::default().verify(&s, 0).is_err());
        // Altering the payload (a later expiry, another held id) breaks the MAC.
        let (_, tag) = s.rsplit_once('.').unwrap();
        let forged = format!("{STATE_PREFIX}{}.{tag}", B64.encode("8.1000.0."));
        assert!(m.verify(&forged, 0).unwrap_err().contains("altered"));
        assert_eq!(m.verify("garbage", 0), Err("malformed"));
    }

    #[test]
    fn fleet_states_name_their_instance_and_a_restart_is_told() {
        let key = [9u8; 32];
        let mut a = Mrtr {
            instance: "ia".into(),
            ..Mrtr::default()
        };
        a.set_fleet_key(key);
        let s = a.mint(3, 1_000);
        // Another instance of the fleet reads it and knows where it lives.
        let mut b = Mrtr {
            instance: "ib".into(),
            ..Mrtr::default()
        };
        b.set_fleet_key(key);
        assert_eq!(b.verify(&s, 0), Ok(StateHome::Instance("ia".into())));
        assert_eq!(a.verify(&s, 0), Ok(StateHome::Here(3)));
        // The same instance id in a new process (not the fleet's way, but a restart
        // outside a fleet keeps "" as its id): the held request is gone, and it says so.
        let mut again = Mrtr {
            instance: "ia".into(),
            ..Mrtr::default()
        };
        again.set_fleet_key(key);
        assert!(again.verify(&s, 0).unwrap_err().contains("restarted"));
        // Outside a fleet, a restart draws a new key: the state is not readable, and
        // the error says what to do.
        let lone = Mrtr::default();
        let s = lone.mint(1, 1_000);
        let err = Mrtr::default().verify(&s, 0).unwrap_err();
        assert!(err.contains("without requestState"), "{err}");
    }
}
