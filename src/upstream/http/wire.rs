//! HTTP plumbing shared by the handshake, the POST tasks and the GET stream: the
//! per-session request context (configured headers, `Mcp-Session-Id`,
//! `MCP-Protocol-Version`), response classification, bounded body reading and the
//! bounded SSE event stream (parsed by `eventsource-stream`, never by hand).
//!
//! Owns no task and no state beyond one immutable [`SessionCtx`] per session. Never
//! talks to the hub and never interprets a message beyond splitting batches; every
//! body it reads is bounded by `limits.max_message_bytes`.

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use eventsource_stream::{Event, Eventsource};
use futures_util::{Stream, StreamExt};
use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, StatusCode, Uri};

use super::client::{HttpClient, Request, Response, SendError};

use crate::oauth::UpstreamAuth;
use crate::protocol::{code, Incoming, Message, RawId};

/// `Accept` on every POST: the spec requires both (the TS server answers 406 otherwise).
pub(super) const ACCEPT_POST: &str = "application/json, text/event-stream";
/// `Accept` on the GET stream.
pub(super) const ACCEPT_SSE: &str = "text/event-stream";
/// The session header (header names are case-insensitive).
pub(super) const HEADER_SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
/// The negotiated protocol version header (2025-06-18+, harmless before).
pub(super) const HEADER_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// The SSE resumption header on the GET stream.
pub(super) const HEADER_LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// What stays the same for the whole life of the actor: the client and the endpoint.
#[derive(Debug, Clone)]
pub(super) struct Endpoint {
    /// The configured server name, for logs and synthesized errors.
    pub name: String,
    /// One pooled client for every request of every session.
    pub client: HttpClient,
    pub url: Uri,
    /// The configured `headers` (already `${ENV}`-expanded), sent on every request.
    pub headers: HeaderMap,
    /// `limits.max_message_bytes`: bound on a JSON body or one SSE event.
    pub max_message: usize,
    /// The upstream's OAuth client, when mcpmux logs in to it (no `Authorization`
    /// header configured): the bearer token of every request, and the challenges of
    /// every response.
    pub auth: Option<Arc<UpstreamAuth>>,
}

impl Endpoint {
    /// Validates the configured URL and headers.
    ///
    /// # Errors
    /// A URL that does not parse, or a header name/value HTTP cannot carry.
    pub fn new(
        name: &str,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        client: impl FnOnce(&Uri) -> Result<HttpClient, String>,
        max_message: usize,
    ) -> Result<Endpoint, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("bad url `{url}`: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("bad url `{url}`: the scheme must be http or https"));
        }
        let url: Uri = parsed
            .as_str()
            .parse()
            .map_err(|e| format!("bad url `{url}`: {e}"))?;
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("header name `{k}` is not valid HTTP"))?;
            let value = HeaderValue::from_str(v)
                .map_err(|_| format!("the value of header `{k}` is not valid HTTP"))?;
            map.append(name, value);
        }
        Ok(Endpoint {
            name: name.to_owned(),
            client: client(&url)?,
            url,
            headers: map,
            max_message,
            auth: None,
        })
    }
}

/// One upstream session, immutable once the handshake is done; shared by `Arc` among
/// the POST tasks and the GET stream task of that session (no lock needed).
#[derive(Debug)]
pub(super) struct SessionCtx {
    pub endpoint: Endpoint,
    /// `Mcp-Session-Id` the server assigned on the `initialize` response, if any.
    pub session_id: Option<HeaderValue>,
    /// The negotiated `protocolVersion`, sent as `MCP-Protocol-Version`.
    pub protocol_version: Option<HeaderValue>,
}

impl SessionCtx {
    fn request(&self, method: Method) -> Request {
        let mut rb = Request::new(
            method,
            self.endpoint.url.clone(),
            self.endpoint.headers.clone(),
        );
        if let Some(s) = &self.session_id {
            rb = rb.header(HEADER_SESSION, s.clone());
        }
        if let Some(v) = &self.protocol_version {
            rb = rb.header(HEADER_VERSION, v.clone());
        }
        if let Some(token) = self.endpoint.auth.as_ref().and_then(|a| a.bearer()) {
            if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                v.set_sensitive(true);
                rb = rb.header(AUTHORIZATION, v);
            }
        }
        rb
    }

    /// A POST of one serialized JSON-RPC message.
    pub fn post(&self, body: Bytes) -> Request {
        self.request(Method::POST)
            .header(ACCEPT, HeaderValue::from_static(ACCEPT_POST))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
    }

    /// The GET stream, resuming after `last_event_id` when one was seen.
    pub fn get(&self, last_event_id: Option<&str>) -> Request {
        let mut rb = self
            .request(Method::GET)
            .header(ACCEPT, HeaderValue::from_static(ACCEPT_SSE));
        if let Some(id) = last_event_id.and_then(|i| HeaderValue::from_str(i).ok()) {
            rb = rb.header(HEADER_LAST_EVENT_ID, id);
        }
        rb
    }

    /// The session-ending DELETE.
    pub fn delete(&self) -> Request {
        self.request(Method::DELETE)
    }

    /// Whether `status` on a request of this session means the server forgot it: 404,
    /// the spec's only signal for that. Only when a session id was sent; without one
    /// it is a plain failure.
    pub fn is_expired(&self, status: StatusCode) -> bool {
        self.session_id.is_some() && status == StatusCode::NOT_FOUND
    }

    /// Whether `status` may mean the server forgot the session: a 400 while a session
    /// id was sent. It may as well be about one bad request; the session checks with a
    /// ping (server-everything answers an unknown session with 400).
    pub fn is_suspect(&self, status: StatusCode) -> bool {
        self.session_id.is_some() && status == StatusCode::BAD_REQUEST
    }

    /// A JSON-RPC error answering `id` on the upstream's behalf, so a client is never
    /// left hanging when the HTTP exchange failed.
    pub fn synthesized_error(&self, id: &RawId, what: &str) -> Message {
        let text = format!("upstream {}: {what}", self.endpoint.name);
        Message::error_response(Some(id), code::UPSTREAM_UNAVAILABLE, &text, None)
    }
}

/// Sends a request of this endpoint and shows the answer to its OAuth client, which
/// records a challenge (401, 403 `insufficient_scope`) and ends the session for it.
///
/// # Errors
/// The request could not be sent.
pub(super) async fn send(endpoint: &Endpoint, req: Request) -> Result<Response, SendError> {
    let resp = endpoint.client.send(req).await?;
    if let Some(auth) = &endpoint.auth {
        auth.observe(resp.status(), resp.headers());
    }
    Ok(resp)
}

/// How a successful response carries its messages.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum BodyKind {
    /// 202, or no `Content-Type`: nothing to read.
    Empty,
    Json,
    Sse,
    /// Some other content type (named for the error message).
    Other(String),
}

pub(super) fn body_kind(resp: &Response) -> BodyKind {
    if resp.status() == StatusCode::ACCEPTED {
        return BodyKind::Empty;
    }
    let Some(ct) = resp.headers().get(CONTENT_TYPE) else {
        return BodyKind::Empty;
    };
    let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
    if ct.starts_with("application/json") {
        BodyKind::Json
    } else if ct.starts_with("text/event-stream") {
        BodyKind::Sse
    } else {
        BodyKind::Other(ct)
    }
}

/// Reads a whole JSON body (each of its JSON texts at most `max` bytes) and splits it
/// into messages (objects, batch arrays, several texts in a row). Elements that are
/// not JSON-RPC messages are logged and dropped.
///
/// # Errors
/// A text is too long, the connection failed, or the body is not JSON.
pub(super) async fn read_json(
    resp: Response,
    max: usize,
    upstream: &str,
) -> Result<Vec<Message>, String> {
    let mut texts = JsonTexts::new(resp, max, upstream);
    let mut out = Vec::new();
    while let Some(msgs) = texts.next().await {
        out.extend(msgs?);
    }
    Ok(out)
}

/// The JSON texts of an `application/json` body as they arrive: one object or batch,
/// or several in a row (a 2026-07-28 server may stream a request's progress and then
/// its response as newline-delimited JSON, and a listen's notifications the same way,
/// on a chunked body that stays open). Each text is bounded by `max` bytes.
pub(super) struct JsonTexts {
    body: super::client::Body,
    buf: BytesMut,
    max: usize,
    upstream: String,
    done: bool,
    /// `buf` holds all the body has left (its last chunk is in): read as one text,
    /// without first scanning for where it ends.
    whole: bool,
}

impl JsonTexts {
    pub(super) fn new(resp: Response, max: usize, upstream: &str) -> Self {
        JsonTexts {
            body: resp.into_body(),
            buf: BytesMut::new(),
            max,
            upstream: upstream.to_owned(),
            done: false,
            whole: false,
        }
    }

    /// The messages of the next complete JSON text; `None` at the end of the body.
    ///
    /// # Errors
    /// A text over `max` bytes, a failed connection, invalid JSON, or a body that
    /// ends inside a text.
    pub(super) async fn next(&mut self) -> Option<Result<Vec<Message>, String>> {
        loop {
            if std::mem::take(&mut self.whole) {
                // The usual body: one text, complete. Parsed once; a body of several
                // texts in a row fails here and is split below.
                let start = self.buf.iter().position(|b| !b.is_ascii_whitespace());
                let Some(start) = start else {
                    self.done = true;
                    return None;
                };
                if let Ok(i @ (Incoming::Single(Ok(_)) | Incoming::Batch(_))) =
                    Incoming::parse(self.buf[start..].trim_ascii_end())
                {
                    self.done = true;
                    self.buf.clear();
                    return Some(Ok(split(i, &self.upstream)));
                }
            }
            match next_text(&self.buf) {
                Ok(Some((text, used))) => {
                    let msgs = Incoming::parse(text)
                        .map(|i| split(i, &self.upstream))
                        .map_err(|e| format!("unreadable JSON response: {e}"));
                    let _ = self.buf.split_to(used);
                    return Some(msgs);
                }
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    self.buf.clear();
                    return Some(Err(format!("unreadable JSON response: {e}")));
                }
            }
            if self.done {
                return None;
            }
            match self.next_chunk().await {
                Some(Ok(chunk)) => {
                    if self.buf.len() + chunk.len() > self.max {
                        self.done = true;
                        self.buf.clear();
                        return Some(Err(format!(
                            "response over limits.max_message_bytes ({} bytes)",
                            self.max
                        )));
                    }
                    self.buf.extend_from_slice(&chunk);
                    self.whole = hyper::body::Body::is_end_stream(&self.body);
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(format!("reading the response failed: {e}")));
                }
                None => {
                    self.done = true;
                    if self.buf.iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    let rest = std::mem::take(&mut self.buf);
                    return Some(
                        Incoming::parse(&rest)
                            .map(|i| split(i, &self.upstream))
                            .map_err(|e| format!("unreadable JSON response: {e}")),
                    );
                }
            }
        }
    }
}

impl JsonTexts {
    /// The body's next data chunk (trailers are skipped); `None` at its end.
    async fn next_chunk(&mut self) -> Option<Result<Bytes, super::client::BoxError>> {
        use http_body_util::BodyExt;
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    Err(_) => continue,
                },
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The first complete JSON text in `buf` and the bytes it (and the whitespace before
/// it) takes; `None` when `buf` holds only whitespace or the start of a text.
fn next_text(buf: &[u8]) -> Result<Option<(&[u8], usize)>, serde_json::Error> {
    let start = match buf.iter().position(|b| !b.is_ascii_whitespace()) {
        Some(i) => i,
        None => return Ok(None),
    };
    let mut stream =
        serde_json::Deserializer::from_slice(&buf[start..]).into_iter::<serde::de::IgnoredAny>();
    match stream.next() {
        Some(Ok(_)) => {
            let end = start + stream.byte_offset();
            Ok(Some((&buf[start..end], end)))
        }
        Some(Err(e)) if e.is_eof() => Ok(None),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

/// The data of a response body as it arrives (trailers are skipped).
type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, super::client::BoxError>> + Send>>;

fn chunks(resp: Response) -> Chunks {
    Box::pin(http_body_util::BodyDataStream::new(resp.into_body()))
}

/// Reads a whole body of at most `max` bytes.
///
/// # Errors
/// The body is too long or the connection failed.
pub(super) async fn read_bounded(resp: Response, max: usize) -> Result<BytesMut, String> {
    let mut body = BytesMut::new();
    let mut chunks = chunks(resp);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| format!("reading the response failed: {e}"))?;
        if body.len() + chunk.len() > max {
            return Err(format!(
                "response over limits.max_message_bytes ({max} bytes)"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Parses one SSE event's `data` (a message, or a batch in 2025-03-26). Empty data
/// is a 2025-11-25 priming event (it only carries an id): nothing to forward.
pub(super) fn parse_data(data: &str, upstream: &str) -> Vec<Message> {
    if data.trim().is_empty() {
        return Vec::new();
    }
    match Incoming::parse(data.as_bytes()) {
        Ok(incoming) => split(incoming, upstream),
        Err(e) => {
            tracing::warn!(%upstream, error = %e, "unparseable SSE event from upstream dropped");
            Vec::new()
        }
    }
}

fn split(incoming: Incoming, upstream: &str) -> Vec<Message> {
    let items = match incoming {
        Incoming::Single(one) => vec![one],
        Incoming::Batch(many) => many,
    };
    items
        .into_iter()
        .filter_map(|m| {
            m.map_err(
                |e| tracing::warn!(%upstream, error = %e, "invalid message from upstream dropped"),
            )
            .ok()
        })
        .collect()
}

/// A stream of SSE events, each bounded in size.
pub(super) type Events = Pin<Box<dyn Stream<Item = Result<Event, String>> + Send>>;

/// Turns an SSE response into its events. An event larger than `max` bytes ends the
/// stream with an error instead of growing the parser's buffer without bound.
pub(super) fn sse_events(resp: Response, max: usize) -> Events {
    let mut guard = EventSizeGuard::new(max);
    let bytes = chunks(resp).map(move |chunk| match chunk {
        Ok(c) => guard.check(&c).map(|()| c),
        Err(e) => Err(SseError(format!("reading the stream failed: {e}"))),
    });
    Box::pin(bytes.eventsource().map(|r| r.map_err(|e| e.to_string())))
}

/// Why the byte stream under an SSE parser stopped.
#[derive(Debug)]
struct SseError(String);

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Counts the bytes of the SSE event being received (an event ends at a blank line),
/// so that one endless event cannot exhaust memory. Not a parser: `eventsource-stream`
/// still does all the parsing; this only finds blank lines.
#[derive(Debug)]
struct EventSizeGuard {
    max: usize,
    /// Non-terminator bytes in the current line.
    line: usize,
    /// Non-terminator bytes in the current event.
    event: usize,
}

impl EventSizeGuard {
    fn new(max: usize) -> Self {
        EventSizeGuard {
            max,
            line: 0,
            event: 0,
        }
    }

    fn check(&mut self, chunk: &[u8]) -> Result<(), SseError> {
        for &b in chunk {
            match b {
                b'\n' => {
                    if self.line == 0 {
                        self.event = 0;
                    }
                    self.line = 0;
                }
                b'\r' => {}
                _ => {
                    self.line += 1;
                    self.event += 1;
                    if self.event > self.max {
                        return Err(SseError(format!(
                            "SSE event over limits.max_message_bytes ({} bytes)",
                            self.max
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
