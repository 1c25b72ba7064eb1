#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler from PyPI into .tools/cuda (once). build.rs finds nvcc there.
# The GPU machines' driver is CUDA 13.0: PTX from a newer nvcc would not load there, so these
# versions are pinned, all five together (cccl provides headers even cuda_fp16.h needs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.tools/cuda
pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.88
  nvidia-cuda-cccl==13.0.85
)
stamp=$dest/.installed
if [ -x "$dest/nvidia/cu13/bin/nvcc" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
  exit 0
fi
command -v python3 >/dev/null || { echo "setup-cuda: python3 is required"; exit 1; }
echo "setup-cuda: installing the pinned CUDA 13.0 compiler from PyPI into $dest (about 270 MB, once; nothing outside the repository): ${pins[*]}"
rm -rf "$dest"
python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --no-warn-script-location --target "$dest" "${pins[@]}"
"$dest/nvidia/cu13/bin/nvcc" --version | tail -n 2
echo "${pins[*]}" > "$stamp"
