#!/usr/bin/env python3
"""Instructions per stateless request that `mcpmux serve` executes (BENCHMARKS.md,
"Instructions per stateless call").

    python3 benches/serve_instructions.py MCPMUX SCRIPTED_UPSTREAM [CALLS] [--top N] [--footprint]

Starts the scripted upstream as a 2026-07-28 HTTP server and `MCPMUX serve --workers 1`
in front of it under valgrind's callgrind, warms it with 300 calls, zeroes the counts,
makes CALLS (default 2,000) sequential stateless `tools/call echo` requests over one
kept-alive connection, and dumps the counts. Prints mcpmux's user-space instructions
per call and the N functions (default 25) with the most instructions of their own.
Unlike CPU time, the count does not move with the host: two builds compare exactly.
With `--footprint`, callgrind also dumps each instruction's count, and the script prints
the code a call runs: the distinct 64-byte lines of the instructions executed at least
once per two calls, in all and by function (what a cache left cold must fetch again).
Needs valgrind (Debian: valgrind); about a minute.
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_cpu  # noqa: E402  (listening, calls)


def self_costs(path):
    """Instructions by function (its own, not its callees'), from a callgrind file."""
    names, costs = {}, collections.Counter()
    cur, in_call = None, False
    for line in open(path, errors="replace"):
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            kind, ident, name = m.groups()
            if name:
                names[ident] = name
            if kind == "fn":
                cur = ident
            continue
        if line.startswith("calls="):
            in_call = True  # the next cost line is the callee's, inclusive
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            fields = line.split()
            if len(fields) >= 2:
                if not in_call:
                    costs[cur] += int(fields[1])
                in_call = False
    return {names.get(k, k): v for k, v in costs.items()}


def footprint(path, calls):
    """The 64-byte code lines of the instructions run at least once per two calls, by
    function, from a callgrind dump made with `--dump-instr=yes --dump-line=no`."""
    names, counts = {}, collections.defaultdict(collections.Counter)
    fn = ob = None
    last, in_call = 0, False
    for line in open(path, errors="replace"):
        m = re.match(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            kind, ident, name = m.groups()
            if name and kind.endswith("fn"):
                names[ident] = name
            if kind == "ob":
                ob = ident
            elif kind == "fn":
                fn = (ob, ident)
            continue
        if line.startswith("calls="):
            in_call = True
            continue
        fields = line.split()
        if len(fields) < 2 or not (line[:2] == "0x" or line[:1] in "+-*"):
            continue
        pos = fields[0]
        last = (int(pos, 16) if pos.startswith("0x") else last if pos == "*"
                else last + int(pos))
        if in_call:  # the call instruction's line: the callee's inclusive cost
            in_call = False
            continue
        counts[fn][last] += int(fields[1])
    total, by_fn = set(), collections.Counter()
    for (obj, ident), c in counts.items():
        lines = {(obj, addr >> 6) for addr, n in c.items() if 2 * n >= calls}
        total |= lines
        if lines:
            by_fn[names.get(ident, ident)] = len(lines)
    return len(total), by_fn


def main():
    ap = argparse.ArgumentParser(description="instructions per stateless call of mcpmux serve")
    ap.add_argument("mcpmux")
    ap.add_argument("scripted")
    ap.add_argument("calls", nargs="?", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--footprint", action="store_true")
    a = ap.parse_args()
    up = subprocess.Popen([a.scripted, "--http", "127.0.0.1:0"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True,
                          env=dict(os.environ, SCRIPTED_ERA="modern"))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            upstream_url = serve_cpu.listening(up, "scripted-upstream")
            cfg = os.path.join(tmp, "mcpmux.toml")
            with open(cfg, "w") as f:
                f.write(f'[listen]\nhttp = "127.0.0.1:0"\n\n'
                        f'[servers.up]\nurl = {json.dumps(upstream_url)}\nprotocol = "modern"\n')
            out = os.path.join(tmp, "callgrind.out")
            dump = ["--dump-instr=yes", "--dump-line=no"] if a.footprint else []
            p = subprocess.Popen(["valgrind", "--tool=callgrind", *dump,
                                  f"--callgrind-out-file={out}",
                                  a.mcpmux, "serve", "--workers", "1", "--config", cfg],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                url = serve_cpu.listening(p, "mcpmux")
                serve_cpu.calls(url, 300)
                subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                serve_cpu.calls(url, a.calls)
                subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            finally:
                p.kill()
                p.wait(timeout=30)
            dumps = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith("callgrind.out.")]
            if not dumps:
                raise SystemExit("callgrind wrote no dump")
            costs = self_costs(dumps[0])
            lines = footprint(dumps[0], a.calls) if a.footprint else None
        finally:
            up.kill()
            up.wait(timeout=30)
    total = sum(costs.values())
    print(f"{total / a.calls:,.0f} instructions per stateless `tools/call` "
          f"({total:,} over {a.calls:,} calls, user space, mcpmux's process)\n")
    print("| instructions per call | share | function (its own instructions) |")
    print("|---:|---:|---|")
    for name, c in sorted(costs.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| {c / a.calls:,.0f} | {100 * c / total:.1f} % | `{name[:120]}` |")
    if lines:
        n, by_fn = lines
        print(f"\n{n:,} lines of code (64 bytes, {n * 64 / 1024:,.0f} KiB) run per call, in "
              f"{len(by_fn):,} functions ({sum(1 for v in by_fn.values() if v > 10)} of "
              "more than ten lines)\n")
        print("| lines | function |")
        print("|---:|---|")
        for name, v in by_fn.most_common(a.top):
            print(f"| {v} | `{name[:120]}` |")


if __name__ == "__main__":
    main()
