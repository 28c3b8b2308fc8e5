#!/usr/bin/env python3
"""Fails when two files under a crate's src/ import each other, directly or around a
circle (issue 19: no import circles in runtime/src; issue 30: nor in macros/src and src).
A file imports another when it names a path into it (`crate::a::b::X`, `super::x::Y`)
outside comments and outside its `#[cfg(test)] mod tests`; a path names the deepest module
file it reaches. `crate::` is read in the crate the file belongs to: the library
(`lib.rs`), or a binary (`main.rs`, `bin/<name>/main.rs`, `bin/<name>.rs`), each checked
on its own. Prints each circle with its edges.

Usage: import-circles.py runtime/src [macros/src src ...]
"""
import os
import re
import sys


def crate_of(rel):
    """The crate a file belongs to (its folder's prefix, e.g. `bin/async-exec`), and the
    file's module path in it."""
    if rel == ["main"]:  # src/main.rs beside src/lib.rs: a crate of its own
        return ("main.rs",), ()
    if len(rel) >= 2 and rel[0] == "bin":
        if len(rel) == 2:  # bin/<name>.rs: a binary of one file
            return ("bin", rel[1]), ()
        return ("bin", rel[1]), tuple(rel[2:])
    return (), tuple(rel)


def crates(root):
    """Each crate under `root`: its files, by module path."""
    found = {}
    for d, _, names in os.walk(root):
        for f in names:
            if f.endswith(".rs"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                crate, module = crate_of(rel)
                if module[-1:] == ("mod",) or module in (("lib",), ("main",)):
                    module = module[:-1]
                found.setdefault(crate, {})[module] = path
    return found


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
        is_mod_file = os.path.basename(path) == "mod.rs" or not module
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


def check(root):
    """Prints the circles of each crate under `root`; the number found."""
    total = 0
    for crate, files in sorted(crates(root).items()):
        edges = edges_of(files)
        found = circles(edges)
        total += len(found)
        here = os.path.join(root, *crate)
        root_name = "main" if crate else "lib"
        name = lambda m: "/".join(m) or root_name
        print(f"{here}: {len(files)} files, {len(found)} import circles")
        for component in found:
            print("circle: " + " <-> ".join(sorted(name(m) for m in component)))
            for a in component:
                for b in sorted(edges[a]):
                    if b in component:
                        print(f"    {name(a)} -> {name(b)}")
    return total


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    found = sum(check(root) for root in sys.argv[1:])
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
