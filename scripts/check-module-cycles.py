#!/usr/bin/env python3
"""No import circles among the top-level modules of a crate.

A crate's top-level modules are the `mod x;` items of its root (src/lib.rs, and
src/main.rs for a binary's own modules): the file src/x.rs or the directory src/x/.
An edge x -> y is any reference from code in x to y: `use crate::y::...`,
`crate::y::` in code, `super::y` that climbs to the crate root, or a crate-root
name that the root re-exports from y (`pub use y::Item;` makes `crate::Item` and
`super::Item` point at y). Comments and string literals are ignored, and so is
test-only code (an item under `#[cfg(test)]` or `#[cfg(all(test, ...))]`, a root
`mod` declared so): a shared test suite that is instantiated for every lock and
used by each lock's own tests sits above all of them by design. `--include-tests`
counts it too. The check fails (exit 1, printing each cycle) if the graph has a cycle.

Usage: check-module-cycles.py [CRATE_DIR ...] [--exclude CRATE_DIR ...] [--include-tests] [--graph]
With no CRATE_DIR every workspace member of the Cargo.toml beside scripts/ is checked.
`--exclude` drops crates from that default list (scripts/ci.sh passes its list
explicitly). `--graph` prints each crate's edges. Python 3 standard library only.
"""

import argparse
import re
import sys
import tomllib
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(src: str) -> str:
    """Blank out comments, string and char literals (keeps line structure)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and not re.match(r"\w", src[i - 1:i] or " "):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(' ""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


TEST_CFG = re.compile(r"#!?\[\s*cfg\s*\(\s*(test\s*\)|all\s*\(\s*(?:[^()]*,\s*)?test\s*[,)])")


def strip_test_items(src: str) -> str:
    """Remove every item or statement under a test-only `#[cfg(..)]` (after
    `strip_comments_and_strings`): the attribute, the attributes after it and the
    item up to its `;` or its closing brace. A file starting `#![cfg(test)]` is
    removed whole."""
    m = TEST_CFG.match(src.lstrip())
    if m and src.lstrip().startswith("#!"):
        return ""
    out, i = [], 0
    while True:
        m = TEST_CFG.search(src, i)
        if not m:
            out.append(src[i:])
            return "".join(out)
        out.append(src[i:m.start()])
        # The end of the attribute.
        j, depth = m.start() + 1, 0
        while j < len(src):
            if src[j] == "[":
                depth += 1
            elif src[j] == "]":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        j += 1
        # The item: up to a `;` or a `{...}` at depth 0 (further attributes included).
        depth = 0
        while j < len(src):
            ch = src[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                j += 1
                break
            elif depth == 0 and ch == "{":
                braces = 0
                while j < len(src):
                    if src[j] == "{":
                        braces += 1
                    elif src[j] == "}":
                        braces -= 1
                        if braces == 0:
                            break
                    j += 1
                j += 1
                break
            j += 1
        out.append("\n" * src.count("\n", m.start(), j))
        i = j


def split_top(s: str) -> list[str]:
    """Split a use-tree list at top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_use_tree(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
    """`a::{b, c::d as e}` -> [(path segments, alias or None), ...]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if m:
        head = [s for s in m.group(1).strip().rstrip(":").split("::") if s.strip()]
        head = [s.strip() for s in head]
        out = []
        for part in split_top(m.group(2)):
            out.extend(expand_use_tree(part, prefix + head))
        return out
    alias = None
    am = re.match(r"^(.*?)\s+as\s+(" + IDENT + r")$", tree)
    if am:
        tree, alias = am.group(1), am.group(2)
    segs = [s.strip() for s in tree.split("::") if s.strip()]
    return [(prefix + segs, alias)]


def resolve(segs: list[str], modpath: list[str]) -> list[str] | None:
    """Absolute path (from the crate root) of `segs` used in module `modpath`;
    None if it is not a crate-relative path (extern crate, std, local name)."""
    if not segs:
        return None
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] in ("self", "super"):
        cur = list(modpath)
        i = 0
        while i < len(segs) and segs[i] in ("self", "super"):
            if segs[i] == "super":
                if not cur:
                    return None
                cur.pop()
            i += 1
        return cur + segs[i:]
    return None


class Crate:
    def __init__(self, root: Path, include_tests: bool = False):
        self.root = root
        self.src = root / "src"
        self.include_tests = include_tests

    def read(self, f: Path) -> str:
        text = strip_comments_and_strings(f.read_text())
        return text if self.include_tests else strip_test_items(text)

    def roots(self) -> list[Path]:
        return [p for p in (self.src / "lib.rs", self.src / "main.rs") if p.is_file()]

    @staticmethod
    def declared_mods(text: str) -> list[str]:
        return re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text, re.M)

    def module_files(self, name: str) -> list[Path]:
        files = []
        f = self.src / f"{name}.rs"
        if f.is_file():
            files.append(f)
        d = self.src / name
        if d.is_dir():
            files.extend(sorted(d.rglob("*.rs")))
        return files

    def modpath_of(self, f: Path) -> list[str]:
        rel = f.relative_to(self.src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod":
            parts.pop()
        return parts

    def graph(self) -> dict[str, dict[str, list[str]]]:
        """{root file: {module: sorted list of modules it references}} per crate root."""
        graphs = {}
        for root_file in self.roots():
            root_text = self.read(root_file)
            mods = [m for m in self.declared_mods(root_text) if self.module_files(m)]
            modset = set(mods)
            # Crate-root names that the root re-exports from a module.
            reexport = {}
            for tree in re.findall(r"\buse\s+([^;]+);", root_text):
                for segs, alias in expand_use_tree(tree, []):
                    absp = resolve(segs, []) if segs[0] in ("crate", "self", "super") else segs
                    if absp and absp[0] in modset and len(absp) > 1 and absp[-1] not in ("*", "self"):
                        reexport[alias or absp[-1]] = absp[0]
            # Inline root modules (`pub mod loom_hooks { pub use crate::sync::... }`) are
            # part of the root, not nodes.
            edges = {m: set() for m in mods}
            for m in mods:
                for f in self.module_files(m):
                    text = self.read(f)
                    modpath = self.modpath_of(f)
                    paths = []
                    for tree in re.findall(r"\buse\s+([^;]+);", text):
                        paths.extend(s for s, _ in expand_use_tree(tree, []))
                    for mm in re.finditer(r"\b(crate|super|self)((?:\s*::\s*(?:" + IDENT + r"))+)", text):
                        segs = [mm.group(1)] + [s.strip() for s in mm.group(2).split("::") if s.strip()]
                        paths.append(segs)
                    for segs in paths:
                        absp = resolve(segs, modpath)
                        if not absp:
                            continue
                        first = absp[0]
                        target = first if first in modset else reexport.get(first)
                        if target and target != m:
                            edges[m].add(target)
            graphs[root_file.name] = {m: sorted(e) for m, e in edges.items()}
        return graphs


def find_cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                strong(w)
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
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    cycles = []
    for comp in sccs:
        # A shortest cycle through the component's first module (BFS inside it).
        start, inside = comp[0], set(comp)
        prev, queue, found = {start: None}, [start], None
        while queue and not found:
            nxt = []
            for v in queue:
                for w in edges[v]:
                    if w == start:
                        found = v
                        break
                    if w in inside and w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found:
                    break
            queue = nxt
        path, v = [], found
        while v is not None:
            path.append(v)
            v = prev[v]
        cycle = list(reversed(path)) + [start]
        cycles.append((comp, cycle))
    return cycles


def workspace_members(ws: Path) -> list[Path]:
    cfg = tomllib.loads((ws / "Cargo.toml").read_text())
    members = []
    for pat in cfg.get("workspace", {}).get("members", []):
        members.extend(sorted(p for p in ws.glob(pat) if (p / "Cargo.toml").is_file()))
    return members


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("crates", nargs="*", type=Path, help="crate directories (default: every workspace member)")
    ap.add_argument("--exclude", action="append", type=Path, default=[], metavar="CRATE_DIR",
                    help="leave this crate out of the default list (repeatable)")
    ap.add_argument("--include-tests", action="store_true",
                    help="count test-only code (#[cfg(test)] items and modules) as well")
    ap.add_argument("--graph", action="store_true", help="print every crate's module edges")
    args = ap.parse_args()
    ws = Path(__file__).resolve().parent.parent
    crates = args.crates or workspace_members(ws)
    excluded = {p.resolve() for p in args.exclude}
    crates = [c for c in crates if c.resolve() not in excluded]
    failed = False
    for c in crates:
        crate = Crate(c, args.include_tests)
        if not crate.src.is_dir():
            print(f"{c}: no src/ directory", file=sys.stderr)
            return 2
        for root_name, edges in crate.graph().items():
            label = f"{c} ({root_name})"
            if args.graph:
                for m, targets in edges.items():
                    print(f"{label}: {m} -> {', '.join(targets) or '-'}")
            cycles = find_cycles(edges)
            for comp, cycle in cycles:
                failed = True
                print(f"{label}: import cycle: {' -> '.join(cycle)}  (modules in the circle: {', '.join(comp)})")
            if not cycles:
                print(f"{label}: {len(edges)} modules, no import cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
