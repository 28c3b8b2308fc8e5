#!/usr/bin/env python3
"""Fails when two files under a crate's src/ import each other, directly or around a
circle (issue 19: no import circles in runtime/src). A file imports another when it names
a path into it (`crate::a::b::X`, `super::x::Y`) outside comments and outside its
`#[cfg(test)] mod tests`; a path names the deepest module file it reaches. Prints each
circle with its edges.

Usage: import-circles.py runtime/src
"""
import os
import re
import sys


def modules(root):
    files = {}
    for d, _, names in os.walk(root):
        for f in names:
            if f.endswith(".rs"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib"):
                    rel = rel[:-1]
                files[tuple(rel)] = path
    return files


def edges_of(files):
    def resolve(parts):
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in files:
                return tuple(parts[:n])
        return None

    path_re = re.compile(r"\b(crate|super(?:::super)*)((?:::\w+)+)")
    edges = {m: set() for m in files}
    for module, path in files.items():
        src = open(path, encoding="utf-8").read()
        tests = re.search(r"#\[cfg\(test\)\]\s*mod tests", src)
        if tests:
            src = src[: tests.start()]
        src = "\n".join(l for l in src.split("\n") if not l.strip().startswith("//"))
        is_mod_file = path.endswith("mod.rs") or path.endswith("lib.rs")
        for m in path_re.finditer(src):
            head, rest = m.group(1), m.group(2).split("::")[1:]
            if head == "crate":
                parts = rest
            else:
                base = list(module) if is_mod_file else list(module[:-1])
                ups = head.count("super") - 1
                parts = base[: len(base) - ups] + rest if ups else base + rest
            target = resolve(parts)
            if target and target != module:
                edges[module].add(target)
    return edges


def circles(edges):
    sys.setrecursionlimit(10000)
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in edges:
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1]
    files = modules(root)
    edges = edges_of(files)
    found = circles(edges)
    name = lambda m: "/".join(m) or "lib"
    print(f"{root}: {len(files)} files, {len(found)} import circles")
    for component in found:
        print("circle: " + " <-> ".join(sorted(name(m) for m in component)))
        for a in component:
            for b in sorted(edges[a]):
                if b in component:
                    print(f"    {name(a)} -> {name(b)}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
