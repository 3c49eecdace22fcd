//! MRTR bridged for legacy clients (docs/architecture.md, "Upstreams of both eras"):
//! a 2026-07-28 server answers a request `resultType: "input_required"`; a legacy
//! client cannot read that, so mcpmux asks that client itself with the matching legacy
//! requests (`elicitation/create`, `sampling/createMessage`, `roots/list`), collects
//! the answers, and retries the request upstream with `inputResponses` and the
//! server's `requestState` (echoed byte for byte), round after round, until the result
//! is complete.
//!
//! Owns: the bridged requests in flight and their input requests. Pure state, no I/O.
//! The input requests go to the hub as server→client requests *belonging to the
//! bridged request*, so the hub routes them to the one client that made it (and only
//! if it declared the capability); never to anyone else.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use crate::protocol::{code, Message, RawId};

/// Rounds of input one request may take before mcpmux gives up on it: the one limit
/// for MRTR, bridged here for legacy clients and relayed by the hub for the others.
pub const MAX_ROUNDS: u32 = 8;

/// One request mcpmux bridges.
#[derive(Debug)]
struct Bridge {
    method: String,
    /// The params as first sent (with the era's `_meta`).
    params: Value,
    round: u32,
    /// The id the current attempt carries upstream.
    wire: RawId,
    /// The server's `requestState` of the current round, verbatim.
    state: Option<Value>,
    /// This round's input requests: key → the client's answer once in.
    inputs: BTreeMap<String, Option<Value>>,
}

/// What the bridge wants done.
#[derive(Debug)]
pub enum BridgeAction {
    /// Give the hub this message (the final answer under the hub's id, or an input
    /// request belonging to the hub's request `for_request`).
    Hub {
        msg: Message,
        for_request: Option<RawId>,
    },
    /// Send the retry upstream.
    Retry(Message),
}

/// The bridged requests of one modern upstream session.
#[derive(Debug, Default)]
pub struct Bridges {
    /// Keyed by the hub's request id.
    active: HashMap<RawId, Bridge>,
    /// Wire id of a retry → the hub's id.
    wires: HashMap<RawId, RawId>,
    /// Id of an input request → (the hub's id, the input key).
    inputs: HashMap<RawId, (RawId, String)>,
    next: u64,
}

impl Bridges {
    /// Starts bridging request `id` (already carrying its `_meta`).
    pub fn track(&mut self, id: &RawId, method: &str, params: Value) {
        self.active.insert(
            id.clone(),
            Bridge {
                method: method.to_owned(),
                params,
                round: 0,
                wire: id.clone(),
                state: None,
                inputs: BTreeMap::new(),
            },
        );
    }

    /// The hub's id of the request a retry was sent for, when `wire` is a retry's id:
    /// what the server says on that retry's stream (logs, progress) is that request's.
    pub fn hub_id_of(&self, wire: &RawId) -> Option<&RawId> {
        self.wires.get(wire)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// A response from the server. Returns `None` when it is not about a bridged
    /// request (pass it on unchanged); else what to do instead.
    pub fn on_response(&mut self, msg: &Message) -> Option<Vec<BridgeAction>> {
        let wire = msg.id()?;
        let hub_id = match self.wires.get(wire) {
            Some(h) => h.clone(),
            None if self.active.get(wire).is_some_and(|b| &b.wire == wire) => wire.clone(),
            None => return None,
        };
        self.wires.remove(wire);
        let result: Option<Value> = msg
            .result()
            .and_then(|r| serde_json::from_str(r.get()).ok());
        let input_required = result
            .as_ref()
            .is_some_and(|r| r["resultType"] == "input_required");
        if !input_required {
            self.forget(&hub_id);
            let mut answer = msg.clone();
            answer.set_id(&hub_id);
            return Some(vec![BridgeAction::Hub {
                msg: answer,
                for_request: None,
            }]);
        }
        let result = result.expect("checked");
        let b = self.active.get_mut(&hub_id).expect("tracked");
        b.round += 1;
        if b.round > MAX_ROUNDS {
            let why = format!("the server asked for input more than {MAX_ROUNDS} times");
            return Some(vec![self.fail(&hub_id, code::INTERNAL_ERROR, &why, None)]);
        }
        b.state = result.get("requestState").cloned();
        b.inputs.clear();
        let mut out = Vec::new();
        let requests = result["inputRequests"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (key, req) in requests {
            let Some(method) = req["method"].as_str() else {
                continue;
            };
            self.next += 1;
            let input_id =
                RawId::parse(&format!("\"mcpmux-input-{}\"", self.next)).expect("valid id");
            let params = req.get("params").cloned().unwrap_or_else(|| json!({}));
            let b = self.active.get_mut(&hub_id).expect("tracked");
            b.inputs.insert(key.clone(), None);
            self.inputs
                .insert(input_id.clone(), (hub_id.clone(), key.clone()));
            out.push(BridgeAction::Hub {
                msg: Message::request(&input_id, method, Some(&params)),
                for_request: Some(hub_id.clone()),
            });
        }
        if out.is_empty() {
            // Nothing to ask: retry with the state alone.
            out.extend(self.retry(&hub_id));
        }
        Some(out)
    }

    /// The client's answer to an input request (a response the hub sent "upstream").
    /// `None` when `msg` answers no input request of this bridge.
    pub fn on_answer(&mut self, msg: &Message) -> Option<Vec<BridgeAction>> {
        let (hub_id, key) = self.inputs.remove(msg.id()?)?;
        if !self.active.contains_key(&hub_id) {
            return Some(Vec::new());
        }
        if let Some(err) = msg.error() {
            let err: Value = serde_json::from_str(err.get()).unwrap_or_default();
            let c = err["code"].as_i64().unwrap_or(code::INTERNAL_ERROR);
            let why = format!(
                "the client could not give the input the server asked for: {}",
                err["message"].as_str().unwrap_or("error")
            );
            return Some(vec![self.fail(&hub_id, c, &why, err.get("data").cloned())]);
        }
        let result: Value = msg
            .result()
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or_else(|| json!({}));
        let b = self.active.get_mut(&hub_id).expect("checked");
        b.inputs.insert(key, Some(result));
        if b.inputs.values().any(Option::is_none) {
            return Some(Vec::new());
        }
        Some(self.retry(&hub_id))
    }

    /// The hub cancelled request `hub_id`: stop bridging it. Returns the wire id its
    /// current attempt carries upstream (to cancel there), if any.
    pub fn cancel(&mut self, hub_id: &RawId) -> Option<RawId> {
        let wire = self.active.get(hub_id)?.wire.clone();
        self.forget(hub_id);
        Some(wire)
    }

    fn retry(&mut self, hub_id: &RawId) -> Vec<BridgeAction> {
        let b = self.active.get_mut(hub_id).expect("tracked");
        let mut params = b.params.clone();
        let responses: Map<String, Value> = b
            .inputs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
            .collect();
        if let Some(obj) = params.as_object_mut() {
            obj.insert("inputResponses".into(), Value::Object(responses));
            match &b.state {
                Some(s) => obj.insert("requestState".into(), s.clone()),
                None => obj.remove("requestState"),
            };
        }
        self.next += 1;
        let wire = RawId::parse(&format!("\"mcpmux-retry-{}\"", self.next)).expect("valid id");
        b.wire = wire.clone();
        self.wires.insert(wire.clone(), hub_id.clone());
        let method = b.method.clone();
        vec![BridgeAction::Retry(Message::request(
            &wire,
            &method,
            Some(&params),
        ))]
    }

    fn fail(&mut self, hub_id: &RawId, c: i64, why: &str, data: Option<Value>) -> BridgeAction {
        self.forget(hub_id);
        BridgeAction::Hub {
            msg: Message::error_response(Some(hub_id), c, why, data),
            for_request: None,
        }
    }

    fn forget(&mut self, hub_id: &RawId) {
        if let Some(b) = self.active.remove(hub_id) {
            self.wires.remove(&b.wire);
        }
        self.inputs.retain(|_, (h, _)| h != hub_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Message {
        Message::parse(s.as_bytes()).unwrap()
    }

    fn input_required(id: &str, key: &str, state: &str) -> Message {
        parse(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"{key}":{{"method":"elicitation/create","params":{{"message":"ok?"}}}}}},"requestState":"{state}"}}}}"#
        ))
    }

    #[test]
    fn two_rounds_then_the_result_under_the_hubs_id() {
        let mut b = Bridges::default();
        let hub = RawId::from_u64(7);
        b.track(&hub, "tools/call", json!({"name": "t", "arguments": {}}));
        // Round 1: an input request belonging to the hub's request.
        let acts = b.on_response(&input_required("7", "q1", "s1")).unwrap();
        let BridgeAction::Hub { msg, for_request } = &acts[0] else {
            panic!("{acts:?}")
        };
        assert_eq!(for_request.as_ref(), Some(&hub));
        assert_eq!(msg.method(), Some("elicitation/create"));
        let answer = Message::response(msg.id().unwrap(), &json!({"action": "accept"}));
        let acts = b.on_answer(&answer).unwrap();
        let BridgeAction::Retry(retry) = &acts[0] else {
            panic!("{acts:?}")
        };
        let p: Value = serde_json::from_str(retry.params().unwrap().get()).unwrap();
        assert_eq!(p["requestState"], "s1");
        assert_eq!(p["inputResponses"]["q1"]["action"], "accept");
        assert_eq!(p["name"], "t");
        assert_ne!(retry.id(), Some(&hub), "a retry carries a new id");
        // What the server says on the retry's stream is the hub's request's.
        assert_eq!(b.hub_id_of(retry.id().unwrap()), Some(&hub));
        // Round 2 on the retry's id.
        let wire = retry.id().unwrap().as_json().to_owned();
        let acts = b.on_response(&input_required(&wire, "q2", "s2")).unwrap();
        let BridgeAction::Hub { msg, .. } = &acts[0] else {
            panic!()
        };
        let acts = b
            .on_answer(&Message::response(msg.id().unwrap(), &json!({"x": 1})))
            .unwrap();
        let BridgeAction::Retry(retry) = &acts[0] else {
            panic!()
        };
        let p: Value = serde_json::from_str(retry.params().unwrap().get()).unwrap();
        assert_eq!(p["requestState"], "s2");
        assert!(
            p["inputResponses"].get("q1").is_none(),
            "only this round's answers"
        );
        // Complete: the hub gets it under its own id.
        let done = parse(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","content":[]}}}}"#,
            retry.id().unwrap()
        ));
        let acts = b.on_response(&done).unwrap();
        let BridgeAction::Hub { msg, for_request } = &acts[0] else {
            panic!()
        };
        assert_eq!(msg.id(), Some(&hub));
        assert!(for_request.is_none());
        assert!(b.is_empty());
    }

    #[test]
    fn a_client_error_fails_the_request_and_rounds_are_bounded() {
        let mut b = Bridges::default();
        let hub = RawId::from_u64(1);
        b.track(&hub, "tools/call", json!({}));
        let acts = b.on_response(&input_required("1", "k", "s")).unwrap();
        let BridgeAction::Hub { msg, .. } = &acts[0] else {
            panic!()
        };
        let refusal = Message::error_response(msg.id(), -32601, "no elicitation", None);
        let acts = b.on_answer(&refusal).unwrap();
        let BridgeAction::Hub { msg, .. } = &acts[0] else {
            panic!()
        };
        assert_eq!(msg.id(), Some(&hub));
        assert!(msg.is_error());
        assert!(b.is_empty());

        b.track(&hub, "tools/call", json!({}));
        let mut wire = "1".to_owned();
        for round in 1..=MAX_ROUNDS + 1 {
            let acts = b.on_response(&input_required(&wire, "k", "s")).unwrap();
            match &acts[0] {
                BridgeAction::Hub {
                    msg,
                    for_request: Some(_),
                } => {
                    let acts = b
                        .on_answer(&Message::response(msg.id().unwrap(), &json!({})))
                        .unwrap();
                    let BridgeAction::Retry(r) = &acts[0] else {
                        panic!()
                    };
                    wire = r.id().unwrap().as_json().to_owned();
                }
                BridgeAction::Hub {
                    msg,
                    for_request: None,
                } => {
                    assert_eq!(round, MAX_ROUNDS + 1);
                    assert!(msg.is_error());
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(b.is_empty());
    }

    #[test]
    fn other_responses_pass_and_cancel_names_the_current_attempt() {
        let mut b = Bridges::default();
        let plain = parse(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
        assert!(b.on_response(&plain).is_none(), "not bridged: passed on");
        let hub = RawId::from_u64(5);
        b.track(&hub, "tools/call", json!({}));
        assert_eq!(b.cancel(&hub), Some(hub.clone()));
        assert!(
            b.on_response(&plain).is_none(),
            "cancelled: nothing to bridge"
        );
    }
}
