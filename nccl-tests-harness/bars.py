#!/usr/bin/env python3
"""Reads the results.json of one or more `harness.py compare` runs and checks them against a
performance bar given per size range: for every run and every row whose size falls in a range, the
time ratio (oxccl / NCCL) must be at most --small-max-time up to --small-bytes, and the busbw ratio
at least --large-min-busbw from --large-bytes. Prints each miss and a summary line per run; exits
1 if anything misses. Defaults are issue 3's bar (<= 64 KB: at most NCCL's time; >= 128 MB: at
least 0.9x NCCL's busbw).

  bars.py OUT_DIR [OUT_DIR ...] [--small-bytes 65536 --small-max-time 1.0]
                                [--large-bytes 134217728 --large-min-busbw 0.9]
"""
import argparse, json, os, sys


def check(results, a):
    misses = []
    for r in results:
        bad = []
        for x in r["rows"]:
            b, tr, br = x["bytes"], x["time_ratio"], x["busbw_ratio"]
            if 0 < b <= a.small_bytes and tr is not None and tr > a.small_max_time:
                bad.append(f"{b} B time ratio {tr:.3f} > {a.small_max_time}")
            if b >= a.large_bytes and br is not None and br < a.large_min_busbw:
                bad.append(f"{b} B busbw ratio {br:.3f} < {a.large_min_busbw}")
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
    a = p.parse_args()
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
    misses = check(results, a)
    print(f"bars: {len(results)} runs, {len(misses)} miss(es)")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
