//! The 2026-07-28 ("modern") era at the edge: the per-request `_meta` fields, the
//! Streamable HTTP header rules, and the era's error codes (docs/architecture.md,
//! "Both protocol eras").
//!
//! Pure: reads a parsed [`Message`] and header values, returns what the request
//! declares or why it must be refused (with the HTTP status the spec gives). Never
//! does I/O, never knows about sessions, upstreams or subscriptions.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{Message, SUPPORTED_VERSIONS};

/// The modern protocol version mcpmux speaks.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Keys of the per-request and per-message `_meta` fields.
pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

/// Error codes the modern era defines.
pub mod code {
    /// HTTP headers and body disagree, or a required header is missing (HTTP 400).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request needs a client capability it did not declare (HTTP 400).
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// The requested protocol version is not supported (HTTP 400).
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// Every version mcpmux speaks, newest first: the modern one, then the legacy ones.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(MODERN_VERSION)
        .chain(SUPPORTED_VERSIONS.iter().copied())
        .collect()
}

pub fn is_modern(version: &str) -> bool {
    version == MODERN_VERSION
}

/// What a modern request declares about itself in `params._meta`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMeta {
    pub protocol_version: Option<String>,
    pub client_capabilities: Option<Value>,
    pub log_level: Option<String>,
}

/// Reads the per-request fields of `params._meta` (absent ones are `None`).
pub fn request_meta(msg: &Message) -> RequestMeta {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "_meta", default)]
        meta: Option<serde_json::Map<String, Value>>,
    }
    let Some(m) = msg
        .params()
        .filter(|p| may_have_meta(p.get()))
        .and_then(|p| serde_json::from_str::<P>(p.get()).ok())
        .and_then(|p| p.meta)
    else {
        return RequestMeta::default();
    };
    RequestMeta {
        protocol_version: m
            .get(meta::PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .map(str::to_owned),
        client_capabilities: m.get(meta::CLIENT_CAPABILITIES).cloned(),
        log_level: m
            .get(meta::LOG_LEVEL)
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// Whether the JSON text of `params` can hold a `_meta` member: the name is spelled
/// out, or the text has an escape that could spell it. Most legacy requests have none,
/// and this skips their second parse.
pub(crate) fn may_have_meta(params: &str) -> bool {
    params.contains("_meta") || params.contains('\\')
}

/// Why a modern request is refused before it is served: the JSON-RPC error and the
/// HTTP status the spec gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub status: u16,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Rejection {
    fn new(status: u16, code: i64, message: impl Into<String>) -> Self {
        Rejection {
            status,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The error response to the request (its id, when it has one).
    pub fn to_message(&self, msg: &Message) -> Message {
        Message::error_response(msg.id(), self.code, &self.message, self.data.clone())
    }
}

/// The request metadata headers of a Streamable HTTP POST, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub protocol_version: Option<&'a str>,
    pub method: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// Methods whose `Mcp-Name` header is required, with the params member it mirrors.
pub(crate) fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The `Mcp-Name` value of a request (before header encoding): the params member its
/// method mirrors, `params.name` of `tools/call` and `prompts/get`, `params.uri` of
/// `resources/read`; `None` for other methods or when the member is missing. The one
/// rule for both sides (checking a client's header, computing one for an upstream).
/// Read once per message and kept with it: the edge checks it, the hub looks the tool
/// up by it, an upstream request carries it.
pub fn mcp_name(msg: &Message) -> Option<String> {
    msg.mcp_name_with(read_mcp_name).map(str::to_owned)
}

fn read_mcp_name(msg: &Message) -> Option<String> {
    // Only the two members are read; the rest (a call's arguments, say) is skipped
    // over, not built into a tree.
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow)]
        name: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        uri: Option<&'a serde_json::value::RawValue>,
    }
    let member = name_member(msg.method()?)?;
    let params: P<'_> = serde_json::from_str(msg.params()?.get()).ok()?;
    let raw = if member == "uri" {
        params.uri
    } else {
        params.name
    }?;
    serde_json::from_str::<String>(raw.get()).ok()
}

/// Validates a modern request's `_meta` (any transport): the version is present and
/// supported, and the client capabilities are declared.
///
/// # Errors
/// A [`Rejection`]: -32602 for a missing required field, -32022 (with the supported
/// versions) for an unsupported version; HTTP 400 for both.
pub fn validate_meta(msg: &Message) -> Result<RequestMeta, Rejection> {
    check_meta(request_meta(msg))
}

/// [`validate_meta`] on the fields already read.
fn check_meta(m: RequestMeta) -> Result<RequestMeta, Rejection> {
    let Some(version) = m.protocol_version.as_deref() else {
        return Err(Rejection::new(
            400,
            super::code::INVALID_PARAMS,
            format!("params._meta[\"{}\"] is required", meta::PROTOCOL_VERSION),
        ));
    };
    if !is_modern(version) {
        let mut r = Rejection::new(
            400,
            code::UNSUPPORTED_VERSION,
            "Unsupported protocol version",
        );
        r.data = Some(json!({"supported": supported_versions(), "requested": version}));
        return Err(r);
    }
    if !m.client_capabilities.as_ref().is_some_and(Value::is_object) {
        return Err(Rejection::new(
            400,
            super::code::INVALID_PARAMS,
            format!(
                "params._meta[\"{}\"] is required (an object; {{}} declares none)",
                meta::CLIENT_CAPABILITIES
            ),
        ));
    }
    Ok(m)
}

/// Validates a modern request received over Streamable HTTP: its headers must be
/// present and match the body (`MCP-Protocol-Version`, `Mcp-Method`, and `Mcp-Name`
/// for `tools/call`, `resources/read`, `prompts/get`), then its `_meta`.
///
/// # Errors
/// A [`Rejection`]: -32020 for a missing or mismatched header, else as
/// [`validate_meta`]; HTTP 400.
pub fn validate_http(msg: &Message, h: &Headers<'_>) -> Result<RequestMeta, Rejection> {
    let mismatch = |what: String| Rejection::new(400, code::HEADER_MISMATCH, what);
    let meta = request_meta(msg);
    match (h.protocol_version, meta.protocol_version.as_deref()) {
        (None, _) => return Err(mismatch("Header mismatch: MCP-Protocol-Version header is required".into())),
        (Some(hv), Some(bv)) if hv.trim() != bv => {
            return Err(mismatch(format!(
                "Header mismatch: MCP-Protocol-Version header value '{hv}' does not match body value '{bv}'"
            )))
        }
        _ => {}
    }
    let method = msg.method().unwrap_or_default();
    match h.method {
        None => {
            return Err(mismatch(
                "Header mismatch: Mcp-Method header is required".into(),
            ))
        }
        Some(hm) if hm.trim() != method => {
            return Err(mismatch(format!(
            "Header mismatch: Mcp-Method header value '{hm}' does not match body value '{method}'"
        )))
        }
        _ => {}
    }
    if name_member(method).is_some() {
        let body = mcp_name(msg);
        let Some(raw) = h.name else {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Name header is required for {method}"
            )));
        };
        let Some(header) = decode_header_value(raw) else {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Name header value '{raw}' is not valid"
            )));
        };
        if body.as_deref() != Some(header.as_str()) {
            return Err(mismatch(format!(
                "Header mismatch: Mcp-Name header value '{header}' does not match body value '{}'",
                body.unwrap_or_default()
            )));
        }
    }
    check_meta(meta)
}

/// Decodes a header value that may use the `=?base64?…?=` sentinel; `None` when the
/// sentinel's content is not valid Base64 or not UTF-8.
pub fn decode_header_value(value: &str) -> Option<String> {
    use base64::Engine as _;
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(value.to_owned()),
    }
}

/// Checks the `Mcp-Param-{Name}` headers of a `tools/call` against the tool's
/// `inputSchema` (its `x-mcp-header` annotations, reached through `properties` only)
/// and the call's `arguments`: every annotated parameter with a value must have its
/// header, equal after decoding (integers compared as numbers, booleans as
/// `true`/`false`); a header for an annotated parameter without a value is a mismatch
/// too. Headers no annotation names are not checked (intermediaries pass them on).
/// `headers` are (lower-case name after `mcp-param-`, raw value).
///
/// # Errors
/// The -32020 message for the first mismatch.
pub fn check_param_headers(
    input_schema: &Value,
    arguments: &Value,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut annotated = Vec::new();
    collect_annotations(input_schema, &mut Vec::new(), &mut annotated);
    for (name, path) in annotated {
        let value = path
            .iter()
            .try_fold(arguments, |v, k| v.get(k))
            .filter(|v| !v.is_null());
        let header = headers
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(&name))
            .map(|(_, v)| v.as_str());
        match (value, header) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{name} is required for argument {}",
                    path.join(".")
                ))
            }
            (None, Some(_)) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{name} was sent but argument {} has no value",
                    path.join(".")
                ))
            }
            (Some(v), Some(raw)) => {
                let Some(decoded) = decode_header_value(raw) else {
                    return Err(format!(
                        "Header mismatch: Mcp-Param-{name} value is not valid"
                    ));
                };
                let same = match v {
                    Value::String(s) => *s == decoded,
                    Value::Bool(b) => decoded == if *b { "true" } else { "false" },
                    Value::Number(n) => decoded
                        .parse::<f64>()
                        .ok()
                        .zip(n.as_f64())
                        .is_some_and(|(a, b)| a == b),
                    _ => false,
                };
                if !same {
                    return Err(format!(
                        "Header mismatch: Mcp-Param-{name} header value '{decoded}' does not match body value '{v}'"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The `Mcp-Param-{Name}` headers a client sends for a `tools/call`: one per
/// `x-mcp-header` parameter with a value (strings as they are when header-safe, else
/// `=?base64?…?=`; numbers and booleans as their JSON text). Names are lower-case.
pub fn param_headers(input_schema: &Value, arguments: &Value) -> Vec<(String, String)> {
    let mut annotated = Vec::new();
    collect_annotations(input_schema, &mut Vec::new(), &mut annotated);
    annotated
        .into_iter()
        .filter_map(|(name, path)| {
            let v = path
                .iter()
                .try_fold(arguments, |v, k| v.get(k))
                .filter(|v| !v.is_null())?;
            let text = match v {
                Value::String(s) => encode_header_value(s),
                Value::Bool(_) | Value::Number(_) => v.to_string(),
                _ => return None,
            };
            Some((name.to_ascii_lowercase(), text))
        })
        .collect()
}

/// A header value as the spec writes it: itself when it is visible ASCII without
/// surrounding spaces, else `=?base64?<Base64 of its UTF-8>?=`.
pub fn encode_header_value(s: &str) -> String {
    use base64::Engine as _;
    let safe = s.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && !s.starts_with("=?base64?");
    if safe {
        s.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
        )
    }
}

/// Whether a tool's `inputSchema` maps any argument to an `Mcp-Param-*` header (an
/// `x-mcp-header` property at any depth). A call to a tool without one needs no check
/// of its arguments against the headers.
pub fn has_param_annotations(input_schema: &Value) -> bool {
    input_schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|props| {
            props.values().any(|sub| {
                sub.get("x-mcp-header").is_some_and(Value::is_string) || has_param_annotations(sub)
            })
        })
}

/// `(x-mcp-header value, property path)` of every annotation reachable from `schema`
/// through `properties` alone.
fn collect_annotations(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<(String, Vec<String>)>,
) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, sub) in props {
        path.push(key.clone());
        if let Some(h) = sub.get("x-mcp-header").and_then(Value::as_str) {
            out.push((h.to_owned(), path.clone()));
        }
        collect_annotations(sub, path, out);
        path.pop();
    }
}

/// Why a modern request for `method` gets -32601 (HTTP 404): the method does not exist
/// in the era. Checked by each edge (HTTP and stdio) before the request reaches the hub.
pub fn legacy_only_refusal(method: &str) -> Option<String> {
    legacy_only(method).then(|| {
        format!("Method not found: {method} does not exist in protocol version {MODERN_VERSION}")
    })
}

/// Methods that do not exist in the modern era (their work is done per request or by
/// `subscriptions/listen`): a modern request for one gets -32601 (HTTP 404).
pub fn legacy_only(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "logging/setLevel"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "notifications/initialized"
            | "notifications/roots/list_changed"
    )
}

#[cfg(test)]
#[path = "stateless_tests.rs"]
mod tests;
