//! The proxy cursor: `mx1.` + hex of a JSON array of `[upstream index, upstream
//! cursor]`, one entry per upstream still paging. Opaque to clients; decoded strictly
//! (never a cursor naming an upstream twice, or one that does not exist).

use serde_json::Value;

use crate::state::ids::UpstreamId;

/// Encodes the per-upstream cursors still to page into one opaque proxy cursor.
pub fn encode_cursor(parts: &[(UpstreamId, Option<String>)]) -> String {
    let v: Vec<Value> = parts
        .iter()
        .map(|(u, c)| serde_json::json!([u.0, c]))
        .collect();
    let json = Value::Array(v).to_string();
    let mut out = String::with_capacity(4 + json.len() * 2);
    out.push_str("mx1.");
    for b in json.bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Decodes a proxy cursor; `None` when it is not one of ours. One of ours names each
/// upstream at most once: a forged one naming an upstream again and again would make
/// one list request thousands of parts.
pub fn decode_cursor(cursor: &str, upstreams: usize) -> Option<Vec<(UpstreamId, Option<String>)>> {
    let hex = cursor.strip_prefix("mx1.")?;
    // Room for the upstreams' own cursors, however long they make them; a client's
    // message is bounded anyway (`limits.max_message_bytes`).
    if hex.len() % 2 != 0 || hex.len() > 2 * 1024 * 1024 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let v: Vec<(usize, Option<String>)> = serde_json::from_slice(&bytes?).ok()?;
    if v.is_empty() || v.iter().any(|(u, _)| *u >= upstreams) {
        return None;
    }
    let mut named = vec![false; upstreams];
    for (u, _) in &v {
        if std::mem::replace(&mut named[*u], true) {
            return None;
        }
    }
    Some(v.into_iter().map(|(u, c)| (UpstreamId(u), c)).collect())
}
