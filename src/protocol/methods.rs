//! The one list of method names mcpmux interprets, and tiny typed views of the few
//! params it acts on. Every other method and field is forwarded verbatim; keep this
//! list in sync with the hub's dispatch.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::message::Raw;

pub const INITIALIZE: &str = "initialize";
pub const INITIALIZED: &str = "notifications/initialized";
pub const PING: &str = "ping";
pub const SERVER_DISCOVER: &str = "server/discover";
pub const SUBSCRIBE: &str = "resources/subscribe";
pub const UNSUBSCRIBE: &str = "resources/unsubscribe";
pub const RESOURCES_READ: &str = "resources/read";
pub const TOOLS_CALL: &str = "tools/call";
pub const RESOURCES_UPDATED: &str = "notifications/resources/updated";
pub const CANCELLED: &str = "notifications/cancelled";
pub const PROGRESS: &str = "notifications/progress";
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
pub const LOG_MESSAGE: &str = "notifications/message";
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
pub const SAMPLING_CREATE: &str = "sampling/createMessage";
pub const ELICITATION_CREATE: &str = "elicitation/create";
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";
pub const ROOTS_LIST: &str = "roots/list";
pub const ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";

/// `{uri}` of `resources/subscribe`, `resources/unsubscribe`, `resources/read` and
/// `notifications/resources/updated`.
#[derive(Debug, Deserialize)]
pub struct UriParams {
    pub uri: String,
}

/// [`UriParams`] borrowed from the message's text (copied only when the URI has
/// escapes): for the one use that needs the URI only briefly, on every update.
#[derive(Debug, Deserialize)]
pub struct UriRef<'a> {
    #[serde(borrow)]
    pub uri: std::borrow::Cow<'a, str>,
}

/// The part of `initialize` params the proxy looks at.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub protocol_version: String,
    #[serde(default)]
    pub capabilities: serde_json::Value,
}

/// `notifications/cancelled` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    pub request_id: Option<Box<RawValue>>,
}

/// Parses `params` into a typed view; `None` when absent or of the wrong shape.
pub fn parse_params<'a, T: Deserialize<'a>>(params: Option<Raw<'a>>) -> Option<T> {
    serde_json::from_str(params?.get()).ok()
}

/// Reads `params._meta.progressToken` (string or number) as compact JSON text.
pub fn progress_token(params: Option<Raw<'_>>) -> Option<String> {
    #[derive(Deserialize)]
    struct P<'a> {
        #[serde(borrow, rename = "_meta")]
        meta: Option<Meta<'a>>,
    }
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(borrow, rename = "progressToken")]
        token: Option<&'a RawValue>,
    }
    let params = params?.get();
    // Most requests (every 2026-07-28 one has a `_meta`) name no token: the name is
    // not spelled out, and no escape could spell it. Those are not parsed.
    if !params.contains("progressToken") && !params.contains('\\') {
        return None;
    }
    let Ok(p) = serde_json::from_str::<P>(params) else {
        // A member given twice (or `_meta` of another shape): read it as servers do,
        // the last one counting, or a token the server sees would go unseen here and
        // its progress could be taken for another request's.
        let v: serde_json::Value = serde_json::from_str(params).ok()?;
        let t = v.get("_meta")?.get("progressToken")?;
        return (t.is_string() || t.is_number()).then(|| t.to_string());
    };
    let t = p.meta?.token?.get().trim();
    (t.starts_with('"') || t.parse::<f64>().is_ok()).then(|| t.to_owned())
}

/// Reads `params.progressToken` of a progress notification as a proxy-minted number.
pub fn progress_token_of_notification(params: Option<Raw<'_>>) -> Option<u64> {
    #[derive(Deserialize)]
    struct P {
        #[serde(rename = "progressToken")]
        token: serde_json::Value,
    }
    let p: P = serde_json::from_str(params?.get()).ok()?;
    p.token.as_u64()
}

/// Requests a server may receive twice with no effect beyond the first one's: what
/// mcpmux sends again when the connection broke under it before any answer began (a
/// server's keep-alive timer closing the connection the request was on its way over).
pub fn safe_to_repeat(method: &str) -> bool {
    matches!(
        method,
        PING | SERVER_DISCOVER
            | RESOURCES_READ
            | SUBSCRIBE
            | UNSUBSCRIBE
            | LOGGING_SET_LEVEL
            | "tools/list"
            | "prompts/list"
            | "prompts/get"
            | "resources/list"
            | "resources/templates/list"
            | "completion/complete"
    )
}

/// True for the list-changed notifications that every client session receives.
pub fn is_list_changed(method: &str) -> bool {
    matches!(
        method,
        TOOLS_LIST_CHANGED | PROMPTS_LIST_CHANGED | RESOURCES_LIST_CHANGED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.into()).unwrap()
    }

    #[test]
    fn progress_token_reads_strings_and_numbers() {
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(r#"{"_meta":{"progressToken":5}}"#)))),
            Some("5".into())
        );
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(r#"{"_meta":{"progressToken":"t"}}"#)))),
            Some("\"t\"".into())
        );
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(r#"{"_meta":{}}"#)))),
            None
        );
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(r#"{"_meta":{"progressToken":{}}}"#)))),
            None
        );
        assert_eq!(progress_token(None), None);
        // A member given twice: the last one counts, as in the servers' parsers.
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(
                r#"{"_meta":{"progressToken":"x","progressToken":17}}"#
            )))),
            Some("17".into())
        );
        assert_eq!(
            progress_token(Some(Raw::from(&*raw(
                r#"{"_meta":{"progressToken":"x"},"_meta":{"progressToken":"y"}}"#
            )))),
            Some("\"y\"".into())
        );
    }

    #[test]
    fn uri_params_parse() {
        let p: UriParams =
            parse_params(Some(Raw::from(&*raw(r#"{"uri":"a://b","_meta":{}}"#)))).unwrap();
        assert_eq!(p.uri, "a://b");
        assert!(parse_params::<UriParams>(Some(Raw::from(&*raw(r#"{"uri":1}"#)))).is_none());
    }
}
