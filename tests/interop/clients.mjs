#!/usr/bin/env node
// Interop scenarios driven by the official TypeScript SDK client (Client +
// StreamableHTTPClientTransport) against an MCP endpoint: mcpmux, or server-everything
// directly (`--direct`).
//
//   node clients.mjs fanout <url> [--clients N] [--uri URI] [--direct]
//                                 [--quiet-ms MS] [--timeout-ms MS]
//   node clients.mjs reread <url> [--clients N] [--uri URI] [--updates K] [--direct]
//                                 [--timeout-ms MS]
//
// Prints exactly ONE JSON line to stdout. Exit 0 on success; on failure, exit 1 with a
// message on stderr (the JSON line is still printed when the scenario got far enough to
// have one, so callers can see what was observed).
//
// The upstream is expected to be @modelcontextprotocol/server-everything: it sends no
// `notifications/resources/updated` until its `toggle-subscriber-updates` tool is called on
// that (upstream) session; then one at once and one every 5 s for every URI that session
// subscribed. Through mcpmux all clients share ONE upstream session, so exactly one client
// toggles (a second toggle would switch updates off for everyone). `--direct` means every
// client has its own upstream session (pointing at server-everything itself), so every
// client toggles its own.
//
// No sleeps wait for events: waits are promises resolved by notification handlers, bounded
// by --timeout-ms as a safety net. The only timed wait is the --quiet-ms observation window
// after unsubscribe, during which nothing may arrive (server-everything ticks every 5 s, so
// the default 6 s window always spans at least one upstream tick).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const TOGGLE = "toggle-subscriber-updates";
const ECHO = "echo";

class ScenarioError extends Error {}

function fail(msg) {
  throw new ScenarioError(msg);
}

function parseArgs(argv) {
  const [scenario, url, ...rest] = argv;
  if (!scenario || !url || scenario.startsWith("-") || url.startsWith("-")) {
    usage();
  }
  const opts = {
    scenario,
    url,
    clients: 3,
    uri: undefined,
    direct: false,
    quietMs: 6000,
    timeoutMs: 20000,
    updates: 2,
  };
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    const val = () => {
      if (i + 1 >= rest.length) usage(`missing value for ${a}`);
      return rest[++i];
    };
    const int = () => {
      const v = Number.parseInt(val(), 10);
      if (!Number.isFinite(v) || v < 0) usage(`bad number for ${a}`);
      return v;
    };
    switch (a) {
      case "--clients": opts.clients = int(); break;
      case "--uri": opts.uri = val(); break;
      case "--direct": opts.direct = true; break;
      case "--quiet-ms": opts.quietMs = int(); break;
      case "--timeout-ms": opts.timeoutMs = int(); break;
      case "--updates": opts.updates = int(); break;
      default: usage(`unknown option ${a}`);
    }
  }
  if (opts.clients < 1) usage("--clients must be >= 1");
  if (opts.updates < 1) usage("--updates must be >= 1");
  return opts;
}

function usage(msg) {
  if (msg) process.stderr.write(`clients.mjs: ${msg}\n`);
  process.stderr.write(
    "usage: node clients.mjs fanout <url> [--clients N] [--uri URI] [--direct] [--quiet-ms MS] [--timeout-ms MS]\n" +
      "       node clients.mjs reread <url> [--clients N] [--uri URI] [--updates K] [--direct] [--timeout-ms MS]\n",
  );
  process.exit(2);
}

/** A promise with its resolver exposed. */
function deferred() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
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

function delay(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function textOf(result) {
  return (result?.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");
}

/**
 * One downstream client. Counts `notifications/resources/updated` per URI, split at the
 * moment its own unsubscribe was answered, and lets callers await "N updates for URI".
 */
class Peer {
  constructor(index, url) {
    this.index = index;
    this.url = url;
    this.client = new Client({ name: `mcpmux-interop-ts-${index}`, version: "0.0.0" });
    this.transport = new StreamableHTTPClientTransport(new URL(url));
    this.updates = new Map(); // uri -> count (all)
    this.afterUnsubscribe = new Map(); // uri -> count after our unsubscribe was answered
    this.unsubscribed = new Set();
    this.waiters = []; // { uri, n, resolve }
    this.onUpdate = null; // optional async (uri) => void, for reread
    this.handlerErrors = [];
    this.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      const uri = n.params.uri;
      const c = (this.updates.get(uri) ?? 0) + 1;
      this.updates.set(uri, c);
      if (this.unsubscribed.has(uri)) {
        this.afterUnsubscribe.set(uri, (this.afterUnsubscribe.get(uri) ?? 0) + 1);
      }
      this.waiters = this.waiters.filter((w) => {
        if (w.uri === uri && c >= w.n) {
          w.resolve(c);
          return false;
        }
        return true;
      });
      if (this.onUpdate) {
        // Do not block the transport's reader; errors are collected and reported.
        Promise.resolve(this.onUpdate(uri)).catch((e) => this.handlerErrors.push(String(e?.message ?? e)));
      }
    });
  }

  async connect() {
    await this.client.connect(this.transport);
  }

  count(uri) {
    return this.updates.get(uri) ?? 0;
  }

  /** Resolves when at least `n` updates for `uri` have arrived (counting earlier ones). */
  waitUpdates(uri, n) {
    if (this.count(uri) >= n) return Promise.resolve(this.count(uri));
    const d = deferred();
    this.waiters.push({ uri, n, resolve: d.resolve });
    return d.promise;
  }

  async subscribe(uri) {
    await this.client.subscribeResource({ uri });
  }

  async unsubscribe(uri) {
    await this.client.unsubscribeResource({ uri });
    this.unsubscribed.add(uri);
  }

  async close() {
    try {
      await this.transport.terminateSession();
    } catch {
      // A server may refuse DELETE (405); closing the transport is what matters.
    }
    await this.client.close();
  }
}

async function connectAll(opts) {
  const peers = [];
  for (let i = 0; i < opts.clients; i++) peers.push(new Peer(i, opts.url));
  await withTimeout(Promise.all(peers.map((p) => p.connect())), opts.timeoutMs, "all clients to initialize");
  return peers;
}

async function checkTools(peer) {
  const { tools } = await peer.client.listTools();
  const names = tools.map((t) => t.name);
  for (const need of [ECHO, TOGGLE]) {
    if (!names.includes(need)) fail(`client ${peer.index}: tools/list lacks "${need}" (got ${names.join(", ")})`);
  }
  return tools.length;
}

async function checkEcho(peer) {
  const message = `hello from interop client ${peer.index}`;
  const res = await peer.client.callTool({ name: ECHO, arguments: { message } });
  if (res.isError) fail(`client ${peer.index}: echo returned isError: ${textOf(res)}`);
  if (!textOf(res).includes(message)) fail(`client ${peer.index}: echo answered ${JSON.stringify(res)}`);
}

/** Lists resources; returns the chosen URI (opts.uri or the first listed). */
async function discoverUri(peer, wanted) {
  const { resources } = await peer.client.listResources();
  const uris = resources.map((r) => r.uri);
  if (uris.length === 0) fail(`client ${peer.index}: resources/list is empty`);
  if (wanted === undefined) return uris[0];
  if (!uris.includes(wanted)) fail(`client ${peer.index}: resources/list lacks ${wanted} (got ${uris.join(", ")})`);
  return wanted;
}

async function readOnce(peer, uri) {
  const res = await peer.client.readResource({ uri });
  const first = res.contents?.[0];
  if (!first || first.uri !== uri) fail(`client ${peer.index}: resources/read ${uri} answered ${JSON.stringify(res).slice(0, 300)}`);
  return (first.text ?? first.blob ?? "").length;
}

async function toggle(peer, expect) {
  const res = await peer.client.callTool({ name: TOGGLE, arguments: {} });
  const text = textOf(res);
  if (res.isError || !text.startsWith(expect)) {
    fail(`client ${peer.index}: ${TOGGLE} expected "${expect}…", got ${JSON.stringify(res)}`);
  }
}

async function closeAll(peers) {
  await Promise.allSettled(peers.map((p) => p.close()));
}

async function fanout(opts) {
  const started = Date.now();
  const peers = await connectAll(opts);
  try {
    const toolCounts = await Promise.all(peers.map(checkTools));
    await Promise.all(peers.map(checkEcho));
    const uris = await Promise.all(peers.map((p) => discoverUri(p, opts.uri)));
    const uri = uris[0];
    if (uris.some((u) => u !== uri)) fail(`clients disagree on the first resource: ${uris.join(", ")}`);
    const bytes = await Promise.all(peers.map((p) => readOnce(p, uri)));

    await Promise.all(peers.map((p) => p.subscribe(uri)));
    const beforeToggle = peers.map((p) => p.count(uri));

    const togglers = opts.direct ? peers : [peers[0]];
    await Promise.all(togglers.map((p) => toggle(p, "Started")));
    try {
      await withTimeout(
        Promise.all(peers.map((p) => p.waitUpdates(uri, 1))),
        opts.timeoutMs,
        `every client's first notifications/resources/updated for ${uri} (counts so far: ${JSON.stringify(peers.map((p) => p.count(uri)))})`,
      );
      const firstUpdates = peers.map((p) => p.count(uri));

      await Promise.all(peers.map((p) => p.unsubscribe(uri)));
      const atUnsubscribe = peers.map((p) => p.count(uri));
      // Bounded observation window: nothing may arrive for this URI now.
      await delay(opts.quietMs);
      const afterPer = peers.map((p) => p.afterUnsubscribe.get(uri) ?? 0);

      await Promise.all(togglers.map((p) => toggle(p, "Stopped")));

      const result = {
        scenario: "fanout",
        clients: peers.length,
        direct: opts.direct,
        uri,
        tools: toolCounts[0],
        toolsPerClient: toolCounts,
        readBytes: bytes[0],
        toggles: togglers.length,
        updatesBeforeToggle: beforeToggle,
        updatesPerClient: firstUpdates,
        updatesAtUnsubscribe: atUnsubscribe,
        afterUnsubscribe: afterPer.reduce((a, b) => a + b, 0),
        afterUnsubscribePerClient: afterPer,
        quietMs: opts.quietMs,
        elapsedMs: Date.now() - started,
      };
      const problems = [];
      if (toolCounts.some((n) => n !== toolCounts[0])) problems.push(`clients saw different tool counts ${JSON.stringify(toolCounts)}`);
      if (beforeToggle.some((n) => n !== 0)) problems.push(`updates arrived before the toggle: ${JSON.stringify(beforeToggle)}`);
      if (result.afterUnsubscribe !== 0) problems.push(`${result.afterUnsubscribe} update(s) arrived after unsubscribe: ${JSON.stringify(afterPer)}`);
      return { result, problems };
    } catch (e) {
      // Leave the shared upstream quiet even when the scenario failed half way.
      await Promise.allSettled(togglers.map((p) => toggle(p, "Stopped")));
      throw e;
    }
  } finally {
    await closeAll(peers);
  }
}

async function reread(opts) {
  const started = Date.now();
  const peers = await connectAll(opts);
  try {
    const uri = await discoverUri(peers[0], opts.uri);
    const reads = peers.map(() => 0);
    const readErrors = [];
    const inflight = new Set();
    peers.forEach((p, i) => {
      p.onUpdate = (u) => {
        if (u !== uri || p.unsubscribed.has(u)) return;
        const r = readOnce(p, u).then(
          () => void reads[i]++,
          (e) => void readErrors.push(`client ${i}: ${e?.message ?? e}`),
        );
        inflight.add(r);
        r.finally(() => inflight.delete(r));
      };
    });
    await Promise.all(peers.map((p) => p.subscribe(uri)));
    const togglers = opts.direct ? peers : [peers[0]];
    await Promise.all(togglers.map((p) => toggle(p, "Started")));
    try {
      // server-everything sends one update at once and one every 5 s: K updates take 5*(K-1) s.
      const budget = opts.timeoutMs + 5000 * (opts.updates - 1);
      await withTimeout(
        Promise.all(peers.map((p) => p.waitUpdates(uri, opts.updates))),
        budget,
        `${opts.updates} updates for ${uri} at every client (counts so far: ${JSON.stringify(peers.map((p) => p.count(uri)))})`,
      );
      // Let re-reads still in flight finish (each awaits its own response) before
      // anyone unsubscribes: a read after the last unsubscribe is, rightly, not served
      // from the cache, and would count as an extra upstream read.
      await withTimeout(Promise.allSettled([...inflight]), opts.timeoutMs, "in-flight re-reads");
      await Promise.all(peers.map((p) => p.unsubscribe(uri)));
      await Promise.all(togglers.map((p) => toggle(p, "Stopped")));
    } catch (e) {
      await Promise.allSettled(togglers.map((p) => toggle(p, "Stopped")));
      throw e;
    }
    const updatesPerClient = peers.map((p) => p.count(uri));
    const result = {
      scenario: "reread",
      clients: peers.length,
      direct: opts.direct,
      uri,
      toggles: togglers.length,
      updatesWanted: opts.updates,
      updatesPerClient,
      readsPerClient: reads,
      readErrors: readErrors.length,
      elapsedMs: Date.now() - started,
    };
    const problems = [];
    if (readErrors.length) problems.push(`re-reads failed: ${readErrors.slice(0, 3).join("; ")}`);
    for (const p of peers) for (const e of p.handlerErrors) problems.push(`client ${p.index}: ${e}`);
    return { result, problems };
  } finally {
    await closeAll(peers);
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let out;
  switch (opts.scenario) {
    case "fanout": out = await fanout(opts); break;
    case "reread": out = await reread(opts); break;
    default: usage(`unknown scenario ${opts.scenario}`);
  }
  process.stdout.write(JSON.stringify(out.result) + "\n");
  if (out.problems.length) {
    process.stderr.write(`clients.mjs ${opts.scenario}: FAILED: ${out.problems.join("; ")}\n`);
    process.exitCode = 1;
  }
}

main().then(
  () => process.exit(process.exitCode ?? 0),
  (e) => {
    const msg = e instanceof ScenarioError ? e.message : (e?.stack ?? String(e));
    process.stderr.write(`clients.mjs: FAILED: ${msg}\n`);
    process.exit(1);
  },
);
