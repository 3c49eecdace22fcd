//! The server state and the MCP method handlers (everything except the tools).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::modern::{self, Era, Listen, NACK_PREFIX};
use crate::recorder::{Recorder, PARSE_ERROR};
use crate::{base64, Config, Out};

pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
pub const LATEST_VERSION: &str = SUPPORTED_VERSIONS[0];

const STATIC_PREFIX: &str = "test://static/";
const DYNAMIC_PREFIX: &str = "test://dynamic/";
const CURSOR_PREFIX: &str = "scripted-offset-";

/// Whether the reader loop keeps going after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// An `exit` tool call: the writer exits the process; stop reading.
    Exit,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(-32602, message)
    }

    fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            e["data"] = data.clone();
        }
        e
    }
}

pub type Reply = Result<Value, RpcError>;

/// Who sent a message: the stdio client, an HTTP session (`s<N>`), or one stateless
/// HTTP request (a modern request without a session). Parked requests and listens
/// remember it, so a cancellation only matches its own client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Client {
    Stdio,
    Session(u64),
    Stateless(u64),
}

/// One message for an HTTP response stream (a POST's answer or a GET stream).
#[derive(Debug)]
pub enum Push {
    /// A notification or a server→client request.
    Message(String),
    /// The response to the POSTed request: the last message of its stream.
    Response(String),
    /// Ends the stream without a response (a listen ended by `notifications/cancelled`).
    End,
}

/// The sending half of an HTTP response stream.
pub type StreamTx = UnboundedSender<Push>;

/// A session's GET stream, if one is open (a newer GET replaces it).
#[derive(Debug, Default)]
pub struct GetSlot(Mutex<Option<StreamTx>>);

impl GetSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<StreamTx>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends on the open GET stream; without one the message is lost.
    pub fn send(&self, line: String) {
        if let Some(tx) = self.lock().as_ref() {
            let _ = tx.send(Push::Message(line));
        }
    }

    /// Makes `tx` the session's GET stream (the previous one, if any, ends).
    pub fn set(&self, tx: StreamTx) {
        *self.lock() = Some(tx);
    }

    /// Ends the GET stream, if any.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    /// Whether a GET stream is open (its client has not gone away).
    pub fn is_open(&self) -> bool {
        self.lock().as_ref().is_some_and(|tx| !tx.is_closed())
    }
}

/// Where an HTTP message's output goes: its own response stream (`stream`, for a
/// POSTed request), and its session's GET stream (`get`).
#[derive(Debug, Clone)]
pub struct Route {
    pub client: Client,
    pub get: Option<Arc<GetSlot>>,
    pub stream: Option<StreamTx>,
}

impl Route {
    /// Request-related messages: the request's own stream, else the GET stream.
    fn to_stream(&self, line: String) {
        match (&self.stream, &self.get) {
            (Some(tx), _) => {
                let _ = tx.send(Push::Message(line));
            }
            (None, Some(get)) => get.send(line),
            (None, None) => {}
        }
    }

    /// Server→client requests (and their cancellation): the session's GET stream, else
    /// (stateless) the request's own stream.
    fn to_session(&self, line: String) {
        match (&self.get, &self.stream) {
            (Some(get), _) => get.send(line),
            (None, Some(tx)) => {
                let _ = tx.send(Push::Message(line));
            }
            (None, None) => {}
        }
    }
}

#[derive(Clone)]
enum Sink {
    /// The stdout queue: everything goes there.
    Stdio(UnboundedSender<Out>),
    Http(Route),
}

/// Where a handler's messages go, with JSON-RPC helpers: stdout in stdio mode; in
/// HTTP mode the streams of the message being handled (cloned by parked requests, so
/// their later answers find their way back).
#[derive(Clone)]
pub struct Outbox(Sink);

impl Outbox {
    pub fn stdio(tx: UnboundedSender<Out>) -> Self {
        Outbox(Sink::Stdio(tx))
    }

    pub fn http(route: Route) -> Self {
        Outbox(Sink::Http(route))
    }

    /// An HTTP outbox that drops everything (between messages).
    pub fn nowhere() -> Self {
        Outbox::http(Route {
            client: Client::Stateless(0),
            get: None,
            stream: None,
        })
    }

    pub fn client(&self) -> Client {
        match &self.0 {
            Sink::Stdio(_) => Client::Stdio,
            Sink::Http(route) => route.client,
        }
    }

    fn line(&self, msg: &Value) -> Option<String> {
        match &self.0 {
            Sink::Stdio(tx) => {
                // A closed channel means the writer died (stdout gone); nothing left to do.
                let _ = tx.send(Out::Line(msg.to_string()));
                None
            }
            Sink::Http(_) => Some(msg.to_string()),
        }
    }

    /// A notification (or any message) related to the message being handled.
    pub fn send(&self, msg: &Value) {
        if let (Some(line), Sink::Http(route)) = (self.line(msg), &self.0) {
            route.to_stream(line);
        }
    }

    /// [`Outbox::send`] of a message already serialized (a burst's lines are built
    /// without an intermediate `Value`).
    pub fn send_line(&self, line: String) {
        match &self.0 {
            Sink::Stdio(tx) => {
                let _ = tx.send(Out::Line(line));
            }
            Sink::Http(route) => route.to_stream(line),
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// A server→client request (HTTP: on the session's GET stream).
    pub fn request(&self, id: &str, method: &str, params: Value) {
        self.to_session(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// A notification about a server→client request (HTTP: on the session's GET stream).
    pub fn notify_session(&self, method: &str, params: Value) {
        self.to_session(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn to_session(&self, msg: &Value) {
        if let (Some(line), Sink::Http(route)) = (self.line(msg), &self.0) {
            route.to_session(line);
        }
    }

    /// The response (HTTP: the last message of the request's stream).
    pub fn reply(&self, id: Value, reply: Reply) {
        let msg = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}),
        };
        if let (Some(line), Sink::Http(route)) = (self.line(&msg), &self.0) {
            if let Some(tx) = &route.stream {
                let _ = tx.send(Push::Response(line));
            }
        }
    }

    /// Ends the request's stream without a response (HTTP only; stdio has no streams).
    pub fn end(&self) {
        if let Sink::Http(Route {
            stream: Some(tx), ..
        }) = &self.0
        {
            let _ = tx.send(Push::End);
        }
    }

    pub fn exit(&self, code: i32) {
        match &self.0 {
            Sink::Stdio(tx) => {
                if tx.send(Out::Exit(code)).is_err() {
                    // The writer is gone (stdout closed): nothing to flush.
                    std::process::exit(code);
                }
            }
            // Nothing buffered: every response stream is written as it goes.
            Sink::Http(_) => std::process::exit(code),
        }
    }
}

/// A `resources/read` parked by `hold_reads`, with the reply computed at arrival.
pub struct HeldRead {
    pub uri: String,
    pub id: Value,
    pub reply: Reply,
    /// Where the answer goes.
    pub out: Outbox,
}

/// A parked request (`hang`): its id, and where its client is.
pub struct Parked {
    pub id: Value,
    pub out: Outbox,
}

/// A `sample` (or conformance) tool call waiting for the client's answer to the
/// server→client request it sent.
pub struct Sampling {
    /// The tool call's id.
    pub call_id: Value,
    /// Whether that call was a modern request.
    pub modern: bool,
    pub out: Outbox,
}

/// What the server keeps per session: stdio has one (`Client::Stdio`); HTTP one per
/// `Mcp-Session-Id`.
#[derive(Default)]
pub struct SessionState {
    /// URIs of `resources/subscribe` (legacy).
    pub subscribed: BTreeSet<String>,
    /// HTTP: the GET stream.
    pub get: Arc<GetSlot>,
    /// HTTP: one clone per open request stream (POST answer) of the session, so its
    /// strong count tells whether the client still has one open (the session's end
    /// by disconnect, `http.rs`).
    pub requests: Arc<()>,
}

/// Sessions, open and past, and the HTTP requests refused for their session id.
#[derive(Default)]
pub struct Sessions {
    pub open: BTreeMap<Client, SessionState>,
    pub opened: u64,
    pub ended: u64,
    /// Of `ended`: sessions ended because their client went away (HTTP mode, "A session
    /// ends when its client goes away").
    pub gone: u64,
    /// HTTP requests refused with 400 for lack of an `Mcp-Session-Id`.
    pub missing: u64,
    /// HTTP requests refused with 404 for an unknown `Mcp-Session-Id`.
    pub unknown: u64,
    /// Stateless HTTP requests so far (each is its own `Client::Stateless`).
    pub stateless: u64,
}

pub struct Server {
    pub config: Config,
    pub out: Outbox,
    pub recorder: Recorder,
    /// Per-session state (subscriptions): one session in stdio mode.
    pub sessions: Sessions,
    /// Updates emitted per URI; absent means 0.
    pub versions: BTreeMap<String, u64>,
    pub holds: HashSet<String>,
    pub held: Vec<HeldRead>,
    pub faults: HashMap<String, RpcError>,
    /// `hang` calls that were never answered.
    pub hung: Vec<Parked>,
    /// Outstanding `sampling/createMessage` id → the tool call waiting for its answer.
    pub sampling: BTreeMap<String, Sampling>,
    pub next_sample: u64,
    /// Whether a legacy `initialize` happened (dual mode sends untagged notifications
    /// only then).
    pub legacy_session: bool,
    /// Open `subscriptions/listen` requests, in the order they were opened.
    pub listens: Vec<Listen>,
    /// Listens ever opened.
    pub listens_opened: u64,
}

impl Server {
    /// A stdio server writing to `tx`: one session, always open.
    pub fn new(config: Config, tx: UnboundedSender<Out>) -> Self {
        let mut server = Server::with_outbox(config, Outbox::stdio(tx));
        server
            .sessions
            .open
            .insert(Client::Stdio, SessionState::default());
        server.sessions.opened = 1;
        server
    }

    /// An HTTP server: no session yet; each message brings its own [`Route`].
    pub fn new_http(config: Config) -> Self {
        Server::with_outbox(config, Outbox::nowhere())
    }

    fn with_outbox(config: Config, out: Outbox) -> Self {
        let recorder = Recorder::new(config.log_path.as_deref());
        Server {
            config,
            out,
            recorder,
            sessions: Sessions::default(),
            versions: BTreeMap::new(),
            holds: HashSet::new(),
            held: Vec::new(),
            faults: HashMap::new(),
            hung: Vec::new(),
            sampling: BTreeMap::new(),
            next_sample: 1,
            legacy_session: false,
            listens: Vec::new(),
            listens_opened: 0,
        }
    }

    pub fn log_line(&mut self, line: &str) {
        self.recorder.log_line(line);
    }

    /// Records and handles one received line.
    pub async fn handle_line(&mut self, line: &str) -> Flow {
        let msg: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                self.recorder.count(PARSE_ERROR);
                eprintln!("[scripted] parse error: {e}");
                self.out
                    .reply(Value::Null, Err(RpcError::new(-32700, "Parse error")));
                return Flow::Continue;
            }
        };
        self.handle_message(msg).await
    }

    /// HTTP: records and handles one message with its output going to `route`.
    pub async fn handle_routed(&mut self, msg: Value, route: Route) -> Flow {
        self.out = Outbox::http(route);
        let flow = self.handle_message(msg).await;
        // Drop this message's streams: only parked requests keep them open.
        self.out = Outbox::nowhere();
        flow
    }

    /// Whether a request is served the modern way (see the crate doc, Eras).
    pub fn is_modern(&self, method: &str, params: &Value) -> bool {
        match self.config.era {
            Era::Legacy => false,
            Era::Modern => true,
            // `initialize` always opens a legacy session in dual mode.
            Era::Dual => method != "initialize" && modern::is_modern_request(params),
        }
    }

    /// Records and handles one parsed message.
    async fn handle_message(&mut self, msg: Value) -> Flow {
        self.recorder.record(&msg);
        let Value::Object(obj) = msg else {
            // Batches (2025-03-26 only) are not supported by this test server.
            self.out
                .reply(Value::Null, Err(RpcError::new(-32600, "Invalid Request")));
            return Flow::Continue;
        };
        let params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
        match (obj.get("method").and_then(Value::as_str), obj.get("id")) {
            (Some(method), Some(id)) => self.handle_request(id.clone(), method, params).await,
            (Some(method), None) => {
                self.handle_notification(method, &params);
                Flow::Continue
            }
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                self.handle_response(id, &obj);
                Flow::Continue
            }
            (None, id) => {
                let id = id.cloned().unwrap_or(Value::Null);
                self.out
                    .reply(id, Err(RpcError::new(-32600, "Invalid Request")));
                Flow::Continue
            }
        }
    }

    async fn handle_request(&mut self, id: Value, method: &str, params: Value) -> Flow {
        let modern = self.is_modern(method, &params);
        if modern {
            let valid = if method == "initialize" {
                let requested = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Err(modern::unsupported_version(requested))
            } else {
                modern::validate(&params)
            };
            if let Err(e) = valid {
                self.out.reply(id, Err(e));
                return Flow::Continue;
            }
        }
        let reply = match method {
            "initialize" => {
                self.legacy_session = true;
                Some(Ok(self.initialize(&params)))
            }
            "ping" | "logging/setLevel" if !modern => Some(Ok(json!({}))),
            "completion/complete" => Some(Ok(complete(&params))),
            "resources/list" => Some(self.list_resources(&params)),
            "resources/templates/list" => {
                let mut templates = vec![json!({
                    "uriTemplate": format!("{DYNAMIC_PREFIX}{{id}}"),
                    "name": "dynamic",
                    "description": "Any id exists; text, or blob when the id contains \"blob\"",
                    "mimeType": "text/plain",
                })];
                if self.config.conformance {
                    templates.extend(crate::conformance::templates());
                }
                Some(Ok(json!({"resourceTemplates": templates})))
            }
            "resources/read" => self.read_resource(id.clone(), &params, modern),
            "resources/subscribe" if !modern => Some(str_param(&params, "uri").map(|uri| {
                if let Some(session) = self.sessions.open.get_mut(&self.out.client()) {
                    session.subscribed.insert(uri.to_owned());
                }
                json!({})
            })),
            "resources/unsubscribe" if !modern => Some(str_param(&params, "uri").map(|uri| {
                if let Some(session) = self.sessions.open.get_mut(&self.out.client()) {
                    session.subscribed.remove(uri);
                }
                json!({})
            })),
            "prompts/list" => {
                let mut prompts = vec![json!({
                    "name": "greet",
                    "description": "Greets someone",
                    "arguments": [{"name": "name", "description": "Who to greet", "required": true}],
                })];
                if self.config.conformance {
                    prompts.extend(crate::conformance::prompts(self.config.era));
                }
                Some(Ok(json!({"prompts": prompts})))
            }
            "prompts/get" => Some(
                self.config
                    .conformance
                    .then(|| {
                        let name = params["name"].as_str().unwrap_or_default();
                        crate::conformance_modern::get_prompt(
                            name,
                            &params,
                            modern,
                            self.config.era,
                        )
                        .or_else(|| crate::conformance::prompt(name, &params["arguments"]))
                    })
                    .flatten()
                    .unwrap_or_else(|| get_prompt(&params)),
            ),
            "tools/list" => {
                // The fixtures first: the suite calls the first listed tool with `{}`.
                let mut tools = if self.config.conformance {
                    crate::conformance::tools(self.config.era)
                } else {
                    Vec::new()
                };
                tools.extend(crate::tools::definitions(
                    self.config.era,
                    self.config.http.is_some(),
                ));
                Some(Ok(json!({"tools": tools})))
            }
            "tools/call" => return self.call_tool(id, &params, modern).await,
            "server/discover" if modern => Some(Ok(self.discover())),
            "subscriptions/listen" if modern => self.listen(&id, &params),
            _ => Some(Err(RpcError::new(
                -32601,
                format!("Method not found: {method}"),
            ))),
        };
        if let Some(reply) = reply {
            let reply = if modern {
                self.finish_modern(method, &params, reply)
            } else {
                reply
            };
            self.out.reply(id, reply);
        }
        Flow::Continue
    }

    fn handle_notification(&mut self, method: &str, params: &Value) {
        if method == "notifications/cancelled" {
            if let Some(request_id) = params.get("requestId") {
                self.cancel(request_id);
            }
        }
    }

    /// Drops the sender's parked request or open listen `request_id` (silently);
    /// cancelling a `sample` call also cancels its `sampling/createMessage` towards the
    /// client.
    fn cancel(&mut self, request_id: &Value) {
        self.cancel_as(self.out.client(), request_id);
    }

    /// [`Server::cancel`] for `client`'s request (HTTP: a modern request whose stream
    /// the client closed).
    pub fn cancel_as(&mut self, client: Client, request_id: &Value) {
        let mine = |id: &Value, out: &Outbox| id == request_id && out.client() == client;
        self.held.retain(|h| !mine(&h.id, &h.out));
        self.hung.retain(|p| !mine(&p.id, &p.out));
        self.cancel_listen(client, request_id);
        let sample = self
            .sampling
            .iter()
            .find(|(_, s)| mine(&s.call_id, &s.out))
            .map(|(sample_id, _)| sample_id.clone());
        if let Some(sample) = sample.and_then(|id| self.sampling.remove_entry(&id)) {
            let (sample_id, s) = sample;
            s.out.notify_session(
                "notifications/cancelled",
                json!({"requestId": sample_id, "reason": "sample tool call cancelled"}),
            );
        }
    }

    /// Forgets everything `client` left parked (its session ended): held reads, hangs,
    /// sample calls and listens, whose streams then end without a response.
    pub fn drop_parked(&mut self, client: Client) {
        self.held.retain(|h| h.out.client() != client);
        self.hung.retain(|p| p.out.client() != client);
        self.sampling.retain(|_, s| s.out.client() != client);
        self.drop_listens(client);
    }

    /// A response from the client: completes a pending `sample` tool call.
    fn handle_response(&mut self, id: &Value, obj: &Map<String, Value>) {
        let Some(Sampling {
            call_id,
            modern,
            out,
        }) = id.as_str().and_then(|s| self.sampling.remove(s))
        else {
            eprintln!("[scripted] ignoring response to unknown request {id}");
            return;
        };
        let result = match (obj.get("result"), obj.get("error")) {
            (Some(result), _) => crate::conformance_modern::answer_result(result),
            (None, error) => json!({
                "content": [{"type": "text", "text": error.cloned().unwrap_or(Value::Null).to_string()}],
                "isError": true,
            }),
        };
        out.reply(call_id, modern::mark(Ok(result), modern));
    }

    fn initialize(&self, params: &Value) -> Value {
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = requested
            .filter(|v| SUPPORTED_VERSIONS.contains(v))
            .unwrap_or(LATEST_VERSION);
        json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": {"name": self.config.name, "version": "1.0.0"},
        })
    }

    /// The capabilities `initialize` and `server/discover` declare.
    pub fn capabilities(&self) -> Value {
        let resources = if self.config.no_subscribe {
            json!({"listChanged": true})
        } else {
            json!({"subscribe": true, "listChanged": true})
        };
        json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": resources,
            "logging": {},
            "completions": {},
        })
    }

    fn list_resources(&self, params: &Value) -> Reply {
        let start = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(cursor) => cursor
                .as_str()
                .and_then(|c| c.strip_prefix(CURSOR_PREFIX))
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| n < self.config.resources)
                .ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?,
        };
        let end = start
            .saturating_add(self.config.page_size as u64)
            .min(self.config.resources);
        let resources: Vec<Value> = (start + 1..=end)
            .map(|k| {
                let mime = if k % 2 == 0 {
                    "application/octet-stream"
                } else {
                    "text/plain"
                };
                json!({"uri": format!("{STATIC_PREFIX}{k}"), "name": format!("static-{k}"), "mimeType": mime})
            })
            .collect();
        let mut resources = resources;
        if self.config.conformance && start == 0 {
            resources.extend(crate::conformance::resources(self.config.era));
        }
        let mut result = json!({"resources": resources});
        if end < self.config.resources {
            result["nextCursor"] = json!(format!("{CURSOR_PREFIX}{end}"));
        }
        Ok(result)
    }

    /// `None` when the read is parked by `hold_reads`. A modern reply is finished
    /// (`resultType`, `ttlMs`, `cacheScope`) at arrival, like its content.
    fn read_resource(&mut self, id: Value, params: &Value, modern: bool) -> Option<Reply> {
        let uri = match str_param(params, "uri") {
            Ok(uri) => uri.to_owned(),
            Err(e) => return Some(Err(e)),
        };
        let mrtr = self
            .config
            .conformance
            .then(|| crate::conformance_modern::read(&uri, params, modern, self.config.era))
            .flatten();
        let reply = if let Some(fault) = self.faults.get(&uri) {
            Err(fault.clone())
        } else if let Some(reply) = mrtr {
            reply
        } else if let Some(contents) = self
            .config
            .conformance
            .then(|| crate::conformance::read(&uri))
            .flatten()
            .or_else(|| self.contents(&uri))
        {
            Ok(json!({"contents": [contents]}))
        } else {
            Err(RpcError {
                // 2026-07-28 replaced the legacy -32002 by -32602.
                code: if modern { -32602 } else { -32002 },
                message: "Resource not found".to_owned(),
                data: Some(json!({"uri": uri})),
            })
        };
        let reply = if modern {
            self.finish_modern("resources/read", params, reply)
        } else {
            reply
        };
        if self.holds.contains(&uri) {
            let out = self.out.clone();
            self.held.push(HeldRead {
                uri,
                id,
                reply,
                out,
            });
            None
        } else {
            Some(reply)
        }
    }

    fn version(&self, uri: &str) -> u64 {
        self.versions.get(uri).copied().unwrap_or(0)
    }

    /// The current contents of `uri`, or `None` if it does not exist.
    pub fn contents(&self, uri: &str) -> Option<Value> {
        let static_index = uri
            .strip_prefix(STATIC_PREFIX)
            .and_then(|k| k.parse::<u64>().ok())
            .filter(|k| (1..=self.config.resources).contains(k));
        let dynamic = [DYNAMIC_PREFIX, NACK_PREFIX].iter().any(|prefix| {
            uri.strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty())
        });
        if static_index.is_none() && !dynamic {
            return None;
        }
        let label = format!("{uri} v{}", self.version(uri));
        if static_index.is_some_and(|k| k % 2 == 0) || uri.contains("blob") {
            Some(json!({
                "uri": uri,
                "mimeType": "application/octet-stream",
                "blob": base64::encode(&blob_bytes(&label)),
            }))
        } else {
            Some(json!({"uri": uri, "mimeType": "text/plain", "text": label}))
        }
    }
}

/// Blob payload: every byte value `0..=255`, then `" <uri> v<version>"`.
pub fn blob_bytes(label: &str) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.push(b' ');
    bytes.extend_from_slice(label.as_bytes());
    bytes
}

/// A required string field of `params`/`arguments`, or `-32602`.
pub fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("missing string argument `{key}`")))
}

fn get_prompt(params: &Value) -> Reply {
    let name = str_param(params, "name")?;
    if name != "greet" {
        return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
    }
    let who = str_param(params.get("arguments").unwrap_or(&Value::Null), "name")?;
    Ok(json!({
        "description": "Greets someone",
        "messages": [{"role": "user", "content": {"type": "text", "text": format!("Hello, {who}!")}}],
    }))
}

fn complete(params: &Value) -> Value {
    let prefix = params
        .pointer("/argument/value")
        .and_then(Value::as_str)
        .unwrap_or("");
    let candidates: &[&str] = match params.pointer("/ref/type").and_then(Value::as_str) {
        Some("ref/prompt") => &["Alice", "Bob", "Carol"],
        Some("ref/resource") => &["1", "2", "3", "blob-1"],
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.starts_with(prefix))
        .collect();
    json!({"completion": {"values": values, "total": values.len(), "hasMore": false}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(resources: u64, page_size: usize) -> Server {
        let config = Config {
            resources,
            page_size,
            ..Config::for_tests(Era::Legacy)
        };
        Server::new(config, tokio::sync::mpsc::unbounded_channel().0)
    }

    #[test]
    fn pagination_covers_every_resource_once() {
        let s = server(7, 3);
        let mut cursor = Value::Null;
        let mut uris = Vec::new();
        loop {
            let page = s.list_resources(&json!({"cursor": cursor})).unwrap();
            for r in page["resources"].as_array().unwrap() {
                uris.push(r["uri"].as_str().unwrap().to_owned());
            }
            match page.get("nextCursor") {
                Some(next) => cursor = next.clone(),
                None => break,
            }
        }
        let expected: Vec<String> = (1..=7).map(|k| format!("test://static/{k}")).collect();
        assert_eq!(uris, expected);
        assert!(s.list_resources(&json!({"cursor": "bogus"})).is_err());
    }

    #[test]
    fn contents_kinds() {
        let s = server(4, 100);
        assert_eq!(
            s.contents("test://static/1").unwrap()["text"],
            "test://static/1 v0"
        );
        assert!(s.contents("test://static/2").unwrap()["blob"].is_string());
        assert!(s.contents("test://dynamic/blob-x").unwrap()["blob"].is_string());
        assert!(s.contents("test://dynamic/x").unwrap()["text"].is_string());
        assert!(s.contents("test://static/5").is_none());
        assert!(s.contents("test://dynamic/").is_none());
        assert!(s.contents("file:///x").is_none());
    }
}
