// MemoryChannel: this rank's connection to one peer through peer-mapped device memory. GPU threads
// move data themselves: put copies local data into the peer's buffer, get copies the peer's buffer
// into local memory; put_packets/unpack_packets do the same with LL16 packets, which need no
// signal. signal/wait order plain puts (see semaphore.cuh for the contract).
//
// Channels are built on the fly from DevComm for (block, peer): each block has its own semaphore
// counters per peer, so blocks progress independently and no grid-wide barrier is needed.
#pragma once
#include "copy.cuh"
#include "packet.cuh"
#include "semaphore.cuh"

struct MemoryChannel {
  char* remote;          // the peer's buffer, as mapped into this rank
  char* local;           // this rank's buffer of the same kind
  uint64_t* outbound;    // the peer's inbound counter for (this block, this rank)
  const uint64_t* inbound;  // this rank's inbound counter for (this block, the peer)
  uint64_t* expected;    // this rank's expected count for (this block, the peer)

  // Block-cooperative copy of `nbytes` from local memory `src` to remote + dst_off.
  OX_DEV void put(uint64_t dst_off, const void* src, uint64_t nbytes, uint32_t tid, uint32_t nthreads) const {
    ox_copy(remote + dst_off, reinterpret_cast<const char*>(src), nbytes, tid, nthreads, false);
  }
  // Block-cooperative copy of `nbytes` from remote + src_off to local memory `dst`.
  OX_DEV void get(void* dst, uint64_t src_off, uint64_t nbytes, uint32_t tid, uint32_t nthreads) const {
    ox_copy(reinterpret_cast<char*>(dst), remote + src_off, nbytes, tid, nthreads, true);
  }
  // Writes `nbytes` of `src` as LL16 packets at remote + dst_off (16 bytes per 8 of payload).
  OX_DEV void put_packets(uint64_t dst_off, const void* src, uint64_t nbytes, uint32_t flag, uint32_t tid,
                          uint32_t nthreads) const {
    const char* s = reinterpret_cast<const char*>(src);
    for (uint64_t i = tid; i * 8 < nbytes; i += nthreads) ox_ll16_write(remote + dst_off + i * 16, ox_load8(s, i * 8, nbytes), flag);
  }
  // Reads `nbytes` of payload from LL16 packets at local + src_off (written by the peer) into dst.
  OX_DEV void unpack_packets(void* dst, uint64_t src_off, uint64_t nbytes, uint32_t flag, uint32_t tid, uint32_t nthreads,
                             AbortState& ab) const {
    char* d = reinterpret_cast<char*>(dst);
    for (uint64_t i = tid; i * 8 < nbytes; i += nthreads) ox_store8(d, i * 8, nbytes, ox_ll16_read(local + src_off + i * 16, flag, ab));
  }
  OX_DEV void signal() const { ox_sem_signal(outbound); }
  OX_DEV void relaxed_signal() const { ox_sem_relaxed_signal(outbound); }
  OX_DEV void wait(AbortState& ab) const { ox_sem_wait(inbound, expected, ab); }
  OX_DEV void relaxed_wait(AbortState& ab) const { ox_sem_relaxed_wait(inbound, expected, ab); }
};

// Semaphore slot of (block, sender) in a rank's inbound/expected arrays.
OX_DEV uint64_t ox_sem_slot(uint32_t block, int sender) { return (uint64_t)block * OX_MAX_RANKS + (uint64_t)sender; }

// The channel from this rank to `peer` for `block`, over the buffers `remote`/`local`.
OX_DEV MemoryChannel ox_memory_channel(const DevComm& c, int peer, uint32_t block, uint64_t remote, uint64_t local) {
  MemoryChannel ch;
  ch.remote = reinterpret_cast<char*>(remote);
  ch.local = reinterpret_cast<char*>(local);
  ch.outbound = reinterpret_cast<uint64_t*>(c.sem_inbound[peer]) + ox_sem_slot(block, c.rank);
  ch.inbound = reinterpret_cast<const uint64_t*>(c.sem_inbound[c.rank]) + ox_sem_slot(block, peer);
  ch.expected = reinterpret_cast<uint64_t*>(c.sem_expected) + ox_sem_slot(block, peer);
  return ch;
}

// Barrier of this block with the same block on every peer, publishing the block's prior writes:
// thread p (p != rank) signals peer p and waits for peer p's signal.
OX_DEV void ox_block_sync_peers(const DevComm& c, AbortState& ab) {
  __syncthreads();  // the whole block's writes are issued before the release in signal()
  const int p = (int)threadIdx.x;
  if (p < c.nranks && p != c.rank) {
    const MemoryChannel ch = ox_memory_channel(c, p, blockIdx.x, 0, 0);
    ch.signal();
    ch.wait(ab);
  }
  __syncthreads();  // extends the waiting threads' acquire to the whole block
}

// Signal-and-wait with every peer p for which `active[p]` holds (thread p handles peer p),
// publishing the block's writes before and extending the peers' to the block after.
OX_DEV void ox_block_sync_masked(const DevComm& c, const uint8_t* active, AbortState& ab) {
  __syncthreads();
  const int p = (int)threadIdx.x;
  if (p < c.nranks && p != c.rank && active[p]) {
    const MemoryChannel ch = ox_memory_channel(c, p, blockIdx.x, 0, 0);
    ch.signal();
    ch.wait(ab);
  }
  __syncthreads();
}
