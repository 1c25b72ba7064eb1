// Host cost of one kernel launch on this machine (session 42): the driver's cuLaunchKernel and
// cuLaunchKernelEx (with the programmatic-serialization attribute oxccl uses), a 64-byte argument
// struct as oxccl's CollArgs, on a non-blocking stream; the kernel either returns at once or spins
// for a given time (so the launches queue up behind a busy GPU, as in an eager nccl-tests loop).
// Also (session 43) the same launch followed by a cuEventRecord on its stream, and followed by a
// cuStreamGetCaptureInfo query: what keeping an event behind every launch would cost.
//   nvcc -O2 -arch=sm_90 -o launch_lab launch_lab.cu -lcuda && ./launch_lab
#include <cuda.h>
#include <cstdio>
#include <ctime>
#include <cstdint>
struct Args { uint64_t w[8]; };
extern "C" __global__ void spin(Args a) {
  if (a.w[0] == 0) return;
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < a.w[0]);
}
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { printf("%s failed %d\n", #x, r); return 1; } } while (0)
static double now() { timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
int main() {
  CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CUfunction f;
  // The kernel as the runtime registered it from this file's fatbin (the driver handle of it).
  cudaFunction_t rf; if (cudaGetFuncBySymbol(&rf, (const void*)spin) != cudaSuccess) { printf("no func\n"); return 1; }
  f = (CUfunction)rf;
  CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  static const char* names[] = {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernelEx+PDL", "+PDL, cuEventRecord", "+PDL, capture query"};
  const int N = 20000;
  for (int spin_ns : {0, 2000, 4000}) for (int ex = 0; ex < 5; ++ex) for (int grid : {1, 8}) {
    Args a{}; a.w[0] = spin_ns; void* p[] = {&a};
    CUlaunchAttribute at{}; at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; at.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{}; cfg.gridDimX = grid; cfg.gridDimY = cfg.gridDimZ = 1; cfg.blockDimX = 512; cfg.blockDimY = cfg.blockDimZ = 1; cfg.hStream = s;
    cfg.attrs = ex >= 2 ? &at : nullptr; cfg.numAttrs = ex >= 2 ? 1 : 0;
    for (int i = 0; i < 200; ++i) CK(cuLaunchKernel(f, grid, 1, 1, 512, 1, 1, 0, s, p, nullptr));
    CK(cuStreamSynchronize(s));
    double t0 = now();
    for (int i = 0; i < N; ++i) {
      if (ex == 0) CK(cuLaunchKernel(f, grid, 1, 1, 512, 1, 1, 0, s, p, nullptr));
      else CK(cuLaunchKernelEx(&cfg, f, p, nullptr));
      if (ex == 3) CK(cuEventRecord(ev, s));
      if (ex == 4) {
        CUstreamCaptureStatus st; cuuint64_t id;
        CK(cuStreamGetCaptureInfo(s, &st, &id, nullptr, nullptr, nullptr, nullptr));
      }
    }
    double t1 = now();
    CK(cuStreamSynchronize(s));
    double t2 = now();
    printf("kernel %4d ns grid %d %-22s host %.3f us/launch, end to end %.3f us/launch\n", spin_ns, grid,
           names[ex], (t1 - t0) / N * 1e6, (t2 - t0) / N * 1e6);
  }
  return 0;
}
