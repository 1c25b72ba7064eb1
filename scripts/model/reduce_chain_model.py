#!/usr/bin/env python3
"""Executable model of kernels/reduce_colls.cu reduce_chain (Reduce on 3+ ranks along a chain).

Mirrors the kernel's indexing (chain positions, per-block ranges, steps, slots) and its
semaphores (counters that only grow; a wait consumes one signal), and runs three launches back to
back on every rank under random interleavings of all (rank, block) agents:
  1. the tail of a put-based launch that, like rsag, reads its area-1 slots after its last sync
     and ends without a barrier;
  2. the chain Reduce;
  3. a launch that, like every put-based launch, starts by writing area 0 of every peer.
Every slot write carries a tag; every read checks it finds what it expects, so a slot
overwritten before it was read (within the chain, or by the launches around it) fails. The
root's output must equal the elementwise sum, and every semaphore must end balanced.

  python3 scripts/model/reduce_chain_model.py      # exit status 0 when every case passes
"""
import random, sys


def ceil_div(a, b):
    return -(-a // b)


class Fail(Exception):
    pass


def run(n, root, count, unit, nb, S, seed):
    rnd = random.Random(seed)
    D = 2 * n
    per = ceil_div(ceil_div(count, nb), unit) * unit
    inp = [[rnd.randrange(1000) for _ in range(count)] for _ in range(n)]
    out = [None] * count
    # scratch[rank][(area, block, src)] = (tag, values)
    scratch = [dict() for _ in range(n)]
    inbound = [dict() for _ in range(n)]   # (block, sender) -> count
    expected = [dict() for _ in range(n)]  # (block, peer) -> count
    for r in range(n):
        for b in range(nb):
            for s in range(n):
                scratch[r][(1, b, s)] = (("prev", b, s), None)

    def slot_key(j, b):
        return (j // n, b, j % n)

    def signal(frm, to, b):
        inbound[to][(b, frm)] = inbound[to].get((b, frm), 0) + 1

    def wait(me, peer, b):  # generator: consumes one signal from peer
        target = expected[me].get((b, peer), 0) + 1
        expected[me][(b, peer)] = target
        while inbound[me].get((b, peer), 0) < target:
            yield

    def agent(me, b):
        # 1. Tail of the previous launch: reads of its own area-1 slots, after its last sync.
        for s in range(n):
            if s == me:
                continue
            for _ in range(rnd.randrange(4 * D)):  # the tail may run late
                yield
            tag, _ = scratch[me][(1, b, s)]
            if tag != ("prev", b, s):
                raise Fail(f"rank {me} block {b}: previous launch's slot (1,{b},{s}) overwritten by {tag}")
        # 2. The chain.
        pos = (me - root - 1 + n) % n
        prv, nxt = (me + n - 1) % n, (me + 1) % n
        has_prev, has_next = pos > 0, pos < n - 1
        lo = min(b * per, count)
        hi = min(lo + per, count)
        steps = ceil_div(hi - lo, S)
        waited = 0
        for k in range(steps):
            if has_prev:
                yield from wait(me, prv, b)
            if has_next:
                need = k - D + 1 if k >= D else (1 if k >= n else 0)
                while waited < need:
                    yield from wait(me, nxt, b)
                    waited += 1
            yield
            j = k % D
            e0 = lo + k * S
            ln = min(S, hi - e0)
            vals = inp[me][e0:e0 + ln]
            if has_prev:
                tag, part = scratch[me][slot_key(j, b)]
                if tag != ("chain", b, k):
                    raise Fail(f"rank {me} block {b} step {k}: slot {slot_key(j, b)} holds {tag}")
                vals = [x + y for x, y in zip(part, vals)]
            yield
            if has_next:
                scratch[nxt][slot_key(j, b)] = (("chain", b, k), vals)
            else:
                out[e0:e0 + ln] = vals
            yield
            if has_next:
                signal(me, nxt, b)
            if has_prev:
                signal(me, prv, b)
        if has_next:
            while waited < steps:
                yield from wait(me, nxt, b)
                waited += 1
        # Final barrier with every peer.
        for p in range(n):
            if p != me:
                signal(me, p, b)
        for p in range(n):
            if p != me:
                yield from wait(me, p, b)
        # 3. The next launch writes area 0 of every peer at once.
        for p in range(n):
            if p != me:
                yield
                scratch[p][(0, b, me)] = (("next", b, me), None)

    agents = [agent(r, b) for r in range(n) for b in range(nb)]
    live = list(range(len(agents)))
    stalls = 0
    while live:
        i = rnd.choice(live)
        try:
            next(agents[i])
        except StopIteration:
            live.remove(i)
        stalls += 1
        if stalls > 10_000_000:
            raise Fail("no progress")
    want = [sum(inp[r][e] for r in range(n)) for e in range(count)]
    if out != want:
        bad = next(e for e in range(count) if out[e] != want[e])
        raise Fail(f"output element {bad}: {out[bad]} != {want[bad]}")
    for r in range(n):
        for key, v in inbound[r].items():
            if expected[r].get(key, 0) != v:
                raise Fail(f"rank {r}: semaphore {key} signalled {v}, waited {expected[r].get(key, 0)}")


def main():
    cases = 0
    for n in (3, 4, 5, 8):
        for root in sorted({0, 1, n - 1}):
            for count, unit, nb, S in ((1, 4, 1, 4), (37, 4, 2, 4), (200, 4, 3, 8), (1000, 1, 2, 16), (64, 4, 4, 4)):
                for seed in range(6):
                    try:
                        run(n, root, count, unit, nb, S, seed)
                    except Fail as e:
                        print(f"FAIL n={n} root={root} count={count} unit={unit} blocks={nb} S={S} seed={seed}: {e}")
                        return 1
                    cases += 1
    print(f"reduce_chain model: {cases} cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
