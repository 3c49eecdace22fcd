#!/usr/bin/env python3
"""What the fan-out burst's upstream costs on its own (BENCHMARKS.md, "The CPU budget
of a burst").

    python3 benches/upstream_emit.py SCRIPTED_UPSTREAM [--updates 20000] [--rounds 5]

Starts the scripted upstream over stdio, subscribes to the URI `loadgen fanout` uses,
then for each round calls `emit_updates {count, stamp: true}` (the burst's own call)
and reads the server's output in large chunks until the call's result arrives: the
reader costs next to nothing, so the time is the upstream's making and writing of the
updates. `perf stat -p` is not needed: the upstream's CPU in a round is read from
`/proc/PID/stat` before and after (10 ms ticks: use bursts of 20,000 or more).
"""
import argparse, json, os, statistics, subprocess, time

URI = "test://static/1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scripted")
    ap.add_argument("--updates", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    p = subprocess.Popen([a.scripted], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    fd = p.stdout.fileno()

    def send(msg):
        p.stdin.write((json.dumps(msg) + "\n").encode())

    def read_until(marker):
        tail, lines = b"", 0
        while marker not in tail:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise SystemExit("upstream_emit: the upstream closed its output")
            lines += chunk.count(b"\n")
            tail = tail[-len(marker):] + chunk
        return lines

    def cpu_seconds():
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "upstream_emit", "version": "1"}}})
    read_until(b'"id":1,')
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": URI}})
    read_until(b'"id":2,')
    walls, cpus = [], []
    for r in range(a.rounds):
        rid = 100 + r
        cpu0, t = cpu_seconds(), time.perf_counter()
        send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
              "params": {"name": "emit_updates",
                         "arguments": {"uri": URI, "count": a.updates, "stamp": True}}})
        lines = read_until(b'"id":%d,' % rid)
        wall, cpu = time.perf_counter() - t, cpu_seconds() - cpu0
        if lines < a.updates:
            raise SystemExit(f"upstream_emit: {lines} lines for {a.updates} updates")
        walls.append(wall * 1e6 / a.updates)
        cpus.append(cpu * 1e6 / a.updates)
        print(f"round {r + 1}: {a.updates} updates in {wall * 1e3:.1f} ms: "
              f"{walls[-1]:.2f} µs of wall and {cpus[-1]:.2f} µs of the upstream's CPU per update")
    print(f"median: {statistics.median(walls):.2f} µs of wall, "
          f"{statistics.median(cpus):.2f} µs of CPU per update")
    p.kill()


if __name__ == "__main__":
    main()
