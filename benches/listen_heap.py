#!/usr/bin/env python3
"""Where the memory of an idle 2026-07-28 listen goes (BENCHMARKS.md, "Idle listens").

    python3 benches/listen_heap.py MCPMUX SCRIPTED_UPSTREAM [N] [--heaptrack]

Starts `MCPMUX serve` on a config with the scripted upstream (2026-07-28 era), opens 20
warm-up connections, then N more, each one of three kinds (raw sockets, so the client
costs nothing on mcpmux's side): `connect` (accepted, no request), `discover` (one
stateless `server/discover` answered, connection kept alive) and `listen` (one
`subscriptions/listen` acknowledged, stream open). Prints the RSS each adds per
connection. With --heaptrack (MCPMUX built with `--no-default-features`, so the system
malloc that heaptrack sees), runs the listen kind under heaptrack and prints every
allocation site live at the peak with at least N/3 calls, as bytes per listen (divided
by the listens live at that moment), with the frames that say whose it is.
"""
import json, os, re, socket, subprocess, sys, tempfile, time

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}


def request(host, port, method, params):
    params = dict(params, _meta=META)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: {method}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body


def open_one(host, port, kind, socks):
    s = socket.create_connection((host, port))
    socks.append(s)
    if kind == "connect":
        return
    if kind == "discover":
        s.sendall(request(host, port, "server/discover", {}))
    else:
        s.sendall(request(host, port, "subscriptions/listen",
                          {"notifications": {"resourceSubscriptions": ["test://r/1"]}}))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit(f"{kind}: connection closed early: {data[:200]!r}")
        data += chunk
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            continue
        if kind == "listen" and b"\n\n" in rest:  # the acknowledgement event
            return
        length = re.search(rb"content-length: (\d+)", head, re.I)
        if kind == "discover" and length and len(rest) >= int(length.group(1)):
            return


def run(cmd, scripted, n, kind):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "mcpmux.toml")
        with open(cfg, "w") as f:
            f.write(f'[listen]\nhttp = "127.0.0.1:0"\n[limits]\nmax_clients = {n + 100}\n'
                    f'max_connections = {n + 100}\n[servers.scripted]\ncommand = {json.dumps(scripted)}\n'
                    'env = { SCRIPTED_RESOURCES = "200", SCRIPTED_ERA = "modern" }\n')
        p = subprocess.Popen(cmd + ["serve", "--config", cfg], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        try:
            while True:
                line = p.stdout.readline()
                if not line:
                    raise SystemExit("mcpmux exited before it was ready")
                m = re.search(r"127\.0\.0\.1:(\d+)", line)
                if m:
                    break
            host, port = "127.0.0.1", int(m.group(1))
            # Under heaptrack, p is heaptrack's shell: RSS is not measured there.
            measure = cmd[0] != "heaptrack"
            socks = []
            for _ in range(20):
                open_one(host, port, kind, socks)
            time.sleep(0.5)
            before = rss(p.pid) if measure else 0
            for _ in range(n):
                open_one(host, port, kind, socks)
            time.sleep(0.5)
            return (rss(p.pid) - before) / n if measure else 0.0
        finally:
            if measure:
                p.kill()
            else:  # stop mcpmux (it flushes heaptrack's buffer as it exits); the peak stays
                subprocess.run(["pkill", "-TERM", "-P", str(p.pid)], check=False)
            p.wait(timeout=120)


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS")


def heap_report(trace, n):
    out = subprocess.run(["heaptrack_print", "-f", trace, "--print-peaks", "1",
                          "--print-allocators", "0", "--print-temporary", "0", "--print-leaks", "0",
                          # (no --print-histogram: its argument is a file to write to)
                          "-n", "80"], capture_output=True, text=True).stdout
    lines = out.split("\n")
    sites, i = [], 0
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
    while i < len(lines):
        m = re.match(r"^\s*([\d.]+)([KMG]?) consumed over (\d+) calls from:", lines[i])
        i += 1
        if not m:
            continue
        frames = []
        while i < len(lines) and lines[i].startswith("    "):
            f = lines[i].strip()
            if not f.startswith(("at ", "in ")):
                frames.append(re.sub(r"::h[0-9a-f]{16}$", "", f))
            i += 1
        size, calls = float(m.group(1)) * scale[m.group(2)], int(m.group(3))
        if calls >= n // 3:
            sites.append((size, calls, frames))
    # The connections live at the peak: the most-called site is one per connection.
    live = max((c for _, c, _ in sites), default=1)
    sites = [(size / live, calls, frames) for size, calls, frames in sites]
    print(f"{live:,} listens live at the peak (of {n:,} opened)\n")
    total = 0.0
    print("| bytes / listen | allocations | allocated in | whose |\n|---:|---:|---|---|")
    for per, calls, frames in sorted(sites, key=lambda s: -s[0]):
        total += per
        named = [f for f in frames if not f.startswith("0x")]
        whose = [f for f in named if f.startswith(("mcpmux::", "hyper::", "hyper_util::", "axum"))][:2]
        print(f"| {per:,.0f} | {calls:,} | `{named[0][:70] if named else frames[0]}` | {'; '.join(f'`{w[:80]}`' for w in whose)} |")
    print(f"| **{total:,.0f}** | | total of the sites above | |")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mcpmux, scripted = args[0], args[1]
    n = int(args[2]) if len(args) > 2 else 3000
    if "--heaptrack" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "listen")
            run(["heaptrack", "-o", out, mcpmux], scripted, n, "listen")
            time.sleep(1)
            trace = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("listen"))
            heap_report(trace, n)
        return
    print("| connection | RSS added per connection, bytes |\n|---|---:|")
    for kind in ("connect", "discover", "listen"):
        print(f"| {kind} | {run([mcpmux], scripted, n, kind):,.0f} |")


if __name__ == "__main__":
    main()
