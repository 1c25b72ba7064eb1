#!/usr/bin/env bash
# GPU part of the C ABI tests (GPU machine): gpu_comm.c, built against include/nccl.h and linked
# with -lnccl, runs once against oxccl and once against a reference NCCL (the test must pass with
# both: it checks NCCL's behaviour, not oxccl's). One process, one thread per GPU.
# Usage: ffi-tests/gpu.sh LIBOXCCL [NCCL_LIBDIR] [NGPUS]
#   LIBOXCCL: path to liboxccl.so; NCCL_LIBDIR: a directory with NVIDIA's libnccl.so.2 (optional);
#   CUDA_HOME (default /usr/local/cuda) provides cuda_runtime.h and libcudart.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
lib=$(readlink -f "${1:?usage: ffi-tests/gpu.sh LIBOXCCL [NCCL_LIBDIR] [NGPUS]}")
nccl_dir=${2:-}
ngpus=${3:-}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/lib"
ln -s "$lib" "$out/lib/libnccl.so.2"
ln -s libnccl.so.2 "$out/lib/libnccl.so"
gcc -std=gnu11 -O2 -Wall -Werror -Wno-deprecated-declarations -I"$root/include" -I"$cuda/include" "$here/gpu_comm.c" \
  -L"$cuda/lib64" -lcudart -L"$out/lib" -lnccl -lpthread -o "$out/gpu_comm"
# Pointer checks are part of the test (NCCL_CHECK_POINTERS=1 is honoured by both libraries).
export NCCL_CHECK_POINTERS=1
rc=0
echo "== gpu_comm with oxccl ($lib)"
LD_LIBRARY_PATH="$out/lib:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/gpu_comm" $ngpus || rc=1
if [ -n "$nccl_dir" ]; then
  echo "== gpu_comm with NCCL ($nccl_dir)"
  LD_LIBRARY_PATH="$nccl_dir:$cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/gpu_comm" $ngpus || rc=1
fi
exit $rc
