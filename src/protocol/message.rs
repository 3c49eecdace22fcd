//! JSON-RPC 2.0 envelopes that stay transparent.
//!
//! A [`Message`] keeps every top-level member of the object it was parsed from, in
//! order, each as raw JSON text. The proxy reads only what it routes on (`id`,
//! `method`, and through [`crate::protocol::methods`] a few typed params) and forwards
//! everything else byte for byte. Rewriting an id replaces one member's raw text.
//!
//! A parsed message holds one copy of its text; its members are spans of it, read as
//! [`Raw`] (parsing allocates the text and the list of members, not a copy of each
//! member, nor of the names the protocol defines, nor of a method without escapes).
//! A member set afterwards holds its own text (docs/architecture.md, "Fan-out").
//!
//! This module never does I/O and never knows about sessions or subscriptions.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::members::Members;

/// JSON-RPC error codes used by the proxy.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Resource not found (legacy era; 2026-07-28 uses -32602).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// Implementation-defined: the upstream that would serve this is not available.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32000;
    /// Implementation-defined (matches the TS SDK's RequestTimeout).
    pub const REQUEST_TIMEOUT: i64 = -32001;
    /// Implementation-defined: a configured limit was hit.
    pub const LIMIT_EXCEEDED: i64 = -32005;
}

/// What kind of JSON-RPC message this is, decided once at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// Why a JSON value is not a valid JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON at all (maps to -32700).
    #[error("parse error: {0}")]
    Json(String),
    /// JSON, but not a JSON-RPC 2.0 message (maps to -32600).
    #[error("invalid request: {0}")]
    Invalid(&'static str),
}

impl ParseError {
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Json(_) => code::PARSE_ERROR,
            ParseError::Invalid(_) => code::INVALID_REQUEST,
        }
    }
}

/// A JSON-RPC id, kept as its compact JSON text (`1`, `"abc"`), so it can be used as a
/// map key and written back exactly as the peer sent it. Shared (`Arc`): an id travels
/// with every message that belongs to its request (a listen's updates, say), so a clone
/// must not allocate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawId(std::sync::Arc<str>);

impl RawId {
    pub fn from_u64(n: u64) -> Self {
        RawId(n.to_string().into())
    }
    pub fn as_json(&self) -> &str {
        &self.0
    }
    /// The numeric value when the id is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }
    /// Reads an id from raw JSON text; `None` unless it is a string or a number.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let ok = text.starts_with('"') || serde_json::from_str::<serde_json::Number>(text).is_ok();
        ok.then(|| RawId(text.into()))
    }
}

impl fmt::Display for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One JSON-RPC message with all its members kept raw.
#[derive(Debug, Clone)]
pub struct Message {
    kind: Kind,
    members: Vec<(Key, Member)>,
    id: Option<RawId>,
    method: Option<Member>,
    /// The text a parsed message was read from: its members point into it, and while
    /// `unchanged`, [`Message::to_bytes`] gives it back as it came (a message passed
    /// through untouched is not serialized again).
    src: Option<Arc<str>>,
    unchanged: bool,
    /// The request's `Mcp-Name` value, once read ([`Message::mcp_name_with`]); reset
    /// when `params` changes.
    name: std::sync::OnceLock<Option<Box<str>>>,
}

/// A member's text: a span of the message's `src` (parsing copies nothing per member),
/// or its own (built, or set after parsing).
#[derive(Debug, Clone)]
enum Member {
    At(usize, usize),
    Own(Box<str>),
}

/// A member's raw JSON text, borrowed from its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The JSON text.
    pub fn get(&self) -> &'a str {
        self.0
    }

    /// An owned copy, as serde_json's raw value.
    #[must_use]
    pub fn to_raw_value(&self) -> Box<RawValue> {
        RawValue::from_string(self.0.to_owned()).expect("a message member is valid JSON")
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Raw<'a> {
        Raw(raw.get())
    }
}

/// A member name. The six JSON-RPC names are shared statics, so parsing a message
/// allocates only for names of other members.
type Key = Cow<'static, str>;

/// [`Key`] for `name`.
fn key(name: &str) -> Key {
    const KNOWN: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];
    match KNOWN.iter().find(|k| **k == name) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(name.to_owned()),
    }
}

/// The top-level members of a JSON object, each kept as its text (sorted by name, as a
/// `serde_json::Value` object writes them): read and rewrite one level of a message
/// part without parsing what lies below.
pub type RawMembers = std::collections::BTreeMap<String, Box<RawValue>>;

/// `v` as JSON text.
#[must_use]
pub fn raw_json(v: &serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("a JSON value encodes")
}

/// The members of a parsed object, or why the text is no JSON-RPC message.
fn members_of(parsed: Result<Members<'_>, serde_json::Error>) -> Result<Members<'_>, ParseError> {
    match parsed {
        Ok(m) => Ok(m),
        // Valid JSON of the wrong shape (array, string, duplicate member...).
        Err(e) if e.is_data() => Err(ParseError::Invalid(
            "a JSON-RPC message must be a JSON object",
        )),
        Err(e) => Err(ParseError::Json(e.to_string())),
    }
}

/// A parsed POST body or stdio line: one message or (2025-03-26) a batch.
#[derive(Debug)]
pub enum Incoming {
    Single(Result<Message, ParseError>),
    Batch(Vec<Result<Message, ParseError>>),
}

impl Incoming {
    /// Parses bytes that may hold a single message or a batch array.
    pub fn parse(bytes: &[u8]) -> Result<Incoming, ParseError> {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            let items: Vec<Box<RawValue>> =
                serde_json::from_slice(bytes).map_err(|e| ParseError::Json(e.to_string()))?;
            if items.is_empty() {
                return Err(ParseError::Invalid("empty batch"));
            }
            Ok(Incoming::Batch(
                items
                    .iter()
                    .map(|raw| Message::parse(raw.get().as_bytes()))
                    .collect(),
            ))
        } else {
            // Distinguish "not JSON" from "JSON but not a message".
            Ok(Incoming::Single(Message::parse(bytes)))
        }
    }
}

impl Message {
    /// Parses one JSON-RPC message. Non-object JSON and objects that are not
    /// well-formed JSON-RPC 2.0 give [`ParseError::Invalid`]; invalid JSON gives
    /// [`ParseError::Json`].
    pub fn parse(bytes: &[u8]) -> Result<Message, ParseError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::parse_text(text, false),
            // JSON text is UTF-8: serde_json says where it is not.
            Err(_) => match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(e) => Err(ParseError::Json(e.to_string())),
                Ok(_) => Err(ParseError::Json("invalid UTF-8 in a string".into())),
            },
        }
    }

    /// The id of a message that failed validation, when it can still be read, so the
    /// error response can carry it (JSON-RPC: `id` is null only when unreadable).
    pub fn salvage_id(bytes: &[u8]) -> Option<RawId> {
        let text = std::str::from_utf8(bytes).ok()?;
        let members = serde_json::from_str::<Members>(text).ok()?.0;
        let (_, raw) = members.iter().find(|(k, _)| k == "id")?;
        RawId::parse(raw.get())
    }

    /// [`Message::parse`] of one line of text (a stdio peer's), kept to be forwarded
    /// as it came (trimmed) while unchanged.
    /// The line's text is kept itself (not copied) unless it had to be trimmed.
    pub fn parse_line(line: Arc<str>) -> Result<Message, ParseError> {
        if line.trim().len() == line.len() {
            Self::parse_shared(line, true)
        } else {
            Self::parse_text(line.trim(), true)
        }
    }

    /// Parses `text`, keeping one copy of it that the members point into; `as_sent`:
    /// [`Message::to_bytes`] gives the text back while nothing changes.
    fn parse_text(text: &str, as_sent: bool) -> Result<Message, ParseError> {
        Self::parse_shared(text.into(), as_sent)
    }

    /// [`Message::parse_text`] of a text already shared.
    fn parse_shared(src: Arc<str>, as_sent: bool) -> Result<Message, ParseError> {
        let text: &str = &src;
        let members = members_of(serde_json::from_str::<Members>(text))?.0;
        let base = text.as_ptr() as usize;
        // Where a member's text sits in `text`: raw values are borrowed from it.
        let span = |raw: &RawValue| {
            let start = raw.get().as_ptr() as usize - base;
            Member::At(start, start + raw.get().len())
        };
        let method = match members.iter().find(|(k, _)| k == "method") {
            None => None,
            Some((_, raw)) => Some(method_text(raw, span(raw))?),
        };
        let members: Vec<(Key, Member)> = members
            .iter()
            .map(|(name, raw)| (key(name), span(raw)))
            .collect();
        let mut m = Self::from_members(members, method, Some(src))?;
        m.unchanged = as_sent;
        Ok(m)
    }

    fn from_members(
        members: Vec<(Key, Member)>,
        method: Option<Member>,
        src: Option<Arc<str>>,
    ) -> Result<Message, ParseError> {
        let get = |name: &str| {
            members
                .iter()
                .find(|(k, _)| &**k == name)
                .map(|(_, v)| member_text(src.as_deref(), v))
        };
        if get("jsonrpc") != Some("\"2.0\"") {
            return Err(ParseError::Invalid("`jsonrpc` must be \"2.0\""));
        }
        let id = match get("id") {
            None => None,
            Some(raw) => Some(
                RawId::parse(raw)
                    .ok_or(ParseError::Invalid("`id` must be a string or a number"))?,
            ),
        };
        let has_result = get("result").is_some();
        let has_error = get("error").is_some();
        if let Some(p) = get("params") {
            let t = p.trim_start();
            if !(t.starts_with('{') || t.starts_with('[')) {
                return Err(ParseError::Invalid(
                    "`params` must be an object or an array",
                ));
            }
        }
        let kind = match (&method, &id, has_result, has_error) {
            (Some(_), Some(_), false, false) => Kind::Request,
            (Some(_), None, false, false) => Kind::Notification,
            (None, Some(_), true, false) | (None, Some(_), false, true) => Kind::Response,
            (None, None, false, true) => Kind::Response, // error for an unreadable id
            _ => {
                return Err(ParseError::Invalid(
                    "not a request, notification or response",
                ))
            }
        };
        Ok(Message {
            kind,
            members,
            id,
            method,
            src,
            unchanged: false,
            name: std::sync::OnceLock::new(),
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
    pub fn id(&self) -> Option<&RawId> {
        self.id.as_ref()
    }
    pub fn method(&self) -> Option<&str> {
        self.method.as_ref().map(|m| self.text(m))
    }
    /// Raw JSON of a top-level member.
    pub fn member(&self, name: &str) -> Option<Raw<'_>> {
        self.members
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| Raw(self.text(v)))
    }
    pub fn params(&self) -> Option<Raw<'_>> {
        self.member("params")
    }
    pub fn result(&self) -> Option<Raw<'_>> {
        self.member("result")
    }
    pub fn error(&self) -> Option<Raw<'_>> {
        self.member("error")
    }
    pub fn is_error(&self) -> bool {
        self.kind == Kind::Response && self.member("error").is_some()
    }

    fn text<'a>(&'a self, m: &'a Member) -> &'a str {
        member_text(self.src.as_deref(), m)
    }

    /// Replaces (or adds) a member with raw JSON text.
    pub fn set_member(&mut self, name: &str, raw: Box<RawValue>) {
        if name == "id" {
            self.id = RawId::parse(raw.get());
        }
        self.put(name, Member::Own(Box::<str>::from(raw)));
    }

    fn put(&mut self, name: &str, value: Member) {
        self.unchanged = false;
        if name == "params" {
            self.name = std::sync::OnceLock::new();
        }
        match self.members.iter_mut().find(|(k, _)| &**k == name) {
            Some(slot) => slot.1 = value,
            None => self.members.push((key(name), value)),
        }
    }

    /// Replaces the id with another raw id.
    pub fn set_id(&mut self, id: &RawId) {
        self.id = Some(id.clone());
        self.put("id", Member::Own(id.as_json().into()));
    }

    /// Replaces `params` with a new JSON value.
    pub fn set_params(&mut self, params: &serde_json::Value) {
        let raw = serde_json::to_string(params).expect("a Value always serializes");
        self.put("params", Member::Own(raw.into()));
    }

    /// The request's `Mcp-Name` value: read by `read` the first time it is asked for,
    /// then kept with the message (the edge, the hub and routing each need it).
    pub(crate) fn mcp_name_with(&self, read: impl FnOnce(&Self) -> Option<String>) -> Option<&str> {
        self.name
            .get_or_init(|| read(self).map(String::into_boxed_str))
            .as_deref()
    }

    /// Sets `params` to JSON text the caller built (and vouches for: it is not checked
    /// again).
    pub(crate) fn set_params_text(&mut self, text: String) {
        self.set_member_text("params", text);
    }

    /// Sets member `name` (not `id`) to JSON text the caller built (and vouches for: it
    /// is not checked again).
    pub(crate) fn set_member_text(&mut self, name: &str, text: String) {
        debug_assert!(name != "id", "an id is set with set_id");
        self.put(name, Member::Own(text.into()));
    }

    /// Compact JSON text of the whole message, members in their original order.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(
            2 + self
                .members
                .iter()
                .map(|(k, v)| k.len() + self.text(v).len() + 4)
                .sum::<usize>(),
        );
        out.push('{');
        for (i, (k, v)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // Keys came from valid JSON and were unescaped: re-escaped.
            super::push_key(&mut out, k);
            out.push(':');
            out.push_str(self.text(v));
        }
        out.push('}');
        out
    }

    pub fn to_bytes(&self) -> Bytes {
        match &self.src {
            Some(src) if self.unchanged => Bytes::from_owner(Text(src.clone())),
            _ => Bytes::from(self.to_json()),
        }
    }

    /// Builds a request.
    pub fn request(id: &RawId, method: &str, params: Option<&serde_json::Value>) -> Message {
        let mut m = Self::build(Kind::Request, Some(id), &[("method", json_string(method))]);
        m.method = Some(Member::Own(method.into()));
        if let Some(p) = params {
            m.set_params(p);
        }
        m
    }

    /// Builds a notification.
    pub fn notification(method: &str, params: Option<&serde_json::Value>) -> Message {
        let mut m = Self::build(Kind::Notification, None, &[("method", json_string(method))]);
        m.method = Some(Member::Own(method.into()));
        if let Some(p) = params {
            m.set_params(p);
        }
        m
    }

    /// Builds a success response carrying `result`.
    pub fn response(id: &RawId, result: &serde_json::Value) -> Message {
        let raw = serde_json::value::to_raw_value(result).expect("a Value always serializes");
        Self::response_raw(id, raw)
    }

    /// Builds a success response from raw result JSON.
    pub fn response_raw(id: &RawId, result: Box<RawValue>) -> Message {
        let mut m = Self::build(Kind::Response, Some(id), &[]);
        m.members
            .push(("result".into(), Member::Own(Box::<str>::from(result))));
        m
    }

    /// Builds an error response. `id` is `None` only when the request's id could not be
    /// read (it is then written as `null`).
    pub fn error_response(
        id: Option<&RawId>,
        code: i64,
        message: &str,
        data: Option<serde_json::Value>,
    ) -> Message {
        let mut err = serde_json::Map::new();
        err.insert("code".into(), code.into());
        err.insert("message".into(), message.into());
        if let Some(d) = data {
            err.insert("data".into(), d);
        }
        let mut m = Self::build(Kind::Response, id, &[]);
        if id.is_none() {
            m.members.push(("id".into(), Member::Own("null".into())));
        }
        let err = serde_json::to_string(&err).expect("a Map always serializes");
        m.members.push(("error".into(), Member::Own(err.into())));
        m
    }

    fn build(kind: Kind, id: Option<&RawId>, rest: &[(&str, String)]) -> Message {
        let mut members: Vec<(Key, Member)> = Vec::with_capacity(2 + rest.len());
        members.push(("jsonrpc".into(), Member::Own("\"2.0\"".into())));
        if let Some(id) = id {
            members.push(("id".into(), Member::Own(id.as_json().into())));
        }
        for (k, v) in rest {
            members.push((key(k), Member::Own(v.as_str().into())));
        }
        Message {
            kind,
            members,
            id: id.cloned(),
            method: None,
            src: None,
            unchanged: false,
            name: std::sync::OnceLock::new(),
        }
    }
}

/// The text of `m`, a member of a message whose text is `src`.
fn member_text<'a>(src: Option<&'a str>, m: &'a Member) -> &'a str {
    match m {
        Member::At(start, end) => &src.expect("a parsed member points into its text")[*start..*end],
        Member::Own(text) => text,
    }
}

/// The method's name: the span inside the quotes when it holds no escape (nearly
/// always), else unescaped into its own text.
fn method_text(raw: &RawValue, span: Member) -> Result<Member, ParseError> {
    const NOT_STRING: ParseError = ParseError::Invalid("`method` must be a string");
    let text = raw.get();
    if !text.starts_with('"') {
        return Err(NOT_STRING);
    }
    match span {
        Member::At(start, end) if !text.contains('\\') => Ok(Member::At(start + 1, end - 1)),
        _ => serde_json::from_str::<String>(text)
            .map(|m| Member::Own(m.into()))
            .map_err(|_| NOT_STRING),
    }
}

/// A message's text, lent to `Bytes` without a copy.
struct Text(Arc<str>);

impl AsRef<[u8]> for Text {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
