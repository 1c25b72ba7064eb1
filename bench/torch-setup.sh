# Sourced by the PyTorch benchmarks of this folder (overlap.sh, torch-coalesced.sh) with their own
# arguments ([LIB] [NPROC]): sets HERE, LIB (oxccl's library, default target/release/liboxccl.so),
# NPROC (ranks, default every GPU), PY (PYTHON or python3) and W (a temporary folder removed at
# exit), checks the library exists and prints what runs.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
LIB=$(realpath "${1:-$HERE/../target/release/liboxccl.so}")
PY=${PYTHON:-python3}
NPROC=${2:-$($PY -c 'import torch; print(torch.cuda.device_count())')}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
[ -f "$LIB" ] || { echo "no library at $LIB"; exit 2; }
echo "oxccl: $LIB; $NPROC ranks; torch $($PY -c 'import torch; print(torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))')"
