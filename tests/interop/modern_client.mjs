#!/usr/bin/env node
// A modern-era (2026-07-28) client scenario on the official TypeScript SDK v2
// (@modelcontextprotocol/client), pinned to that revision: `versionNegotiation: {mode:
// {pin: '2026-07-28'}}` never falls back to `initialize` (connect() fails instead).
//
//   node modern_client.mjs URL              [options]   # Streamable HTTP
//   node modern_client.mjs [options] --stdio CMD ARG…   # stdio (everything after --stdio)
//
// Options:
//   --uri URI             the resource to listen to (default test://modern/counter)
//   --updates K           updates to wait for (default 2)
//   --tool NAME           the tool that triggers one update per call (default bump), called
//   --tool-args JSON      with these arguments (default {"uri": URI}) K times, each after
//                         the previous update arrived; --no-trigger: something else does
//   --call NAME           a tool called once before listening (default echo)
//   --call-args JSON      (default {"text": "hello from modern_client"})
//   --mrtr NAME           also call this tool, declaring elicitation (form) and sampling with
//   --mrtr-args JSON      handlers that accept {confirm: true} / answer "sampled by
//                         modern_client" (default args {"action": "deploy"}); the SDK answers
//                         the input_required round(s) and retries on its own
//   --probe-in-place      stdio: use a subclass of StdioClientTransport, which the SDK probes
//                         on the connection itself (CMD starts once; its wire then carries
//                         the probe) instead of in a sibling process
//   --timeout-ms MS       bound on every wait (default 20000)
//   --trace FILE          append every outgoing JSON-RPC message (and, over HTTP, every
//                         request's method and MCP headers) to FILE as JSON lines
//
// Steps: connect (the pinned mode probes server/discover; over stdio the SDK runs that
// probe in a short-lived sibling process of the same command, i.e. CMD starts twice, unless
// --probe-in-place), server/discover again on
// the connection itself, tools/list, one tools/call, subscriptions/listen {resourceSubscriptions:
// [URI]}, then K times: trigger, await one notifications/resources/updated for URI, read URI
// with cacheMode 'bypass' (the SDK's response cache would otherwise answer from its TTL
// entry; an update notification also evicts it, but bypass does not depend on that);
// finally close the listen (SDK: aborts the listen stream AND sends notifications/cancelled
// for the listen id) and await `closed`.
//
// One JSON line on stdout; exit 0 on success, 1 with a message on stderr otherwise (the JSON
// line is still printed when there is something to show). No sleeps: every wait is a
// promise bounded by --timeout-ms.
import fs from "node:fs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const MODERN = "2026-07-28";
const SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId";

class ScenarioError extends Error {}

function usage(msg) {
  if (msg) process.stderr.write(`modern_client.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node modern_client.mjs URL [--uri URI] [--updates K] [--tool NAME] [--tool-args JSON] [--no-trigger]\n" +
      "                              [--call NAME] [--call-args JSON] [--mrtr NAME] [--mrtr-args JSON]\n" +
      "                              [--timeout-ms MS] [--trace FILE]\n" +
      "       node modern_client.mjs [options] --stdio CMD [ARG…]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    url: undefined,
    stdio: undefined,
    uri: "test://modern/counter",
    updates: 2,
    tool: "bump",
    toolArgs: undefined,
    trigger: true,
    call: "echo",
    callArgs: { text: "hello from modern_client" },
    mrtr: undefined,
    mrtrArgs: { action: "deploy" },
    timeoutMs: 20000,
    trace: undefined,
    probeInPlace: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : usage(`missing value for ${a}`));
    const json = () => {
      const v = val();
      try {
        return JSON.parse(v);
      } catch {
        return usage(`${a} needs JSON, got ${v}`);
      }
    };
    const int = () => {
      const v = Number.parseInt(val(), 10);
      return Number.isFinite(v) && v >= 0 ? v : usage(`bad number for ${a}`);
    };
    switch (a) {
      case "--stdio":
        o.stdio = argv.slice(i + 1);
        i = argv.length;
        break;
      case "--uri": o.uri = val(); break;
      case "--updates": o.updates = int(); break;
      case "--tool": o.tool = val(); break;
      case "--tool-args": o.toolArgs = json(); break;
      case "--no-trigger": o.trigger = false; break;
      case "--call": o.call = val(); break;
      case "--call-args": o.callArgs = json(); break;
      case "--mrtr": o.mrtr = val(); break;
      case "--mrtr-args": o.mrtrArgs = json(); break;
      case "--probe-in-place": o.probeInPlace = true; break;
      case "--timeout-ms": o.timeoutMs = int(); break;
      case "--trace": o.trace = val(); break;
      default:
        if (a.startsWith("-") || o.url) usage(`unexpected argument ${a}`);
        o.url = a;
    }
  }
  if (!o.url === !o.stdio) usage("give exactly one of URL or --stdio CMD…");
  if (o.stdio && o.stdio.length === 0) usage("--stdio needs a command");
  if (o.updates < 1) usage("--updates must be >= 1");
  o.toolArgs ??= { uri: o.uri };
  return o;
}

/** Rejects after `ms` with `what` unless `promise` settles first; the timer never outlives it. */
async function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new ScenarioError(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const textOf = (result) =>
  (result?.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");

/** Appends JSON lines to `path` (nothing when no path). */
function tracer(path) {
  if (!path) return () => {};
  return (entry) => fs.appendFileSync(path, `${JSON.stringify({ t: Date.now(), ...entry })}\n`);
}

/** Wraps transport.send so every outgoing JSON-RPC message is traced (and listen ids seen). */
function traceSends(transport, trace, onListenId) {
  const send = transport.send.bind(transport);
  transport.send = async (message, options) => {
    if (message?.method === "subscriptions/listen") onListenId(message.id);
    trace({ dir: "out", message });
    return send(message, options);
  };
  return transport;
}

/** A fetch that traces each request's method and MCP headers (HTTP only). */
function tracingFetch(trace) {
  return async (input, init) => {
    const h = new Headers(init?.headers);
    const mcp = {};
    h.forEach((v, k) => {
      if (k.startsWith("mcp-") || k === "accept" || k === "content-type" || k === "last-event-id") mcp[k] = v;
    });
    trace({ dir: "http", method: init?.method ?? "GET", headers: mcp });
    return fetch(input, init);
  };
}

async function run(o, out) {
  const started = Date.now();
  const trace = tracer(o.trace);
  Object.assign(out, { scenario: "modern", transport: o.stdio ? "stdio" : "http", uri: o.uri, updatesWanted: o.updates });
  let listenId;
  let elicitations = 0;
  let samplings = 0;

  const client = new Client(
    { name: "mcpmux-modern-client", version: "0.0.0" },
    {
      versionNegotiation: { mode: { pin: MODERN } },
      // Elicitation and sampling are declared (and answered) only when an MRTR tool is
      // exercised: the per-request clientCapabilities then carry {elicitation: {form: {}},
      // sampling: {}}; otherwise {}.
      ...(o.mrtr ? { capabilities: { elicitation: { form: {} }, sampling: {} } } : {}),
    },
  );
  if (o.mrtr) {
    client.setRequestHandler("elicitation/create", async () => {
      elicitations++;
      return { action: "accept", content: { confirm: true } };
    });
    client.setRequestHandler("sampling/createMessage", async () => {
      samplings++;
      return { role: "assistant", model: "modern-client", content: { type: "text", text: "sampled by modern_client" } };
    });
  }

  // Updates for o.uri, in arrival order, and waiters for "the n-th update".
  const updates = [];
  const otherUpdates = [];
  const waiters = [];
  client.setNotificationHandler("notifications/resources/updated", async (n) => {
    const entry = { uri: n.params.uri, _meta: n.params._meta ?? null };
    if (n.params.uri !== o.uri) return void otherUpdates.push(entry);
    updates.push(entry);
    for (const w of waiters.splice(0)) {
      if (updates.length >= w.n) w.resolve();
      else waiters.push(w);
    }
  });
  const nthUpdate = (n) =>
    updates.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }));

  const Stdio = o.probeInPlace ? class InPlaceStdioClientTransport extends StdioClientTransport {} : StdioClientTransport;
  const transport = o.stdio
    ? new Stdio({ command: o.stdio[0], args: o.stdio.slice(1), env: process.env, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(o.url), o.trace ? { fetch: tracingFetch(trace) } : {});
  traceSends(transport, trace, (id) => (listenId = id));

  try {
    await withTimeout(client.connect(transport), o.timeoutMs, "connect (pinned to 2026-07-28)");
    out.era = client.getProtocolEra();
    if (out.era !== "modern") throw new ScenarioError(`connected in era ${out.era}`);

    const d = await withTimeout(client.discover(), o.timeoutMs, "server/discover");
    out.discover = {
      supportedVersions: d.supportedVersions,
      capabilities: Object.keys(d.capabilities ?? {}).sort(),
      resourcesSubscribe: d.capabilities?.resources?.subscribe ?? false,
      serverInfo: d._meta?.["io.modelcontextprotocol/serverInfo"] ?? null,
      ttlMs: d.ttlMs,
      cacheScope: d.cacheScope,
    };

    const tools = await withTimeout(client.listTools(), o.timeoutMs, "tools/list");
    out.tools = tools.tools.map((t) => t.name).sort();
    out.toolsTtlMs = tools.ttlMs;

    const called = await withTimeout(
      client.callTool({ name: o.call, arguments: o.callArgs }),
      o.timeoutMs,
      `tools/call ${o.call}`,
    );
    out.call = { name: o.call, text: textOf(called), isError: called.isError ?? false, resultType: called.resultType };

    if (o.mrtr) {
      const r = await withTimeout(
        client.callTool({ name: o.mrtr, arguments: o.mrtrArgs }),
        o.timeoutMs,
        `tools/call ${o.mrtr} (MRTR)`,
      );
      out.mrtr = { name: o.mrtr, text: textOf(r), isError: r.isError ?? false, elicitations, samplings };
    }

    const sub = await withTimeout(client.listen({ resourceSubscriptions: [o.uri] }), o.timeoutMs, "listen ack");
    out.listen = { id: listenId ?? null, honoredFilter: sub.honoredFilter };
    const honored = sub.honoredFilter?.resourceSubscriptions ?? [];
    if (!honored.includes(o.uri)) throw new ScenarioError(`listen did not honour ${o.uri}: ${JSON.stringify(sub.honoredFilter)}`);

    out.reads = [];
    out.triggers = [];
    for (let i = 1; i <= o.updates; i++) {
      const arrived = withTimeout(nthUpdate(i), o.timeoutMs, `update ${i} for ${o.uri}`);
      if (o.trigger) {
        const r = await withTimeout(client.callTool({ name: o.tool, arguments: o.toolArgs }), o.timeoutMs, `tools/call ${o.tool}`);
        if (r.isError) throw new ScenarioError(`${o.tool} answered an error: ${textOf(r)}`);
        out.triggers.push(textOf(r));
      }
      await arrived;
      const read = await withTimeout(
        client.readResource({ uri: o.uri }, { cacheMode: "bypass" }),
        o.timeoutMs,
        `resources/read ${o.uri}`,
      );
      const c = read.contents?.[0] ?? {};
      out.reads.push({ text: c.text ?? null, blobBytes: c.blob ? c.blob.length : undefined, ttlMs: read.ttlMs, cacheScope: read.cacheScope });
    }
    out.updates = updates.slice(0, o.updates);
    out.updatesTotal = updates.length;
    out.otherUpdates = otherUpdates.length;
    const ids = [...new Set(out.updates.map((u) => u._meta?.[SUBSCRIPTION_ID]))];
    out.subscriptionIds = ids;
    if (ids.length !== 1 || ids[0] !== listenId) {
      throw new ScenarioError(`updates carry subscriptionId ${JSON.stringify(ids)}, the listen id was ${JSON.stringify(listenId)}`);
    }

    await withTimeout(sub.close(), o.timeoutMs, "listen close");
    out.closed = await withTimeout(sub.closed, o.timeoutMs, "listen closed");
  } finally {
    out.elapsedMs = Date.now() - started;
    await client.close().catch(() => {});
  }
  return out;
}

const opts = parseArgs(process.argv.slice(2));
const result = {};
try {
  await run(opts, result);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  process.exit(0);
} catch (e) {
  if (Object.keys(result).length > 0) process.stdout.write(`${JSON.stringify(result)}\n`);
  const what =
    e instanceof ScenarioError
      ? e.message
      : e?.message
        ? `${e.constructor?.name ?? "Error"}${e.code !== undefined ? ` ${e.code}` : ""}: ${e.message}`
        : String(e);
  process.stderr.write(`modern_client.mjs: FAILED: ${what}\n`);
  process.exit(1);
}
