#!/usr/bin/env python3
"""CPU per stateless request that `mcpmux serve` spends, by runtime worker count
(BENCHMARKS.md, "Runtime workers").

    python3 benches/serve_cpu.py MCPMUX SCRIPTED_UPSTREAM [CALLS] [--workers 1,2] [--rounds 3]
                                 [--listens N]

Starts the scripted upstream as a 2026-07-28 HTTP server, then for each round and each
worker count `MCPMUX serve --workers W` in front of it, warms it with 500 calls and
makes CALLS sequential stateless `tools/call echo` requests over one kept-alive
connection while `perf stat -p` counts mcpmux's task-clock and context switches. Only
mcpmux's process is counted, so the client and the upstream cost nothing here; the
latency column includes this Python client and is for comparing rows only. With
`--listens N`, N idle `subscriptions/listen` streams (raw sockets, as in
`listen_heap.py`) are open on mcpmux before the warm-up and stay open through the
calls: what a stateless request costs among many open clients. Needs `perf` (Debian:
linux-perf) with software events; N beyond about three quarters of the open-file limit
(`ulimit -n`) is more than mcpmux accepts.
"""
import argparse, http.client, json, os, re, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import listen_heap  # noqa: E402  (open_one: a listen over a raw socket)

HEADERS = {"Accept": "application/json, text/event-stream",
           "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
           "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}


def listening(p, prefix):
    """The URL `p` prints on its first line ("PREFIX listening on URL")."""
    line = p.stdout.readline()
    m = re.match(rf"{prefix} listening on (http://\S+)", line)
    if not m:
        raise SystemExit(f"unexpected first line: {line!r}")
    return m.group(1)


def calls(url, n):
    """`n` sequential echo calls; returns the mean milliseconds per call."""
    host, path = url.split("//", 1)[1].split("/", 1)
    name, port = host.split(":")
    conn = http.client.HTTPConnection(name, int(port))
    start = time.perf_counter()
    for i in range(n):
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hello"},
                                      "_meta": META}})
        conn.request("POST", "/" + path, body, HEADERS)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or b'"hello"' not in data:
            raise SystemExit(f"unexpected answer: {resp.status} {data[:200]!r}")
    conn.close()
    return (time.perf_counter() - start) / n * 1e3


def measure(mcpmux, upstream_url, workers, n, listens=0):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "mcpmux.toml")
        with open(cfg, "w") as f:
            f.write(f'[listen]\nhttp = "127.0.0.1:0"\n\n'
                    f'[limits]\nmax_clients = {listens + 1024}\nmax_connections = {listens + 4096}\n\n'
                    f'[servers.up]\nurl = {json.dumps(upstream_url)}\nprotocol = "modern"\n')
        p = subprocess.Popen([mcpmux, "serve", "--workers", str(workers), "--config", cfg],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        socks = []
        try:
            url = listening(p, "mcpmux")
            host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
            for _ in range(listens):
                listen_heap.open_one(host, int(port), "listen", socks)
            calls(url, 500)
            out = os.path.join(tmp, "perf")
            perf = subprocess.Popen(["perf", "stat", "-x,", "-o", out, "-e",
                                     "task-clock,context-switches", "-p", str(p.pid)])
            time.sleep(0.3)  # perf attached
            ms = calls(url, n)
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=30)
            stat = {}
            for line in open(out):
                f = line.strip().split(",")
                if len(f) > 2 and f[0].replace(".", "", 1).isdigit():
                    stat[f[2]] = float(f[0])
            return stat["task-clock"] * 1e3 / n, stat["context-switches"] / n, ms
        finally:
            for sock in socks:
                sock.close()
            p.kill()
            p.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description="CPU per stateless request of mcpmux serve")
    ap.add_argument("mcpmux")
    ap.add_argument("scripted")
    ap.add_argument("calls", nargs="?", type=int, default=10000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--listens", type=int, default=0)
    a = ap.parse_args()
    mcpmux, scripted, n, rounds = a.mcpmux, a.scripted, a.calls, a.rounds
    workers = [int(w) for w in a.workers.split(",")]
    up = subprocess.Popen([scripted, "--http", "127.0.0.1:0"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True,
                          env=dict(os.environ, SCRIPTED_ERA="modern"))
    try:
        upstream_url = listening(up, "scripted-upstream")
        among = f", {a.listens:,} idle listens open" if a.listens else ""
        print(f"{n:,} stateless `tools/call echo` per row{among}, rounds alternating\n")
        print("| round | workers | mcpmux CPU µs/call | context switches/call | client ms/call |")
        print("|---:|---:|---:|---:|---:|")
        for r in range(1, rounds + 1):
            for w in workers:
                cpu, cs, ms = measure(mcpmux, upstream_url, w, n, a.listens)
                print(f"| {r} | {w} | {cpu:.1f} | {cs:.2f} | {ms:.3f} |", flush=True)
    finally:
        up.kill()
        up.wait(timeout=30)


if __name__ == "__main__":
    main()
