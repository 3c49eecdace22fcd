//! A scriptable fake Streamable HTTP MCP server on `127.0.0.1:0` (axum): records every
//! request on a channel, assigns session ids `s1`, `s2`, …, answers `initialize` as
//! JSON or SSE, serves one GET stream the test pushes events into, and can expire the
//! session (404, or 400 like server-everything), fail the next POST, or hold a call
//! until released. `sse-poll` closes its POST stream after a priming event and a
//! progress event (with `retry: 10`, SEP-1699) and serves the rest — the answer — on a
//! `GET` that names the last event in `Last-Event-ID`. `bad-params` gets a 400 with a
//! JSON-RPC error body while the session stays alive. Test code only.

use std::collections::HashMap;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// One request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub method: Method,
    pub headers: HeaderMap,
    /// The JSON body of a POST (`Null` otherwise).
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn rpc_method(&self) -> Option<&str> {
        self.body["method"].as_str()
    }
}

/// How the fake behaves; set before start, some of it changeable through [`Fake`].
#[derive(Debug, Clone)]
pub(crate) struct Script {
    /// Answer `initialize` as an SSE stream (with a log notification first).
    pub init_sse: bool,
    /// Answer `initialize` with this status instead.
    pub init_status: Option<u16>,
    /// Never answer `initialize`.
    pub hang_init: bool,
    /// Refuse the GET stream with 405.
    pub get_405: bool,
    /// The answer to an unknown session id (404 per spec; server-everything says 400).
    pub expired_status: u16,
    /// Hold `resources/unsubscribe` like `hold` (until [`Fake::release`]).
    pub hold_unsubscribe: bool,
    /// Answer this many resumptions of a POST stream with 409 (as the TypeScript SDK
    /// does while it still holds the old connection) before serving one.
    pub refuse_resumes: u32,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            init_sse: false,
            init_status: None,
            hang_init: false,
            get_405: false,
            expired_status: 404,
            hold_unsubscribe: false,
            refuse_resumes: 0,
        }
    }
}

struct Inner {
    script: Script,
    sessions: u32,
    live: Option<String>,
    /// The open GET stream's feed (raw SSE text).
    get_feed: Option<mpsc::UnboundedSender<String>>,
    fail_next: Option<u16>,
    /// A GET naming an event id this fake does not know is refused with 400 (as
    /// servers whose event store forgot it do).
    forget_event_ids: bool,
    held: Vec<oneshot::Sender<()>>,
    /// Events still to send on a resumed POST stream, by the last event id sent.
    polls: HashMap<String, Vec<Value>>,
    polls_made: u32,
    seen: mpsc::UnboundedSender<Seen>,
}

/// `/moved`: a 307 to `/mcp`, whatever the method.
async fn moved() -> Response {
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header("location", "/mcp")
        .body(Body::empty())
        .unwrap()
}

/// The test's handle on the fake.
#[derive(Clone)]
pub(crate) struct Fake {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl Fake {
    pub async fn start(script: Script) -> (Fake, mpsc::UnboundedReceiver<Seen>) {
        let (seen, seen_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Mutex::new(Inner {
            script,
            sessions: 0,
            live: None,
            get_feed: None,
            fail_next: None,
            forget_event_ids: false,
            held: Vec::new(),
            polls: HashMap::new(),
            polls_made: 0,
            seen,
        }));
        let app = Router::new()
            .route("/mcp", any(handle))
            // A moved endpoint, as servers mounted under a trailing slash answer.
            .route("/moved", any(moved))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let fake = Fake {
            url: format!("http://{addr}/mcp"),
            inner,
        };
        (fake, seen_rx)
    }

    /// Forgets the live session: its id now gets `expired_status`.
    pub fn expire(&self) {
        self.inner.lock().unwrap().live = None;
    }
    /// Answer `initialize` with this status from now on (`None`: succeed).
    pub fn set_init_status(&self, status: Option<u16>) {
        self.inner.lock().unwrap().script.init_status = status;
    }
    /// The next non-initialize POST gets this status.
    pub fn fail_next(&self, status: u16) {
        self.inner.lock().unwrap().fail_next = Some(status);
    }
    /// Pushes raw SSE text on the open GET stream; `false` when none is open.
    pub fn push(&self, sse: &str) -> bool {
        let inner = self.inner.lock().unwrap();
        inner
            .get_feed
            .as_ref()
            .is_some_and(|f| f.send(sse.to_owned()).is_ok())
    }
    /// From now on a GET naming an unknown event id gets 400.
    pub fn forget_event_ids(&self) {
        self.inner.lock().unwrap().forget_event_ids = true;
    }
    /// Ends the open GET stream.
    pub fn close_get(&self) {
        self.inner.lock().unwrap().get_feed = None;
    }
    /// Answers every held `hold` call.
    pub fn release(&self) {
        for h in self.inner.lock().unwrap().held.drain(..) {
            let _ = h.send(());
        }
    }
}

type Shared = Arc<Mutex<Inner>>;

async fn handle(
    State(inner): State<Shared>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let rpc = body["method"].as_str().unwrap_or_default().to_owned();
    let seen = Seen {
        method: method.clone(),
        headers: headers.clone(),
        body: body.clone(),
    };
    let mut held = None;
    // Decide under the lock, answer after it (the lock is never held across .await).
    let plan = {
        let mut st = inner.lock().unwrap();
        let holds = rpc == "hold" || (st.script.hold_unsubscribe && rpc == "resources/unsubscribe");
        if holds {
            let (tx, rx) = oneshot::channel();
            st.held.push(tx);
            held = Some(rx);
        }
        let _ = st.seen.send(seen);
        plan(&mut st, &method, &headers, &body, &rpc)
    };
    match plan {
        Plan::Hang => std::future::pending().await,
        Plan::Held(answer) => {
            let _ = held.expect("hold registered").await;
            json_response(&answer, None)
        }
        Plan::Reply(r) => r,
    }
}

enum Plan {
    Reply(Response),
    Hang,
    Held(Value),
}

fn plan(st: &mut Inner, method: &Method, headers: &HeaderMap, body: &Value, rpc: &str) -> Plan {
    if *method == Method::POST && rpc == "initialize" {
        if st.script.hang_init {
            return Plan::Hang;
        }
        if let Some(s) = st.script.init_status {
            return Plan::Reply(status(s));
        }
        st.sessions += 1;
        let sid = format!("s{}", st.sessions);
        st.live = Some(sid.clone());
        let answer = json!({"jsonrpc": "2.0", "id": body["id"], "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"resources": {"subscribe": true}},
            "serverInfo": {"name": "fake", "version": "1"},
        }});
        return Plan::Reply(if st.script.init_sse {
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "starting"}});
            sse_response(&[&log, &answer], Some(&sid))
        } else {
            json_response(&answer, Some(&sid))
        });
    }
    let sid = headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
    if sid.is_none() {
        return Plan::Reply(status(400));
    }
    if sid != st.live.as_deref() {
        return Plan::Reply(status(st.script.expired_status));
    }
    match *method {
        Method::GET => {
            let resume = headers.get("last-event-id").and_then(|v| v.to_str().ok());
            let known = resume.is_some_and(|id| st.polls.contains_key(id));
            if known && st.script.refuse_resumes > 0 {
                st.script.refuse_resumes -= 1;
                return Plan::Reply(status(409));
            }
            if resume.is_some() && !known && st.forget_event_ids {
                return Plan::Reply(status(400));
            }
            if let Some(rest) = resume.and_then(|id| st.polls.remove(id)) {
                let refs: Vec<&Value> = rest.iter().collect();
                let id = resume.expect("checked").to_owned();
                return Plan::Reply(sse_text(&id, None, &refs, None));
            }
            if st.script.get_405 {
                return Plan::Reply(status(405));
            }
            let (tx, rx) = mpsc::unbounded_channel::<String>();
            st.get_feed = Some(tx);
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|s| (Ok::<_, Infallible>(s), rx))
            });
            Plan::Reply(
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(stream))
                    .unwrap(),
            )
        }
        Method::DELETE => {
            st.live = None;
            Plan::Reply(status(200))
        }
        _ => {
            if let Some(s) = st.fail_next.take() {
                return Plan::Reply(status(s));
            }
            let id = &body["id"];
            if id.is_null() {
                return Plan::Reply(status(202));
            }
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"echo": body["params"]}});
            match rpc {
                "hold" => Plan::Held(answer),
                "resources/unsubscribe" if st.script.hold_unsubscribe => Plan::Held(answer),
                "sse" => {
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 1, "progress": 1}});
                    Plan::Reply(sse_response(&[&progress, &answer], None))
                }
                "no-answer" => Plan::Reply(status(202)),
                "sse-cut" => {
                    // No event ids: nothing to resume.
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 1, "progress": 1}});
                    let mut b = Response::builder().header("content-type", "text/event-stream");
                    b = b.status(200);
                    Plan::Reply(b.body(Body::from(format!("data: {progress}\n\n"))).unwrap())
                }
                "sse-poll" => {
                    st.polls_made += 1;
                    let stream = format!("poll{}", st.polls_made);
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 1, "progress": 1}});
                    let last = format!("{stream}-2");
                    st.polls.insert(last.clone(), vec![answer]);
                    // Priming event (id, empty data), the progress, then the
                    // connection closes before the answer.
                    Plan::Reply(sse_text(&stream, Some(10), &[&progress], Some(&last)))
                }
                "bad-params" => Plan::Reply(
                    Response::builder()
                        .status(400)
                        .header("content-type", "application/json")
                        .body(Body::from(
                            json!({"jsonrpc": "2.0", "id": null, "error":
                                {"code": -32602, "message": "Invalid params: bad-params"}})
                            .to_string(),
                        ))
                        .unwrap(),
                ),
                "batch" => {
                    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": "x"}});
                    Plan::Reply(json_response(&json!([note, answer]), None))
                }
                _ => Plan::Reply(json_response(&answer, None)),
            }
        }
    }
}

fn status(code: u16) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .body(Body::empty())
        .unwrap()
}

fn json_response(v: &Value, sid: Option<&str>) -> Response {
    let mut b = Response::builder().header("content-type", "application/json");
    if let Some(s) = sid {
        b = b.header("mcp-session-id", s);
    }
    b.body(Body::from(v.to_string())).unwrap()
}

/// An SSE body for a resumable stream: with `retry`, first a priming event (`id:
/// <stream>-0`, empty data); then each event with the ids `<stream>-1`, …; `last`
/// names the id of the final one when given.
fn sse_text(stream: &str, retry: Option<u64>, events: &[&Value], last: Option<&str>) -> Response {
    let mut text = String::new();
    if let Some(ms) = retry {
        text.push_str(&format!("id: {stream}-0\nretry: {ms}\ndata: \n\n"));
    }
    for (i, e) in events.iter().enumerate() {
        let id = match last {
            Some(l) if i + 1 == events.len() => l.to_owned(),
            _ => format!("{stream}-r{}", i + 1),
        };
        text.push_str(&format!("id: {id}\ndata: {e}\n\n"));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

fn sse_response(events: &[&Value], sid: Option<&str>) -> Response {
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        text.push_str(&format!("id: ev-{i}\ndata: {e}\n\n"));
    }
    let mut b = Response::builder().header("content-type", "text/event-stream");
    if let Some(s) = sid {
        b = b.header("mcp-session-id", s);
    }
    b.body(Body::from(text)).unwrap()
}
