#!/usr/bin/env node
// Server→client requests through mcpmux, driven by the official TypeScript SDK client
// (v1) against server-everything.
//
//   node fidelity.mjs tools <url>            # through Streamable HTTP (mcpmux)
//   node fidelity.mjs tools --stdio <entry>  # directly: server-everything over stdio
//   node fidelity.mjs concurrent <url> [--timeout-ms MS]
//
// Every client declares the capabilities mcpmux declares upstream (sampling, elicitation
// form+url, roots with listChanged), so server-everything registers the same
// capability-dependent tools either way.
//
// `tools` prints {tools: [names, sorted], sampling: text, elicitation: text}: the tool
// list, then the results of `trigger-sampling-request` and `trigger-elicitation-request`,
// answered by this client's handlers.
//
// `concurrent` connects clients "a" and "b"; both call `trigger-sampling-request` at the
// same time. Each client's sampling handler holds its answer until BOTH clients hold a
// sampling request (so the two calls are in flight together on the one upstream session),
// then answers with its own name. Prints {a: {requests, result}, b: {…}}; the test checks
// that each client got exactly one sampling request and its own answer back.
//
// One JSON line on stdout; exit 0 on success, 1 with a message on stderr on failure. No
// sleeps: waits are promises, bounded by --timeout-ms.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const CAPABILITIES = {
  sampling: {},
  elicitation: { form: {}, url: {} },
  roots: { listChanged: true },
};

function fail(msg) {
  process.stderr.write(`fidelity.mjs: ${msg}\n`);
  process.exit(1);
}

function withTimeout(promise, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

async function connect(name, target, onSample) {
  const client = new Client({ name, version: "1.0.0" }, { capabilities: CAPABILITIES });
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => onSample(req));
  client.setRequestHandler(ElicitRequestSchema, async () => ({
    action: "accept",
    content: { name: `elicited by ${name}`, check: true },
  }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [] }));
  const transport = target.stdio
    ? new StdioClientTransport({ command: process.execPath, args: [target.stdio, "stdio"] })
    : new StreamableHTTPClientTransport(new URL(target.url));
  await client.connect(transport);
  return client;
}

function textOf(result) {
  return (result.content ?? []).map((c) => c.text ?? "").join("\n");
}

async function tools(target, timeoutMs) {
  const client = await connect("fidelity", target, async () => ({
    role: "assistant",
    model: "test",
    content: { type: "text", text: "sampled by fidelity" },
  }));
  const listed = await client.listTools();
  const names = listed.tools.map((t) => t.name).sort();
  const sampling = await withTimeout(
    client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "hi", maxTokens: 10 } }),
    timeoutMs,
    "trigger-sampling-request",
  );
  const elicitation = await withTimeout(
    client.callTool({ name: "trigger-elicitation-request", arguments: {} }),
    timeoutMs,
    "trigger-elicitation-request",
  );
  await client.close();
  return { tools: names, sampling: textOf(sampling), elicitation: textOf(elicitation) };
}

async function concurrent(target, timeoutMs) {
  const seen = { a: [], b: [] };
  let release;
  const bothHeld = new Promise((r) => (release = r));
  const held = () => {
    if (seen.a.length > 0 && seen.b.length > 0) release();
  };
  const handler = (name) => async (req) => {
    seen[name].push(req.params.messages?.[0]?.content?.text ?? "");
    held();
    await withTimeout(bothHeld, timeoutMs, `both clients holding a sampling request (${name})`);
    return { role: "assistant", model: "test", content: { type: "text", text: `answer of ${name}` } };
  };
  const a = await connect("a", target, handler("a"));
  const b = await connect("b", target, handler("b"));
  const call = (c, name) =>
    withTimeout(
      c.callTool({ name: "trigger-sampling-request", arguments: { prompt: `from ${name}`, maxTokens: 10 } }),
      timeoutMs,
      `trigger-sampling-request of ${name}`,
    );
  const [ra, rb] = await Promise.all([call(a, "a"), call(b, "b")]);
  await a.close();
  await b.close();
  return {
    a: { requests: seen.a, result: textOf(ra) },
    b: { requests: seen.b, result: textOf(rb) },
  };
}

async function main() {
  const [scenario, ...rest] = process.argv.slice(2);
  let target;
  let timeoutMs = 20000;
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === "--stdio") target = { stdio: rest[++i] };
    else if (rest[i] === "--timeout-ms") timeoutMs = Number.parseInt(rest[++i], 10);
    else target = { url: rest[i] };
  }
  if (!target) fail("usage: fidelity.mjs tools|concurrent <url> | --stdio <entry>");
  let out;
  if (scenario === "tools") out = await tools(target, timeoutMs);
  else if (scenario === "concurrent") out = await concurrent(target, timeoutMs);
  else fail(`unknown scenario ${scenario}`);
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

main().catch((e) => fail(e?.stack ?? String(e)));
