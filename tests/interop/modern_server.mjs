#!/usr/bin/env node
// A modern-only (2026-07-28) MCP server on the official TypeScript SDK v2
// (@modelcontextprotocol/server), for mcpmux's modern-era interop tests: the upstream a
// modern mcpmux talks to, and the reference a modern client script is checked against.
//
//   node modern_server.mjs [--port N] [--host 127.0.0.1] [--path /mcp]   # Streamable HTTP
//   node modern_server.mjs --stdio                                       # stdio
//   --trace FILE (HTTP only): append one JSON line per request to FILE: method, the
//   MCP-relevant headers, the body, and the response status and content type
//
// HTTP: `createMcpHandler(factory, {legacy: 'reject'})` behind node:http (loopback only,
// with the SDK's Host and Origin guards in front, as its docs prescribe). Port 0 (the
// default) takes a free port; the one stdout line is
//   modern_server listening on http://127.0.0.1:PORT/mcp
// stdio: `serveStdio(factory, {legacy: 'reject'})`; stdout is the protocol channel, so
// nothing else is printed there. Both entries answer a 2025-era `initialize` with -32022
// naming ["2026-07-28"] (HTTP 400). Diagnostics go to stderr. Exits on SIGTERM/SIGINT, and
// on stdin EOF in --stdio mode.
//
// Surface (state is process-wide, shared by every request and connection):
//   resources
//     test://modern/counter          text "test://modern/counter v<N>" (N = bumps so far),
//                                    cacheHint {ttlMs: 60000, cacheScope: 'public'}
//     test://modern/counters/{name}  the same, one counter per name (public, 60000)
//     test://modern/private          text "private v<N>", cacheHint {ttlMs: 5000, cacheScope:
//                                    'private'}; bump it like a counter
//     capabilities: resources {subscribe: true, listChanged: true} (subscribe is what makes
//     the SDK honour `resourceSubscriptions` in a listen filter)
//   tools
//     echo {text}                    -> text
//     bump {uri, count?}             increments the counter(s) of `uri` `count` times (default
//                                    1), publishing one notifications/resources/updated per
//                                    increment to the listen streams that hold `uri`, then
//                                    answers "bumped <uri> to v<N>" (structuredContent
//                                    {uri, version})
//     confirm {action}               MRTR: first answers resultType "input_required" with
//                                    inputRequests.confirm = elicitation/create (a boolean
//                                    `confirm` form) and an HMAC-signed requestState; the
//                                    retry carrying inputResponses.confirm {action: accept,
//                                    content: {confirm: true}} and the echoed requestState
//                                    completes with "confirmed <action>". A tampered state is
//                                    rejected by the SDK with -32602. Needs the elicitation
//                                    client capability (else -32021).
//     list_changed {kind}            publishes notifications/<kind>/list_changed (kind: tools |
//                                    prompts | resources) to the listen streams that asked
//   prompts
//     greet {name}                   one user message "Hello, <name>!"
//   cache hints: server/discover, tools/list, prompts/list, resources/list,
//   resources/templates/list carry {ttlMs: 60000, cacheScope: 'public'} (server-wide
//   cacheHints; the SDK's default is ttlMs 0, cacheScope 'private').
import fs from "node:fs";
import http from "node:http";
import {
  McpServer,
  ResourceTemplate,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  fromJsonSchema,
  hostHeaderValidationResponse,
  inputRequired,
  localhostAllowedHostnames,
  originValidationResponse,
} from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";

const COUNTER = "test://modern/counter";
const COUNTERS = "test://modern/counters/";
const PRIVATE = "test://modern/private";
const PUBLIC_HINT = { ttlMs: 60000, cacheScope: "public" };
const PRIVATE_HINT = { ttlMs: 5000, cacheScope: "private" };

function usage(msg) {
  if (msg) process.stderr.write(`modern_server.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node modern_server.mjs [--port N] [--host 127.0.0.1] [--path /mcp]\n" +
      "       node modern_server.mjs --stdio\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { stdio: false, port: 0, host: "127.0.0.1", path: "/mcp", trace: undefined };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : usage(`missing value for ${a}`));
    switch (a) {
      case "--stdio": opts.stdio = true; break;
      case "--port": opts.port = Number.parseInt(val(), 10); break;
      case "--host": opts.host = val(); break;
      case "--path": opts.path = val(); break;
      case "--trace": opts.trace = val(); break;
      default: usage(`unknown option ${a}`);
    }
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) usage("bad --port");
  if (!opts.path.startsWith("/")) usage("--path must start with /");
  return opts;
}

const log = (msg) => process.stderr.write(`modern_server: ${msg}\n`);

// ---- shared state -------------------------------------------------------------------
const versions = new Map(); // uri -> bumps so far
const version = (uri) => versions.get(uri) ?? 0;
const isCounter = (uri) => uri === COUNTER || uri === PRIVATE || (uri.startsWith(COUNTERS) && uri.length > COUNTERS.length);

// The key is per process: a requestState minted by one run is refused by the next.
const stateCodec = createRequestStateCodec({
  key: globalThis.crypto.getRandomValues(new Uint8Array(32)),
  ttlSeconds: 600,
});

// How a change reaches the listen streams differs by entry: createMcpHandler builds an
// instance per request, so HTTP publishes through the handler's notifier; serveStdio pins
// one instance per connection and routes its own send*() calls onto its listen streams.
let publish = {
  resourceUpdated: async (_uri, _server) => {},
  listChanged: async (_kind, _server) => {},
};

const text = (t, structured) => ({
  content: [{ type: "text", text: t }],
  ...(structured ? { structuredContent: structured } : {}),
});

function buildServer() {
  const server = new McpServer(
    { name: "mcpmux-modern-server", version: "0.0.0" },
    {
      capabilities: {
        resources: { subscribe: true, listChanged: true },
        tools: { listChanged: true },
        prompts: { listChanged: true },
      },
      cacheHints: {
        "server/discover": PUBLIC_HINT,
        "tools/list": PUBLIC_HINT,
        "prompts/list": PUBLIC_HINT,
        "resources/list": PUBLIC_HINT,
        "resources/templates/list": PUBLIC_HINT,
      },
      requestState: { verify: stateCodec.verify },
      instructions: "Test server for mcpmux: bump a counter resource, listen to its updates.",
    },
  );

  server.registerResource(
    "counter",
    COUNTER,
    { title: "Counter", description: "Bumped by the bump tool", mimeType: "text/plain", cacheHint: PUBLIC_HINT },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: `${uri.href} v${version(uri.href)}` }] }),
  );
  server.registerResource(
    "counters",
    new ResourceTemplate(`${COUNTERS}{name}`, { list: undefined }),
    { title: "Named counter", description: "One counter per name", mimeType: "text/plain", cacheHint: PUBLIC_HINT },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: `${uri.href} v${version(uri.href)}` }] }),
  );
  server.registerResource(
    "private",
    PRIVATE,
    { title: "Private", description: "A private-scope resource", mimeType: "text/plain", cacheHint: PRIVATE_HINT },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: `private v${version(uri.href)}` }] }),
  );

  server.registerTool(
    "echo",
    {
      description: "Returns its text",
      inputSchema: fromJsonSchema({ type: "object", properties: { text: { type: "string" } }, required: ["text"] }),
    },
    async ({ text: t }) => text(t),
  );

  server.registerTool(
    "bump",
    {
      description: "Increments a counter resource and notifies its listeners, once per increment",
      inputSchema: fromJsonSchema({
        type: "object",
        properties: { uri: { type: "string" }, count: { type: "integer", minimum: 1, maximum: 1000 } },
        required: ["uri"],
      }),
    },
    async ({ uri, count }) => {
      if (!isCounter(uri)) return { ...text(`not a counter: ${uri}`), isError: true };
      for (let i = 0; i < (count ?? 1); i++) {
        versions.set(uri, version(uri) + 1);
        await publish.resourceUpdated(uri, server);
      }
      return text(`bumped ${uri} to v${version(uri)}`, { uri, version: version(uri) });
    },
  );

  const confirmSchema = { type: "object", properties: { confirm: { type: "boolean" } }, required: ["confirm"] };
  server.registerTool(
    "confirm",
    {
      description: "Asks the client to confirm (MRTR input_required), then completes",
      inputSchema: fromJsonSchema({ type: "object", properties: { action: { type: "string" } }, required: ["action"] }),
    },
    async ({ action }, ctx) => {
      const state = ctx.mcpReq.requestState();
      const answer = acceptedContent(ctx.mcpReq.inputResponses, "confirm");
      if (state?.action !== action || answer?.confirm !== true) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({ message: `Confirm ${action}?`, requestedSchema: confirmSchema }),
          },
          requestState: await stateCodec.mint({ action }),
        });
      }
      return text(`confirmed ${action}`, { action, confirmed: true });
    },
  );

  server.registerTool(
    "list_changed",
    {
      description: "Publishes notifications/<kind>/list_changed to the listen streams that asked",
      inputSchema: fromJsonSchema({
        type: "object",
        properties: { kind: { type: "string", enum: ["tools", "prompts", "resources"] } },
        required: ["kind"],
      }),
    },
    async ({ kind }) => {
      await publish.listChanged(kind, server);
      return text(`published ${kind}/list_changed`);
    },
  );

  server.registerPrompt(
    "greet",
    {
      description: "Greets someone",
      argsSchema: fromJsonSchema({ type: "object", properties: { name: { type: "string" } }, required: ["name"] }),
    },
    async ({ name }) => ({ messages: [{ role: "user", content: { type: "text", text: `Hello, ${name}!` } }] }),
  );

  return server;
}

// ---- stdio --------------------------------------------------------------------------
function runStdio() {
  publish = {
    resourceUpdated: async (uri, server) => server.server.sendResourceUpdated({ uri }),
    listChanged: async (kind, server) => {
      if (kind === "tools") server.sendToolListChanged();
      else if (kind === "prompts") server.sendPromptListChanged();
      else server.sendResourceListChanged();
    },
  };
  const handle = serveStdio(() => buildServer(), {
    legacy: "reject",
    onerror: (e) => log(`stdio error: ${e?.message ?? e}`),
  });
  const stop = () => void handle.close().finally(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  process.stdin.on("end", stop);
  log("serving on stdio");
}

// ---- HTTP ---------------------------------------------------------------------------
/** node:http request -> web Request (the body read whole; aborted when the client goes away). */
async function toWebRequest(req, res) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (Array.isArray(v)) for (const x of v) headers.append(k, x);
    else if (v !== undefined) headers.set(k, v);
  }
  const abort = new AbortController();
  res.on("close", () => abort.abort());
  const hasBody = req.method !== "GET" && req.method !== "HEAD";
  return new Request(`http://${req.headers.host ?? "127.0.0.1"}${req.url}`, {
    method: req.method,
    headers,
    body: hasBody ? Buffer.concat(chunks) : undefined,
    signal: abort.signal,
  });
}

/** web Response -> node:http response, streaming (SSE) bodies chunk by chunk. */
async function sendWebResponse(response, res) {
  const headers = {};
  response.headers.forEach((v, k) => {
    headers[k] = v;
  });
  res.writeHead(response.status, headers);
  res.flushHeaders();
  if (!response.body) return void res.end();
  const reader = response.body.getReader();
  res.on("close", () => void reader.cancel().catch(() => {}));
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      res.write(value);
    }
  } catch {
    // the client went away, or the handler aborted the stream
  } finally {
    res.end();
  }
}

function traceRequest(path, request, body, response) {
  const headers = {};
  request.headers.forEach((v, k) => {
    if (k.startsWith("mcp-") || ["accept", "content-type", "last-event-id", "origin", "host"].includes(k)) headers[k] = v;
  });
  let parsed = body;
  try {
    parsed = body ? JSON.parse(body) : undefined;
  } catch {}
  const entry = { t: Date.now(), method: request.method, headers, body: parsed, status: response.status, contentType: response.headers.get("content-type") };
  fs.appendFileSync(path, `${JSON.stringify(entry)}\n`);
}

function runHttp(opts) {
  const handler = createMcpHandler(() => buildServer(), {
    legacy: "reject",
    onerror: (e) => log(`http error: ${e?.message ?? e}`),
  });
  publish = {
    resourceUpdated: async (uri) => handler.notify.resourceUpdated(uri),
    listChanged: async (kind) => {
      if (kind === "tools") handler.notify.toolsChanged();
      else if (kind === "prompts") handler.notify.promptsChanged();
      else handler.notify.resourcesChanged();
    },
  };
  const allowed = localhostAllowedHostnames();
  const server = http.createServer(async (req, res) => {
    try {
      const request = await toWebRequest(req, res);
      const path = new URL(request.url).pathname;
      const rejected =
        hostHeaderValidationResponse(request, allowed) ??
        originValidationResponse(request, allowed) ??
        (path === opts.path ? undefined : new Response("Not Found", { status: 404 }));
      const body = opts.trace && request.method === "POST" ? await request.clone().text() : undefined;
      const response = rejected ?? (await handler.fetch(request));
      if (opts.trace) traceRequest(opts.trace, request, body, response);
      await sendWebResponse(response, res);
    } catch (e) {
      log(`request failed: ${e?.stack ?? e}`);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }
  });
  server.listen(opts.port, opts.host, () => {
    const { port } = server.address();
    const host = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
    process.stdout.write(`modern_server listening on http://${host}:${port}${opts.path}\n`);
  });
  // handler.close() first: it ends open listen streams with their graceful result.
  const stop = () =>
    void handler.close().finally(() => {
      server.closeAllConnections?.();
      server.close();
      process.exit(0);
    });
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

const opts = parseArgs(process.argv.slice(2));
if (opts.stdio) runStdio();
else runHttp(opts);
