//! The conformance suite's fixtures for modern (2026-07-28) requests
//! (`SCRIPTED_CONFORMANCE=1` with `SCRIPTED_ERA=dual|modern`; the crate doc has the
//! table): the MRTR (SEP-2322) tools, prompt and resource, which answer
//! `resultType: "input_required"` and complete on the retry; the stateless (SEP-2575)
//! diagnostic tools; and, for modern requests, the suite's legacy fixtures that ask the
//! client something (`test_sampling`, `test_elicitation*`), which a 2026-07-28 server
//! cannot do with a request of its own either.
//!
//! Everything is stateless: what a fixture already has travels in its `requestState`,
//! which is signed ([`sign`], [`verify`]), so an altered state is rejected (`-32602`)
//! instead of being believed.

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::modern::{Era, META_CAPABILITIES, META_VERSION};
use crate::server::{Reply, RpcError, Server};
use crate::tools::text_result;

/// `_meta` key of a modern request's log level.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The MRTR prompt (`input-required-result-non-tool-request`).
pub const PROMPT: &str = "test_input_required_result_prompt";
/// The MRTR resource: `resources/read` answering `input_required`.
pub const RESOURCE: &str = "test://input-required";
/// RFC 5424 levels, most verbose first (`test_logging_tool`).
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The tools that exist only in dual and modern modes: name, description.
const TOOLS: [(&str, &str); 13] = [
    (
        "test_input_required_result_elicitation",
        "MRTR: asks for a name (elicitation, key user_name), then greets",
    ),
    (
        "test_input_required_result_sampling",
        "MRTR: asks for a completion (sampling, key capital_question), then returns its text",
    ),
    (
        "test_input_required_result_list_roots",
        "MRTR: asks for the roots (roots/list, key client_roots), then lists them",
    ),
    (
        "test_input_required_result_request_state",
        "MRTR: asks for a confirmation with a signed requestState; the retry answers state-ok",
    ),
    (
        "test_input_required_result_multiple_inputs",
        "MRTR: asks for an elicitation, a sampling and the roots in one round (signed requestState)",
    ),
    (
        "test_input_required_result_multi_round",
        "MRTR: two rounds (step1, step2), each with a new signed requestState",
    ),
    (
        "test_input_required_result_tampered_state",
        "MRTR: signed requestState; a retry with an altered state is rejected (-32602)",
    ),
    (
        "test_input_required_result_capabilities",
        "MRTR: asks only for what the request's clientCapabilities declare",
    ),
    (
        "test_missing_capability",
        "Needs the client's sampling capability: -32021 without it",
    ),
    (
        "test_streaming_elicitation",
        "Needs elicitation: asks through input_required, never with a request on the stream",
    ),
    (
        "test_logging_tool",
        "Sends notifications/message only when the request's _meta sets a logLevel",
    ),
    (
        "test_trigger_tool_change",
        "Sends notifications/tools/list_changed (to the listens that asked)",
    ),
    (
        "test_trigger_prompt_change",
        "Sends notifications/prompts/list_changed (to the listens that asked)",
    ),
];

/// `tools/list` entries of the modern-only tools.
pub fn tools() -> Vec<Value> {
    TOOLS
        .iter()
        .map(|(name, description)| {
            json!({"name": name, "description": description,
                "inputSchema": {"type": "object", "properties": {}}})
        })
        .collect()
}

/// Whether `name` is a modern-only tool.
pub fn is_tool(name: &str) -> bool {
    TOOLS.iter().any(|(n, _)| *n == name)
}

/// The `prompts/list` entry of the MRTR prompt.
pub fn prompt_definition() -> Value {
    json!({"name": PROMPT,
        "description": "MRTR: asks for context (elicitation, key user_context), then returns the prompt"})
}

/// The `resources/list` entry of the MRTR resource.
pub fn resource_definition() -> Value {
    json!({"uri": RESOURCE, "name": "input-required", "mimeType": "text/plain",
        "description": "MRTR: reading asks who reads (elicitation, key reader)"})
}

fn needs_modern_text(name: &str) -> String {
    format!("{name} needs a modern request (params._meta[\"{META_VERSION}\"])")
}

/// What a modern-only tool answers a legacy request (dual mode): a tool error.
pub fn needs_modern(name: &str) -> Value {
    json!({"content": [{"type": "text", "text": needs_modern_text(name)}], "isError": true})
}

// ---- signed requestState ----

/// The signing key: drawn once per process, so a state is only good for this process.
fn key() -> &'static RandomState {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new)
}

/// SipHash (std's keyed hash, a PRF under the process's random 128-bit key) of
/// `payload`, as 16 hex digits.
fn tag(payload: &str) -> String {
    format!("{:016x}", key().hash_one(payload))
}

/// `<tag>.<compact JSON payload>`: readable, and any change to it breaks the tag.
pub fn sign(payload: &Value) -> String {
    let payload = payload.to_string();
    format!("{}.{payload}", tag(&payload))
}

/// The payload of a state [`sign`] made in this process; `None` if it was altered.
pub fn verify(state: &str) -> Option<Value> {
    let (t, payload) = state.split_once('.')?;
    if t != tag(payload) {
        return None;
    }
    serde_json::from_str(payload).ok()
}

// ---- the MRTR engine ----

/// One input request of a round.
pub struct Input {
    key: String,
    method: &'static str,
    params: Value,
}

/// What a fixture does next, given its round and the answers it has.
pub enum Step {
    Ask(Vec<Input>),
    Done(Value),
}

fn elicit(key: &str, message: &str, field: &str, ty: &str) -> Input {
    Input {
        key: key.to_owned(),
        method: "elicitation/create",
        params: json!({"message": message, "requestedSchema": {"type": "object",
            "properties": {field: {"type": ty}}, "required": [field]}}),
    }
}

fn sample(key: &str, text: &str, max_tokens: u64) -> Input {
    Input {
        key: key.to_owned(),
        method: "sampling/createMessage",
        params: json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens}),
    }
}

fn roots(key: &str) -> Input {
    Input {
        key: key.to_owned(),
        method: "roots/list",
        params: json!({}),
    }
}

/// The client capability an input request's method needs.
fn capability(method: &str) -> &'static str {
    match method {
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "elicitation",
    }
}

/// `_meta["io.modelcontextprotocol/clientCapabilities"]` (`null` when absent).
fn client_capabilities(params: &Value) -> &Value {
    static NULL: Value = Value::Null;
    params
        .get("_meta")
        .and_then(|m| m.get(META_CAPABILITIES))
        .unwrap_or(&NULL)
}

fn declares(params: &Value, cap: &str) -> bool {
    client_capabilities(params)
        .get(cap)
        .is_some_and(Value::is_object)
}

/// `-32021` naming the capabilities (`{"<cap>": {}}` each).
pub fn missing_capabilities(caps: &[&str]) -> RpcError {
    let required: Map<String, Value> = caps.iter().map(|c| ((*c).to_owned(), json!({}))).collect();
    RpcError {
        code: -32021,
        message: "Missing required client capability".to_owned(),
        data: Some(json!({"requiredCapabilities": required})),
    }
}

/// An answer must have the shape of its method's result.
fn check_answer(method: &str, key: &str, answer: &Value) -> Result<(), RpcError> {
    let ok = match method {
        "elicitation/create" => {
            matches!(
                answer["action"].as_str(),
                Some("accept" | "decline" | "cancel")
            ) && (answer.get("content").is_none() || answer["content"].is_object())
        }
        "sampling/createMessage" => answer.get("content").is_some(),
        _ => answer["roots"].is_array(),
    };
    if ok {
        Ok(())
    } else {
        let expected = match method {
            "elicitation/create" => "an ElicitResult",
            "sampling/createMessage" => "a CreateMessageResult",
            _ => "a ListRootsResult",
        };
        Err(RpcError::invalid_params(format!(
            "invalid inputResponses.{key}: expected {expected}"
        )))
    }
}

/// The accepted value of `field` of an elicitation answer (`None` when declined).
fn elicited(answer: &Value, field: &str) -> Option<String> {
    if answer["action"] != "accept" {
        return None;
    }
    match &answer["content"][field] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

/// The text of a sampling answer (`content` a block or an array of blocks).
fn sampled(answer: &Value) -> String {
    let content = &answer["content"];
    content["text"]
        .as_str()
        .or_else(|| content[0]["text"].as_str())
        .unwrap_or("(no text)")
        .to_owned()
}

fn root_uris(answer: &Value) -> Vec<String> {
    answer["roots"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|root| root["uri"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// One request of the MRTR fixture `name` (`params`: the request's, with
/// `inputResponses` and `requestState` at the top level).
///
/// A `stateful` fixture mints a signed `requestState` with every `input_required`
/// (the round and the answers so far) and takes answers only for the round its state
/// names; a stateless one has one round and takes the answers of `inputResponses`
/// alone. Answers to keys not asked are ignored; a missing answer is asked again; an
/// answer of the wrong shape is `-32602`; so is an altered state or one minted for
/// another fixture. Asking needs the methods' client capabilities (`-32021`).
pub fn run(
    name: &str,
    stateful: bool,
    params: &Value,
    step: impl Fn(u64, &Map<String, Value>) -> Step,
) -> Reply {
    let empty = Map::new();
    let responses = match params.get("inputResponses") {
        None => &empty,
        Some(Value::Object(r)) => r,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "`inputResponses` must be an object",
            ))
        }
    };
    let (mut round, mut answers, from_state) = match params.get("requestState") {
        None | Some(Value::Null) => (0, Map::new(), false),
        Some(state) => {
            let payload = state.as_str().and_then(verify).ok_or_else(|| {
                RpcError::invalid_params("invalid requestState: integrity check failed")
            })?;
            if payload["fixture"] != name {
                return Err(RpcError::invalid_params(
                    "invalid requestState: minted for another request",
                ));
            }
            let round = payload["round"].as_u64().unwrap_or(0);
            let answers = payload["answers"].as_object().cloned().unwrap_or_default();
            (round, answers, true)
        }
    };
    let mut usable = !stateful || from_state;
    loop {
        let inputs = match step(round, &answers) {
            Step::Done(result) => return Ok(result),
            Step::Ask(inputs) => inputs,
        };
        let mut missing = Vec::new();
        for input in inputs {
            if answers.contains_key(&input.key) {
                continue;
            }
            match responses.get(&input.key).filter(|_| usable) {
                Some(answer) => {
                    check_answer(input.method, &input.key, answer)?;
                    answers.insert(input.key, answer.clone());
                }
                None => missing.push(input),
            }
        }
        if missing.is_empty() {
            round += 1;
            // The next round's answers come with the next state.
            usable = !stateful;
            continue;
        }
        let mut undeclared: Vec<&str> = missing
            .iter()
            .map(|i| capability(i.method))
            .filter(|c| !declares(params, c))
            .collect();
        undeclared.dedup();
        if !undeclared.is_empty() {
            return Err(missing_capabilities(&undeclared));
        }
        let requests: Map<String, Value> = missing
            .into_iter()
            .map(|i| (i.key, json!({"method": i.method, "params": i.params})))
            .collect();
        let mut result = json!({"resultType": "input_required", "inputRequests": requests});
        if stateful {
            result["requestState"] = json!(sign(
                &json!({"fixture": name, "round": round, "answers": answers})
            ));
        }
        return Ok(result);
    }
}

/// The result a legacy-style fixture makes of the client's answer (the same whether the
/// answer came as a response or as an input response): the answer as text, and as
/// `structuredContent` when it is an object.
pub fn answer_result(answer: &Value) -> Value {
    let mut r = json!({"content": [{"type": "text", "text": answer.to_string()}]});
    if answer.is_object() {
        r["structuredContent"] = answer.clone();
    }
    r
}

/// A modern request to an MRTR tool: `None` when `name` is not one.
fn mrtr_tool(name: &str, args: &Value, params: &Value) -> Option<Reply> {
    let text = |t: String| text_result(t);
    let caps = client_capabilities(params).clone();
    Some(match name {
        "test_input_required_result_elicitation" => run(name, false, params, |round, a| {
            if round == 0 {
                return Step::Ask(vec![elicit(
                    "user_name",
                    "What is your name?",
                    "name",
                    "string",
                )]);
            }
            let who = elicited(&a["user_name"], "name").unwrap_or_else(|| "stranger".into());
            Step::Done(text(format!("Hello, {who}!")))
        }),
        "test_input_required_result_sampling" => run(name, false, params, |round, a| {
            if round == 0 {
                return Step::Ask(vec![sample(
                    "capital_question",
                    "What is the capital of France?",
                    100,
                )]);
            }
            Step::Done(text(format!(
                "Sampling result: {}",
                sampled(&a["capital_question"])
            )))
        }),
        "test_input_required_result_list_roots" => run(name, false, params, |round, a| {
            if round == 0 {
                return Step::Ask(vec![roots("client_roots")]);
            }
            let uris = root_uris(&a["client_roots"]);
            Step::Done(text(format!("Roots ({}): {}", uris.len(), uris.join(", "))))
        }),
        "test_input_required_result_request_state" => run(name, true, params, |round, a| {
            if round == 0 {
                return Step::Ask(vec![elicit("confirm", "Please confirm", "ok", "boolean")]);
            }
            let ok = elicited(&a["confirm"], "ok").unwrap_or_else(|| "none".into());
            Step::Done(text(format!("state-ok: requestState verified (ok={ok})")))
        }),
        "test_input_required_result_multiple_inputs" => run(name, true, params, |round, a| {
            if round == 0 {
                return Step::Ask(vec![
                    elicit("user_name", "What is your name?", "name", "string"),
                    sample("greeting", "Generate a greeting", 50),
                    roots("client_roots"),
                ]);
            }
            Step::Done(text(format!(
                "Name: {}; Greeting: {}; Roots: {}",
                elicited(&a["user_name"], "name").unwrap_or_else(|| "stranger".into()),
                sampled(&a["greeting"]),
                root_uris(&a["client_roots"]).len()
            )))
        }),
        "test_input_required_result_multi_round" => {
            run(name, true, params, |round, a| match round {
                0 => Step::Ask(vec![elicit(
                    "step1",
                    "Step 1: What is your name?",
                    "name",
                    "string",
                )]),
                1 => Step::Ask(vec![elicit(
                    "step2",
                    "Step 2: What is your favorite color?",
                    "color",
                    "string",
                )]),
                _ => Step::Done(text(format!(
                    "Multi-round complete: {} likes {}",
                    elicited(&a["step1"], "name").unwrap_or_else(|| "stranger".into()),
                    elicited(&a["step2"], "color").unwrap_or_else(|| "nothing".into())
                ))),
            })
        }
        "test_input_required_result_tampered_state" => run(name, true, params, |round, _| {
            if round == 0 {
                return Step::Ask(vec![elicit("confirm", "Please confirm", "ok", "boolean")]);
            }
            Step::Done(text("integrity-ok: requestState verified".into()))
        }),
        "test_input_required_result_capabilities" => run(name, true, params, |round, a| {
            if round > 0 {
                let keys: Vec<&str> = a.keys().map(String::as_str).collect();
                return Step::Done(text(format!(
                    "capabilities-ok: received {}",
                    keys.join(",")
                )));
            }
            let declared = |cap: &str| caps.get(cap).is_some_and(Value::is_object);
            let mut inputs = Vec::new();
            if declared("elicitation") {
                inputs.push(elicit(
                    "elicit_input",
                    "Elicitation input",
                    "value",
                    "string",
                ));
            }
            if declared("sampling") {
                inputs.push(sample("sample_input", "Sample request", 50));
            }
            if declared("roots") {
                inputs.push(roots("roots_input"));
            }
            if inputs.is_empty() {
                Step::Done(text("No supported capabilities declared".into()))
            } else {
                Step::Ask(inputs)
            }
        }),
        "test_streaming_elicitation" => run(name, false, params, |round, _| {
            if round == 0 {
                return Step::Ask(vec![elicit("proceed", "Continue?", "ok", "boolean")]);
            }
            Step::Done(text("Streaming complete".into()))
        }),
        // The suite's legacy fixtures that ask the client: one round, the answer as the
        // legacy path makes it a result.
        "test_sampling"
        | "test_elicitation"
        | "test_elicitation_sep1034_defaults"
        | "test_elicitation_sep1330_enums" => {
            let (method, request) = crate::conformance::client_request(name, args)?;
            let key = capability(method);
            run(name, false, params, |round, a| {
                if round == 0 {
                    return Step::Ask(vec![Input {
                        key: key.to_owned(),
                        method,
                        params: request.clone(),
                    }]);
                }
                Step::Done(answer_result(&a[key]))
            })
        }
        _ => return None,
    })
}

/// `prompts/get` of the MRTR prompt; `None` for other names or in legacy mode.
pub fn get_prompt(name: &str, params: &Value, modern: bool, era: Era) -> Option<Reply> {
    if era == Era::Legacy || name != PROMPT {
        return None;
    }
    if !modern {
        return Some(Err(RpcError::invalid_params(needs_modern_text(name))));
    }
    Some(run(PROMPT, false, params, |round, a| {
        if round == 0 {
            return Step::Ask(vec![elicit(
                "user_context",
                "What context should the prompt use?",
                "context",
                "string",
            )]);
        }
        let context = elicited(&a["user_context"], "context").unwrap_or_else(|| "none".into());
        Step::Done(
            json!({"description": "MRTR prompt", "messages": [{"role": "user",
            "content": {"type": "text", "text": format!("Prompt with context: {context}")}}]}),
        )
    }))
}

/// `resources/read` of the MRTR resource; `None` for other URIs or in legacy mode.
pub fn read(uri: &str, params: &Value, modern: bool, era: Era) -> Option<Reply> {
    if era == Era::Legacy || uri != RESOURCE {
        return None;
    }
    if !modern {
        return Some(Err(RpcError::invalid_params(needs_modern_text(uri))));
    }
    Some(run(RESOURCE, false, params, |round, a| {
        if round == 0 {
            return Step::Ask(vec![elicit("reader", "Who is reading?", "name", "string")]);
        }
        let who = elicited(&a["reader"], "name").unwrap_or_else(|| "nobody".into());
        Step::Done(
            json!({"contents": [{"uri": RESOURCE, "mimeType": "text/plain",
            "text": format!("Read by {who}")}]}),
        )
    }))
}

impl Server {
    /// A conformance tool with a modern behaviour: the modern-only tools (a legacy
    /// request gets [`needs_modern`], except for the log and trigger tools, which serve
    /// both), and the legacy fixtures that ask the client, for a modern request.
    /// `None`: not such a tool (or a legacy request to a legacy fixture).
    pub fn conformance_modern_tool(
        &mut self,
        name: &str,
        args: &Value,
        params: &Value,
        modern: bool,
    ) -> Option<Reply> {
        match name {
            "test_trigger_tool_change" => {
                return Some(self.emit_list_changed(&json!({"kind": "tools"})))
            }
            "test_trigger_prompt_change" => {
                return Some(self.emit_list_changed(&json!({"kind": "prompts"})))
            }
            "test_logging_tool" => return Some(Ok(self.logging_tool(params, modern))),
            _ => {}
        }
        if !modern {
            return is_tool(name).then(|| Ok(needs_modern(name)));
        }
        if name == "test_missing_capability" {
            return Some(if declares(params, "sampling") {
                Ok(text_result("sampling is declared"))
            } else {
                Err(missing_capabilities(&["sampling"]))
            });
        }
        mrtr_tool(name, args, params)
    }

    /// `test_logging_tool`: one `notifications/message` at `info`, for a modern request
    /// only if its `_meta` sets a `logLevel` of `info` or more verbose.
    fn logging_tool(&self, params: &Value, modern: bool) -> Value {
        let level = params
            .get("_meta")
            .and_then(|m| m.get(META_LOG_LEVEL))
            .and_then(Value::as_str);
        let why_not = if !modern {
            None
        } else {
            match level.map(|l| LEVELS.iter().position(|x| *x == l)) {
                None => Some("no logLevel".to_owned()),
                Some(Some(i)) if i <= 1 => None,
                Some(_) => Some(format!("logLevel {} is above info", level.unwrap_or(""))),
            }
        };
        match why_not {
            None => {
                self.out.notify(
                    "notifications/message",
                    json!({"level": "info", "logger": "conformance", "data": "test_logging_tool ran"}),
                );
                text_result("logged 1 message at info")
            }
            Some(why) => text_result(format!("logged nothing ({why})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modern::{META_SUBSCRIPTION, MODERN_VERSION};
    use crate::{Config, Out};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// An in-process server with the conformance fixtures, and what it writes.
    struct Harness {
        server: Server,
        rx: UnboundedReceiver<Out>,
        next_id: u64,
    }

    /// The suite's default client capabilities.
    fn all_caps() -> Value {
        json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
    }

    /// `params` of a modern request with these client capabilities.
    fn modern(mut params: Value, caps: Value) -> Value {
        params["_meta"] = json!({META_VERSION: MODERN_VERSION, META_CAPABILITIES: caps});
        params
    }

    /// A modern `tools/call` of `name` (no arguments) with `extra` top-level params.
    fn call(name: &str, extra: Value) -> Value {
        let mut p = modern(json!({"name": name, "arguments": {}}), all_caps());
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    }

    fn accept(content: Value) -> Value {
        json!({"action": "accept", "content": content})
    }

    impl Harness {
        fn new(era: Era) -> Self {
            let (tx, rx) = unbounded_channel();
            let config = Config {
                conformance: true,
                ..Config::for_tests(era)
            };
            Harness {
                server: Server::new(config, tx),
                rx,
                next_id: 1,
            }
        }

        fn drain(&mut self) -> Vec<Value> {
            std::iter::from_fn(|| self.rx.try_recv().ok())
                .map(|o| match o {
                    Out::Line(l) => serde_json::from_str(&l).unwrap(),
                    Out::Exit(c) => panic!("exit {c}"),
                })
                .collect()
        }

        /// A request → (messages written before its response, the response).
        async fn request(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
            let id = json!(self.next_id);
            self.next_id += 1;
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            self.server.handle_line(&msg.to_string()).await;
            let mut out = self.drain();
            let at = out
                .iter()
                .position(|m| m.get("method").is_none() && m["id"] == id)
                .unwrap_or_else(|| panic!("no response to {method}: {out:?}"));
            let response = out.remove(at);
            assert_eq!(out.len(), at, "messages after the response: {out:?}");
            (out, response)
        }

        async fn result(&mut self, method: &str, params: Value) -> Value {
            let (_, r) = self.request(method, params).await;
            r.get("result")
                .cloned()
                .unwrap_or_else(|| panic!("{method} failed: {r}"))
        }

        async fn error(&mut self, method: &str, params: Value) -> Value {
            let (_, r) = self.request(method, params).await;
            r.get("error")
                .cloned()
                .unwrap_or_else(|| panic!("{method} did not fail: {r}"))
        }
    }

    fn names(list: &Value, key: &str) -> Vec<String> {
        list[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn signed_state_detects_any_change() {
        let payload = json!({"fixture": "f", "round": 1, "answers": {"k": "v"}});
        let state = sign(&payload);
        assert_eq!(verify(&state), Some(payload));
        assert_eq!(
            sign(&json!(1)),
            sign(&json!(1)),
            "deterministic in a process"
        );
        let (tag, body) = state.split_once('.').unwrap();
        assert_eq!(tag.len(), 16);
        for bad in [
            format!("{state}-TAMPERED"),
            format!("{tag}.{}", body.replace("\"v\"", "\"w\"")),
            format!("0000000000000000.{body}"),
            body.to_owned(),
            String::new(),
        ] {
            assert_eq!(verify(&bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn listings_per_era_with_the_fixtures_first() {
        for era in [Era::Dual, Era::Modern] {
            let mut h = Harness::new(era);
            let tools = h.result("tools/list", modern(json!({}), json!({}))).await;
            let tools = names(&tools, "tools");
            assert_eq!(tools[0], "test_simple_text", "takes {{}}: listed first");
            for (name, _) in TOOLS {
                assert!(tools.iter().any(|t| t == name), "{name}");
            }
            let prompts = h.result("prompts/list", modern(json!({}), json!({}))).await;
            assert!(names(&prompts, "prompts").iter().any(|p| p == PROMPT));
            let resources = h
                .result("resources/list", modern(json!({}), json!({})))
                .await;
            assert!(resources["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["uri"] == RESOURCE));
        }
        let mut h = Harness::new(Era::Legacy);
        let tools = h.result("tools/list", json!({})).await;
        let schema_tool = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "json_schema_2020_12_tool")
            .unwrap()
            .clone();
        let tools = names(&tools, "tools");
        assert!(tools.iter().any(|t| t == "test_elicitation_sep1330_enums"));
        assert!(!tools.iter().any(|t| is_tool(t)), "no modern-only tool");
        assert_eq!(
            tools.last().unwrap(),
            "log",
            "then the control tools, as without fixtures"
        );
        let schema = &schema_tool["inputSchema"];
        for key in [
            "$schema",
            "$defs",
            "allOf",
            "if",
            "then",
            "else",
            "additionalProperties",
        ] {
            assert!(schema.get(key).is_some(), "{key}");
        }
        assert_eq!(schema["$defs"]["address"]["$anchor"], "addressDef");
        let prompts = h.result("prompts/list", json!({})).await;
        assert!(!names(&prompts, "prompts").iter().any(|p| p == PROMPT));
        assert_eq!(
            h.error("tools/call", json!({"name": "test_missing_capability"}))
                .await["message"],
            "Unknown tool: test_missing_capability"
        );
    }

    #[tokio::test]
    async fn one_round_elicitation_and_its_error_cases() {
        let mut h = Harness::new(Era::Dual);
        let tool = "test_input_required_result_elicitation";
        let r1 = h.result("tools/call", call(tool, json!({}))).await;
        assert_eq!(
            r1,
            json!({"resultType": "input_required", "inputRequests": {"user_name": {
                "method": "elicitation/create", "params": {"message": "What is your name?",
                    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"]}}}}})
        );
        let done = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"user_name": accept(json!({"name": "Alice"})),
                    "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}}}),
                ),
            )
            .await;
        assert_eq!(
            done,
            json!({"content": [{"type": "text", "text": "Hello, Alice!"}], "resultType": "complete"})
        );
        // A wrong key: asked again.
        let again = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"wrong_key": accept(json!({"data": "x"}))}}),
                ),
            )
            .await;
        assert_eq!(again, r1);
        // Answers of the wrong shape, and no object at all.
        for bad in [
            json!({"user_name": 12345}),
            json!({"user_name": {"action": "maybe"}}),
        ] {
            let e = h
                .error("tools/call", call(tool, json!({"inputResponses": bad})))
                .await;
            assert_eq!(e["code"], -32602, "{bad}");
            assert_eq!(
                e["message"],
                "invalid inputResponses.user_name: expected an ElicitResult"
            );
        }
        let e = h
            .error("tools/call", call(tool, json!({"inputResponses": null})))
            .await;
        assert_eq!(e["code"], -32602);
        // A declined elicitation completes too.
        let declined = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"user_name": {"action": "decline"}}}),
                ),
            )
            .await;
        assert_eq!(declined["content"][0]["text"], "Hello, stranger!");
        // No elicitation capability: -32021, before anything is asked.
        let mut p = call(tool, json!({}));
        p["_meta"][META_CAPABILITIES] = json!({"sampling": {}});
        assert_eq!(
            h.error("tools/call", p).await,
            json!({"code": -32021, "message": "Missing required client capability",
                "data": {"requiredCapabilities": {"elicitation": {}}}})
        );
        // A legacy request (dual mode): a tool error.
        let legacy = h
            .result("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        assert_eq!(legacy["isError"], true);
        assert!(legacy.get("resultType").is_none());
    }

    #[tokio::test]
    async fn sampling_and_roots_rounds() {
        let mut h = Harness::new(Era::Modern);
        let tool = "test_input_required_result_sampling";
        let r1 = h.result("tools/call", call(tool, json!({}))).await;
        assert_eq!(
            r1["inputRequests"]["capital_question"],
            json!({"method": "sampling/createMessage", "params": {"messages": [{"role": "user",
                "content": {"type": "text", "text": "What is the capital of France?"}}], "maxTokens": 100}})
        );
        let answer = json!({"role": "assistant", "content": {"type": "text", "text": "Paris."},
            "model": "m", "stopReason": "endTurn"});
        let done = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"capital_question": answer}}),
                ),
            )
            .await;
        assert_eq!(done["content"][0]["text"], "Sampling result: Paris.");

        let tool = "test_input_required_result_list_roots";
        let r1 = h.result("tools/call", call(tool, json!({}))).await;
        assert_eq!(
            r1["inputRequests"],
            json!({"client_roots": {"method": "roots/list", "params": {}}})
        );
        let roots = json!({"roots": [{"uri": "file:///test/root", "name": "Test Root"}]});
        let done = h
            .result(
                "tools/call",
                call(tool, json!({"inputResponses": {"client_roots": roots}})),
            )
            .await;
        assert_eq!(done["content"][0]["text"], "Roots (1): file:///test/root");
        let e = h
            .error(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"client_roots": {"roots": 1}}}),
                ),
            )
            .await;
        assert_eq!(
            e["message"],
            "invalid inputResponses.client_roots: expected a ListRootsResult"
        );
    }

    #[tokio::test]
    async fn signed_state_round_trip_and_tampering() {
        let mut h = Harness::new(Era::Dual);
        for (tool, done_text) in [
            (
                "test_input_required_result_request_state",
                "state-ok: requestState verified (ok=true)",
            ),
            (
                "test_input_required_result_tampered_state",
                "integrity-ok: requestState verified",
            ),
        ] {
            let r1 = h.result("tools/call", call(tool, json!({}))).await;
            assert_eq!(
                r1["inputRequests"]["confirm"]["method"],
                "elicitation/create"
            );
            let state = r1["requestState"].as_str().unwrap().to_owned();
            assert_eq!(
                verify(&state),
                Some(json!({"fixture": tool, "round": 0, "answers": {}}))
            );
            let answers = json!({"confirm": accept(json!({"ok": true}))});
            let done = h
                .result(
                    "tools/call",
                    call(
                        tool,
                        json!({"inputResponses": answers, "requestState": state}),
                    ),
                )
                .await;
            assert_eq!(done["content"][0]["text"], done_text);
            let e = h
                .error(
                    "tools/call",
                    call(
                        tool,
                        json!({"inputResponses": answers, "requestState": format!("{state}-TAMPERED")}),
                    ),
                )
                .await;
            assert_eq!(
                e,
                json!({"code": -32602, "message": "invalid requestState: integrity check failed"})
            );
            // Answers without the state are not believed: asked again, with a state.
            let again = h
                .result("tools/call", call(tool, json!({"inputResponses": answers})))
                .await;
            assert_eq!(again["resultType"], "input_required");
            assert!(again["requestState"].is_string());
        }
        // A state is bound to the fixture that minted it.
        let r1 = h
            .result(
                "tools/call",
                call("test_input_required_result_request_state", json!({})),
            )
            .await;
        let e = h
            .error(
                "tools/call",
                call(
                    "test_input_required_result_tampered_state",
                    json!({"inputResponses": {"confirm": accept(json!({"ok": true}))},
                        "requestState": r1["requestState"]}),
                ),
            )
            .await;
        assert_eq!(
            e["message"],
            "invalid requestState: minted for another request"
        );
        let e = h
            .error(
                "tools/call",
                call(
                    "test_input_required_result_elicitation",
                    json!({"requestState": 7}),
                ),
            )
            .await;
        assert_eq!(e["code"], -32602);
    }

    #[tokio::test]
    async fn multi_round_states_change_and_carry_the_answers() {
        let mut h = Harness::new(Era::Dual);
        let tool = "test_input_required_result_multi_round";
        let r1 = h.result("tools/call", call(tool, json!({}))).await;
        assert_eq!(
            r1["inputRequests"]["step1"]["params"]["message"],
            "Step 1: What is your name?"
        );
        // Both answers at once: only the round's own counts, step 2 is still asked.
        let both = json!({"step1": accept(json!({"name": "Alice"})),
            "step2": accept(json!({"color": "blue"}))});
        let r2 = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": both, "requestState": r1["requestState"]}),
                ),
            )
            .await;
        let keys: Vec<&String> = r2["inputRequests"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["step2"]);
        assert_ne!(r2["requestState"], r1["requestState"]);
        let done = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"step2": accept(json!({"color": "blue"}))},
                        "requestState": r2["requestState"]}),
                ),
            )
            .await;
        assert_eq!(
            done["content"][0]["text"],
            "Multi-round complete: Alice likes blue"
        );
    }

    #[tokio::test]
    async fn multiple_inputs_in_one_round_and_partial_answers() {
        let mut h = Harness::new(Era::Dual);
        let tool = "test_input_required_result_multiple_inputs";
        let r1 = h.result("tools/call", call(tool, json!({}))).await;
        let methods: Vec<(&String, &Value)> = r1["inputRequests"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k, &v["method"]))
            .collect();
        assert_eq!(
            methods,
            [
                (&"client_roots".to_owned(), &json!("roots/list")),
                (&"greeting".to_owned(), &json!("sampling/createMessage")),
                (&"user_name".to_owned(), &json!("elicitation/create")),
            ]
        );
        // Two of three: the third is asked again, the two travel in the state.
        let partial = json!({"user_name": accept(json!({"name": "Alice"})),
            "greeting": {"role": "assistant", "content": {"type": "text", "text": "Hi!"}, "model": "m"}});
        let r2 = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": partial, "requestState": r1["requestState"]}),
                ),
            )
            .await;
        let keys: Vec<&String> = r2["inputRequests"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["client_roots"]);
        let carried = verify(r2["requestState"].as_str().unwrap()).unwrap();
        assert_eq!(carried["answers"], partial);
        let done = h
            .result(
                "tools/call",
                call(
                    tool,
                    json!({"inputResponses": {"client_roots": {"roots": []}},
                        "requestState": r2["requestState"]}),
                ),
            )
            .await;
        assert_eq!(
            done["content"][0]["text"],
            "Name: Alice; Greeting: Hi!; Roots: 0"
        );
        // Asking all three needs all three capabilities.
        let mut p = call(tool, json!({}));
        p["_meta"][META_CAPABILITIES] = json!({"elicitation": {}});
        assert_eq!(
            h.error("tools/call", p).await["data"],
            json!({"requiredCapabilities": {"roots": {}, "sampling": {}}})
        );
    }

    #[tokio::test]
    async fn capabilities_fixture_asks_only_what_is_declared() {
        let mut h = Harness::new(Era::Dual);
        let tool = "test_input_required_result_capabilities";
        let mut p = call(tool, json!({}));
        p["_meta"][META_CAPABILITIES] = json!({"sampling": {}});
        let r1 = h.result("tools/call", p.clone()).await;
        let keys: Vec<&String> = r1["inputRequests"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["sample_input"]);
        p["inputResponses"] = json!({"sample_input": {"role": "assistant", "content": {"type": "text", "text": "x"}}});
        p["requestState"] = r1["requestState"].clone();
        let done = h.result("tools/call", p).await;
        assert_eq!(
            done["content"][0]["text"],
            "capabilities-ok: received sample_input"
        );
        let mut none = call(tool, json!({}));
        none["_meta"][META_CAPABILITIES] = json!({});
        let done = h.result("tools/call", none).await;
        assert_eq!(
            done["content"][0]["text"],
            "No supported capabilities declared"
        );
    }

    #[tokio::test]
    async fn prompt_and_resource_ask_too() {
        let mut h = Harness::new(Era::Dual);
        let get = |extra: Value| {
            let mut p = modern(json!({"name": PROMPT}), all_caps());
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            p
        };
        let r1 = h.result("prompts/get", get(json!({}))).await;
        assert_eq!(r1["resultType"], "input_required");
        assert_eq!(
            r1["inputRequests"]["user_context"]["params"]["message"],
            "What context should the prompt use?"
        );
        let done = h
            .result(
                "prompts/get",
                get(json!({"inputResponses": {"user_context": accept(json!({"context": "tests"}))}})),
            )
            .await;
        assert_eq!(done["resultType"], "complete");
        assert_eq!(
            done["messages"][0]["content"]["text"],
            "Prompt with context: tests"
        );
        assert_eq!(
            h.error("prompts/get", json!({"name": PROMPT})).await["code"],
            -32602,
            "a legacy request"
        );

        let read = |extra: Value| {
            let mut p = modern(json!({"uri": RESOURCE}), all_caps());
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            p
        };
        let r1 = h.result("resources/read", read(json!({}))).await;
        assert_eq!(r1["resultType"], "input_required");
        assert!(r1.get("ttlMs").is_none() && r1.get("cacheScope").is_none());
        let done = h
            .result(
                "resources/read",
                read(json!({"inputResponses": {"reader": accept(json!({"name": "Bob"}))}})),
            )
            .await;
        assert_eq!(
            done,
            json!({"contents": [{"uri": RESOURCE, "mimeType": "text/plain", "text": "Read by Bob"}],
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
        );
        assert_eq!(
            h.error("resources/read", json!({"uri": RESOURCE})).await["code"],
            -32602
        );
    }

    #[tokio::test]
    async fn diagnostic_tools() {
        let mut h = Harness::new(Era::Dual);
        // test_missing_capability
        let mut p = call("test_missing_capability", json!({}));
        p["_meta"][META_CAPABILITIES] = json!({});
        assert_eq!(
            h.error("tools/call", p).await,
            json!({"code": -32021, "message": "Missing required client capability",
                "data": {"requiredCapabilities": {"sampling": {}}}})
        );
        let ok = h
            .result("tools/call", call("test_missing_capability", json!({})))
            .await;
        assert_eq!(ok["content"][0]["text"], "sampling is declared");

        // test_logging_tool: a log only with a logLevel of info or more verbose.
        for (level, logs) in [
            (None, false),
            (Some("debug"), true),
            (Some("info"), true),
            (Some("error"), false),
        ] {
            let mut p = call("test_logging_tool", json!({}));
            if let Some(l) = level {
                p["_meta"][META_LOG_LEVEL] = json!(l);
            }
            let (before, resp) = h.request("tools/call", p).await;
            assert_eq!(before.len(), usize::from(logs), "{level:?}");
            if logs {
                assert_eq!(before[0]["method"], "notifications/message");
                assert_eq!(before[0]["params"]["level"], "info");
            }
            assert_eq!(resp["result"]["resultType"], "complete");
        }
        // A legacy request has no logLevel: it logs.
        let (before, _) = h
            .request("tools/call", json!({"name": "test_logging_tool"}))
            .await;
        assert_eq!(before.len(), 1);

        // The triggers: tagged list_changed to the listens that asked for it.
        let listen = modern(
            json!({"notifications": {"toolsListChanged": true}}),
            json!({}),
        );
        let msg = json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": listen});
        h.server.handle_line(&msg.to_string()).await;
        assert_eq!(h.drain().len(), 1, "the acknowledgement");
        let (before, _) = h
            .request("tools/call", call("test_trigger_tool_change", json!({})))
            .await;
        assert_eq!(
            before,
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                "params": {"_meta": {META_SUBSCRIPTION: "L"}}})
            ]
        );
        let (before, _) = h
            .request("tools/call", call("test_trigger_prompt_change", json!({})))
            .await;
        assert!(before.is_empty(), "not asked for");

        // test_streaming_elicitation: asks through input_required, never a request.
        let (before, resp) = h
            .request("tools/call", call("test_streaming_elicitation", json!({})))
            .await;
        assert!(before.is_empty());
        assert_eq!(
            resp["result"]["inputRequests"]["proceed"]["method"],
            "elicitation/create"
        );
        let mut p = call("test_streaming_elicitation", json!({}));
        p["_meta"][META_CAPABILITIES] = json!({"sampling": {}});
        assert_eq!(h.error("tools/call", p).await["code"], -32021);

        // A legacy request to a modern-only tool (dual mode): a tool error.
        let legacy = h
            .result("tools/call", json!({"name": "test_missing_capability"}))
            .await;
        assert_eq!(
            legacy["content"][0]["text"],
            format!(
                "test_missing_capability needs a modern request (params._meta[\"{META_VERSION}\"])"
            )
        );
    }

    #[tokio::test]
    async fn legacy_fixtures_ask_through_input_required_for_modern_requests() {
        let mut h = Harness::new(Era::Dual);
        let args = json!({"prompt": "Test prompt for sampling"});
        // Legacy request: a sampling/createMessage request, the answer becomes the result.
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "test_sampling", "arguments": args}});
        h.server.handle_line(&msg.to_string()).await;
        let out = h.drain();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["method"], "sampling/createMessage");
        let answer =
            json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
        let reply = json!({"jsonrpc": "2.0", "id": out[0]["id"], "result": answer});
        h.server.handle_line(&reply.to_string()).await;
        let legacy_result = h.drain().remove(0)["result"].clone();
        assert_eq!(legacy_result, answer_result(&answer));

        // Modern request: input_required with the same request, then the same result.
        let mut p = call("test_sampling", json!({}));
        p["arguments"] = args.clone();
        let (before, r1) = h.request("tools/call", p.clone()).await;
        assert!(before.is_empty());
        assert_eq!(
            r1["result"]["inputRequests"]["sampling"],
            json!({"method": "sampling/createMessage", "params": {"messages": [{"role": "user",
                "content": {"type": "text", "text": "Test prompt for sampling"}}], "maxTokens": 100}})
        );
        assert!(r1["result"].get("requestState").is_none());
        p["inputResponses"] = json!({"sampling": answer});
        let done = h.result("tools/call", p).await;
        let mut expected = legacy_result;
        expected["resultType"] = json!("complete");
        assert_eq!(done, expected);

        // The SEP-1330 enums, legacy and modern alike.
        let msg = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "test_elicitation_sep1330_enums", "arguments": {}}});
        h.server.handle_line(&msg.to_string()).await;
        let asked = h.drain().remove(0);
        assert_eq!(asked["method"], "elicitation/create");
        let props = &asked["params"]["requestedSchema"]["properties"];
        for field in [
            "untitledSingle",
            "titledSingle",
            "legacyEnum",
            "untitledMulti",
            "titledMulti",
        ] {
            assert!(props[field].is_object(), "{field}");
        }
        let r1 = h
            .result(
                "tools/call",
                call("test_elicitation_sep1330_enums", json!({})),
            )
            .await;
        assert_eq!(
            r1["inputRequests"]["elicitation"]["params"],
            asked["params"]
        );
        let r = h
            .result(
                "tools/call",
                modern(
                    json!({"name": "json_schema_2020_12_tool", "arguments": {"name": "x"}}),
                    json!({}),
                ),
            )
            .await;
        assert_eq!(
            r["content"][0]["text"],
            "JSON Schema 2020-12 tool called with: {\"name\":\"x\"}"
        );
    }
}
