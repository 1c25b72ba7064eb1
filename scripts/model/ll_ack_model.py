"""Randomised model check of the LL flag / deferred-acknowledgement protocol of
kernels/ll_flags.cuh for one pair of ranks: both ranks run the same sequence of launches (one-way
either direction, both ways, or no packets at all), interleaved at random, from fresh and
near-wrap-around flags. Fails on a deadlock or when a sender overwrites packets its peer has not
read yet. Keep it in step with the kernels: the wait condition is in `run`, step 0."""
import random, sys
def nxt(f): return 2 if (f + 1) & 0xFFFFFFFF == 0 else (f + 1) & 0xFFFFFFFF
def run(seq, start_flag, seed):
    rnd = random.Random(seed)
    R = ["A", "B"]
    st = {r: dict(i=0, step=0, flag=start_flag, pending=0, ack=0, f=None) for r in R}
    # scratch[reader][half] = (flag of packets, read_done)
    scratch = {r: {0: None, 1: None} for r in R}
    other = {"A": "B", "B": "A"}
    def kind(r, t):
        if t == "BI": return "both"
        if t == "PUT": return "none"
        return "send" if t[0] == r else "recv"
    steps = 0
    while any(st[r]["i"] < len(seq) for r in R):
        steps += 1
        if steps > 100000: return "livelock"
        movable = []
        for r in R:
            s = st[r]
            if s["i"] >= len(seq): continue
            t = seq[s["i"]]; k = kind(r, t); p = other[r]
            if k == "none":
                movable.append((r, "put")); continue
            if s["step"] == 0:  # load: wait
                f = s["flag"]
                if nxt(s["pending"]) == f and s["ack"] not in (s["pending"], f):
                    continue
                movable.append((r, "load"))
            elif s["step"] == 1:  # post ack / pending, write packets
                movable.append((r, "write"))
            elif s["step"] == 2:  # read packets from p if receiving
                if k in ("recv", "both"):
                    cell = scratch[r][s["f"] & 1]
                    if cell is None or cell[0] != s["f"]: continue
                movable.append((r, "read"))
        if not movable: return "deadlock at %s" % ({r: (st[r]["i"], st[r]["step"]) for r in R})
        r, act = rnd.choice(movable); s = st[r]; p = other[r]; t = seq[s["i"]]; k = kind(r, t)
        if act == "put":
            s["i"] += 1; continue
        if act == "load":
            s["f"] = s["flag"]; s["step"] = 1
        elif act == "write":
            f = s["f"]
            if k == "recv": st[p]["ack"] = f          # ack_post into the sender's table
            if k == "send": s["pending"] = f
            if k in ("send", "both"):
                cell = scratch[p][f & 1]
                if cell is not None and not cell[1]:
                    return "OVERWRITE unread packets flag %d with %d (reader %s at %s)" % (cell[0], f, p, st[p]["i"])
                scratch[p][f & 1] = (f, False)
            s["step"] = 2
        elif act == "read":
            if k in ("recv", "both"):
                scratch[r][s["f"] & 1] = (s["f"], True)
            s["flag"] = nxt(s["f"]); s["step"] = 0; s["i"] += 1
    return "ok"
bad = 0
for trial in range(20000):
    rnd = random.Random(trial)
    seq = [rnd.choice(["AB", "AB", "BA", "BI", "PUT"]) for _ in range(rnd.randint(1, 14))]
    start = rnd.choice([1, 0xFFFFFFFD, 0xFFFFFFFE, 0xFFFFFFFF])
    res = run(seq, start, trial)
    if res != "ok":
        bad += 1
        if bad < 5: print(trial, seq, hex(start), res)
print(f"ll_ack_model: {bad} of 20000 random launch sequences failed")
sys.exit(1 if bad else 0)
