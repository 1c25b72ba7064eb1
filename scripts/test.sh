#!/usr/bin/env bash
# The test command (README, CI): needs no GPU. Installs the pinned nvcc from PyPI into .tools/ (it
# says so; nothing outside the repository, no sudo), builds the library, checks that
# include/nccl.h is what the build generates, runs the Rust tests, clippy, the harness's own checks
# on fake nccl-tests binaries, the C ABI tests and builds and checks the packages (install tree,
# .deb, Python wheel). Every temporary file goes under one folder that is removed on exit.
# The InfiniBand feature needs system packages (rdma-core); .ci/run installs them and checks it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/oxccl-test.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
step() { echo "test: $*"; }
step "the pinned CUDA compiler (scripts/setup-cuda.sh)"
bash scripts/setup-cuda.sh
export CUDA_INCLUDE=$root/.tools/cuda/nvidia/cu13/include

step "cargo build --release"
before=$(sha256sum include/nccl.h 2>/dev/null || true)
cargo build --release --locked
after=$(sha256sum include/nccl.h)
# Outside a git checkout (a source tarball) only the build's own rewrite is checked.
in_git=$(git rev-parse --is-inside-work-tree 2>/dev/null || echo false)
if [ "$before" != "$after" ] || { [ "$in_git" = true ] && ! git diff --quiet -- include/nccl.h; }; then
  echo "test: include/nccl.h differs from what the build generates; commit the regenerated header"
  git --no-pager diff --stat -- include/nccl.h || true
  exit 1
fi

step "cargo test"
cargo test --release --locked
# The conformance fuzzer (feature conform): its reference, case model and generation.
cargo test --release --locked --features conform --bin oxccl-conform
step "the nccl-tests harness on fake binaries"
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
# the one-host target table (bars.py --one-host): every row covered and within its bar at 2 GPUs passes; the
# same with AllReduce under graphs at 0.36x (its 2-GPU bar is 0.35x) misses exactly that row; at
# 4 GPUs the eager AllReduce row (0.5x there) misses too, and a missing row is never "met".
i9() { # graph AllReduce ratio -> results.json on stdout
  local r='"oxccl_ok":true,"rows":'
  echo "[{\"name\":\"all_reduce_perf-np2-float\",\"mode\":\"np2\",$r[{\"bytes\":8,\"time_ratio\":0.55,\"busbw_ratio\":null}]},
{\"name\":\"all_reduce_perf-np2-G-float\",\"mode\":\"np2-G\",$r[{\"bytes\":8,\"time_ratio\":$1,\"busbw_ratio\":null}]},
{\"name\":\"all_reduce_perf-np2-mid-float\",\"mode\":\"np2-mid\",$r[{\"bytes\":1048576,\"time_ratio\":0.7,\"busbw_ratio\":1.4}]},
{\"name\":\"all_reduce_perf-np2-large-float\",\"mode\":\"np2-large\",$r[{\"bytes\":134217728,\"time_ratio\":0.9,\"busbw_ratio\":1.12}]},
{\"name\":\"sendrecv_perf-np2\",\"mode\":\"np2\",$r[{\"bytes\":0,\"time_ratio\":3.0,\"busbw_ratio\":null},{\"bytes\":64,\"time_ratio\":0.7,\"busbw_ratio\":null}]},
{\"name\":\"sendrecv_perf-np2-G\",\"mode\":\"np2-G\",$r[{\"bytes\":64,\"time_ratio\":0.7,\"busbw_ratio\":null}]},
{\"name\":\"sendrecv_perf-np2-large\",\"mode\":\"np2-large\",$r[{\"bytes\":536870912,\"time_ratio\":0.9,\"busbw_ratio\":1.06}]},
{\"name\":\"reduce_perf-g2\",\"mode\":\"g2\",$r[{\"bytes\":8,\"time_ratio\":0.99,\"busbw_ratio\":null}]}]"
}
mkdir -p "$bt/i9pass" "$bt/i9miss"
i9 0.34 > "$bt/i9pass/results.json"; i9 0.36 > "$bt/i9miss/results.json"
python3 nccl-tests-harness/bars.py --one-host 2 "$bt/i9pass" > "$bt/out" || { echo "test: bars.py --one-host failed a table within its bars"; cat "$bt/out"; exit 1; }
if python3 nccl-tests-harness/bars.py --one-host 2 "$bt/i9miss" > "$bt/out" || ! grep -q "1 of 8 rows missed" "$bt/out" || ! grep -q "np2-G-float 8 B out of place: 0.360" "$bt/out"; then
  echo "test: bars.py --one-host did not report the graph AllReduce row alone"; cat "$bt/out"; exit 1
fi
# In place counts too: the passing table with the graph AllReduce's in-place ratio at 0.36 misses.
sed 's/"time_ratio":0.34,/"time_ratio":0.34,"ip_time_ratio":0.36,/' "$bt/i9pass/results.json" > "$bt/i9miss/results.json"
if python3 nccl-tests-harness/bars.py --one-host 2 "$bt/i9miss" > "$bt/out" || ! grep -q "1 of 8 rows missed" "$bt/out" || ! grep -q "np2-G-float 8 B in place: 0.360" "$bt/out"; then
  echo "test: bars.py --one-host did not report an in-place miss"; cat "$bt/out"; exit 1
fi
sed 's/np2/np4/g; s/-g2/-g4/' "$bt/i9pass/results.json" > "$bt/i9miss/results.json"
if python3 nccl-tests-harness/bars.py --one-host 4 "$bt/i9miss" > "$bt/out" || ! grep -q "2 of 8 rows missed" "$bt/out"; then
  echo "test: bars.py --one-host 4 did not report the eager (0.55 > 0.5) and graph (0.34 > 0.3) AllReduce rows"; cat "$bt/out"; exit 1
fi
echo '[]' > "$bt/i9miss/results.json"
if python3 nccl-tests-harness/bars.py --one-host 2 "$bt/i9miss" > "$bt/out" 2>&1; then
  echo "test: bars.py --one-host passed an empty table"; cat "$bt/out"; exit 1
fi
# The harness end to end on the CPU: fake nccl-tests binaries (oxccl faster at 8 B, 0.94x NCCL's
# busbw at 128 MiB) behind a fake mpirun; `compare --suite bench` must run every binary at np2,
# write the summary with every run meeting the bar, and fail when oxccl reports a wrong value.
fb="$bt/fake"; mkdir -p "$fb"
cat > "$fb/mpirun" <<'FAKE'
#!/usr/bin/env bash
[ -n "${FAKE_MPI_LOG:-}" ] && echo "$*" >> "$FAKE_MPI_LOG"
while [ $# -gt 0 ]; do case $1 in -x) case $2 in *=*) export "$2" ;; esac; shift 2 ;; -np|--bind-to|--map-by) shift 2 ;; --allow-run-as-root) shift ;; *) break ;; esac; done
exec "$@"
FAKE
cat > "$fb/fake_perf" <<'FAKE'
#!/usr/bin/env bash
if [ -n "${LD_PRELOAD:-}" ]; then t=5.00 b=300.0 w=${FAKE_WRONG:-0}; else t=6.00 b=320.0 w=0; fi
echo "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong"
printf "           8             2     float     sum      -1  %7s    0.00    0.00  %6s  %7s    0.00    0.00  %6s\n" $t $w $t $w
printf "   134217728      33554432     float     sum      -1  999.00  %6s  %6s  %6s  999.00  %6s  %6s  %6s\n" $b $b $w $b $b $w
echo "# Out of bounds values : 0 OK"
FAKE
chmod +x "$fb/mpirun" "$fb/fake_perf"
for t in all_reduce reduce_scatter reduce broadcast all_gather alltoall gather scatter sendrecv hypercube; do ln -sf fake_perf "$fb/${t}_perf"; done
PATH="$fb:$PATH" python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite bench --ngpus 2 --out "$bt/h" > "$bt/h.out" 2>&1 \
  || { echo "test: harness compare failed on the fake binaries"; tail -20 "$bt/h.out"; exit 1; }
runs=$(grep -c '| meets |' "$bt/h/results.md")
[ "$runs" = 12 ] || { echo "test: harness bench summary has $runs runs meeting the bar, expected 12"; cat "$bt/h/results.md" | head -20; exit 1; }
python3 nccl-tests-harness/bars.py "$bt/h" > /dev/null || { echo "test: bars.py disagrees with the harness summary"; exit 1; }
# report: the same summary again from the results alone.
python3 nccl-tests-harness/harness.py report "$bt/h/results.json" --out "$bt/hr" > /dev/null 2>&1 \
  && [ "$(grep -c '| meets |' "$bt/hr/results.md")" = 12 ] || { echo "test: harness report does not give the compare run's summary"; exit 1; }
# check --jobs: runs side by side, each in suite order in the table, and a wrong one fails the whole.
PATH="$fb:$PATH" python3 nccl-tests-harness/harness.py check --suite colls-check --tests sendrecv,gather --bin "$fb" --oxccl "$bt/no-such-lib.so" --ngpus 2 --jobs 3 --out "$bt/cj" > "$bt/cj.out" 2>&1 \
  || { echo "test: harness check --jobs failed on the fake binaries"; tail -20 "$bt/cj.out"; exit 1; }
[ "$(grep -c '| PASS |' "$bt/cj/check.md")" = 12 ] && [ "$(grep '| PASS |' "$bt/cj/check.md" | head -1 | cut -d' ' -f2)" = gather_perf-np2 ] \
  || { echo "test: harness check --jobs table is not the 12 runs in suite order"; cat "$bt/cj/check.md"; exit 1; }
if PATH="$fb:$PATH" FAKE_WRONG=1 python3 nccl-tests-harness/harness.py check --suite colls-check --tests sendrecv --bin "$fb" --oxccl "$bt/no-such-lib.so" --ngpus 2 --jobs 2 --out "$bt/cw" > /dev/null 2>&1; then
  echo "test: harness check --jobs passed runs with wrong values"; exit 1
fi
if PATH="$fb:$PATH" FAKE_WRONG=1 python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite colls-perf --tests sendrecv --ngpus 2 --out "$bt/w" > /dev/null 2>&1; then
  echo "test: harness compare passed a run with wrong values"; exit 1
fi
grep -q '| NO |' "$bt/w/results.md" || { echo "test: harness summary does not flag the wrong run"; exit 1; }
# --bind core: single-threaded ranks go to cores spread over NUMA nodes; the default leaves them unbound.
PATH="$fb:$PATH" FAKE_MPI_LOG="$bt/mpi-core" python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite colls-perf --tests sendrecv --ngpus 2 --bind core --out "$bt/b" > /dev/null 2>&1 \
  && grep -q -- '--bind-to core --map-by numa -np 2' "$bt/mpi-core" && ! grep -q -- '--bind-to none' "$bt/mpi-core" \
  || { echo "test: harness --bind core did not bind the ranks"; cat "$bt/mpi-core"; exit 1; }
PATH="$fb:$PATH" FAKE_MPI_LOG="$bt/mpi-none" python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite colls-perf --tests sendrecv --ngpus 2 --out "$bt/n" > /dev/null 2>&1 \
  && grep -q -- '--bind-to none -np 2' "$bt/mpi-none" || { echo "test: harness without --bind bound the ranks"; cat "$bt/mpi-none"; exit 1; }
# compare --repeat: each pair runs N times, alternating, and the ratio is of per-size medians. The
# fake's NCCL takes 6 us but 2 us on its second run (an outlier), oxccl always 5: 5 / 6.
cat > "$fb/vary_perf" <<'FAKE'
#!/usr/bin/env bash
n=$(cat "$FAKE_SEQ" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE_SEQ"
if [ -n "${LD_PRELOAD:-}" ]; then t=5.00; elif [ $(( n % 6 )) = 3 ]; then t=2.00; else t=6.00; fi
echo "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong"
printf "           8             2     float     sum      -1  %7s    0.00    0.00       0  %7s    0.00    0.00       0\n" $t $t
echo "# Out of bounds values : 0 OK"
FAKE
chmod +x "$fb/vary_perf"; ln -sf vary_perf "$fb/sendrecv_perf"
PATH="$fb:$PATH" FAKE_SEQ="$bt/seq" python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite colls-perf --tests sendrecv --ngpus 2 --repeat 3 --out "$bt/rep" > "$bt/rep.out" 2>&1 \
  || { echo "test: harness compare --repeat failed"; tail -20 "$bt/rep.out"; exit 1; }
python3 - "$bt/rep/results.json" <<'PY' || { echo "test: compare --repeat did not compare medians"; cat "$bt/rep/results.json"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))[0]["rows"][0]
assert abs(r["time_ratio"] - 5 / 6) < 1e-3 and r["nccl_us"] == 6.0, r
PY
[ "$(ls "$bt/rep" | grep -c '^sendrecv_perf-np2-float\.[123]\.\(oxccl\|nccl\)\.log$')" = 6 ] || { echo "test: compare --repeat did not keep each repeat's logs"; ls "$bt/rep"; exit 1; }
ln -sf fake_perf "$fb/sendrecv_perf"
# The hosts suite: every run goes through scripts/hostsim.sh (2 x 2 and 4 x 1 at 4 GPUs) with
# NCCL_IB_DISABLE=1 for both libraries; a fake that fails without them stands in for broadcast_perf.
# `bars.py --hosts` holds every size to NCCL's time.
cat > "$fb/hosts_perf" <<'FAKE'
#!/usr/bin/env bash
case ${NCCL_HOSTID:-} in oxccl-sim-host-*) ;; *) exit 3 ;; esac
[ "${NCCL_IB_DISABLE:-}" = 1 ] || exit 4
exec "$(dirname "$0")/fake_perf" "$@"
FAKE
chmod +x "$fb/hosts_perf"; ln -sf hosts_perf "$fb/broadcast_perf"
PATH="$fb:$PATH" FAKE_MPI_LOG="$bt/mpi-hosts" python3 nccl-tests-harness/harness.py compare --bin "$fb" --oxccl "$bt/no-such-lib.so" --suite hosts --tests broadcast --ngpus 4 --out "$bt/i4" > "$bt/i4.out" 2>&1 \
  || { echo "test: harness compare --suite hosts failed"; tail -20 "$bt/i4.out"; exit 1; }
python3 - "$bt/i4/results.json" <<'PY' || { echo "test: the hosts suite did not run both layouts under hostsim.sh"; cat "$bt/mpi-hosts"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
assert sorted(x["mode"] for x in r) == ["h2x2", "h2x2-large", "h4x1", "h4x1-large"], [x["mode"] for x in r]
assert all(x["oxccl_rc"] == 0 and x["nccl_rc"] == 0 and x["rows"] for x in r), r
PY
[ "$(grep -c -- '-x NCCL_IB_DISABLE .*scripts/hostsim.sh 2 ' "$bt/mpi-hosts")" = 4 ] && [ "$(grep -c -- '-x NCCL_IB_DISABLE .*scripts/hostsim.sh 1 ' "$bt/mpi-hosts")" = 4 ] \
  || { echo "test: the hosts suite's command lines"; cat "$bt/mpi-hosts"; exit 1; }
python3 nccl-tests-harness/bars.py --hosts "$bt/i4" > /dev/null || { echo "test: bars.py --hosts failed runs at 0.83-1.0x NCCL's time"; exit 1; }
mkdir -p "$bt/i4miss"; sed 's/"time_ratio": 1.0,/"time_ratio": 1.01,/' "$bt/i4/results.json" > "$bt/i4miss/results.json"
if python3 nccl-tests-harness/bars.py --hosts "$bt/i4miss" > "$bt/out" || ! grep -q "4 runs, 4 miss(es)" "$bt/out"; then
  echo "test: bars.py --hosts did not report the 128 MiB rows at 1.01x NCCL's time"; cat "$bt/out"; exit 1
fi
ln -sf fake_perf "$fb/broadcast_perf"
# scripts/gpu-test.sh --list: its step names without a GPU; --only narrows them (a run in parts).
gl=$(bash scripts/gpu-test.sh --list --nccl-tests /none --nccl-libdir /none) || { echo "test: gpu-test.sh --list failed"; exit 1; }
{ [ "$(wc -l <<< "$gl")" -ge 20 ] && grep -qx torch-suite <<< "$gl" && grep -qx nccl-tests-registered <<< "$gl"; } \
  || { echo "test: gpu-test.sh --list misses steps"; echo "$gl"; exit 1; }
gl=$(bash scripts/gpu-test.sh --list --only '^fault-injection-ce' | tr '\n' ' ')
[ "$gl" = "fault-injection-ce fault-injection-ce-direct fault-injection-ce-direct-async " ] || { echo "test: gpu-test.sh --only chose: $gl"; exit 1; }
# scripts/ab-small.sh on the same fakes: one line per (binary, mode, build) and exit 0; a wrong row
# (oxccl's fake reports one under FAKE_WRONG=1) makes it exit 1.
ab=$(PATH="$fb:$PATH" AB_LOGS="$bt/ab" bash scripts/ab-small.sh "$fb" 2 "sendrecv" nccl x="$fb/fake_perf" 2> /dev/null) \
  || { echo "test: ab-small failed on the fake binaries"; echo "$ab"; exit 1; }
[ "$(grep -c '^sendrecv .* rc 0: 8:' <<< "$ab")" = 4 ] || { echo "test: ab-small printed unexpected lines"; echo "$ab"; exit 1; }
if PATH="$fb:$PATH" FAKE_WRONG=1 AB_GRAPH=0 AB_LOGS="$bt/ab" bash scripts/ab-small.sh "$fb" 2 "sendrecv" x="$fb/fake_perf" > /dev/null 2>&1; then
  echo "test: ab-small passed a wrong row"; exit 1
fi
# A build's settings reach the ranks: the same fake, told to report a wrong row through its spec.
if PATH="$fb:$PATH" AB_GRAPH=0 AB_LOGS="$bt/ab" bash scripts/ab-small.sh "$fb" 2 "sendrecv" x="$fb/fake_perf,FAKE_WRONG=1" > /dev/null 2>&1; then
  echo "test: ab-small did not pass a build's settings to the ranks"; exit 1
fi
# An outer timeout stops multihost-check's and ab-small's current run too: nothing is left running.
st="$bt/stuck"; mkdir -p "$st/bin"; printf '#!/usr/bin/env bash\nexec sleep 31.25\n' > "$st/bin/mpirun"; chmod +x "$st/bin/mpirun"; touch "$st/lib.so"
PATH="$st/bin:$PATH" timeout 3 bash scripts/multihost-check.sh "$st/lib.so" "$st" 2 "$st/log" > /dev/null 2>&1 || true
PATH="$st/bin:$PATH" timeout 3 bash scripts/ab-small.sh "$st" 2 sendrecv x="$st/lib.so" > /dev/null 2>&1 || true
sleep 1
if pgrep -f "sleep 31.25" > /dev/null; then
  pkill -f "sleep 31.25"; echo "test: a timed-out multihost-check or ab-small left its run behind"; exit 1
fi
# MHC_RANKS: more ranks than GPUs reach mpirun (-np, HOSTSIM_GPUS), and hostsim.sh maps rank r to
# GPU r % HOSTSIM_GPUS and to its simulated host. A recording mpirun stands in for OpenMPI.
rec="$bt/rec"; mkdir -p "$rec/bin"; touch "$rec/lib.so"
printf '#!/usr/bin/env bash\necho "$*" >> "%s/args"\n' "$rec" > "$rec/bin/mpirun"; chmod +x "$rec/bin/mpirun"
# (It fails every check, having no rows to read: only the recorded command lines count here.)
PATH="$rec/bin:$PATH" MHC_PARTS=hosts MHC_RANKS=4 bash scripts/multihost-check.sh "$rec/lib.so" "$rec" 2 "$rec/log" > /dev/null 2>&1 || true
n4=$(grep -c -- '-np 4 -x HOSTSIM_GPUS=2 ' "$rec/args" || true); rm -f "$rec/args"
PATH="$rec/bin:$PATH" MHC_PARTS=hosts bash scripts/multihost-check.sh "$rec/lib.so" "$rec" 2 "$rec/log" > /dev/null 2>&1 || true
n2=$(grep -c -- '-np 2 -x LD_PRELOAD' "$rec/args" || true); nshare=$(grep -c HOSTSIM_GPUS "$rec/args" || true)
[ "$n4" = 22 ] && [ "$n2" = 11 ] && [ "$nshare" = 0 ] \
  || { echo "test: multihost-check's MHC_RANKS: $n4 shared runs (want 22), $n2 plain (want 11), $nshare plain with HOSTSIM_GPUS"; exit 1; }
sim=$(OMPI_COMM_WORLD_RANK=3 HOSTSIM_GPUS=2 bash scripts/hostsim.sh 2 env)
grep -qx NCCL_TESTS_DEVICE=1 <<< "$sim" && grep -qx NCCL_HOSTID=oxccl-sim-host-1 <<< "$sim" \
  || { echo "test: hostsim.sh mapped rank 3 of 2 GPUs wrongly"; grep NCCL_ <<< "$sim"; exit 1; }
if OMPI_COMM_WORLD_RANK=3 bash scripts/hostsim.sh 1 env | grep -q NCCL_TESTS_DEVICE; then echo "test: hostsim.sh set a device without HOSTSIM_GPUS"; exit 1; fi
rm -rf "$bt"
step "clippy"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --release --locked --all-targets -- -D warnings
  cargo clippy --release --locked --features conform --bin oxccl-conform -- -D warnings
else
  echo "test: clippy not installed; skipped"
fi
step "C ABI tests (ffi-tests)"
bash ffi-tests/run.sh target/release
step "packages (packaging/check.sh)"
bash packaging/check.sh
echo "test: all passed"
