//! The modern era (MCP 2026-07-28): per-request `_meta` validation, `server/discover`,
//! cacheable results, `subscriptions/listen` and the MRTR `ask` tool. Which requests are
//! served this way depends on `SCRIPTED_ERA` (see the crate doc).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::server::{Client, Outbox, Reply, RpcError, Server, SUPPORTED_VERSIONS};
use crate::tools::{text_result, u64_arg};

/// The only modern protocol version this server speaks.
pub const MODERN_VERSION: &str = "2026-07-28";
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// URIs under this prefix are readable but never honoured by `subscriptions/listen`.
pub const NACK_PREFIX: &str = "test://nack/";

/// Methods whose modern results carry `ttlMs` and `cacheScope`.
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// `SCRIPTED_ERA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy,
    Dual,
    Modern,
}

impl Era {
    pub fn parse(s: &str) -> Option<Era> {
        match s.trim() {
            "legacy" => Some(Era::Legacy),
            "dual" => Some(Era::Dual),
            "modern" => Some(Era::Modern),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Dual => "dual",
            Era::Modern => "modern",
        }
    }

    /// `server/discover`'s `supportedVersions`.
    pub fn supported_versions(self) -> Vec<&'static str> {
        let mut versions = vec![MODERN_VERSION];
        if self == Era::Dual {
            // Every legacy version a dual server negotiates, except 2024-11-05.
            versions.extend(SUPPORTED_VERSIONS.iter().take(3));
        }
        versions
    }
}

/// `params._meta` (`null` when absent).
fn meta(params: &Value) -> &Value {
    static EMPTY: Value = Value::Null;
    params.get("_meta").unwrap_or(&EMPTY)
}

/// Whether a request carries `params._meta["io.modelcontextprotocol/protocolVersion"]`.
pub fn is_modern_request(params: &Value) -> bool {
    meta(params).get(META_VERSION).is_some()
}

/// `-32022`, with the versions this server supports for modern requests.
pub fn unsupported_version(requested: &str) -> RpcError {
    RpcError {
        code: -32022,
        message: format!("Unsupported protocol version: {requested}"),
        data: Some(json!({"supported": [MODERN_VERSION], "requested": requested})),
    }
}

/// Checks the `_meta` every modern request must carry.
pub fn validate(params: &Value) -> Result<(), RpcError> {
    let version = meta(params)
        .get(META_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("missing protocolVersion"))?;
    if version != MODERN_VERSION {
        return Err(unsupported_version(version));
    }
    if !meta(params)
        .get(META_CAPABILITIES)
        .is_some_and(Value::is_object)
    {
        return Err(RpcError::invalid_params("missing clientCapabilities"));
    }
    Ok(())
}

/// `resultType: "complete"` on a successful result that has no `resultType` yet.
pub fn complete(reply: Reply) -> Reply {
    reply.map(|mut v| {
        if let Some(obj) = v.as_object_mut() {
            obj.entry("resultType").or_insert_with(|| json!("complete"));
        }
        v
    })
}

/// [`complete`] for a modern request; a legacy reply is left alone.
pub fn mark(reply: Reply, modern: bool) -> Reply {
    if modern {
        complete(reply)
    } else {
        reply
    }
}

/// `ttl=<ms>` and `scope=public|private` in the query of a `resources/read` URI
/// (anything else is ignored).
pub fn cache_overrides(uri: &str) -> (Option<u64>, Option<&str>) {
    let (mut ttl, mut scope) = (None, None);
    let Some((_, query)) = uri.split_once('?') else {
        return (ttl, scope);
    };
    for pair in query.split(['&', '#']) {
        match pair.split_once('=') {
            Some(("ttl", v)) => ttl = v.parse().ok().or(ttl),
            Some(("scope", v @ ("public" | "private"))) => scope = Some(v),
            _ => {}
        }
    }
    (ttl, scope)
}

/// Whether a listen's acknowledgement went out (delayed by `SCRIPTED_ACK_DELAY_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    Pending,
    Sent,
    /// The listen ended before its delayed acknowledgement: never send it.
    Dropped,
}

/// An open `subscriptions/listen` and the subset of its filter that was honoured.
pub struct Listen {
    pub id: Value,
    pub uris: BTreeSet<String>,
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// Shared with the task that sends a delayed acknowledgement. Every message for this
    /// listen is sent while holding the lock, so none can precede the acknowledgement.
    pub ack: Arc<Mutex<AckState>>,
    /// The acknowledgement, sent at once by `end_listens` if still delayed.
    ack_msg: Value,
    /// Where the listen's messages go (HTTP: the listen's own response stream).
    out: Outbox,
}

impl Listen {
    /// Sends a notification tagged with this listen's id, unless the acknowledgement is
    /// still delayed (then the listen receives nothing yet).
    fn notify(&self, method: &str, mut params: Value) {
        let state = self.ack.lock().unwrap_or_else(|e| e.into_inner());
        if *state != AckState::Sent {
            return;
        }
        if !params["_meta"].is_object() {
            params["_meta"] = json!({});
        }
        params["_meta"][META_SUBSCRIPTION] = self.id.clone();
        self.out.notify(method, params);
    }

    /// Marks the listen ended: a delayed acknowledgement is never sent.
    fn drop_ack(&self) {
        *self.ack.lock().unwrap_or_else(|e| e.into_inner()) = AckState::Dropped;
    }

    fn wants_list(&self, kind: &str) -> bool {
        match kind {
            "tools" => self.tools,
            "prompts" => self.prompts,
            _ => self.resources,
        }
    }
}

/// One MRTR round of `ask`: `(k, n, answers to q1..q(k-1))`.
type AskState = (u64, u64, Vec<Value>);

/// Parses `ask:<k>:<n>` or `ask:<k>:<n>:<JSON array of the answers to q1..q(k-1)>`.
fn parse_ask_state(state: &str, rounds: u64) -> Option<AskState> {
    let mut parts = state.splitn(4, ':');
    if parts.next()? != "ask" {
        return None;
    }
    let k: u64 = parts.next()?.parse().ok()?;
    let n: u64 = parts.next()?.parse().ok()?;
    let answers = match parts.next() {
        None => Vec::new(),
        Some(json) => match serde_json::from_str(json).ok()? {
            Value::Array(a) => a,
            _ => return None,
        },
    };
    let consistent = n == rounds && (1..=n).contains(&k) && answers.len() as u64 == k - 1;
    consistent.then_some((k, n, answers))
}

fn ask_state(k: u64, n: u64, answers: &[Value]) -> String {
    if answers.is_empty() {
        format!("ask:{k}:{n}")
    } else {
        format!("ask:{k}:{n}:{}", Value::from(answers.to_vec()))
    }
}

fn input_request(method: &str, k: u64) -> Value {
    let question = format!("question {k}");
    let params = match method {
        "elicitation/create" => json!({
            "mode": "form",
            "message": question,
            "requestedSchema": {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            },
        }),
        "sampling/createMessage" => json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
            "maxTokens": 10,
        }),
        _ => json!({}),
    };
    json!({"method": method, "params": params})
}

impl Server {
    /// Whether untagged (legacy) notifications go out: always in legacy mode, in dual
    /// mode only once a legacy `initialize` happened, never in modern mode.
    pub fn untagged_allowed(&self) -> bool {
        match self.config.era {
            Era::Legacy => true,
            Era::Dual => self.legacy_session,
            Era::Modern => false,
        }
    }

    pub fn discover(&self) -> Value {
        let mut capabilities = self.capabilities();
        if self.config.discover_no_subscribe {
            capabilities["resources"] = json!({"listChanged": true});
        }
        json!({
            "supportedVersions": self.config.era.supported_versions(),
            "capabilities": capabilities,
            "instructions": "scripted upstream",
            "resultType": "complete",
            "ttlMs": self.config.ttl_ms,
            "cacheScope": self.config.cache_scope,
            "_meta": {META_SERVER_INFO: {"name": self.config.name, "version": "0.0.0"}},
        })
    }

    /// `resultType`, plus `ttlMs` and `cacheScope` on cacheable results (from the URI's
    /// query for `resources/read`). Fields already present are kept, so this is
    /// idempotent.
    pub fn finish_modern(&self, method: &str, params: &Value, reply: Reply) -> Reply {
        let mut reply = complete(reply);
        if let (Ok(Value::Object(obj)), true) = (&mut reply, CACHEABLE.contains(&method)) {
            if obj.get("resultType").and_then(Value::as_str) == Some("input_required") {
                // Asking is never cacheable (the MRTR resource of the conformance fixtures).
                return reply;
            }
            let (mut ttl, mut scope) = (self.config.ttl_ms, self.config.cache_scope.as_str());
            if method == "resources/read" {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                let (t, s) = cache_overrides(uri);
                ttl = t.unwrap_or(ttl);
                scope = s.unwrap_or(scope);
            }
            obj.entry("ttlMs").or_insert_with(|| json!(ttl));
            obj.entry("cacheScope").or_insert_with(|| json!(scope));
        }
        reply
    }

    /// Whether `uri` names a resource `resources/read` can answer.
    pub fn readable(&self, uri: &str) -> bool {
        (self.config.conformance
            && (crate::conformance::read(uri).is_some()
                || uri == crate::conformance_modern::RESOURCE))
            || self.contents(uri).is_some()
    }

    /// `subscriptions/listen`: acknowledges (maybe later) and keeps the listen open.
    /// `Some` only for invalid params.
    pub fn listen(&mut self, id: &Value, params: &Value) -> Option<Reply> {
        let empty = Map::new();
        let filter = match params.get("notifications") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(f)) => f,
            Some(_) => {
                return Some(Err(RpcError::invalid_params(
                    "`notifications` must be an object",
                )))
            }
        };
        let asked_uris: Option<Vec<&str>> = match filter.get("resourceSubscriptions") {
            None | Some(Value::Null) => None,
            Some(Value::Array(uris)) => match uris.iter().map(Value::as_str).collect() {
                Some(uris) => Some(uris),
                None => {
                    return Some(Err(RpcError::invalid_params(
                        "`resourceSubscriptions` must be an array of strings",
                    )))
                }
            },
            Some(_) => {
                return Some(Err(RpcError::invalid_params(
                    "`resourceSubscriptions` must be an array of strings",
                )))
            }
        };
        let flag = |key: &str| filter.get(key) == Some(&Value::Bool(true));
        let mut honoured = Map::new();
        for key in [
            "toolsListChanged",
            "promptsListChanged",
            "resourcesListChanged",
        ] {
            if flag(key) {
                honoured.insert(key.to_owned(), json!(true));
            }
        }
        let mut uris = BTreeSet::new();
        if let Some(asked) = asked_uris {
            let mut honoured_uris = Vec::new();
            for uri in asked {
                if !uri.starts_with(NACK_PREFIX) && self.readable(uri) && uris.insert(uri) {
                    honoured_uris.push(uri);
                }
            }
            honoured.insert("resourceSubscriptions".to_owned(), json!(honoured_uris));
        }
        let ack_msg = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": honoured, "_meta": {META_SUBSCRIPTION: id}},
        });
        let ack = Arc::new(Mutex::new(AckState::Sent));
        match self.config.ack_delay_ms {
            0 => self.out.send(&ack_msg),
            ms => {
                *ack.lock().unwrap_or_else(|e| e.into_inner()) = AckState::Pending;
                let (out, ack, msg) = (self.out.clone(), Arc::clone(&ack), ack_msg.clone());
                // Parked like `delay`: the reader keeps serving other messages meanwhile.
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    let mut state = ack.lock().unwrap_or_else(|e| e.into_inner());
                    if *state == AckState::Pending {
                        out.send(&msg);
                        *state = AckState::Sent;
                    }
                });
            }
        }
        self.listens.push(Listen {
            id: id.clone(),
            uris: uris.into_iter().map(str::to_owned).collect(),
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            ack,
            ack_msg,
            out: self.out.clone(),
        });
        self.listens_opened += 1;
        None
    }

    /// A client's `notifications/cancelled` for a listen (HTTP: the client closed the
    /// listen's stream): forget it, send nothing.
    pub fn cancel_listen(&mut self, client: Client, request_id: &Value) {
        self.listens.retain(|listen| {
            let keep = listen.id != *request_id || listen.out.client() != client;
            if !keep {
                listen.drop_ack();
            }
            keep
        });
    }

    /// Forgets every listen of `client` (its HTTP session ended), sending nothing.
    pub fn drop_listens(&mut self, client: Client) {
        self.listens.retain(|listen| {
            let keep = listen.out.client() != client;
            if !keep {
                listen.drop_ack();
            }
            keep
        });
    }

    /// The `end_listens` tool: ends every open listen, by a graceful result or by
    /// `notifications/cancelled`.
    pub fn end_listens(&mut self, args: &Value) -> Reply {
        let how = match args.get("how") {
            None | Some(Value::Null) => "result",
            Some(v) => match v.as_str() {
                Some(how @ ("result" | "cancelled")) => how,
                _ => {
                    return Err(RpcError::invalid_params(
                        "`how` must be \"result\" or \"cancelled\"",
                    ))
                }
            },
        };
        let listens = std::mem::take(&mut self.listens);
        let n = listens.len();
        for listen in listens {
            let mut state = listen.ack.lock().unwrap_or_else(|e| e.into_inner());
            if *state == AckState::Pending {
                // The acknowledgement must be the first message of the listen.
                listen.out.send(&listen.ack_msg);
            }
            *state = AckState::Dropped;
            let sub = json!({META_SUBSCRIPTION: listen.id});
            if how == "result" {
                listen.out.reply(
                    listen.id.clone(),
                    Ok(json!({"resultType": "complete", "_meta": sub})),
                );
            } else {
                listen.out.notify(
                    "notifications/cancelled",
                    json!({"requestId": listen.id, "reason": "server ended the subscription"}),
                );
                // HTTP: the listen's stream ends after the notification.
                listen.out.end();
            }
        }
        Ok(text_result(format!("ended {n}")))
    }

    /// Tagged `notifications/resources/updated` (`params` = `{uri, _meta?}`) to every open
    /// listen whose honoured URIs contain `uri`.
    pub fn notify_listens_updated(&self, uri: &str, params: &Value) {
        for listen in self.listens.iter().filter(|l| l.uris.contains(uri)) {
            listen.notify("notifications/resources/updated", params.clone());
        }
    }

    /// Tagged `notifications/<kind>/list_changed` to every listen that asked for it.
    pub fn notify_listens_list_changed(&self, kind: &str) {
        let method = format!("notifications/{kind}/list_changed");
        for listen in self.listens.iter().filter(|l| l.wants_list(kind)) {
            listen.notify(&method, json!({}));
        }
    }

    /// The MRTR `ask` tool (see the crate doc).
    pub fn ask(&self, args: &Value, params: &Value, modern: bool) -> Reply {
        if !modern {
            return Ok(json!({
                "content": [{"type": "text", "text": format!(
                    "ask needs a modern request (params._meta[\"{META_VERSION}\"])"
                )}],
                "isError": true,
            }));
        }
        let rounds = u64_arg(args, "rounds")?.unwrap_or(1);
        if rounds == 0 {
            return Err(RpcError::invalid_params("`rounds` must be at least 1"));
        }
        let method = match args.get("method") {
            None | Some(Value::Null) => "elicitation/create",
            Some(m) => m.as_str().unwrap_or_default(),
        };
        let capability = match method {
            "elicitation/create" => "elicitation",
            "sampling/createMessage" => "sampling",
            "roots/list" => "roots",
            _ => {
                return Err(RpcError::invalid_params(
                    "`method` must be elicitation/create, sampling/createMessage or roots/list",
                ))
            }
        };
        if meta(params)
            .get(META_CAPABILITIES)
            .and_then(|c| c.get(capability))
            .is_none()
        {
            return Err(RpcError {
                code: -32021,
                message: "Missing required client capability".to_owned(),
                data: Some(json!({"requiredCapabilities": {capability: {}}})),
            });
        }
        let (k, mut answers) = match params.get("requestState") {
            None | Some(Value::Null) => {
                return Ok(input_required(method, 1, rounds, &[]));
            }
            Some(state) => {
                let (k, _, answers) = state
                    .as_str()
                    .and_then(|s| parse_ask_state(s, rounds))
                    .ok_or_else(|| RpcError::invalid_params("invalid requestState"))?;
                (k, answers)
            }
        };
        let key = format!("q{k}");
        let answer = params
            .get("inputResponses")
            .and_then(|r| r.get(&key))
            .ok_or_else(|| RpcError::invalid_params(format!("missing inputResponses.{key}")))?;
        answers.push(answer.clone());
        if k < rounds {
            return Ok(input_required(method, k + 1, rounds, &answers));
        }
        Ok(json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": format!("answers: {}", Value::from(answers))}],
        }))
    }
}

fn input_required(method: &str, k: u64, n: u64, answers: &[Value]) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {format!("q{k}"): input_request(method, k)},
        "requestState": ask_state(k, n, answers),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Out};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// An in-process server and the messages it writes.
    struct Harness {
        server: Server,
        rx: UnboundedReceiver<Out>,
        next_id: u64,
    }

    fn parse(out: Out) -> Value {
        match out {
            Out::Line(line) => serde_json::from_str(&line).unwrap(),
            Out::Exit(code) => panic!("unexpected exit {code}"),
        }
    }

    /// `_meta` of a valid modern request with these client capabilities.
    fn modern_meta(caps: Value) -> Value {
        json!({META_VERSION: MODERN_VERSION, META_CAPABILITIES: caps})
    }

    /// `params` plus a valid modern `_meta` (no client capabilities).
    fn modern(mut params: Value) -> Value {
        params["_meta"] = modern_meta(json!({}));
        params
    }

    impl Harness {
        fn new(era: Era) -> Self {
            Harness::with(Config::for_tests(era))
        }

        fn with(config: Config) -> Self {
            let (tx, rx) = unbounded_channel();
            Harness {
                server: Server::new(config, tx),
                rx,
                next_id: 1,
            }
        }

        async fn send(&mut self, msg: Value) {
            self.server.handle_line(&msg.to_string()).await;
        }

        /// Everything written so far.
        fn drain(&mut self) -> Vec<Value> {
            std::iter::from_fn(|| self.rx.try_recv().ok())
                .map(parse)
                .collect()
        }

        async fn send_request_with_id(&mut self, id: Value, method: &str, params: Value) {
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .await;
        }

        /// A request answered at once → (messages written before the response, response).
        async fn request(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
            let id = json!(self.next_id);
            self.next_id += 1;
            self.send_request_with_id(id.clone(), method, params).await;
            let mut before = self.drain();
            let at = before
                .iter()
                .position(|m| m.get("method").is_none() && m["id"] == id)
                .unwrap_or_else(|| panic!("no response to {method}: {before:?}"));
            let response = before.remove(at);
            assert!(
                before.len() == at,
                "messages after the response: {before:?}"
            );
            (before, response)
        }

        async fn result(&mut self, method: &str, params: Value) -> Value {
            let (_, resp) = self.request(method, params).await;
            resp.get("result")
                .cloned()
                .unwrap_or_else(|| panic!("{method} failed: {resp}"))
        }

        async fn error(&mut self, method: &str, params: Value) -> Value {
            let (_, resp) = self.request(method, params).await;
            resp.get("error")
                .cloned()
                .unwrap_or_else(|| panic!("{method} did not fail: {resp}"))
        }

        /// A modern `tools/call` → (messages before the response, response).
        async fn call(&mut self, name: &str, arguments: Value) -> (Vec<Value>, Value) {
            self.request(
                "tools/call",
                modern(json!({"name": name, "arguments": arguments})),
            )
            .await
        }

        async fn stats(&mut self) -> Value {
            let (_, resp) = self.call("stats", json!({})).await;
            if self.server.config.era != Era::Legacy {
                assert_eq!(resp["result"]["resultType"], "complete");
            }
            resp["result"]["structuredContent"].clone()
        }

        async fn initialize(&mut self) {
            self.result("initialize", json!({"protocolVersion": "2025-11-25"}))
                .await;
        }
    }

    fn tagged_update(uri: &str, sub: &Value, extra: Value) -> Value {
        let mut meta = extra;
        meta[META_SUBSCRIPTION] = sub.clone();
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": meta}})
    }

    #[tokio::test]
    async fn modern_validation_errors() {
        let mut h = Harness::new(Era::Modern);
        let e = h.error("tools/list", json!({})).await;
        assert_eq!(
            e,
            json!({"code": -32602, "message": "missing protocolVersion"})
        );
        let e = h
            .error(
                "tools/list",
                json!({"_meta": {META_VERSION: "2025-11-25", META_CAPABILITIES: {}}}),
            )
            .await;
        assert_eq!(
            e,
            json!({"code": -32022, "message": "Unsupported protocol version: 2025-11-25",
                "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}})
        );
        let e = h
            .error(
                "tools/list",
                json!({"_meta": {META_VERSION: MODERN_VERSION}}),
            )
            .await;
        assert_eq!(
            e,
            json!({"code": -32602, "message": "missing clientCapabilities"})
        );
        let e = h
            .error(
                "tools/list",
                json!({"_meta": {META_VERSION: MODERN_VERSION, META_CAPABILITIES: []}}),
            )
            .await;
        assert_eq!(e["code"], -32602);
        // Notifications are never validated; they have no response.
        h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert!(h.drain().is_empty());

        let e = h
            .error(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
            )
            .await;
        assert_eq!(
            e,
            json!({"code": -32022, "message": "Unsupported protocol version: 2025-06-18",
                "data": {"supported": ["2026-07-28"], "requested": "2025-06-18"}})
        );
        for method in [
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            let e = h
                .error(
                    method,
                    modern(json!({"uri": "test://static/1", "level": "info"})),
                )
                .await;
            assert_eq!(e["code"], -32601, "{method}");
        }
        let done = h
            .result(
                "completion/complete",
                modern(json!({"ref": {"type": "ref/prompt", "name": "greet"},
                    "argument": {"name": "name", "value": "A"}})),
            )
            .await;
        assert_eq!(done["resultType"], "complete");
        assert_eq!(done["completion"]["values"], json!(["Alice"]));
        assert!(done.get("ttlMs").is_none());
        let tools = h.result("tools/list", modern(json!({}))).await;
        assert_eq!(tools["resultType"], "complete");
        assert_eq!(tools["ttlMs"], 0);
        assert_eq!(tools["cacheScope"], "private");
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"ask") && names.contains(&"end_listens"));
        let stats = h.stats().await;
        assert_eq!(stats["era"], "modern");
        assert_eq!(stats["counts"]["initialize"], 1);
        assert_eq!(stats["counts"]["tools/list"], 5);
        assert_eq!(stats["counts"]["ping"], 1);
    }

    #[tokio::test]
    async fn discover_in_each_mode() {
        // Legacy: -32601, with or without modern _meta.
        let mut h = Harness::new(Era::Legacy);
        assert_eq!(h.error("server/discover", json!({})).await["code"], -32601);
        assert_eq!(
            h.error("server/discover", modern(json!({}))).await["code"],
            -32601
        );
        // Legacy mode has no modern tools, and ignores modern _meta.
        let tools = h.result("tools/list", modern(json!({}))).await;
        assert!(tools.get("resultType").is_none());
        assert!(!tools.to_string().contains("end_listens"));
        assert_eq!(h.result("ping", modern(json!({}))).await, json!({}));
        assert_eq!(h.stats().await["era"], "legacy");

        let config = Config {
            ttl_ms: 1500,
            cache_scope: "public".into(),
            name: "disco".into(),
            ..Config::for_tests(Era::Dual)
        };
        let mut h = Harness::with(config);
        // Dual: a request without modern _meta is legacy.
        assert_eq!(h.error("server/discover", json!({})).await["code"], -32601);
        assert_eq!(h.result("ping", json!({})).await, json!({}));
        let caps = h
            .result("initialize", json!({"protocolVersion": "2025-06-18"}))
            .await["capabilities"]
            .clone();
        let d = h.result("server/discover", modern(json!({}))).await;
        assert_eq!(
            d,
            json!({
                "supportedVersions": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
                "capabilities": caps,
                "instructions": "scripted upstream",
                "resultType": "complete",
                "ttlMs": 1500,
                "cacheScope": "public",
                "_meta": {META_SERVER_INFO: {"name": "disco", "version": "0.0.0"}},
            })
        );
        // Dual: modern requests are validated and served the modern way.
        assert_eq!(
            h.error("server/discover", json!({"_meta": {META_VERSION: "x"}}))
                .await["code"],
            -32022
        );
        assert_eq!(h.error("ping", modern(json!({}))).await["code"], -32601);

        let mut h = Harness::new(Era::Modern);
        let d = h.result("server/discover", modern(json!({}))).await;
        assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(d["capabilities"], h.server.capabilities());
        assert_eq!(d["ttlMs"], 0);
        assert_eq!(d["cacheScope"], "private");
        let stats = h.stats().await;
        assert_eq!(stats["counts"]["server/discover"], 1);
    }

    #[tokio::test]
    async fn listen_acknowledges_the_honoured_subset() {
        let mut h = Harness::new(Era::Modern);
        let id = json!("listen-1");
        h.send_request_with_id(
            id.clone(),
            "subscriptions/listen",
            modern(json!({"notifications": {
                "toolsListChanged": true,
                "promptsListChanged": false,
                "resourceSubscriptions": [
                    "test://static/1", "test://nack/1", "test://missing/1",
                    "test://dynamic/a", "test://static/1",
                ],
            }})),
        )
        .await;
        assert_eq!(
            h.drain(),
            vec![json!({
                "jsonrpc": "2.0",
                "method": "notifications/subscriptions/acknowledged",
                "params": {
                    "notifications": {
                        "toolsListChanged": true,
                        "resourceSubscriptions": ["test://static/1", "test://dynamic/a"],
                    },
                    "_meta": {META_SUBSCRIPTION: "listen-1"},
                },
            })]
        );
        // test://nack/ URIs are readable, just never honoured.
        let read = h
            .result("resources/read", modern(json!({"uri": "test://nack/1"})))
            .await;
        assert_eq!(read["contents"][0]["text"], "test://nack/1 v0");

        // Without resourceSubscriptions, none in the acknowledgement; numeric id kept.
        h.send_request_with_id(
            json!(7),
            "subscriptions/listen",
            modern(json!({"notifications": {"resourcesListChanged": true}})),
        )
        .await;
        let ack = h.drain();
        assert_eq!(
            ack[0]["params"],
            json!({"notifications": {"resourcesListChanged": true},
                "_meta": {META_SUBSCRIPTION: 7}})
        );
        // Asked, none honoured: an empty list.
        h.send_request_with_id(
            json!(8),
            "subscriptions/listen",
            modern(json!({"notifications": {"resourceSubscriptions": ["test://nack/2"]}})),
        )
        .await;
        assert_eq!(
            h.drain()[0]["params"]["notifications"],
            json!({"resourceSubscriptions": []})
        );
        let e = h
            .error(
                "subscriptions/listen",
                modern(json!({"notifications": {"resourceSubscriptions": "x"}})),
            )
            .await;
        assert_eq!(e["code"], -32602);

        let stats = h.stats().await;
        assert_eq!(stats["counts"]["subscriptions/listen"], 4);
        assert_eq!(
            stats["listens"],
            json!({"opened": 3, "open": [
                {"id": "listen-1", "uris": ["test://dynamic/a", "test://static/1"],
                    "tools": true, "prompts": false, "resources": false},
                {"id": 7, "uris": [], "tools": false, "prompts": false, "resources": true},
                {"id": 8, "uris": [], "tools": false, "prompts": false, "resources": false},
            ]})
        );
    }

    #[tokio::test]
    async fn tagged_updates_go_only_to_listens_holding_the_uri() {
        let (a, b) = ("test://static/1", "test://dynamic/b");
        let mut h = Harness::new(Era::Modern);
        let (l1, l2) = (json!("L1"), json!("L2"));
        h.send_request_with_id(
            l1.clone(),
            "subscriptions/listen",
            modern(
                json!({"notifications": {"resourceSubscriptions": [a], "toolsListChanged": true}}),
            ),
        )
        .await;
        h.send_request_with_id(
            l2.clone(),
            "subscriptions/listen",
            modern(json!({"notifications": {"resourceSubscriptions": [a, b]}})),
        )
        .await;
        assert_eq!(h.drain().len(), 2);

        let (before, resp) = h
            .call("emit_update", json!({"uri": b, "meta": {"k": "v"}}))
            .await;
        assert_eq!(before, vec![tagged_update(b, &l2, json!({"k": "v"}))]);
        assert_eq!(resp["result"]["resultType"], "complete");
        assert_eq!(resp["result"]["structuredContent"]["version"], 1);
        let (before, _) = h.call("emit_updates", json!({"uri": a, "count": 2})).await;
        assert_eq!(
            before,
            vec![
                tagged_update(a, &l1, json!({})),
                tagged_update(a, &l2, json!({})),
                tagged_update(a, &l1, json!({})),
                tagged_update(a, &l2, json!({})),
            ]
        );
        let (before, _) = h
            .call(
                "emit_update",
                json!({"uri": "test://static/2", "stamp": true}),
            )
            .await;
        assert!(before.is_empty(), "nobody holds it: {before:?}");
        let (before, _) = h
            .call("emit_update", json!({"uri": b, "stamp": true}))
            .await;
        assert!(before[0]["params"]["_meta"]["t"].is_u64());
        assert_eq!(before[0]["params"]["_meta"][META_SUBSCRIPTION], "L2");

        let (before, _) = h.call("emit_list_changed", json!({"kind": "tools"})).await;
        assert_eq!(
            before,
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                "params": {"_meta": {META_SUBSCRIPTION: "L1"}}})
            ]
        );
        let (before, _) = h
            .call("emit_list_changed", json!({"kind": "prompts"}))
            .await;
        assert!(before.is_empty());

        // Dual: untagged ones only once a legacy initialize happened, plus the tagged.
        let mut h = Harness::new(Era::Dual);
        h.send_request_with_id(
            l1.clone(),
            "subscriptions/listen",
            modern(json!({"notifications": {"resourceSubscriptions": [a], "promptsListChanged": true}})),
        )
        .await;
        h.drain();
        let (before, _) = h.call("emit_update", json!({"uri": a})).await;
        assert_eq!(before, vec![tagged_update(a, &l1, json!({}))]);
        h.initialize().await;
        let (before, _) = h.call("emit_update", json!({"uri": a})).await;
        assert_eq!(
            before,
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"uri": a}}),
                tagged_update(a, &l1, json!({})),
            ]
        );
        let (before, _) = h
            .call("emit_list_changed", json!({"kind": "prompts"}))
            .await;
        assert_eq!(before.len(), 2);
        assert_eq!(before[0]["params"], json!({}));
        assert_eq!(before[1]["params"]["_meta"][META_SUBSCRIPTION], "L1");
        // A legacy emit in dual mode: untagged only (nobody holds it).
        let (before, resp) = h
            .request(
                "tools/call",
                json!({"name": "emit_update", "arguments": {"uri": b}}),
            )
            .await;
        assert_eq!(before.len(), 1);
        assert!(before[0]["params"].get("_meta").is_none());
        assert!(resp["result"].get("resultType").is_none());
    }

    #[tokio::test]
    async fn listens_end_by_result_by_cancellation_or_by_the_client() {
        let mut h = Harness::new(Era::Modern);
        for id in ["A", "B", "C"] {
            h.send_request_with_id(
                json!(id),
                "subscriptions/listen",
                modern(json!({"notifications": {"resourceSubscriptions": ["test://static/1"]}})),
            )
            .await;
        }
        assert_eq!(h.drain().len(), 3);
        // The client cancels B: removed, nothing sent.
        h.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "B"}}),
        )
        .await;
        assert!(h.drain().is_empty());
        let stats = h.stats().await;
        assert_eq!(stats["counts"]["notifications/cancelled"], 1);
        let open: Vec<&Value> = stats["listens"]["open"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| &l["id"])
            .collect();
        assert_eq!(open, [&json!("A"), &json!("C")]);

        let (before, resp) = h.call("end_listens", json!({"how": "result"})).await;
        assert_eq!(
            before,
            ["A", "C"]
                .iter()
                .map(|id| json!({"jsonrpc": "2.0", "id": id, "result": {
                    "resultType": "complete", "_meta": {META_SUBSCRIPTION: id}}}))
                .collect::<Vec<_>>()
        );
        assert_eq!(resp["result"]["content"][0]["text"], "ended 2");
        assert_eq!(resp["result"]["resultType"], "complete");
        let (before, _) = h
            .call("emit_update", json!({"uri": "test://static/1"}))
            .await;
        assert!(before.is_empty());

        h.send_request_with_id(json!(42), "subscriptions/listen", modern(json!({})))
            .await;
        assert_eq!(h.drain()[0]["params"]["notifications"], json!({}));
        let (before, resp) = h.call("end_listens", json!({"how": "cancelled"})).await;
        assert_eq!(
            before,
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 42, "reason": "server ended the subscription"}})
            ]
        );
        assert_eq!(resp["result"]["content"][0]["text"], "ended 1");
        let (before, resp) = h.call("end_listens", json!({})).await;
        assert!(before.is_empty());
        assert_eq!(resp["result"]["content"][0]["text"], "ended 0");
        assert_eq!(
            h.call("end_listens", json!({"how": "x"})).await.1["error"]["code"],
            -32602
        );
        let stats = h.stats().await;
        assert_eq!(stats["listens"], json!({"opened": 4, "open": []}));
    }

    #[tokio::test]
    async fn delayed_ack_keeps_serving_and_comes_first() {
        let config = Config {
            ack_delay_ms: 20,
            ..Config::for_tests(Era::Modern)
        };
        let mut h = Harness::with(config);
        let uri = "test://static/3";
        h.send_request_with_id(
            json!("D"),
            "subscriptions/listen",
            modern(json!({"notifications": {"resourceSubscriptions": [uri]}})),
        )
        .await;
        // Served meanwhile; the listen gets nothing before its acknowledgement.
        let (before, resp) = h.call("emit_update", json!({"uri": uri})).await;
        assert!(before.is_empty());
        assert!(resp.get("result").is_some());
        let ack = parse(h.rx.recv().await.unwrap());
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION], "D");
        let (before, _) = h.call("emit_update", json!({"uri": uri})).await;
        assert_eq!(before, vec![tagged_update(uri, &json!("D"), json!({}))]);

        // Ended before its acknowledgement: the acknowledgement first, then the end.
        h.send_request_with_id(json!("E"), "subscriptions/listen", modern(json!({})))
            .await;
        let (before, _) = h.call("end_listens", json!({"how": "cancelled"})).await;
        let methods: Vec<&str> = before
            .iter()
            .map(|m| m["method"].as_str().unwrap())
            .collect();
        assert_eq!(
            methods,
            [
                "notifications/cancelled",
                "notifications/subscriptions/acknowledged",
                "notifications/cancelled"
            ]
        );
        assert_eq!(before[1]["params"]["_meta"][META_SUBSCRIPTION], "E");
        assert_eq!(before[2]["params"]["requestId"], "E");
        // Cancelled by the client before its acknowledgement: never acknowledged.
        h.send_request_with_id(json!("F"), "subscriptions/listen", modern(json!({})))
            .await;
        h.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "F"}}),
        )
        .await;
        h.send_request_with_id(json!("G"), "subscriptions/listen", modern(json!({})))
            .await;
        let ack = parse(h.rx.recv().await.unwrap());
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION], "G");
        assert!(h.drain().is_empty());
    }

    #[tokio::test]
    async fn ask_runs_rounds_and_rejects_tampered_state() {
        let mut h = Harness::new(Era::Dual);
        let caps = json!({"elicitation": {}, "sampling": {}});
        let call = |args: Value, extra: Value| {
            let mut p = json!({"name": "ask", "arguments": args,
                "_meta": modern_meta(caps.clone())});
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            p
        };
        let args = json!({"rounds": 3});
        let r1 = h.result("tools/call", call(args.clone(), json!({}))).await;
        assert_eq!(
            r1,
            json!({
                "resultType": "input_required",
                "inputRequests": {"q1": {"method": "elicitation/create", "params": {
                    "mode": "form",
                    "message": "question 1",
                    "requestedSchema": {"type": "object",
                        "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
                }}},
                "requestState": "ask:1:3",
            })
        );
        let answer = |a: &str| json!({"action": "accept", "content": {"answer": a}});
        let r2 = h
            .result(
                "tools/call",
                call(
                    args.clone(),
                    json!({"requestState": "ask:1:3", "inputResponses": {"q1": answer("x")}}),
                ),
            )
            .await;
        assert_eq!(r2["resultType"], "input_required");
        assert!(r2["inputRequests"]["q2"].is_object());
        let state2 = r2["requestState"].as_str().unwrap().to_owned();
        assert!(state2.starts_with("ask:2:3:"), "{state2}");

        // Tampered states and missing answers.
        for bad in [
            json!("garbage"),
            json!("ask:2:3"),
            json!("ask:4:3"),
            json!("ask:1:2"),
            json!("ask:2:3:{}"),
            json!("ask:2:3:[1,2]"),
            json!(state2.replacen(":[", ":[[", 1)),
            json!(5),
        ] {
            let e = h
                .error(
                    "tools/call",
                    call(
                        args.clone(),
                        json!({"requestState": bad, "inputResponses": {"q2": answer("y")}}),
                    ),
                )
                .await;
            assert_eq!(
                e,
                json!({"code": -32602, "message": "invalid requestState"}),
                "{bad}"
            );
        }
        let e = h
            .error(
                "tools/call",
                call(
                    args.clone(),
                    json!({"requestState": state2, "inputResponses": {"q1": answer("y")}}),
                ),
            )
            .await;
        assert_eq!(
            e,
            json!({"code": -32602, "message": "missing inputResponses.q2"})
        );

        let r3 = h
            .result(
                "tools/call",
                call(
                    args.clone(),
                    json!({"requestState": state2, "inputResponses": {"q2": answer("y")}}),
                ),
            )
            .await;
        let state3 = r3["requestState"].as_str().unwrap().to_owned();
        let done = h
            .result(
                "tools/call",
                call(
                    args.clone(),
                    json!({"requestState": state3, "inputResponses": {"q3": answer("z")}}),
                ),
            )
            .await;
        let expected = format!(
            "answers: {}",
            json!([answer("x"), answer("y"), answer("z")])
        );
        assert_eq!(
            done,
            json!({"resultType": "complete", "content": [{"type": "text", "text": expected}]})
        );

        // Sampling, one round.
        let s = h
            .result(
                "tools/call",
                call(json!({"method": "sampling/createMessage"}), json!({})),
            )
            .await;
        assert_eq!(
            s["inputRequests"]["q1"],
            json!({"method": "sampling/createMessage", "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "question 1"}}],
                "maxTokens": 10}})
        );
        assert_eq!(s["requestState"], "ask:1:1");
        // roots was not declared.
        let e = h
            .error(
                "tools/call",
                call(json!({"method": "roots/list"}), json!({})),
            )
            .await;
        assert_eq!(
            e,
            json!({"code": -32021, "message": "Missing required client capability",
                "data": {"requiredCapabilities": {"roots": {}}}})
        );
        // A legacy request (dual mode) gets a tool error.
        let legacy = h
            .result("tools/call", json!({"name": "ask", "arguments": {}}))
            .await;
        assert_eq!(legacy["isError"], true);
        assert!(legacy.get("resultType").is_none());

        assert_eq!(h.stats().await["tools"]["ask"], 16);
    }

    #[tokio::test]
    async fn read_ttl_and_scope_from_the_uri_query() {
        let config = Config {
            ttl_ms: 250,
            ..Config::for_tests(Era::Dual)
        };
        let mut h = Harness::with(config);
        let uri = "test://dynamic/a?ttl=60000&scope=public";
        let read = h
            .result("resources/read", modern(json!({"uri": uri})))
            .await;
        assert_eq!(
            read,
            json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": format!("{uri} v0")}],
                "resultType": "complete", "ttlMs": 60000, "cacheScope": "public"})
        );
        for (uri, ttl, scope) in [
            ("test://dynamic/a", 250, "private"),
            ("test://dynamic/a?ttl=5", 5, "private"),
            ("test://dynamic/a?scope=public", 250, "public"),
            ("test://dynamic/a?ttl=x&scope=shared", 250, "private"),
        ] {
            let read = h
                .result("resources/read", modern(json!({"uri": uri})))
                .await;
            assert_eq!(
                (read["ttlMs"].as_u64(), read["cacheScope"].as_str()),
                (Some(ttl), Some(scope)),
                "{uri}"
            );
        }
        // A held modern read keeps the ttl of its arrival.
        h.call("hold_reads", json!({"uri": uri})).await;
        h.send_request_with_id(json!("held"), "resources/read", modern(json!({"uri": uri})))
            .await;
        let (before, _) = h.call("release_reads", json!({"uri": uri})).await;
        assert_eq!(before[0]["result"]["ttlMs"], 60000);

        let e = h
            .error("resources/read", modern(json!({"uri": "test://nope"})))
            .await;
        assert_eq!(
            e,
            json!({"code": -32602, "message": "Resource not found", "data": {"uri": "test://nope"}})
        );
        // Legacy requests: no cache fields, -32002.
        let read = h.result("resources/read", json!({"uri": uri})).await;
        assert!(read.get("ttlMs").is_none() && read.get("resultType").is_none());
        assert_eq!(
            h.error("resources/read", json!({"uri": "test://nope"}))
                .await["code"],
            -32002
        );
    }

    #[test]
    fn cache_override_parsing() {
        assert_eq!(cache_overrides("test://dynamic/a"), (None, None));
        assert_eq!(
            cache_overrides("test://dynamic/a?x=1&ttl=7&scope=private"),
            (Some(7), Some("private"))
        );
        assert_eq!(parse_ask_state("ask:1:1", 1), Some((1, 1, vec![])));
        assert_eq!(
            parse_ask_state("ask:2:2:[\"a\"]", 2),
            Some((2, 2, vec![json!("a")]))
        );
        assert_eq!(parse_ask_state("ask:2:2:[\"a\"]", 3), None);
    }
}
