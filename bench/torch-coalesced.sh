#!/bin/bash
# PyTorch's coalesced operations (bench/torch_coalesced.py) under NVIDIA's NCCL and under oxccl in
# the same run, twice each, interleaved: one table of median times per group and their ratio.
#
#   bash bench/torch-coalesced.sh [LIB] [NPROC]
#
# LIB: oxccl's library (default target/release/liboxccl.so); NPROC: ranks (default: every GPU).
# PyTorch's own libnccl.so.2 is the NCCL side. Exits non-zero when a result is wrong under
# either library.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
LIB=$(realpath "${1:-$HERE/../target/release/liboxccl.so}")
NPROC=${2:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
PY=${PYTHON:-python3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
[ -f "$LIB" ] || { echo "no library at $LIB"; exit 2; }
echo "oxccl: $LIB; $NPROC ranks; torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
rc=0
for k in 1 2; do
  for lib in nccl oxccl; do
    pre=(); [ $lib = oxccl ] && pre=(env LD_PRELOAD="$LIB")
    "${pre[@]}" $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$HERE/torch_coalesced.py" --out "$W/$lib-$k.json" > "$W/$lib-$k.log" 2>&1 || { rc=1; echo "$lib run $k failed:"; grep -v "^\s*$" "$W/$lib-$k.log" | tail -5; }
  done
done
$PY - "$W" <<'EOF'
import json, sys, os
w = sys.argv[1]
def load(lib):
    runs = [json.load(open(f"{w}/{lib}-{k}.json"))["cases"] for k in (1, 2) if os.path.exists(f"{w}/{lib}-{k}.json")]
    return runs
nc, ox = load("nccl"), load("oxccl")
if not nc or not ox:
    sys.exit("missing results")
print(f"{'case':28} {'bytes':>10} {'NCCL us':>9} {'oxccl us':>9} {'ratio':>6}")
for case, v in nc[0].items():
    best = lambda runs: min((r[case]["us"] for r in runs if r[case]["us"] is not None), default=None)
    a, b = best(nc), best(ox)
    ratio = f"{b / a:.2f}" if a and b else "-"
    fmt = lambda x: f"{x:.1f}" if x is not None else "FAIL"
    print(f"{case:28} {v['bytes']:>10} {fmt(a):>9} {fmt(b):>9} {ratio:>6}")
print("(median of 50 groups per run; best of two runs per library; ratio = oxccl / NCCL time)")
EOF
exit $rc
