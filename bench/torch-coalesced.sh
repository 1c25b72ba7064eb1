#!/bin/bash
# PyTorch's coalesced operations (bench/torch_coalesced.py) under NVIDIA's NCCL and under oxccl in
# the same run, ROUNDS times each (default 3), interleaved: one table of each library's median
# time per group (the median over rounds, with the rounds' range) and their ratio.
#
#   bash bench/torch-coalesced.sh [LIB] [NPROC]
#
# LIB: oxccl's library (default target/release/liboxccl.so); NPROC: ranks (default: every GPU).
# PyTorch's own libnccl.so.2 is the NCCL side. Exits non-zero when a result is wrong under
# either library.
. "$(dirname "$0")/torch-setup.sh" "$@"
rc=0
ROUNDS=${ROUNDS:-3}
for k in $(seq 1 "$ROUNDS"); do
  for lib in nccl oxccl; do
    pre=(); [ $lib = oxccl ] && pre=(env LD_PRELOAD="$LIB")
    "${pre[@]}" $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$HERE/torch_coalesced.py" --iters "${ITERS:-200}" --out "$W/$lib-$k.json" > "$W/$lib-$k.log" 2>&1 || { rc=1; echo "$lib run $k failed:"; grep -v "^\s*$" "$W/$lib-$k.log" | tail -5; }
  done
done
$PY - "$W" "$ROUNDS" <<'EOF'
import json, os, statistics, sys
w, rounds = sys.argv[1], int(sys.argv[2])
def load(lib):
    return [json.load(open(f"{w}/{lib}-{k}.json"))["cases"] for k in range(1, rounds + 1) if os.path.exists(f"{w}/{lib}-{k}.json")]
nc, ox = load("nccl"), load("oxccl")
if not nc or not ox:
    sys.exit("missing results")
def summary(runs, case):
    v = [r[case]["us"] for r in runs if r[case]["us"] is not None]
    return (statistics.median(v), min(v), max(v)) if v else None
fmt = lambda x: f"{x[0]:.1f} ({x[1]:.0f}-{x[2]:.0f})" if x else "FAIL"
print(f"{'case':28} {'bytes':>10} {'NCCL us (range)':>20} {'oxccl us (range)':>20} {'ratio':>6}")
for case, v in nc[0].items():
    a, b = summary(nc, case), summary(ox, case)
    ratio = f"{b[0] / a[0]:.2f}" if a and b else "-"
    print(f"{case:28} {v['bytes']:>10} {fmt(a):>20} {fmt(b):>20} {ratio:>6}")
print(f"(each round: the median of {os.environ.get('ITERS', '200')} groups; median over {rounds} interleaved rounds, their range in brackets; ratio = oxccl / NCCL)")
EOF
exit $rc
