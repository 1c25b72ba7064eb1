#!/usr/bin/env bash
# The test command (README, CI): needs no GPU. Installs the pinned nvcc, builds the library, checks
# that include/nccl.h is what the build generates, runs the Rust tests, clippy, the C ABI tests and
# builds and checks the packages (install tree, .deb, Python wheel).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup-cuda.sh
export CUDA_INCLUDE=$root/.tools/cuda/nvidia/cu13/include

before=$(sha256sum include/nccl.h 2>/dev/null || true)
cargo build --release --locked
after=$(sha256sum include/nccl.h)
if [ "$before" != "$after" ] || ! git diff --quiet -- include/nccl.h 2>/dev/null; then
  echo "test: include/nccl.h differs from what the build generates; commit the regenerated header"
  git --no-pager diff --stat -- include/nccl.h || true
  exit 1
fi

cargo test --release --locked
python3 scripts/model/ll_ack_model.py
python3 scripts/model/reduce_relay_model.py
python3 scripts/model/reduce_chain_model.py
python3 scripts/model/reduce_ll128_model.py
for rule in credits ack; do  # the model must still fail when either reuse rule is dropped
  if python3 scripts/model/reduce_ll128_model.py --mutate=$rule > /dev/null; then
    echo "test: reduce_ll128_model no longer catches a missing $rule rule"; exit 1
  fi
done
# The harness's bar check: a run with one slow small size and one slow large size must miss
# twice (exit 1), a run within the bar must pass.
bt=$(mktemp -d)
mkdir -p "$bt/miss" "$bt/pass"
echo '[{"name":"m","oxccl_ok":true,"rows":[{"bytes":8,"time_ratio":0.8,"busbw_ratio":null},{"bytes":65536,"time_ratio":1.02,"busbw_ratio":1.0},{"bytes":134217728,"time_ratio":1.1,"busbw_ratio":0.89}]}]' > "$bt/miss/results.json"
echo '[{"name":"p","oxccl_ok":true,"rows":[{"bytes":8,"time_ratio":0.8,"busbw_ratio":null},{"bytes":536870912,"time_ratio":1.05,"busbw_ratio":0.95}]}]' > "$bt/pass/results.json"
if python3 nccl-tests-harness/bars.py "$bt/miss" > "$bt/out" || [ "$(grep -c ' B ' "$bt/out")" != 2 ]; then
  echo "test: nccl-tests-harness/bars.py did not report the two misses"; cat "$bt/out"; exit 1
fi
python3 nccl-tests-harness/bars.py "$bt/pass" > /dev/null || { echo "test: bars.py failed a run within the bar"; exit 1; }
rm -rf "$bt"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --locked --all-targets -- -D warnings
else
  echo "test: clippy not installed; skipped"
fi
bash ffi-tests/run.sh target/release
bash packaging/check.sh
echo "test: all passed"
