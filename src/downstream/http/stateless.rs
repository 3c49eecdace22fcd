//! A 2026-07-28 request over Streamable HTTP (docs/architecture.md, "Both protocol
//! eras"): no session, everything the request needs is in it.
//!
//! Owns: the era's HTTP rules for a POST (header/body validation with the spec's
//! statuses, 404 for methods the era does not have, 202 for notifications), the
//! request's short-lived client (admitted with what its `_meta` declared, closed when
//! the request ends), and its answer: one JSON object, or an SSE stream carrying the
//! request's own notifications and then its response — or, for
//! `subscriptions/listen`, the stream's notifications until either side ends it.
//! Closing the stream (or dropping the POST) ends the client, which cancels its
//! request upstream and releases what a listen held.
//! Never: keeps state between requests, resumes a stream (`Last-Event-ID` has no
//! meaning in this era), or sends a server→client request.

use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::guard::Accepts;
use super::request_stream::{Request, RequestStream};
use super::{handed_off, header_str, json_response, sse_response_with, App, TRANSPORT_ERROR};
use crate::downstream::link::{ClientKind, ClientLink};
use crate::downstream::outbox::{OutKind, Outbox};
use crate::protocol::methods::{self, progress_token};
use crate::protocol::shape;
use crate::protocol::stateless::{self, Headers};
use crate::protocol::{code, Kind, Message, RawId};
use crate::state::ids::ClientId;

const MCP_METHOD: header::HeaderName = header::HeaderName::from_static("mcp-method");
const MCP_NAME: header::HeaderName = header::HeaderName::from_static("mcp-name");

/// Whether a POST without a session is a modern request: its `MCP-Protocol-Version`
/// header names 2026-07-28, or its body carries the era's `_meta` protocol version
/// (any value: an unknown one gets -32022 with the versions mcpmux speaks).
pub(super) fn is_modern_post(header_version: Option<&str>, msg: &Message) -> bool {
    header_version.is_some_and(|v| stateless::is_modern(v.trim()))
        || (msg.method() != Some(methods::INITIALIZE)
            && stateless::request_meta(msg).protocol_version.is_some())
}

/// Serves one modern POST.
pub(super) async fn handle(
    app: Arc<App>,
    msg: Message,
    headers: &HeaderMap,
    accepts: Accepts,
    view: crate::state::ids::ViewId,
) -> Response {
    match msg.kind() {
        // This revision defines no client notification over HTTP (closing a stream is
        // the cancellation); accepted and ignored, as the transport rules say.
        Kind::Notification => return StatusCode::ACCEPTED.into_response(),
        Kind::Response => {
            return super::error(
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                "clients must not send JSON-RPC responses in protocol version 2026-07-28",
            )
        }
        Kind::Request => {}
    }
    let h = Headers {
        protocol_version: header_str(headers, &super::PROTOCOL_VERSION),
        method: header_str(headers, &MCP_METHOD),
        name: header_str(headers, &MCP_NAME),
    };
    let meta = match stateless::validate_http(&msg, &h) {
        Ok(m) => m,
        Err(r) => {
            let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
            return json_response(status, r.to_message(&msg).to_bytes());
        }
    };
    let method = msg.method().unwrap_or_default().to_owned();
    if let Some(why) = stateless::legacy_only_refusal(&method) {
        let m = Message::error_response(msg.id(), code::METHOD_NOT_FOUND, &why, None);
        return json_response(StatusCode::NOT_FOUND, m.to_bytes());
    }
    let id = msg.id().cloned().expect("a request");
    let read_uri = shape::read_uri(&msg);
    let outbox = Outbox::for_transport(app.settings.client_queue, "http");
    let kind = ClientKind::Stateless {
        capabilities: meta.client_capabilities.unwrap_or_default(),
        log_level: meta.log_level.clone(),
        shared_outbox: None,
        param_headers: Some(param_headers(headers)),
    };
    let listen = method == methods::SUBSCRIPTIONS_LISTEN;
    if listen && !accepts.sse {
        // A listen is answered by its stream alone: as JSON it would wait for ever.
        return super::error(
            StatusCode::NOT_ACCEPTABLE,
            TRANSPORT_ERROR,
            "not acceptable: subscriptions/listen answers with an event stream: Accept must allow text/event-stream",
        );
    }
    let sse = accepts.sse
        && (listen
            || progress_token(msg.params()).is_some()
            || meta.log_level.is_some()
            || !accepts.json);
    // Admission and the request go to the hub together: one wait, not two.
    let client = match app.hub.open_with(outbox.clone(), kind, view, msg).await {
        Ok(c) => c,
        Err(e) => {
            return super::error(
                StatusCode::SERVICE_UNAVAILABLE,
                TRANSPORT_ERROR,
                &e.to_string(),
            )
        }
    };
    let mut guard = CloseOnDrop {
        link: Some(app.hub.clone()),
        client,
    };
    if sse {
        let link = guard.link.take().expect("set above");
        let request = Request {
            id,
            read_uri,
            listen,
        };
        let body = RequestStream::new(outbox, link, client, request, app.shutdown.clone());
        let resp = sse_response_with(axum::body::Body::new(body));
        // A listen streams until one side ends it; other answers end with their
        // response and keep their connection.
        return if listen { handed_off(resp) } else { resp };
    }
    // JSON: wait here for the response; if the client goes away first, the guard
    // ends the request's client (cancelling it upstream).
    let answer = answer(&outbox, &id, read_uri.as_deref()).await;
    // Not awaited: this future may be dropped at any await (the client went away),
    // and the link is already out of the guard.
    if let Some(link) = guard.link.take() {
        link.client_closed_now(client, "answered");
    }
    match answer {
        Some(bytes) => {
            let status = match error_code(&bytes) {
                Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
                // The era's errors about the request itself, from mcpmux or passed on
                // from a 2026-07-28 upstream.
                Some(
                    stateless::code::HEADER_MISMATCH
                    | stateless::code::MISSING_CAPABILITY
                    | stateless::code::UNSUPPORTED_VERSION,
                ) => StatusCode::BAD_REQUEST,
                _ => StatusCode::OK,
            };
            json_response(status, bytes)
        }
        None => {
            let m = Message::error_response(
                Some(&id),
                code::INTERNAL_ERROR,
                "no response: the request was cancelled or mcpmux is shutting down",
                None,
            );
            json_response(StatusCode::OK, m.to_bytes())
        }
    }
}

/// The request's `Mcp-Param-{Name}` headers: (lower-case name, value).
fn param_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            let name = k.as_str().strip_prefix("mcp-param-")?;
            Some((name.to_owned(), v.to_str().ok()?.to_owned()))
        })
        .collect()
}

/// Waits for the response to `id` on the request's outbox (other messages have no
/// stream to go to in a JSON answer and are dropped), in the era's shape. `None` when
/// the outbox closes.
async fn answer(outbox: &Outbox, id: &RawId, read_uri: Option<&str>) -> Option<bytes::Bytes> {
    let mut batch = Vec::new();
    loop {
        outbox.drain(&mut batch).ok()?;
        for o in batch.drain(..) {
            if o.kind == OutKind::Response && o.related.as_ref() == Some(id) {
                let hints = o.hints;
                return Some(match o.into_parsed() {
                    (bytes, Some(msg)) => shape::response_parsed(msg, bytes, hints, read_uri),
                    (bytes, None) => shape::response(bytes, hints, read_uri),
                });
            }
        }
        outbox.ready().await;
    }
}

/// The code of a JSON-RPC error response (-32601 is HTTP 404 in this era; -32020,
/// -32021 and -32022 are 400). A result is not parsed: an answer whose text neither
/// names an `"error"` member nor has an escape (which could spell one) is not an error
/// response, and is not read again.
fn error_code(bytes: &[u8]) -> Option<i64> {
    if memchr::memmem::find(bytes, b"\"error\"").is_none() && memchr::memchr(b'\\', bytes).is_none()
    {
        return None;
    }
    let msg = Message::parse(bytes).ok()?;
    serde_json::from_str::<serde_json::Value>(msg.error()?.get())
        .ok()?
        .get("code")?
        .as_i64()
}

/// Ends the request's client if the handler is dropped before it did (the HTTP client
/// went away while a JSON answer was pending).
struct CloseOnDrop {
    link: Option<ClientLink>,
    client: ClientId,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.client_closed_now(self.client, "request abandoned by the client");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::error_code;

    #[test]
    fn error_code_reads_errors_and_skips_results() {
        let err = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#;
        assert_eq!(error_code(err), Some(-32601));
        // A member name spelled with an escape is still found.
        let escaped = br#"{"jsonrpc":"2.0","id":1,"\u0065rror":{"code":-32020,"message":"x"}}"#;
        assert_eq!(error_code(escaped), Some(-32020));
        let result = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert_eq!(error_code(result), None);
        // A result that mentions "error" in its text is still a result.
        let mentions = br#"{"jsonrpc":"2.0","id":1,"result":{"text":"\"error\""}}"#;
        assert_eq!(error_code(mentions), None);
    }
}
