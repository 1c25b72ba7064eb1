// Two processes, ranks 0 and 1 (one GPU each), for the GPU tests that need a peer in another
// process (gpu_pair.c, gpu_syncwait.c). A child exits 0 (pass), 77 (fewer than 2 GPUs) or
// anything else (fail), and is killed by SIGALRM when it stalls.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

// This process's rank (set in the child before anything else).
static int rank;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "rank %d: ", rank);                  \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);   \
      _exit(1);                                            \
    }                                                      \
  } while (0)

// The child's start: an alarm of `alarm_env` seconds (default 120; a stalled call never returns),
// exit 77 without 2 GPUs (unless TWO_PROCS_ONE_GPU=1), GPU `rank` (modulo the GPUs), and the
// 2-rank communicator, rank 0 sending its id to rank 1 over a pipe (`id_w` / `id_r`). Inline:
// tests that make their own communicators (gpu_grow.c) leave it unused.
static inline ncclComm_t pair_comm_config(const char* alarm_env, int id_w, int id_r, ncclConfig_t* config);
static inline ncclComm_t pair_comm(const char* alarm_env, int id_w, int id_r) { return pair_comm_config(alarm_env, id_w, id_r, NULL); }

// pair_comm with ncclCommInitRankConfig's `config` (NULL: ncclCommInitRank, as pair_comm).
static inline ncclComm_t pair_comm_config(const char* alarm_env, int id_w, int id_r, ncclConfig_t* config) {
  const char* secs = getenv(alarm_env);
  alarm(secs && atoi(secs) > 0 ? (unsigned)atoi(secs) : 120);
  int n = 0;
  // TWO_PROCS_ONE_GPU=1: both ranks on one GPU (a one-GPU machine; tests of semantics, not speed).
  int share = getenv("TWO_PROCS_ONE_GPU") && atoi(getenv("TWO_PROCS_ONE_GPU")) == 1;
  // 77 (skip) only where the machine has too few GPUs; any other failure (an MPS server refusing
  // clients, say) fails the test.
  const cudaError_t counted = cudaGetDeviceCount(&n);
  if (counted == cudaErrorNoDevice || counted == cudaErrorInsufficientDriver || (counted == cudaSuccess && (n < 1 || (n < 2 && !share)))) _exit(77);
  CHECK(counted == cudaSuccess, "cudaGetDeviceCount: %s", cudaGetErrorString(counted));
  CHECK(cudaSetDevice(rank % n) == cudaSuccess, "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(write(id_w, &id, sizeof id) == sizeof id, "sending the id");
  } else {
    CHECK(read(id_r, &id, sizeof id) == sizeof id, "receiving the id");
  }
  ncclComm_t comm;
  if (config) {
    CHECK(ncclCommInitRankConfig(&comm, 2, id, rank, config) == ncclSuccess, "ncclCommInitRankConfig");
  } else {
    CHECK(ncclCommInitRank(&comm, 2, id, rank) == ncclSuccess, "ncclCommInitRank");
  }
  return comm;
}

// Forks `child(0)` and `child(1)` (each must _exit), waits for both and reports as `name`:
// 0 pass, 77 skipped, 1 fail, 2 could not fork. `stalled` says what a rank killed by its alarm
// was waiting for; `passed` what a pass shows.
static int two_processes(const char* name, void (*child)(int rank), const char* stalled, const char* passed) {
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) return 2;
    if (pids[r] == 0) child(r);
  }
  int rc = 0, skipped = 0;
  for (int r = 0; r < 2; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
      skipped = 1;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "%s: rank %d %s %d\n", name, r, WIFSIGNALED(st) ? "killed by signal" : "exited with",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) fprintf(stderr, "%s: rank %d timed out: %s\n", name, r, stalled);
      rc = 1;
    }
  }
  if (skipped && !rc) {
    printf("%s: fewer than 2 GPUs, skipped\n", name);
    return 77;
  }
  printf("%s: %s\n", name, rc ? "FAIL" : passed);
  return rc;
}
