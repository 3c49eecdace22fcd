"""Finds circles among the files of one module folder (.ci/structure.sh, check 4).

A file `a.rs` depends on its sibling `b.rs` when its non-test code names `super::b`
(or, in a `mod.rs`, `self::b` / `b::`-qualified paths of a declared child are the
parent's own business and do not count). A circle (a → b → … → a) means neither file
can be read, tested or moved without the other. Prints each circle; exit 1 if any.
"""
import os
import re
import sys


def deps_of(path, siblings):
    text = open(path, encoding="utf-8").read()
    # Test modules at the end of a file do not count.
    text = re.split(r"#\[cfg\(test\)\]", text)[0]
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
    return {d for d in re.findall(r"super::(\w+)", text) if d in siblings}


def circles(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(root):
    found = False
    for folder, _, files in os.walk(root):
        names = {f[:-3]: os.path.join(folder, f) for f in files
                 if f.endswith(".rs") and f != "mod.rs" and "tests" not in f}
        graph = {n: deps_of(p, names) - {n} for n, p in names.items()}
        for c in circles(graph):
            found = True
            print(f"file_cycles.py: files in a circle under {folder}: {', '.join(c)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src"))
