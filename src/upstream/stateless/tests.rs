//! The stateless session state machine against scripted server answers: the envelope, the era's local
//! answers, the listen's tags, a lost listen, cancellation and a version change.

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;

fn core() -> StatelessSession {
    let server_caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
    StatelessSession::new("up", json!({"sampling": {}}), &server_caps)
}

fn cmd(json: Value) -> UpstreamCmd {
    UpstreamCmd::Send(Bytes::from(json.to_string()))
}

fn msg(json: Value) -> Message {
    Message::parse(json.to_string().as_bytes()).unwrap()
}

fn value(m: &Message) -> Value {
    serde_json::from_str(&m.to_json()).unwrap()
}

/// The messages sent to the server and given to the hub, as JSON.
fn split(acts: Vec<Action>) -> (Vec<Value>, Vec<Value>, Vec<Action>) {
    let (mut sent, mut hub, mut other) = (vec![], vec![], vec![]);
    for a in acts {
        match a {
            Action::Send { msg, .. } => sent.push(value(&msg)),
            Action::Hub(m, _) => hub.push(value(&m)),
            a => other.push(a),
        }
    }
    (sent, hub, other)
}

/// Starts a core and acknowledges its first listen.
fn started() -> (StatelessSession, Instant) {
    let now = Instant::now();
    let mut c = core();
    let mut acts = vec![];
    c.start(now, &mut acts);
    let (sent, _, _) = split(acts);
    assert_eq!(sent[0]["method"], "subscriptions/listen");
    assert_eq!(
        sent[0]["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "the flags the server offers, no URIs yet"
    );
    let mut acts = vec![];
    c.on_message(ack(&sent[0]["id"], &[]), Related::Unknown, now, &mut acts);
    (c, now)
}

fn ack(id: &Value, uris: &[&str]) -> Message {
    msg(
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"resourceSubscriptions": uris},
            "_meta": {"io.modelcontextprotocol/subscriptionId": id}}}),
    )
}

#[test]
fn requests_carry_the_envelope_with_the_clients_facts() {
    let (mut c, now) = started();
    let ctx = RequestCtx {
        client_capabilities: json!({"elicitation": {"form": {}}}),
        log_level: Some("debug".into()),
        bridge_input: false,
        for_client: true,
        param_headers: vec![("region".into(), "eu".into())],
    };
    let req = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "t", "arguments": {}, "_meta": {"progressToken": 5}}});
    let mut acts = vec![];
    c.on_command(
        UpstreamCmd::Request(Bytes::from(req.to_string()), Box::new(ctx)),
        now,
        &mut acts,
    );
    let Action::Send {
        msg, param_headers, ..
    } = &acts[0]
    else {
        panic!("{acts:?}")
    };
    let m = value(msg)["params"]["_meta"].clone();
    assert_eq!(m["progressToken"], 5, "other _meta members are kept");
    assert_eq!(m["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert_eq!(
        m["io.modelcontextprotocol/clientCapabilities"],
        json!({"elicitation": {"form": {}}})
    );
    assert_eq!(m["io.modelcontextprotocol/logLevel"], "debug");
    assert_eq!(m["io.modelcontextprotocol/clientInfo"]["name"], "mcpmux");
    assert_eq!(param_headers, &vec![("region".to_owned(), "eu".to_owned())]);
    // The envelope's pass read the tool's name for the POST's `Mcp-Name`.
    assert_eq!(
        crate::protocol::stateless::mcp_name(msg).as_deref(),
        Some("t")
    );
}

#[test]
fn set_level_and_ping_are_answered_here_and_the_level_is_used_after() {
    let (mut c, now) = started();
    let mut acts = vec![];
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "warning"}})),
        now,
        &mut acts,
    );
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})),
        now,
        &mut acts,
    );
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})),
        now,
        &mut acts,
    );
    let (sent, hub, _) = split(acts);
    assert_eq!(hub.len(), 2);
    assert!(hub.iter().all(|m| m["result"] == json!({})));
    assert_eq!(
        sent.len(),
        1,
        "only tools/list reaches the server: {sent:?}"
    );
    assert_eq!(
        sent[0]["params"]["_meta"]["io.modelcontextprotocol/logLevel"],
        "warning"
    );
    assert_eq!(
        sent[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
        json!({"sampling": {}}),
        "mcpmux's own requests declare what it routes"
    );
}

#[test]
fn subscribe_is_answered_on_the_ack_and_updates_reach_the_hub_untagged() {
    let (mut c, now) = started();
    let mut acts = vec![];
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "id": 9, "method": "resources/subscribe", "params": {"uri": "a://1"}})),
        now,
        &mut acts,
    );
    let (sent, hub, _) = split(acts);
    assert!(hub.is_empty(), "not answered before the acknowledgement");
    assert_eq!(
        sent[0]["params"]["notifications"]["resourceSubscriptions"],
        json!(["a://1"])
    );
    let lid = sent[0]["id"].clone();
    let mut acts = vec![];
    c.on_message(ack(&lid, &["a://1"]), Related::Unknown, now, &mut acts);
    let (_, hub, other) = split(acts);
    assert_eq!(hub, vec![json!({"jsonrpc": "2.0", "id": 9, "result": {}})]);
    assert!(
        matches!(other.as_slice(), [Action::Stop(_)]),
        "the flags-only listen closes after the new ack: {other:?}"
    );
    let update = msg(
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
        "params": {"uri": "a://1", "_meta": {"io.modelcontextprotocol/subscriptionId": lid, "k": 1}}}),
    );
    let mut acts = vec![];
    c.on_message(update, Related::Unknown, now, &mut acts);
    let Action::Hub(m, related) = &acts[0] else {
        panic!()
    };
    assert_eq!(
        value(m)["params"],
        json!({"uri": "a://1", "_meta": {"k": 1}})
    );
    assert_eq!(related, &Related::Nothing);
}

#[test]
fn a_listen_ended_by_the_server_is_reopened_and_its_uris_reported() {
    let (mut c, now) = started();
    let mut acts = vec![];
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "id": 9, "method": "resources/subscribe", "params": {"uri": "a://1"}})),
        now,
        &mut acts,
    );
    let lid = split(acts).0[0]["id"].clone();
    c.on_message(ack(&lid, &["a://1"]), Related::Unknown, now, &mut vec![]);
    // The graceful end result.
    let end = msg(json!({"jsonrpc": "2.0", "id": lid, "result": {"resultType": "complete"}}));
    let mut acts = vec![];
    c.on_message(end, Related::Unknown, now, &mut acts);
    let (sent, hub, _) = split(acts);
    assert!(hub.is_empty(), "the end result is not a client's answer");
    assert_eq!(sent[0]["method"], "subscriptions/listen");
    let mut acts = vec![];
    c.on_message(
        ack(&sent[0]["id"], &["a://1"]),
        Related::Unknown,
        now,
        &mut acts,
    );
    let (_, hub, _) = split(acts);
    assert_eq!(hub[0]["method"], "notifications/resources/updated");
    assert_eq!(hub[0]["params"]["uri"], "a://1");
    // And a server-sent cancel of the new one does the same.
    let cancel = msg(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": sent[0]["id"]}}),
    );
    let mut acts = vec![];
    c.on_message(cancel, Related::Unknown, now, &mut acts);
    assert_eq!(split(acts).0[0]["method"], "subscriptions/listen");
}

#[test]
fn cancel_stops_the_request_and_a_version_refusal_restarts() {
    let (mut c, now) = started();
    let mut acts = vec![];
    c.on_command(
        cmd(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}})),
        now,
        &mut acts,
    );
    assert!(matches!(&acts[..], [Action::Stop(id)] if id.as_json() == "4"));
    let refusal = msg(json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32022,
        "message": "Unsupported", "data": {"supported": ["2027-01-01"]}}}));
    let mut acts = vec![];
    c.on_message(refusal, Related::Unknown, now, &mut acts);
    assert!(matches!(&acts[0], Action::Restart(why) if why.contains("2027-01-01")));
    assert!(
        matches!(&acts[1], Action::Hub(..)),
        "the request still gets its answer"
    );
}

#[test]
fn the_envelope_sets_the_eras_keys_and_keeps_the_rest_as_written() {
    let params = r#"{"name":"echo","arguments":{"t":"\u00e9",  "n":1.50},"_meta":{"progressToken":7,"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"x"}}"#;
    let caps = json!({"sampling": {}});
    let out = super::envelope_raw(Some(params), &caps, None);
    let text = out.get();
    // The arguments pass on byte for byte.
    assert!(text.contains(r#"{"t":"\u00e9",  "n":1.50}"#), "{text}");
    let v: Value = serde_json::from_str(text).unwrap();
    let m = &v["_meta"];
    assert_eq!(m["progressToken"], 7);
    assert_eq!(m["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert_eq!(m["io.modelcontextprotocol/clientCapabilities"], caps);
    assert_eq!(m["io.modelcontextprotocol/clientInfo"]["name"], "mcpmux");
    assert!(m.get("io.modelcontextprotocol/logLevel").is_none());
    // Params that are not an object, or a `_meta` that is not one, start empty.
    let v: Value =
        serde_json::from_str(super::envelope_raw(Some("[1]"), &caps, Some("info")).get()).unwrap();
    assert_eq!(v["_meta"]["io.modelcontextprotocol/logLevel"], "info");
    assert_eq!(v.as_object().unwrap().len(), 1);
    let v: Value =
        serde_json::from_str(super::envelope_raw(Some(r#"{"_meta":5}"#), &caps, None).get())
            .unwrap();
    assert!(v["_meta"].is_object());
}
