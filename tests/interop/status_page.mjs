#!/usr/bin/env node
// Drives mcpmux's live status page (GET /) in a real headless Chromium through
// puppeteer-core (pinned in package.json; the browser is the system's `chromium`
// package, installed by .ci/run). Used by tests/status_page.rs.
//
//   node status_page.mjs --url http://127.0.0.1:PORT/mcp --uri URI
//                        [--chromium /usr/bin/chromium] [--screenshot FILE]
//
// Loads the page, waits for the first upstream to show as up, then opens an MCP
// session (plain fetch), subscribes to URI and measures how long the page takes to
// show the URI with 1 holder; then ends the session (DELETE) and measures how long the
// row takes to go. Prints one JSON line:
//   {"upstreamUp": true, "appearMs": N, "disappearMs": N, "consoleErrors": [...]}
// Exits non-zero (with the reason on stderr) when a step does not happen within 10 s.
import puppeteer from "puppeteer-core";

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}
const mcpUrl = arg("url");
const uri = arg("uri", "test://static/1");
const chromium = arg("chromium", process.env.CHROMIUM || "/usr/bin/chromium");
const screenshot = arg("screenshot");
if (!mcpUrl) {
  process.stderr.write("usage: node status_page.mjs --url URL [--uri URI]\n");
  process.exit(2);
}
const base = new URL("/", mcpUrl).href;

async function rpc(session, body) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (session) {
    headers["mcp-session-id"] = session;
    headers["mcp-protocol-version"] = "2025-11-25";
  }
  const resp = await fetch(mcpUrl, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await resp.text();
  return { resp, text };
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const consoleErrors = [];
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 760 });
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(base, { waitUntil: "load" });
  await page.waitForFunction(
    () => [...document.querySelectorAll("#upstreams td")].some((td) => td.classList.contains("up")),
    { timeout: 10000 },
  );

  const init = await rpc(null, {
    jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "status-page-test", version: "0" } },
  });
  const session = init.resp.headers.get("mcp-session-id");
  await rpc(session, { jsonrpc: "2.0", method: "notifications/initialized" });
  const t0 = Date.now();
  await rpc(session, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } });
  const holders = (want) => page.waitForFunction(
    (u, n) => {
      const rows = [...document.querySelectorAll("#uris tr")];
      const row = rows.find((r) => r.cells[0] && r.cells[0].textContent === u);
      return n === 0 ? !row : row && row.cells[1].textContent === String(n);
    },
    { timeout: 10000 }, uri, want,
  );
  await holders(1);
  const appearMs = Date.now() - t0;
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  const t1 = Date.now();
  await fetch(mcpUrl, { method: "DELETE", headers: { "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" } });
  await holders(0);
  const disappearMs = Date.now() - t1;
  console.log(JSON.stringify({ upstreamUp: true, appearMs, disappearMs, consoleErrors }));
} catch (e) {
  process.stderr.write(`status_page.mjs: ${e && e.stack ? e.stack : e}\nconsole errors: ${JSON.stringify(consoleErrors)}\n`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
