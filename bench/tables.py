#!/usr/bin/env python3
"""BENCHMARKS.md's tables from `nccl-tests-harness/harness.py compare` output.

    python3 bench/tables.py RESULTS.json [--ranks N]        # markdown tables on stdout
    python3 bench/tables.py RESULTS.json --slim OUT.json    # the same data, small enough for git

RESULTS.json is a harness results.json (full, or slimmed by --slim: the ratios are recomputed).
Times are microseconds (nccl-tests' "time", out of place unless the column says in place), bus
bandwidth GB/s; a ratio is oxccl / NCCL, so a time ratio below 1 or a busbw ratio above 1 means
oxccl is faster.
"""
import argparse
import json
import sys

KEEP = ("bytes", "type", "oxccl_us", "nccl_us", "oxccl_busbw", "nccl_busbw", "ip_oxccl_us", "ip_nccl_us")
NAMES = {
    "all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter", "all_gather": "AllGather",
    "alltoall": "AlltoAll", "broadcast": "Broadcast", "reduce": "Reduce", "sendrecv": "Send/Recv",
    "gather": "Gather", "scatter": "Scatter",
}


def size(b):
    for unit, n in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def coll(run):
    return run["name"].split("_perf")[0]


def variant(run):
    """(layout, kind) from the harness's mode, e.g. np4-G -> (np4, graph), h2x2-large -> (h2x2, large)."""
    parts = run["mode"].split("-")
    kind = {"G": "graph", "mid": "mid", "large": "large"}.get(parts[1] if len(parts) > 1 else "", "eager")
    return parts[0], kind


def dtype(run):
    rows = run["rows"]
    return rows[0].get("type", "float") if rows else "float"


def rows_of(runs, key):
    return {r["bytes"]: r for r in runs.get(key, {}).get("rows", [])}


def small_table(runs, gmode):
    """One collective at 8 B-64 KB, float: eager and CUDA graph (one process per GPU), and -g N."""
    eager, graph, g = rows_of(runs, "eager"), rows_of(runs, "graph"), rows_of(runs, gmode)
    out = ["| size | oxccl us | NCCL us | ratio | graph: oxccl us | NCCL us | ratio | one process: oxccl us | NCCL us | ratio |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for b in sorted(set(eager) | set(graph) | set(g)):
        if b == 0:
            continue
        cells = []
        for d in (eager.get(b, {}), graph.get(b, {}), g.get(b, {})):
            cells += [str(d.get("oxccl_us", "-")), str(d.get("nccl_us", "-")), ratio(d.get("oxccl_us"), d.get("nccl_us"))]
        out.append(f"| {size(b)} | " + " | ".join(cells) + " |")
    return out


def bw_rows(name, rows):
    return [f"| {name} | {size(r['bytes'])} | {r['oxccl_us']} | {r['nccl_us']} | {ratio(r['oxccl_us'], r['nccl_us'])} "
            f"| {r['oxccl_busbw']} | {r['nccl_busbw']} | {ratio(r['oxccl_busbw'], r['nccl_busbw'])} |" for r in rows]


BW_HEAD = ["| collective | size | oxccl us | NCCL us | time ratio | oxccl busbw | NCCL busbw | busbw ratio |",
           "|---|---|---|---|---|---|---|---|"]


def order(c):
    return list(NAMES).index(c) if c in NAMES else 99


def tables(results):
    """Single-host suites (np/g modes): per collective a small-message table, then the larger sizes.
    Cross-host suites (hAxB modes): per layout one table of time ratios, each cell ratio (oxccl/NCCL us)."""
    by = {}
    layouts = set()
    for run in results:
        layout, kind = variant(run)
        if dtype(run) != "float":
            continue
        if layout.startswith("g"):
            kind = layout
            layout = "np" + layout[1:]
        layouts.add(layout)
        by.setdefault(coll(run), {}).setdefault(layout, {})[kind] = run
    out = []
    for layout in sorted(layouts):
        if layout.startswith("np"):
            n = layout[2:]
            for c in sorted(by, key=order):
                runs = by[c].get(layout)
                if runs and ("eager" in runs or "graph" in runs):
                    out += [f"#### {NAMES.get(c, c)}, {n} GPUs, float, 8 B-64 KB", ""] + small_table(runs, "g" + n) + [""]
            big = []
            for kind in ("mid", "large"):
                for c in sorted(by, key=order):
                    run = by[c].get(layout, {}).get(kind)
                    if run:
                        big += bw_rows(NAMES.get(c, c), run["rows"])
            if big:
                out += [f"#### Larger messages, {n} GPUs, float", ""] + BW_HEAD + big + [""]
        else:
            cols = [c for c in sorted(by, key=order) if layout in by[c]]
            cells = {}
            for c in cols:
                for kind in ("eager", "large"):
                    for r in by[c][layout].get(kind, {}).get("rows", []):
                        cells[(r["bytes"], c)] = f"{ratio(r['oxccl_us'], r['nccl_us'])} ({r['oxccl_us']:g}/{r['nccl_us']:g})"
            out += [f"#### {layout[1:]} hosts x ranks, float: time ratio (oxccl / NCCL us)", "",
                    "| size | " + " | ".join(NAMES.get(c, c) for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for b in sorted({k[0] for k in cells}):
                out.append(f"| {size(b)} | " + " | ".join(cells.get((b, c), "-") for c in cols) + " |")
            out.append("")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--slim", metavar="OUT")
    a = ap.parse_args()
    results = json.load(open(a.results))
    if a.slim:
        slim = [{"name": r["name"], "mode": r["mode"], "args": r.get("args", []),
                 "oxccl_ok": r.get("oxccl_ok"), "rows": [{k: x[k] for k in KEEP if k in x} for x in r["rows"]]}
                for r in results]
        with open(a.slim, "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in slim) + "\n]\n")
        return
    bad = [r["name"] for r in results if r.get("oxccl_ok") is False]
    if bad:
        print(f"tables: oxccl reported wrong values in {', '.join(bad)}", file=sys.stderr)
        sys.exit(1)
    print("\n".join(tables(results)))


if __name__ == "__main__":
    main()
