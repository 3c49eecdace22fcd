//! The Streamable HTTP handshake: POST `initialize` (no session id), read its answer
//! from a JSON body or an SSE stream, remember `Mcp-Session-Id` and the negotiated
//! `protocolVersion`, then POST `notifications/initialized`.
//!
//! Owns nothing past the handshake; returns the session context the rest of the
//! session uses. Never forwards anything to the hub: messages the server sends before
//! the `initialize` answer are logged and dropped (there is no client to give them to).

use futures_util::StreamExt;
use hyper::header::HeaderValue;

use super::wire::{self, BodyKind, Endpoint, SessionCtx};
use crate::protocol::{methods, Kind, Message, RawId};
use crate::upstream::InitInfo;

/// The id of the proxy's own `initialize` request on each upstream session.
const INIT_ID: &str = "\"mcpmux-initialize\"";

/// Runs the handshake against `endpoint`.
///
/// # Errors
/// A connection failure, a non-2xx status, a refused `initialize`, a body without
/// the answer, or a non-2xx answer to `notifications/initialized`; the text is the
/// `Down` reason.
pub(super) async fn handshake(
    endpoint: &Endpoint,
    params: &serde_json::Value,
) -> Result<(SessionCtx, InitInfo), String> {
    let init_id = RawId::parse(INIT_ID).expect("valid id");
    let req = Message::request(&init_id, methods::INITIALIZE, Some(params));
    let fresh = SessionCtx {
        endpoint: endpoint.clone(),
        session_id: None,
        protocol_version: None,
    };
    let resp = wire::send(endpoint, fresh.post(req.to_bytes()))
        .await
        .map_err(|e| format!("initialize failed: {}", error_chain(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("initialize answered HTTP {status}"));
    }
    let session_id = resp.headers().get(wire::HEADER_SESSION).cloned();
    let answer = match wire::body_kind(&resp) {
        BodyKind::Json => wire::read_json(resp, endpoint.max_message, &endpoint.name)
            .await?
            .into_iter()
            .find(|m| is_answer(m, &init_id, &endpoint.name)),
        BodyKind::Sse => {
            let mut events = wire::sse_events(resp, endpoint.max_message);
            let mut found = None;
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| format!("initialize stream failed: {e}"))?;
                found = wire::parse_data(&ev.data, &endpoint.name)
                    .into_iter()
                    .find(|m| is_answer(m, &init_id, &endpoint.name));
                if found.is_some() {
                    break;
                }
            }
            found
        }
        BodyKind::Empty => None,
        BodyKind::Other(ct) => {
            return Err(format!("initialize answered with content type `{ct}`"));
        }
    };
    let answer = answer.ok_or("the server did not answer initialize")?;
    let info = InitInfo::from_answer(&answer)?;
    let ctx = SessionCtx {
        endpoint: endpoint.clone(),
        session_id,
        protocol_version: HeaderValue::from_str(&info.protocol_version)
            .ok()
            .filter(|v| !v.is_empty()),
    };
    let note = Message::notification(methods::INITIALIZED, None);
    let resp = wire::send(endpoint, ctx.post(note.to_bytes()))
        .await
        .map_err(|e| format!("notifications/initialized failed: {}", error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(format!(
            "notifications/initialized answered HTTP {}",
            resp.status()
        ));
    }
    Ok((ctx, info))
}

/// Whether `m` is the answer to our `initialize`; anything else is logged.
fn is_answer(m: &Message, init_id: &RawId, upstream: &str) -> bool {
    if m.kind() == Kind::Response && m.id() == Some(init_id) {
        return true;
    }
    tracing::debug!(%upstream, method = ?m.method(), "message before the initialize answer ignored");
    false
}

/// HTTP client errors hide the cause (connection refused, ...) in their source chain.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
