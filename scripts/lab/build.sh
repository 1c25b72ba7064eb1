#!/usr/bin/env bash
# Builds scripts/lab/netstep_lab, oneshot_lab, oneway_lab, reduce_lab, egress_lab, cechain_lab, driver_lock_lab and direct_ar_lab (sm_90) against the kernels and the ABI header of the last cargo
# build: bash scripts/lab/build.sh [out dir]. Needs a `cargo build --release` first (for the header).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/target/lab}
# The newest header (not the newest folder: rewriting a file leaves its folder's time alone).
hdr=$(ls -t "$root"/target/release/build/oxccl-*/out/oxccl_device_abi.h 2>/dev/null | head -1 | xargs -r dirname)
[ -n "$hdr" ] || { echo "no oxccl_device_abi.h: run cargo build --release first" >&2; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || echo "$root/.tools/cuda/nvidia/cu13/bin/nvcc")}
mkdir -p "$out"
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I"$root/kernels" -I"$hdr" \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/oneshot_lab" "$root/scripts/lab/oneshot_lab.cu" -lpthread
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I"$root/kernels" -I"$hdr" \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/netstep_lab" "$root/scripts/lab/netstep_lab.cu" -lpthread
# The one-way, egress, reduce-pipeline and copy-engine chain labs are standalone (no library kernels).
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/oneway_lab" "$root/scripts/lab/oneway_lab.cu"
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/reduce_lab" "$root/scripts/lab/reduce_lab.cu"
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/egress_lab" "$root/scripts/lab/egress_lab.cu"
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/cechain_lab" "$root/scripts/lab/cechain_lab.cu" -lpthread
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/driver_lock_lab" "$root/scripts/lab/driver_lock_lab.cu" -lpthread
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 \
  -L"$(dirname "$nvcc")/../lib" -L"$(dirname "$nvcc")/../lib64" -o "$out/direct_ar_lab" "$root/scripts/lab/direct_ar_lab.cu"
echo "built $out/netstep_lab $out/oneshot_lab $out/oneway_lab $out/reduce_lab $out/egress_lab $out/cechain_lab $out/driver_lock_lab $out/direct_ar_lab"
