#!/usr/bin/env bash
# Every GPU test in one command, for a machine with GPUs (CI has none):
#
#   scripts/gpu-test.sh [--lib PATH] [--bin PATH] [--nccl-tests DIR] [--nccl-libdir DIR] [--out DIR] [--quick]
#                       [--only REGEX] [--list [--ngpus N]]
#
# --lib / --bin: a built liboxccl.so and the folder holding oxccl-gpu-check (default: target/release,
# built here if missing). --nccl-tests: a folder of nccl-tests binaries you built (MPI=1); without
# it the nccl-tests matrix is skipped. --nccl-libdir: NVIDIA's libnccl.so.2, for the side-by-side
# comparison. PyTorch tests run when `python3 -c "import torch"` works. Exit status 0 only if every
# part that ran passed; a summary lists what ran and what was skipped, and why.
# --only REGEX: only the steps whose names match (grep -E), e.g. to spread the whole run over
# several sessions of limited length; --list: print the step names that would run and run none
# (needs no GPU: --ngpus N stands for the machine's count, default 4).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
lib="" bin="" nt="" nccldir="" out="gpu-test-out" quick=0 only="" list=0 list_ngpus=4
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift 2 ;;
    --list) list=1; shift ;;
    --ngpus) list_ngpus=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --nccl-tests) nt=$2; shift 2 ;;
    --nccl-libdir) nccldir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "gpu-test: unknown argument $1"; exit 2 ;;
  esac
done
if [ $list = 1 ]; then
  lib=${lib:-liboxccl.so} bin=${bin:-.}
fi
if [ -z "$lib" ] || [ -z "$bin" ]; then
  if [ ! -x "$root/target/release/oxccl-gpu-check" ] || [ ! -x "$root/target/release/oxccl-conform" ]; then
    (cd "$root" && bash scripts/setup-cuda.sh && cargo build --release --locked \
      && cargo build --release --locked --features conform --bin oxccl-conform) || exit 1
  fi
  lib=${lib:-$root/target/release/liboxccl.so}
  bin=${bin:-$root/target/release}
fi
if [ $list = 1 ]; then
  ngpu=$list_ngpus
elif ! command -v nvidia-smi >/dev/null || [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 0 ]; then
  echo "gpu-test: no GPU on this machine; nothing to run (CI runs scripts/test.sh instead)."
  exit 0
else
  ngpu=$(nvidia-smi -L | wc -l)
fi
[ $list = 1 ] || mkdir -p "$out"
summary=() fail=0
step() {  # name, command...
  local name=$1; shift
  if [ -n "$only" ] && ! grep -qE -- "$only" <<< "$name"; then
    summary+=("SKIP  $name (--only)"); return
  fi
  if [ $list = 1 ]; then echo "$name"; return; fi
  echo "== $name"
  if "$@" > "$out/$name.log" 2>&1; then summary+=("PASS  $name"); else summary+=("FAIL  $name (see $out/$name.log)"); fail=1; fi
  tail -3 "$out/$name.log"
}
# What this machine has (CUDA toolkit, mpirun, PyTorch); --list assumes all of it.
present() { [ $list = 1 ] || "$@"; }
q=""; [ $quick = 1 ] && q="--quick"
export NCCL_NVLS_ENABLE=0
step gpu-check-allreduce "$bin/oxccl-gpu-check" --graph $q
# The AllReduce forms the defaults no longer reach at these sizes: LL16 packets beyond the ring
# (OXCCL_AP128=0), and the put-based rounds of small slots (several rounds a
# block, so each round's copy-out follows the next round's puts).
step gpu-check-allreduce-ll16 env OXCCL_AP128=0 "$bin/oxccl-gpu-check" --quick
step gpu-check-allreduce-rounds env OXCCL_RSAG_SLOT_BYTES=16384 "$bin/oxccl-gpu-check" --quick
step gpu-check-colls "$bin/oxccl-gpu-check" --colls --quick
step gpu-check-chain "$bin/oxccl-gpu-check" --chain
step gpu-check-split "$bin/oxccl-gpu-check" --split
step gpu-check-proxy "$bin/oxccl-gpu-check" --proxy
step gpu-check-hang "$bin/oxccl-gpu-check" --hang
if [ "$ngpu" -ge 4 ]; then fr=2,4; else fr=2; fi
step fault-injection "$bin/oxccl-fault" --ranks $fr
if [ "$ngpu" -ge 4 ]; then
  step fault-injection-hosts "$bin/oxccl-fault" --ranks 4 --ranks-per-host 2
else
  step fault-injection-hosts "$bin/oxccl-fault" --ranks 2 --ranks-per-host 1 --scenarios allreduce,bigreduce,sendrecv,stop
fi
step fault-injection-ce env OXCCL_LOCAL_TRANSPORT=ce "$bin/oxccl-fault" --ranks $fr --scenarios allreduce,allgather,sendrecv,stop
# The copy-engine direct path (pairs of ranks in separate processes) with every transfer taking
# it: a peer killed mid-transfer, and the survivors' abort.
step fault-injection-ce-direct env OXCCL_CE_DIRECT_MIN_BYTES=1 "$bin/oxccl-fault" --ranks $fr --scenarios sendrecv,allgather
# The same with the handshakes on a worker thread (OXCCL_CE_DIRECT_ASYNC=1).
step fault-injection-ce-direct-async env OXCCL_CE_DIRECT_ASYNC=1 OXCCL_CE_DIRECT_MIN_BYTES=1 "$bin/oxccl-fault" --ranks $fr --scenarios sendrecv,allgather
# Aborts: with an operation its peers never join in flight (every rank's stream and context must
# end clean, and a new communicator work), on each data path; and a peer's abort seen by ranks
# that need nothing from it (PyTorch's test_abort_pg: no error there, bounded teardown). Ranks
# may share GPUs (3 ranks on fewer GPUs time-share them).
step abort-pending "$bin/oxccl-fault" --ranks 2 --scenarios abort-pending
step abort-pending-ce-direct env OXCCL_CE_DIRECT_MIN_BYTES=1 "$bin/oxccl-fault" --ranks 2 --scenarios abort-pending
step abort-pending-ce-direct-async env OXCCL_CE_DIRECT_ASYNC=1 OXCCL_CE_DIRECT_MIN_BYTES=1 "$bin/oxccl-fault" --ranks 2 --scenarios abort-pending
# The zero CTA policy takes the copy-engine path at every size: an abort while it waits.
step abort-pending-cta-zero env NCCL_CTA_POLICY=2 "$bin/oxccl-fault" --ranks 2 --scenarios abort-pending
step abort-pending-hosts "$bin/oxccl-fault" --ranks 2 --ranks-per-host 1 --scenarios abort-pending
step abort-idle-peer "$bin/oxccl-fault" --ranks 2,3 --scenarios abort-idle-peer
step abort-several "$bin/oxccl-fault" --ranks 2,3 --scenarios abort-several
if [ $quick = 1 ]; then soak=1000; else soak=10000; fi
step soak "$bin/oxccl-gpu-check" --soak $soak
step leaks "$bin/oxccl-gpu-check" --leaks
# OXCCL_CHECKSUM: no false alarm over a random mix, and an injected corruption is reported.
step soak-checksummed env OXCCL_CHECKSUM=1 "$bin/oxccl-gpu-check" --soak 600 --seed 3
step checksum-catches-corruption bash -c "OXCCL_CHECKSUM=1 OXCCL_CHECKSUM_INJECT=1 NCCL_DEBUG=WARN '$bin/oxccl-gpu-check' --soak 100 2>&1 | tee /dev/stderr | grep -q 'corrupted data on rank 1'"
# The conformance fuzzer (docs/testing.md): the kept regressions, then a fixed seed set; with
# NVIDIA's NCCL beside, each case it can run is compared.
cf=(); [ -n "$nccldir" ] && cf=(--nccl-lib "$nccldir/libnccl.so.2")
step conform-regressions "$bin/oxccl-conform" --lib "$lib" "${cf[@]}" --case-file "$root/src/bin/oxccl_conform/regressions.txt" --out "$out/conform-regressions"
if [ $quick = 1 ]; then cases=150; else cases=600; fi
step conform-seeds "$bin/oxccl-conform" --lib "$lib" "${cf[@]}" --cases $cases --keep-going --seed 1 --out "$out/conform-seeds"
if [ "$ngpu" -ge 2 ] && present test -d "${CUDA_HOME:-/usr/local/cuda}/include"; then
  step ffi-gpu bash "$root/ffi-tests/gpu.sh" "$lib" "$nccldir"
else
  summary+=("SKIP  ffi-gpu (fewer than 2 GPUs, or no CUDA toolkit at \$CUDA_HOME)")
fi
if [ -n "$nt" ]; then
  H="python3 $root/nccl-tests-harness/harness.py"
  step nccl-tests-allreduce $H check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/allreduce-check"
  step nccl-tests-colls $H check --suite colls-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/colls-check"
  step nccl-tests-registered $H check --suite registered-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/registered-check"
  # Each CTA policy (src/algo/policy.rs): efficiency's block cap, zero's copy engines at every size.
  step nccl-tests-cta-efficiency env NCCL_CTA_POLICY=1 $H check --suite colls-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/cta-efficiency-check"
  step nccl-tests-cta-zero env NCCL_CTA_POLICY=2 $H check --suite colls-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/cta-zero-check"
  # Copy-engine transfers inside CUDA graphs: from 1 MiB (below the suite's largest sizes), and
  # under zero at every size.
  step nccl-tests-ce-graph env OXCCL_CE_DIRECT_MIN_BYTES=1048576 $H check --suite colls-check --modes np2-G --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/ce-graph-check"
  step nccl-tests-ce-graph-zero env NCCL_CTA_POLICY=2 $H check --suite colls-check --modes np2-G --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/ce-graph-zero-check"
  step nccl-tests-ce-direct env OXCCL_CE_DIRECT_MIN_BYTES=1048576 $H check --suite ce-direct-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/ce-direct-check"
  step nccl-tests-ce-direct-async env OXCCL_CE_DIRECT_ASYNC=1 OXCCL_CE_DIRECT_MIN_BYTES=1048576 $H check --suite ce-direct-check --bin "$nt" --oxccl "$lib" --ngpus "$ngpu" --out "$out/ce-direct-async-check"
  if present command -v mpirun >/dev/null && [ "$ngpu" -ge 2 ]; then
    step nccl-tests-multihost bash "$root/scripts/multihost-check.sh" "$lib" "$nt" "$ngpu" "$out/multihost"
    # Below 4 GPUs, the 2 x 2 and 4 x 1 layouts still run, with 4 ranks time-sharing the GPUs.
    if [ "$ngpu" -lt 4 ]; then
      step nccl-tests-multihost-shared env MHC_PARTS=hosts MHC_RANKS=4 bash "$root/scripts/multihost-check.sh" "$lib" "$nt" "$ngpu" "$out/multihost-shared"
    fi
  else
    summary+=("SKIP  nccl-tests-multihost (no mpirun or fewer than 2 GPUs)")
  fi
  if [ -n "$nccldir" ]; then
    step nccl-tests-compare $H compare --suite bench --bin "$nt" --oxccl "$lib" --nccl-libdir "$nccldir" --ngpus "$ngpu" --out "$out/bench"
  else
    summary+=("SKIP  nccl-tests-compare (no --nccl-libdir)")
  fi
else
  summary+=("SKIP  nccl-tests (no --nccl-tests DIR)")
fi
if present python3 -c "import torch" 2>/dev/null && [ "$ngpu" -ge 2 ]; then
  step torch-suite bash "$root/torch-tests/run.sh" "$ngpu" "$lib" "$out/torch"
else
  summary+=("SKIP  torch-suite (no PyTorch or fewer than 2 GPUs)")
fi
[ $list = 1 ] && exit 0
echo
printf '%s\n' "${summary[@]}"
exit $fail
