//! The era's `_meta` envelope of a request to a 2026-07-28 upstream
//! (docs/architecture.md, "Upstreams of both eras"): `protocolVersion`,
//! `clientCapabilities`, `clientInfo` and `logLevel` set in `params._meta`.
//!
//! Owns: writing that envelope as text. Only the top level of `params` and of its
//! `_meta` is read; every other member passes on as the client wrote it (numbers beyond
//! `f64`, escapes, spacing inside a value), in the client's order.
//! Never: parses below those two levels, or changes a member that is not the era's.

use std::sync::LazyLock;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::protocol::message::{raw_json, RawMembers};
use crate::protocol::stateless::{meta, MODERN_VERSION};
use crate::protocol::{object_members, push_key};

/// `params` (text; a non-object counts as `{}`) with the era's keys set in its `_meta`
/// (a `_meta` that is not an object is replaced), every other member of both kept as
/// its text.
pub(crate) fn envelope_raw(
    params: Option<&str>,
    capabilities: &Value,
    log_level: Option<&str>,
) -> Box<RawValue> {
    RawValue::from_string(envelope_text(params, capabilities, log_level, None).0)
        .expect("the envelope is JSON text")
}

/// [`envelope_raw`] as text. The usual params (an object whose `_meta`, if any, is an
/// object, no member named twice) are written in one pass, in their order, with
/// `_meta` last; any other input goes through a map of the members (sorted; the last
/// of a name kept), as the era's rule for the odd case is only that it become an
/// object.
///
/// With `name_member` (the member a request's `Mcp-Name` mirrors), also that member
/// as a string, read on the way: `Some(value)` when the one pass read the params;
/// `None` without `name_member`, or when the map did (nothing was read for it).
pub(crate) fn envelope_text(
    params: Option<&str>,
    capabilities: &Value,
    log_level: Option<&str>,
    name_member: Option<&str>,
) -> (String, Option<Option<String>>) {
    let top = match params {
        None => Some(Vec::new()),
        Some(t) => object_members(t),
    };
    let Some(top) = top else {
        return (by_map(params, capabilities, log_level), None);
    };
    let inner = match top.iter().find(|(k, _)| k == "_meta") {
        None => Some(Vec::new()),
        Some((_, m)) => object_members(m.get()),
    };
    let Some(inner) = inner else {
        return (by_map(params, capabilities, log_level), None);
    };
    let name = name_member.map(|n| {
        top.iter()
            .find(|(k, _)| k == n)
            .and_then(|(_, v)| serde_json::from_str::<String>(v.get()).ok())
    });
    let mut out = String::with_capacity(params.map_or(0, str::len) + 192);
    out.push('{');
    for (k, v) in top.iter().filter(|(k, _)| k != "_meta") {
        push_key(&mut out, k);
        out.push(':');
        out.push_str(v.get());
        out.push(',');
    }
    out.push_str("\"_meta\":{");
    for (k, v) in inner.iter().filter(|(k, _)| !is_eras(k)) {
        push_key(&mut out, k);
        out.push(':');
        out.push_str(v.get());
        out.push(',');
    }
    out.push_str(&ERA_KEYS);
    out.push_str(&capabilities.to_string());
    if let Some(l) = log_level {
        out.push(',');
        push_key(&mut out, meta::LOG_LEVEL);
        out.push(':');
        push_key(&mut out, l);
    }
    out.push_str("}}");
    (out, name)
}

/// The era's constant keys of `_meta`, and the name of the one that follows them
/// (`clientCapabilities`, whose value is the request's).
static ERA_KEYS: LazyLock<String> = LazyLock::new(|| {
    let mut out = String::new();
    push_key(&mut out, meta::PROTOCOL_VERSION);
    out.push(':');
    push_key(&mut out, MODERN_VERSION);
    out.push(',');
    push_key(&mut out, meta::CLIENT_INFO);
    out.push(':');
    let info = json!({"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")});
    out.push_str(&info.to_string());
    out.push(',');
    push_key(&mut out, meta::CLIENT_CAPABILITIES);
    out.push(':');
    out
});

/// A key of `_meta` that the envelope sets (or, for `logLevel`, removes when unset).
fn is_eras(key: &str) -> bool {
    [
        meta::PROTOCOL_VERSION,
        meta::CLIENT_CAPABILITIES,
        meta::CLIENT_INFO,
        meta::LOG_LEVEL,
    ]
    .contains(&key)
}

/// The envelope through a map of the members: params that are no object, a `_meta`
/// that is none, or a name given twice.
fn by_map(params: Option<&str>, capabilities: &Value, log_level: Option<&str>) -> String {
    let members = |text: Option<&str>| {
        text.and_then(|t| serde_json::from_str::<RawMembers>(t).ok())
            .unwrap_or_default()
    };
    let mut params = members(params);
    let mut m = members(params.get("_meta").map(|r| r.get()));
    m.insert(
        meta::PROTOCOL_VERSION.into(),
        raw_json(&json!(MODERN_VERSION)),
    );
    m.insert(meta::CLIENT_CAPABILITIES.into(), raw_json(capabilities));
    m.insert(
        meta::CLIENT_INFO.into(),
        raw_json(&json!({"name": "mcpmux", "version": env!("CARGO_PKG_VERSION")})),
    );
    match log_level {
        Some(l) => m.insert(meta::LOG_LEVEL.into(), raw_json(&json!(l))),
        None => m.remove(meta::LOG_LEVEL),
    };
    params.insert(
        "_meta".into(),
        serde_json::value::to_raw_value(&m).expect("encodes"),
    );
    serde_json::to_string(&params).expect("encodes")
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::envelope_text;

    fn parsed(params: Option<&str>, level: Option<&str>) -> Value {
        serde_json::from_str(&envelope_text(params, &json!({"sampling": {}}), level, None).0)
            .unwrap()
    }

    #[test]
    fn one_pass_keeps_the_clients_order_and_text_and_replaces_the_eras_keys() {
        let params = r#"{"name":"echo","arguments":{"n":1.50, "t":"\u00e9"},"_meta":{"progressToken":7,"io.modelcontextprotocol/logLevel":"debug","io.modelcontextprotocol/protocolVersion":"x"},"z":[1]}"#;
        let (text, name) = envelope_text(Some(params), &json!({}), Some("info"), Some("name"));
        assert_eq!(name, Some(Some("echo".to_owned())));
        assert!(
            text.starts_with(r#"{"name":"echo","arguments":{"n":1.50, "t":"\u00e9"},"z":[1],"_meta":{"progressToken":7,"#),
            "{text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        let m = v["_meta"].as_object().unwrap();
        assert_eq!(m.len(), 5, "{text}");
        assert_eq!(m["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert_eq!(m["io.modelcontextprotocol/logLevel"], "info");
        assert_eq!(m["io.modelcontextprotocol/clientInfo"]["name"], "mcpmux");
    }

    #[test]
    fn escaped_names_are_written_escaped_again() {
        let v = parsed(Some(r#"{"a\"b":1,"_meta":{"\u0041":2}}"#), None);
        assert_eq!(v["a\"b"], 1);
        assert_eq!(v["_meta"]["A"], 2);
    }

    #[test]
    fn odd_params_still_become_an_object_with_the_envelope() {
        for odd in [
            "[1]",
            "5",
            r#"{"_meta":5}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"_meta":{"k":1,"k":2}}"#,
        ] {
            let v = parsed(Some(odd), Some("debug"));
            assert_eq!(
                v["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
                "{odd}"
            );
            assert_eq!(
                v["_meta"]["io.modelcontextprotocol/logLevel"], "debug",
                "{odd}"
            );
        }
        // The last of a name given twice is kept, as a JSON object reader would.
        assert_eq!(parsed(Some(r#"{"a":1,"a":2}"#), None)["a"], 2);
        assert_eq!(parsed(None, None).as_object().unwrap().len(), 1);
    }
}
