#!/usr/bin/env python3
"""Executable model of the LL128 chain driver, kernels/ll128_chain.cuh, as Reduce runs it
(reduce_ll128_chain: lines along the chain root+1 -> ... -> root, in rounds through two
sub-buffers per scratch half). Broadcast (kernels/broadcast.cu) runs the same driver on the chain
root -> ... -> root-1: the same shape with another head, which the random roots below cover; only
what a rank does with a line's data differs.

Mirrors the kernel's indexing (chain positions, rounds, per-block line ranges, sub-buffers, the
pair flag's parity picking the half) and its synchronisation: a line is ready when it carries
(pair flag, round); a relaxed credit per round from the successor's block (round r is written
only after round r - 2 was read); the one-way acknowledgement of ll_flags.cuh across launches
(a writer enters launch f of a pair only once the reader has entered the pair's previous launch).
Runs several launches with random roots back to back under random interleavings of all
(rank, block) agents. A reader that finds its slot holding a line of a later round or launch
fails (it was overwritten before being read); so does a deadlock, a wrong sum at the root, or an
unbalanced credit counter.

  python3 scripts/model/reduce_ll128_model.py            # exit status 0 when every case passes
  python3 scripts/model/reduce_ll128_model.py --mutate=credits   # must fail: credits removed
  python3 scripts/model/reduce_ll128_model.py --mutate=ack       # must fail: acknowledgement removed
"""
import random, sys


def ceil_div(a, b):
    return -(-a // b)


class Fail(Exception):
    pass


def run(n, nb, sub_lines, lines, roots, seed, mutate=None):
    rnd = random.Random(seed)
    round_lines = min(sub_lines, lines)
    rounds = ceil_div(lines, round_lines)
    per = ceil_div(round_lines, nb)
    scratch = [dict() for _ in range(n)]      # (half, sub, line) -> (flag, round, value)
    pair_flag = {(r, (r + 1) % n): 1 for r in range(n)}  # per pair (writer, reader), both sides
    credits = {}                                 # (writer, block) -> signals received
    waited = {}                                  # (writer, block) -> signals consumed
    entered = {}                                 # (pair, block) -> flag the reader last entered
    outputs = []

    def launch_agents(f_index, root):
        inp = [[rnd.randrange(1000) for _ in range(lines)] for _ in range(n)]
        out = [None] * lines
        outputs.append((root, inp, out))
        flags = dict(pair_flag)
        for r in range(n):  # pairs along this launch's chain advance once, after it
            if r != root:
                pair_flag[(r, (r + 1) % n)] += 1
        agents = []
        for me in range(n):
            for b in range(nb):
                agents.append(agent(me, b, root, inp, out, flags))
        return agents

    def agent(me, b, root, inp, out, flags):
        pos = (me - root - 1) % n
        prev, nxt = (me - 1) % n, (me + 1) % n
        has_prev, has_next = pos > 0, pos < n - 1
        fp = flags[(prev, me)] if has_prev else None
        fn = flags[(me, nxt)] if has_next else None
        if has_prev:
            entered[((prev, me), b)] = fp           # ox_ll_ack_post
        if has_next and mutate != "ack":
            while entered.get(((me, nxt), b), 0) < fn - 1:  # wait for the ack of launch fn - 1
                yield
        lo = b * per
        for r in range(rounds):
            if has_next and r >= 2 and mutate != "credits":
                key = (me, b)
                target = waited.get(key, 0) + 1
                waited[key] = target
                while credits.get(key, 0) < target:
                    yield
            first = r * round_lines
            end = min(lo + per, round_lines, lines - first)
            for l in range(lo, end):
                v = inp[me][first + l]
                if has_prev:
                    slot = (fp & 1, r & 1, l)
                    while True:
                        got = scratch[me].get(slot)
                        if got is not None and got[:2] == (fp, r):
                            break
                        if got is not None and (got[0] > fp or (got[0] == fp and got[1] > r)):
                            raise Fail(f"rank {me} block {b}: line {l} of round {r} (flag {fp}) overwritten by {got[:2]}")
                        yield
                    v += got[2]
                if has_next:
                    scratch[nxt][(fn & 1, r & 1, l)] = (fn, r, v)
                else:
                    out[first + l] = v
                yield
            if has_prev and r + 2 < rounds:
                credits[(prev, b)] = credits.get((prev, b), 0) + 1

    # Launches run in order on each rank but overlap across ranks: chain them per agent.
    def serial(me, b, gens):
        for g in gens:
            yield from g

    per_agent = {}
    for i, root in enumerate(roots):
        for k, g in enumerate(launch_agents(i, root)):
            per_agent.setdefault(k, []).append(g)
    live = [serial(None, None, gs) for gs in per_agent.values()]
    idle = 0
    while live:
        i = rnd.randrange(len(live))
        try:
            next(live[i])
            idle = 0
        except StopIteration:
            live.pop(i)
            idle = 0
            continue
        idle += 1
        if idle > 200000:
            raise Fail("deadlock")
    for root, inp, out in outputs:
        for e in range(lines):
            if out[e] != sum(inp[r][e] for r in range(n)):
                raise Fail(f"root {root}: element {e} = {out[e]}")
    for key, c in credits.items():
        if c != waited.get(key, 0):
            raise Fail(f"credits of {key} unbalanced: {c} signalled, {waited.get(key, 0)} consumed")


def main():
    mutate = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--mutate=")), None)
    cases = 0
    try:
        for seed in range(60):
            rnd = random.Random(1000 + seed)
            n = rnd.choice([3, 4, 5])
            nb = rnd.choice([1, 2, 3])
            sub_lines = rnd.choice([2, 3, 5])
            lines = rnd.choice([1, sub_lines, sub_lines + 1, 3 * sub_lines + 2, 7 * sub_lines])
            roots = [rnd.randrange(n) for _ in range(4)]
            run(n, nb, sub_lines, lines, roots, seed, mutate)
            cases += 1
    except Fail as e:
        print(f"reduce_ll128_model: FAIL after {cases} cases: {e}")
        sys.exit(1)
    print(f"reduce_ll128_model: {cases} cases pass")


if __name__ == "__main__":
    main()
