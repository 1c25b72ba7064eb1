#!/usr/bin/env python3
"""Executable model of kernels/rsag.cuh rsag_body: the put-based AllReduce and the
put-based Reduce, one block, several rounds, several launches in a row.

Mirrors the kernel's order per round: reduce-scatter puts of this round, the copy-out of the
previous round (it follows the next round's puts, 6f2bad4), sync, the reduction (reading the RS
slots; writing the AG slots: every peer's, or the root's for Reduce), sync; the last round's copy-out after the loop, with no sync before the next launch.

ox_block_sync_peers is a barrier of the block across ranks (every rank signals after its prior
accesses and waits for every peer's signal), and launches of one rank follow each other with no
barrier between ranks: so a rank's program is a chain of segments between syncs, counted across
launches, and every rank's segment s runs concurrently with every other rank's segment s in any
interleaving. A slot written in a segment by one rank and read or written in the same segment by
another is a race; a read must find the tag of the data it expects (its launch, round and
writer). Every element of an output is written once, by the ranks that write outputs (all of them
for AllReduce, the root for Reduce).

  python3 scripts/model/rsag_model.py                # exit status 0 when every case passes
  python3 scripts/model/rsag_model.py --mutate=M     # M = late-copy-out | early-puts | early-ag:
                                                     # a broken order; the model must then fail
"""
import sys


def ceil_div(a, b):
    return -(-a // b)


class Race(Exception):
    pass


def program(me, n, count, S, nb, b, launch, kind, root, mutate):
    """The ops of rank `me`, block `b`, as a list of segments; an op is
    ('w', slot, tag) or ('r', slot, expected_tag) or ('out', index, value)."""
    unit = 1
    per = ceil_div(ceil_div(count, n), unit) * unit
    start = lambda j: min(j * per, count)
    length = lambda j: min((j + 1) * per, count) - start(j)
    slice_ = lambda j, o: 0 if o >= length(j) else min(S, length(j) - o)
    to_root = kind == "reduce"
    writes_out = not to_root or me == root
    peers = [(me + j) % n for j in range(1, n)]
    segs = [[]]
    cur = lambda: segs[-1]

    def sync():
        segs.append([])

    def rs_puts(o, k):
        for p in peers:
            if slice_(p, o):
                cur().append(("w", (p, "rs", me), ("rs", launch, k, me)))

    def copy_out(o, k):
        if not writes_out:
            return
        for p in peers:
            if slice_(p, o):
                slot = (me, "ag", p)
                cur().append(("r", slot, ("ag", launch, k, p)))
                for e in range(slice_(p, o)):
                    cur().append(("out", start(p) + o + e, (launch, k, p)))

    offsets = list(range(b * S, per, nb * S))
    prev = None
    for k, o in enumerate(offsets):
        if not (mutate == "early-puts" and k > 0):
            rs_puts(o, k)
        if prev is not None and mutate != "late-copy-out":
            copy_out(*prev)
        if mutate == "early-ag" and not to_root and slice_(me, o):
            for p in peers:  # the reduction's AG writes before the round's first sync
                cur().append(("w", (p, "ag", me), ("ag", launch, k, me)))
        sync()
        if prev is not None and mutate == "late-copy-out":
            copy_out(*prev)
        if slice_(me, o):
            for r in peers:
                cur().append(("r", (me, "rs", r), ("rs", launch, k, r)))
            if writes_out:
                for e in range(slice_(me, o)):
                    cur().append(("out", start(me) + o + e, (launch, k, me)))
            if to_root:
                if me != root:
                    cur().append(("w", (root, "ag", me), ("ag", launch, k, me)))
            elif mutate != "early-ag":
                for p in peers:
                    cur().append(("w", (p, "ag", me), ("ag", launch, k, me)))
        if mutate == "early-puts" and k + 1 < len(offsets):
            rs_puts(offsets[k + 1], k + 1)  # before the round's second sync
        sync()
        prev = (o, k)
    if prev is not None:
        copy_out(*prev)
    return segs, writes_out


def run(n, launches, nb, mutate):
    """launches: [(kind, count, S, root)] on a grid of nb blocks. Raises Race or AssertionError on
    a violation. Blocks have their own slots and syncs: each is checked alone, the outputs over
    all of them."""
    written = [{} for _ in range(n)]
    for b in range(nb):
        check_block(n, launches, nb, b, mutate, written)
    # Every rank that writes an output writes each element once per launch, and only those do.
    for me in range(n):
        for L, (kind, count, S, root) in enumerate(launches):
            got = sorted(i for (l, i) in written[me] if l == L)
            want = list(range(count)) if kind != "reduce" or me == root else []
            assert got == want, f"rank {me}: launch {L} ({kind}) wrote {len(got)} of {len(want)} elements"


def check_block(n, launches, nb, b, mutate, written):
    progs = [[] for _ in range(n)]  # per rank: concatenated segments across launches
    for L, (kind, count, S, root) in enumerate(launches):
        for me in range(n):
            segs, writes_out = program(me, n, count, S, nb, b, L, kind, root, mutate)
            if progs[me]:
                progs[me][-1].extend(segs[0])  # no barrier between launches
                progs[me].extend(segs[1:])
            else:
                progs[me] = segs
    for me in range(n):
        for seg in progs[me]:
            for op in seg:
                if op[0] == "out":
                    key = (op[2][0], op[1])
                    assert key not in written[me], f"rank {me}: launch {op[2][0]} writes element {op[1]} twice"
                    written[me][key] = True
    nseg = len(progs[0])
    assert all(len(p) == nseg for p in progs), "ranks disagree on the number of syncs"
    state = {}
    for s in range(nseg):
        writes = {}
        for me in range(n):
            for i, op in enumerate(progs[me][s]):
                if op[0] == "w":
                    writes.setdefault(op[1], []).append((me, i, op[2]))
        for slot, ws in writes.items():
            if len({w[0] for w in ws}) > 1:
                raise Race(f"segment {s}: slot {slot} written by ranks {sorted({w[0] for w in ws})}")
        for me in range(n):
            for i, op in enumerate(progs[me][s]):
                if op[0] != "r":
                    continue
                slot, want = op[1], op[2]
                ws = writes.get(slot, [])
                if any(w[0] != me for w in ws):
                    raise Race(f"segment {s}: rank {me} reads slot {slot} while rank {ws[0][0]} writes it")
                mine = [w for w in ws if w[1] < i]
                have = mine[-1][2] if mine else state.get(slot)
                if have != want:
                    raise AssertionError(f"segment {s}: rank {me} reads slot {slot}: wants {want}, finds {have}")
        for slot, ws in writes.items():
            state[slot] = ws[-1][2]


def cases():
    # (ranks, launches, blocks): rounds from 1 to several, slices some ranks do not have, every
    # kind after every other.
    mixes = [
        [("put", 40, 4, 0), ("put", 40, 4, 0)],
        [("put", 40, 4, 0), ("put", 37, 4, 0), ("put", 9, 4, 0)],
        [("put", 33, 2, 0), ("reduce", 33, 2, 1), ("put", 33, 2, 0), ("reduce", 50, 4, 0)],
        [("reduce", 64, 4, 2), ("put", 64, 8, 0), ("reduce", 5, 4, 1), ("put", 64, 3, 0)],
        [("put", 3, 4, 0), ("put", 100, 5, 0), ("put", 7, 1, 0)],
    ]
    for n in (2, 3, 4, 5):
        for mix in mixes:
            mix = [(k, c, S, r % n) for (k, c, S, r) in mix]
            for nb in (1, 2, 3):
                yield n, mix, nb


def main():
    mutate = None
    for a in sys.argv[1:]:
        if a.startswith("--mutate="):
            mutate = a.split("=", 1)[1]
            assert mutate in ("late-copy-out", "early-puts", "early-ag"), mutate
    bad = 0
    total = 0
    for n, mix, nb in cases():
        total += 1
        try:
            run(n, mix, nb, mutate)
        except (Race, AssertionError) as e:
            bad += 1
            if bad <= 3:
                print(f"n={n} blocks={nb} {mix}: {e}")
    print(f"rsag_model{' --mutate=' + mutate if mutate else ''}: {total - bad} of {total} cases pass")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
