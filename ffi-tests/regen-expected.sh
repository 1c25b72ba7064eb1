#!/usr/bin/env bash
# Regenerates expected/ from NVIDIA's NCCL 2.32.3 wheel (downloaded into a temporary folder).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# NCCL_WHEEL: an already downloaded copy of that wheel (else pip downloads it, about 300 MB).
if [ -n "${NCCL_WHEEL:-}" ]; then cp "$NCCL_WHEEL" "$tmp/"; else python3 -m pip download -q --no-deps nvidia-nccl-cu13==2.32.3 -d "$tmp"; fi
(cd "$tmp" && unzip -q ./*.whl)
cuda_inc=${CUDA_INCLUDE:-$root/.tools/cuda/nvidia/cu13/include}
gcc -std=c11 -I"$tmp/nvidia/nccl/include" -I"$cuda_inc" "$here/abi_facts.c" -o "$tmp/facts"
"$tmp/facts" > "$here/expected/abi_facts.txt"
nm -D --defined-only "$tmp/nvidia/nccl/lib/libnccl.so.2" | awk '{print $3}' | sort > "$here/expected/exported_symbols.txt"
echo "regenerated $here/expected"
