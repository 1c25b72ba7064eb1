#!/usr/bin/env bash
# Runs a command as if its MPI rank lived on its own host among several, on one machine: sets
# NCCL_HOSTID from the rank (OpenMPI's OMPI_COMM_WORLD_RANK, or PMI_RANK) so that oxccl, and NCCL,
# treat ranks with different ids as different hosts (network transport between them).
#   mpirun -np 4 scripts/hostsim.sh 2 ./all_reduce_perf ...   # 2 hosts x 2 ranks
#   mpirun -np 4 scripts/hostsim.sh 1 ./all_reduce_perf ...   # 4 hosts x 1 rank
# With -g N (N GPUs per process) every process is one host. With HOSTSIM_GPUS=G set, rank r runs
# on GPU r % G (nccl-tests' NCCL_TESTS_DEVICE): more ranks than GPUs, for the layouts' correctness
# on a smaller machine (GPUs time-shared; NCCL itself refuses two ranks on one GPU).
set -euo pipefail
per_host=${1:?usage: hostsim.sh RANKS_PER_HOST command...}
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
export NCCL_HOSTID="oxccl-sim-host-$(( rank / per_host ))"
if [ -n "${HOSTSIM_GPUS:-}" ]; then export NCCL_TESTS_DEVICE=$(( rank % HOSTSIM_GPUS )); fi
exec "$@"
