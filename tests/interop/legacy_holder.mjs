#!/usr/bin/env node
// A legacy-era client that holds one URI while other peers come and go: the official
// TypeScript SDK v1 client (@modelcontextprotocol/sdk, Client + StreamableHTTPClientTransport,
// 2025-11-25 `initialize`). Used by tests/interop_modern.rs as the legacy peer that shares
// mcpmux's one upstream subscription with the modern (2026-07-28) SDK clients, which run
// meanwhile in their own processes and trigger the updates.
//
//   node legacy_holder.mjs URL [--uri URI] [--updates N] [--tool NAME] [--tool-args JSON]
//                              [--pause] [--timeout-ms MS]
//
// Steps:
//   1. connect; resources/subscribe URI; read URI once (the baseline, which mcpmux may now
//      cache for as long as the URI is held);
//   2. print {"step":"holding"} (the driver may start the other peers now);
//   3. N times: await the next notifications/resources/updated for URI, then read URI
//      (the read must show the update: its version is at least the number of updates so
//      far). Without --tool something else triggers the updates (the modern peers); with
//      --tool NAME (e.g. emit_update) the client calls it once per wanted update, each
//      after the previous update's read, with --tool-args (default {"uri": URI});
//   4. --pause: print {"step":"updated","updates":N} and wait for a line "go" on stdin (the
//      driver looks at the upstream while only this client still holds URI);
//   5. resources/unsubscribe URI; close.
//
// One JSON line on stdout after the step lines; exit 0 when every step completed, 1 with a
// message on stderr otherwise (the JSON line is still printed). The driver judges the
// values, e.g.
//   {"scenario":"legacy_holder","uri":"test://static/1","updatesWanted":4,"protocolVersion":"2025-11-25",
//    "server":"mcpmux","readBefore":"test://static/1 v0",
//    "reads":[{"after":1,"text":"test://static/1 v1"},…,{"after":4,"text":"test://static/1 v4"}],
//    "updates":[{"uri":"test://static/1","_meta":null},…],"updatesTotal":4,"otherUpdates":0,
//    "triggers":[],"unsubscribed":true,"elapsedMs":5210}
// `updates` are the first N; `updatesTotal` counts every update for URI that arrived before
// the unsubscribe answer. No sleeps: every wait is a promise bounded by --timeout-ms
// (default 20000).
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

class ScenarioError extends Error {}

function usage(msg) {
  if (msg) process.stderr.write(`legacy_holder.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node legacy_holder.mjs URL [--uri URI] [--updates N] [--tool NAME] [--tool-args JSON]\n" +
      "                              [--pause] [--timeout-ms MS]\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const o = { url: undefined, uri: "test://static/1", updates: 2, tool: undefined, toolArgs: undefined, pause: false, timeoutMs: 20000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : usage(`missing value for ${a}`));
    const int = () => {
      const v = Number.parseInt(val(), 10);
      return Number.isFinite(v) && v > 0 ? v : usage(`bad number for ${a}`);
    };
    switch (a) {
      case "--uri": o.uri = val(); break;
      case "--updates": o.updates = int(); break;
      case "--tool": o.tool = val(); break;
      case "--tool-args": {
        const v = val();
        try {
          o.toolArgs = JSON.parse(v);
        } catch {
          usage(`--tool-args needs JSON, got ${v}`);
        }
        break;
      }
      case "--pause": o.pause = true; break;
      case "--timeout-ms": o.timeoutMs = int(); break;
      default:
        if (a.startsWith("-") || o.url) usage(`unexpected argument ${a}`);
        o.url = a;
    }
  }
  if (!o.url) usage("a URL is required");
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
  Object.assign(out, { scenario: "legacy_holder", uri: o.uri, updatesWanted: o.updates });

  // Updates for o.uri, in arrival order, and waiters for "the n-th update".
  const updates = [];
  let otherUpdates = 0;
  let waiters = [];
  const client = new Client({ name: "mcpmux-legacy-holder", version: "0.0.0" }, { capabilities: {} });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    if (n.params.uri !== o.uri) return void otherUpdates++;
    updates.push({ uri: n.params.uri, _meta: n.params._meta ?? null });
    waiters = waiters.filter((w) => (updates.length >= w.n ? (w.resolve(), false) : true));
  });
  const nthUpdate = (n) =>
    updates.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }));
  const read = async (what) => {
    const r = await t(client.readResource({ uri: o.uri }), `resources/read ${o.uri} (${what})`);
    return r.contents?.[0]?.text ?? null;
  };

  const transport = new StreamableHTTPClientTransport(new URL(o.url));
  try {
    await t(client.connect(transport), "connect (initialize)");
    out.protocolVersion = transport.protocolVersion ?? null;
    out.server = client.getServerVersion()?.name ?? null;
    if (!client.getServerCapabilities()?.resources?.subscribe) {
      throw new ScenarioError(`the server does not offer resources.subscribe: ${JSON.stringify(client.getServerCapabilities())}`);
    }

    await t(client.subscribeResource({ uri: o.uri }), `resources/subscribe ${o.uri}`);
    out.readBefore = await read("before any update");
    process.stdout.write(`${JSON.stringify({ step: "holding" })}\n`);

    out.reads = [];
    out.triggers = [];
    for (let i = 1; i <= o.updates; i++) {
      const arrived = t(nthUpdate(i), `update ${i} for ${o.uri}`);
      if (o.tool) {
        const r = await t(client.callTool({ name: o.tool, arguments: o.toolArgs }), `tools/call ${o.tool}`);
        if (r.isError) throw new ScenarioError(`${o.tool} answered an error: ${textOf(r)}`);
        out.triggers.push(textOf(r));
      }
      await arrived;
      out.reads.push({ after: i, text: await read(`after update ${i}`) });
    }

    if (o.pause) {
      process.stdout.write(`${JSON.stringify({ step: "updated", updates: o.updates })}\n`);
      const line = await t(nextLine(), "the driver's go");
      if (line !== "go") throw new ScenarioError(`the driver answered ${JSON.stringify(line)}, not go`);
    }

    await t(client.unsubscribeResource({ uri: o.uri }), `resources/unsubscribe ${o.uri}`);
    out.unsubscribed = true;
  } finally {
    out.updates = updates.slice(0, o.updates);
    out.updatesTotal = updates.length;
    out.otherUpdates = otherUpdates;
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
  process.stdout.write(`${JSON.stringify(result)}\n`);
  const what =
    e instanceof ScenarioError
      ? e.message
      : e?.message
        ? `${e.constructor?.name ?? "Error"}${e.code !== undefined ? ` ${e.code}` : ""}: ${e.message}`
        : String(e);
  process.stderr.write(`legacy_holder.mjs: FAILED: ${what}\n`);
  process.exit(1);
}
