#!/usr/bin/env node
// Lists the tools of an MCP endpoint with the official TypeScript SDK client (Client +
// StreamableHTTPClientTransport), as any user's client would. Used by .ci/quickstart.sh
// against the README's quick start.
//
//   node list_tools.mjs <url> [--expect NAME] [--timeout-ms MS]
//
// An upstream may still be starting when mcpmux is ready (the example's server-everything
// comes through `npx`), so until NAME (default `echo`) is listed it asks again, each time
// on a new session, bounded by --timeout-ms (default 120000). Prints one JSON line
// `{"tools": [names…], "attempts": N}`; exit 0 when NAME is among them, else 1 with the
// reason on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const args = process.argv.slice(2);
const url = args[0];
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const expect = opt("--expect", "echo");
const timeoutMs = Number(opt("--timeout-ms", "120000"));
if (!url) {
  console.error("usage: node list_tools.mjs <url> [--expect NAME] [--timeout-ms MS]");
  process.exit(2);
}

const deadline = Date.now() + timeoutMs;
let names = [];
let attempts = 0;
let lastError = "";
while (Date.now() < deadline) {
  attempts += 1;
  const client = new Client({ name: "mcpmux-quickstart", version: "0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    names = [];
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      names.push(...page.tools.map((t) => t.name));
      cursor = page.nextCursor;
    } while (cursor);
    lastError = "";
  } catch (e) {
    lastError = String(e?.message ?? e);
  } finally {
    await client.close().catch(() => {});
  }
  if (names.includes(expect)) break;
  await new Promise((r) => setTimeout(r, 1000));
}
console.log(JSON.stringify({ tools: names, attempts }));
if (!names.includes(expect)) {
  console.error(
    `list_tools.mjs: no tool ${JSON.stringify(expect)} at ${url} within ${timeoutMs} ms ` +
      `(${attempts} attempts; last tools: ${JSON.stringify(names)}${lastError ? `; last error: ${lastError}` : ""})`,
  );
  process.exit(1);
}
