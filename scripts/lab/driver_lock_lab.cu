// Which CUDA calls of a helper thread wait behind an application thread that waits in the driver
// for a kernel, while that kernel waits for the helper (a proxy, a copy-engine worker). Session 46
// (BENCHMARKS, thirty-fourth pass): the PyTorch suite on 2 simulated hosts hung that way, the
// application thread in `.cpu()` (a copy into pageable memory behind our step kernel), the proxy's
// link threads in cuMemcpyAsync. Measured on H200 with the CUDA 13.0 driver: while the main thread
// waits in a device-to-host copy into pageable memory (cudaMemcpy, or cudaMemcpyAsync on the
// legacy stream), every call of the helper that issues work or allocates waits for it too (copies
// either way on its own non-blocking stream, kernel launches, cudaStreamCreate, cudaHostAlloc);
// stream and event queries do not. Into pinned memory, or with cudaStreamSynchronize,
// cudaDeviceSynchronize or cudaEventSynchronize in the main thread, nothing waits. Hence: no
// thread of oxccl's may need to issue GPU work for a running kernel of ours to finish.
// A watchdog releases the kernel after 3 s, so a blocked call shows as about 2.7 s, not a hang.
//   for m in pageable pageable-sync pinned streamsync devsync; do
//     for x in none d2h h2d h2d-noSync d2d query launch launch-noSync streamcreate hostalloc; do
//       target/lab/driver_lock_lab $m $x; done; done
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <atomic>
#include <chrono>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
__global__ void spin(volatile int* flag) { while (*flag == 0) {} }
__global__ void tiny(int* p) { *p = 1; }
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  const char* mainmode = argv[1]; const char* x = argv[2];
  size_t n = 4 << 20;
  CK(cudaSetDevice(0));
  int* flag; CK(cudaHostAlloc(&flag, 4, cudaHostAllocMapped)); *flag = 0;
  int* dflag; CK(cudaHostGetDevicePointer(&dflag, flag, 0));
  char *d, *d2, *pin; CK(cudaMalloc(&d, n)); CK(cudaMalloc(&d2, n)); CK(cudaHostAlloc(&pin, n, 0));
  char* pageable = (char*)malloc(n); memset(pageable, 0, n);
  cudaStream_t user, own; CK(cudaStreamCreate(&user)); CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  tiny<<<1, 1, 0, own>>>((int*)d2); CK(cudaStreamSynchronize(own));  // load modules first
  spin<<<1, 1, 0, user>>>((volatile int*)dflag);
  CK(cudaEventRecord(ev, user));
  std::atomic<int> done{0}; double took = -1;
  std::thread helper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double t = now();
    if (!strcmp(x, "d2h")) { cudaMemcpyAsync(pin, d2, n, cudaMemcpyDeviceToHost, own); cudaStreamSynchronize(own); }
    else if (!strcmp(x, "h2d")) { cudaMemcpyAsync(d2, pin, n, cudaMemcpyHostToDevice, own); cudaStreamSynchronize(own); }
    else if (!strcmp(x, "h2d-noSync")) { cudaMemcpyAsync(d2, pin, n, cudaMemcpyHostToDevice, own); }
    else if (!strcmp(x, "d2d")) { cudaMemcpyAsync(d2, d2 + n / 2, n / 2, cudaMemcpyDeviceToDevice, own); cudaStreamSynchronize(own); }
    else if (!strcmp(x, "query")) { cudaStreamQuery(own); cudaEventQuery(ev); }
    else if (!strcmp(x, "launch")) { tiny<<<1, 1, 0, own>>>((int*)d2); cudaStreamSynchronize(own); }
    else if (!strcmp(x, "launch-noSync")) { tiny<<<1, 1, 0, own>>>((int*)d2); }
    else if (!strcmp(x, "streamcreate")) { cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
    else if (!strcmp(x, "hostalloc")) { void* p; cudaHostAlloc(&p, 1 << 20, 0); }
    took = now() - t; done = 1;
    *(volatile int*)flag = 1;
  });
  std::thread watchdog([&] { for (int i = 0; i < 300 && !done; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10)); *(volatile int*)flag = 1; });
  double t = now();
  if (!strcmp(mainmode, "pageable")) { CK(cudaStreamWaitEvent(0, ev, 0)); CK(cudaMemcpyAsync(pageable, d, n, cudaMemcpyDeviceToHost, 0)); CK(cudaStreamSynchronize(0)); }
  else if (!strcmp(mainmode, "pageable-sync")) { CK(cudaMemcpy(pageable, d, n, cudaMemcpyDeviceToHost)); }
  else if (!strcmp(mainmode, "pinned")) { CK(cudaStreamWaitEvent(0, ev, 0)); CK(cudaMemcpyAsync(pin, d, n, cudaMemcpyDeviceToHost, 0)); CK(cudaStreamSynchronize(0)); }
  else if (!strcmp(mainmode, "streamsync")) { CK(cudaStreamSynchronize(user)); }
  else if (!strcmp(mainmode, "devsync")) { CK(cudaDeviceSynchronize()); }
  else if (!strcmp(mainmode, "eventsync")) { CK(cudaEventSynchronize(ev)); }
  double tm = now() - t;
  helper.join(); watchdog.join(); CK(cudaDeviceSynchronize());
  printf("main %-14s helper %-14s: helper's call %7.3f s%s, main %6.3f s\n", mainmode, x, took, took > 2.5 ? " BLOCKED" : "", tm);
  return 0;
}
