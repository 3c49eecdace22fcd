//! The control tools: `tools/list` definitions and `tools/call` handlers.

use serde_json::{json, Value};

use crate::modern::{self, Era};
use crate::server::{str_param, Client, Flow, HeldRead, Parked, Reply, RpcError, Sampling, Server};

/// Updates emitted by `emit_updates` between yields to the writer task.
const UPDATES_PER_YIELD: u64 = 256;

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    })
}

/// Every tool, as listed by `tools/list` (`ask` and `end_listens` only in dual and
/// modern modes, `session` and `end_session` only in HTTP mode).
pub fn definitions(era: Era, http: bool) -> Vec<Value> {
    let uri = json!({"type": "string", "description": "Resource URI"});
    let meta = json!({"type": "object", "description": "Sent as the notification's _meta"});
    let stamp = json!({
        "type": "boolean",
        "description": "Set _meta.t to the emission time (UNIX epoch nanoseconds) on each update",
    });
    let mut tools = vec![
        tool(
            "echo",
            "Returns its text",
            json!({"text": {"type": "string"}}),
            &["text"],
        ),
        tool(
            "emit_update",
            "Bumps the URI's version and sends notifications/resources/updated before the result",
            json!({"uri": uri, "meta": meta, "stamp": stamp}),
            &["uri"],
        ),
        tool(
            "emit_updates",
            "Sends `count` notifications/resources/updated for the URI, then the result",
            json!({"uri": uri, "count": {"type": "integer", "minimum": 0}, "meta": meta, "stamp": stamp}),
            &["uri", "count"],
        ),
        tool(
            "emit_list_changed",
            "Sends notifications/<kind>/list_changed",
            json!({"kind": {"type": "string", "enum": ["tools", "prompts", "resources"]}}),
            &["kind"],
        ),
        tool(
            "stats",
            "Counters of received messages, subscriptions and pending requests",
            json!({}),
            &[],
        ),
        tool(
            "hold_reads",
            "Parks later resources/read of the URI until release_reads",
            json!({"uri": uri}),
            &["uri"],
        ),
        tool(
            "release_reads",
            "Answers the parked reads of the URI with the content as of their arrival",
            json!({"uri": uri}),
            &["uri"],
        ),
        tool(
            "fail_reads",
            "Makes resources/read of the URI answer a JSON-RPC error until clear_faults",
            json!({
                "uri": uri,
                "code": {"type": "integer", "default": -32603},
                "message": {"type": "string"},
            }),
            &["uri"],
        ),
        tool(
            "clear_faults",
            "Removes every fail_reads fault",
            json!({}),
            &[],
        ),
        tool(
            "hang",
            "Never answers (until notifications/cancelled)",
            json!({}),
            &[],
        ),
        tool(
            "regional",
            "Echoes `region` and `query`; `region` is mirrored in the Mcp-Param-Region header (x-mcp-header)",
            json!({
                "region": {"type": "string", "x-mcp-header": "Region"},
                "query": {"type": "string"},
            }),
            &["region"],
        ),
        tool(
            "delay",
            "Answers `text` after `ms` milliseconds (other requests are served meanwhile)",
            json!({"ms": {"type": "integer", "minimum": 0}, "text": {"type": "string"}}),
            &["ms"],
        ),
        tool(
            "exit",
            "Flushes stdout and exits the process",
            json!({"code": {"type": "integer", "default": 0}}),
            &[],
        ),
        tool(
            "progress",
            "Sends `steps` notifications/progress when the call has a progressToken (one every `interval_ms`, default all at once)",
            json!({"steps": {"type": "integer", "minimum": 0}, "interval_ms": {"type": "integer", "minimum": 0}}),
            &["steps"],
        ),
        tool(
            "sample",
            "Sends sampling/createMessage to the client and returns its answer",
            json!({"prompt": {"type": "string"}}),
            &["prompt"],
        ),
        tool(
            "log",
            "Sends notifications/message",
            json!({
                "level": {"type": "string", "default": "info"},
                "data": {"description": "Any JSON value"},
            }),
            &[],
        ),
    ];
    if era != Era::Legacy {
        tools.push(tool(
            "ask",
            "MRTR (modern requests only): asks the client `rounds` questions through input_required results, then returns the answers",
            json!({
                "rounds": {"type": "integer", "minimum": 1, "default": 1},
                "method": {
                    "type": "string",
                    "enum": ["elicitation/create", "sampling/createMessage", "roots/list"],
                    "default": "elicitation/create",
                },
            }),
            &[],
        ));
        tools.push(tool(
            "end_listens",
            "Ends every open subscriptions/listen, with a graceful result or notifications/cancelled",
            json!({"how": {"type": "string", "enum": ["result", "cancelled"], "default": "result"}}),
            &[],
        ));
    }
    if let Some(name) = extra_tool() {
        tools.push(tool(
            &name,
            "SCRIPTED_EXTRA_TOOL: answers with this server's name",
            json!({}),
            &[],
        ));
    }
    if http {
        tools.push(tool(
            "session",
            "The caller's Mcp-Session-Id (s1, s2, ...), or \"stateless\"",
            json!({}),
            &[],
        ));
        tools.push(tool(
            "end_session",
            "Ends a session as DELETE does (default: the caller's); its next request gets 404",
            json!({"session": {"type": "string", "description": "s<N>"}}),
            &[],
        ));
    }
    tools
}

/// The tool `SCRIPTED_EXTRA_TOOL` names, if any (a name only this server offers).
fn extra_tool() -> Option<String> {
    std::env::var("SCRIPTED_EXTRA_TOOL")
        .ok()
        .filter(|n| !n.is_empty())
}

pub(crate) fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

fn structured_result(value: Value) -> Value {
    json!({"content": [{"type": "text", "text": value.to_string()}], "structuredContent": value})
}

pub(crate) fn u64_arg(args: &Value, key: &str) -> Result<Option<u64>, RpcError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            RpcError::invalid_params(format!("`{key}` must be a non-negative integer"))
        }),
    }
}

fn i64_arg(args: &Value, key: &str) -> Result<Option<i64>, RpcError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params(format!("`{key}` must be an integer"))),
    }
}

/// What a tool handler did with the call.
enum Outcome {
    Reply(Reply),
    /// Answered later (or never): the call id was stored in the state.
    Parked,
    Exit,
}

impl From<Reply> for Outcome {
    fn from(reply: Reply) -> Self {
        Outcome::Reply(reply)
    }
}

impl Server {
    /// `modern`: the call is a modern request (its results get `resultType`).
    pub async fn call_tool(&mut self, id: Value, params: &Value, modern: bool) -> Flow {
        let outcome = match str_param(params, "name") {
            Err(e) => Outcome::Reply(Err(e)),
            Ok(name) => {
                let args = params
                    .get("arguments")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if args.is_object() {
                    self.run_tool(&id, name, &args, params, modern).await
                } else {
                    Outcome::Reply(Err(RpcError::invalid_params(
                        "`arguments` must be an object",
                    )))
                }
            }
        };
        match outcome {
            Outcome::Reply(reply) => {
                self.out.reply(id, modern::mark(reply, modern));
                Flow::Continue
            }
            Outcome::Parked => Flow::Continue,
            Outcome::Exit => Flow::Exit,
        }
    }

    async fn run_tool(
        &mut self,
        id: &Value,
        name: &str,
        args: &Value,
        params: &Value,
        modern: bool,
    ) -> Outcome {
        match name {
            n if extra_tool().as_deref() == Some(n) => {
                Ok(text_result(self.config.name.clone())).into()
            }
            "echo" => str_param(args, "text").map(text_result).into(),
            "emit_update" => self.emit_updates(args, Some(1)).await.into(),
            "emit_updates" => self.emit_updates(args, None).await.into(),
            "emit_list_changed" => self.emit_list_changed(args).into(),
            "stats" => Ok(structured_result(self.stats())).into(),
            "hold_reads" => str_param(args, "uri")
                .map(|uri| {
                    self.holds.insert(uri.to_owned());
                    text_result(format!("holding reads of {uri}"))
                })
                .into(),
            "release_reads" => self.release_reads(args).into(),
            "fail_reads" => self.fail_reads(args).into(),
            "clear_faults" => {
                let n = self.faults.len();
                self.faults.clear();
                Ok(text_result(format!("cleared {n} faults"))).into()
            }
            "hang" => {
                self.hung.push(Parked {
                    id: id.clone(),
                    out: self.out.clone(),
                });
                Outcome::Parked
            }
            "regional" => str_param(args, "region")
                .map(|r| text_result(format!("{r}: {}", args["query"].as_str().unwrap_or(""))))
                .into(),
            "delay" => match i64_arg(args, "ms") {
                Ok(Some(ms)) if ms >= 0 => {
                    let text = args
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("delayed");
                    let (out, id, text) = (self.out.clone(), id.clone(), text.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await;
                        out.reply(id, modern::mark(Ok(text_result(text)), modern));
                    });
                    Outcome::Parked
                }
                Ok(_) => Err(RpcError::invalid_params(
                    "`ms` must be a non-negative integer",
                ))
                .into(),
                Err(e) => Err(e).into(),
            },
            "exit" => match i64_arg(args, "code") {
                Err(e) => Err(e).into(),
                Ok(code) => {
                    let code = i32::try_from(code.unwrap_or(0)).unwrap_or(1);
                    eprintln!("[scripted] exit tool: exiting with {code}");
                    self.out.exit(code);
                    Outcome::Exit
                }
            },
            "progress" => match u64_arg(args, "interval_ms") {
                Ok(Some(ms)) if ms > 0 => self.paced_progress(id, args, params, ms, modern),
                Ok(_) => self.progress(args, params).into(),
                Err(e) => Err(e).into(),
            },
            "sample" => match str_param(args, "prompt") {
                Err(e) => Err(e).into(),
                Ok(prompt) => {
                    let sample_id = format!("s{}", self.next_sample);
                    self.next_sample += 1;
                    let waiting = Sampling {
                        call_id: id.clone(),
                        modern,
                        out: self.out.clone(),
                    };
                    self.sampling.insert(sample_id.clone(), waiting);
                    if let Some(data) = args.get("log") {
                        // A log line tied to no request id, just before the request
                        // (HTTP mode: both on the session's GET stream, in this order).
                        self.out.notify_session(
                            "notifications/message",
                            json!({"level": "info", "logger": "scripted", "data": data}),
                        );
                    }
                    self.out.request(
                        &sample_id,
                        "sampling/createMessage",
                        json!({
                            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                            "maxTokens": 64,
                        }),
                    );
                    Outcome::Parked
                }
            },
            "log" => {
                let level = args.get("level").and_then(Value::as_str).unwrap_or("info");
                let data = args
                    .get("data")
                    .cloned()
                    .unwrap_or_else(|| json!("scripted log"));
                self.out.notify(
                    "notifications/message",
                    json!({"level": level, "logger": "scripted", "data": data}),
                );
                Ok(text_result("logged")).into()
            }
            "ask" if self.config.era != Era::Legacy => self.ask(args, params, modern).into(),
            "end_listens" if self.config.era != Era::Legacy => self.end_listens(args).into(),
            "session" if self.config.http.is_some() => {
                let session = match self.out.client() {
                    Client::Session(n) => format!("s{n}"),
                    Client::Stdio | Client::Stateless(_) => "stateless".to_owned(),
                };
                let mut result = text_result(session.clone());
                result["structuredContent"] = json!({"session": session});
                Ok(result).into()
            }
            "end_session" if self.config.http.is_some() => self.end_session_tool(args).into(),
            n if self.config.conformance && crate::conformance::is_tool(n, self.config.era) => {
                self.conformance_tool(id, n, args, params, modern)
            }
            _ => Err(RpcError::invalid_params(format!("Unknown tool: {name}"))).into(),
        }
    }

    /// `emit_update` (`count` fixed to 1) and `emit_updates`.
    async fn emit_updates(&mut self, args: &Value, fixed_count: Option<u64>) -> Reply {
        let uri = str_param(args, "uri")?.to_owned();
        let count = match fixed_count {
            Some(n) => n,
            None => u64_arg(args, "count")?
                .ok_or_else(|| RpcError::invalid_params("missing integer argument `count`"))?,
        };
        let stamp = match args.get("stamp") {
            None | Some(Value::Null) => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| RpcError::invalid_params("`stamp` must be a boolean"))?,
        };
        let mut params = json!({"uri": uri});
        if let Some(meta) = args.get("meta").filter(|m| !m.is_null()) {
            params["_meta"] = meta.clone();
        }
        if stamp && !params["_meta"].is_object() {
            params["_meta"] = json!({});
        }
        // HTTP: sessions exist only after a legacy `initialize`, so it is always allowed.
        let untagged = self.config.http.is_some() || self.untagged_allowed();
        for i in 1..=count {
            match self.versions.get_mut(&uri) {
                Some(v) => *v += 1,
                None => {
                    self.versions.insert(uri.clone(), 1);
                }
            }
            if stamp {
                params["_meta"]["t"] = json!(unix_nanos());
            }
            if untagged {
                self.notify_sessions_updated(&uri, &params);
            }
            self.notify_listens_updated(&uri, &params);
            if i % UPDATES_PER_YIELD == 0 {
                // Let the writer start draining while a large burst is produced.
                tokio::task::yield_now().await;
            }
        }
        let version = self.versions.get(&uri).copied().unwrap_or(0);
        Ok(structured_result(
            json!({"uri": uri, "version": version, "emitted": count}),
        ))
    }

    pub(crate) fn emit_list_changed(&mut self, args: &Value) -> Reply {
        let kind = str_param(args, "kind")?;
        if !matches!(kind, "tools" | "prompts" | "resources") {
            return Err(RpcError::invalid_params(format!(
                "`kind` must be tools, prompts or resources, not {kind:?}"
            )));
        }
        let method = format!("notifications/{kind}/list_changed");
        if self.config.http.is_some() {
            let line = json!({"jsonrpc": "2.0", "method": method, "params": {}}).to_string();
            for session in self.sessions.open.values() {
                session.get.send(line.clone());
            }
        } else if self.untagged_allowed() {
            self.out.notify(&method, json!({}));
        }
        self.notify_listens_list_changed(kind);
        Ok(text_result(format!("sent {method}")))
    }

    fn release_reads(&mut self, args: &Value) -> Reply {
        let uri = str_param(args, "uri")?;
        self.holds.remove(uri);
        let (released, kept): (Vec<HeldRead>, Vec<HeldRead>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.uri == uri);
        self.held = kept;
        let n = released.len();
        for h in released {
            h.out.reply(h.id, h.reply);
        }
        Ok(structured_result(json!({"uri": uri, "released": n})))
    }

    fn fail_reads(&mut self, args: &Value) -> Reply {
        let uri = str_param(args, "uri")?.to_owned();
        let code = i64_arg(args, "code")?.unwrap_or(-32603);
        let message = args
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("Scripted read failure")
            .to_owned();
        let text = format!("reads of {uri} now fail with {code}");
        self.faults.insert(
            uri.clone(),
            RpcError {
                code,
                message,
                data: Some(json!({"uri": uri})),
            },
        );
        Ok(text_result(text))
    }

    fn progress(&mut self, args: &Value, params: &Value) -> Reply {
        let steps = u64_arg(args, "steps")?
            .ok_or_else(|| RpcError::invalid_params("missing integer argument `steps`"))?;
        let token = params.pointer("/_meta/progressToken").cloned();
        if let Some(token) = &token {
            for i in 1..=steps {
                self.out.notify(
                    "notifications/progress",
                    json!({"progressToken": token, "progress": i, "total": steps}),
                );
            }
        }
        let sent = if token.is_some() { steps } else { 0 };
        Ok(structured_result(json!({"steps": steps, "sent": sent})))
    }

    /// A tool of the conformance suite's fixture surface.
    fn conformance_tool(
        &mut self,
        id: &Value,
        name: &str,
        args: &Value,
        params: &Value,
        modern: bool,
    ) -> Outcome {
        if let Some(reply) = self.conformance_modern_tool(name, args, params, modern) {
            return reply.into();
        }
        if let Some(result) = crate::conformance::immediate(name) {
            return Ok(result).into();
        }
        match name {
            "json_schema_2020_12_tool" => Ok(text_result(format!(
                "JSON Schema 2020-12 tool called with: {args}"
            )))
            .into(),
            "test_tool_with_progress" => {
                if let Some(token) = params.pointer("/_meta/progressToken") {
                    for i in 1..=3 {
                        self.out.notify(
                            "notifications/progress",
                            json!({"progressToken": token, "progress": i * 50 - 50, "total": 100}),
                        );
                    }
                }
                Ok(text_result("Progress test completed")).into()
            }
            "test_tool_with_logging" => {
                for step in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ] {
                    self.out.notify(
                        "notifications/message",
                        json!({"level": "info", "logger": "conformance", "data": step}),
                    );
                }
                Ok(text_result("Logging test completed")).into()
            }
            _ => match crate::conformance::client_request(name, args) {
                Some((method, request)) => {
                    let request_id = format!("s{}", self.next_sample);
                    self.next_sample += 1;
                    let waiting = Sampling {
                        call_id: id.clone(),
                        modern,
                        out: self.out.clone(),
                    };
                    self.sampling.insert(request_id.clone(), waiting);
                    self.out.request(&request_id, method, request);
                    Outcome::Parked
                }
                None => Err(RpcError::invalid_params(format!("Unknown tool: {name}"))).into(),
            },
        }
    }

    /// `progress` with `interval_ms`: one notification every `ms`, then the result,
    /// from a task of its own (other requests are served meanwhile).
    fn paced_progress(
        &mut self,
        id: &Value,
        args: &Value,
        params: &Value,
        ms: u64,
        modern: bool,
    ) -> Outcome {
        let steps = match u64_arg(args, "steps") {
            Ok(Some(n)) => n,
            Ok(None) => {
                return Err(RpcError::invalid_params("missing integer argument `steps`")).into()
            }
            Err(e) => return Err(e).into(),
        };
        let token = params.pointer("/_meta/progressToken").cloned();
        let (out, id) = (self.out.clone(), id.clone());
        tokio::spawn(async move {
            for i in 1..=steps {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                if let Some(token) = &token {
                    out.notify(
                        "notifications/progress",
                        json!({"progressToken": token, "progress": i, "total": steps}),
                    );
                }
            }
            let sent = if token.is_some() { steps } else { 0 };
            let result = structured_result(json!({"steps": steps, "sent": sent}));
            out.reply(id, modern::mark(Ok(result), modern));
        });
        Outcome::Parked
    }

    /// Untagged `notifications/resources/updated`: stdout in stdio mode (whether or not
    /// subscribed); in HTTP mode the GET stream of each session subscribed to `uri`.
    fn notify_sessions_updated(&self, uri: &str, params: &Value) {
        // Formatted straight from `params` (the members in the order `json!` gives
        // them): a burst makes one of these per update.
        let updated = || {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{params}}}"#
            )
        };
        if self.config.http.is_none() {
            self.out.send_line(updated());
            return;
        }
        let mut line = None;
        for session in self.sessions.open.values() {
            // As a file server does: a session subscribed to a directory hears of the
            // files below it.
            let holds = session.subscribed.contains(uri)
                || session.subscribed.iter().any(|s| is_below(uri, s));
            if holds {
                let line = line.get_or_insert_with(updated);
                session.get.send(line.clone());
            }
        }
    }

    /// `end_session {session?}`: ends a session as DELETE does.
    fn end_session_tool(&mut self, args: &Value) -> Reply {
        let client = match args.get("session") {
            None | Some(Value::Null) => self.out.client(),
            Some(v) => v
                .as_str()
                .and_then(crate::http::parse_session_id)
                .map(Client::Session)
                .ok_or_else(|| RpcError::invalid_params("`session` must be s<N>"))?,
        };
        let Client::Session(n) = client else {
            return Err(RpcError::invalid_params(
                "a stateless request has no session",
            ));
        };
        if !self.end_session(n) {
            return Err(RpcError::invalid_params(format!("no open session s{n}")));
        }
        Ok(text_result(format!("ended s{n}")))
    }

    /// The `stats` output: `{name, era, counts, by_uri, tools, subscribed, subscribers,
    /// sessions, refused, versions, pending, listens}`.
    pub fn stats(&self) -> Value {
        let mut stats = self.recorder.stats();
        stats["name"] = json!(self.config.name);
        let mut subscribers = std::collections::BTreeMap::<&str, u64>::new();
        for session in self.sessions.open.values() {
            for uri in &session.subscribed {
                *subscribers.entry(uri).or_default() += 1;
            }
        }
        stats["subscribed"] = json!(subscribers.keys().collect::<Vec<_>>());
        stats["subscribers"] = json!(subscribers);
        let streams = self
            .sessions
            .open
            .iter()
            .filter(|(client, s)| **client == Client::Stdio || s.get.is_open())
            .count();
        stats["sessions"] = json!({
            "opened": self.sessions.opened,
            "open": self.sessions.open.len(),
            "ended": self.sessions.ended,
            "gone": self.sessions.gone,
            "streams": streams,
        });
        stats["refused"] = json!({
            "missing_session": self.sessions.missing,
            "unknown_session": self.sessions.unknown,
        });
        stats["versions"] = json!(self.versions);
        stats["pending"] = json!({
            "held_reads": self.held.len(),
            "hung": self.hung.len(),
            "sampling": self.sampling.len(),
        });
        stats["era"] = json!(self.config.era.as_str());
        let open: Vec<Value> = self
            .listens
            .iter()
            .map(|l| {
                json!({
                    "id": l.id,
                    "uris": l.uris,
                    "tools": l.tools,
                    "prompts": l.prompts,
                    "resources": l.resources,
                })
            })
            .collect();
        stats["listens"] = json!({"opened": self.listens_opened, "open": open});
        stats
    }
}

/// Nanoseconds since the UNIX epoch: a clock shared by every process on the machine, so
/// a receiver can compute emit→receipt latency (benchmarks' `stamp`).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether `uri` is a sub-resource of `parent`: below it at a `/` of the path.
fn is_below(uri: &str, parent: &str) -> bool {
    uri.strip_prefix(parent)
        .is_some_and(|rest| !rest.is_empty() && (parent.ends_with('/') || rest.starts_with('/')))
}
