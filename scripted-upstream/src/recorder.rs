//! Recording of every received message: counters for the `stats` tool, and an optional
//! append-only log file (`SCRIPTED_LOG`) so tests can count across process restarts.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

/// Key under which responses (messages with an `id` and `result`/`error`) are counted.
pub const RESPONSE: &str = "<response>";
/// Key for lines that are not JSON.
pub const PARSE_ERROR: &str = "<parse_error>";
/// Key for JSON that is neither a request, a notification nor a response.
pub const INVALID: &str = "<invalid>";

#[derive(Default)]
pub struct Recorder {
    counts: BTreeMap<String, u64>,
    by_uri: BTreeMap<String, BTreeMap<String, u64>>,
    tools: BTreeMap<String, u64>,
    log: Option<File>,
}

impl Recorder {
    pub fn new(log_path: Option<&Path>) -> Self {
        let log = log_path.and_then(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| eprintln!("[scripted] cannot open SCRIPTED_LOG {path:?}: {e}"))
                .ok()
        });
        Recorder {
            log,
            ..Recorder::default()
        }
    }

    /// Appends one received line to the log file, if any (one `write` per line, so
    /// concurrent or restarted processes never interleave partial lines).
    pub fn log_line(&mut self, line: &str) {
        if let Some(file) = &mut self.log {
            let mut bytes = Vec::with_capacity(line.len() + 1);
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            if let Err(e) = file.write_all(&bytes).and_then(|()| file.flush()) {
                eprintln!("[scripted] SCRIPTED_LOG write failed: {e}");
            }
        }
    }

    pub fn count(&mut self, key: &str) {
        *self.counts.entry(key.to_owned()).or_default() += 1;
    }

    /// Counts one parsed message by method (responses as [`RESPONSE`]), by
    /// `(method, params.uri)` when it has a URI, and `tools/call` by tool name.
    pub fn record(&mut self, msg: &Value) {
        let method = msg.get("method").and_then(Value::as_str);
        let key = match method {
            Some(m) => m,
            None if msg.get("id").is_some()
                && (msg.get("result").is_some() || msg.get("error").is_some()) =>
            {
                RESPONSE
            }
            None => INVALID,
        };
        self.count(key);
        let Some(method) = method else { return };
        let params = msg.get("params");
        if let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) {
            *self
                .by_uri
                .entry(method.to_owned())
                .or_default()
                .entry(uri.to_owned())
                .or_default() += 1;
        }
        if method == "tools/call" {
            if let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) {
                *self.tools.entry(name.to_owned()).or_default() += 1;
            }
        }
    }

    /// The counter part of the `stats` output:
    /// `{counts: {method: n}, by_uri: {method: {uri: n}}, tools: {name: n}}`.
    pub fn stats(&self) -> Value {
        json!({
            "counts": self.counts,
            "by_uri": self.by_uri,
            "tools": self.tools,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_and_counts_by_uri() {
        let mut r = Recorder::default();
        r.record(&json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a"}}));
        r.record(&json!({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"a"}}));
        r.record(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        r.record(&json!({"jsonrpc":"2.0","id":"s1","result":{}}));
        r.record(&json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}));
        r.record(&json!([1, 2]));
        let s = r.stats();
        assert_eq!(s["counts"]["resources/read"], 2);
        assert_eq!(s["counts"]["notifications/initialized"], 1);
        assert_eq!(s["counts"][RESPONSE], 1);
        assert_eq!(s["counts"][INVALID], 1);
        assert_eq!(s["by_uri"]["resources/read"]["a"], 2);
        assert_eq!(s["tools"]["echo"], 1);
    }
}
