//! POST on the MCP endpoint: body limits, parsing, session creation on `initialize`,
//! and the choice between a JSON answer, an SSE answer and 202.
//!
//! Owns: reading the body (never more than `max_message_bytes`), the HTTP-level
//! decisions of the Streamable HTTP transport for POST (docs/architecture.md,
//! "Streamable HTTP"), and the JSON assembly of answers.
//! Never: answers an MCP method itself (the hub does), or forwards a request before the
//! session actor has registered its id (so a fast response cannot race past it).
//!
//! Decisions:
//! - A request is answered as SSE when it carries `params._meta.progressToken` and
//!   `Accept` allows `text/event-stream` (so progress and related server requests reach
//!   it), or when `Accept` allows SSE but not JSON; otherwise as one JSON object.
//! - `initialize` is always answered as JSON: the session id header must wait until we
//!   know the hub accepted it (an error response drops the session).
//! - A batch is answered as one JSON array; invalid items get per-item errors with
//!   `id: null`. The batch version is the `MCP-Protocol-Version` header, else the
//!   version the session's `initialize` response named, else 2025-03-26 (the spec's
//!   assumption when nothing else is known).
//! - If the session ends before a response arrives, the missing responses are
//!   synthesized as -32603 errors so a JSON POST never hangs.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::oneshot;

use crate::downstream::lane;
use tracing::debug;

use super::guard::{self, Accepts};
use super::session::{self, PostSink, SessionCmd, SessionEntry, SessionSpawn};
use super::{
    error, header_str, json_response, lookup, session_not_found, sse_response, App,
    PROTOCOL_VERSION, SESSION_ID, TRANSPORT_ERROR,
};
use crate::downstream::outbox::Outbox;
use crate::protocol::methods::{self, progress_token};
use crate::protocol::{code, Incoming, Kind, Message, ParseError, RawId, BATCH_VERSION};
use crate::state::ids::ViewId;

pub(super) async fn handle(app: Arc<App>, req: Request, view: ViewId) -> Response {
    let (parts, body) = req.into_parts();
    let headers = &parts.headers;
    if !guard::is_json_content_type(header_str(headers, &header::CONTENT_TYPE)) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            TRANSPORT_ERROR,
            "unsupported media type: POST bodies must be Content-Type: application/json",
        );
    }
    let accepts = guard::accepts(header_str(headers, &header::ACCEPT));
    if !accepts.json && !accepts.sse {
        return error(
            StatusCode::NOT_ACCEPTABLE,
            TRANSPORT_ERROR,
            "not acceptable: Accept must allow application/json or text/event-stream",
        );
    }
    let raw_version = header_str(headers, &PROTOCOL_VERSION);
    let length = header_str(headers, &header::CONTENT_LENGTH).and_then(|v| v.parse().ok());
    let limit = app.settings.max_message_bytes;
    let bytes = match read_body(body, limit, length).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            let msg = format!(
                "message too large: the body exceeds limits.max_message_bytes ({limit} bytes)"
            );
            // The rest of the body is never read: close the connection so the client
            // does not reuse it with unread bytes in flight.
            let mut resp = error(StatusCode::PAYLOAD_TOO_LARGE, code::INVALID_REQUEST, &msg);
            resp.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            return resp;
        }
        Err(BodyError::Read(e)) => {
            debug!(error = %e, "POST body read failed");
            let msg = format!("could not read the request body: {e}");
            return error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg);
        }
    };
    let incoming = match Incoming::parse(&bytes) {
        Ok(i) => i,
        Err(e) => return parse_error(&e),
    };
    let session_id = header_str(headers, &SESSION_ID);
    if let (None, Incoming::Single(Ok(msg))) = (session_id, &incoming) {
        if super::stateless::is_modern_post(raw_version, msg) {
            let Incoming::Single(Ok(msg)) = incoming else {
                unreachable!("matched above")
            };
            return super::stateless::handle(app, msg, headers, accepts, view).await;
        }
    }
    let modern_version = raw_version
        .map(str::trim)
        .filter(|v| crate::protocol::stateless::is_modern(v));
    if let (None, Some(version)) = (session_id, modern_version) {
        // A 2026-07-28 POST that is no valid request: say what is wrong with it, not
        // that its version is unknown (the legacy guard below knows no such version).
        match &incoming {
            Incoming::Single(Err(e)) => return parse_error(e),
            Incoming::Batch(_) => {
                let msg = format!("batches are not allowed in protocol version {version}");
                return error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg);
            }
            Incoming::Single(Ok(_)) => {}
        }
    }
    let header_version = match guard::protocol_version(raw_version) {
        Ok(v) => v,
        Err(msg) => return error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg),
    };
    match incoming {
        Incoming::Single(Err(e)) => parse_error(&e),
        Incoming::Single(Ok(msg)) => match session_id {
            None if is_initialize(&msg) => initialize(app, msg, view).await,
            None => missing_session(),
            Some(id) => match lookup(&app, id, view) {
                None => session_not_found(),
                Some(entry) => single(&app, &entry, msg, accepts).await,
            },
        },
        Incoming::Batch(items) => {
            let Some(id) = session_id else {
                return missing_session();
            };
            let Some(entry) = lookup(&app, id, view) else {
                return session_not_found();
            };
            let version = header_version
                .or(entry.version.as_deref())
                .unwrap_or(BATCH_VERSION);
            if version != BATCH_VERSION {
                let msg = format!("batches are not allowed in protocol version {version}");
                return error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg);
            }
            if items.iter().flatten().any(is_initialize) {
                return error(
                    StatusCode::BAD_REQUEST,
                    code::INVALID_REQUEST,
                    "initialize must not be in a batch",
                );
            }
            batch(&app, &entry, items).await
        }
    }
}

fn is_initialize(msg: &Message) -> bool {
    msg.kind() == Kind::Request && msg.method() == Some(methods::INITIALIZE)
}

fn parse_error(e: &ParseError) -> Response {
    error(StatusCode::BAD_REQUEST, e.code(), &e.to_string())
}

fn missing_session() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        code::INVALID_REQUEST,
        "missing Mcp-Session-Id; send initialize first",
    )
}

enum BodyError {
    TooLarge,
    Read(axum::Error),
}

/// Reads the body, refusing as soon as it is known to exceed `limit` (from
/// `Content-Length` up front, or while streaming a chunked body).
async fn read_body(body: Body, limit: usize, length: Option<u64>) -> Result<Bytes, BodyError> {
    if length.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut buf = BytesMut::with_capacity(length.map_or(0, |n| n as usize).min(limit));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// One message on an existing session.
async fn single(app: &App, entry: &SessionEntry, msg: Message, accepts: Accepts) -> Response {
    let Some(id) = msg.id().filter(|_| msg.kind() == Kind::Request).cloned() else {
        return match forward(app, entry, vec![msg], vec![], None).await {
            Ok(_) => StatusCode::ACCEPTED.into_response(),
            Err(resp) => resp,
        };
    };
    let sse = accepts.sse && (progress_token(msg.params()).is_some() || !accepts.json);
    let (tx, rx) = lane::channel(session::STREAM_QUEUE);
    let sink = PostSink {
        tx,
        sse,
        prime: entry.primes(),
    };
    if let Err(resp) = forward(app, entry, vec![msg], vec![id.clone()], Some(sink)).await {
        return resp;
    }
    if sse {
        return sse_response(rx);
    }
    let mut got = collect(rx, std::slice::from_ref(&id)).await;
    json_response(StatusCode::OK, got.pop().unwrap_or_default())
}

/// A 2025-03-26 batch on an existing session.
async fn batch(
    app: &App,
    entry: &SessionEntry,
    items: Vec<Result<Message, ParseError>>,
) -> Response {
    let total = items.len();
    let mut errors = Vec::new();
    let mut msgs = Vec::with_capacity(total);
    let mut ids = Vec::new();
    for item in items {
        match item {
            Ok(m) => {
                if m.kind() == Kind::Request {
                    ids.extend(m.id().cloned());
                }
                msgs.push(m);
            }
            Err(e) => errors.push(Message::error_response(
                None,
                e.code(),
                &e.to_string(),
                None,
            )),
        }
    }
    // Room for every answer: they are collected only once the whole batch was handed
    // on, and a full lane would hold up the session's other messages behind them.
    let (tx, rx) = lane::channel(session::STREAM_QUEUE.max(ids.len()));
    let sink = (!ids.is_empty()).then_some(PostSink {
        tx,
        sse: false,
        prime: false,
    });
    if !msgs.is_empty() {
        if let Err(resp) = forward(app, entry, msgs, ids.clone(), sink).await {
            return resp;
        }
    }
    if ids.is_empty() && errors.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    let mut parts = if ids.is_empty() {
        Vec::new()
    } else {
        collect(rx, &ids).await
    };
    parts.extend(errors.iter().map(Message::to_bytes));
    let status = if errors.len() == total {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    json_response(status, join_array(&parts))
}

/// Registers `ids` (and `sink`) with the session actor, then hands `msgs` to the hub in
/// order. In a task of its own: a client that goes away meanwhile drops this handler,
/// and ids registered but never handed on would wait for responses that never come,
/// keeping the session from ever going idle.
async fn forward(
    app: &App,
    entry: &SessionEntry,
    msgs: Vec<Message>,
    ids: Vec<RawId>,
    sink: Option<PostSink>,
) -> Result<(), Response> {
    let (cmd, hub, client) = (entry.cmd.clone(), app.hub.clone(), entry.client);
    let handed = tokio::spawn(async move {
        let (ack, acked) = oneshot::channel();
        if cmd.send(SessionCmd::Post { ids, sink, ack }).await.is_err() {
            return Err(Refusal::NoSession);
        }
        match acked.await {
            Err(_) => return Err(Refusal::NoSession),
            Ok(Err(dup)) => return Err(Refusal::InFlight(dup)),
            Ok(Ok(())) => {}
        }
        for msg in msgs {
            if hub.client_message(client, msg).await.is_err() {
                return Err(Refusal::ShuttingDown);
            }
        }
        Ok(())
    });
    match handed.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(Refusal::NoSession)) | Err(_) => Err(session_not_found()),
        Ok(Err(Refusal::InFlight(dup))) => {
            let msg = format!("request id {dup} is already in flight on this session");
            Err(error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST, &msg))
        }
        Ok(Err(Refusal::ShuttingDown)) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            TRANSPORT_ERROR,
            "mcpmux is shutting down",
        )),
    }
}

/// Why [`forward`] handed nothing (or not everything) on.
enum Refusal {
    NoSession,
    InFlight(RawId),
    ShuttingDown,
}

/// Waits for the responses to `ids` (the actor closes the channel after the last one,
/// or when the session ends) and synthesizes an error for each one that never came.
async fn collect(mut rx: lane::Receiver<Bytes>, ids: &[RawId]) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(ids.len());
    let mut answered = std::collections::HashSet::with_capacity(ids.len());
    while let Some(bytes) = rx.recv().await {
        if let Ok(m) = Message::parse(&bytes) {
            answered.extend(m.id().cloned());
        }
        out.push(bytes);
    }
    for id in ids.iter().filter(|id| !answered.contains(id)) {
        out.push(
            Message::error_response(
                Some(id),
                code::INTERNAL_ERROR,
                "no response: the request was cancelled or the session ended",
                None,
            )
            .to_bytes(),
        );
    }
    out
}

fn join_array(parts: &[Bytes]) -> Bytes {
    let mut buf = BytesMut::with_capacity(2 + parts.iter().map(|p| p.len() + 1).sum::<usize>());
    buf.extend_from_slice(b"[");
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            buf.extend_from_slice(b",");
        }
        buf.extend_from_slice(p);
    }
    buf.extend_from_slice(b"]");
    buf.freeze()
}

/// Ends a half-created session unless disarmed (client gone mid-`initialize`, or the
/// hub answered `initialize` with an error).
struct EndOnDrop {
    cmd: Option<lane::Sender<SessionCmd>>,
    reason: &'static str,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Some(cmd) = self.cmd.take() {
            let _ = cmd.try_send(SessionCmd::End {
                reason: self.reason,
                done: None,
            });
        }
    }
}

/// `initialize` without a session: admit a client, start its session actor, forward,
/// and answer with `Mcp-Session-Id` if the hub accepted.
async fn initialize(app: Arc<App>, msg: Message, view: ViewId) -> Response {
    let outbox = Outbox::for_transport(app.settings.client_queue, "http");
    let sid = format!("{:032x}", rand::random::<u128>());
    let client = match app
        .hub
        .open_session(outbox.clone(), view, sid.as_str().into())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                TRANSPORT_ERROR,
                &e.to_string(),
            )
        }
    };
    let (actor, cmd) = session::start(SessionSpawn {
        id: sid.clone(),
        client,
        view,
        outbox,
        hub: app.hub.clone(),
        sessions: app.sessions.clone(),
        idle: app.settings.session_idle,
        replay_events: app.settings.sse_replay_events,
        shutdown: app.shutdown.clone(),
    });
    app.tracker.spawn(actor);
    let mut end = EndOnDrop {
        cmd: Some(cmd.clone()),
        reason: "initialize abandoned by the client",
    };
    let entry = SessionEntry {
        cmd,
        client,
        view,
        version: None,
    };
    let id = msg.id().cloned().expect("initialize is a request");
    let (tx, rx) = lane::channel(1);
    let sink = PostSink {
        tx,
        sse: false,
        prime: false,
    };
    if let Err(resp) = forward(&app, &entry, vec![msg], vec![id.clone()], Some(sink)).await {
        end.reason = "initialize not delivered";
        return resp;
    }
    let body = collect(rx, std::slice::from_ref(&id))
        .await
        .pop()
        .unwrap_or_default();
    let parsed = Message::parse(&body).ok();
    match parsed.as_ref().filter(|m| !m.is_error()) {
        None => {
            end.reason = "initialize failed";
            json_response(StatusCode::OK, body)
        }
        Some(m) => {
            end.cmd = None;
            let version: Option<methods::InitializeParams> = methods::parse_params(m.result());
            if let Some(v) = version {
                let mut map = app.sessions.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(e) = map.get_mut(&sid) {
                    e.version = Some(v.protocol_version.into());
                }
            }
            debug!(client.id = %client, "HTTP session created");
            let mut resp = json_response(StatusCode::OK, body);
            if let Ok(v) = HeaderValue::from_str(&sid) {
                resp.headers_mut().insert(SESSION_ID, v);
            }
            resp
        }
    }
}
