#!/usr/bin/env bash
# oxccl against NCCL's sockets with a network link per simulated host (bench/netsim.sh), in
# one call: each nccl-tests binary named runs under NCCL, then under oxccl, with -c 1, and a table
# of times (us, out of place / in place) and oxccl/NCCL ratios is printed. Needs root (network
# namespaces, tc). With more ranks than GPUs, rank r runs on GPU r % GPUs and the CUDA MPS daemon
# is started for the run (and stopped after, if this script started it), so that the processes'
# kernels run side by side instead of in time slices.
#
#   bench/netsim-compare.sh <liboxccl.so> <nccl-tests build dir (MPI=1)> <dir of NVIDIA's libnccl.so.2> \
#       HOSTS RANKS_PER_HOST RATE "reduce broadcast" [nccl-tests size args, default -b 1M -e 64M -f 4]
#
# RATE: tc's units (10gbit), or "none" for no limit. NSC_OX_ENV="VAR=value ...": settings for the
# oxccl runs only (e.g. OXCCL_NET_REDUCE_PIPELINE_MIN=524288). NSC_OX_ENVS="A=1;A=2 B=3": several
# oxccl settings, separated by ';', each run right after the same NCCL run (one ratio column per
# setting; NCCL runs once per binary, not once per setting); it replaces NSC_OX_ENV. NSC_ITERS
# (default 5); NSC_LOG: the folder for the logs (default a new temporary one); NETSIM_CPUS=N: each
# simulated host on N CPUs of its own (netsim.sh run). After the table: how much each of
# `netsim.sh tcpstats`' counters (TCP's loss repairs; socket, shaper, veth and backlog drops) grew
# during each run.
set -uo pipefail
lib=$(realpath "$1"); nt=$2; nccldir=$(realpath "$3"); hosts=$4; ph=$5; rate=$6; tests=$7
shift 7
sizes=("$@"); [ ${#sizes[@]} -eq 0 ] && sizes=(-b 1M -e 64M -f 4)
here=$(cd "$(dirname "$0")" && pwd)
ns="$here/netsim.sh"
log=${NSC_LOG:-$(mktemp -d)}; mkdir -p "$log"
ranks=$((hosts * ph))
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -gt 0 ] || { echo "netsim-compare: no GPU found" >&2; exit 2; }
mpi=(mpirun --allow-run-as-root --bind-to none -np "$ranks")
share=()
# NETSIM_CPUS=N (netsim.sh run): each simulated host on N CPUs of its own, for both libraries.
[ -n "${NETSIM_CPUS:-}" ] && share+=(-x NETSIM_CPUS)
mps_started=0
if [ "$ranks" -gt "$gpus" ]; then
    share+=(-x NETSIM_GPUS="$gpus")
    export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/oxccl-mps} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/oxccl-mps-log}
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    # pgrep -x matches at most 15 characters of a name; -f matches the command line.
    if ! pgrep -f nvidia-cuda-mps-control > /dev/null; then
        nvidia-cuda-mps-control -d && mps_started=1
    fi
    share+=(-x CUDA_MPS_PIPE_DIRECTORY)
fi
cleanup() {
    bash "$ns" down "$hosts"
    [ $mps_started = 1 ] && echo quit | nvidia-cuda-mps-control
}
trap cleanup EXIT
if [ "$rate" = none ]; then bash "$ns" up "$hosts"; else bash "$ns" up "$hosts" "$rate"; fi || exit 1
# PMIx's server must listen where ranks in the namespaces can reach it: on the bridge.
export PMIX_MCA_ptl_tcp_if_include=oxsimbr0
# One oxccl run per setting; setting k logs as ox-<test>.log (k = 0) or ox<k>-<test>.log.
IFS=';' read -r -a variants <<< "${NSC_OX_ENVS:-${NSC_OX_ENV:-}}"
[ ${#variants[@]} -eq 0 ] && variants=("")
tag() { [ "$1" -eq 0 ] && echo ox || echo "ox$1"; }
iters=${NSC_ITERS:-5}
# TCP's loss repairs during each run (netsim.sh tcpstats, before and after).
tcp() { bash "$ns" tcpstats "$hosts" >> "$log/tcp-$1.txt"; }
for t in $tests; do
    tcp nccl-$t
    timeout 300 "${mpi[@]}" "${share[@]}" -x NCCL_DEBUG=WARN -x LD_LIBRARY_PATH="$nccldir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -x NCCL_IB_DISABLE=1 \
        bash "$ns" run "$ph" "$nt/${t}_perf" "${sizes[@]}" -c 1 -n "$iters" -w 2 > "$log/nccl-$t.log" 2>&1 || echo "NCCL $t: rc $?"
    tcp nccl-$t
    for k in "${!variants[@]}"; do
        x=$(tag "$k"); oxenv=(); for kv in ${variants[$k]}; do oxenv+=(-x "$kv"); done
        tcp $x-$t
        timeout 300 "${mpi[@]}" "${share[@]}" -x NCCL_DEBUG=WARN -x LD_PRELOAD="$lib" "${oxenv[@]}" \
            bash "$ns" run "$ph" "$nt/${t}_perf" "${sizes[@]}" -c 1 -n "$iters" -w 2 > "$log/$x-$t.log" 2>&1 || echo "oxccl $t (${variants[$k]:-default}): rc $?"
        tcp $x-$t
    done
done
echo "$hosts hosts x $ph, ${rate} per host link${NETSIM_CPUS:+, $NETSIM_CPUS CPUs per host}; logs in $log"
for k in "${!variants[@]}"; do echo "  $(tag "$k"): oxccl with ${variants[$k]:-its defaults}"; done
python3 - "$log" "${#variants[@]}" $tests <<'PY'
import sys
log, nvar, tests = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tags = ["ox"] + [f"ox{k}" for k in range(1, nvar)]
def rows(path):
    out = {}
    try:
        for line in open(path):
            f = line.split()
            # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
            if len(f) >= 13 and f[0].isdigit():
                out[int(f[0])] = (float(f[5]), float(f[9]), f[8], f[12])
    except OSError:
        pass
    return out
head = " | ".join(f"{x} us | {x} ratio | {x} wrong" for x in tags)
print(f"| test | bytes | NCCL us | {head} |")
print("|---|---|---|" + "---|---|---|" * len(tags))
fmt = lambda r: f"{r[0]:.0f} / {r[1]:.0f}" if r else "-"
for t in tests:
    n = rows(f"{log}/nccl-{t}.log")
    os_ = [rows(f"{log}/{x}-{t}.log") for x in tags]
    for size in sorted(set(n).union(*os_)):
        a = n.get(size)
        cells = []
        for o in os_:
            b = o.get(size)
            ratio = f"{b[0] / a[0]:.2f} / {b[1] / a[1]:.2f}" if a and b else "-"
            cells.append(f"{fmt(b)} | {ratio} | {f'{b[2]} / {b[3]}' if b else '-'}")
        print(f"| {t} | {size} | {fmt(a)} | {' | '.join(cells)} |")
def tcp(path):
    # Two lines of "name value ..." (before, after): the run's increase of each counter.
    try:
        a, b = [dict(zip(l.split()[::2], map(int, l.split()[1::2]))) for l in open(path).read().split("\n")[:2]]
        return " ".join(f"{k} {b[k] - a[k]}" for k in a)
    except (OSError, ValueError):
        return "-"
print("\nTCP loss repairs and shaper drops during each run (whole run, every size):")
for t in tests:
    print(f"  {t}: NCCL {tcp(f'{log}/tcp-nccl-{t}.txt')}")
    for x in tags:
        print(f"  {t}: {x} {tcp(f'{log}/tcp-{x}-{t}.txt')}")
PY
