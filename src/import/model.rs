//! The words `mcpmux import`'s mapping and its variable translation share: how an
//! imported server is reached, what a note says about a field, the file being mapped,
//! and the text rules for values and names.
//!
//! Owns those types and two pure helpers. Never: maps an entry or reads a file.

use std::collections::BTreeMap;

use serde_json::Value;

use super::source::HostFile;

/// How mcpmux reaches one imported server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// `[servers.NAME.oauth] client_id` (from mcp-remote's static client info).
        client_id: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// A whole server was not imported.
    Skipped,
    /// A field (or part of one) was not imported.
    NotImported,
    /// Imported, but written differently (a variable, a name, a number as a string).
    Changed,
}

/// A note about one field of an entry; `key` is relative to the entry (`""` = the entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldNote {
    pub key: String,
    pub line: usize,
    pub kind: NoteKind,
    pub text: String,
}

/// What a file tells the variable translation.
pub struct Ctx<'a> {
    pub file: &'a HostFile,
}

/// A JSON string, number or boolean as text.
pub(super) fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A bare TOML key (`[A-Za-z0-9_-]+`): other characters become `-`, runs of `-` one,
/// none at either end; nothing left gives `server`.
pub fn sanitize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        "server".to_owned()
    } else {
        out.to_owned()
    }
}
