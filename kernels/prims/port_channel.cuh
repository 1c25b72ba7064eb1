// PortChannel, device side: GPU threads ask the proxy (src/proxy) to move data with a copy engine,
// a socket or RDMA, and wait on host-to-device semaphores the proxy's transport signals.
//
// Ordering contracts (each call is made by ONE thread; "prior writes" means writes this thread
// observed, so a block's writes need a __syncthreads before the call):
//   put(dst, src, n)             - the transfer may start at once and reads src later: prior writes
//                                  to src are visible to it (the push is a release); src must not be
//                                  rewritten until a flush returns.
//   signal()                     - the peer's semaphore is bumped after every put this channel
//                                  pushed before it has landed (the transport orders flags after
//                                  data: stream order for the copy engine, frame order for TCP).
//   put_with_signal(...)         - put then signal, one trigger.
//   put_with_signal_and_flush(.) - put, signal and flush, one trigger and one wait.
//   flush()                      - returns once every trigger this FIFO carried before it has
//                                  completed (sources reusable, data landed); false if the proxy
//                                  stopped or the communicator aborted first.
//   wait()                       - returns once the peer's next signal has arrived (acquire: what
//                                  the peer's puts wrote here is visible afterwards), or on abort.
#pragma once
#include "fifo.cuh"
#include "semaphore.cuh"

struct OxPortChannel {
  const FifoDevice* fifo;
  uint32_t src_mem, dst_mem, sem;  // ids in the transport's tables
  const uint64_t* inbound;         // this rank's semaphore the peer's transport writes
  uint64_t* expected;              // this thread's expected count for it

  OX_DEV static uint64_t snd(uint64_t kind, uint64_t dst_off, uint32_t src_mem, uint32_t dst_mem, uint32_t sem) {
    return (dst_off & 0xffffffffull) | ((uint64_t)src_mem << OX_TRIGGER_SRC_MEM_SHIFT) |
           ((uint64_t)dst_mem << OX_TRIGGER_DST_MEM_SHIFT) | ox_trigger_type(kind) |
           ((uint64_t)sem << OX_TRIGGER_SEMID_SHIFT);
  }
  OX_DEV static uint64_t fst(uint64_t size, uint64_t src_off) { return (size & 0xffffffffull) | (src_off << 32); }

  OX_DEV uint64_t push(uint64_t kind, uint64_t dst_off, uint64_t src_off, uint64_t size) const {
    return ox_fifo_push(*fifo, fst(size, src_off), snd(kind, dst_off, src_mem, dst_mem, sem));
  }
  OX_DEV void put(uint64_t dst_off, uint64_t src_off, uint64_t size) const { push(OX_TRIGGER_DATA, dst_off, src_off, size); }
  OX_DEV void signal() const { push(OX_TRIGGER_FLAG, 0, 0, 0); }
  OX_DEV void put_with_signal(uint64_t dst_off, uint64_t src_off, uint64_t size) const {
    push(OX_TRIGGER_DATA | OX_TRIGGER_FLAG, dst_off, src_off, size);
  }
  OX_DEV bool flush() const { return ox_fifo_flush(*fifo); }
  OX_DEV bool put_with_signal_and_flush(uint64_t dst_off, uint64_t src_off, uint64_t size) const {
    return ox_fifo_wait_flushed(*fifo, push(OX_TRIGGER_DATA | OX_TRIGGER_FLAG | OX_TRIGGER_SYNC, dst_off, src_off, size));
  }
  OX_DEV void wait(AbortState& ab) const { ox_sem_wait(inbound, expected, ab); }
};
