#!/usr/bin/env bash
# Simulated hosts with a network of their own, on one machine: each simulated host is a network
# namespace with one veth "NIC" into a shared bridge, optionally rate-limited each way, so that
# cross-host traffic is bound by a per-host link as on a real cluster (scripts/hostsim.sh's ranks
# all share loopback, which has no per-host limit: a root sending to every host is as fast as a
# chain there, and it would not be over real NICs). Needs root (ip, tc); GPUs, /dev/shm and
# filesystem sockets are shared across namespaces, so CUDA IPC works as before.
#
#   bench/netsim.sh up HOSTS [RATE]  # namespaces oxsim0..HOSTS-1, 10.77.0.(h+1)/24 on
#                                          # "oxnic", the bridge 10.77.0.254; RATE (tc units, e.g.
#                                          # 25gbit) limits each host's send and receive
#   mpirun -np 4 --mca btl self,vader bench/netsim.sh run 2 ./all_reduce_perf ...  # 2 x 2
#   NETSIM_CPUS=4 ... netsim.sh run ...   # each simulated host on 4 CPUs of its own (taskset)
#   bench/netsim.sh check HOSTS      # each host's bytes/s to the next one, all at once
#   bench/netsim.sh tcpstats HOSTS   # TCP's loss repairs and drops, summed over hosts
#   bench/netsim.sh down HOSTS
#
# A rank moved into a namespace no longer sees the root namespace's loopback, where PMIx's server
# listens: export PMIX_MCA_ptl_tcp_if_include=oxsimbr0 before mpirun (after `up`), so that it
# listens on the bridge. With more ranks than GPUs (NCCL_TESTS_DEVICE=0 for every rank), run the
# CUDA MPS daemon (nvidia-cuda-mps-control -d; `echo quit | nvidia-cuda-mps-control` after) so
# that the processes' kernels run side by side instead of in time slices of milliseconds; NCCL
# then accepts ranks of different hosts on one GPU. Two ranks of one host on one GPU: NCCL refuses
# them (duplicate GPU); oxccl runs them, each taking its share of the SMs (topo::share_gpus).
#
# bench/netsim-compare.sh does all of this for a same-call comparison against NCCL.
#
# `run RANKS_PER_HOST cmd...` puts the MPI rank (OMPI_COMM_WORLD_RANK or PMI_RANK) into its host's
# namespace, sets NCCL_HOSTID as hostsim.sh does and NCCL_SOCKET_IFNAME=oxnic (both oxccl and NCCL
# then bootstrap and move data over the simulated NICs), then runs the command.
# oxccl tells by the namespaces that each host has a link of its own (topo::network_hash), so its
# defaults for hosts apart apply (chains in pieces, the ring of hosts). NETSIM_HOSTNAME=1 also
# gives each host a hostname of its own, so that oxccl takes the hosts for separate machines with
# cores of their own too (link threads then spin as if each host had the machine's cores).
set -euo pipefail
BR=oxsimbr0

up() {
    local hosts=${1:?usage: bench/netsim.sh up HOSTS [RATE]} rate=${2:-}
    ip link add $BR type bridge 2>/dev/null || true
    ip link set $BR up
    ip addr add 10.77.0.254/24 dev $BR 2>/dev/null || true
    for ((h = 0; h < hosts; h++)); do
        local ns=oxsim$h out=oxsimv$h
        ip netns add $ns
        ip link add $out type veth peer name oxnic netns $ns
        ip link set $out master $BR up
        ip -n $ns addr add 10.77.0.$((h + 1))/24 dev oxnic
        ip -n $ns link set oxnic up
        ip -n $ns link set lo up
        if [ -n "$rate" ]; then
            # tbf shapes egress only: inside the namespace that is the host's sending, on the
            # bridge side its receiving. The bucket must hold a whole GSO segment (64 KiB and up)
            # or nothing passes; 4 MiB covers 4 ms at 10 Gbit/s. NETSIM_QUEUE is tc's latency
            # (default 50ms): the shaper queues up to rate x latency plus
            # the bucket, 66 MB at 10 Gbit/s with 50 ms, where a switch port holds a few MB.
            local q=${NETSIM_QUEUE:-50ms}
            tc -n $ns qdisc add dev oxnic root tbf rate "$rate" burst 4mb latency "$q"
            tc qdisc add dev $out root tbf rate "$rate" burst 4mb latency "$q"
        fi
    done
    echo "netsim: $hosts hosts on $BR${rate:+, $rate each way, queue ${NETSIM_QUEUE:-50ms}}"
}

down() {
    local hosts=${1:?usage: bench/netsim.sh down HOSTS}
    for ((h = 0; h < hosts; h++)); do
        ip netns del oxsim$h 2>/dev/null || true # takes its veth pair with it
    done
    ip link del $BR 2>/dev/null || true
}

check() {
    # One TCP stream per host to the next host, all at once: what each simulated NIC carries.
    local hosts=${1:?usage: bench/netsim.sh check HOSTS} pids=() h
    for ((h = 0; h < hosts; h++)); do
        ip netns exec oxsim$h python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 17700)); s.listen(1); c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
' &
        pids+=($!)
    done
    sleep 0.5
    for ((h = 0; h < hosts; h++)); do
        ip netns exec oxsim$h python3 -c '
import socket, sys, time
dst = sys.argv[1]; s = socket.create_connection((dst, 17700)); buf = b"x" * (1 << 20)
t = time.time(); n = 0
while time.time() - t < 2: s.sendall(buf); n += len(buf)
s.close(); print(f"host {sys.argv[2]} -> {dst}: {n / (time.time() - t) / 1e9:.2f} GB/s")
' 10.77.0.$(( (h + 1) % hosts + 1 )) $h &
    done
    wait
}

tcpstats() {
    # Counters since `up` (a namespace's TCP counters start at zero), summed over the hosts: TCP's
    # retransmitted segments, tail loss probes, retransmission timeouts, socket drops and DSACKs,
    # the packets the shapers and the veth pairs dropped; and the machine's receive backlog drops
    # since boot.
    # Why count them: single lanes 15-26 ms late stalled whole steps, as a segment lost at the end
    # of a burst would (Linux's tail loss probe waits at least 10 ms).
    local hosts=${1:?usage: bench/netsim.sh tcpstats HOSTS} h
    for ((h = 0; h < hosts; h++)); do
        ip netns exec oxsim$h cat /proc/net/snmp /proc/net/netstat
        echo "qdisc $(tc -s -n oxsim$h qdisc show dev oxnic | grep -o 'dropped [0-9]*')"
        echo "qdisc $(tc -s qdisc show dev oxsimv$h 2>/dev/null | grep -o 'dropped [0-9]*')"
        # Packets the veth pair dropped itself (its peer's queue full), past every qdisc.
        echo "linkdrops $(ip netns exec oxsim$h cat /sys/class/net/oxnic/statistics/{rx,tx}_dropped) $(cat /sys/class/net/oxsimv$h/statistics/{rx,tx}_dropped 2>/dev/null)"
    done | python3 -c '
import sys
# Socket drops: segments a receiving socket had no room for (rcvbuf or backlog full, zero window,
# out of order). DSACKs: reports from the receiver that it got data twice (retransmitted without a
# loss); dsack_segs: how many segments those covered (RetransSegs counts segments too, 45 for a
# 64 KiB GSO burst, while dsacks counts reports). reorders: reordering TCP detected;
# rtx_still_queued: retransmissions not sent because the original was still in a queue of this
# host (in a shaper, say).
want = {"RetransSegs": "retrans", "TCPLossProbes": "probes", "TCPTimeouts": "timeouts", "TCPLostRetransmit": "lost_retrans",
        "TCPBacklogDrop": "sock_drops", "TCPRcvQDrop": "sock_drops", "TCPZeroWindowDrop": "sock_drops", "TCPOFODrop": "sock_drops",
        "TCPDSACKRecv": "dsacks", "TCPDSACKRecvSegs": "dsack_segs",
        "TCPSACKReorder": "reorders", "TCPTSReorder": "reorders", "TCPRenoReorder": "reorders",
        "TCPSpuriousRtxHostQueues": "rtx_still_queued"}
tot = dict.fromkeys(want.values(), 0); drops = 0; link = 0; head = {}
for line in sys.stdin:
    f = line.split()
    if f[:1] == ["qdisc"]:
        drops += int(f[2]) if len(f) > 2 else 0
    elif f[:1] == ["linkdrops"]:
        link += sum(map(int, f[1:]))
    elif f and f[0] in head:
        for k, v in zip(head.pop(f[0]), f[1:]):
            if k in want: tot[want[k]] += int(v)
    elif f and f[0].endswith(":"):
        head[f[0]] = f[1:]
# Receive backlogs, shared by every namespace (a count since boot): packets dropped because the
# backlog of a CPU was full when they arrived (second column, hex).
backlog = sum(int(l.split()[1], 16) for l in open("/proc/net/softnet_stat"))
print(" ".join(f"{k} {v}" for k, v in tot.items()) + f" shaper_drops {drops} link_drops {link} backlog_drops {backlog}")
'
}

run() {
    local per_host=${1:?usage: bench/netsim.sh run RANKS_PER_HOST command...}
    shift
    local rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
    local h=$((rank / per_host))
    local cmd=(env NCCL_HOSTID="oxccl-sim-host-$h" NCCL_SOCKET_IFNAME=oxnic "$@")
    # More ranks than GPUs: rank r on GPU r % NETSIM_GPUS (nccl-tests' NCCL_TESTS_DEVICE).
    [ -n "${NETSIM_GPUS:-}" ] && cmd=(env NCCL_TESTS_DEVICE=$((rank % NETSIM_GPUS)) "${cmd[@]}")
    # NETSIM_CPUS=N: simulated host h runs on CPUs h*N..h*N+N-1 alone, as a machine of N cores
    # would (its ranks' threads then compete only with each other, not with other hosts').
    if [ -n "${NETSIM_CPUS:-}" ]; then
        local lo=$((h * NETSIM_CPUS)) hi=$((h * NETSIM_CPUS + NETSIM_CPUS - 1))
        [ "$hi" -lt "$(nproc --all)" ] || { echo "netsim.sh: host $h needs CPUs $lo-$hi, this machine has $(nproc --all)" >&2; exit 2; }
        cmd=(taskset -c "$lo-$hi" "${cmd[@]}")
    fi
    if [ "${NETSIM_HOSTNAME:-0}" = 1 ]; then
        # A hostname of its own (UTS namespace): oxccl then takes each simulated host for a
        # machine of its own, as on a cluster (topo::machine_hash: its cores).
        exec ip netns exec oxsim$h unshare --uts sh -c 'hostname "$0" && exec "$@"' oxsim$h "${cmd[@]}"
    fi
    exec ip netns exec oxsim$h "${cmd[@]}"
}

cmd=${1:?usage: bench/netsim.sh up|down|check|run|tcpstats ...}
shift
case $cmd in
up | down | check | run | tcpstats) $cmd "$@" ;;
*) echo "netsim.sh: unknown command $cmd" >&2; exit 2 ;;
esac
