// The put scratch (DevComm::rs_scratch: one per rank, mapped on every peer), as every put-based
// kernel lays it out: two areas, each of rs_max_blocks * nranks slots of rs_slot_bytes; slot
// (b, s) of an area is where source rank s puts block b's piece of a round (rsag.cuh,
// reduce_colls.cu, exchange.cu's put rounds). Each family says how it uses the two areas: rsag.cuh
// reduce-scatters into the first and all-gathers through the second; the round-based kernels
// alternate them by round, so a round's writes never land where the previous round's readers may
// still be.
#pragma once
#include "common.cuh"

struct OxPutScratch {
  uint64_t slot;  // bytes per slot
  uint64_t area;  // bytes per area
  int n;          // ranks (sources per block)
  // `nranks` is c.nranks as the kernel already holds it (its prologue's `n`): reading the field
  // again here changed the kernels' instruction schedule.
  OX_DEV OxPutScratch(const DevComm& c, int nranks)
      : slot(c.rs_slot_bytes), area((uint64_t)c.rs_max_blocks * nranks * c.rs_slot_bytes), n(nranks) {}
  // Byte offset of slot (block b, source s) within an area.
  OX_DEV uint64_t at(uint32_t b, uint64_t s) const { return ((uint64_t)b * n + s) * slot; }
};
