#!/usr/bin/env bash
# Small-message A/B of several oxccl builds and NVIDIA NCCL in one sitting (one device call), to
# find which build moved a latency: every binary, eager and under CUDA graphs, builds interleaved
# so machine drift hits all alike. Prints one line per (binary, mode, build): size:time pairs
# (out-of-place, us; "!" marks a wrong row).
#
#   scripts/ab-small.sh <nccl-tests build dir> <np> "<binaries>" nccl label=/path/liboxccl.so[,VAR=value...] ...
#   e.g. scripts/ab-small.sh /tmp/nt 4 "all_gather broadcast" nccl new=target/release/liboxccl.so old=/tmp/old.so
#   A build may carry settings (passed to every rank): one=lib.so,OXCCL_GATHER_ONESHOT_MAX_BYTES=65536
#
# Environment: AB_ARGS (default "-b 8 -e 64K -f 8 -c 1 -n 300 -w 30"), AB_GRAPH (default "0 20":
# the -G values to run), AB_LOGS (a folder to keep every log in; default a temporary one).
set -uo pipefail
nt=${1:?nccl-tests dir}; np=${2:?rank count}; bins=${3:?binaries}; shift 3
[ $# -gt 0 ] || { echo "ab-small: name at least one build (nccl, or label=liboxccl.so)"; exit 2; }
args=${AB_ARGS:--b 8 -e 64K -f 8 -c 1 -n 300 -w 30}
logs=${AB_LOGS:-$(mktemp -d)}; mkdir -p "$logs"
mpi="mpirun --allow-run-as-root --bind-to none"
# Each run goes in the background and is waited for, so a TERM or INT to this script (an outer
# timeout) stops the run as well: left behind, its ranks kept spinning on the GPUs and slowed the
# measurements that followed.
job=""
trap '[ -n "$job" ] && kill -TERM "$job" 2>/dev/null; exit 143' TERM INT
bg_run() { "$@" & job=$!; wait "$job"; local rc=$?; job=""; return $rc; }
lib_of() { local s=${1#*=}; echo "${s%%,*}"; }
for b in "$@"; do  # every library must exist before the first run
  [ "$b" = nccl ] || [ -e "$(lib_of "$b")" ] || { echo "ab-small: no library $(lib_of "$b")"; exit 2; }
done
fail=0
for t in $bins; do
  for G in ${AB_GRAPH:-0 20}; do
    for b in "$@"; do
      label=${b%%=*}; pre=()
      if [ "$b" != nccl ]; then
        spec=${b#*=}; pre=(-x LD_PRELOAD="$(realpath "$(lib_of "$b")")")
        if [ "$spec" != "${spec%%,*}" ]; then
          IFS=, read -ra kv <<< "${spec#*,}"
          for e in "${kv[@]}"; do pre+=(-x "$e"); done
        fi
      fi
      log="$logs/$t-np$np-G$G-$label.log"
      bg_run timeout 120 $mpi -np "$np" "${pre[@]}" -x NCCL_NVLS_ENABLE=0 -x NCCL_DEBUG=WARN "$nt/${t}_perf" $args -G "$G" > "$log" 2>&1
      rc=$?
      rows=$(grep -E '^ +[0-9]' "$log" | awk '{printf "%s:%s%s ", $1, $6, ($9 != 0 && $9 != "N/A" ? "!" : "")}')
      [ $rc -eq 0 ] && [ -n "$rows" ] || fail=1
      case $rows in *!*) fail=1 ;; esac
      printf '%-14s np%s G%-2s %-10s rc %s: %s\n' "$t" "$np" "$G" "$label" "$rc" "$rows"
    done
  done
done
echo "ab-small: logs in $logs"
exit $fail
