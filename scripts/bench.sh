#!/usr/bin/env bash
# The main job (README): builds oxccl and runs oxccl-bench: every collective across every local
# GPU (the first call of every size checked), with oxccl and, where it is installed (found as PyTorch finds it, or
# OXCCL_BENCH_NCCL=/path/libnccl.so.2), NVIDIA's NCCL in the same run, side by side with ratios;
# then a summary, tables and PNG plots in target/bench (nccl-tests-harness/harness.py report). It
# first checks for an NVIDIA GPU driver, and without one it says so at once and exits 0, before
# building anything. Extra arguments go to oxccl-bench (--help lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
driver=
if [ -r /proc/driver/nvidia/version ]; then
  driver=$(head -n 1 /proc/driver/nvidia/version)
elif ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  driver="libcuda.so.1 found by the loader"
fi
if [ -z "$driver" ]; then
  echo "bench: no NVIDIA GPU driver on this machine (no /proc/driver/nvidia/version, no libcuda.so.1):"
  echo "bench: nothing to benchmark, so nothing is built. 'bash scripts/test.sh' runs the tests without a GPU."
  exit 0
fi
echo "bench: GPU driver: $driver"
if command -v nvidia-smi >/dev/null; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
  echo "bench: $gpus GPU(s) visible"
  if [ "$gpus" = 1 ]; then
    echo "bench: with one GPU the benchmark runs one rank: it shows the kernels' own time, not communication between GPUs"
  fi
  # Compile the kernels for these GPUs' architectures only (build.rs; the default is sm_80 and
  # sm_90): a cold build then runs nvcc for one architecture instead of two.
  if [ -z "${OXCCL_CUDA_ARCHS:-}" ]; then
    caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u | paste -sd, - || true)
    if [[ "$caps" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
      export OXCCL_CUDA_ARCHS=$caps
      echo "bench: building the kernels for this machine's GPUs only: OXCCL_CUDA_ARCHS=$caps"
    fi
  fi
fi
bash scripts/setup-cuda.sh
echo "bench: cargo build --release (a cold build compiles the CUDA kernels first, for minutes; cached after)"
cargo build --release --locked
out=target/bench
prev=
for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
rm -f "$out/results.json"
rc=0
target/release/oxccl-bench --out target/bench "$@" || rc=$?
if [ -f "$out/results.json" ] && command -v python3 >/dev/null; then
  if ! python3 -c 'import matplotlib' 2>/dev/null && ! PYTHONPATH=.tools/python python3 -c 'import matplotlib' 2>/dev/null; then
    echo "bench: installing matplotlib for the plots into .tools/python (pip --target; nothing outside the repository)"
    python3 -m pip install -q --disable-pip-version-check --no-cache-dir --target .tools/python matplotlib >/dev/null 2>&1 \
      || echo "bench: could not install matplotlib (offline?): tables without plots"
  fi
  PYTHONPATH=.tools/python${PYTHONPATH:+:$PYTHONPATH} python3 nccl-tests-harness/harness.py report "$out/results.json" || true
fi
exit $rc
