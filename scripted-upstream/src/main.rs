//! `scripted-upstream`: a small, deterministic MCP server over stdio (or over Streamable
//! HTTP, shared by several clients: "HTTP mode" below), used by mcpmux's tests and
//! benchmarks as an upstream.
//!
//! It deliberately does not depend on the `mcpmux` library: it is an independent peer
//! that speaks the wire protocol (newline-delimited JSON-RPC 2.0, one compact message per
//! line, MCP only on stdout, diagnostics on stderr), so it can catch proxy bugs that a
//! shared codec would hide. It exits 0 on stdin EOF (open listens are simply dropped).
//! Everything below describes the stdio mode unless it says otherwise; the HTTP mode
//! serves the same surface, with the differences its section lists.
//!
//! # Concurrency
//!
//! One reader loop owns all state and handles messages in arrival order; one writer task
//! drains an unbounded channel to stdout (batching lines, flushing when the channel is
//! empty, writing a burst [`WRITE_BUFFER`] bytes at a time). In HTTP mode one task owns all state the same way and handles the messages of
//! every connection in arrival order, each message whole. Requests that must wait (held reads, `hang`, `sample`, `delay`, open listens,
//! delayed listen acknowledgements) are parked in the state or in a timer task and
//! answered later, so they never block the reader. Everything a handler sends goes
//! through the same channel, so stdout order equals send order (e.g. an `emit_update`
//! notification is always written before that tool call's result).
//!
//! # Eras (`SCRIPTED_ERA`)
//!
//! A request is **modern** when `params._meta["io.modelcontextprotocol/protocolVersion"]`
//! is present (any value). How requests are served depends on `SCRIPTED_ERA`:
//!
//! - `legacy` (default): exactly the legacy surface below; modern `_meta` is ignored,
//!   `server/discover` and `subscriptions/listen` are `-32601`, results never carry
//!   `resultType`, and the tools `ask` and `end_listens` do not exist (`-32602 "Unknown
//!   tool"`, not in `tools/list`).
//! - `dual`: `initialize` is always answered the legacy way (even with modern `_meta`)
//!   and marks the process as having a legacy session. Modern requests are validated and
//!   served the modern way; the others are legacy (so a `server/discover` without modern
//!   `_meta` is `-32601`, and `ping` with it is `-32601`).
//! - `modern`: every request is served the modern way. `initialize` →
//!   `-32022 "Unsupported protocol version: <params.protocolVersion>"` with
//!   `data: {"supported": ["2026-07-28"], "requested": "<params.protocolVersion>"}`
//!   (`""` when absent), whatever its `_meta`.
//!
//! Validation of a modern request, in this order, before the method is looked at
//! (notifications and responses are never validated):
//!
//! 1. `_meta["io.modelcontextprotocol/protocolVersion"]` absent or not a string →
//!    `-32602 "missing protocolVersion"` (no `data`);
//! 2. not `"2026-07-28"` → `-32022 "Unsupported protocol version: <v>"`,
//!    `data: {"supported": ["2026-07-28"], "requested": "<v>"}` (also in dual mode);
//! 3. `_meta["io.modelcontextprotocol/clientCapabilities"]` absent or not an object →
//!    `-32602 "missing clientCapabilities"` (no `data`).
//!
//! A modern request is served statelessly: nothing depends on earlier requests except
//! open listens and tool side effects (versions, holds, faults). In particular `ping`,
//! `logging/setLevel`, `resources/subscribe` and `resources/unsubscribe` →
//! `-32601 "Method not found: <method>"` (`completion/complete` stays allowed).
//!
//! # MCP surface (legacy requests)
//!
//! - `initialize` echoes a supported `protocolVersion` (2025-11-25, 2025-06-18,
//!   2025-03-26, 2024-11-05; anything else gets 2025-11-25) and declares `capabilities`
//!   `{tools: {listChanged: true}, prompts: {listChanged: true}, resources: {subscribe:
//!   true, listChanged: true}, logging: {}, completions: {}}`, `serverInfo: {name:
//!   <SCRIPTED_NAME>, version: "1.0.0"}`.
//! - `ping`, `logging/setLevel` → `{}`; `completion/complete` → a few fixed values.
//! - `resources/list` (paginated), `resources/templates/list` (`test://dynamic/{id}`),
//!   `resources/read`, `resources/subscribe`, `resources/unsubscribe` (both `{}`).
//! - `prompts/list`, `prompts/get` (one prompt, `greet {name}`).
//! - `tools/list`, `tools/call` (the control tools below).
//! - Unknown methods → `-32601 "Method not found: <method>"`. Notifications are recorded
//!   and otherwise ignored, except `notifications/cancelled {requestId}`, which silently
//!   drops a parked request (a held read, a `hang`, a `sample` call, in which case the
//!   outstanding `sampling/createMessage` is cancelled towards the client too, or an open
//!   listen).
//!
//! Resources: `test://static/1` … `test://static/N` (odd = text, even = blob),
//! `test://dynamic/<anything non-empty>` and `test://nack/<anything non-empty>` (text, or
//! blob when the URI contains `blob`; the URI may carry a query such as
//! `?ttl=60000&scope=public`, it is part of the URI). Other URIs → `-32002 "Resource not
//! found"` with `data: {uri}` (`-32602`, same message and data, for a modern request).
//! Text content is `"<uri> v<version>"`; blob content is base64 of the bytes `0..=255`
//! followed by `" <uri> v<version>"`. `version` is the number of updates emitted for that
//! URI.
//!
//! # Modern surface (modern requests, `dual` and `modern` modes)
//!
//! - Every successful result carries `"resultType": "complete"` (tool results, `stats`,
//!   control tools, parked answers such as `delay`, held reads and `sample` included),
//!   except an `ask` result that is `"input_required"`. Errors are unchanged.
//! - Results of `server/discover`, `tools/list`, `prompts/list`, `resources/list`,
//!   `resources/templates/list` and `resources/read` also carry `ttlMs` (default
//!   `SCRIPTED_TTL_MS`) and `cacheScope` (default `SCRIPTED_CACHE_SCOPE`). For
//!   `resources/read`, the URI's query overrides them for that read: `ttl=<ms>` (a
//!   non-negative integer) and/or `scope=public|private`, `&`-separated; invalid values are
//!   ignored and the last valid one wins (e.g. `test://dynamic/a?ttl=60000&scope=public`
//!   → `ttlMs: 60000, cacheScope: "public"`). A held read gets the values of its arrival.
//! - `server/discover` →
//!   `{"supportedVersions": V, "capabilities": <the object initialize declares>,
//!   "instructions": "scripted upstream", "resultType": "complete", "ttlMs": T,
//!   "cacheScope": S, "_meta": {"io.modelcontextprotocol/serverInfo": {"name":
//!   <SCRIPTED_NAME>, "version": "0.0.0"}}}` with `V = ["2026-07-28"]` in modern mode and
//!   `["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]` in dual mode.
//! - `subscriptions/listen` with `params.notifications` = `{toolsListChanged?,
//!   promptsListChanged?, resourcesListChanged?, resourceSubscriptions?: [uri]}` (absent
//!   = `{}`; not an object, or `resourceSubscriptions` not an array of strings → `-32602`):
//!   - First writes `notifications/subscriptions/acknowledged` with `params:
//!     {"notifications": H, "_meta": {"io.modelcontextprotocol/subscriptionId": <the
//!     listen's id, same JSON value>}}`. `H` holds `<flag>: true` for each list flag asked
//!     as `true` (others omitted), and `resourceSubscriptions`: the asked URIs that are
//!     readable resources, except those starting with `test://nack/` (never honoured),
//!     deduplicated, in asked order; `[]` when none is honoured, omitted when not asked.
//!     `SCRIPTED_NO_SUBSCRIBE` does not change this.
//!   - With `SCRIPTED_ACK_DELAY_MS`, the acknowledgement is written that many ms later;
//!     other messages are served meanwhile, and the listen receives nothing before its
//!     acknowledgement (updates emitted meanwhile are not sent to it). If the client
//!     cancels it first, no acknowledgement is ever sent; if `end_listens` ends it first,
//!     the acknowledgement is written at once, just before the end.
//!   - The listen then stays open (no response) until the client sends
//!     `notifications/cancelled {requestId: <listen id>}` (removed, nothing sent) or the
//!     tool `end_listens` ends it (below).
//! - Tagged notifications: every notification for a listen is a copy whose `_meta` has
//!   `"io.modelcontextprotocol/subscriptionId": <listen id>` added (to the tool's `meta`
//!   when that is an object; a non-object `meta` is dropped in tagged copies).
//! - Untagged (legacy) notifications from `emit_*` are written in legacy mode always, in
//!   dual mode only once a legacy `initialize` happened, in modern mode never.
//!
//! # Control tools (`tools/call`)
//!
//! | tool | arguments | effect |
//! |---|---|---|
//! | `echo` | `{text}` | returns `text` |
//! | `emit_update` | `{uri, meta?, stamp?}` | bumps the version, sends `notifications/resources/updated {uri, _meta?}` (untagged: whether or not subscribed — HTTP mode: to the sessions subscribed to `uri`; tagged: one per open listen whose honoured URIs contain `uri`, in opening order), then the result `{uri, version, emitted}` |
//! | `emit_updates` | `{uri, count, meta?, stamp?}` | `count` updates as fast as possible (each: the untagged one, then the tagged ones), then the result |
//! | `emit_list_changed` | `{kind: tools\|prompts\|resources}` | sends `notifications/<kind>/list_changed` (untagged `{}`; tagged `{_meta}` to each listen that asked `<kind>ListChanged`) |
//! | `stats` | `{}` | the JSON below, as `structuredContent` and as text |
//! | `hold_reads` | `{uri}` | later reads of `uri` are parked, not answered |
//! | `release_reads` | `{uri}` | answers the parked reads (oldest first), then the result |
//! | `fail_reads` | `{uri, code?, message?}` | reads of `uri` answer an error (default `-32603`), in every era |
//! | `clear_faults` | `{}` | removes every `fail_reads` fault |
//! | `hang` | `{}` | never answered (until cancelled) |
//! | `regional` | `{region, query?}` | answers `"<region>: <query>"`; `region` carries `x-mcp-header: "Region"` in its schema |
//! | `delay` | `{ms, text?}` | answers `text` after `ms` milliseconds; other requests are served meanwhile |
//! | `exit` | `{code?}` | flushes stdout and exits with `code` (default 0), no result |
//! | `progress` | `{steps, interval_ms?}` | with `_meta.progressToken`, sends `steps` progress notifications (one every `interval_ms`, default at once), then the result |
//! | `sample` | `{prompt, log?}` | sends `sampling/createMessage` (ids `s1`, `s2`, …); the client's answer becomes the result. With `log` (any JSON), first a `notifications/message` `{level: "info", logger: "scripted", data: log}` tied to no request (HTTP mode: on the session's GET stream, before the request) |
//! | `log` | `{level?, data?}` | sends `notifications/message` |
//! | `ask` | `{rounds?, method?}` | dual/modern modes only: MRTR, below |
//! | `end_listens` | `{how?: "result"\|"cancelled"}` | dual/modern modes only: ends every open listen (below), then the result text `"ended <n>"` |
//! | `session` | `{}` | HTTP mode only: the caller's session id, `"s<N>"`, or `"stateless"`, as text and as `structuredContent: {"session": …}` |
//! | `end_session` | `{session?: "s<N>"}` | HTTP mode only: ends that session (default: the caller's) exactly as DELETE does, then the text `"ended s<N>"` (its own answer still arrives); not an open session, or a stateless caller without `session` → `-32602` |
//!
//! With `stamp: true` each update's `_meta.t` is set to its emission time in
//! nanoseconds since the UNIX epoch (a clock every process on the machine shares), so a
//! benchmark client can measure emit→receipt latency. Tagged copies share the `t` of
//! their update.
//!
//! `end_listens` (`how` defaults to `"result"`; anything else → `-32602`) ends the open
//! listens in opening order: `"result"` writes the graceful response
//! `{"jsonrpc":"2.0","id":<listen id>,"result":{"resultType":"complete","_meta":
//! {"io.modelcontextprotocol/subscriptionId":<listen id>}}}`; `"cancelled"` writes
//! `notifications/cancelled {"requestId": <listen id>, "reason": "server ended the
//! subscription"}`. Then the tool's own result.
//!
//! `ask {rounds?: n ≥ 1 (default 1), method?: "elicitation/create" (default) |
//! "sampling/createMessage" | "roots/list"}` (other values → `-32602`):
//!
//! - A legacy request (dual mode) gets a tool error result
//!   `{"content": [{"type": "text", "text": "ask needs a modern request
//!   (params._meta[\"io.modelcontextprotocol/protocolVersion\"])"}], "isError": true}`.
//! - The method's capability (`elicitation`, `sampling`, `roots`) must be a key of
//!   `_meta["io.modelcontextprotocol/clientCapabilities"]` on every call (first and
//!   retries), else `-32021 "Missing required client capability"` with
//!   `data: {"requiredCapabilities": {"<cap>": {}}}`.
//! - Without `params.requestState` (top level of the `tools/call` params, next to `name`
//!   and `arguments`): `{"resultType": "input_required", "inputRequests": {"q1":
//!   {"method": M, "params": P}}, "requestState": "ask:1:<n>"}`, where `P` for round `k`
//!   is, for `elicitation/create`, `{"mode": "form", "message": "question <k>",
//!   "requestedSchema": {"type": "object", "properties": {"answer": {"type":
//!   "string"}}, "required": ["answer"]}}`; for `sampling/createMessage`,
//!   `{"messages": [{"role": "user", "content": {"type": "text", "text": "question
//!   <k>"}}], "maxTokens": 10}`; for `roots/list`, `{}`.
//! - `requestState` format: `ask:<k>:<n>` when no answer is carried yet (round 1),
//!   else `ask:<k>:<n>:<compact JSON array of the answers to q1..q(k-1)>`, e.g.
//!   `ask:2:3:[{"action":"accept","content":{"answer":"x"}}]`: the server keeps nothing,
//!   earlier answers travel in the state. It is invalid (→ `-32602 "invalid
//!   requestState"`) unless it is a string of that form with `n` equal to this call's
//!   `rounds`, `1 ≤ k ≤ n` and exactly `k-1` answers.
//! - A retry with a valid `requestState` `ask:<k>:<n>…` needs `params.inputResponses`
//!   with key `q<k>` (else `-32602 "missing inputResponses.q<k>"`); that value is the
//!   answer to round `k`. If `k < n`: the next round, `q<k+1>`, state `ask:<k+1>:<n>:[…]`.
//!   If `k == n`: `{"resultType": "complete", "content": [{"type": "text", "text":
//!   "answers: <compact JSON array of the answers to q1..qn, in order>"}]}`.
//! - `stats.tools.ask` counts every call (first and retries), like any tool.
//!
//! `stats` returns (maps sorted by key; the `stats` call itself is already counted):
//!
//! ```text
//! { "name":       "<SCRIPTED_NAME>",            // which server answered (aggregation tests)
//!   "era":        "legacy" | "dual" | "modern",
//!   "counts":     { "<method>" | "<response>" | "<parse_error>" | "<invalid>": n },
//!   "by_uri":     { "<method>": { "<params.uri>": n } },
//!   "tools":      { "<tools/call params.name>": n },
//!   "subscribed": [ "<uri>", ... ],             // sorted: URIs any session subscribed to (legacy resources/subscribe)
//!   "subscribers": { "<uri>": n },              // sessions holding a subscription to it (URIs nobody holds: absent)
//!   "sessions":   { "opened": n,                // sessions ever opened (stdio: 1)
//!                   "open": n,                  // not ended (stdio: 1)
//!                   "ended": n,                 // by DELETE, end_session or its client going away (stdio: 0)
//!                   "gone": n,                  // of those, ended by its client going away (stdio: 0)
//!                   "streams": n },             // open sessions whose GET stream is open (stdio: 1)
//!   "refused":    { "missing_session": n,       // HTTP 400s for want of Mcp-Session-Id (stdio: 0)
//!                   "unknown_session": n },     // HTTP 404s for an unknown Mcp-Session-Id (stdio: 0)
//!   "versions":   { "<uri>": updates emitted },
//!   "pending":    { "held_reads": n, "hung": n, "sampling": n },
//!   "listens":    { "opened": n,                // listens ever opened (invalid ones not)
//!                   "open": [ { "id": <listen id>, "uris": [ "<honoured uri>", ... ],  // sorted
//!                               "tools": bool, "prompts": bool, "resources": bool },  // honoured flags
//!                             ... ] } }         // in opening order
//! ```
//!
//! `counts` counts every received message by method, whatever its era or validity
//! (`server/discover`, `subscriptions/listen`, a rejected `initialize`,
//! `notifications/cancelled`, …; in HTTP mode also a POST refused with 400 or 404 for
//! its session id). In HTTP mode every count is summed over all sessions and stateless
//! requests.
//!
//! Held reads are answered with the response computed when the read **arrived** (stale
//! content, or the fault/not-found error in force then), not at release time: tests use
//! this to race a read against an update.
//!
//! # Conformance fixtures (`SCRIPTED_CONFORMANCE=1`)
//!
//! The fixed names the MCP conformance suite calls (written from its scenario
//! descriptions; `docs/notes/conformance.md` has what each scenario expects). In every
//! era: the `test_*` tools of `conformance.rs`, `test_elicitation_sep1330_enums` and
//! `json_schema_2020_12_tool` (its `inputSchema` keeps `$schema`, `$defs`, `$anchor`,
//! `allOf`/`anyOf`, `if`/`then`/`else`, `additionalProperties`), listed **before** the
//! control tools (the suite calls the first listed tool with `{}`); the prompts
//! `test_simple_prompt`, `test_prompt_with_arguments`, `test_prompt_with_embedded_resource`,
//! `test_prompt_with_image`; the resources `test://static-text`, `test://static-binary`,
//! `test://watched-resource` and the template `test://template/{id}/data`. A legacy
//! request to `test_sampling`, `test_elicitation`, `test_elicitation_sep1034_defaults` or
//! `test_elicitation_sep1330_enums` sends the client that request (ids `s1`, `s2`, …, as
//! `sample` does) and returns its answer as `{"content": [{"type": "text", "text":
//! <answer JSON>}], "structuredContent": <answer>}`.
//!
//! In `dual` and `modern` modes also (`conformance_modern.rs`), listed for every request
//! but, except for `test_logging_tool` and the two triggers, served to modern requests
//! only (a legacy one gets the tool error `"<name> needs a modern request
//! (params._meta[\"io.modelcontextprotocol/protocolVersion\"])"`; for the prompt and the
//! resource, `-32602` with that message):
//!
//! | fixture | asks (key: method) | completes with |
//! |---|---|---|
//! | `test_input_required_result_elicitation` | `user_name`: elicitation `name` | `Hello, <name>!` |
//! | `test_input_required_result_sampling` | `capital_question`: sampling (maxTokens 100) | `Sampling result: <text>` |
//! | `test_input_required_result_list_roots` | `client_roots`: `roots/list` | `Roots (<n>): <uris>` |
//! | `test_input_required_result_request_state` † | `confirm`: elicitation `ok` (boolean) | `state-ok: requestState verified (ok=<ok>)` |
//! | `test_input_required_result_multiple_inputs` † | `user_name`, `greeting` (sampling), `client_roots` in one round | `Name: …; Greeting: …; Roots: <n>` |
//! | `test_input_required_result_multi_round` † | `step1` (`name`), then `step2` (`color`) | `Multi-round complete: <name> likes <color>` |
//! | `test_input_required_result_tampered_state` † | `confirm` | `integrity-ok: requestState verified` |
//! | `test_input_required_result_capabilities` † | only what `clientCapabilities` declares: `elicit_input`, `sample_input`, `roots_input` | `capabilities-ok: received <keys>` (nothing declared: `No supported capabilities declared` at once) |
//! | `test_streaming_elicitation` | `proceed`: elicitation | `Streaming complete` |
//! | `test_sampling`, `test_elicitation*` (modern requests) | `sampling` / `elicitation`: the request the legacy path sends | the legacy path's result |
//! | prompt `test_input_required_result_prompt` | `user_context`: elicitation `context` | `GetPromptResult`, text `Prompt with context: <context>` |
//! | resource `test://input-required` | `reader`: elicitation `name` | `contents` text `Read by <name>` (the `input_required` result has no `ttlMs`/`cacheScope`) |
//!
//! These MRTR fixtures answer `{"resultType": "input_required", "inputRequests": {key:
//! {"method", "params"}}}`; those marked † add a `requestState` and take answers only
//! for the round their state names (answers without a state are asked again); the
//! others have one round and take the answers of `inputResponses` alone. Answers to
//! keys not asked are ignored; a key not answered is asked again (a new
//! `input_required`); an answer not shaped like its method's result → `-32602 "invalid
//! inputResponses.<key>: expected …"`; `inputResponses` not an object → `-32602`.
//! Asking needs the methods' capabilities in `_meta["io.modelcontextprotocol/
//! clientCapabilities"]`, else `-32021 "Missing required client capability"` with
//! `data.requiredCapabilities` (`{"<cap>": {}}` each).
//!
//! `requestState` is `<tag>.<payload>`: the payload is compact JSON `{"fixture",
//! "round", "answers"}` (the answers so far), the tag 16 hex digits of SipHash (std's
//! `RandomState`, a random key per process) over the payload. A state that fails the
//! tag → `-32602 "invalid requestState: integrity check failed"`; one minted for another
//! fixture → `-32602 "invalid requestState: minted for another request"`.
//!
//! Diagnostic tools (SEP-2575): `test_missing_capability` → `-32021` with
//! `data.requiredCapabilities: {"sampling": {}}` unless `sampling` is declared (then the
//! text `sampling is declared`); `test_logging_tool` sends one `notifications/message`
//! (`level: "info"`) before its result, for a modern request only if its
//! `_meta["io.modelcontextprotocol/logLevel"]` is `debug` or `info` (a legacy request
//! always); `test_trigger_tool_change` / `test_trigger_prompt_change` do what
//! `emit_list_changed` does for `tools` / `prompts`.
//!
//! # Environment
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `SCRIPTED_NAME` | `scripted` | `serverInfo.name` (`initialize`, `server/discover`) and `stats.name` |
//! | `SCRIPTED_RESOURCES` | 20 | N static resources |
//! | `SCRIPTED_PAGE_SIZE` | 100 | `resources/list` page size |
//! | `SCRIPTED_NO_SUBSCRIBE=1` | off | declare `resources: {listChanged: true}` without `subscribe` (subscribe requests are still answered `{}`) |
//! | `SCRIPTED_DISCOVER_NO_SUBSCRIBE=1` | off | `server/discover` alone declares `resources: {listChanged: true}` without `subscribe` (a dual-era server whose two faces differ; everything is still served) |
//! | `SCRIPTED_EXTRA_TOOL=<name>` | none | one more tool, `<name>`, answering with `SCRIPTED_NAME` (a name only this server offers) |
//! | `SCRIPTED_LOG=<path>` | none | append every received line to this file, flushed per line |
//! | `SCRIPTED_CRASH_ON_START=1` | off | exit 3 right after reading (and logging) the first line |
//! | `SCRIPTED_SLOW_START=1` | off | answer the first line (a client's era probe) only after the second has arrived, then both in order: a server still starting when its client stopped waiting for the first answer |
//! | `SCRIPTED_IGNORE_EOF=1` | off | keep running after stdin closes, until SIGTERM, which is recorded in `SCRIPTED_LOG` as the line `<sigterm>` before exiting 0 (to test how a client stops a server that does not exit on EOF) |
//! | `SCRIPTED_CONFORMANCE=1` | off | also offer the MCP conformance suite's fixtures (Conformance fixtures above; with `SCRIPTED_ERA=dual` or `modern` also the MRTR and diagnostic ones) |
//! | `SCRIPTED_ERA` | `legacy` | `legacy`, `dual` or `modern` (see Eras; anything else: warning, `legacy`) |
//! | `SCRIPTED_TTL_MS` | 0 | default `ttlMs` of modern cacheable results |
//! | `SCRIPTED_CACHE_SCOPE` | `private` | default `cacheScope` of modern cacheable results: `private` or `public` (anything else: warning, `private`) |
//! | `SCRIPTED_ACK_DELAY_MS` | 0 | delay of each `notifications/subscriptions/acknowledged` |
//! | `SCRIPTED_HTTP=<addr>` | none | HTTP mode on `addr` (as `--http <addr>`, which wins) |
//!
//! In HTTP mode `SCRIPTED_CRASH_ON_START` and `SCRIPTED_IGNORE_EOF` are ignored (stdin is
//! never read); `SCRIPTED_LOG` gets every POSTed message (HTTP mode below); every other
//! variable keeps its meaning.
//!
//! # HTTP mode (`--http ADDR`)
//!
//! `scripted-upstream --http 127.0.0.1:0` (also `--http=ADDR`, or `SCRIPTED_HTTP=ADDR`
//! without the argument; other arguments are ignored with a warning on stderr) listens
//! on `ADDR` (port 0: a free port) and, once listening, prints exactly one line on
//! stdout, `scripted-upstream listening on http://127.0.0.1:PORT/mcp` (the real address),
//! and never anything else there (the reader may close the pipe after that line).
//! Diagnostics go to stderr. It serves until SIGTERM or SIGINT, then exits 0 (exit 1 if
//! `ADDR` cannot be bound). Streamable HTTP 2025-11-25 for legacy clients, 2026-07-28
//! for modern requests (`SCRIPTED_ERA` decides which eras are served, as in stdio).
//!
//! **One state.** Every session and every stateless request is served by ONE server, as
//! if all their messages came to one stdio process in arrival order: resource versions,
//! holds and held reads, faults, parked requests, listens, the `s<N>` ids of
//! server→client requests, `counts`/`by_uri`/`tools` and the rest of `stats`. Only legacy
//! subscriptions (`resources/subscribe` / `resources/unsubscribe`) are per session. Request
//! ids are per client: `notifications/cancelled {requestId}` only cancels a request of the
//! session that sends it.
//!
//! **The endpoint** is `/mcp` (other paths → 404; methods other than POST, GET and
//! DELETE → 405 with `Allow: GET, POST, DELETE`). `Accept`, `Content-Type`,
//! `MCP-Protocol-Version`, `Origin`, `Mcp-Method`, `Mcp-Name` and `Last-Event-ID` are not
//! checked. SSE events carry no `id` and are never replayed. Each is
//! `event: message\ndata: <one compact JSON-RPC message>\n\n`.
//!
//! **POST**: the body is one JSON-RPC message (line breaks allowed). Every non-blank body
//! is appended to `SCRIPTED_LOG` as one line (its line breaks, which JSON only allows
//! between tokens, replaced by spaces; nothing added) and counted in `stats.counts`, even
//! when refused below. A body that is not JSON → 400 with
//! `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`
//! (counted as `<parse_error>`; a blank body is neither logged nor counted); a batch, or
//! an object that is no request, notification or response → 400 with `-32600 "Invalid
//! Request"` (`id` when it has one; counted as `<invalid>`). Then the message's client:
//!
//! - `legacy` and `dual` eras:
//!   - `Mcp-Session-Id: s<N>` naming an open session → that session. Any other value
//!     (an ended session, one never opened, not `s<N>`) → 404 with
//!     `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}`,
//!     not handled (`refused.unknown_session`).
//!   - No `Mcp-Session-Id` on an `initialize` → a new session `s<N>` (N = 1, 2, … in
//!     opening order, never reused; `sessions.opened` is the last N), named by the
//!     header `Mcp-Session-Id: s<N>` of its answer. An `initialize` that carries an open
//!     session's id is served in that session and opens none.
//!   - No `Mcp-Session-Id`, `dual` era, a request or notification whose
//!     `params._meta["io.modelcontextprotocol/protocolVersion"]` is present → stateless.
//!   - No `Mcp-Session-Id` otherwise (any legacy request but `initialize`, a
//!     notification, a response) → 400 with `{"jsonrpc":"2.0","id":null,"error":{"code":
//!     -32000,"message":"Bad Request: Mcp-Session-Id header required"}}`, not handled
//!     (`refused.missing_session`). This is how a legacy-era server answers mcpmux's
//!     `server/discover` probe.
//! - `modern` era: every POST is stateless; `Mcp-Session-Id` is ignored and never
//!   minted (a rejected `initialize` opens no session).
//!
//! A notification or a response is handled, then answered 202 with an empty body. A
//! request is handled, then answered 200 when its first message is ready: if that is its
//! response, `Content-Type: application/json` with the response alone; otherwise
//! `Content-Type: text/event-stream` with the request's messages as they come, the last
//! one its response, after which the stream ends. So a request parked without any
//! message first (held read, `hang`, `sample`, `delay`, a listen whose acknowledgement
//! is delayed) gets its HTTP answer headers only then. A request's own stream carries
//! the notifications that belong to it: `progress`'s `notifications/progress`, `log`'s
//! and `test_logging_tool`'s `notifications/message` (the conformance fixtures' too), in
//! the stdio order. JSON-RPC errors are 200 answers like results (modern ones too). A
//! request dropped unanswered (cancelled, its session ended) ends its stream without a
//! response (an empty `text/event-stream` answer if nothing was sent yet). The client
//! closing the stream of a request served the modern way cancels it exactly as
//! `notifications/cancelled` would (a listen ends; a hang, held read or sample call is
//! dropped); closing a legacy request's stream changes nothing (its answer is lost).
//!
//! **GET** (`legacy`, `dual`) with an open session's `Mcp-Session-Id` → 200
//! `text/event-stream`: the session's GET stream, open until the client closes it, the
//! session ends, or a newer GET of the same session replaces it (the older one then
//! ends; there is at most one per session). It carries, never responses:
//! - `notifications/resources/updated` of `emit_update` / `emit_updates` for a URI the
//!   session is subscribed to (untagged, as stdio writes them, `_meta` included);
//! - `notifications/<kind>/list_changed` of `emit_list_changed` (and the conformance
//!   `test_trigger_*` tools), to every session;
//! - the server→client requests of the session's own calls (`sample`'s
//!   `sampling/createMessage`, the conformance fixtures' requests; ids `s1`, `s2`, …
//!   numbered across all sessions), and the `notifications/cancelled` for them when such a
//!   call is cancelled. The client POSTs its answer (a response) in the same session;
//!   the result then ends the tool call's own POST answer.
//!
//! A message for a session without an open GET stream is lost (not queued). No
//! `Mcp-Session-Id` → 400, an unknown one → 404 (as for POST); `modern` era → 405 with
//! `Allow: POST`.
//!
//! **DELETE** (`legacy`, `dual`) with an open session's `Mcp-Session-Id` → 200, empty:
//! the session ends. Its subscriptions are dropped (`subscribers` counts fall), its GET
//! stream ends, and its parked requests (held reads, hangs, sample calls, listens POSTed
//! in it) are dropped: their POST answers end without a response. Its id then gets 404.
//! No `Mcp-Session-Id` → 400, an unknown one → 404, `modern` era → 405.
//!
//! **A session ends when its client goes away**: when its GET stream is closed by the
//! client's side (the connection closes or breaks: a client killed without a DELETE),
//! not by a newer GET or by the session's end, and no request stream of the session is
//! open at that moment (a POST still waiting for its answer means the client is still
//! there), the session ends exactly as by DELETE (`sessions.ended` and `sessions.gone`
//! count it; its id then gets 404). The GET stream is a session's one long-lived
//! connection, so a real server can use the same rule to drop the subscriptions of a
//! client that died without saying goodbye; a client that closes its GET stream on
//! purpose and keeps POSTing loses its session. Only that moment is checked: a session
//! whose GET stream went while a request was open lives on until DELETE.
//!
//! **Notifications of the control tools** (whoever calls them): `emit_update` and
//! `emit_updates` send each untagged `notifications/resources/updated` on the GET stream
//! of EVERY session subscribed to `uri` (in session order; not to other sessions, unlike
//! stdio, where it is written whether or not subscribed), and the tagged copies on the
//! streams of the open listens honouring `uri`, in opening order. `emit_list_changed`
//! sends the untagged notification on every session's GET stream and the tagged ones to
//! the listens that asked. All are queued before the tool's result, so once a client has
//! the result, the notifications are on their streams.
//!
//! **Modern requests** (`dual`, `modern`) are served as in stdio, statelessly.
//! `subscriptions/listen` is answered as a `text/event-stream` that stays open: the
//! acknowledgement first (with `SCRIPTED_ACK_DELAY_MS`, the answer starts then), then the
//! tagged notifications, until the client closes it (the listen ends: it leaves
//! `stats.listens.open`, and a delayed acknowledgement is never sent) or `end_listens`
//! ends it: `"result"` sends the graceful response as the stream's last event;
//! `"cancelled"` sends `notifications/cancelled` as the last event, then ends the
//! stream. Each stateless POST is its own client, so a `notifications/cancelled` POSTed
//! statelessly matches nothing: close the stream instead. A modern request POSTed with
//! an open session's id (`dual` era) is served the modern way within that session (its
//! server→client requests go to that session's GET stream). A stateless `sample` sends
//! its `sampling/createMessage` on its own answer stream.
//!
//! **Other tools**: `exit` exits the process at once with its code (no answer is sent).
//! `session` and `end_session` exist only in HTTP mode (listed last).
//!
//! **`stats`** is the one shape above, summed over all clients: `subscribed` is the
//! sorted union of every session's subscriptions, `subscribers` counts the sessions
//! holding each URI, `sessions` and `refused` count HTTP sessions and refusals; the
//! listens of every client are in `listens`. (In stdio mode `sessions` is
//! `{"opened": 1, "open": 1, "ended": 0, "gone": 0, "streams": 1}`, `subscribers` has 1 for each
//! subscribed URI, `refused` is zeros.)

mod base64;
mod conformance;
mod conformance_modern;
mod http;
mod modern;
mod recorder;
mod server;
mod tools;

use std::path::PathBuf;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::mpsc;

use modern::Era;
use server::{Flow, Server};

/// Settings read once from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub name: String,
    pub no_subscribe: bool,
    /// `server/discover` declares no `resources.subscribe` (a dual-era server whose
    /// 2026-07-28 face offers less than its `initialize` face).
    pub discover_no_subscribe: bool,
    pub resources: u64,
    pub page_size: usize,
    pub log_path: Option<PathBuf>,
    pub crash_on_start: bool,
    /// Answer the first line only once the second has arrived (a server still
    /// starting when its client gave up waiting for the first answer).
    pub slow_start: bool,
    pub ignore_eof: bool,
    pub conformance: bool,
    pub era: Era,
    /// Default `ttlMs` of modern cacheable results.
    pub ttl_ms: u64,
    /// Default `cacheScope` of modern cacheable results: `private` or `public`.
    pub cache_scope: String,
    /// Delay of `notifications/subscriptions/acknowledged` (0 = at once).
    pub ack_delay_ms: u64,
    /// HTTP mode: the address to listen on (`--http ADDR` or `SCRIPTED_HTTP`).
    pub http: Option<String>,
}

impl Config {
    fn from_env() -> Self {
        Config {
            http: http_address(),
            name: std::env::var("SCRIPTED_NAME").unwrap_or_else(|_| "scripted".to_owned()),
            no_subscribe: env_flag("SCRIPTED_NO_SUBSCRIBE"),
            discover_no_subscribe: env_flag("SCRIPTED_DISCOVER_NO_SUBSCRIBE"),
            resources: env_number("SCRIPTED_RESOURCES", 20),
            page_size: env_number("SCRIPTED_PAGE_SIZE", 100).max(1) as usize,
            log_path: std::env::var_os("SCRIPTED_LOG")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            crash_on_start: env_flag("SCRIPTED_CRASH_ON_START"),
            slow_start: env_flag("SCRIPTED_SLOW_START"),
            ignore_eof: env_flag("SCRIPTED_IGNORE_EOF"),
            conformance: env_flag("SCRIPTED_CONFORMANCE"),
            era: match std::env::var("SCRIPTED_ERA") {
                Err(_) => Era::Legacy,
                Ok(v) => Era::parse(&v).unwrap_or_else(|| {
                    eprintln!("[scripted] ignoring SCRIPTED_ERA={v:?}: not legacy, dual or modern; using legacy");
                    Era::Legacy
                }),
            },
            ttl_ms: env_number("SCRIPTED_TTL_MS", 0),
            cache_scope: match std::env::var("SCRIPTED_CACHE_SCOPE") {
                Err(_) => "private".to_owned(),
                Ok(v) if matches!(v.trim(), "private" | "public") => v.trim().to_owned(),
                Ok(v) => {
                    eprintln!("[scripted] ignoring SCRIPTED_CACHE_SCOPE={v:?}: not private or public; using private");
                    "private".to_owned()
                }
            },
            ack_delay_ms: env_number("SCRIPTED_ACK_DELAY_MS", 0),
        }
    }
}

#[cfg(test)]
impl Config {
    /// Defaults as with an empty environment, in `era`.
    pub fn for_tests(era: Era) -> Self {
        Config {
            name: "t".into(),
            no_subscribe: false,
            discover_no_subscribe: false,
            resources: 20,
            page_size: 100,
            log_path: None,
            crash_on_start: false,
            slow_start: false,
            ignore_eof: false,
            conformance: false,
            era,
            ttl_ms: 0,
            cache_scope: "private".into(),
            ack_delay_ms: 0,
            http: None,
        }
    }
}

/// `--http ADDR` (or `--http=ADDR`), else a non-empty `SCRIPTED_HTTP`. Other
/// arguments are ignored (with a warning).
fn http_address() -> Option<String> {
    let mut address = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--http" {
            match args.next() {
                Some(a) => address = Some(a),
                None => {
                    eprintln!("[scripted] --http needs an address, e.g. --http 127.0.0.1:0");
                    std::process::exit(2);
                }
            }
        } else if let Some(a) = arg.strip_prefix("--http=") {
            address = Some(a.to_owned());
        } else {
            eprintln!("[scripted] ignoring argument {arg:?}");
        }
    }
    address.or_else(|| {
        std::env::var("SCRIPTED_HTTP")
            .ok()
            .filter(|a| !a.trim().is_empty())
    })
}

fn env_flag(key: &str) -> bool {
    std::env::var(key).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

fn env_number(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Err(_) => default,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("[scripted] ignoring {key}={v:?}: not a number; using {default}");
            default
        }),
    }
}

/// What the reader hands to the writer task.
#[derive(Debug)]
pub enum Out {
    /// One serialized JSON-RPC message, without the trailing newline.
    Line(String),
    /// Flush everything queued before this, then exit the process with this code.
    Exit(i32),
}

/// The most the writer task buffers before it writes to stdout. `tokio::io::stdout()`
/// runs each write on the blocking pool and wakes the runtime when it is done; with
/// `BufWriter`'s default 8 KiB, a burst of 20,000 updates (`emit_updates`) took about
/// 350 of those hand-offs and cost 0.80 µs of CPU per update, against 0.40 µs with
/// this (`benches/upstream_emit.py`, BENCHMARKS.md "The CPU budget of a burst"). A
/// lone message is written when the channel empties, whatever the size.
const WRITE_BUFFER: usize = 256 * 1024;

async fn write_loop(mut rx: mpsc::UnboundedReceiver<Out>) {
    let mut stdout = BufWriter::with_capacity(WRITE_BUFFER, tokio::io::stdout());
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(item) = next {
            match item {
                Out::Line(line) => {
                    let written = async {
                        stdout.write_all(line.as_bytes()).await?;
                        stdout.write_all(b"\n").await
                    }
                    .await;
                    if let Err(e) = written {
                        eprintln!("[scripted] stdout write failed: {e}; writer stopping");
                        return;
                    }
                }
                Out::Exit(code) => {
                    let _ = stdout.flush().await;
                    std::process::exit(code);
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = stdout.flush().await {
            eprintln!("[scripted] stdout flush failed: {e}; writer stopping");
            return;
        }
    }
}

#[cfg(unix)]
async fn sigterm() {
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
    }
}

#[cfg(not(unix))]
async fn sigterm() {
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let config = Config::from_env();
    if let Some(address) = config.http.clone() {
        http::serve(config, &address).await;
        return;
    }
    let crash_on_start = config.crash_on_start;
    let ignore_eof = config.ignore_eof;
    // SCRIPTED_SLOW_START: the first line waits here until the second arrives.
    let mut held_first: Option<String> = None;
    let mut slow_start = config.slow_start;
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(rx));
    let mut server = Server::new(config, tx);

    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut buf = Vec::with_capacity(4096);
    loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("[scripted] stdin read failed: {e}");
                break;
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        server.log_line(line);
        if crash_on_start {
            eprintln!("[scripted] SCRIPTED_CRASH_ON_START: exiting with 3");
            std::process::exit(3);
        }
        if std::mem::take(&mut slow_start) {
            held_first = Some(line.to_owned());
            continue;
        }
        for line in held_first.take().iter().map(String::as_str).chain([line]) {
            if server.handle_line(line).await == Flow::Exit {
                // The writer flushes what is queued and exits the process.
                std::future::pending::<()>().await;
            }
        }
    }
    if ignore_eof {
        eprintln!("[scripted] stdin closed; SCRIPTED_IGNORE_EOF: waiting for SIGTERM");
        sigterm().await;
        server.log_line("<sigterm>");
        std::process::exit(0);
    }
    // EOF: drop the sender so the writer drains the queue and stops, then exit 0.
    drop(server);
    let _ = writer.await;
}
