#!/usr/bin/env python3
"""Lines up OXCCL_NET_TRACE files of every rank of a simulated multi-host run (one machine, one
CLOCK_MONOTONIC): the proxy's steps (oxccl-net-trace.<pid>.txt: taken, packets, exchange start and
end, finished) and the streams' marks (oxccl-net-stream.<pid>.txt: when each rank's stream reached
each launch of a cross-host call: begin, step, local, complete).

  net_trace_lineup.py DIR [FIRST [COUNT [PER_HOST]]]

prints calls FIRST..FIRST+COUNT-1 (default 20..35) of every rank, us from the earliest time shown
(with the host's time of recording each mark in brackets, where the trace has it),
then per rank the median of each gap over all calls but the first tenth: where the stream waited
(begin -> step: the step kernel, or its hand-over; step -> local: the host-local launch; local ->
complete: the wait for the proxy and the copies out) and where the proxy did.

With PER_HOST (ranks per simulated host, consecutive ranks): per rank, how long its host-local
launch ran (step -> local) and how long after the other ranks of its host had ended theirs it
ended (a receive that ends long after its sender waited on something else; session 50 found the
abort flag's reads that way).

Calls and steps are paired by their order: right for calls of one cross-host step each (Send/Recv,
Broadcast, AllGather at 2 hosts); for others read the two lists apart."""
import glob, statistics, sys


def load(d):
    ranks = {}
    for f in glob.glob(d + "/oxccl-net-trace.*.txt"):
        head = open(f).readline().split()
        rows = [list(map(int, l.split())) for l in open(f) if not l.startswith("#")]
        ranks.setdefault(int(head[2]), {})["steps"] = rows
    for f in glob.glob(d + "/oxccl-net-stream.*.txt"):
        head = open(f).readline().split()
        calls = []
        for l in open(f):
            if l.startswith("#"):
                continue
            f = l.split()
            label, ns = f[0], f[1]
            if label == "begin" or not calls:
                calls.append({})
            calls[-1][label] = int(ns)
            # Since session 48 a third column: when the host recorded the mark.
            if len(f) > 2:
                calls[-1]["h" + label] = int(f[2])
        ranks.setdefault(int(head[2]), {})["calls"] = calls
    return ranks


def main():
    d = sys.argv[1]
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    ranks = load(d)
    if not ranks:
        sys.exit(f"no OXCCL_NET_TRACE files in {d}")
    times = [v for r in ranks.values() for i in range(first, first + count)
             for v in list(r.get("calls", [{}] * (i + 1))[i:i + 1][0].values()) + ([x for x in r["steps"][i][1:] if x] if i < len(r.get("steps", [])) else [])]
    t0 = min(times) if times else 0
    us = lambda ns: f"{(ns - t0) / 1000:8.1f}" if ns else "       -"
    for i in range(first, first + count):
        parts = []
        for rk in sorted(ranks):
            r = ranks[rk]
            c = r.get("calls", [])[i] if i < len(r.get("calls", [])) else {}
            s = r.get("steps", [])[i] if i < len(r.get("steps", [])) else None
            marks = " ".join(f"{k[0]}{us(c[k])}" + (f"(h{us(c['h' + k])})" if "h" + k in c else "") for k in ("begin", "step", "local", "complete") if k in c)
            proxy = f" | taken{us(s[1])} done{us(s[5])}" if s else ""
            parts.append(f"r{rk}: {marks}{proxy}")
        print(f"call {i}: " + " || ".join(parts))
    print()
    for rk in sorted(ranks):
        r = ranks[rk]
        calls, steps = r.get("calls", []), r.get("steps", [])
        skip = len(calls) // 10
        def med(pairs):
            v = [b - a for a, b in pairs if a and b]
            return f"{statistics.median(v) / 1000:.1f}" if v else "-"
        cs = calls[skip:]
        out = [f"rank {rk}:"]
        out.append("begin->step " + med((c.get("begin"), c.get("step")) for c in cs))
        out.append("step->local " + med((c.get("step"), c.get("local")) for c in cs))
        out.append("local->complete " + med((c.get("local"), c.get("complete")) for c in cs))
        out.append("call->next " + med((a.get("begin"), b.get("begin")) for a, b in zip(cs, cs[1:])))
        # How late the GPU reached each mark after the host had recorded it: near 0 means the host
        # was the late one (the stream had run dry), large means the GPU was still busy.
        for k in ("step", "local", "complete"):
            if any("h" + k in c for c in cs):
                out.append(f"{k}: host->gpu " + med((c.get("h" + k), c.get(k)) for c in cs))
        ss = steps[skip:]
        out.append("| proxy taken->done " + med((s[1], s[5]) for s in ss))
        out.append("stream begin->taken " + med((c.get("begin"), s[1]) for c, s in zip(cs, ss)))
        out.append("done->stream end " + med((s[5], c.get("complete") or c.get("local") or c.get("step")) for c, s in zip(cs, ss)))
        print(" ".join(out))
    if len(sys.argv) > 4:
        local_lag(ranks, int(sys.argv[4]))


def local_lag(ranks, per_host):
    """Per rank: step -> local (the host-local launch) and its end after its host peers' ends."""
    def stats(v):
        v = sorted(v)
        return f"p50 {v[len(v) // 2] / 1000:.1f} p90 {v[int(len(v) * 0.9)] / 1000:.1f} max {v[-1] / 1000:.1f}" if v else "-"
    print()
    for rk in sorted(ranks):
        calls = ranks[rk].get("calls", [])
        peers = [p for p in ranks if p != rk and p // per_host == rk // per_host]
        run, lag = [], []
        for i, c in enumerate(calls[len(calls) // 10:], start=len(calls) // 10):
            if "step" in c and "local" in c:
                run.append(c["local"] - c["step"])
            ends = [ranks[p]["calls"][i]["local"] for p in peers if i < len(ranks[p].get("calls", [])) and "local" in ranks[p]["calls"][i]]
            if "local" in c and ends:
                lag.append(c["local"] - max(ends))
        long = sum(r > 1_000_000 for r in run)
        print(f"rank {rk}: local launch {stats(run)} (over 1 ms: {long} of {len(run)}) | ends after host peers {stats(lag)}")


if __name__ == "__main__":
    main()
