#!/usr/bin/env python3
"""Fails (exit 1) on an import cycle between the crate's top-level modules
(src/X.rs or src/X/), or between the modules of one folder. An import is any
`crate::X` (or, inside a folder, `super::Y`) path in non-test code."""
import pathlib, re, sys

src = pathlib.Path(__file__).resolve().parent.parent / "src"

def code_of(path):
    text = path.read_text()
    # unit tests may reach anywhere; only the shipped code must layer
    cut = text.find("#[cfg(test)]")
    return text if cut < 0 else text[:cut]

def top_of(path):
    rel = path.relative_to(src)
    return rel.parts[0].removesuffix(".rs")

def find_cycle(graph):
    state, stack = {}, []
    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None
    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None

files = [p for p in src.rglob("*.rs") if p.name not in ("lib.rs", "main.rs")]
top = {}
folders = {}
for p in files:
    t = top_of(p)
    code = code_of(p)
    deps = {m for m in re.findall(r"crate::([a-z_]+)", code) if m != t}
    top.setdefault(t, set()).update(deps)
    if len(p.relative_to(src).parts) == 2 and p.name != "mod.rs":
        inner = {m for m in re.findall(r"super::([a-z_]+)", code)}
        inner |= {m for m in re.findall(rf"crate::{t}::([a-z_]+)", code)}
        folders.setdefault(t, {}).setdefault(p.stem, set()).update(inner - {p.stem})

failed = False
cycle = find_cycle(top)
if cycle:
    print("import cycle between top-level modules: " + " -> ".join(cycle))
    failed = True
for folder, graph in sorted(folders.items()):
    cycle = find_cycle(graph)
    if cycle:
        print(f"import cycle inside {folder}/: " + " -> ".join(cycle))
        failed = True
for name, deps in sorted(top.items()):
    print(f"{name}: {', '.join(sorted(deps)) or '-'}")
sys.exit(1 if failed else 0)
