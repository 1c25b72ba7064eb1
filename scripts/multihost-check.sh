#!/usr/bin/env bash
# Cross-host correctness on one machine: every nccl-tests binary with -c 1 -d all (-o all for the
# reducing ones) under mpirun, ranks split into simulated hosts by scripts/hostsim.sh: 2 hosts x
# N/2 ranks (N >= 4) and N hosts x 1, plus -G 20 for AllReduce; then one host over copy engines
# (OXCCL_LOCAL_TRANSPORT=ce) and host staging (NCCL_P2P_DISABLE=1). Fails if any row is wrong or a
# run fails; each line says how long its run took (a hang and a slow run look alike otherwise).
# Usage: scripts/multihost-check.sh <liboxccl.so> <nccl-tests build dir (MPI=1)> [N GPUs] [log dir]
# (default log dir: a new temporary one). MHC_PARTS="hosts" or "local" runs only the simulated
# hosts or only the one-host transports (each part fits one 10-minute device call); default both.
# MHC_GRAPH=all runs every binary under -G 20 as well (-d all, -o all), not only AllReduce;
# MHC_GRAPH=only runs only those -G 20 runs.
# MHC_RANKS=R runs the simulated hosts with R ranks instead of N: with R > N, rank r on GPU r % N
# (GPUs time-shared), so a 2-GPU machine can check the 2 x 2 and 4 x 1 layouts (MHC_RANKS=4).
# MHC_ENV="VAR=value ..." passes those settings to every rank (e.g. OXCCL_NET_STAGE_PIPELINE=1).
set -uo pipefail
lib=$(realpath "$1"); nt=$2; n=${3:-$(nvidia-smi -L | wc -l)}
here=$(cd "$(dirname "$0")" && pwd)
mpi="mpirun --allow-run-as-root --bind-to none"
# Each run goes in the background and is waited for, so a TERM or INT to this script (an outer
# timeout) stops the run as well: left behind, its ranks kept spinning on the GPUs and slowed the
# measurements that followed.
job=""
trap '[ -n "$job" ] && kill -TERM "$job" 2>/dev/null; exit 143' TERM INT
bg_run() { "$@" & job=$!; wait "$job"; local rc=$?; job=""; return $rc; }
fails=0
ranks=${MHC_RANKS:-$n}
share=(); [ "$ranks" -gt "$n" ] && share=(-x HOSTSIM_GPUS="$n")
extra=(); for kv in ${MHC_ENV:-}; do extra+=(-x "$kv"); done
share+=("${extra[@]}")
layouts="1"; [ "$ranks" -ge 4 ] && layouts="$(( ranks / 2 )) 1"
t0=$SECONDS
check() { # label, log, rc (hypercube has no redop column)
  local a=9 b=13; case $2 in *hypercube*) a=8; b=12;; esac
  local rows wrong took=$((SECONDS - t0))
  t0=$SECONDS
  rows=$(grep -cE '^ +[0-9]' "$2"); wrong=$(grep -E '^ +[0-9]' "$2" | awk -v a=$a -v b=$b '$a!=0||($b!="N/A"&&$b!=0)' | wc -l)
  if [ "$3" -eq 0 ] && [ "$rows" -gt 0 ] && [ "$wrong" -eq 0 ]; then echo "PASS  $1 ($rows rows, ${took} s)"; else echo "FAIL  $1 (rc $3, $rows rows, $wrong wrong, ${took} s; $2)"; fails=$((fails + 1)); fi
}
if [ -n "${4:-}" ]; then log=$4; mkdir -p "$log"; else log=$(mktemp -d); fi
parts=${MHC_PARTS:-hosts local}
# -G 20 (CUDA graphs) for AllReduce only by default; MHC_GRAPH=all runs every binary that way too.
# Sizes up to 8 MB in every part: staged steps above 256 KiB pipeline (OXCCL_NET_STAGE_PIPELINE), so
# each part has rows on both sides of that threshold.
graph_tests=all_reduce
plain_tests="all_reduce reduce_scatter reduce broadcast all_gather alltoall sendrecv gather scatter hypercube"
case ${MHC_GRAPH:-} in all) graph_tests=$plain_tests;; only) graph_tests=$plain_tests; plain_tests="";; esac
[[ " $parts " == *" hosts "* ]] || layouts=""
for ph in $layouts; do
  for t in $plain_tests; do
    o=""; case $t in all_reduce|reduce_scatter|reduce) o="-o all";; esac
    d="-d all"; [ $t = hypercube ] && d=""
    bg_run timeout 300 $mpi -np "$ranks" "${share[@]}" -x LD_PRELOAD="$lib" -x NCCL_DEBUG=WARN -x OXCCL_DEBUG_DUMP=30 "$here/hostsim.sh" "$ph" "$nt/${t}_perf" -b 8 -e 8M -f 8 -c 1 $d $o -n 1 -w 1 > "$log/$ph-$t.log" 2>&1
    check "$((ranks / ph)) hosts x $ph: $t" "$log/$ph-$t.log" $?
  done
  for t in $graph_tests; do
    o=""; case $t in all_reduce|reduce_scatter|reduce) o="-o all";; esac
    d="-d all"; [ $t = hypercube ] && d=""
    bg_run timeout 300 $mpi -np "$ranks" "${share[@]}" -x LD_PRELOAD="$lib" -x NCCL_DEBUG=WARN -x OXCCL_DEBUG_DUMP=30 "$here/hostsim.sh" "$ph" "$nt/${t}_perf" -b 8 -e 8M -f 16 -c 1 $d $o -G 20 -n 2 -w 1 > "$log/$ph-G-$t.log" 2>&1
    check "$((ranks / ph)) hosts x $ph: $t -G 20" "$log/$ph-G-$t.log" $?
  done
done
# The same machinery between GPUs of one host: copy engines (OXCCL_LOCAL_TRANSPORT=ce) for every
# binary, and the host-staged path (NCCL_P2P_DISABLE=1) for four of them.
local_tests="all_reduce reduce_scatter reduce broadcast all_gather alltoall sendrecv gather scatter hypercube"
host_tests="all_reduce all_gather alltoall sendrecv"
[[ " $parts " == *" local "* ]] || { local_tests=""; host_tests=""; }
for t in $local_tests; do
  o=""; case $t in all_reduce|reduce_scatter|reduce) o="-o all";; esac
  d="-d all"; [ $t = hypercube ] && d=""
  bg_run timeout 300 $mpi -np "$n" "${extra[@]}" -x LD_PRELOAD="$lib" -x OXCCL_LOCAL_TRANSPORT=ce -x NCCL_DEBUG=WARN "$nt/${t}_perf" -b 8 -e 8M -f 8 -c 1 $d $o -n 1 -w 1 > "$log/ce-$t.log" 2>&1
  check "copy engine: $t" "$log/ce-$t.log" $?
done
for t in $host_tests; do
  o=""; [ $t = all_reduce ] && o="-o all"
  bg_run timeout 300 $mpi -np "$n" "${extra[@]}" -x LD_PRELOAD="$lib" -x NCCL_P2P_DISABLE=1 -x NCCL_DEBUG=WARN "$nt/${t}_perf" -b 8 -e 8M -f 16 -c 1 -d all $o -n 1 -w 1 > "$log/host-$t.log" 2>&1
  check "NCCL_P2P_DISABLE=1: $t" "$log/host-$t.log" $?
done
echo "multihost-check: $fails failure(s); logs in $log"
[ "$fails" -eq 0 ]
