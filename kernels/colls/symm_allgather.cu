// AllGather into a buffer of a symmetric window (src/symmem): every rank writes its piece straight
// into every rank's output through the flat space, where rank p's copy of the output lies at
// `recv + p * stride`. No scratch, no copy-out: the put paths' extra pass over the data is gone.
//
// CollArgs, as this kernel uses them: send = this rank's piece; recv = the output's address in
// slot 0 of the flat space; chunk_elems = the stride between slots (bytes); count = the piece's
// bytes; scalar = the output as the caller passed it (this rank's own piece goes there, through
// the caller's mapping, and not at all when the call is in place).
//
// Two barriers of each block with the same block on every peer (memory_channel.cuh):
// - on entry: every peer's stream has reached this collective, so nothing there still reads or
//   writes the output this launch is about to write into (stream order protects only a rank's own
//   writes);
// - on exit: publishes this block's writes to the peers (the signal's release, after the block's
//   __syncthreads) and, through the waits' acquire, makes the peers' writes of the same slice
//   visible here before the launch ends. Every block writes one slice of the piece, and the peers'
//   block b wrote slice b of theirs, so after every block's exit barrier the whole output is here.
// The grid is the same on every rank (algo::symm), as the barriers pair blocks by index.
#include "common.cuh"
#include "copy.cuh"
#include "memory_channel.cuh"
#include "done.cuh"
#include "pdl.cuh"

OX_DEV void ox_allgather_symm_body(const CollArgs& a) {
  ox_pdl_enter();
  const DevComm& c = ox_comm(a);
  AbortState ab(c.abort_flag);
  const int me = c.rank, n = c.nranks;
  ox_block_sync_peers(c, ab);
  const uint64_t nbytes = a.count, stride = a.chunk_elems;
  // This block's slice, in 16-byte units so every slice but the last keeps the copy vectorized.
  const uint64_t per = ox_ceil_div(ox_ceil_div(nbytes, 16), gridDim.x) * 16;
  const uint64_t lo = ox_min((uint64_t)blockIdx.x * per, nbytes);
  const uint64_t len = ox_min(lo + per, nbytes) - lo;
  const char* src = reinterpret_cast<const char*>(a.send) + lo;
  for (int k = 1; k <= n && len > 0; ++k) {
    const int p = me + k < n ? me + k : me + k - n;  // peers first, staggered; this rank's own last
    char* dst = p == me ? reinterpret_cast<char*>(a.scalar) : reinterpret_cast<char*>(a.recv + (uint64_t)p * stride);
    dst += (uint64_t)me * nbytes + lo;
    if (dst == src) continue;  // in place: this rank's piece is already in its output
    ox_copy(dst, src, len, threadIdx.x, blockDim.x, false);
  }
  ox_block_sync_peers(c, ab);
}

extern "C" __global__ void ox_allgather_symm(const __grid_constant__ CollArgs a) {
  ox_allgather_symm_body(a);
  ox_done_publish(a.done);
}
