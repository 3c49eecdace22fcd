//! W3C trace context in a request's `params._meta` (`traceparent`, `tracestate`; the
//! MCP's SEP-414): read from a client's request, written into mcpmux's upstream request.
//!
//! Never: touches any other `_meta` key, or a message whose `params` is not an object.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::Value;

use crate::protocol::Message;

const KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The trace context a request carries in `params._meta`, if any.
pub fn extract(msg: &Message) -> Option<Context> {
    let params: Value = serde_json::from_str(msg.params()?.get()).ok()?;
    let meta = params.get("_meta")?.as_object()?;
    let carrier: HashMap<String, String> = KEYS
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), meta.get(*k)?.as_str()?.to_owned())))
        .collect();
    carrier
        .contains_key("traceparent")
        .then(|| TraceContextPropagator::new().extract(&carrier))
}

/// Writes `cx` as `params._meta.traceparent` (and `tracestate`) of a request, replacing
/// whatever trace context it carried.
pub fn inject(msg: &mut Message, cx: &Context) {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    if carrier.is_empty() {
        return;
    }
    let mut params = match msg.params() {
        None => Value::Object(Default::default()),
        Some(p) => match serde_json::from_str::<Value>(p.get()) {
            Ok(v @ Value::Object(_)) => v,
            _ => return,
        },
    };
    let meta = params
        .as_object_mut()
        .expect("an object")
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    for k in KEYS {
        meta.remove(k);
    }
    for (k, v) in carrier {
        meta.insert(k, Value::String(v));
    }
    msg.set_params(&params);
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt as _;

    #[test]
    fn reads_and_writes_traceparent_and_keeps_other_meta() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let msg = Message::parse(
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","_meta":{{"traceparent":"{tp}","progressToken":3}}}}}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let cx = extract(&msg).expect("a context");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        let mut out = msg.clone();
        inject(&mut out, &cx);
        let p: Value = serde_json::from_str(out.params().unwrap().get()).unwrap();
        assert_eq!(p["_meta"]["traceparent"], tp);
        assert_eq!(p["_meta"]["progressToken"], 3);
        assert_eq!(p["name"], "x");
        let none = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert!(extract(&none).is_none());
        let bad = Message::parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"traceparent":"zz"}}}"#,
        )
        .unwrap();
        let cx = extract(&bad).expect("a carrier");
        assert!(
            !cx.span().span_context().is_valid(),
            "an invalid one is no parent"
        );
    }
}
