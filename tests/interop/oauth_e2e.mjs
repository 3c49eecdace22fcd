#!/usr/bin/env node
// End to end: mcpmux logs in to an MCP server behind a real authorization server, and every
// host shares that login (tests/oauth_e2e.rs runs it).
//
//   MCPMUX_BIN=target/debug/mcpmux node oauth_e2e.mjs WORKDIR
//
// In this process: oidc-provider (npm, pinned) as the authorization server on 127.0.0.1:0
// (dynamic client registration, PKCE, RFC 8707 resource indicators with JWT access tokens
// whose audience is the MCP server, refresh tokens rotated, revocation; every interaction
// approved at once for user "alice"), and an MCP server on the official TS SDK v1 (stateful
// Streamable HTTP) that checks each token's signature, issuer, audience and scope, and
// answers 401 with an RFC 9728 challenge otherwise; it has a subscribable test://counter
// and the tools bump (counter + 1, resources/updated to subscribers) and noop. Then:
//
//   1. `mcpmux serve` (auto_login = false, file token store in WORKDIR/store) starts and
//      shows the server as "needs login"; `mcpmux login up --no-browser` prints the URL, a
//      headless browser (redirects followed by hand, cookies kept) approves it, and the
//      running daemon picks the token up from the store.
//   2. Five clients (three SDK HTTP clients, two SDK stdio clients through `mcpmux
//      connect`) subscribe test://counter: the server sees ONE session, ONE subscribe;
//      each bump reaches all five.
//   3. Access tokens live 12 s: mcpmux refreshes them (rotating the refresh token) while
//      the clients keep calling, and no client sees an error; still one upstream session.
//   4. The refresh token is revoked at the authorization server (RFC 7009): once the
//      access token expires the server shows "needs login" in /status and /metrics, and a
//      client's call fails with an error naming `mcpmux login up`.
//   5. `mcpmux login up` again: served again, the subscription is back (a second upstream
//      subscribe), a bump reaches all five clients.
//   6. The token one client sends mcpmux never reaches the server (no passthrough). No
//      token (access or refresh, any generation) appears in any log line of mcpmux
//      serve, mcpmux login or mcpmux connect; the token file has mode 0600.
//
// Prints one JSON line (what was observed); exit 0 when every step held, 1 with a message
// on stderr otherwise. Every wait is an event (a log line, a notification, a process exit,
// a request the server saw) bounded by STEP_MS.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import readline from "node:readline";
import express from "express";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { Provider, errors } from "oidc-provider";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  isInitializeRequest,
  ResourceUpdatedNotificationSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const STEP_MS = Number(process.env.OAUTH_E2E_STEP_MS || 30000);
const TOKEN_TTL = 12;
const URI = "test://counter";
const bin = process.env.MCPMUX_BIN;
const work = process.argv[2];
if (!bin || !work) {
  process.stderr.write("usage: MCPMUX_BIN=PATH node oauth_e2e.mjs WORKDIR\n");
  process.exit(2);
}
fs.mkdirSync(work, { recursive: true });

const report = { steps: [] };
const step = (s) => {
  report.steps.push(s);
  process.stderr.write(`oauth_e2e: ${s}\n`);
};
class Failure extends Error {}
const check = (cond, msg) => {
  if (!cond) throw new Failure(msg);
};
function bounded(p, what, ms = STEP_MS) {
  let t;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Failure(`timed out waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}
function listen(server) {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server.address().port)));
}

// ---- the authorization server --------------------------------------------------------
const asServer = http.createServer();
const asPort = await listen(asServer);
const issuer = `http://127.0.0.1:${asPort}`;
const mcpServerHttp = http.createServer();
const mcpPort = await listen(mcpServerHttp);
const mcpUrl = `http://127.0.0.1:${mcpPort}/mcp`;

const provider = new Provider(issuer, {
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => mcpUrl,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (indicator !== mcpUrl) throw new errors.InvalidTarget();
        return {
          scope: "mcp:read mcp:write",
          audience: mcpUrl,
          accessTokenTTL: TOKEN_TTL,
          accessTokenFormat: "jwt",
        };
      },
    },
  },
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: true,
  interactions: { url: async (_ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ["mcpmux-e2e"] },
});
const asLog = [];
provider.on("server_error", (_ctx, e) => asLog.push(`server_error: ${e}`));
provider.on("grant.error", (_ctx, e) => asLog.push(`grant.error: ${e}`));
const callback = provider.callback();
asServer.on("request", async (req, res) => {
  if (!req.url.startsWith("/interaction/")) return callback(req, res);
  try {
    // The user approves everything at once.
    const details = await provider.interactionDetails(req, res);
    if (details.prompt.name === "login") {
      await provider.interactionFinished(req, res, { login: { accountId: "alice" } }, { mergeWithLastSubmission: false });
      return;
    }
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(" "));
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  } catch (e) {
    asLog.push(`interaction: ${e}`);
    res.statusCode = 500;
    res.end(String(e));
  }
});

// ---- the MCP server (resource server) ------------------------------------------------
const stats = { initializes: 0, subscribes: 0, unsubscribes: 0, rejected: 0, tokens: new Set(), headers: new Set() };
// What one HTTP client sends mcpmux as its own token: it must never reach the server.
const DOWNSTREAM_TOKEN = "downstream-client-token-must-stay-here";
const prmUrl = `http://127.0.0.1:${mcpPort}/.well-known/oauth-protected-resource/mcp`;
const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
const subscribed = new Set();
let counter = 0;
const seenWaiters = [];
function seen(kind) {
  for (const w of seenWaiters.splice(0)) w(kind);
}
function nextSeen(pred, what) {
  return bounded(
    new Promise((resolve) => {
      const wait = (k) => (pred(k) ? resolve(k) : seenWaiters.push(wait));
      seenWaiters.push(wait);
    }),
    what,
  );
}

async function authorize(req, res, next) {
  const challenge = `Bearer resource_metadata="${prmUrl}", scope="mcp:read"`;
  const h = req.headers.authorization ?? "";
  stats.headers.add(h);
  if (!h.startsWith("Bearer ")) {
    return res.status(401).set("WWW-Authenticate", challenge).json({ error: "invalid_token" });
  }
  const token = h.slice(7);
  try {
    const { payload } = await jwtVerify(token, jwks, { issuer, audience: mcpUrl });
    const scopes = String(payload.scope ?? "").split(" ");
    if (!scopes.includes("mcp:read")) {
      return res
        .status(403)
        .set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="mcp:read", resource_metadata="${prmUrl}"`)
        .json({ error: "insufficient_scope" });
    }
  } catch (e) {
    stats.rejected++;
    seen("rejected");
    return res.status(401).set("WWW-Authenticate", `${challenge}, error="invalid_token"`).json({ error: "invalid_token" });
  }
  if (!stats.tokens.has(token)) {
    stats.tokens.add(token);
    seen("token");
  }
  next();
}

function makeServer() {
  const server = new McpServer({ name: "oauth-e2e", version: "1.0.0" }, { capabilities: { resources: { subscribe: true } } });
  server.resource("counter", URI, async () => ({ contents: [{ uri: URI, text: `count ${counter}` }] }));
  server.tool("bump", "Counter + 1; subscribers hear resources/updated", async () => {
    counter++;
    for (const s of subscribed) await s.server.sendResourceUpdated({ uri: URI }).catch(() => {});
    return { content: [{ type: "text", text: `count ${counter}` }] };
  });
  server.tool("noop", "Does nothing", async () => ({ content: [{ type: "text", text: "ok" }] }));
  server.server.setRequestHandler(SubscribeRequestSchema, async () => {
    stats.subscribes++;
    subscribed.add(server);
    seen("subscribe");
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async () => {
    stats.unsubscribes++;
    subscribed.delete(server);
    return {};
  });
  return server;
}

const app = express();
app.use(express.json());
app.get("/.well-known/oauth-protected-resource/mcp", (_req, res) =>
  res.json({ resource: mcpUrl, authorization_servers: [issuer], scopes_supported: ["mcp:read", "mcp:write"] }),
);
// The daemon's $BROWSER posts the authorization URL here (the status page's link).
let browserOpened;
let browserUrl = new Promise((r) => (browserOpened = r));
app.post("/test/browser", express.text(), (req, res) => {
  browserOpened(req.body);
  res.end();
});
const transports = {};
app.post("/mcp", authorize, async (req, res) => {
  const sid = req.headers["mcp-session-id"];
  let t = sid ? transports[sid] : undefined;
  if (!t) {
    if (sid || !isInitializeRequest(req.body)) {
      return res.status(sid ? 404 : 400).json({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no session" } });
    }
    stats.initializes++;
    t = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => (transports[id] = t),
    });
    await makeServer().connect(t);
  }
  await t.handleRequest(req, res, req.body);
});
const bySession = async (req, res) => {
  const t = transports[req.headers["mcp-session-id"]];
  if (!t) return res.status(404).end();
  await t.handleRequest(req, res);
};
app.get("/mcp", authorize, bySession);
app.delete("/mcp", authorize, bySession);
mcpServerHttp.on("request", app);

// ---- mcpmux ----------------------------------------------------------------------------
const store = path.join(work, "store");
const cfgPath = path.join(work, "mcpmux.toml");
fs.writeFileSync(
  cfgPath,
  [
    "[listen]",
    'http = "127.0.0.1:0"',
    "[restart]",
    "initial_backoff_ms = 50",
    "max_backoff_ms = 500",
    "[auth]",
    'store = "file"',
    `store_dir = ${JSON.stringify(store)}`,
    "[servers.up]",
    `url = ${JSON.stringify(mcpUrl)}`,
    "[servers.up.oauth]",
    "auto_login = false",
    "",
  ].join("\n"),
);
const logs = { serve: [], login: [], connect: [] };
const logWaiters = [];
function onServeLog(line) {
  logs.serve.push(line);
  for (const w of logWaiters.splice(0)) w();
}
function countLines(re) {
  return logs.serve.filter((l) => re.test(l)).length;
}
// Resolves once the serve log has `n` lines matching `re`.
function serveLogged(re, n, what) {
  return bounded(
    new Promise((resolve) => {
      const wait = () => (countLines(re) >= n ? resolve() : logWaiters.push(wait));
      wait();
    }),
    what,
  );
}
const browserScript = path.join(work, "browser.sh");
fs.writeFileSync(
  browserScript,
  `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} -e 'fetch(process.argv[1], { method: "POST", body: process.argv[2] })' ` +
    `${JSON.stringify(`http://127.0.0.1:${mcpPort}/test/browser`)} "$1"\n`,
);
fs.chmodSync(browserScript, 0o755);
const env = { ...process.env, RUST_LOG: "info,mcpmux=debug", BROWSER: browserScript };
const serve = spawn(bin, ["serve", "--config", cfgPath], { env, stdio: ["ignore", "pipe", "pipe"] });
readline.createInterface({ input: serve.stderr }).on("line", onServeLog);
const mcpmuxUrl = await bounded(
  new Promise((resolve, reject) => {
    readline.createInterface({ input: serve.stdout }).on("line", (l) => {
      const m = /^mcpmux listening on (\S+)/.exec(l);
      if (m) resolve(m[1]);
    });
    serve.on("exit", (c) => reject(new Failure(`mcpmux serve exited (${c})`)));
  }),
  "mcpmux to listen",
);
const base = mcpmuxUrl.replace(/\/mcp$/, "");

// A browser that approves: follows redirects by hand, keeping cookies, until mcpmux's
// loopback callback has answered.
async function approve(url) {
  const jar = new Map();
  for (let hops = 0; hops < 20; hops++) {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const r = await fetch(url, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const c of r.headers.getSetCookie()) {
      const [kv] = c.split(";");
      const i = kv.indexOf("=");
      jar.set(kv.slice(0, i), kv.slice(i + 1));
    }
    const loc = r.headers.get("location");
    if (r.status >= 300 && r.status < 400 && loc) {
      url = new URL(loc, url).toString();
      continue;
    }
    const body = await r.text();
    check(r.ok && /logged in/.test(body), `the browser ended at ${url} with HTTP ${r.status}: ${body.slice(0, 300)}`);
    return;
  }
  throw new Failure("too many redirects");
}

// `mcpmux login up --no-browser`, approved headlessly.
async function login() {
  const p = spawn(bin, ["login", "up", "--no-browser", "--config", cfgPath], { env, stdio: ["ignore", "pipe", "pipe"] });
  readline.createInterface({ input: p.stderr }).on("line", (l) => logs.login.push(l));
  const exited = new Promise((resolve) => p.on("exit", (c) => resolve(c)));
  const url = await bounded(
    new Promise((resolve) => readline.createInterface({ input: p.stdout }).on("line", (l) => {
      logs.login.push(l);
      if (/^https?:\/\//.test(l)) resolve(l);
    })),
    "mcpmux login to print the URL",
  );
  check(url.startsWith(`${issuer}/auth?`) && url.includes("code_challenge_method=S256") && url.includes("resource="), `odd authorization URL ${url}`);
  await approve(url);
  const code = await bounded(exited, "mcpmux login to exit");
  check(code === 0, `mcpmux login exited ${code}: ${logs.login.join("\n")}`);
}

function grantFile() {
  const f = fs.readdirSync(store).find((n) => n.startsWith("grant_up-"));
  check(f, `no grant file in ${store}: ${fs.readdirSync(store)}`);
  return path.join(store, f);
}
const refreshTokens = new Set();
function storedGrant() {
  const g = JSON.parse(fs.readFileSync(grantFile(), "utf8"));
  if (g.refresh_token) refreshTokens.add(g.refresh_token);
  return g;
}

// ---- the clients -----------------------------------------------------------------------
const clients = [];
async function addClient(kind) {
  const c = new Client({ name: `e2e-${kind}-${clients.length}`, version: "1.0.0" });
  const me = { kind, client: c, updates: 0, waiters: [] };
  c.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
    if (n.params.uri !== URI) return;
    me.updates++;
    for (const w of me.waiters.splice(0)) w();
  });
  // The first HTTP client sends mcpmux a token of its own.
  const own = kind === "http" && clients.length === 0 ? { requestInit: { headers: { Authorization: `Bearer ${DOWNSTREAM_TOKEN}` } } } : {};
  const transport =
    kind === "http"
      ? new StreamableHTTPClientTransport(new URL(mcpmuxUrl), own)
      : new StdioClientTransport({ command: bin, args: ["connect", mcpmuxUrl], stderr: "pipe", env });
  if (kind === "connect") transport.stderr?.on("data", (d) => logs.connect.push(String(d)));
  await bounded(c.connect(transport), `${kind} client to connect`);
  clients.push(me);
  return me;
}
function updated(me, n) {
  return new Promise((resolve) => {
    const wait = () => (me.updates >= n ? resolve() : me.waiters.push(wait));
    wait();
  });
}
// One bump through client 0; every client must hear it.
async function bumpRound(what) {
  const want = clients.map((m) => m.updates + 1);
  const r = await clients[0].client.callTool({ name: "bump", arguments: {} });
  check(!r.isError, `bump failed (${what}): ${JSON.stringify(r)}`);
  await bounded(Promise.all(clients.map((m, i) => updated(m, want[i]))), `every client to hear the bump (${what})`);
}

// Revokes the stored refresh token at the authorization server (RFC 7009), then calls on
// until the access token expires and the server refuses it; the call after that must
// name the command. Checks /status and /metrics; returns the client's error.
async function revokeUntilNeedsLogin() {
  const g = storedGrant();
  const rev = await fetch(`${issuer}/token/revocation`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: g.refresh_token, token_type_hint: "refresh_token", client_id: g.client.client_id }),
  });
  check(rev.ok, `revocation answered HTTP ${rev.status}`);
  const needsBefore = countLines(/upstream needs a login/);
  let named = null;
  // Bounded by time, not by a count of calls: how many calls the token's life allows
  // depends on how fast each one is.
  const until = Date.now() + STEP_MS + TOKEN_TTL * 1000;
  while (!named && Date.now() < until) {
    try {
      const r = await clients[1].client.callTool({ name: "noop", arguments: {} });
      if (r.isError && /mcpmux login up/.test(JSON.stringify(r))) named = JSON.stringify(r);
    } catch (e) {
      if (/mcpmux login up/.test(String(e))) named = String(e);
      else if (countLines(/upstream needs a login/) === needsBefore) {
        // The call that met the 401 fails on its own; wait for mcpmux to say why.
        await serveLogged(/upstream needs a login/, needsBefore + 1, "needs login after the revocation");
      }
    }
  }
  check(named, "no client error named `mcpmux login up`");
  const st = (await (await fetch(`${base}/status`)).json()).upstreams.find((u) => u.name === "up");
  check(st.state === "needs login", `status after revocation: ${JSON.stringify(st)}`);
  const metrics = await (await fetch(`${base}/metrics`)).text();
  check(/mcpmux_upstream_needs_login\{upstream="up"\} 1/.test(metrics), "metrics do not show needs_login 1");
  return named.slice(0, 300);
}

let ok = false;
try {
  // 1. Needs login, then a headless login the daemon picks up.
  await serveLogged(/upstream needs a login/, 1, "mcpmux to say the server needs a login");
  const status = await (await fetch(`${base}/status`)).json();
  const up = status.upstreams.find((u) => u.name === "up");
  check(up.state === "needs login" && /mcpmux login up/.test(up.reason), `status: ${JSON.stringify(up)}`);
  step("serve shows needs login");
  await login();
  storedGrant();
  const mode = fs.statSync(grantFile()).mode & 0o777;
  check(mode === 0o600, `the token file has mode ${mode.toString(8)}`);
  await serveLogged(/upstream ready/, 1, "the daemon to pick up the login");
  step("logged in; the daemon picked the token up");

  // 2. Five clients share one upstream session and one subscription.
  for (const kind of ["http", "http", "http", "connect", "connect"]) {
    const me = await addClient(kind);
    await me.client.subscribeResource({ uri: URI });
  }
  await bumpRound("five clients");
  check(stats.initializes === 1, `upstream sessions: ${stats.initializes}`);
  check(stats.subscribes === 1, `upstream subscribes: ${stats.subscribes}`);
  report.shared = { initializes: stats.initializes, subscribes: stats.subscribes };
  step("five clients, one upstream session, one subscription");

  // 3. Short-lived tokens are refreshed while the clients work; nobody sees an error.
  const refreshed = () => countLines(/access token refreshed/);
  const tokensBefore = stats.tokens.size;
  for (let round = 1; round <= 2; round++) {
    await serveLogged(/access token refreshed/, round, `refresh ${round}`);
    storedGrant();
    await bumpRound(`after refresh ${round}`);
  }
  check(stats.tokens.size > tokensBefore, "the server never saw a new access token");
  check(stats.initializes === 1, `a refresh started a new upstream session: ${stats.initializes}`);
  check(refreshTokens.size >= 2, "the refresh token was never rotated");
  report.refresh = { refreshes: refreshed(), accessTokens: stats.tokens.size, refreshTokens: refreshTokens.size };
  step("tokens refreshed (and rotated) with no client error");

  // 4. The refresh token revoked: needs login, clients told which command to run.
  report.needsLoginError = await revokeUntilNeedsLogin();
  step("revoked: needs login in status and metrics, clients told `mcpmux login up`");

  // 5. Log in again: served again, subscription back.
  const readyBefore = countLines(/upstream ready/);
  await login();
  await serveLogged(/upstream ready/, readyBefore + 1, "the daemon to pick up the new login");
  await nextSeen(() => stats.subscribes >= 2, "the subscription to be taken again").catch((e) => {
    if (stats.subscribes < 2) throw e;
  });
  await bumpRound("after the new login");
  report.after = { initializes: stats.initializes, subscribes: stats.subscribes };
  step("logged in again: served, subscription back");

  // 5b. The status page's link: refused while the server is up; after another
  // revocation it makes the daemon open the browser, and that login serves again.
  const busy = await fetch(`${base}/login/up`, { method: "POST" });
  check(busy.status === 409, `POST /login/up while up answered ${busy.status}`);
  const page = await (await fetch(`${base}/`)).text();
  check(page.includes('fetch("login/"'), "the status page has no login link");
  await revokeUntilNeedsLogin();
  const readyBefore2 = countLines(/upstream ready/);
  const asked = await fetch(`${base}/login/up`, { method: "POST" });
  check(asked.status === 202, `POST /login/up answered ${asked.status}: ${await asked.text()}`);
  const opened = await bounded(browserUrl, "the daemon to open the browser");
  await approve(opened);
  await serveLogged(/upstream ready/, readyBefore2 + 1, "the daemon's own login to serve again");
  await nextSeen(() => stats.subscribes >= 3, "the subscription to be taken again").catch((e) => {
    if (stats.subscribes < 3) throw e;
  });
  await bumpRound("after the status page's login");
  report.link = { subscribes: stats.subscribes };
  step("the status page's link: browser opened by the daemon, served again");

  // 6. No client's token upstream, and no token in any log line.
  const passed = [...stats.headers].filter((h) => h.includes(DOWNSTREAM_TOKEN));
  check(passed.length === 0, "a client's own token reached the server");
  storedGrant();
  const secrets = [...stats.tokens, ...refreshTokens];
  const lines = [...logs.serve, ...logs.login, ...logs.connect.join("").split("\n")];
  const leaks = lines.filter((l) => secrets.some((s) => l.includes(s)));
  check(leaks.length === 0, `tokens in logs:\n${leaks.slice(0, 3).join("\n")}`);
  report.searched = { lines: lines.length, secrets: secrets.length };
  step(`no token in ${lines.length} log lines (${secrets.length} tokens searched)`);
  ok = true;
} catch (e) {
  process.stderr.write(`oauth_e2e: FAILED: ${e instanceof Failure ? e.message : e?.stack || e}\n`);
  process.stderr.write(`--- authorization server ---\n${asLog.join("\n")}\n`);
  process.stderr.write(`--- mcpmux serve ---\n${logs.serve.slice(-150).join("\n")}\n--- mcpmux login ---\n${logs.login.join("\n")}\n`);
}
fs.writeFileSync(path.join(work, "mcpmux-serve.log"), logs.serve.join("\n") + "\n");
for (const m of clients) await m.client.close().catch(() => {});
const gone = new Promise((r) => serve.on("exit", r));
serve.kill("SIGTERM");
await bounded(gone, "mcpmux to exit", 10000).catch(() => serve.kill("SIGKILL"));
process.stdout.write(JSON.stringify({ ok, ...report }) + "\n");
process.exit(ok ? 0 : 1);
