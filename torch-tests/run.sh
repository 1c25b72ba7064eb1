#!/usr/bin/env bash
# Runs the PyTorch suite in every init mode with oxccl preloaded and with NVIDIA's NCCL (from 4
# GPUs also as 2 simulated hosts), and compares the training losses of the two libraries. Needs a
# GPU machine with PyTorch.
#
#   torch-tests/run.sh NGPUS /path/to/liboxccl.so [OUTDIR]
#
# Exit status 0 only if every run passed with both libraries and the losses agree.
set -u
n=${1:?number of GPUs}
lib=${2:?path of liboxccl.so}
out=${3:-torch-tests-out}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
fail=0
port=$((29500 + RANDOM % 1000))
run() {  # tag, preload, extra env, suite args
  local tag=$1 pre=$2 envs=$3; shift 3
  port=$((port + 1))
  echo "== $tag"
  env $envs ${pre:+LD_PRELOAD=$pre} timeout 600 torchrun --nproc-per-node "$n" --master-port $port \
    "$here/suite.py" --out "$out" --tag "$tag" "$@" > "$out/$tag.log" 2>&1
  local rc=$?
  grep -E "^suite|FAIL|EXCEPTION" "$out/$tag.log" | head -20
  [ $rc -eq 0 ] || { echo "   $tag: exit status $rc (log: $out/$tag.log)"; fail=1; }
}
# From 4 GPUs also as 2 simulated hosts (SUITE_RANKS_PER_HOST): the cross-host transports, with
# the suite's 4 MiB point-to-point transfers large enough for the proxy's link threads.
modes="eager lazy nonblocking"
[ "$n" -ge 4 ] && modes="$modes hosts"
for lib_name in oxccl nccl; do
  pre=""; [ $lib_name = oxccl ] && pre=$lib
  run "$lib_name-eager" "$pre" "NCCL_DEBUG=VERSION" --init eager
  run "$lib_name-lazy" "$pre" "NCCL_DEBUG=VERSION" --init lazy
  run "$lib_name-nonblocking" "$pre" "NCCL_DEBUG=VERSION TORCH_NCCL_USE_COMM_NONBLOCKING=1" --init eager
  if [ "$n" -ge 4 ]; then
    run "$lib_name-hosts" "$pre" "NCCL_DEBUG=VERSION SUITE_RANKS_PER_HOST=$((n / 2)) NCCL_IB_DISABLE=1" --init eager
  fi
done
for m in $modes; do
  grep -q "oxccl" "$out/oxccl-$m.log" || { echo "oxccl-$m: oxccl's banner missing: the library was not preloaded?"; fail=1; }
done
python3 - "$out" $modes <<'PY' || fail=1
import json, sys, os
out = sys.argv[1]
bad = 0
for m in sys.argv[2:]:
    try:
        a = json.load(open(os.path.join(out, f"losses-oxccl-{m}.json")))
        b = json.load(open(os.path.join(out, f"losses-nccl-{m}.json")))
    except OSError as e:
        print(f"losses {m}: missing ({e})"); bad += 1; continue
    for k in ("ddp", "fsdp"):
        x, y = a[k], b[k]
        worst = max((abs(p - q) / max(abs(q), 1e-12) for p, q in zip(x, y)), default=float("inf"))
        ok = len(x) == len(y) and len(x) > 0 and worst <= 1e-4
        print(f"losses {m} {k}: {len(x)} steps, oxccl last {x[-1] if x else None}, NCCL last {y[-1] if y else None}, "
              f"max relative difference {worst:.2e}: {'OK' if ok else 'MISMATCH'}")
        bad += not ok
sys.exit(1 if bad else 0)
PY
echo "torch-tests: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
