#!/usr/bin/env node
// The conformance suite's client under test, with mcpmux as the client of the scenario's
// server (`conformance client --command "node oauth_driver.mjs"`; tests/oauth_conformance.rs):
//
//   MCPMUX_BIN=target/debug/mcpmux node oauth_driver.mjs SERVER_URL
//
// Reads the scenario (MCP_CONFORMANCE_SCENARIO) and its context (MCP_CONFORMANCE_CONTEXT:
// pre-registered client_id/client_secret), writes an mcpmux config with SERVER_URL as the one
// upstream (file token store in a fresh folder; `client_metadata_url` for servers that take
// Client ID Metadata Documents; the context's client as the pre-registered one), starts
// `mcpmux serve` with a $BROWSER that follows the authorization redirect headlessly (a GET
// that follows redirects: the suite's authorization endpoint redirects at once to mcpmux's
// loopback callback), and drives an SDK client (the official TS SDK v1) through mcpmux:
// connect, wait until the server's tools show (mcpmux announces them with list_changed once
// its upstream session is up) or until mcpmux says the login failed (scenarios where the
// client must refuse), then do what the scenario asks (tools_call: add_numbers; the JSON
// Schema scenario: echo the focal tool's schema; the context's `toolCalls` where it has
// them; any other: call each tool), retrying a call
// that failed while mcpmux logged in again (step-up) after the next list_changed.
//
// Exit 0 when the scenario's work was done, or mcpmux refused the server on purpose (the
// suite's checks judge which was right); 1 otherwise, with mcpmux's log on stderr. Every
// wait is an event (a notification, a log line, a process exit) bounded by TIMEOUT_MS.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const TIMEOUT_MS = Number(process.env.OAUTH_DRIVER_TIMEOUT_MS || 25000);
const CIMD_URL = "https://conformance-test.local/client-metadata.json";
const SECRET_ENV = "MCPMUX_CONFORMANCE_CLIENT_SECRET";

const serverUrl = process.argv[process.argv.length - 1];
const scenario = process.env.MCP_CONFORMANCE_SCENARIO || "";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
const bin = process.env.MCPMUX_BIN;
if (!bin || !serverUrl?.startsWith("http")) {
  process.stderr.write("usage: MCPMUX_BIN=PATH node oauth_driver.mjs SERVER_URL\n");
  process.exit(2);
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mcpmux-oauth-driver-"));
const log = [];
let mcpmux;

function toml(s) {
  return JSON.stringify(s);
}

function config() {
  const lines = [
    "[listen]",
    'http = "127.0.0.1:0"',
    "",
    "[restart]",
    "initial_backoff_ms = 50",
    "max_backoff_ms = 500",
    "",
    "[auth]",
    'store = "file"',
    `store_dir = ${toml(path.join(dir, "store"))}`,
    "",
    "[servers.up]",
    `url = ${toml(serverUrl)}`,
    // At the 2026-07-28 wire the scenario's server is modern only: `auto` would also try
    // the server's `initialize` face (a throw-away handshake whose
    // notifications/initialized carries no 2026-07-28 _meta), which request-metadata
    // rightly counts against the client.
    `protocol = ${toml(process.env.MCP_CONFORMANCE_PROTOCOL_VERSION === "2026-07-28" ? "modern" : "auto")}`,
    "",
    "[servers.up.oauth]",
    `client_metadata_url = ${toml(CIMD_URL)}`,
  ];
  if (context.client_id) {
    lines.push(`client_id = ${toml(context.client_id)}`);
    if (context.client_secret) lines.push(`client_secret_env = ${toml(SECRET_ENV)}`);
  }
  return lines.join("\n") + "\n";
}

function browser() {
  // Follows the authorization endpoint's redirect to mcpmux's callback, like a browser
  // whose user already consented.
  const script = path.join(dir, "browser.mjs");
  fs.writeFileSync(
    script,
    "fetch(process.argv[2], { redirect: 'follow' }).then(r => r.text()).catch(e => { console.error(String(e)); process.exit(1); });\n",
  );
  const sh = path.join(dir, "browser.sh");
  fs.writeFileSync(sh, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(script)} "$1"\n`);
  fs.chmodSync(sh, 0o755);
  return sh;
}

// Resolves the first time a line matching `re` is logged (or already was).
const logWaiters = [];
function onLog(line) {
  log.push(line);
  for (const w of logWaiters) if (w.re.test(line)) w.resolve(line);
}
function logged(re) {
  const seen = log.find((l) => re.test(l));
  if (seen) return Promise.resolve(seen);
  return new Promise((resolve) => logWaiters.push({ re, resolve }));
}

function startMcpmux() {
  const cfg = path.join(dir, "mcpmux.toml");
  fs.writeFileSync(cfg, config());
  const env = { ...process.env, BROWSER: browser(), RUST_LOG: process.env.RUST_LOG || "info,mcpmux=debug" };
  if (context.client_secret) env[SECRET_ENV] = context.client_secret;
  mcpmux = spawn(bin, ["serve", "--config", cfg], { env, stdio: ["ignore", "pipe", "pipe"] });
  readline.createInterface({ input: mcpmux.stderr }).on("line", onLog);
  const exited = new Promise((resolve) => mcpmux.on("exit", (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: mcpmux.stdout });
    rl.on("line", (line) => {
      const m = /^mcpmux listening on (\S+)/.exec(line);
      if (m) resolve(m[1]);
    });
    exited.then((code) => reject(new Error(`mcpmux exited (${code}) before listening`)));
  });
}

function bounded(p, what) {
  let t;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), TIMEOUT_MS);
    }),
  ]).finally(() => clearTimeout(t));
}

async function main() {
  const url = await bounded(startMcpmux(), "mcpmux to listen");
  const client = new Client(
    { name: "mcpmux-oauth-driver", version: "1.0.0" },
    { capabilities: { elicitation: { form: { applyDefaults: true } } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: {} }));
  // Each list_changed resolves the current waiter and arms the next one.
  let changed;
  let changedNext = new Promise((r) => (changed = r));
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    const done = changed;
    changedNext = new Promise((r) => (changed = r));
    done();
  });
  await bounded(client.connect(new StreamableHTTPClientTransport(new URL(url))), "connect");
  const refused = logged(/login failed|keeps refusing/);
  const tools = async () => {
    for (;;) {
      const next = changedNext;
      // A list asked while mcpmux's session ends for a new login fails: wait as for
      // an empty one.
      const list = await client.listTools().then((r) => r.tools, () => []);
      if (list.length > 0) return list;
      const why = await bounded(Promise.race([next.then(() => null), refused]), "the server's tools");
      if (why) return why;
    }
  };
  // Scenarios about the server's tools (and every auth one: its server has test-tool)
  // wait for them; the others act on what is there once connected.
  const wantsTools = ["auth/", "tools_call", "json-schema", "http-"].some((p) => scenario.startsWith(p));
  let list = wantsTools ? await tools() : (await client.listTools()).tools;
  if (typeof list === "string") {
    process.stdout.write(`mcpmux refused the server: ${list}\n`);
    await client.close();
    return true;
  }
  const call = async (name, args) => {
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await client.callTool({ name, arguments: args });
        if (!r.isError || attempt >= 3) return r;
      } catch (e) {
        if (attempt >= 3) throw e;
      }
      // mcpmux may be logging in again (step-up): wait until the server's tools are
      // back (its going down announced list_changed too, with the tools gone).
      const again = await tools();
      if (typeof again === "string") return { refused: again };
    }
  };
  let ok = true;
  if (Array.isArray(context.toolCalls)) {
    // The scenario names the calls (http-custom-headers).
    for (const c of context.toolCalls) {
      const r = await call(c.name, c.arguments ?? {});
      process.stdout.write(`${c.name}: ${JSON.stringify(r).slice(0, 200)}\n`);
    }
  } else if (scenario === "tools_call") {
    const r = await call("add_numbers", { a: 5, b: 3 });
    ok = !r.isError;
  } else if (scenario.startsWith("json-schema")) {
    const focal = list[0];
    const echo = list.find((t) => t.name !== focal.name) ?? focal;
    await call(echo.name, { schema: focal.inputSchema });
  } else {
    for (const t of list) {
      const r = await call(t.name, {});
      process.stdout.write(`${t.name}: ${JSON.stringify(r).slice(0, 200)}\n`);
    }
  }
  await client.close();
  return ok;
}

let ok = false;
try {
  ok = await main();
} catch (e) {
  process.stderr.write(`oauth_driver: ${e?.stack || e}\n`);
}
if (mcpmux && mcpmux.exitCode === null) {
  const gone = new Promise((r) => mcpmux.on("exit", r));
  mcpmux.kill("SIGTERM");
  await bounded(gone, "mcpmux to exit").catch(() => mcpmux.kill("SIGKILL"));
}
if (!ok) process.stderr.write(`--- mcpmux log ---\n${log.join("\n")}\n`);
fs.rmSync(dir, { recursive: true, force: true });
process.exit(ok ? 0 : 1);
