#!/usr/bin/env bash
# The main job (README): builds oxccl and runs oxccl-bench, an AllReduce benchmark across every
# local GPU that checks every result. It first checks for an NVIDIA GPU driver, and without one it
# says so at once and exits 0, before building anything. Extra arguments go to oxccl-bench.
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
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
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
exec target/release/oxccl-bench "$@"
