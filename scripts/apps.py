#!/usr/bin/env python3
"""Real programs on the numa-preload interposer, under every NUMA_LOCK value.

Runs, interleaved (every repeat visits every thread count, program and lock, the
lock order rotating per repeat), with repeats:
  sysbench mutex --mutex-num=1     (fixed work; ops/s = lock acquisitions / total time)
  LevelDB readrandom               (crates/numa-preload/apps/leveldb_readrandom.cc; fixed time)
  kccachetest wicked -th N         (Kyoto Cabinet cache DB; fixed work; ops/s = records / wall time)
and reports, per program, lock and thread count, the median ops/s and its ratio to
the `pthread` median, with the min-max of the per-repeat ratios (lock run i over
pthread run i of the same repeat). Writes raw.csv, results.json and table.md to --out.
Called by scripts/apps.sh, which installs the packages and builds the library.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

LOCKS = ["pthread", "cna", "queued", "hq", "cst"]
PROGRAMS = ["sysbench", "leveldb", "kccachetest"]


def nodes():
    try:
        return len([d for d in os.listdir("/sys/devices/system/node") if re.fullmatch(r"node\d+", d)])
    except OSError:
        return 1


def run(cmd, lock, lib, timeout, stats=False):
    env = dict(os.environ, LD_PRELOAD=lib, NUMA_LOCK=lock)
    env.pop("NUMA_LOCK_STATS", None)
    if stats:
        env["NUMA_LOCK_STATS"] = "1"
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0, "timeout"
    return p, time.monotonic() - t0, None


def one(prog, lock, threads, a, lib, stats=False):
    """(ops_per_sec or None, error or None, stderr)."""
    if prog == "sysbench":
        per = max(1, a.sb_locks // threads)
        cmd = ["sysbench", "mutex", f"--threads={threads}", "--mutex-num=1",
               f"--mutex-locks={per}", f"--mutex-loops={a.sb_loops}", "run"]
        p, wall, err = run(cmd, lock, lib, a.timeout, stats)
        if err or p.returncode != 0:
            return None, err or f"exit {p.returncode}", p.stderr if p else ""
        m = re.search(r"total time:\s+([\d.]+)s", p.stdout)
        if not m:
            return None, "no total time", p.stderr
        return per * threads / float(m.group(1)), None, p.stderr
    if prog == "leveldb":
        cmd = [a.ldb_bin, a.ldb_dir, str(a.ldb_keys), str(threads), str(a.ldb_seconds)]
        p, wall, err = run(cmd, lock, lib, a.timeout, stats)
        if err or p.returncode != 0:
            return None, err or f"exit {p.returncode}: {p.stderr.strip()[-200:]}", p.stderr if p else ""
        m = re.search(r"ops_per_sec=(\d+)", p.stdout)
        return (float(m.group(1)) if m else None), (None if m else "no ops"), p.stderr
    if prog == "kccachetest":
        per = max(1, a.kc_records // threads)
        cmd = ["kccachetest", "wicked", "-th", str(threads), "-it", "1", str(per)]
        p, wall, err = run(cmd, lock, lib, a.timeout, stats)
        if err or p.returncode != 0:
            return None, err or f"exit {p.returncode}", p.stderr if p else ""
        return per * threads / wall, None, p.stderr
    raise ValueError(prog)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ldb-bin", required=True)
    ap.add_argument("--out", default="target/apps")
    ap.add_argument("--threads", default="1,2,4,8,16,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--locks", default=",".join(LOCKS))
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--sb-locks", type=int, default=20_000_000, help="sysbench lock acquisitions in all (split over threads)")
    ap.add_argument("--sb-loops", type=int, default=50)
    ap.add_argument("--kc-records", type=int, default=1_500_000, help="kccachetest records in all (split over threads)")
    ap.add_argument("--ldb-keys", type=int, default=1_000_000)
    ap.add_argument("--ldb-seconds", type=float, default=1.0)
    ap.add_argument("--ldb-dir", default=None)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--append", action="store_true",
                    help="add repeats to an existing raw.csv in --out (run long measurements in chunks)")
    ap.add_argument("--report-only", action="store_true", help="only aggregate --out/raw.csv")
    ap.add_argument("--check-stats", action="store_true",
                    help="also run each program once per lock with NUMA_LOCK_STATS=1 and require our counters to move")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    locks = a.locks.split(",")
    progs = a.programs.split(",")
    os.makedirs(a.out, exist_ok=True)
    a.ldb_dir = a.ldb_dir or os.path.join(a.out, f"leveldb-{a.ldb_keys}")
    failures = []

    raw_path = os.path.join(a.out, "raw.csv")
    raw = []
    if (a.append or a.report_only) and os.path.exists(raw_path):
        with open(raw_path) as f:
            next(f)
            for line in f:
                prog, lock, t, rep, ops, err = line.rstrip("\n").split(",", 5)
                raw.append(dict(program=prog, lock=lock, threads=int(t), repeat=int(rep),
                                ops=float(ops) if ops else None, error=err or None))
                if err:
                    failures.append(f"{prog} {lock} t={t} rep={rep}: {err}")
    if a.report_only:
        threads = sorted({r["threads"] for r in raw})
        a.repeats = len({r["repeat"] for r in raw})
        progs = [p for p in PROGRAMS if any(r["program"] == p for r in raw)]
        locks = [l for l in LOCKS if any(r["lock"] == l for r in raw)]
    first = max((r["repeat"] for r in raw), default=-1) + 1

    if "leveldb" in progs and not a.report_only:  # fill once, without the interposer
        p = subprocess.run([a.ldb_bin, a.ldb_dir, str(a.ldb_keys), "1", "0.05"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"leveldb fill failed: {p.stderr}")

    if a.check_stats and not a.report_only:
        for prog in progs:
            for lock in locks:
                if lock == "pthread":
                    continue
                v, err, stderr = one(prog, lock, 2, a, a.lib, stats=True)
                m = re.search(rf"lock={lock} kind=mutex acquisitions=(\d+)", stderr or "")
                if err or not m or int(m.group(1)) == 0:
                    failures.append(f"{prog} {lock}: our locks did not run ({err}; {stderr.strip()[-300:]})")
                else:
                    print(f"stats check {prog:12} {lock:8} mutex acquisitions={m.group(1)}", flush=True)

    new = [] if a.report_only else range(first, first + a.repeats)
    with open(raw_path, "a" if raw else "w") as f:
        if not raw:
            f.write("program,lock,threads,repeat,ops_per_sec,error\n")
        for rep in new:
            for t in threads:
                for prog in progs:
                    order = locks[rep % len(locks):] + locks[:rep % len(locks)]
                    for lock in order:
                        v, err, _ = one(prog, lock, t, a, a.lib)
                        raw.append(dict(program=prog, lock=lock, threads=t, repeat=rep, ops=v, error=err))
                        f.write(f"{prog},{lock},{t},{rep},{'' if v is None else round(v)},{err or ''}\n")
                        f.flush()
                        print(f"rep {rep} {prog:12} t={t:<3} {lock:8} "
                              + (f"{v:14.0f} ops/s" if v else f"FAILED: {err}"), flush=True)
                        if err:
                            failures.append(f"{prog} {lock} t={t} rep={rep}: {err}")

    results = []
    for prog in progs:
        for t in threads:
            base = {r["repeat"]: r["ops"] for r in raw if r["program"] == prog and r["threads"] == t and r["lock"] == "pthread" and r["ops"]}
            bmed = statistics.median(base.values()) if base else None
            for lock in locks:
                rs = [r for r in raw if r["program"] == prog and r["threads"] == t and r["lock"] == lock]
                ok = [r["ops"] for r in rs if r["ops"]]
                med = statistics.median(ok) if ok else None
                per_rep = [r["ops"] / base[r["repeat"]] for r in rs if r["ops"] and r["repeat"] in base]
                results.append(dict(program=prog, lock=lock, threads=t, runs=len(rs), failed=len(rs) - len(ok),
                                    median_ops_per_sec=med,
                                    ratio_to_pthread=(med / bmed) if med and bmed else None,
                                    ratio_min=min(per_rep) if per_rep else None,
                                    ratio_max=max(per_rep) if per_rep else None))
    machine = dict(cpus=os.cpu_count(), numa_nodes=nodes(), kernel=platform.release(),
                   cpu=next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
                   glibc=platform.libc_ver()[1])
    a.repeats = len({r["repeat"] for r in raw})
    params = dict(threads=threads, repeats=a.repeats, sysbench_locks=a.sb_locks, sysbench_loops=a.sb_loops,
                  kc_records=a.kc_records, leveldb_keys=a.ldb_keys, leveldb_seconds=a.ldb_seconds)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(dict(machine=machine, params=params, results=results, failures=failures), f, indent=1)

    lines = [f"Machine: {machine['cpus']} CPUs, {machine['numa_nodes']} NUMA node(s), {machine['cpu']}, "
             f"Linux {machine['kernel']}, glibc {machine['glibc']}. {a.repeats} interleaved repeats; "
             "ratio = median ops/s over pthread's median [min-max of per-repeat ratios].", ""]
    for prog in progs:
        lines.append(f"### {prog}")
        lines.append("")
        lines.append("| lock | " + " | ".join(f"{t} thr" for t in threads) + " |")
        lines.append("| --- |" + " --- |" * len(threads))
        for lock in locks:
            cells = []
            for t in threads:
                r = next(x for x in results if x["program"] == prog and x["threads"] == t and x["lock"] == lock)
                if lock == "pthread":
                    cells.append(f"{r['median_ops_per_sec'] / 1e3:.0f}k ops/s" if r["median_ops_per_sec"] else "FAIL")
                elif r["ratio_to_pthread"] is None:
                    cells.append("FAIL")
                else:
                    cells.append(f"{r['ratio_to_pthread']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}]"
                                 + (f" ({r['failed']} failed)" if r["failed"] else ""))
            lines.append(f"| {lock} | " + " | ".join(cells) + " |")
        lines.append("")
    if failures:
        lines.append("Failures:")
        lines += [f"- {x}" for x in failures]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
    print()
    print(table)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
