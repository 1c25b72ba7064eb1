"""Randomised model check of the ring one-shot AllReduce's chain (kernels/allreduce.cu) for one pair
of ranks: both run the same sequence of ring launches, each rank marking its own launches as a
head (H: waits first), early (E: packets before its wait, trigger after it) or early at entry
(X: trigger as soon as the chain word shows the launch before it past its wait), as the host may.
Launches of one rank start once the previous one triggered (PDL), wait for the previous one to
complete, and every step of every started launch interleaves at random with the rest. Fails on a
deadlock or when a launch overwrites a ring slot whose packets the peer has not read yet.
--slots=N (default 8) and --mutate=nochain (entry launches trigger at once) show what the rules
buy. The kernels' argument shows 6 slots suffice; this model finds 4 too few and no failure at 5;
the kernels use 8. Keep it in step with the kernels."""
import random, sys

SLOTS = 8
MUTATE = None


def run(marks, seed):
    rnd = random.Random(seed)
    n = len(marks["A"])
    other = {"A": "B", "B": "A"}
    # Per rank and launch: done steps. Steps: start, wait, trig, write, read, chain (E/X: the chain
    # word store after the wait), complete.
    st = {r: [set() for _ in range(n)] for r in "AB"}
    pos = {r: [] for r in "AB"}
    for r in "AB":
        for i, m in enumerate(marks[r]):
            pos[r].append(0 if m == "H" else pos[r][i - 1] + 1)
    word = {"A": None, "B": None}  # the chain word
    scratch = {r: {} for r in "AB"}  # scratch[reader][slot] = [flag, read]
    steps = 0
    while not all("complete" in st[r][-1] for r in "AB"):
        steps += 1
        if steps > 200000:
            return "livelock"
        moves = []
        for r in "AB":
            for i in range(n):
                d, m, p = st[r][i], marks[r][i], other[r]
                prev = st[r][i - 1] if i else None
                if "start" not in d:
                    if i == 0 or "trig" in prev:
                        moves.append((r, i, "start"))
                    continue
                if "complete" in d:
                    continue
                can_wait = i == 0 or "complete" in prev
                if m == "H":
                    if "wait" not in d:
                        if can_wait:
                            moves.append((r, i, "wait"))
                        continue
                    if "trig" not in d:
                        moves.append((r, i, "trig"))
                    if "write" not in d:
                        moves.append((r, i, "write"))
                else:
                    if "write" not in d:
                        moves.append((r, i, "write"))
                    if m == "X" and "trig" not in d:
                        ok = MUTATE == "nochain" or (word[r] is not None and word[r] >= pos[r][i] - 1)
                        if ok:
                            moves.append((r, i, "trig"))
                    if "wait" not in d and "write" in d and can_wait:
                        moves.append((r, i, "wait"))
                    if "wait" in d and "chain" not in d:
                        moves.append((r, i, "chain"))
                    if m == "E" and "wait" in d and "trig" not in d:  # any thread, not only the chain word's
                        moves.append((r, i, "trig"))
                ready = "wait" in d and "write" in d
                if ready and "read" not in d:
                    cell = scratch[r].get((i + 1) % SLOTS)
                    if cell is not None and cell[0] == i + 1:
                        moves.append((r, i, "read"))
                if "read" in d and "trig" in d:
                    moves.append((r, i, "complete"))
        if not moves:
            return "deadlock at %s" % {r: [sorted(x) for x in st[r]] for r in "AB"}
        r, i, act = rnd.choice(moves)
        st[r][i].add(act)
        f = i + 1
        if act == "trig" and marks[r][i] == "H":
            word[r] = 0  # stored and fenced before the head's trigger
        elif act == "chain":
            word[r] = pos[r][i]
        elif act == "write":
            p = other[r]
            cell = scratch[p].get(f % SLOTS)
            if cell is not None and not cell[1]:
                return "OVERWRITE unread packets of flag %d with %d (rank %s reading, its launches %s)" % (
                    cell[0], f, p, [sorted(x) for x in st[p]])
            scratch[p][f % SLOTS] = [f, False]
        elif act == "read":
            scratch[r][f % SLOTS][1] = True
    return None


def main():
    global SLOTS, MUTATE
    for a in sys.argv[1:]:
        if a.startswith("--slots="):
            SLOTS = int(a.split("=")[1])
        elif a.startswith("--mutate="):
            MUTATE = a.split("=")[1]
    rnd = random.Random(7)
    cases = 3000
    for c in range(cases):
        n = rnd.randint(2, 14)
        marks = {}
        for r in "AB":
            # Mostly long chains (the case that runs ahead), sometimes a head in between.
            marks[r] = ["H"] + [rnd.choice("EXXXXH" if c % 3 else "EEXH") for _ in range(n - 1)]
        err = run(marks, c)
        if err:
            print("ring_chain_model: FAIL case %d %s: %s" % (c, marks, err))
            sys.exit(1)
    print("ring_chain_model: %d random launch sequences pass (%d slots%s)" % (cases, SLOTS, ", " + MUTATE if MUTATE else ""))


main()
