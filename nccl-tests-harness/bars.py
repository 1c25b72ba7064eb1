#!/usr/bin/env python3
"""Reads the results.json of one or more `harness.py compare` runs and checks them against a
performance bar given per size range: for every run and every row whose size falls in a range, the
time ratio (oxccl / NCCL) must be at most --small-max-time up to --small-bytes, and the busbw ratio
at least --large-min-busbw from --large-bytes. Prints each miss and a summary line per run; exits
1 if anything misses. Defaults are the default bar (<= 64 KB: at most NCCL's time; >= 128 MB: at
least 0.9x NCCL's busbw).

  bars.py OUT_DIR [OUT_DIR ...] [--small-bytes 65536 --small-max-time 1.0]
                                [--large-bytes 134217728 --large-min-busbw 0.9]
  bars.py --one-host N OUT_DIR ...   the one-host target table at N GPUs
  bars.py --hosts OUT_DIR ...     the cross-host bar (`harness.py compare --suite hosts`): at every
                                   size, at most NCCL's time (so at least its busbw)
"""
import argparse, json, os, sys

KB, MB = 1 << 10, 1 << 20
# The one-host targets, ranks -> rows: (label, binaries, mode kind, lowest and highest bytes, measure,
# bar). Mode kinds: "eager" (npN), "graph" (npN-G), "single" (gN, one process); measure "time"
# means time ratio <= bar, "busbw" means busbw ratio >= bar. AllReduce's small rows differ by rank
# count; the rest are the same at 2 and 4 GPUs.
OTHERS = ("all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "broadcast_perf", "reduce_perf", "sendrecv_perf")
def one_host_rows(n):
    ar = ("all_reduce_perf",)
    return [
        ("AllReduce <= 64 KB, eager", ar, "eager", 1, 64 * KB, "time", 0.6 if n <= 2 else 0.5),
        ("AllReduce <= 64 KB, CUDA graph", ar, "graph", 1, 64 * KB, "time", 0.35 if n <= 2 else 0.3),
        ("AllReduce 256 KB - 32 MB", ar, "eager", 256 * KB, 32 * MB, "time", 0.8),
        ("AllReduce >= 128 MB", ar, "eager", 128 * MB, None, "busbw", 1.1),
        ("others <= 64 KB, eager", OTHERS, "eager", 1, 64 * KB, "time", 0.8),
        ("others <= 64 KB, CUDA graph", OTHERS, "graph", 1, 64 * KB, "time", 0.8),
        ("others >= 128 MB", OTHERS, "eager", 128 * MB, None, "busbw", 1.05),
        (f"single process -g {n} <= 64 KB", ar + OTHERS, "single", 1, 64 * KB, "time", 1.0),
    ]


def mode_kind(mode):
    if mode.startswith("g"):
        return "single"
    return "graph" if mode.endswith("-G") else "eager"


def ratios(x, measure):
    """A row's ratios of one measure: out of place, and in place where the results have it
    (older results have out of place only)."""
    keys = ("time_ratio", "ip_time_ratio") if measure == "time" else ("busbw_ratio", "ip_busbw_ratio")
    return [(place, x[k]) for place, k in zip(("out of place", "in place"), keys) if x.get(k) is not None]


def check_one_host(results, n):
    """Every row of the one-host target table at n ranks: its worst ratio over all runs and sizes it covers,
    and each size that misses. A row no run covers is reported as not measured (and misses)."""
    misses = 0
    for label, tests, kind, lo, hi, measure, bar in one_host_rows(n):
        worst, bad, seen = None, [], 0
        for r in results:
            test = r["name"].split("-")[0]
            if test not in tests or mode_kind(r["mode"]) != kind:
                continue
            if not r.get("oxccl_ok", True):
                bad.append(f"{r['name']}: oxccl run failed")
            for x in r["rows"]:
                b = x["bytes"]
                if b < lo or (hi is not None and b > hi):
                    continue
                for place, v in ratios(x, measure):
                    seen += 1
                    if measure == "time":
                        worst = v if worst is None else max(worst, v)
                        ok = v <= bar
                    else:
                        worst = v if worst is None else min(worst, v)
                        ok = v >= bar
                    if not ok:
                        ty = f" {x['type']}" if x.get("type") else ""
                        bad.append(f"{r['name']} {b} B{ty} {place}: {v:.3f}")
        if not seen:
            bad.append("not measured")
        verdict = "met" if not bad else "MISSED"
        sign = "<=" if measure == "time" else ">="
        shown = "-" if worst is None else f"{worst:.3f}"
        print(f"{n} GPUs | {label} | {measure} ratio {sign} {bar} | worst {shown} over {seen} rows | {verdict}")
        for m in bad:
            print(f"    {m}")
        misses += bool(bad)
    print(f"bars --one-host: {misses} of {len(one_host_rows(n))} rows missed at {n} GPUs")
    return misses


def check(results, a):
    misses = []
    for r in results:
        bad = []
        for x in r["rows"]:
            b = x["bytes"]
            for place, tr in ratios(x, "time"):
                if 0 < b <= a.small_bytes and tr > a.small_max_time:
                    bad.append(f"{b} B {place} time ratio {tr:.3f} > {a.small_max_time}")
            for place, br in ratios(x, "busbw"):
                if b >= a.large_bytes and br < a.large_min_busbw:
                    bad.append(f"{b} B {place} busbw ratio {br:.3f} < {a.large_min_busbw}")
        if not r.get("oxccl_ok", True):
            bad.append("oxccl run failed")
        print(f"{r['name']}: {'meets the bar' if not bad else f'{len(bad)} miss(es)'}")
        for m in bad:
            print(f"    {m}")
        misses += bad
    return misses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+")
    p.add_argument("--small-bytes", type=int, default=64 << 10)
    p.add_argument("--small-max-time", type=float, default=1.0)
    p.add_argument("--large-bytes", type=int, default=128 << 20)
    p.add_argument("--large-min-busbw", type=float, default=0.9)
    p.add_argument("--one-host", type=int, default=None, metavar="N", help="check the one-host target table at N GPUs instead")
    p.add_argument("--hosts", action="store_true", help="check the cross-host bar: every size at most NCCL's time")
    a = p.parse_args()
    if a.hosts:
        a.small_bytes, a.small_max_time, a.large_bytes = 1 << 62, 1.0, 1 << 62
    results = []
    for d in a.dirs:
        path = os.path.join(d, "results.json")
        try:
            with open(path) as f:
                results += json.load(f)
        except (OSError, ValueError) as e:
            print(f"bars: cannot read {path}: {e}")
            return 2
    if not results:
        print("bars: no runs in the results")
        return 2
    if a.one_host:
        return 1 if check_one_host(results, a.one_host) else 0
    misses = check(results, a)
    print(f"bars: {len(results)} runs, {len(misses)} miss(es)")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
