#!/usr/bin/env node
// Interop scenarios driven by the official TypeScript SDK client (Client +
// StreamableHTTPClientTransport) against an MCP endpoint: mcpmux, or server-everything
// directly (`--direct`).
//
//   node clients.mjs fanout <url> [--clients N] [--uri URI] [--direct]
//                                 [--quiet-ms MS] [--timeout-ms MS]
//   node clients.mjs reread <url> [--clients N] [--uri URI] [--updates K] [--direct]
//                                 [--timeout-ms MS]
//   node clients.mjs multi <url> [--uri URI] [--updates K] [--timeout-ms MS]
//   node clients.mjs restart <url> [--uri URI] [--updates K] [--timeout-ms MS]
//
// `multi` and `restart` expect mcpmux in front of TWO server-everything upstreams with
// `prefix = "local"` and `prefix = "remote"` (--local-prefix / --remote-prefix change
// them): tools `local__echo`, `remote__echo`, …, resource URIs `local+URI`, `remote+URI`.
// `restart` talks to the test driving it: after its first update it prints the line
// READY-FOR-RESTART and waits for a line RESTARTED on stdin (the driver restarts the
// `remote` server in between), then expects mcpmux's "you may have missed changes"
// update and, after toggling the new upstream session, periodic updates again.
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
    localPrefix: "local",
    remotePrefix: "remote",
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
      case "--local-prefix": opts.localPrefix = val(); break;
      case "--remote-prefix": opts.remotePrefix = val(); break;
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
      "       node clients.mjs reread <url> [--clients N] [--uri URI] [--updates K] [--direct] [--timeout-ms MS]\n" +
      "       node clients.mjs multi <url> [--uri URI] [--updates K] [--timeout-ms MS] [--local-prefix P] [--remote-prefix P]\n" +
      "       node clients.mjs restart <url> [--uri URI] [--updates K] [--timeout-ms MS] [--local-prefix P] [--remote-prefix P]\n",
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

async function toggle(peer, expect, name = TOGGLE) {
  const res = await peer.client.callTool({ name, arguments: {} });
  const text = textOf(res);
  if (res.isError || !text.startsWith(expect)) {
    fail(`client ${peer.index}: ${name} expected "${expect}…", got ${JSON.stringify(res)}`);
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

/** The default resource of `multi` and `restart` (server-everything lists it first). */
const DEFAULT_URI = "demo://resource/static/document/architecture.md";

/** Names and URIs of one namespaced upstream as clients see them through mcpmux. */
function side(prefix, uri) {
  return { prefix, echo: `${prefix}__${ECHO}`, toggle: `${prefix}__${TOGGLE}`, uri: `${prefix}+${uri}` };
}

/** Every item of a paginated list (mcpmux merges upstreams' pages behind proxy cursors). */
async function listAll(peer, kind) {
  const items = [];
  let cursor;
  for (let pages = 0; pages < 100; pages++) {
    const page = kind === "tools"
      ? await peer.client.listTools(cursor ? { cursor } : undefined)
      : await peer.client.listResources(cursor ? { cursor } : undefined);
    items.push(...page[kind]);
    cursor = page.nextCursor;
    if (!cursor) return items;
  }
  fail(`client ${peer.index}: ${kind}/list did not end within 100 pages`);
}

/** Waits for `n` updates for `uri` at `peer`; on timeout reports every update it did get. */
async function awaitUpdates(peer, uri, n, ms) {
  try {
    return await withTimeout(peer.waitUpdates(uri, n), ms, `${n} notifications/resources/updated for ${uri} at client ${peer.index}`);
  } catch (e) {
    fail(`${e.message} (updates by uri so far: ${JSON.stringify(Object.fromEntries(peer.updates))})`);
  }
}

async function checkPrefixedEcho(peer, s) {
  const message = `${s.prefix} echo from client ${peer.index}`;
  const res = await peer.client.callTool({ name: s.echo, arguments: { message } });
  const text = textOf(res);
  if (res.isError || text !== `Echo: ${message}`) fail(`client ${peer.index}: ${s.echo} answered ${JSON.stringify(res)}`);
  return text;
}

/**
 * Reads a namespaced URI. mcpmux (as of this test) maps the request's URI back but not
 * the `contents[].uri` of the answer, so either form is accepted and reported.
 */
async function readNamespaced(peer, uri, rawUri) {
  const res = await peer.client.readResource({ uri });
  const first = res.contents?.[0];
  if (!first || (first.uri !== uri && first.uri !== rawUri)) {
    fail(`client ${peer.index}: resources/read ${uri} answered ${JSON.stringify(res).slice(0, 300)}`);
  }
  return { bytes: (first.text ?? first.blob ?? "").length, contentsUri: first.uri };
}

/** The next line equal to `want` on stdin (the test driving this scenario writes it). */
function stdinLine(want) {
  return new Promise((resolve, reject) => {
    let buf = "";
    const onData = (d) => {
      buf += d;
      for (;;) {
        const nl = buf.indexOf("\n");
        if (nl === -1) return;
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === want) {
          process.stdin.off("data", onData);
          process.stdin.off("end", onEnd);
          process.stdin.pause();
          resolve();
          return;
        }
      }
    };
    const onEnd = () => reject(new ScenarioError(`stdin closed before the line ${want}`));
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", onData);
    process.stdin.once("end", onEnd);
    process.stdin.resume();
  });
}

/**
 * Two clients, two upstreams behind one mcpmux: both see both servers' tools; client X
 * subscribes to `local+URI`, client Y to `remote+URI`; each upstream is toggled once;
 * X must get only local updates and Y only remote ones.
 */
async function multi(opts) {
  const started = Date.now();
  const rawUri = opts.uri ?? DEFAULT_URI;
  const local = side(opts.localPrefix, rawUri);
  const remote = side(opts.remotePrefix, rawUri);
  const peers = await connectAll({ ...opts, clients: 2 });
  const [x, y] = peers;
  try {
    const toolNames = await Promise.all(peers.map(async (p) => (await listAll(p, "tools")).map((t) => t.name)));
    for (const [i, names] of toolNames.entries()) {
      for (const need of [local.echo, remote.echo, local.toggle, remote.toggle]) {
        if (!names.includes(need)) fail(`client ${i}: tools/list lacks "${need}" (got ${names.join(", ")})`);
      }
      for (const bare of [ECHO, TOGGLE]) {
        if (names.includes(bare)) fail(`client ${i}: tools/list shows the unprefixed "${bare}"`);
      }
    }
    const resourceUris = await Promise.all(peers.map(async (p) => (await listAll(p, "resources")).map((r) => r.uri)));
    for (const [i, uris] of resourceUris.entries()) {
      for (const need of [local.uri, remote.uri]) {
        if (!uris.includes(need)) fail(`client ${i}: resources/list lacks ${need} (got ${uris.slice(0, 20).join(", ")}…)`);
      }
    }
    // Every client calls both echoes: the prefix picks the upstream.
    const echoes = {};
    for (const p of peers) {
      for (const s of [local, remote]) echoes[`${p.index}:${s.echo}`] = await checkPrefixedEcho(p, s);
    }
    const reads = { local: await readNamespaced(x, local.uri, rawUri), remote: await readNamespaced(y, remote.uri, rawUri) };

    await x.subscribe(local.uri);
    await y.subscribe(remote.uri);
    const beforeToggle = { x: Object.fromEntries(x.updates), y: Object.fromEntries(y.updates) };
    await Promise.all([toggle(x, "Started", local.toggle), toggle(y, "Started", remote.toggle)]);
    try {
      // One at once, then one every 5 s: waiting for K >= 2 spans at least one periodic tick
      // of BOTH upstreams (toggled together), so a leak either way would be seen.
      const budget = opts.timeoutMs + 5000 * (opts.updates - 1);
      await Promise.all([
        awaitUpdates(x, local.uri, opts.updates, budget),
        awaitUpdates(y, remote.uri, opts.updates, budget),
      ]);
      await Promise.all([x.unsubscribe(local.uri), y.unsubscribe(remote.uri)]);
      await Promise.all([toggle(x, "Stopped", local.toggle), toggle(y, "Stopped", remote.toggle)]);
    } catch (e) {
      await Promise.allSettled([toggle(x, "Stopped", local.toggle), toggle(y, "Stopped", remote.toggle)]);
      throw e;
    }
    const updates = { x: Object.fromEntries(x.updates), y: Object.fromEntries(y.updates) };
    const result = {
      scenario: "multi",
      uri: rawUri,
      local: local.uri,
      remote: remote.uri,
      tools: toolNames.map((n) => n.length),
      resources: resourceUris.map((u) => u.length),
      echoes,
      reads,
      updatesWanted: opts.updates,
      updatesBeforeToggle: beforeToggle,
      updates,
      elapsedMs: Date.now() - started,
    };
    const problems = [];
    if (Object.keys(beforeToggle.x).length || Object.keys(beforeToggle.y).length) {
      problems.push(`updates arrived before the toggles: ${JSON.stringify(beforeToggle)}`);
    }
    for (const [who, want] of [["x", local.uri], ["y", remote.uri]]) {
      const stray = Object.keys(updates[who]).filter((u) => u !== want);
      if (stray.length) problems.push(`client ${who} got updates it does not hold: ${stray.join(", ")} (${JSON.stringify(updates[who])})`);
    }
    return { result, problems };
  } finally {
    await closeAll(peers);
  }
}

/**
 * One client holds `remote+URI` (and `local+URI`, never toggled) while the driver
 * restarts the remote server on the same port: the update stream must survive with
 * the client staying connected.
 */
async function restart(opts) {
  const started = Date.now();
  const rawUri = opts.uri ?? DEFAULT_URI;
  const local = side(opts.localPrefix, rawUri);
  const remote = side(opts.remotePrefix, rawUri);
  const [p] = await connectAll({ ...opts, clients: 1 });
  let remoteOn = false;
  try {
    await p.subscribe(remote.uri);
    await p.subscribe(local.uri);
    await toggle(p, "Started", remote.toggle);
    remoteOn = true;
    await awaitUpdates(p, remote.uri, 1, opts.timeoutMs);
    // Ticks are 5 s apart and the driver kills the server within milliseconds of this
    // line, so every later update is caused by the restart.
    const beforeRestart = p.count(remote.uri);
    process.stdout.write("READY-FOR-RESTART\n");
    const readyAt = Date.now();
    await withTimeout(stdinLine("RESTARTED"), opts.timeoutMs, "the line RESTARTED on stdin");
    const restartedAt = Date.now();
    remoteOn = false; // a new server process: its session has no toggle on
    // mcpmux re-initializes, re-subscribes and tells every holder it may have missed changes.
    await awaitUpdates(p, remote.uri, beforeRestart + 1, opts.timeoutMs);
    const reReadyAt = Date.now();
    const afterReReady = p.count(remote.uri);
    await toggle(p, "Started", remote.toggle);
    remoteOn = true;
    await awaitUpdates(p, remote.uri, afterReReady + opts.updates, opts.timeoutMs + 5000 * (opts.updates - 1));
    const afterToggle = p.count(remote.uri);
    await p.unsubscribe(remote.uri);
    await p.unsubscribe(local.uri);
    await toggle(p, "Stopped", remote.toggle);
    remoteOn = false;
    const updates = Object.fromEntries(p.updates);
    const result = {
      scenario: "restart",
      uri: rawUri,
      remote: remote.uri,
      local: local.uri,
      updatesBeforeRestart: beforeRestart,
      updatesOnReReady: afterReReady - beforeRestart,
      updatesAfterToggle: afterToggle - afterReReady,
      updatesWanted: opts.updates,
      localUpdates: p.count(local.uri),
      updates,
      restartMs: restartedAt - readyAt,
      reReadyMs: reReadyAt - restartedAt,
      elapsedMs: Date.now() - started,
    };
    const problems = [];
    if (result.localUpdates !== 0) problems.push(`${result.localUpdates} update(s) for ${local.uri}, whose upstream was never toggled nor restarted`);
    const stray = Object.keys(updates).filter((u) => u !== remote.uri && u !== local.uri);
    if (stray.length) problems.push(`updates for URIs the client does not hold: ${stray.join(", ")}`);
    return { result, problems };
  } catch (e) {
    if (remoteOn) await Promise.allSettled([toggle(p, "Stopped", remote.toggle)]);
    throw e;
  } finally {
    await closeAll([p]);
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let out;
  switch (opts.scenario) {
    case "fanout": out = await fanout(opts); break;
    case "reread": out = await reread(opts); break;
    case "multi": out = await multi(opts); break;
    case "restart": out = await restart(opts); break;
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
