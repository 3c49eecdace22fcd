//! The two-face rule and routing, without I/O.

use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::upstream::RequestCtx;

fn request(id: u64, method: &str, params: Value, ctx: Option<RequestCtx>) -> UpstreamCmd {
    let msg = Message::request(&RawId::from_u64(id), method, Some(&params));
    match ctx {
        Some(c) => UpstreamCmd::Request(msg.to_bytes(), Box::new(c)),
        None => UpstreamCmd::Send(msg.to_bytes()),
    }
}

fn client(legacy: bool) -> Option<RequestCtx> {
    Some(RequestCtx {
        bridge_input: legacy,
        for_client: true,
        ..RequestCtx::default()
    })
}

fn own() -> Option<RequestCtx> {
    Some(RequestCtx::default())
}

fn parsed(cmd: &UpstreamCmd) -> Value {
    let bytes: Bytes = match cmd {
        UpstreamCmd::Send(b) | UpstreamCmd::Request(b, _) => b.clone(),
    };
    serde_json::from_slice(&bytes).unwrap()
}

fn answer(id: &Value, result: Value) -> UpstreamEvent {
    let id = RawId::parse(&id.to_string()).unwrap();
    UpstreamEvent::Message(Message::response(&id, &result), Related::Nothing)
}

fn faces_of(out: &[(Face, UpstreamCmd)]) -> Vec<Face> {
    out.iter().map(|(f, _)| *f).collect()
}

const FIXTURE_LEGACY: &str = r#"{"tools":{"listChanged":true},"prompts":{"listChanged":true},
    "resources":{"subscribe":true,"listChanged":true},"logging":{},"completions":{}}"#;

#[test]
fn the_modern_face_covers_only_when_it_offers_every_capability_and_flag() {
    let legacy: Value = serde_json::from_str(FIXTURE_LEGACY).unwrap();
    // The conformance fixture's 2026-07-28 face: no subscriptions, no logging.
    let modern = json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true},
        "resources": {}});
    assert!(!modern_covers(&modern, &legacy));
    assert!(modern_covers(&legacy, &legacy));
    let more = json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true}, "logging": {},
        "completions": {}, "experimental": {"x": {}}});
    assert!(modern_covers(&more, &legacy));
    // A flag that is false on the legacy face asks nothing of the modern one.
    assert!(modern_covers(
        &json!({"tools": {}}),
        &json!({"tools": {"listChanged": false}})
    ));
}

#[test]
fn lists_are_merged_and_calls_go_to_the_face_that_lists_the_name() {
    let legacy: Value = serde_json::from_str(FIXTURE_LEGACY).unwrap();
    let mut r = Router::new(&legacy);
    let out = r.on_command(request(7, "tools/list", json!({}), own()));
    assert_eq!(faces_of(&out), vec![Face::Legacy, Face::Modern]);
    let legacy_id = parsed(&out[0].1)["id"].clone();
    assert_ne!(legacy_id, json!(7), "the copy has an id of its own");
    assert_eq!(parsed(&out[1].1)["id"], 7);
    let l = r.on_event(
        Face::Legacy,
        answer(
            &legacy_id,
            json!({"tools": [{"name": "a"}, {"name": "shared", "d": "l"}]}),
        ),
    );
    assert!(l.is_none(), "waits for the other face");
    let merged = r.on_event(
        Face::Modern,
        answer(
            &json!(7),
            json!({"tools": [{"name": "shared", "d": "m"}, {"name": "mrtr"}],
                "resultType": "complete", "ttlMs": 5}),
        ),
    );
    let Some(UpstreamEvent::Message(m, Related::Request(id))) = merged else {
        panic!("one merged answer")
    };
    assert_eq!(id, RawId::from_u64(7));
    let v: Value = serde_json::from_slice(&m.to_bytes()).unwrap();
    assert_eq!(v["id"], 7);
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "shared", "mrtr"]);
    assert_eq!(
        v["result"]["tools"][1]["d"], "l",
        "the initialize face's item first"
    );
    assert_eq!(v["result"]["ttlMs"], 5);

    let call = |r: &mut Router, id, name: &str, legacy_client| {
        faces_of(&r.on_command(request(
            id,
            "tools/call",
            json!({"name": name}),
            client(legacy_client),
        )))
    };
    // Each client's own era first; a name only the other face lists goes there.
    assert_eq!(call(&mut r, 8, "shared", true), vec![Face::Legacy]);
    assert_eq!(call(&mut r, 9, "shared", false), vec![Face::Modern]);
    assert_eq!(call(&mut r, 10, "mrtr", true), vec![Face::Modern]);
    assert_eq!(call(&mut r, 11, "a", false), vec![Face::Legacy]);
    assert_eq!(call(&mut r, 12, "unknown", false), vec![Face::Modern]);
}

#[test]
fn subscriptions_and_own_reads_go_to_the_face_that_subscribes() {
    let legacy: Value = serde_json::from_str(FIXTURE_LEGACY).unwrap();
    let mut r = Router::new(&legacy);
    for (method, ctx) in [
        ("resources/subscribe", own()),
        ("resources/unsubscribe", own()),
        ("resources/read", own()),
        ("resources/read", client(true)),
    ] {
        let out = r.on_command(request(1, method, json!({"uri": "x://1"}), ctx));
        assert_eq!(faces_of(&out), vec![Face::Legacy], "{method}");
    }
    let out = r.on_command(request(
        2,
        "resources/read",
        json!({"uri": "x://1"}),
        client(false),
    ));
    assert_eq!(
        faces_of(&out),
        vec![Face::Modern],
        "a modern client's own read"
    );
    // Without `resources.subscribe` on the initialize face, the other face subscribes.
    let mut r = Router::new(&json!({"resources": {}}));
    let out = r.on_command(request(
        3,
        "resources/subscribe",
        json!({"uri": "x://1"}),
        own(),
    ));
    assert_eq!(faces_of(&out), vec![Face::Modern]);
}

#[test]
fn answers_go_back_to_the_face_that_asked_and_copies_are_dropped() {
    let mut r = Router::new(&json!({}));
    // A server→client request from the 2026-07-28 face (a bridged input request).
    let ask = Message::request(
        &RawId::parse("\"mcpmux-input-1\"").unwrap(),
        "elicitation/create",
        None,
    );
    assert!(r
        .on_event(Face::Modern, UpstreamEvent::Message(ask, Related::Unknown))
        .is_some());
    let reply = Message::response(&RawId::parse("\"mcpmux-input-1\"").unwrap(), &json!({}));
    let out = r.on_command(UpstreamCmd::Send(reply.to_bytes()));
    assert_eq!(faces_of(&out), vec![Face::Modern]);
    // logging/setLevel reaches both; only the initialize face's answer comes back.
    let out = r.on_command(request(
        4,
        "logging/setLevel",
        json!({"level": "debug"}),
        own(),
    ));
    assert_eq!(faces_of(&out), vec![Face::Legacy, Face::Modern]);
    let copy = parsed(&out[1].1)["id"].clone();
    assert!(r.on_event(Face::Modern, answer(&copy, json!({}))).is_none());
    assert!(r
        .on_event(Face::Legacy, answer(&json!(4), json!({})))
        .is_some());
    // A cancellation follows its request.
    r.on_command(request(
        5,
        "tools/call",
        json!({"name": "t"}),
        client(false),
    ));
    let cancel = Message::notification("notifications/cancelled", Some(&json!({"requestId": 5})));
    let out = r.on_command(UpstreamCmd::Send(cancel.to_bytes()));
    assert_eq!(faces_of(&out), vec![Face::Modern]);
}

#[test]
fn the_hub_sees_one_ready_with_both_faces_joined() {
    let mut r = Router::new(&json!({}));
    let legacy = InitInfo {
        capabilities: json!({"resources": {"subscribe": true}, "logging": {}}),
        server_info: json!({"name": "l"}),
        protocol_version: "2025-11-25".into(),
        ..InitInfo::default()
    };
    let modern = InitInfo {
        era: Era::Modern,
        capabilities: json!({"resources": {"listChanged": true}, "tools": {}}),
        protocol_version: "2026-07-28".into(),
        ..InitInfo::default()
    };
    assert!(r
        .on_event(Face::Modern, UpstreamEvent::Ready(modern))
        .is_none());
    let Some(UpstreamEvent::Ready(info)) = r.on_event(Face::Legacy, UpstreamEvent::Ready(legacy))
    else {
        panic!("ready once both are")
    };
    assert_eq!(info.era, Era::Modern);
    assert_eq!(
        info.capabilities,
        json!({"resources": {"subscribe": true, "listChanged": true}, "logging": {}, "tools": {}})
    );
    assert_eq!(info.server_info["name"], "l");
    assert!(info.dual.is_some());
}
