#!/usr/bin/env python3
"""Prints the file-level import graph of a crate's library sources and fails on a cycle.

An edge A -> B means a file A names an item of file B by path (`use crate::x::y`,
`crate::x::y::z(...)`, `super::...`, `self::...` inside a `mod.rs`). Declarations (`mod x;`) are
not edges; re-exports in `lib.rs`/`mod.rs` are. Tests (`#[cfg(test)] mod tests { ... }` to the
end of a file, and files named `*tests.rs`) and comments are left out. Usage:

    scripts/import-graph.py crates/pagepipe/src [--graph]
"""
import os
import re
import sys


def module_path(root, path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main", "mod"):
        rel = rel[:-1]
    return rel


def resolve(root, mods, parts):
    """The file that holds the longest module prefix of `parts`."""
    for n in range(len(parts), -1, -1):
        key = tuple(parts[:n])
        if key in mods:
            return mods[key]
    return None


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"#\[cfg\((all\()?test[,)][^\n]*\]\s*(pub(\([a-z]+\))? )?mod \w+ \{", text)
    return text[: m.start()] if m else text


def main():
    root = sys.argv[1]
    files = []
    for d, _, names in os.walk(root):
        files += [os.path.join(d, n) for n in names if n.endswith(".rs")]
    files = [f for f in files if not f.endswith("tests.rs")]
    mods = {tuple(module_path(root, f)): f for f in files}
    edges = {f: set() for f in files}
    for f in files:
        me = module_path(root, f)
        is_mod = os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs")
        text = strip(open(f).read())
        # Expand `use a::{b, c::{d, e}}` groups one level at a time into paths.
        paths = []
        for m in re.finditer(r"\b(crate|super|self)(?=::)((?:::[A-Za-z_0-9]+)*)(::\{[^;]*?\})?", text):
            base = [m.group(1)] + [p for p in m.group(2).split("::") if p]
            group = m.group(3)
            if group:
                for item in re.split(r",", group[3:-1]):
                    item = item.strip().split(" as ")[0]
                    head = re.match(r"[A-Za-z_0-9]+(?:::[A-Za-z_0-9]+)*", item)
                    if head:
                        paths.append(base + head.group(0).split("::"))
            else:
                paths.append(base)
        # `use child::item` (2018 paths) in a lib.rs or mod.rs: relative to this module.
        # lib.rs or mod.rs: `use child::item` and `child::item` paths (2018 paths) name this
        # module's children.
        if is_mod:
            for m in re.finditer(r"(?<![:\w])([a-z_0-9]+)(?=::)((?:::[A-Za-z_0-9]+)*)", text):
                if tuple(me + [m.group(1)]) in mods:
                    base = ["self", m.group(1)] + [p for p in m.group(2).split("::") if p]
                    paths.append(base)
        for p in paths:
            if p[:2] == ["crate", "sys"]:
                continue  # the syscall crate (`use pagepipe_sys as sys`), not a file here
            if p[0] == "crate":
                parts = p[1:]
            else:
                parent = me if (p[0] == "self" and is_mod) else me[:-1] if p[0] == "super" or not is_mod else me
                if p[0] == "super" and is_mod:
                    parent = me[:-1]
                parts = parent + p[1:]
            target = resolve(root, mods, parts)
            if target and target != f:
                edges[f].add(target)
    if "--graph" in sys.argv:
        for f in sorted(edges):
            print(os.path.relpath(f, root), "->", ", ".join(sorted(os.path.relpath(t, root) for t in edges[f])))
    # Cycles: Tarjan's strongly connected components.
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    for c in sccs:
        print("import circle:", " <-> ".join(sorted(os.path.relpath(x, root) for x in c)))
    if sccs:
        sys.exit(1)
    print(f"{root}: {len(files)} files, no import circle")


main()
