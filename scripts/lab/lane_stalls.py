#!/usr/bin/env python3
"""Where the slow cross-host steps of a simulated multi-host run went, from OXCCL_NET_TRACE's files
(one machine, one CLOCK_MONOTONIC): the proxy's steps (oxccl-net-trace.<pid>.txt) and the link
threads' jobs (oxccl-net-lanes.<pid>.txt: thread, posted, taken, finished, bytes, flags; flag 1:
the thread had blocked for the job).

  lane_stalls.py DIR [SLOWEST]

prints, per kind of thread (send, receive) and whether it had blocked, how long jobs waited to be
taken (taken - posted) and took (finished - taken); then the SLOWEST (default 8) steps, by the
time from the last rank taking its trigger to the last finishing (the ranks' skew before that is
shown apart: a late launch or barrier exit, which NCCL sees as well), with every job posted during
them, in us from the first trigger. Steps are paired across ranks by their order (every rank runs
every step of a collective across hosts)."""
import glob, re, statistics, sys

NAME = re.compile(r"oxccl-net(\d+)([<>])(\d+)\.(\d+)$")


def load(d):
    steps, jobs = {}, []
    for f in glob.glob(d + "/oxccl-net-trace.*.txt"):
        head = open(f).readline().split()
        steps[int(head[2])] = [list(map(int, l.split())) for l in open(f) if not l.startswith("#")]
    for f in glob.glob(d + "/oxccl-net-lanes.*.txt"):
        for l in open(f):
            p = l.split()
            m = NAME.match(p[0]) if p else None
            if not m or len(p) != 6:
                continue
            posted, taken, done, nbytes, flags = map(int, p[1:])
            jobs.append(dict(me=int(m[1]), send=m[2] == ">", peer=int(m[3]), lane=int(m[4]), posted=posted, taken=taken, done=done, bytes=nbytes, blocked=bool(flags & 1), failed=bool(flags & 2)))
    return steps, jobs


def q(v):
    if not v:
        return "-"
    v = sorted(v)
    pick = lambda f: v[min(len(v) - 1, int(f * len(v)))]
    return f"n {len(v):6d} median {pick(0.5):8.1f} p90 {pick(0.9):8.1f} p99 {pick(0.99):8.1f} max {v[-1]:8.1f}"


def lone_stalls(jobs, factor=4.0, floor_us=2000.0):
    """Receives far slower than their sibling lanes: the other lanes of the same rank and peer
    whose jobs were posted together (within 100 us), i.e. one striped transfer. A lane that takes
    `factor` times its siblings' median, and `floor_us` or more, waited on TCP itself (a segment
    lost or held at the end of a burst: fifty-fourth pass), not on the sender or the proxy."""
    by_pair = {}
    for j in jobs:
        if not j["send"]:
            by_pair.setdefault((j["me"], j["peer"]), []).append(j)
    found = []
    for v in by_pair.values():
        v.sort(key=lambda j: j["posted"])
        i = 0
        while i < len(v):
            k = i
            while k + 1 < len(v) and v[k + 1]["posted"] - v[i]["posted"] <= 100_000:
                k += 1
            group = v[i : k + 1]
            if len(group) > 1:
                for j in group:
                    rest = [(o["done"] - o["taken"]) / 1e3 for o in group if o is not j]
                    took = (j["done"] - j["taken"]) / 1e3
                    if took >= floor_us and took >= factor * statistics.median(rest):
                        found.append((took, j, statistics.median(rest)))
            i = k + 1
    found.sort(key=lambda f: -f[0])
    print(f"\nlone lane stalls (a receive {factor:g}x its sibling lanes' median and {floor_us / 1e3:g} ms or more): {len(found)}")
    for took, j, sib in found[:10]:
        print(f"  rank {j['me']} from {j['peer']} lane {j['lane']}: {took:8.1f} us, its siblings {sib:8.1f} us, {j['bytes']} B")


def main():
    d = sys.argv[1]
    slowest = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    steps, jobs = load(d)
    print(f"{len(steps)} ranks' step traces, {len(jobs)} link jobs")
    for send in (True, False):
        for blocked in (False, True):
            sel = [j for j in jobs if j["send"] == send and j["blocked"] == blocked]
            kind = ("send" if send else "recv") + (" after blocking" if blocked else " (thread was spinning or busy)")
            print(f"{kind}:\n  taken - posted   {q([(j['taken'] - j['posted']) / 1e3 for j in sel])}\n  finished - taken {q([(j['done'] - j['taken']) / 1e3 for j in sel])}")
    lone_stalls(jobs)
    if not steps:
        return
    n = min(len(v) for v in steps.values())
    spans = []
    for i in range(n):
        t0 = min(steps[r][i][1] for r in steps)
        late = max(steps[r][i][1] for r in steps)
        t1 = max(steps[r][i][5] for r in steps)
        spans.append((t1 - late, i, t0, t1, late - t0))
    spans.sort(reverse=True)
    med = lambda k: statistics.median(s[k] for s in spans) / 1e3
    print(f"\nsteps: {n}; median us: from the last trigger {med(0):.1f}, skew of the triggers {med(4):.1f}")
    print(f"slowest {slowest} by the time from the last rank's trigger to the last finish:")
    for span, i, t0, t1, skew in spans[:slowest]:
        us = lambda t: (t - t0) / 1e3
        print(f"\nstep {i}: {span / 1e3:.0f} us after the last trigger ({skew / 1e3:.0f} us of skew before it), bytes {steps[min(steps)][i][0]}")
        for r in sorted(steps):
            s = steps[r][i]
            print(f"  rank {r}: trigger {us(s[1]):8.1f} finished {us(s[5]):8.1f}")
        for j in sorted((j for j in jobs if t0 <= j["posted"] <= t1), key=lambda j: j["posted"]):
            arrow = ">" if j["send"] else "<"
            print(f"    {j['me']}{arrow}{j['peer']}.{j['lane']} {j['bytes']:9d} B posted {us(j['posted']):8.1f} taken {us(j['taken']):8.1f}{' (woke)' if j['blocked'] else '       '} finished {us(j['done']):8.1f}")


if __name__ == "__main__":
    main()
