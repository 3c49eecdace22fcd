#!/usr/bin/env node
// Runs a command against a private server-everything in streamableHttp mode, for checking
// the scenario scripts without mcpmux:
//
//   node direct.mjs -- <cmd> [args...]      ("{url}" in args is replaced by the server URL)
//
// Picks a free loopback port (bind to 0, read it, release it), starts
// `server-everything streamableHttp` with PORT set, waits for its "listening on port" line
// on stderr, runs the command, kills the server and exits with the command's code.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const everything = join(here, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");

const argv = process.argv.slice(2);
if (argv[0] !== "--" || argv.length < 2) {
  process.stderr.write("usage: node direct.mjs -- <cmd> [args...]   ({url} is replaced)\n");
  process.exit(2);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const port = await freePort();
const server = spawn(process.execPath, [everything, "streamableHttp"], {
  env: { ...process.env, PORT: String(port) },
  stdio: ["ignore", "ignore", "pipe"],
});
const kill = () => { if (server.exitCode === null) server.kill("SIGKILL"); };
process.on("exit", kill);
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

await new Promise((resolve, reject) => {
  let buf = "";
  const timer = setTimeout(() => reject(new Error("server-everything did not start in 15 s")), 15000);
  server.stderr.on("data", (d) => {
    buf += d;
    if (buf.includes("listening on port")) { clearTimeout(timer); resolve(); }
  });
  server.once("exit", (code) => { clearTimeout(timer); reject(new Error(`server-everything exited (${code}): ${buf}`)); });
}).catch((e) => { process.stderr.write(`direct.mjs: ${e.message}\n`); process.exit(1); });
server.stderr.resume();

const url = `http://127.0.0.1:${port}/mcp`;
const [cmd, ...args] = argv.slice(1).map((a) => a.replaceAll("{url}", url));
const child = spawn(cmd, args, { stdio: "inherit" });
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
