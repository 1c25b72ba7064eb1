#!/usr/bin/env python3
"""Runs NVIDIA nccl-tests binaries (built by the user; this tool never builds them) against oxccl
and, side by side, against a reference libnccl, and reports correctness and performance ratios.

  harness.py check   --bin DIR --oxccl LIB [--suite NAME] [--ngpus N] [--out DIR]
  harness.py compare --bin DIR --oxccl LIB [--nccl-libdir DIR] [--suite NAME] [--ngpus N] [--out DIR]
  harness.py report RESULTS.json [--out DIR]

check:   every run of the suite with oxccl preloaded; a table of #wrong / out-of-bounds per run;
         exit status 1 if any run failed, was wrong or hung.
compare: every run twice, oxccl then the reference NCCL, in the same invocation; per size the
         time ratio (oxccl/NCCL, lower is better) and busbw ratio (higher is better); writes
         results.md (a summary per run against the default bar, then every size), results.json and
         (with matplotlib) one PNG per run into --out. `--suite bench` is every table of
         BENCHMARKS.md's same-call comparisons in one invocation (colls-perf + allreduce-perf);
         `--suite one-host --ngpus N` is the one-host target table at N ranks (about 8 minutes at N = 4),
         checked by `bars.py --one-host OUT`; `--suite hosts` is the cross-host table, ranks split into
         simulated hosts (scripts/hostsim.sh), checked by `bars.py --hosts OUT`. `--list` prints
         the command lines and runs nothing. `--repeat N` runs each pair N times, alternating
         the libraries, and compares per-size medians: small eager sizes are bound by the host's
         kernel launch and move by 10-30% between runs of either library; `--bind core` pins
         single-threaded ranks to cores (mpirun --bind-to core --map-by numa), which steadies them.
report:  results.md and the PNGs again from a results.json, compare's or oxccl-bench's (what
         scripts/bench.sh writes).
Suites are defined below (SUITES); modes: mpirun one process per GPU (npN), one process driving N
GPUs (gN), threads (tN), each optionally with CUDA graphs (-G).
"""
import argparse, concurrent.futures, json, math, os, re, shlex, subprocess, sys, time

NCCL_TESTS_ENV = {"NCCL_NVLS_ENABLE": "0"}  # NVLink multicast stays off on shared machines

def mode(name, ngpus_needed, launcher, extra, wrap=(), env=None):
    """`wrap`: a command the binary runs under (after mpirun's options); `env`: settings for both
    libraries' runs of this mode, forwarded to every rank."""
    return {"name": name, "ngpus": ngpus_needed, "launcher": launcher, "extra": extra, "wrap": list(wrap), "env": dict(env or {})}

# Ranks split into simulated hosts (the cross-host layouts): NCCL_HOSTID per rank, so that both
# libraries use their network transport between "hosts" (NCCL its sockets, without InfiniBand).
HOSTSIM = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "hostsim.sh"))

# How mpirun places ranks (--bind): unbound by default; `core` binds each single-threaded rank to a
# core, spread over NUMA nodes, which steadies the host-bound small rows (unbound runs
# of one build moved by 1-3 us). Set once in main().
BIND = "none"

def mpi(n, threads=1):
    place = ["--bind-to", "core", "--map-by", "numa"] if BIND == "core" and threads == 1 else ["--bind-to", "none"]
    return ["mpirun", "--allow-run-as-root"] + place + ["-np", str(n)]

def modes_for(ngpus, graph=True):
    ms = []
    for n in (2, 3, 4, 8):
        if n <= ngpus:
            ms.append(mode(f"np{n}", n, mpi(n), []))
    for g in sorted({2, ngpus}):
        if 2 <= g <= ngpus:
            ms.append(mode(f"g{g}", g, [], ["-g", str(g)]))
    if ngpus >= 4:
        ms.append(mode("np2-t2", 4, mpi(2, threads=2), ["-t", "2"]))
    if graph:
        ms += [dict(m, name=m["name"] + "-G", extra=m["extra"] + ["-G", "20"]) for m in list(ms)]
    return ms

CHECK_ARGS = ["-b", "8", "-e", "512M", "-f", "4", "-c", "1", "-d", "all", "-o", "all", "-n", "1", "-w", "0"]
PERF_ARGS = ["-b", "8", "-e", "512M", "-f", "2", "-c", "0", "-n", "100", "-w", "20"]

# Every nccl-tests binary, with the flags that exercise all of it. Every root is `-r -1`: nccl-tests
# reads -r with strtol, so `-r all` would mean root 0 only.
COLLS = {
    "all_reduce_perf": ["-o", "all"],
    "reduce_scatter_perf": ["-o", "all"],
    "reduce_perf": ["-o", "all", "-r", "-1"],
    "broadcast_perf": ["-r", "-1"],
    "all_gather_perf": [],
    "alltoall_perf": [],
    "gather_perf": ["-r", "-1"],
    "scatter_perf": ["-r", "-1"],
    "sendrecv_perf": [],
    "hypercube_perf": [],
}
COLL_CHECK_ARGS = ["-b", "8", "-e", "64M", "-f", "8", "-c", "1", "-d", "all", "-n", "1", "-w", "0"]

def suite(name, ngpus):
    """(test binary, mode, args) triples."""
    if name == "colls-check":
        runs = []
        for test, extra in COLLS.items():
            for m in modes_for(ngpus):
                runs.append((test, m, COLL_CHECK_ARGS + extra))
            for n in (2, 4):
                if n <= ngpus:
                    m = mode(f"np{n}", n, mpi(n), [])
                    runs.append((test, dict(m, name=f"np{n}-m4", extra=["-m", "4"]), COLL_CHECK_ARGS + extra))
            runs.append((test, dict(mode("np2", 2, mpi(2), []), name="np2-u1", extra=["-u", "1"]), COLL_CHECK_ARGS + extra))
        return runs
    if name == "colls-perf":
        runs = []
        for test in COLLS:
            for n in (2, 4):
                if n <= ngpus:
                    runs.append((test, mode(f"np{n}", n, mpi(n), []), PERF_ARGS + ["-d", "float"] + (["-o", "sum"] if "-o" in COLLS[test] else [])))
        return runs
    if name == "bench":  # the same run once (all_reduce float sum is in both)
        runs, seen = [], set()
        for r in suite("colls-perf", ngpus) + suite("allreduce-perf", ngpus):
            key = (r[0], r[1]["name"], tuple(r[2]))
            if key not in seen:
                seen.add(key)
                runs.append(r)
        return runs
    if name == "registered-check":
        # Registered buffers (-R 1: ncclCommRegister; -R 2: symmetric windows): zero-copy put
        # streams need two or more put rounds, so the sizes reach 256 MiB.
        runs = []
        sizes = ["-b", "8", "-e", "256M", "-f", "8", "-c", "1", "-n", "1", "-w", "1"]
        exch = ("all_gather_perf", "alltoall_perf", "sendrecv_perf", "gather_perf", "scatter_perf", "broadcast_perf", "all_reduce_perf")
        keep = {"np2", "np3", f"np{ngpus}", f"g{ngpus}"}
        for test in exch:
            for m in modes_for(ngpus, graph=False):
                if m["name"] not in keep:
                    continue
                runs.append((test, dict(m, name=f"{m['name']}-R1"), sizes + ["-d", "all", "-R", "1"]))
                # Windows register the same way: one datatype is enough there.
                runs.append((test, dict(m, name=f"{m['name']}-R2"), sizes + ["-d", "float", "-R", "2"]))
        return runs
    if name == "ce-direct-check":
        # The copy-engine direct path (pairs of ranks in separate processes): run with
        # OXCCL_CE_DIRECT_MIN_BYTES=1048576 in the environment so that every size here takes it.
        # np3 and np<ngpus>: a rank's launch spans several pairs; np2 -g 2 (4 ranks in 2
        # processes): pairs inside a process have no link, so one launch mixes copy-engine pairs
        # with kernel pairs.
        sizes = ["-b", "1M", "-e", "64M", "-f", "4", "-c", "1", "-d", "all", "-n", "2", "-w", "1"]
        exch = ("broadcast_perf", "sendrecv_perf", "gather_perf", "scatter_perf", "all_gather_perf", "alltoall_perf")
        runs = []
        for n in sorted({2, 3, ngpus}):
            if n > ngpus:
                continue
            m = mode(f"np{n}", n, mpi(n), [])
            runs += [(test, m, sizes + COLLS[test]) for test in exch + (("hypercube_perf",) if n == ngpus and n > 2 else ())]
            runs += [(test, dict(m, name=f"np{n}-G"), sizes + ["-G", "20"]) for test in exch[:2]]
        if ngpus >= 4:
            m = mode("np2-g2", 4, mpi(2), ["-g", "2"])
            runs += [(test, m, sizes + COLLS[test]) for test in ("sendrecv_perf", "alltoall_perf", "scatter_perf")]
        return runs
    if name == "one-host":
        # The one-host target table at ngpus ranks, one process per GPU (plus -g ngpus): small sizes
        # eager and under graphs, AllReduce 256 KB-32 MB, every binary from 128 MB; AllReduce in
        # float and bfloat16. Mode names carry the size class so that each run keeps its own logs;
        # `bars.py --one-host` checks every row against its bar.
        n = ngpus
        small = ["-b", "8", "-e", "64K", "-f", "2", "-c", "1", "-n", "200", "-w", "30"]
        mid = ["-b", "256K", "-e", "32M", "-f", "2", "-c", "1", "-n", "50", "-w", "10"]
        large = ["-b", "128M", "-e", "512M", "-f", "2", "-c", "0", "-n", "20", "-w", "5"]
        op = lambda t: ["-o", "sum"] if t in ("all_reduce_perf", "reduce_scatter_perf", "reduce_perf") else []
        others = ("all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "broadcast_perf", "reduce_perf", "sendrecv_perf")
        m = lambda tag, extra=(): mode(f"np{n}{tag}", n, mpi(n), list(extra))
        runs = []
        for dt in ("float", "bfloat16"):
            runs.append(("all_reduce_perf", m(""), small + ["-d", dt, "-o", "sum"]))
            runs.append(("all_reduce_perf", m("-G", ["-G", "20"]), small + ["-d", dt, "-o", "sum"]))
        for t in others:
            runs.append((t, m(""), small + ["-d", "float"] + op(t)))
            runs.append((t, m("-G", ["-G", "20"]), small + ["-d", "float"] + op(t)))
        for dt in ("float", "bfloat16"):
            runs.append(("all_reduce_perf", m("-mid"), mid + ["-d", dt, "-o", "sum"]))
            runs.append(("all_reduce_perf", m("-large"), large + ["-d", dt, "-o", "sum"]))
        for t in others:
            runs.append((t, m("-large"), large + ["-d", "float"] + op(t)))
        for t in ("all_reduce_perf",) + others:
            runs.append((t, mode(f"g{n}", n, [], ["-g", str(n)]), small + ["-d", "float"] + op(t)))
        return runs
    if name == "hosts":
        # The cross-host comparison on one machine: every binary between simulated hosts (HOSTSIM),
        # 2 hosts x n/2 ranks (n >= 4) and n hosts x 1, float, root 0: mid sizes with more
        # iterations (their time is the bar: at most NCCL's), large sizes for bus bandwidth.
        # `bars.py --hosts` checks every row; `--repeat 3` gives medians (these vary by call).
        n = ngpus
        mid = ["-b", "32K", "-e", "4M", "-f", "2", "-c", "1", "-n", "20", "-w", "5", "-d", "float"]
        large = ["-b", "16M", "-e", "128M", "-f", "2", "-c", "0", "-n", "5", "-w", "2", "-d", "float"]
        op = lambda t: ["-o", "sum"] if t in ("all_reduce_perf", "reduce_scatter_perf", "reduce_perf") else []
        runs = []
        for per in ([n // 2] if n >= 4 else []) + [1]:
            hosts = f"h{n // per}x{per}"
            for tag, sizes in (("", mid), ("-large", large)):
                m = mode(hosts + tag, n, mpi(n), [], wrap=[HOSTSIM, str(per)], env={"NCCL_IB_DISABLE": "1"})
                runs += [(t, m, sizes + op(t)) for t in COLLS if t != "hypercube_perf"]
        return runs
    if name == "allreduce-check":
        return [("all_reduce_perf", m, CHECK_ARGS) for m in modes_for(ngpus)]
    if name == "allreduce-perf":
        runs = []
        for n in (2, 4):
            if n <= ngpus:
                m = mode(f"np{n}", n, mpi(n), [])
                for dt in ("float", "bfloat16"):
                    runs.append(("all_reduce_perf", m, PERF_ARGS + ["-d", dt, "-o", "sum"]))
                runs.append(("all_reduce_perf", dict(m, name=f"np{n}-G"), PERF_ARGS + ["-d", "float", "-o", "sum", "-G", "20"]))
        return runs
    if name == "allreduce-quick":
        runs = []
        for n in (2, 4):
            if n <= ngpus:
                m = mode(f"np{n}", n, mpi(n), [])
                quick = ["-b", "8", "-e", "64M", "-f", "2", "-c", "0", "-n", "20", "-w", "5", "-d", "float", "-o", "sum"]
                runs.append(("all_reduce_perf", m, quick))
                runs.append(("all_reduce_perf", dict(m, name=f"np{n}-G"), quick + ["-G", "20"]))
        return runs
    raise SystemExit(f"unknown suite {name}")

def _num(x):
    try:
        return float(x)
    except ValueError:
        return None

def parse(text):
    """Rows (size, type, op, out-of-place and in-place time, busbw, #wrong) and the
    out-of-bounds verdict. Tests without a reduction (hypercube) print an empty redop column."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if not line.startswith(" ") or len(f) < 11 or not f[0].isdigit() or not f[1].isdigit():
            continue
        if re.fullmatch(r"-?\d+", f[3]):  # no redop: size count type root ...
            f = f[:3] + ["-"] + f[3:]
        rest = f[5:]
        if len(rest) < 8:
            continue
        rows.append({"bytes": int(f[0]), "type": f[2], "op": f[3],
                     "oop_us": _num(rest[0]), "oop_busbw": _num(rest[2]), "oop_wrong": rest[3],
                     "ip_us": _num(rest[4]), "ip_busbw": _num(rest[6]), "ip_wrong": rest[7]})
    oob = re.search(r"Out of bounds values\s*:\s*(\d+)\s+(\S+)", text)
    return rows, (int(oob.group(1)) if oob else None)

def command(bindir, test, m, args, preload, libdir):
    """The environment and command line of one run: oxccl's when `preload` is its library, the
    reference NCCL's (from `libdir`) otherwise."""
    env = dict(os.environ, **NCCL_TESTS_ENV, **m["env"])
    env.pop("LD_PRELOAD", None)
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if preload:
        env["LD_PRELOAD"] = preload
    cmd = list(m["launcher"])
    if cmd:  # mpirun forwards only what it is told to
        # Every NCCL_* and OXCCL_* setting too: a policy or cap set around the harness
        # (NCCL_CTA_POLICY, NCCL_MAX_CTAS) must reach the ranks mpirun starts.
        keys = ("LD_PRELOAD", "LD_LIBRARY_PATH", "NCCL_NVLS_ENABLE", "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES") + tuple(m["env"]) + tuple(k for k in env if k.startswith(("OXCCL_", "NCCL_")))
        for k in dict.fromkeys(keys):  # each once, in order
            if k in env:
                cmd += ["-x", k]
    cmd += m["wrap"] + [os.path.join(bindir, test)] + m["extra"] + list(args)
    return env, cmd

def run_one(bindir, test, m, args, preload, libdir, timeout, log):
    env, cmd = command(bindir, test, m, args, preload, libdir)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")) + f"\n[harness] TIMEOUT after {timeout}s\n"
        rc = 124
    with open(log, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + out)
    rows, oob = parse(out)
    skip = bool(re.search(r"is not a power of 2, skipping", out))
    return {"rc": rc, "rows": rows, "oob": oob, "skip": skip, "secs": time.time() - t0, "log": log}

def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

def merge(runs):
    """Repeats of one run (compare --repeat) as one: per row the median of each time and bus
    bandwidth over the repeats, and a wrong count if any repeat had one; the first failing exit
    status; out of bounds unknown if any repeat's is."""
    if len(runs) == 1:
        return runs[0]
    keyed, order = {}, []
    for r in runs:
        for x in r["rows"]:
            k = (x["bytes"], x["type"], x["op"])
            if k not in keyed:
                keyed[k] = []
                order.append(k)
            keyed[k].append(x)
    rows = []
    for k in order:
        xs = keyed[k]
        row = dict(xs[0])
        for f in ("oop_us", "oop_busbw", "ip_us", "ip_busbw"):
            row[f] = median([x[f] for x in xs])
        for f in ("oop_wrong", "ip_wrong"):
            bad = [x[f] for x in xs if x[f] not in ("0", "N/A")]
            row[f] = bad[0] if bad else xs[0][f]
        rows.append(row)
    oobs = [r["oob"] for r in runs]
    return {"rc": next((r["rc"] for r in runs if r["rc"] != 0), 0), "rows": rows,
            "oob": None if any(o is None for o in oobs) else max(oobs), "skip": any(r["skip"] for r in runs),
            "secs": sum(r["secs"] for r in runs), "log": runs[0]["log"]}

def verdict(r):
    wrong = sum(1 for x in r["rows"] for w in (x["oop_wrong"], x["ip_wrong"]) if w not in ("0", "N/A"))
    ok = r["rc"] == 0 and r["oob"] == 0 and wrong == 0 and r["rows"]
    return ok, wrong

def skipped(r):
    """The test itself declined the rank count (hypercube needs a power of two) and said so."""
    return r["rc"] == 0 and not r["rows"] and r["oob"] == 0 and r.get("skip", False)

def selected(a):
    return [r for r in suite(a.suite, a.ngpus)
            if (not a.modes or r[1]["name"] in a.modes) and (not a.tests or r[0] in a.tests)]

def cmd_check(a):
    os.makedirs(a.out, exist_ok=True)
    runs = [(i, r) for i, r in enumerate(selected(a)) if r[1]["ngpus"] <= a.ngpus]
    total = len(selected(a))
    lines = ["| run | result | rows | #wrong | out of bounds | seconds |", "|---|---|---|---|---|---|"]
    names, seen = [], set()
    for i, (test, m, args) in runs:
        name = f"{test}-{m['name']}"
        names.append(name + (f"-{i}" if name in seen else ""))
        seen.add(name)

    def one(k):
        i, (test, m, args) = runs[k]
        return run_one(a.bin, test, m, args, a.oxccl, a.nccl_libdir, a.timeout, os.path.join(a.out, names[k] + ".log"))

    # Correctness runs share the GPUs (--jobs > 1): their timings then mean nothing, their
    # verdicts everything. Results print in suite order.
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for k, r in enumerate(ex.map(one, range(len(runs)))):
            i, name = runs[k][0], names[k]
            ok, wrong = verdict(r)
            if skipped(r):
                res = "SKIP"
            else:
                failed += not ok
                res = "PASS" if ok else ("TIMEOUT" if r["rc"] == 124 else "FAIL")
            print(f"[{i + 1}/{total}] {name} {res} ({len(r['rows'])} rows, #wrong {wrong}, oob {r['oob']}, rc {r['rc']}, {r['secs']:.0f}s)", flush=True)
            lines.append(f"| {name} | {res} | {len(r['rows'])} | {wrong} | {r['oob']} | {r['secs']:.0f} |")
    with open(os.path.join(a.out, "check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0

def cmd_compare(a):
    os.makedirs(a.out, exist_ok=True)
    runs = selected(a)
    results, md = [], []
    failed = 0
    for i, (test, m, args) in enumerate(runs):
        if m["ngpus"] > a.ngpus:
            continue
        name = f"{test}-{m['name']}-" + "-".join(x for x in args if not x.startswith("-") and not x[0].isdigit())
        oxs, ncs = [], []
        for k in range(a.repeat):
            rep = "" if a.repeat == 1 else f".{k + 1}"
            print(f"[{i + 1}/{len(runs)}] {name}{rep}: oxccl ...", end=" ", flush=True)
            oxs.append(run_one(a.bin, test, m, args, a.oxccl, a.nccl_libdir, a.timeout, os.path.join(a.out, name + rep + ".oxccl.log")))
            print("nccl ...", end=" ", flush=True)
            ncs.append(run_one(a.bin, test, m, args, None, a.nccl_libdir, a.timeout, os.path.join(a.out, name + rep + ".nccl.log")))
            if k + 1 < a.repeat:
                print(flush=True)
        ox, nc = merge(oxs), merge(ncs)
        ok, _ = verdict(ox)
        failed += not ok
        print("done" if ok else f"oxccl FAILED (rc {ox['rc']})", flush=True)
        ref = {(x["bytes"], x["type"], x["op"]): x for x in nc["rows"]}
        md.append(f"\n### {name} ({m['name']}: {' '.join(m['launcher'] + m['wrap'] + m['extra'])})\n")
        md.append("| bytes | type | oxccl us | NCCL us | time ratio | oxccl busbw | NCCL busbw | busbw ratio |")
        md.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        rows = []
        for x in ox["rows"]:
            y = ref.get((x["bytes"], x["type"], x["op"]))
            if not y:
                continue
            tr = x["oop_us"] / y["oop_us"] if x["oop_us"] and y["oop_us"] else None
            br = x["oop_busbw"] / y["oop_busbw"] if x["oop_busbw"] and y["oop_busbw"] else None
            # In place too: users call both (PyTorch's all_reduce is in place), and bars.py holds
            # each row to its bar in both.
            itr = x["ip_us"] / y["ip_us"] if x["ip_us"] and y["ip_us"] else None
            ibr = x["ip_busbw"] / y["ip_busbw"] if x["ip_busbw"] and y["ip_busbw"] else None
            rows.append({"bytes": x["bytes"], "type": x["type"], "oxccl_us": x["oop_us"], "nccl_us": y["oop_us"],
                         "time_ratio": tr, "oxccl_busbw": x["oop_busbw"], "nccl_busbw": y["oop_busbw"], "busbw_ratio": br,
                         "ip_oxccl_us": x["ip_us"], "ip_nccl_us": y["ip_us"], "ip_time_ratio": itr, "ip_busbw_ratio": ibr})
            f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
            md.append(f"| {x['bytes']} | {x['type']} | {f(x['oop_us'])} | {f(y['oop_us'])} | {f(tr)} | {f(x['oop_busbw'])} | {f(y['oop_busbw'])} | {f(br)} |")
        results.append({"name": name, "mode": m["name"], "args": args, "rows": rows,
                        "oxccl_ok": ok, "oxccl_rc": ox["rc"], "nccl_rc": nc["rc"]})
    md = summary(results) + md
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, a.out)
    print("\n".join(md))
    return 1 if failed else 0

def summary(results, small=64 << 10, large=128 << 20):
    """One line per run: correctness, the worst time ratio up to `small` bytes, the geometric mean
    time ratio over all sizes, the worst busbw ratio from `large` bytes, and whether that meets
    the default bar (time ratio <= 1 up to 64 KB, busbw ratio >= 0.9 from 128 MB; bars.py checks the
    same from results.json)."""
    out = ["## Summary", "", "| run | oxccl correct | worst time ratio <= 64 KB | geomean time ratio | worst busbw ratio >= 128 MB | bar |",
           "|---|---|---:|---:|---:|---|"]
    for r in results:
        rows = r["rows"]
        tsmall = [x["time_ratio"] for x in rows if 0 < x["bytes"] <= small and x["time_ratio"] is not None]
        tall = [x["time_ratio"] for x in rows if x["time_ratio"]]
        blarge = [x["busbw_ratio"] for x in rows if x["bytes"] >= large and x["busbw_ratio"] is not None]
        geo = math.exp(sum(math.log(t) for t in tall) / len(tall)) if tall else None
        f = lambda v: "-" if v is None else f"{v:.3f}"
        worst_small = max(tsmall) if tsmall else None
        worst_large = min(blarge) if blarge else None
        meets = r["oxccl_ok"] and (worst_small is None or worst_small <= 1.0) and (worst_large is None or worst_large >= 0.9)
        out.append(f"| {r['name']} | {'yes' if r['oxccl_ok'] else 'NO'} | {f(worst_small)} | {f(geo)} | {f(worst_large)} | {'meets' if meets else 'MISSES'} |")
    return out

def plot(results, out):
    """Per run, busbw and time against size for both libraries (PNG). Skipped, with a note,
    where matplotlib is not installed: the markdown and JSON carry the same numbers."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("harness: matplotlib not installed; no plots")
        return
    for r in results:
        rows = [x for x in r["rows"] if x["oxccl_us"]]
        if not rows:
            continue
        fig, (bw, lat) = plt.subplots(1, 2, figsize=(11, 4))
        for key, label in (("oxccl", "oxccl"), ("nccl", "NCCL")):
            have = [x for x in rows if x.get(key + "_us")]
            if not have:
                continue
            sizes = [x["bytes"] for x in have]
            bw.plot(sizes, [x[key + "_busbw"] or 0 for x in have], marker="o", ms=3, label=label)
            lat.plot(sizes, [x[key + "_us"] for x in have], marker="o", ms=3, label=label)
        for ax, ylabel in ((bw, "bus bandwidth (GB/s)"), (lat, "time (us)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        lat.set_yscale("log")
        fig.suptitle(r["name"])
        fig.tight_layout()
        fig.savefig(os.path.join(out, r["name"] + ".png"), dpi=110)
        plt.close(fig)

def cmd_report(results_path, out):
    """results.md (the summary, then every size) and PNG plots from a results.json: compare's,
    or oxccl-bench's (scripts/bench.sh)."""
    with open(results_path) as f:
        results = json.load(f)
    out = out or os.path.dirname(os.path.abspath(results_path))
    os.makedirs(out, exist_ok=True)
    md = summary(results)
    f2 = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
    for r in results:
        md.append(f"\n### {r['name']}\n")
        md.append("| bytes | type | oxccl us | NCCL us | time ratio | oxccl busbw | NCCL busbw | busbw ratio |")
        md.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        for x in r["rows"]:
            md.append(f"| {x['bytes']} | {x['type']} | {f2(x['oxccl_us'])} | {f2(x['nccl_us'])} | {f2(x['time_ratio'])} | "
                      f"{f2(x['oxccl_busbw'])} | {f2(x['nccl_busbw'])} | {f2(x['busbw_ratio'])} |")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    plot(results, out)
    print("\n".join(summary(results)))
    print(f"\nharness: tables in {os.path.join(out, 'results.md')}, plots (where matplotlib is installed) in {out}")
    return 0 if all(r["oxccl_ok"] for r in results) else 1

def main():
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        rp = argparse.ArgumentParser(prog="harness.py report", description="summary, tables and plots of a results.json (compare's or oxccl-bench's)")
        rp.add_argument("results")
        rp.add_argument("--out", default=None, help="folder for results.md and the PNGs (default: the results' folder)")
        ra = rp.parse_args(sys.argv[2:])
        return cmd_report(ra.results, ra.out)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["check", "compare"])
    p.add_argument("--bin", required=True, help="folder holding the nccl-tests binaries (all_reduce_perf, ...)")
    p.add_argument("--oxccl", required=True, help="path of liboxccl.so, preloaded for oxccl runs")
    p.add_argument("--nccl-libdir", default=None, help="folder with the reference libnccl.so.2 (LD_LIBRARY_PATH)")
    p.add_argument("--suite", default=None)
    p.add_argument("--jobs", type=int, default=1, help="check: runs at once (they share the GPUs; verdicts only)")
    p.add_argument("--ngpus", type=int, default=None)
    p.add_argument("--out", default="harness-out")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run before it counts as hung")
    p.add_argument("--modes", default=None, help="comma list of mode names to run (e.g. np2,g2-G); default all")
    p.add_argument("--tests", default=None, help="comma list of test binaries to run (e.g. all_gather,hypercube); default all")
    p.add_argument("--repeat", type=int, default=1,
                   help="compare: run each pair N times, alternating oxccl and NCCL, and compare per-size medians (host-bound small sizes move between runs)")
    p.add_argument("--bind", choices=["none", "core"], default="none",
                   help="mpirun placement of single-threaded ranks: none (default) or core (--bind-to core --map-by numa)")
    p.add_argument("--list", action="store_true", help="print the suite's oxccl command lines (with --ngpus) and run nothing")
    a = p.parse_args()
    global BIND
    BIND = a.bind
    a.modes = set(a.modes.split(",")) if a.modes else None
    a.tests = {t if t.endswith("_perf") else t + "_perf" for t in a.tests.split(",")} if a.tests else None
    a.suite = a.suite or ("allreduce-check" if a.command == "check" else "allreduce-perf")
    if a.list:
        if not a.ngpus:
            p.error("--list needs --ngpus")
        for test, m, args in selected(a):
            if m["ngpus"] <= a.ngpus:
                env, cmd = command(a.bin, test, m, args, a.oxccl, a.nccl_libdir)
                sets = " ".join(f"{k}={env[k]}" for k in sorted(m["env"]))
                print(f"{m['name']}: {sets + ' ' if sets else ''}{' '.join(shlex.quote(c) for c in cmd)}")
        return 0
    if a.ngpus is None:
        try:
            a.ngpus = len(subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, text=True).stdout.strip().splitlines())
        except OSError:
            a.ngpus = 0
    if a.ngpus < 1:
        print("harness: no GPUs found (nvidia-smi -L)")
        return 1
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    return cmd_check(a) if a.command == "check" else cmd_compare(a)

if __name__ == "__main__":
    sys.exit(main())
