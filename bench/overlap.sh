#!/bin/bash
# Communication overlapped with GEMMs (bench/overlap.py) under NVIDIA's NCCL and under oxccl in the
# same run, for each CTA policy (NCCL_CTA_POLICY: 0 default, 1 efficiency, 2 zero; both libraries
# read it): one table of compute alone, communication alone, both together, and the kernels' blocks.
#
#   bash bench/overlap.sh [LIB] [NPROC]
#
# LIB: oxccl's library (default target/release/liboxccl.so); NPROC: ranks (default: every GPU).
# POLICIES (default "0 1 2"), SIZES (default 16M,64M,256M), COLLS, ITERS pass through. PyTorch's
# own libnccl.so.2 is the NCCL side. Exits non-zero when a result is wrong under either library.
. "$(dirname "$0")/torch-setup.sh" "$@"
rc=0
for pol in ${POLICIES:-0 1 2}; do
  for lib in nccl oxccl; do
    pre=(env NCCL_CTA_POLICY="$pol"); [ $lib = oxccl ] && pre+=(LD_PRELOAD="$LIB")
    "${pre[@]}" $PY -m torch.distributed.run --standalone --nproc-per-node "$NPROC" "$HERE/overlap.py" \
      --sizes "${SIZES:-16M,64M,256M}" --colls "${COLLS:-all_gather,reduce_scatter,all_reduce,all_to_all}" --iters "${ITERS:-10}" \
      --out "$W/$lib-$pol.json" > "$W/$lib-$pol.log" 2>&1 || { rc=1; echo "$lib policy $pol failed:"; grep -E "Error|error|WARN|wrong" "$W/$lib-$pol.log" | grep -v "^\s*$" | head -8 | cut -c1-300; }
  done
done
$PY - "$W" ${POLICIES:-0 1 2} <<'PYEOF'
import json, os, sys
w, pols = sys.argv[1], sys.argv[2:]
def load(lib, p):
    f = f"{w}/{lib}-{p}.json"
    return json.load(open(f)) if os.path.exists(f) else None
names = {"0": "default", "1": "efficiency", "2": "zero"}
print("us; together/compute: the pair's time over the GEMMs' alone (1.00 = the communication fully hidden); ratio = oxccl / NCCL")
print(f"{'policy':10} {'case':20} {'compute N/o':>13} {'comm N/o':>13} {'together N/o':>15} {'tog/comp N/o':>13} {'ratio':>6} {'blocks N/o':>11}")
for p in pols:
    n, o = load("nccl", p), load("oxccl", p)
    if not n or not o:
        print(f"{names.get(p, p):10} missing results")
        continue
    for case, a in n["cases"].items():
        b = o["cases"].get(case)
        if not b:
            continue
        # Each case's own GEMMs-alone time (measured alternately with the pair), else the run's.
        cn, co = a.get("compute_us", n["compute_us"]), b.get("compute_us", o["compute_us"])
        print(f"{names.get(p, p):10} {case:20} {cn:6.0f}/{co:<6.0f} {a['comm_us']:6.0f}/{b['comm_us']:<6.0f} {a['together_us']:7.0f}/{b['together_us']:<7.0f} "
              f"{a['together_us']/cn:6.2f}/{b['together_us']/co:<6.2f} {b['together_us']/a['together_us']:6.2f} {str(a['blocks']):>5}/{str(b['blocks']):<5}")
PYEOF
exit $rc
