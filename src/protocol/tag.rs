//! Adds `params._meta["io.modelcontextprotocol/subscriptionId"]` to a serialized
//! notification by splicing bytes: one scan to find where `params` and its `_meta`
//! open, then a copy with the member inserted. Nothing is parsed into values or
//! re-encoded, so every other member stays byte for byte as the upstream sent it.
//!
//! Pure, no I/O. The input must be one valid JSON-RPC message object (mcpmux's own
//! serialization of a parsed [`super::Message`]); anything else is returned untouched.

use bytes::{BufMut, Bytes, BytesMut};

/// Where the object of `params` and of `params._meta` open (the index just after
/// their `{`), and where the message object closes (its final `}`).
#[derive(Debug, Default, PartialEq, Eq)]
struct Positions {
    params: Option<usize>,
    meta: Option<usize>,
    end: Option<usize>,
}

fn scan(b: &[u8]) -> Positions {
    let mut pos = Positions::default();
    // The key most recently read at each depth (1 = the message, 2 = params).
    let mut key_at: [Option<(usize, usize)>; 3] = [None; 3];
    let mut pending: Option<(usize, usize)> = None;
    let (mut depth, mut in_string, mut escaped, mut start) = (0usize, false, false, 0usize);
    let mut in_params = false;
    for (i, &c) in b.iter().enumerate() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    in_string = false;
                    pending = Some((start + 1, i));
                }
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                start = i;
            }
            b':' if depth <= 2 => key_at[depth] = pending.take(),
            b',' => pending = None,
            b'{' | b'[' => {
                let key = |d: usize| key_at[d].map(|(s, e)| &b[s..e]);
                depth += 1;
                if c == b'{' && depth == 2 && key(1) == Some(b"params") {
                    pos.params = Some(i + 1);
                    in_params = true;
                }
                if c == b'{' && depth == 3 && in_params && key(2) == Some(b"_meta") {
                    pos.meta = Some(i + 1);
                }
                if depth <= 2 {
                    key_at[depth] = None;
                }
            }
            b'}' | b']' => {
                if depth == 2 {
                    in_params = false;
                }
                if depth == 1 && c == b'}' {
                    pos.end = Some(i);
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    pos
}

/// Whether the first non-blank byte from `at` closes an object (it is empty).
fn closes_at(b: &[u8], at: usize) -> bool {
    b[at..].iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'}')
}

/// `bytes` with `params._meta[key] = value` (`value` is JSON text); `_meta` and
/// `params` are created when absent.
pub fn with_meta(bytes: &[u8], key: &str, value: &str) -> Bytes {
    let member = format!("\"{key}\":{value}");
    let p = scan(bytes);
    let mut out = BytesMut::with_capacity(bytes.len() + member.len() + 24);
    let mut splice = |at: usize, text: &str| {
        out.put_slice(&bytes[..at]);
        out.put_slice(text.as_bytes());
        out.put_slice(&bytes[at..]);
    };
    match p {
        Positions { meta: Some(at), .. } => {
            let sep = if closes_at(bytes, at) { "" } else { "," };
            splice(at, &format!("{member}{sep}"));
        }
        Positions {
            params: Some(at), ..
        } => {
            let sep = if closes_at(bytes, at) { "" } else { "," };
            splice(at, &format!("\"_meta\":{{{member}}}{sep}"));
        }
        Positions { end: Some(at), .. } => {
            splice(at, &format!(",\"params\":{{\"_meta\":{{{member}}}}}"));
        }
        _ => return Bytes::copy_from_slice(bytes),
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn tagged(input: Value) -> Value {
        let bytes = with_meta(input.to_string().as_bytes(), "k/id", "\"listen:0\"");
        serde_json::from_slice(&bytes).expect("still valid JSON")
    }

    #[test]
    fn the_tag_joins_meta_wherever_it_is() {
        let n = |params: Value| json!({"jsonrpc": "2.0", "method": "m", "params": params});
        // _meta present, with other members (kept).
        let v = tagged(n(json!({"uri": "a://b", "_meta": {"t": 5}})));
        assert_eq!(v["params"]["_meta"], json!({"t": 5, "k/id": "listen:0"}));
        assert_eq!(v["params"]["uri"], "a://b");
        // Empty _meta, no _meta, empty params, no params.
        assert_eq!(
            tagged(n(json!({"_meta": {}})))["params"]["_meta"],
            json!({"k/id": "listen:0"})
        );
        let v = tagged(n(json!({"uri": "x"})));
        assert_eq!(
            v["params"],
            json!({"uri": "x", "_meta": {"k/id": "listen:0"}})
        );
        assert_eq!(
            tagged(n(json!({})))["params"],
            json!({"_meta": {"k/id": "listen:0"}})
        );
        let v = tagged(json!({"jsonrpc": "2.0", "method": "m"}));
        assert_eq!(v["params"], json!({"_meta": {"k/id": "listen:0"}}));
    }

    #[test]
    fn lookalikes_in_strings_and_nested_objects_are_not_meta() {
        let v = tagged(json!({"jsonrpc": "2.0", "method": "m", "params": {
            "uri": "\"_meta\":{", "nested": {"_meta": {"x": 1}}, "list": [{"_meta": {}}]}}));
        assert_eq!(v["params"]["_meta"], json!({"k/id": "listen:0"}));
        assert_eq!(v["params"]["nested"]["_meta"], json!({"x": 1}));
        assert_eq!(v["params"]["uri"], "\"_meta\":{");
        assert_eq!(v["params"]["list"][0]["_meta"], json!({}));
        // A top-level member named _meta (outside params) is not params._meta.
        let v = tagged(json!({"jsonrpc": "2.0", "method": "m", "_meta": {"y": 2}, "params": {}}));
        assert_eq!(v["_meta"], json!({"y": 2}));
        assert_eq!(v["params"]["_meta"], json!({"k/id": "listen:0"}));
    }
}
