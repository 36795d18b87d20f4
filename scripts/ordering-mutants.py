#!/usr/bin/env python3
"""Ordering mutants: is every memory ordering of the lock crates shown necessary?

For every atomic operation and fence in the non-test code of `numa-spin` and
`cst-mutex`, this tool weakens the memory ordering one step at a time (one
site per mutant), runs the crate's loom models (`tests/loom.rs`) against the
mutant, and reports each site as killed (a model failed: which one, and why),
survived (every model passed: a missing model, or an ordering stronger than
needed), timeout, or allowlisted (loom cannot judge it, with the reason).

    python3 scripts/ordering-mutants.py --crate numa-spin      # all numa-spin sites
    python3 scripts/ordering-mutants.py --crate all            # both crates
    python3 scripts/ordering-mutants.py --list                 # the sites only, no runs
    python3 scripts/ordering-mutants.py --crate cst-mutex --max-seconds 900 --shuffle 7
    python3 scripts/ordering-mutants.py --filter pass_headship --json out.json

Weakenings (VSync's "every barrier shown necessary", one step each):

    access / CAS success / fetch_update set order:
        AcqRel -> Acquire, AcqRel -> Release, Acquire -> Relaxed, Release -> Relaxed
    CAS failure / fetch_update fetch order (never Release or AcqRel):
        Acquire -> Relaxed
    fence:
        SeqCst -> AcqRel, AcqRel -> Acquire, AcqRel -> Release
        (a Relaxed fence does not exist; dropping fences is not an ordering mutant)

Sites the tool does not mutate, and why:

* `Relaxed` sites: nothing weaker exists (listed with `--list`, counted in the
  summary).
* SeqCst *accesses* (loads, stores, RMWs; not fences): loom models them as
  AcqRel (plus a little of the SC order between SC stores and loads), so a
  SeqCst -> AcqRel mutant cannot be told apart. Reported as "SeqCst access:
  needs a written argument"; the argument lives in the comment at the site.
  `--mutate-seqcst` mutates them anyway (SeqCst -> AcqRel / Acquire / Release)
  and marks the result "loom cannot distinguish" when it survives.
* Sites loom cannot see: atomics from `std` (an `Ordering` imported from
  `std::sync::atomic`, e.g. numa-spin's queue-node registry) and code compiled
  only outside loom (`#[cfg(not(numa_loom))]`). Each must be on the allowlist
  (`scripts/ordering-mutants.allow`, one `site-id = reason` per line) or it is
  reported as "unjudged" and fails the run.
* Code outside the scope: `#[cfg(test)]` items and modules (any cfg mentioning
  `test`), and items compiled only under loom (`#[cfg(numa_loom)]`: the test
  orchestration and loom parking-lot shims of `sync.rs`).

How a mutant is run, without touching the main working tree:

1. A temporary git worktree of HEAD is made under /tmp (removed on exit, on
   failure and on Ctrl-C), and the working tree's modified and untracked
   files are copied over it, so what is on disk is what is tested
   (`--overlay none`: HEAD as committed; `--overlay crates/numa-spin/tests`:
   HEAD plus those paths only).
2. The unmutated crate is built (`RUSTFLAGS="--cfg numa_loom" cargo test
   --release -p numa-spin -p cst-mutex --features numa-spin/loom,cst-mutex/loom
   --test loom --no-run`, the features if the crates declare them, and that
   crate's test binary is used; target dir `--target-dir`,
   default /tmp/mutants-target) and every loom model is run and timed one by
   one; a model that fails unmutated aborts the run.
3. Each mutant is written into the worktree copy, built, and the models run
   one at a time, fastest first, each with a timeout of
   max(--min-timeout, --timeout-factor x its unmutated time). The first
   failing model kills the mutant (`--all-tests`: run every model and list
   all that fail). A model that exceeds its timeout is reported "timeout":
   a hang, judged against the unmutated run's time.
4. The worktree file is restored after every mutant.

Options: `--crate numa-spin|cst-mutex|all`, `--list`, `--filter SUBSTR`,
`--exclude SUBSTR` (repeatable; leaves matching sites out)
(substring of the site id, `file:line`, or the function), `--max-seconds N`
(time box: mutants not started by then are reported "not run"),
`--shuffle SEED` (random mutant order, so time-boxed CI runs rotate through
the sites), `--json FILE` (machine-readable results, `-` for stdout, the
table then goes to stderr), `--preemptions N` (LOOM_MAX_PREEMPTIONS for the
models, default: the environment's, else 2), `--all-tests`,
`--overlay all|none|PATHS`, `--keep-worktree`, `--mutate-seqcst`, `--allowlist FILE`, `--verbose`.

Site ids are `crate:path:Type::fn:method#n` (the n-th call of `method` in that
function, counted from 1) and stay stable when lines move; `file:line` is shown
beside them.

Exit status: 0 if no mutant survived and every loom-invisible site is
allowlisted, 1 otherwise, 2 on a usage, build or baseline error. Only one cargo
runs at a time (the machine is shared); a full numa-spin run takes a few
minutes, cst-mutex longer (its slowest model dominates).

Needs python3 (3.8+), git and cargo; no Python packages.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CRATES = {"numa-spin": "crates/numa-spin", "cst-mutex": "crates/cst-mutex"}
ORDERINGS = ("Relaxed", "Acquire", "Release", "AcqRel", "SeqCst")
DEFAULT_ALLOWLIST = REPO / "scripts" / "ordering-mutants.allow"

# ---------------------------------------------------------------------------
# A small Rust lexer: enough to skip comments, strings and chars, and to see
# identifiers, punctuation and brackets with their positions.
# ---------------------------------------------------------------------------


@dataclass
class Tok:
    kind: str  # "ident", "punct", "lit"
    text: str
    start: int
    end: int
    line: int


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUM = re.compile(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?")
_PUNCT3 = ("..=", "...", "<<=", ">>=")
_PUNCT2 = ("::", "->", "=>", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=",
           "*=", "/=", "%=", "^=", "&=", "|=", "<<", ">>", "..")


def lex(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 300]) or c == "b" and re.match(r'br#*"', src[i:i + 300]):
            m = re.match(r'b?r(#*)"', src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            toks.append(Tok("lit", src[i:j], i, j, line))
            line += src.count("\n", i, j)
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            toks.append(Tok("lit", src[i:j], i, j, line))
            line += src.count("\n", i, j)
            i = j
        elif c == "'" or (c == "b" and src.startswith("b'", i)):
            # char literal or lifetime
            j = i + (2 if c == "b" else 1)
            m = re.match(r"(\\.[^']*|[^\\'])'", src[j:j + 12])
            if m:
                toks.append(Tok("lit", src[i:j + m.end()], i, j + m.end(), line))
                i = j + m.end()
            else:
                m = _IDENT.match(src, j)
                e = m.end() if m else j
                toks.append(Tok("lifetime", src[i:e], i, e, line))
                i = e
        elif _IDENT.match(src, i):
            m = _IDENT.match(src, i)
            toks.append(Tok("ident", m.group(), i, m.end(), line))
            i = m.end()
        elif c.isdigit():
            m = _NUM.match(src, i)
            toks.append(Tok("lit", m.group(), i, m.end(), line))
            i = m.end()
        else:
            for p in _PUNCT3 + _PUNCT2:
                if src.startswith(p, i):
                    toks.append(Tok("punct", p, i, i + len(p), line))
                    i += len(p)
                    break
            else:
                toks.append(Tok("punct", c, i, i + 1, line))
                i += 1
    return toks


OPEN = {"(": ")", "[": "]", "{": "}"}
CLOSE = {v: k for k, v in OPEN.items()}


def match_brackets(toks: list[Tok]) -> dict[int, int]:
    """Index of each bracket -> index of its partner."""
    pairs, stack = {}, []
    for k, t in enumerate(toks):
        if t.kind != "punct":
            continue
        if t.text in OPEN:
            stack.append(k)
        elif t.text in CLOSE:
            if stack:
                o = stack.pop()
                pairs[o], pairs[k] = k, o
    return pairs


# ---------------------------------------------------------------------------
# #[cfg(...)] regions: which tokens are compiled under loom, and outside it.
# ---------------------------------------------------------------------------


def eval_cfg(toks: list[Tok], i: int, j: int, loom: bool) -> bool:
    """Evaluates the cfg predicate toks[i:j]. `numa_loom` and feature `loom`
    are `loom`; feature `shuttle` is off; other features are off under loom (the
    models run without them) and may be on outside it;
    `key = "value"` (target_*) is true; bare names are false (`test`, `docsrs`,
    `numa_shuttle`, ...) except `unix` and `debug_assertions`."""

    def pred(k: int) -> tuple[bool, int]:
        t = toks[k]
        name = t.text
        if k + 1 < j and toks[k + 1].text == "(":
            args, k2 = [], k + 2
            while toks[k2].text != ")":
                v, k2 = pred(k2)
                args.append(v)
                if toks[k2].text == ",":
                    k2 += 1
            k2 += 1
            if name == "all":
                return all(args), k2
            if name == "any":
                return any(args), k2
            if name == "not":
                return not args[0], k2
            return True, k2
        if k + 1 < j and toks[k + 1].text == "=":
            if name == "feature":
                value = toks[k + 2].text.strip('"')
                if value == "loom":
                    return loom, k + 3  # the loom run enables it, nothing else does
                if value == "shuttle":
                    return False, k + 3
                return not loom, k + 3
            return True, k + 3
        if name == "numa_loom":
            return loom, k + 1
        # Other bare cfgs (test, docsrs, miri, numa_shuttle, ...) are off in
        # both the loom run and the normal build, except these.
        return name in ("unix", "debug_assertions"), k + 1

    return pred(i)[0]


ITEM_KW = {"fn", "impl", "mod", "struct", "enum", "trait", "unsafe", "const", "static",
           "use", "type", "extern", "async", "macro_rules", "union"}


def item_end(toks: list[Tok], k: int, pairs: dict[int, int]) -> int:
    """Index of the last token of the item/statement/field starting at k
    (after its attributes)."""
    n = len(toks)
    # skip further attributes
    while k < n and toks[k].text == "#" and k + 1 < n and toks[k + 1].text == "[":
        k = pairs[k + 1] + 1
    first = k
    if toks[k].text == "pub":
        k += 1
        if toks[k].text == "(":
            k = pairs[k] + 1
    kw = toks[k].text
    is_item = kw in ITEM_KW or (toks[k].kind == "ident" and k + 1 < n and toks[k + 1].text == "!")
    is_let = kw == "let"
    k = first
    while k < n:
        t = toks[k]
        if t.text in ("(", "["):
            k = pairs[k] + 1
            continue
        if t.text == "{":
            close = pairs[k]
            if is_let:
                k = close + 1
                continue
            if close + 1 < n and toks[close + 1].text == "else":
                k = close + 1
                continue
            # `macro! { .. };` / struct literal statement
            if close + 1 < n and toks[close + 1].text == ";":
                return close + 1
            return close
        if t.text == ";":
            return k
        if t.text == "," and not is_item and not is_let:
            return k
        if t.text in (")", "]", "}"):  # end of the enclosing group
            return k - 1
        k += 1
    return n - 1


def cfg_flags(toks: list[Tok], pairs: dict[int, int]) -> tuple[list[bool], list[bool]]:
    """Per token: compiled under loom, compiled outside loom (non-test)."""
    n = len(toks)
    in_loom, in_normal = [True] * n, [True] * n
    for k in range(n - 2):
        if not (toks[k].text == "#" and toks[k + 1].text == "[" and toks[k + 2].text == "cfg"
                and k + 3 < n and toks[k + 3].text == "("):
            continue
        lo, hi = k + 4, pairs[k + 3]
        lf, nf = eval_cfg(toks, lo, hi, True), eval_cfg(toks, lo, hi, False)
        end = item_end(toks, pairs[k + 1] + 1, pairs)
        for x in range(k, end + 1):
            in_loom[x] = in_loom[x] and lf
            in_normal[x] = in_normal[x] and nf
    return in_loom, in_normal


# ---------------------------------------------------------------------------
# Sites
# ---------------------------------------------------------------------------

LOADS = {"load"}
STORES = {"store"}
FENCES = {"fence"}
CASES = {"compare_exchange", "compare_exchange_weak"}
UPDATES = {"fetch_update"}


@dataclass
class Site:
    crate: str
    path: str  # relative to the crate
    line: int
    func: str
    method: str
    nth: int
    role: str  # "access", "success", "failure", "fence", "set", "fetch"
    ordering: str
    start: int  # char offsets of the ordering variant name
    end: int
    in_loom: bool
    std_atomic: bool
    other_orderings: dict = field(default_factory=dict)  # role -> ordering of the same call

    @property
    def id(self) -> str:
        return f"{self.crate}:{self.path}:{self.func}:{self.method}#{self.nth}"

    @property
    def loc(self) -> str:
        return f"{CRATES[self.crate]}/{self.path}:{self.line}"

    def kind(self) -> str:
        if self.method in FENCES:
            return "fence"
        if self.method in LOADS:
            return "load"
        if self.method in STORES:
            return "store"
        return "rmw"


def context_names(toks: list[Tok], pairs: dict[int, int]) -> list[str]:
    """Per token: `Type::fn` (or `fn`, or `Type`, or "") of the innermost
    enclosing function and impl."""
    n = len(toks)
    names = [""] * n
    stack: list[tuple[str, str]] = []  # (kind, name) per open brace
    pending: tuple[str, str] | None = None
    for k, t in enumerate(toks):
        prev = toks[k - 1].text if k else None
        if t.kind == "ident" and t.text == "impl" and pending is None and prev in (None, "{", "}", ";", "]", "unsafe"):
            # the implementing type: after `for` if present, else after generics
            j, depth, ty = k + 1, 0, None
            after_for = None
            while j < n and not (toks[j].text == "{" and depth == 0):
                if toks[j].text == "<":
                    depth += 1
                elif toks[j].text == ">":
                    depth -= 1
                elif toks[j].text == ">>":
                    depth -= 2
                elif depth == 0 and toks[j].kind == "ident" and toks[j].text == "for":
                    after_for = j
                j += 1
            j0 = (after_for + 1) if after_for is not None else k + 1
            depth = 0
            for jj in range(j0, j):
                x = toks[jj]
                if x.text == "<":
                    depth += 1
                elif x.text == ">":
                    depth -= 1
                elif x.text == ">>":
                    depth -= 2
                elif depth == 0 and x.kind == "ident" and x.text not in ("dyn", "const", "mut"):
                    if jj + 1 < j and toks[jj + 1].text == "::":
                        continue
                    ty = x.text
                    break
            pending = ("impl", ty or "?")
        elif t.kind == "ident" and t.text == "fn" and k + 1 < n and toks[k + 1].kind == "ident" and pending is None:
            pending = ("fn", toks[k + 1].text)
        elif t.kind == "ident" and t.text in ("mod", "trait") and k + 1 < n and toks[k + 1].kind == "ident" and pending is None:
            pending = (t.text, toks[k + 1].text)
        elif t.text == ";" and pending is not None and pending[0] in ("fn", "mod"):
            pending = None
        elif t.text == "{":
            stack.append(pending or ("block", ""))
            pending = None
        elif t.text == "}":
            if stack:
                stack.pop()
        fn = next((nm for kd, nm in reversed(stack) if kd == "fn"), "")
        ty = next((nm for kd, nm in reversed(stack) if kd in ("impl", "trait")), "")
        names[k] = f"{ty}::{fn}" if ty and fn else (fn or ty)
    return names


def std_ordering_names(toks: list[Tok], pairs: dict[int, int]) -> list[tuple[int, int, str, bool]]:
    """`use` items that import an Ordering: (first token, last token of the
    enclosing block, local name, imported from std/core)."""
    out = []
    n = len(toks)
    # enclosing block end for each token
    stack, encl = [], [n - 1] * n
    for k, t in enumerate(toks):
        if t.text == "{":
            stack.append(pairs.get(k, n - 1))
        encl[k] = stack[-1] if stack else n - 1
        if t.text == "}" and stack:
            stack.pop()
    for k, t in enumerate(toks):
        if t.text != "use" or t.kind != "ident":
            continue
        end = k
        while end < n and toks[end].text != ";":
            end += 1
        text = " ".join(x.text for x in toks[k:end])
        is_std = bool(re.match(r"use (std|core) :: sync :: atomic", text))
        for m in re.finditer(r"\bOrdering\b( as (\w+))?", text):
            out.append((k, encl[k], m.group(2) or "Ordering", is_std))
    return out


def find_sites(crate: str, rel: str, src: str, file_loom: bool, file_normal: bool) -> tuple[list[Site], int]:
    """The ordering sites of one file, and the number of orderings skipped as
    test-only or loom-only code."""
    toks = lex(src)
    pairs = match_brackets(toks)
    in_loom, in_normal = cfg_flags(toks, pairs)
    names = context_names(toks, pairs)
    uses = std_ordering_names(toks, pairs)
    sites: list[Site] = []
    skipped = 0
    counts: dict[tuple[str, str], int] = {}
    seen_calls: dict[int, int] = {}  # open paren index -> nth
    for k in range(2, len(toks)):
        t = toks[k]
        if not (t.kind == "ident" and t.text in ORDERINGS and toks[k - 1].text == "::"
                and toks[k - 2].kind == "ident" and toks[k - 2].text.endswith("Ordering")):
            continue
        qual = toks[k - 2].text
        if not (in_normal[k] and file_normal):
            skipped += 1  # test-only or loom-only code
            continue
        # the enclosing call: the unmatched `(` before the token
        j, depth, arg = k - 1, 0, 0
        while j >= 0:
            x = toks[j].text
            if x in (")", "]", "}"):
                depth += 1
            elif x in ("(", "[", "{"):
                if depth == 0:
                    break
                depth -= 1
            elif x == "," and depth == 0:
                arg += 1
            j -= 1
        if j < 0 or toks[j].text != "(" or toks[j - 1].kind != "ident":
            continue  # an ordering value that is not a call argument
        method = toks[j - 1].text
        func = names[k] or "<top>"
        if j not in seen_calls:
            counts[(func, method)] = counts.get((func, method), 0) + 1
            seen_calls[j] = counts[(func, method)]
        nth = seen_calls[j]
        n_args = 1 + sum(1 for x in range(j + 1, pairs[j]) if toks[x].text == "," and _depth0(toks, j, x, pairs))
        if toks[pairs[j] - 1].text == ",":
            n_args -= 1  # trailing comma
        if method in CASES:
            role = "success" if arg == n_args - 2 else "failure"
        elif method in UPDATES:
            role = "set" if arg == 0 else "fetch"
        elif method in FENCES:
            role = "fence"
        else:
            role = "access"
        # which import does the qualifier name? (innermost `use` in scope)
        std = False
        best = None
        for (ustart, uend, local, is_std) in uses:
            if local == qual and ustart < k <= uend and (best is None or ustart > best[0]):
                best = (ustart, is_std)
        if best is not None:
            std = best[1]
        sites.append(Site(crate, rel, t.line, func, method, nth, role, t.text, t.start, t.end,
                          in_loom[k] and file_loom, std))
    # record sibling orderings of CASes (for the validity of failure mutants)
    by_call: dict[tuple[str, str, int], list[Site]] = {}
    for s in sites:
        by_call.setdefault((s.func, s.method, s.nth), []).append(s)
    for group in by_call.values():
        for s in group:
            s.other_orderings = {o.role: o.ordering for o in group if o is not s}
    return sites, skipped


def _depth0(toks, open_idx, x, pairs) -> bool:
    """Whether toks[x] is directly inside the group opened at open_idx."""
    k = open_idx + 1
    while k < x:
        if toks[k].text in OPEN and k in pairs:
            if pairs[k] > x:
                return False
            k = pairs[k] + 1
            continue
        k += 1
    return True


def module_file_flags(crate_dir: Path) -> dict[str, tuple[bool, bool]]:
    """`mod name;` declarations in lib.rs under a cfg: file -> (loom, normal).
    A directory module (`src/name/mod.rs` and its sub-files) is keyed by
    `src/name.rs` as well; `crate_sites` looks its files up there."""
    lib = crate_dir / "src" / "lib.rs"
    src = lib.read_text()
    toks = lex(src)
    pairs = match_brackets(toks)
    in_loom, in_normal = cfg_flags(toks, pairs)
    out = {}
    for k in range(len(toks) - 2):
        if toks[k].text == "mod" and toks[k + 1].kind == "ident" and toks[k + 2].text == ";":
            out[f"src/{toks[k + 1].text}.rs"] = (in_loom[k], in_normal[k])
    return out


def crate_sites(crate: str, root: Path) -> tuple[list[Site], int]:
    crate_dir = root / CRATES[crate]
    flags = module_file_flags(crate_dir)
    sites, skipped = [], 0
    for f in sorted((crate_dir / "src").rglob("*.rs")):
        rel = f.relative_to(crate_dir).as_posix()
        # Files of a directory module take the flags of its declaration.
        top = rel if rel.count("/") < 2 else "/".join(rel.split("/")[:2]) + ".rs"
        fl, fn_ = flags.get(top, (True, True))
        s, sk = find_sites(crate, rel, f.read_text(), fl, fn_)
        sites += s
        skipped += sk
    return sites, skipped


# ---------------------------------------------------------------------------
# Mutants
# ---------------------------------------------------------------------------

ACCESS_STEPS = {"AcqRel": ["Acquire", "Release"], "Acquire": ["Relaxed"], "Release": ["Relaxed"]}
FAILURE_STEPS = {"Acquire": ["Relaxed"]}
FENCE_STEPS = {"SeqCst": ["AcqRel"], "AcqRel": ["Acquire", "Release"]}
SEQCST_STEPS = {"load": ["Acquire"], "store": ["Release"], "rmw": ["AcqRel"]}


def classify(site: Site, allow: dict[str, str], mutate_seqcst: bool) -> tuple[str, list[str], str]:
    """(class, weaker orderings to try, note). Classes: relaxed, seqcst-access,
    allowlisted, unjudged, mutate."""
    if site.ordering == "Relaxed":
        return "relaxed", [], ""
    if site.id in allow:
        return "allowlisted", [], allow[site.id]
    if site.std_atomic or not site.in_loom:
        why = "std atomic" if site.std_atomic else "not compiled under loom"
        return "unjudged", [], f"{why}: loom cannot judge it; add it to the allowlist with a reason"
    if site.role == "fence":
        return "mutate", FENCE_STEPS.get(site.ordering, []), ""
    if site.ordering == "SeqCst":
        if not mutate_seqcst:
            return "seqcst-access", [], "SeqCst access: needs a written argument (loom models it as AcqRel)"
        steps = SEQCST_STEPS[site.kind()] if site.role in ("access", "success", "set") else ["Acquire"]
        return "mutate", steps, "SeqCst access (loom cannot distinguish SeqCst from AcqRel)"
    if site.role in ("failure", "fetch"):
        return "mutate", FAILURE_STEPS.get(site.ordering, []), ""
    steps = list(ACCESS_STEPS.get(site.ordering, []))
    if site.kind() == "load":
        steps = [s for s in steps if s in ("Relaxed", "Acquire")]
    if site.kind() == "store":
        steps = [s for s in steps if s in ("Relaxed", "Release")]
    return "mutate", steps, ""


def load_allowlist(path: Path) -> dict[str, str]:
    allow = {}
    if not path.exists():
        return allow
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise SystemExit(f"{path}: expected `site-id = reason`: {raw}")
        key, reason = line.split("=", 1)
        allow[key.strip()] = reason.strip()
    return allow


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


class Stop(Exception):
    pass


def _on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Worktree:
    def __init__(self, keep: bool):
        self.keep = keep
        self.path = Path(tempfile.mkdtemp(prefix="ordering-mutants-"))
        self.path.rmdir()

    def __enter__(self):
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(self.path), "HEAD"],
                       check=True, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        if self.keep:
            log(f"worktree kept at {self.path}")
            return False
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(self.path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return False


def overlay(wt: Path, spec: str) -> list[str]:
    """Makes the worktree (a checkout of HEAD) show the working tree: `all`
    copies every modified or untracked (not ignored) file and removes deleted
    ones; `none` keeps HEAD; otherwise a comma-separated list of paths (files
    or directories, relative to the repository) to copy. Returns what changed."""
    if spec == "none":
        return []
    if spec == "all":
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-m", "-o", "-d", "--exclude-standard", "-z"],
                             check=True, stdout=subprocess.PIPE).stdout.decode()
        paths = sorted({p for p in out.split("\0") if p})
    else:
        paths = [p.strip().rstrip("/") for p in spec.split(",") if p.strip()]
    changed = []
    for rel in paths:
        src, dst = REPO / rel, wt / rel
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.exists():
            dst.unlink()  # deleted in the working tree
        else:
            continue
        changed.append(rel)
    return changed


def build(wt: Path, crate: str, target_dir: str) -> tuple[Path | None, str]:
    env = dict(os.environ, RUSTFLAGS="--cfg numa_loom", CARGO_TARGET_DIR=target_dir)
    env.pop("CARGO_BUILD_RUSTFLAGS", None)
    # loom is an optional dependency behind each lock crate's `loom` feature (if
    # it has one); the other lock crate is in the build too (through lock-tests).
    with_loom = [c for c in CRATES
                 if re.search(r"^loom\s*=\s*\[", (wt / CRATES[c] / "Cargo.toml").read_text(), re.M)]
    features = ["--features", ",".join(f"{c}/loom" for c in with_loom)] if with_loom else []
    packages = [a for c in (with_loom or [crate]) for a in ("-p", c)]
    if crate not in with_loom:
        packages += ["-p", crate]
    p = subprocess.run(["cargo", "test", "--release", *packages, *features, "--test", "loom", "--no-run",
                        "--message-format=json-render-diagnostics"],
                       cwd=wt, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exe = None
    for line in p.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and msg["target"]["name"] == "loom"
                and Path(msg["manifest_path"]).parent.name == Path(CRATES[crate]).name):
            exe = Path(msg["executable"])
    if p.returncode != 0 or exe is None:
        return None, p.stderr[-3000:]
    return exe, ""


_PANIC = re.compile(r"panicked at [^\n]*:\n(.*)")


def run_test(exe: Path, name: str, preemptions: int, timeout: float) -> tuple[str, float, str]:
    """("pass" | "fail" | "timeout", seconds, detail)."""
    env = dict(os.environ, LOOM_MAX_PREEMPTIONS=str(preemptions), RUST_BACKTRACE="0")
    env.pop("LOOM_LOG", None)
    env.pop("MODEL_PROGRESS", None)
    t0 = time.monotonic()
    proc = subprocess.Popen([str(exe), "--exact", name, "--test-threads=1", "-q"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.monotonic() - t0, f"> {timeout:.0f} s"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    dt = time.monotonic() - t0
    if proc.returncode == 0:
        return "pass", dt, ""
    m = _PANIC.search(out)
    detail = m.group(1).strip() if m else (out.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return "fail", dt, detail[:160]


def list_tests(exe: Path) -> list[str]:
    p = subprocess.run([str(exe), "--list"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return [ln[: -len(": test")] for ln in p.stdout.splitlines() if ln.endswith(": test")]


@dataclass
class Result:
    site: Site
    cls: str
    mutated: str | None = None
    status: str = ""  # killed, survived, timeout, build-error, not-run, allowlisted, seqcst-access, unjudged, relaxed
    test: str = ""
    detail: str = ""
    seconds: float = 0.0


def apply_mutant(path: Path, original: str, site: Site, new: str) -> None:
    assert original[site.start:site.end] == site.ordering, (site.id, original[site.start:site.end])
    path.write_text(original[: site.start] + new + original[site.end:])


def selected(site, args) -> bool:
    """`--filter` keeps only matching sites; `--exclude` (repeatable) drops them.
    Both match a substring of the site id, `file:line` or the function."""
    keys = (site.id, site.loc, site.func)
    if args.filter and not any(args.filter in x for x in keys):
        return False
    return not any(e in x for e in args.exclude for x in keys)


def run_crate(crate: str, args, allow, deadline: float | None, wt: Path) -> tuple[list[Result], dict]:
    sites, skipped = crate_sites(crate, wt)
    results: list[Result] = []
    todo: list[Result] = []
    for s in sites:
        cls, steps, note = classify(s, allow, args.mutate_seqcst)
        if not selected(s, args):
            continue
        if cls == "mutate":
            for new in steps:
                todo.append(Result(s, cls, new, "not-run", detail=note))
        else:
            results.append(Result(s, cls, None, cls, detail=note))
    info = {"crate": crate, "sites": len(sites), "skipped_test_or_loom_only": skipped}
    if not todo:
        return results + todo, info

    log(f"[{crate}] building the unmutated crate under loom ...")
    exe, err = build(wt, crate, args.target_dir)
    if exe is None:
        raise SystemExit(f"[{crate}] the unmutated crate does not build:\n{err}")
    tests = list_tests(exe)
    base: dict[str, float] = {}
    t_all = time.monotonic()
    for name in tests:
        st, dt, detail = run_test(exe, name, args.preemptions, 3600)
        if st != "pass":
            raise SystemExit(f"[{crate}] loom model {name} fails on the unmutated code: {detail}")
        base[name] = dt
        log(f"[{crate}]   baseline {name}: {dt:.2f} s")
    info["baseline_seconds"] = round(time.monotonic() - t_all, 2)
    info["baseline"] = {k: round(v, 3) for k, v in base.items()}
    order = sorted(tests, key=lambda t: base[t])

    if args.shuffle is not None:
        random.Random(args.shuffle).shuffle(todo)
    files: dict[str, str] = {}
    for i, r in enumerate(todo, 1):
        if deadline is not None and time.monotonic() >= deadline:
            log(f"[{crate}] time box reached: {len(todo) - i + 1} mutants not run")
            break
        s = r.site
        path = wt / CRATES[crate] / s.path
        original = files.setdefault(s.path, path.read_text())
        t0 = time.monotonic()
        try:
            apply_mutant(path, original, s, r.mutated)
            exe_m, err = build(wt, crate, args.target_dir)
            if exe_m is None:
                r.status, r.detail = "build-error", err.strip().splitlines()[-1] if err.strip() else "?"
            else:
                r.status = "survived"
                killers = []
                for name in order:
                    timeout = max(args.min_timeout, args.timeout_factor * base[name])
                    st, dt, detail = run_test(exe_m, name, args.preemptions, timeout)
                    if st == "pass":
                        continue
                    killers.append((st, name, detail))
                    if not args.all_tests:
                        break
                if killers:
                    st, name, detail = killers[0]
                    r.status = "killed" if st == "fail" else "timeout"
                    r.test = ", ".join(k[1] for k in killers)
                    r.detail = detail
                elif r.detail:
                    r.detail = "loom cannot distinguish: " + r.detail
        finally:
            path.write_text(original)
        r.seconds = time.monotonic() - t0
        log(f"[{crate}] {i}/{len(todo)} {s.loc} {s.method} {s.role} {s.ordering}->{r.mutated}: "
            f"{r.status} {r.test} ({r.seconds:.0f} s)")
    return results + todo, info


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def report_md(all_results: list[Result], infos: list[dict], show_relaxed: bool) -> str:
    out = []
    for info in infos:
        crate = info["crate"]
        rs = [r for r in all_results if r.site.crate == crate]
        rs.sort(key=lambda r: (r.site.path, r.site.line, r.site.start, r.mutated or ""))
        out.append(f"## {crate}\n")
        counts: dict[str, int] = {}
        for r in rs:
            counts[r.status] = counts.get(r.status, 0) + 1
        mutants = [r for r in rs if r.cls == "mutate"]
        mcounts: dict[str, int] = {}
        for r in mutants:
            mcounts[r.status] = mcounts.get(r.status, 0) + 1
        out.append(
            f"{info['sites']} ordering arguments in non-test code ({info['skipped_test_or_loom_only']} more in "
            f"test-only or loom-only code, not counted). {len(mutants)} mutants: "
            + (", ".join(f"{k} {v}" for k, v in sorted(mcounts.items())) or "none")
            + ". Not mutated: "
            + ", ".join(f"{k} {sum(1 for r in rs if r.cls == k)}"
                        for k in ("allowlisted", "seqcst-access", "unjudged", "relaxed")
                        if any(r.cls == k for r in rs))
            + "."
            + (f" Unmutated loom run: {info['baseline_seconds']} s." if "baseline_seconds" in info else "")
            + "\n")
        out.append("| site | where | op | ordering | result | model / reason |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for r in rs:
            if r.status == "relaxed" and not show_relaxed:
                continue
            s = r.site
            op = s.method + ("" if s.role in ("access", "fence") else f" ({s.role})")
            ordering = f"{s.ordering} -> {r.mutated}" if r.mutated else s.ordering
            status = {"seqcst-access": "SeqCst access", "allowlisted": "allowlisted"}.get(r.status, r.status)
            why = r.test
            if r.detail:
                why = f"{why}: {r.detail}" if why else r.detail
            out.append(f"| `{s.func}` | {s.loc} | {op} | {ordering} | {status} | {md_escape(why)} |")
        out.append("")
    return "\n".join(out)


def report_json(all_results: list[Result], infos: list[dict]) -> dict:
    return {
        "crates": infos,
        "results": [
            {
                "site": r.site.id, "file": r.site.loc, "line": r.site.line, "function": r.site.func,
                "method": r.site.method, "role": r.site.role, "ordering": r.site.ordering,
                "mutated": r.mutated, "status": r.status, "test": r.test, "detail": r.detail,
                "seconds": round(r.seconds, 1),
            }
            for r in all_results
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crate", choices=["numa-spin", "cst-mutex", "all"], default="all")
    ap.add_argument("--list", action="store_true", help="list the sites and their mutants; run nothing")
    ap.add_argument("--filter", help="only sites whose id, file:line or function contains this")
    ap.add_argument("--exclude", action="append", default=[], metavar="SUBSTR",
                    help="leave out sites whose id, file:line or function contains this (repeatable)")
    ap.add_argument("--max-seconds", type=float, help="time box for the whole run")
    ap.add_argument("--shuffle", type=int, metavar="SEED", help="run the mutants in a random order")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': stdout)")
    ap.add_argument("--preemptions", type=int,
                    default=int(os.environ.get("LOOM_MAX_PREEMPTIONS", "2")))
    ap.add_argument("--timeout-factor", type=float, default=10.0)
    ap.add_argument("--min-timeout", type=float, default=30.0)
    ap.add_argument("--all-tests", action="store_true", help="run every model on every mutant")
    ap.add_argument("--overlay", default="all", metavar="all|none|PATH,...",
                    help="what of the working tree to copy over HEAD (default all: every modified "
                         "or untracked file; none: HEAD as committed; or these paths)")
    ap.add_argument("--keep-worktree", action="store_true")
    ap.add_argument("--mutate-seqcst", action="store_true", help="also weaken SeqCst accesses")
    ap.add_argument("--show-relaxed", action="store_true", help="list Relaxed sites in the table")
    ap.add_argument("--allowlist", type=Path, default=DEFAULT_ALLOWLIST)
    ap.add_argument("--target-dir", default=os.environ.get("MUTANTS_TARGET_DIR", "/tmp/mutants-target"))
    args = ap.parse_args()

    crates = list(CRATES) if args.crate == "all" else [args.crate]
    allow = load_allowlist(args.allowlist)

    if args.list:
        rows = ["| site id | where | op | ordering | class | weaker |", "| --- | --- | --- | --- | --- | --- |"]
        for c in crates:
            sites, _ = crate_sites(c, REPO)
            for s in sites:
                cls, steps, note = classify(s, allow, args.mutate_seqcst)
                if not selected(s, args):
                    continue
                rows.append(f"| `{s.id}` | {s.loc} | {s.method} ({s.role}) | {s.ordering} | {cls} | "
                            f"{', '.join(steps) or md_escape(note)} |")
        print("\n".join(rows))
        known = {s.id for c in CRATES for s in crate_sites(c, REPO)[0]}
        for key in allow:
            if key not in known:
                log(f"warning: allowlist entry matches no site: {key}")
        return 0

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    all_results: list[Result] = []
    infos: list[dict] = []
    try:
        with Worktree(args.keep_worktree) as wt:
            changed = overlay(wt.path, args.overlay)
            if changed:
                log(f"worktree {wt.path}: HEAD plus the working tree's {', '.join(changed)}")
            for c in crates:
                rs, info = run_crate(c, args, allow, deadline, wt.path)
                all_results += rs
                infos.append(info)
    except Stop as e:
        log(f"interrupted ({e}); the worktree was removed, the main tree was never touched")
        return 2

    md = report_md(all_results, infos, args.show_relaxed)
    if args.json == "-":
        print(md, file=sys.stderr)
        json.dump(report_json(all_results, infos), sys.stdout, indent=1)
        print()
    else:
        print(md)
        if args.json:
            Path(args.json).write_text(json.dumps(report_json(all_results, infos), indent=1) + "\n")
    bad = [r for r in all_results if r.status in ("survived", "unjudged", "build-error")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
