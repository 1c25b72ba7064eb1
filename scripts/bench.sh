#!/usr/bin/env bash
# The main job (README): builds oxccl and runs oxccl-bench, an AllReduce benchmark across every
# local GPU. On a machine without a GPU it says so and exits 0. Extra arguments go to oxccl-bench.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup-cuda.sh
cargo build --release --locked
exec target/release/oxccl-bench "$@"
