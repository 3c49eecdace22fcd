//! HTTP mode (`--http ADDR`): Streamable HTTP on `/mcp`, every session and stateless
//! request served by ONE shared [`Server`] (see the crate doc, "HTTP mode").
//!
//! One task owns the server (as the stdio reader loop does) and handles the
//! connections' commands in arrival order, each message whole. A POSTed request
//! brings a fresh response stream ([`Push`] channel) in its [`Route`]; its connection
//! waits for the stream's first message: a response alone is answered as
//! `application/json`, anything else turns the answer into an SSE stream that ends
//! with the response (or [`Push::End`]). A session's GET stream is the receiving half
//! of the channel kept in its [`GetSlot`]; dropped before it ended (its client's
//! connection went away), it ends the session unless a request stream of the session is
//! open (the crate doc, "A session ends when its client goes away"). Connections never
//! touch the server's state themselves: they only send [`Cmd`]s to the owning task.

use std::convert::Infallible;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::modern::Era;
use crate::recorder::PARSE_ERROR;
use crate::server::{Client, GetSlot, Push, Route, Server, SessionState};
use crate::Config;

/// The one endpoint.
pub const PATH: &str = "/mcp";
const HEADER_SESSION: &str = "mcp-session-id";

/// What a connection asks of the task that owns the server.
enum Cmd {
    /// A POST: its `Mcp-Session-Id` (see [`session_header`]) and body.
    Post {
        session: Option<Option<u64>>,
        body: Vec<u8>,
        reply: oneshot::Sender<Posted>,
    },
    /// A GET or a DELETE.
    Session {
        delete: bool,
        session: Option<Option<u64>>,
        reply: oneshot::Sender<Response<OutBody>>,
    },
    /// The client closed a modern request's stream before its response.
    Cancel { client: Client, id: Value },
    /// Session `n`'s GET stream was dropped before it ended: its client's connection
    /// went away (see [`Server::get_gone`]).
    GetGone { session: u64 },
}

/// What became of a POST.
enum Posted {
    /// Answered at once (202, an error status).
    Done(Response<OutBody>),
    /// A request: its stream, and what to cancel if the client closes it early.
    Stream {
        rx: UnboundedReceiver<Push>,
        cancel: Option<(Client, Value)>,
        new_session: Option<u64>,
        /// The session's request-stream count, held until the answer is dropped.
        open: Option<Arc<()>>,
    },
}

type Commands = UnboundedSender<Cmd>;

/// `s<N>` → `N` (N ≥ 1).
pub fn parse_session_id(s: &str) -> Option<u64> {
    s.strip_prefix('s')
        .filter(|n| !n.starts_with('0') && !n.starts_with('+'))
        .and_then(|n| n.parse().ok())
}

impl Server {
    /// A new session `s<N>`, with its (empty) GET stream slot.
    pub fn open_session(&mut self) -> (u64, Arc<GetSlot>) {
        self.sessions.opened += 1;
        let n = self.sessions.opened;
        let state = SessionState::default();
        let get = state.get.clone();
        self.sessions.open.insert(Client::Session(n), state);
        (n, get)
    }

    /// The GET stream slot of open session `n`.
    pub fn session_slot(&self, n: u64) -> Option<Arc<GetSlot>> {
        self.sessions
            .open
            .get(&Client::Session(n))
            .map(|s| s.get.clone())
    }

    /// Ends session `n` (DELETE, `end_session`): its subscriptions, GET stream and
    /// parked requests go. `false` if it is not open.
    pub fn end_session(&mut self, n: u64) -> bool {
        let client = Client::Session(n);
        let Some(state) = self.sessions.open.remove(&client) else {
            return false;
        };
        self.sessions.ended += 1;
        state.get.clear();
        self.drop_parked(client);
        true
    }

    /// Session `n`'s GET stream was dropped unfinished (its client's connection went
    /// away). The session ends, as by DELETE, unless a newer GET stream replaced it or a
    /// request stream of the session is still open (the client is still there).
    fn get_gone(&mut self, n: u64) {
        let Some(state) = self.sessions.open.get(&Client::Session(n)) else {
            return;
        };
        if state.get.is_open() || Arc::strong_count(&state.requests) > 1 {
            return;
        }
        eprintln!("[scripted] s{n}: its client went away; the session ends");
        self.sessions.gone += 1;
        self.end_session(n);
    }

    fn stateless(&mut self) -> Client {
        self.sessions.stateless += 1;
        Client::Stateless(self.sessions.stateless)
    }
}

/// Binds `addr`, prints the one stdout line, then serves until SIGTERM or SIGINT
/// (exit 0). A bind failure exits 1.
pub async fn serve(config: Config, addr: &str) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("[scripted] cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("[scripted] no local address: {e}");
            std::process::exit(1);
        }
    };
    // Installed before the line is printed: a SIGTERM right after it still exits 0.
    let stop = stop_signals();
    {
        // The only stdout line in HTTP mode; the reader may close the pipe after it.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(
            stdout,
            "scripted-upstream listening on http://{local}{PATH}"
        );
        let _ = stdout.flush();
    }
    eprintln!(
        "[scripted] HTTP mode on {local}, era {}",
        config.era.as_str()
    );
    let (commands, rx) = unbounded_channel();
    tokio::spawn(own(Server::new_http(config), rx));
    let accept = async {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    eprintln!("[scripted] accept failed: {e}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let commands = commands.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let commands = commands.clone();
                    async move { Ok::<_, Infallible>(handle(commands, req).await) }
                });
                // Errors are clients going away mid-stream: nothing to report.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        () = accept => {}
        signal = stop => eprintln!("[scripted] {signal}: exiting"),
    }
    std::process::exit(0);
}

/// The task that owns the server: handles every command in arrival order.
async fn own(mut server: Server, mut rx: UnboundedReceiver<Cmd>) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Cmd::Post {
                session,
                body,
                reply,
            } => {
                let posted = post(&mut server, session, &body).await;
                if let Err(Posted::Stream {
                    cancel: Some((client, id)),
                    ..
                }) = reply.send(posted)
                {
                    // The client went away before its request was even handled.
                    server.cancel_as(client, &id);
                }
            }
            Cmd::Session {
                delete,
                session,
                reply,
            } => {
                let _ = reply.send(get_or_delete(&mut server, delete, session));
            }
            Cmd::Cancel { client, id } => server.cancel_as(client, &id),
            Cmd::GetGone { session } => server.get_gone(session),
        }
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C elsewhere), with the signal's name. The
/// handlers are installed by this call, not when the future is first polled.
fn stop_signals() -> impl std::future::Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = signal(SignalKind::terminate())
            .and_then(|term| signal(SignalKind::interrupt()).map(|int| (term, int)));
        if let Err(e) = &handlers {
            eprintln!("[scripted] cannot handle SIGTERM/SIGINT: {e}");
        }
        async move {
            match handlers {
                Ok((mut term, mut int)) => tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                },
                Err(_) => std::future::pending().await,
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// One HTTP request of a connection.
async fn handle(commands: Commands, req: Request<Incoming>) -> Response<OutBody> {
    if req.uri().path() != PATH {
        return plain(StatusCode::NOT_FOUND, "not found: the endpoint is /mcp");
    }
    let method = req.method().clone();
    let session = session_header(req.headers());
    if method == Method::POST {
        let body = match read_body(req.into_body()).await {
            Ok(b) => b,
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("unreadable body: {e}")),
        };
        let (reply, answer) = oneshot::channel();
        let _ = commands.send(Cmd::Post {
            session,
            body,
            reply,
        });
        match answer.await {
            Ok(Posted::Done(resp)) => resp,
            Ok(Posted::Stream {
                rx,
                cancel,
                new_session,
                open,
            }) => {
                // Closing a modern request's stream cancels it (a listen ends); a legacy
                // one is not cancelled by a disconnect.
                let guard = cancel.map(|(client, id)| CancelGuard {
                    commands,
                    client,
                    id,
                    armed: true,
                });
                let mut resp = respond(rx, guard, new_session).await;
                resp.body_mut().open = open;
                resp
            }
            Err(_) => plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down"),
        }
    } else if method == Method::GET || method == Method::DELETE {
        let (reply, answer) = oneshot::channel();
        let delete = method == Method::DELETE;
        let _ = commands.send(Cmd::Session {
            delete,
            session,
            reply,
        });
        let mut resp = answer
            .await
            .unwrap_or_else(|_| plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down"));
        if let (false, StatusCode::OK, Some(Some(n))) = (delete, resp.status(), session) {
            // The session's GET stream: dropped unfinished, its client went away.
            resp.body_mut().gone = Some(GetGone {
                commands,
                session: n,
                armed: true,
            });
        }
        resp
    } else {
        let mut resp = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        resp
    }
}

/// The `Mcp-Session-Id` header: `None` when absent, `Some(None)` when it names no
/// possible session.
fn session_header(headers: &HeaderMap) -> Option<Option<u64>> {
    headers
        .get(HEADER_SESSION)
        .map(|v| v.to_str().ok().and_then(parse_session_id))
}

/// A POST: one JSON-RPC message.
async fn post(server: &mut Server, session: Option<Option<u64>>, body: &[u8]) -> Posted {
    let line = one_line(&String::from_utf8_lossy(body));
    if line.trim().is_empty() {
        // Like a blank stdio line: neither logged nor counted.
        return Posted::Done(rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32700,
            "Parse error",
        ));
    }
    server.log_line(&line);
    let msg: Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => {
            server.recorder.count(PARSE_ERROR);
            eprintln!("[scripted] parse error: {e}");
            return Posted::Done(rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                -32700,
                "Parse error",
            ));
        }
    };
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let id = msg.get("id").cloned();
    let is_response = msg.get("result").is_some() || msg.get("error").is_some();
    let valid = msg.is_object() && (method.is_some() || (id.is_some() && is_response));
    if !valid {
        // Batches and objects that are no JSON-RPC message (the stdio mode answers
        // them -32600 too).
        server.recorder.record(&msg);
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        return Posted::Done(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "Invalid Request",
        ));
    }
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    let modern = method
        .as_deref()
        .is_some_and(|m| server.is_modern(m, &params));
    let is_initialize = method.as_deref() == Some("initialize");

    // Which client: a session, a new session, or a stateless request.
    let mut new_session = None;
    let (client, get) = if server.config.era == Era::Modern {
        // A modern-only server ignores Mcp-Session-Id.
        (server.stateless(), None)
    } else {
        match session {
            Some(Some(n)) if server.session_slot(n).is_some() => {
                (Client::Session(n), server.session_slot(n))
            }
            Some(_) => {
                server.recorder.record(&msg);
                server.sessions.unknown += 1;
                return Posted::Done(unknown_session());
            }
            None if is_initialize => {
                let (n, get) = server.open_session();
                new_session = Some(n);
                (Client::Session(n), Some(get))
            }
            None if modern => (server.stateless(), None),
            None => {
                server.recorder.record(&msg);
                server.sessions.missing += 1;
                return Posted::Done(missing_session());
            }
        }
    };

    let (Some(id), Some(_)) = (id, method) else {
        // A notification or a response: handled, nothing to answer.
        let route = Route {
            client,
            get,
            stream: None,
        };
        server.handle_routed(msg, route).await;
        return Posted::Done(empty(StatusCode::ACCEPTED));
    };
    let (tx, rx) = unbounded_channel();
    let route = Route {
        client,
        get,
        stream: Some(tx),
    };
    server.handle_routed(msg, route).await;
    let open = server
        .sessions
        .open
        .get(&client)
        .map(|s| s.requests.clone());
    Posted::Stream {
        rx,
        cancel: modern.then_some((client, id)),
        new_session,
        open,
    }
}

fn missing_session() -> Response<OutBody> {
    rpc_error(
        StatusCode::BAD_REQUEST,
        Value::Null,
        -32000,
        "Bad Request: Mcp-Session-Id header required",
    )
}

fn unknown_session() -> Response<OutBody> {
    rpc_error(
        StatusCode::NOT_FOUND,
        Value::Null,
        -32001,
        "Session not found",
    )
}

/// Waits for the first message of a request's stream: the response alone is JSON,
/// anything else starts an SSE stream.
async fn respond(
    mut rx: UnboundedReceiver<Push>,
    mut guard: Option<CancelGuard>,
    new_session: Option<u64>,
) -> Response<OutBody> {
    let first = rx.recv().await;
    let mut resp = match first {
        Some(Push::Response(line)) => {
            disarm(&mut guard);
            let mut r = Response::new(OutBody::once(line));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Some(Push::Message(line)) => sse(OutBody::sse(Some(line), rx, guard)),
        // Dropped without an answer (cancelled, or its session ended).
        Some(Push::End) | None => {
            disarm(&mut guard);
            sse(OutBody::sse(None, rx, None))
        }
    };
    if let Some(n) = new_session {
        if let Ok(v) = HeaderValue::from_str(&format!("s{n}")) {
            resp.headers_mut().insert(HEADER_SESSION, v);
        }
    }
    resp
}

fn disarm(guard: &mut Option<CancelGuard>) {
    if let Some(g) = guard {
        g.armed = false;
    }
}

/// GET (the session's stream) and DELETE (end the session).
fn get_or_delete(
    server: &mut Server,
    delete: bool,
    session: Option<Option<u64>>,
) -> Response<OutBody> {
    if server.config.era == Era::Modern {
        let mut resp = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "a 2026-07-28 server has no sessions",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    let Some(n) = session else {
        server.sessions.missing += 1;
        return missing_session();
    };
    let Some((n, slot)) = n.and_then(|n| server.session_slot(n).map(|s| (n, s))) else {
        server.sessions.unknown += 1;
        return unknown_session();
    };
    if delete {
        server.end_session(n);
        return empty(StatusCode::OK);
    }
    let (tx, rx) = unbounded_channel();
    slot.set(tx);
    sse(OutBody::sse(None, rx, None))
}

/// Reads a whole request body.
async fn read_body(mut body: Incoming) -> Result<Vec<u8>, hyper::Error> {
    let mut bytes = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(data) = frame?.into_data() {
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// The body as one log line: line breaks (only whitespace between JSON tokens) become
/// spaces; surrounding whitespace goes.
fn one_line(text: &str) -> String {
    text.trim().replace("\r\n", " ").replace(['\n', '\r'], " ")
}

/// One SSE event carrying one JSON-RPC message.
fn event(line: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {line}\n\n"))
}

fn sse(body: OutBody) -> Response<OutBody> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

fn empty(status: StatusCode) -> Response<OutBody> {
    let mut r = Response::new(OutBody::empty());
    *r.status_mut() = status;
    r
}

fn plain(status: StatusCode, text: &str) -> Response<OutBody> {
    let mut r = Response::new(OutBody::once(format!("{text}\n")));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// An HTTP error status whose body is a JSON-RPC error.
fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response<OutBody> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut r = Response::new(OutBody::once(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Cancels a modern request (ends a listen) when its response stream is dropped
/// before the response: the client closed it.
struct CancelGuard {
    commands: Commands,
    client: Client,
    id: Value,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Cmd::Cancel {
                client: self.client,
                id: self.id.take(),
            });
        }
    }
}

/// Tells the server when a session's GET stream is dropped before it ended (the client's
/// connection went away, not a newer GET or the session's end, which end it first).
struct GetGone {
    commands: Commands,
    session: u64,
    armed: bool,
}

impl Drop for GetGone {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Cmd::GetGone {
                session: self.session,
            });
        }
    }
}

/// A response body: one chunk, or an SSE stream fed by a [`Push`] channel.
pub struct OutBody {
    first: Option<Bytes>,
    rx: Option<UnboundedReceiver<Push>>,
    guard: Option<CancelGuard>,
    /// A session's GET stream: reports its drop unless it ended first.
    gone: Option<GetGone>,
    /// A request stream of a session: its share of the session's open-request count.
    open: Option<Arc<()>>,
}

impl Drop for OutBody {
    fn drop(&mut self) {
        // The request count first: the server must see this stream closed when it
        // handles `GetGone`.
        self.open = None;
        self.gone = None;
    }
}

impl OutBody {
    fn empty() -> Self {
        OutBody {
            first: None,
            rx: None,
            guard: None,
            gone: None,
            open: None,
        }
    }

    fn once(text: String) -> Self {
        OutBody {
            first: Some(Bytes::from(text)),
            rx: None,
            guard: None,
            gone: None,
            open: None,
        }
    }

    fn sse(first: Option<String>, rx: UnboundedReceiver<Push>, guard: Option<CancelGuard>) -> Self {
        OutBody {
            first: first.as_deref().map(event),
            rx: Some(rx),
            guard,
            gone: None,
            open: None,
        }
    }

    fn finish(&mut self) {
        self.rx = None;
        disarm(&mut self.guard);
        if let Some(g) = &mut self.gone {
            // Ended by the server (a newer GET, the session's end): not a departure.
            g.armed = false;
        }
    }
}

impl Body for OutBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        let Some(rx) = this.rx.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(Push::Message(line))) => {
                Poll::Ready(Some(Ok(Frame::data(event(&line)))))
            }
            Poll::Ready(Some(Push::Response(line))) => {
                this.finish();
                Poll::Ready(Some(Ok(Frame::data(event(&line)))))
            }
            Poll::Ready(Some(Push::End) | None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rx.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.first, &self.rx) {
            (Some(b), None) => SizeHint::with_exact(b.len() as u64),
            (None, None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        assert_eq!(parse_session_id("s1"), Some(1));
        assert_eq!(parse_session_id("s42"), Some(42));
        for bad in ["", "s", "1", "s0x", "s01", "s+1", "S1", "s-1"] {
            assert_eq!(parse_session_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn bodies_become_one_line() {
        assert_eq!(one_line("{\n  \"a\": 1\r\n}\n"), "{   \"a\": 1 }");
        assert_eq!(one_line("{\"a\":1}"), "{\"a\":1}");
    }
}
