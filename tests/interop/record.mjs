#!/usr/bin/env node
// Recording wrapper for a stdio MCP server, usable as an mcpmux upstream command:
//
//   node record.mjs <logfile> -- <cmd> [args...]
//
// - Spawns <cmd>; our stdin is forwarded to the child's stdin byte-for-byte (each chunk as
//   soon as it arrives), the child's stdout and stderr are inherited (so they reach our
//   parent unchanged and unbuffered).
// - Every complete line the CLIENT sends (stdin -> child) is appended to <logfile>, one
//   line each, synchronously (appendFileSync) and BEFORE it is forwarded to the child. So
//   once the client has seen a response to a request, that request is already in the log.
//   Empty lines are not logged; a trailing "\r" is stripped from the logged copy only.
// - When our stdin closes, the child's stdin is closed; a child that does not exit by
//   itself (server-everything keeps running while its update timer is on) gets SIGTERM
//   after 1.5 s and SIGKILL after 4 s.
// - SIGTERM / SIGINT / SIGHUP are forwarded to the child. We exit with the child's exit
//   code (128 + signal number if it was killed by a signal).
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { constants as osConstants } from "node:os";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (argv.length < 3 || sep !== 1 || sep === argv.length - 1) {
  process.stderr.write("usage: node record.mjs <logfile> -- <cmd> [args...]\n");
  process.exit(2);
}
const logfile = argv[0];
const [cmd, ...cmdArgs] = argv.slice(sep + 1);

// Make sure the file exists even if the client never sends anything.
appendFileSync(logfile, "");

const child = spawn(cmd, cmdArgs, { stdio: ["pipe", "inherit", "inherit"] });

let childExited = false;
child.on("error", (err) => {
  process.stderr.write(`record.mjs: cannot start ${cmd}: ${err.message}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  childExited = true;
  if (signal) {
    process.exit(128 + (osConstants.signals[signal] ?? 0));
  }
  process.exit(code ?? 0);
});

// A child that stops reading (or died) must not crash us with EPIPE.
child.stdin.on("error", () => {});

let pending = Buffer.alloc(0);
function logLines(chunk) {
  pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
  let start = 0;
  for (;;) {
    const nl = pending.indexOf(0x0a, start);
    if (nl === -1) break;
    let line = pending.subarray(start, nl).toString("utf8");
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (line.length > 0) appendFileSync(logfile, line + "\n");
    start = nl + 1;
  }
  pending = start === 0 ? pending : Buffer.from(pending.subarray(start));
}

process.stdin.on("data", (chunk) => {
  logLines(chunk);
  if (!child.stdin.write(chunk)) {
    process.stdin.pause();
    child.stdin.once("drain", () => process.stdin.resume());
  }
});

process.stdin.on("end", () => {
  if (pending.length > 0) {
    // Unterminated last line: still log it, so nothing the client sent is missed.
    const line = pending.toString("utf8").replace(/\r$/, "");
    if (line.length > 0) appendFileSync(logfile, line + "\n");
    pending = Buffer.alloc(0);
  }
  child.stdin.end();
  setTimeout(() => {
    if (!childExited) child.kill("SIGTERM");
  }, 1500);
  setTimeout(() => {
    if (!childExited) child.kill("SIGKILL");
  }, 4000);
});

for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => {
    if (!childExited) child.kill(sig);
  });
}
