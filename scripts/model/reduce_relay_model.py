#!/usr/bin/env python3
"""Executable model of kernels/reduce_colls.cu reduce_relay (Reduce on 3+ ranks by relay).

Mirrors the kernel's indexing (holders, pieces, chunks, scratch areas and slots) and runs it with
the most adversarial schedule the per-round syncs allow: after rank A's sync of round k, A's
round k+1 puts may land before any other rank's post-sync work of round k, and that post-sync
work may be arbitrarily late until the next sync. Every scratch slot carries a tag of what was
written; every read checks it finds exactly the data it expects (a lost or overwritten slot
fails), and the root's output must equal the elementwise sum of all inputs.

  python3 scripts/model/reduce_relay_model.py      # exit status 0 when every case passes
"""
import itertools, random, sys


def ceil_div(a, b):
    return -(-a // b)


def run(n, root, count, unit, nb, S, seed):
    m = n - 1
    per = ceil_div(ceil_div(count, m), unit) * unit
    start = lambda i: min(i * per, count)
    length = lambda i: min((i + 1) * per, count) - start(i)
    slice_ = lambda i, o: 0 if o >= length(i) else min(S, length(i) - o)
    holder_rank = lambda i: i if i < root else i + 1
    rnd = random.Random(seed)
    inp = [[rnd.randrange(1000) for _ in range(count)] for _ in range(n)]
    out = [None] * count
    # scratch[rank][area][(block, src)] = (tag, values)
    scratch = [[{}, {}] for _ in range(n)]
    rounds = ceil_div(per, nb * S)

    def pre(me, k, b):  # puts of round k by rank me, block b
        if k >= rounds:
            return
        o = (k * nb + b) * S
        for j in range(m):
            i = (j + b % m) % m
            p = holder_rank(i)
            ln = slice_(i, o)
            if p == me or ln == 0:
                continue
            vals = inp[me][start(i) + o: start(i) + o + ln]
            scratch[p][k & 1][(b, me)] = (("contrib", k, i), vals)

    def post(me, k, b):  # work after the round-k sync
        o = (k * nb + b) * S
        if me != root:
            mine = me if me < root else me - 1
            ln = slice_(mine, o) if k < rounds else 0
            if ln:
                acc = []
                for e in range(ln):
                    s = 0
                    for r in range(n):
                        if r == me:
                            s += inp[me][start(mine) + o + e]
                        else:
                            tag, vals = scratch[me][k & 1].get((b, r), (None, None))
                            assert tag == ("contrib", k, mine), f"holder {me} round {k} block {b}: slot from {r} holds {tag}"
                            s += vals[e]
                    acc.append(s)
                scratch[root][(k + 1) & 1][(b, me)] = (("result", k, mine), acc)
        elif k > 0:
            o1 = ((k - 1) * nb + b) * S
            for j in range(m):
                i = (j + b % m) % m
                p = holder_rank(i)
                ln = slice_(i, o1)
                if ln == 0:
                    continue
                tag, vals = scratch[root][k & 1].get((b, p), (None, None))
                assert tag == ("result", k - 1, i), f"root round {k} block {b}: slot from {p} holds {tag}"
                for e in range(ln):
                    assert out[start(i) + o1 + e] is None, "element written twice"
                    out[start(i) + o1 + e] = vals[e]

    # Adversarial schedule per round: everyone's round-k puts, then sync k; then the next
    # round's puts of a random subset of ranks land BEFORE the round-k post-sync work of the
    # others (allowed: only the round k+1 sync orders them), then the rest.
    early = set()
    for k in range(rounds + 1):
        for me in range(n):
            if me not in early:
                for b in range(nb):
                    pre(me, k, b)
        # sync k: nothing crosses it
        early = set(r for r in range(n) if rnd.random() < 0.5)
        for me in early:
            for b in range(nb):
                pre(me, k + 1, b)
        order = list(range(n))
        rnd.shuffle(order)
        for me in order:
            for b in range(nb):
                post(me, k, b)
    want = [sum(inp[r][e] for r in range(n)) for e in range(count)]
    assert out == want, f"n={n} root={root} count={count}: wrong result"


def main():
    cases = 0
    for n, count, unit, nb, S in itertools.product([3, 4, 5], [1, 7, 64, 1000, 4099], [1, 4], [1, 3, 4], [1, 4, 16]):
        for root in range(n):
            run(n, root, count, unit, nb, S, seed=cases)
            cases += 1
    print(f"reduce_relay model: {cases} cases passed")


if __name__ == "__main__":
    main()
