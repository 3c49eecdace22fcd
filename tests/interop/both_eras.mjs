#!/usr/bin/env node
// Two clients of both eras at once, through mcpmux in front of a 2026-07-28 upstream
// (modern_server.mjs): the official TypeScript SDK v1 client (@modelcontextprotocol/sdk,
// 2025-11-25, `initialize`) as "legacy" and the SDK v2 client (@modelcontextprotocol/client)
// pinned to 2026-07-28 as "modern", in one process so their steps interleave as wanted.
//
//   node both_eras.mjs URL [--uri URI] [--pause] [--timeout-ms MS]
//
// Steps (each "both" step runs the two clients concurrently):
//   1. both connect; both declare elicitation (form) with a handler that records the
//      request's message and answers accept {confirm: true};
//   2. both tools/list, both call echo {text: "from <era>"}, both read URI (v0);
//   3. both hold URI: legacy resources/subscribe, modern subscriptions/listen
//      {resourceSubscriptions: [URI]} (acknowledged);
//      --pause: print {"step":"holding"} and wait for a line "go" on stdin (the driver
//      looks at what the upstream saw meanwhile);
//   4. legacy calls bump {uri: URI}; both await their notifications/resources/updated for
//      URI, then both read URI again (modern with cacheMode 'bypass', so the SDK's own
//      response cache is out of the picture: the read reaches mcpmux);
//   5. MRTR, both at once: legacy calls confirm {action: "legacy-launch"} (mcpmux bridges
//      the upstream's input_required into an elicitation/create for it), modern calls
//      confirm {action: "modern-launch"} (the SDK answers input_required itself with its
//      elicitation handler and retries);
//   6. both release URI (legacy resources/unsubscribe, modern closes its listen).
//
// One JSON line on stdout (after the "holding" line, if any); exit 0 when every step
// completed, 1 with a message on stderr otherwise (the JSON line is still printed). The
// driver judges the values. No sleeps: every wait is a promise bounded by --timeout-ms.
import readline from "node:readline";
import { Client as LegacyClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as LegacyTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from "@modelcontextprotocol/client";

const MODERN = "2026-07-28";
const SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId";
const ANSWER = { action: "accept", content: { confirm: true } };

class ScenarioError extends Error {}

function usage(msg) {
  if (msg) process.stderr.write(`both_eras.mjs: ${msg}\n`);
  process.stderr.write("usage: node both_eras.mjs URL [--uri URI] [--pause] [--timeout-ms MS]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const o = { url: undefined, uri: "test://modern/counter", pause: false, timeoutMs: 20000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : usage(`missing value for ${a}`));
    switch (a) {
      case "--uri": o.uri = val(); break;
      case "--pause": o.pause = true; break;
      case "--timeout-ms": {
        o.timeoutMs = Number.parseInt(val(), 10);
        if (!Number.isFinite(o.timeoutMs) || o.timeoutMs <= 0) usage("bad --timeout-ms");
        break;
      }
      default:
        if (a.startsWith("-") || o.url) usage(`unexpected argument ${a}`);
        o.url = a;
    }
  }
  if (!o.url) usage("a URL is required");
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

/** Updates for one URI, in arrival order, with waiters for "the n-th update". */
class Updates {
  constructor(uri) {
    this.uri = uri;
    this.list = [];
    this.other = 0;
    this.waiters = [];
  }

  push(params) {
    if (params.uri !== this.uri) return void this.other++;
    this.list.push({ uri: params.uri, _meta: params._meta ?? null });
    this.waiters = this.waiters.filter((w) => (this.list.length >= w.n ? (w.resolve(), false) : true));
  }

  nth(n) {
    return this.list.length >= n ? Promise.resolve() : new Promise((resolve) => this.waiters.push({ n, resolve }));
  }
}

/** The next stdin line (the driver's answer to a pause). */
function nextLine() {
  return new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: process.stdin });
    rl.once("line", (line) => {
      resolve(line.trim()); // before close(), which emits "close" at once
      rl.close();
    });
    rl.once("close", () => reject(new ScenarioError("stdin closed while paused")));
  });
}

async function run(o, out) {
  const started = Date.now();
  const t = (p, what) => withTimeout(p, o.timeoutMs, what);
  Object.assign(out, { scenario: "both_eras", uri: o.uri });
  const elicited = { legacy: [], modern: [] };
  const updates = { legacy: new Updates(o.uri), modern: new Updates(o.uri) };

  const legacy = new LegacyClient(
    { name: "mcpmux-both-eras-legacy", version: "0.0.0" },
    { capabilities: { elicitation: { form: {} } } },
  );
  legacy.setRequestHandler(ElicitRequestSchema, async (req) => {
    elicited.legacy.push(req.params?.message ?? null);
    return ANSWER;
  });
  legacy.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.legacy.push(n.params));

  const modern = new ModernClient(
    { name: "mcpmux-both-eras-modern", version: "0.0.0" },
    { versionNegotiation: { mode: { pin: MODERN } }, capabilities: { elicitation: { form: {} } } },
  );
  modern.setRequestHandler("elicitation/create", async (req) => {
    elicited.modern.push(req.params?.message ?? null);
    return ANSWER;
  });
  modern.setNotificationHandler("notifications/resources/updated", async (n) => updates.modern.push(n.params));

  const modernTransport = new ModernTransport(new URL(o.url));
  let listenId;
  const send = modernTransport.send.bind(modernTransport);
  modernTransport.send = async (message, options) => {
    if (message?.method === "subscriptions/listen") listenId = message.id;
    return send(message, options);
  };

  try {
    await Promise.all([
      t(legacy.connect(new LegacyTransport(new URL(o.url))), "legacy connect"),
      t(modern.connect(modernTransport), "modern connect (pinned to 2026-07-28)"),
    ]);
    out.legacyVersion = legacy.getServerVersion()?.name ?? null;
    out.modernEra = modern.getProtocolEra();
    if (out.modernEra !== "modern") throw new ScenarioError(`the modern client connected in era ${out.modernEra}`);

    const [lt, mt] = await Promise.all([t(legacy.listTools(), "legacy tools/list"), t(modern.listTools(), "modern tools/list")]);
    out.tools = { legacy: lt.tools.map((x) => x.name).sort(), modern: mt.tools.map((x) => x.name).sort() };

    const [le, me] = await Promise.all([
      t(legacy.callTool({ name: "echo", arguments: { text: "from legacy" } }), "legacy echo"),
      t(modern.callTool({ name: "echo", arguments: { text: "from modern" } }), "modern echo"),
    ]);
    out.echo = { legacy: textOf(le), modern: textOf(me) };

    const read = async () => {
      const [lr, mr] = await Promise.all([
        t(legacy.readResource({ uri: o.uri }), "legacy resources/read"),
        t(modern.readResource({ uri: o.uri }, { cacheMode: "bypass" }), "modern resources/read"),
      ]);
      return { legacy: lr.contents?.[0]?.text ?? null, modern: mr.contents?.[0]?.text ?? null };
    };
    out.readsBefore = await read();

    const [, sub] = await Promise.all([
      t(legacy.subscribeResource({ uri: o.uri }), "legacy resources/subscribe"),
      t(modern.listen({ resourceSubscriptions: [o.uri] }), "modern listen ack"),
    ]);
    out.listen = { id: listenId ?? null, honoredFilter: sub.honoredFilter ?? null };
    if (!(sub.honoredFilter?.resourceSubscriptions ?? []).includes(o.uri)) {
      throw new ScenarioError(`the listen did not honour ${o.uri}: ${JSON.stringify(sub.honoredFilter)}`);
    }
    out.updatesWhileHolding = { legacy: updates.legacy.list.length, modern: updates.modern.list.length };

    if (o.pause) {
      process.stdout.write(`${JSON.stringify({ step: "holding" })}\n`);
      const line = await t(nextLine(), "the driver's go");
      if (line !== "go") throw new ScenarioError(`the driver answered ${JSON.stringify(line)}, not go`);
    }

    const arrived = Promise.all([
      t(updates.legacy.nth(1), `the legacy client's update for ${o.uri}`),
      t(updates.modern.nth(1), `the modern client's update for ${o.uri}`),
    ]);
    const bumped = await t(legacy.callTool({ name: "bump", arguments: { uri: o.uri } }), "legacy bump");
    out.bump = textOf(bumped);
    await arrived;
    out.readsAfter = await read();

    const [lc, mc] = await Promise.all([
      t(legacy.callTool({ name: "confirm", arguments: { action: "legacy-launch" } }), "legacy confirm (bridged MRTR)"),
      t(modern.callTool({ name: "confirm", arguments: { action: "modern-launch" } }), "modern confirm (MRTR)"),
    ]);
    out.confirm = {
      legacy: { text: textOf(lc), isError: lc.isError ?? false },
      modern: { text: textOf(mc), isError: mc.isError ?? false },
    };
    out.elicited = elicited;

    await Promise.all([
      t(legacy.unsubscribeResource({ uri: o.uri }), "legacy resources/unsubscribe"),
      t(sub.close(), "modern listen close"),
    ]);
    out.closed = await t(sub.closed, "modern listen closed");
    out.updates = {
      legacy: updates.legacy.list,
      modern: updates.modern.list,
      legacyOther: updates.legacy.other,
      modernOther: updates.modern.other,
    };
    out.modernSubscriptionIds = [...new Set(updates.modern.list.map((u) => u._meta?.[SUBSCRIPTION_ID] ?? null))];
  } finally {
    out.elicited = elicited;
    out.elapsedMs = Date.now() - started;
    await Promise.all([legacy.close().catch(() => {}), modern.close().catch(() => {})]);
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
  process.stdout.write(`${JSON.stringify(result)}\n`);
  const what =
    e instanceof ScenarioError
      ? e.message
      : e?.message
        ? `${e.constructor?.name ?? "Error"}${e.code !== undefined ? ` ${e.code}` : ""}: ${e.message}`
        : String(e);
  process.stderr.write(`both_eras.mjs: FAILED: ${what}\n`);
  process.exit(1);
}
