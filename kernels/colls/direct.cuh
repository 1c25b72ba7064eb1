// Zero-copy put streams (registered buffers, src/reg). A receiver whose destination lies in a buffer
// it registered offers it to the sender (RegOffer, written into the sender's shared buffer before
// the receiver's round-0 signal); after round 0's sync the sender looks the offer up in its table
// of the peers' registrations (RegEntry in device memory, filled by the registration thread), answers
// with one u32 per block in the receiver's shared buffer, and, if it accepted, puts its pieces from
// round 1 on straight into their places in the receiver's buffer instead of scratch. The receiver
// reads the answer after its round-1 wait and copies nothing out of scratch for them. The rounds
// and their syncs stay: they pace the writers (one burst of every remaining piece measured slower).
//
// Why round 0 still goes through scratch: the sender learns of the offer only from a sync, and the
// round-0 sync exists anyway; waiting for an offer before round 0 would add a round trip to every
// put launch, registered or not.
#pragma once
#include "atomics.cuh"

OX_DEV RegOffer* ox_reg_offers(const DevComm& c, int rank) {
  return reinterpret_cast<RegOffer*>(c.ll_scratch[rank] + c.reg_offer_off);
}

OX_DEV uint32_t* ox_reg_accepts(const DevComm& c, int rank) {
  return reinterpret_cast<uint32_t*>(c.ll_scratch[rank] + c.reg_accept_off);
}

// Receiver: post this launch's offer (or "none") to `peer`. Plain stores: the caller's next
// __syncthreads plus the round-0 signal's release publish them. Every block stores the same
// value, so the blocks' stores never disagree.
OX_DEV void ox_reg_offer_post(const DevComm& c, int peer, uint64_t gen, uint64_t dst, uint64_t off, uint64_t bytes) {
  RegOffer* o = ox_reg_offers(c, peer) + c.rank;
  o->dst = dst;
  o->off = off;
  o->bytes = bytes;
  o->gen = gen;
}

// Sender (one thread for `peer`, after the round-0 wait, whose acquire covers the offer): the
// offer `peer` posted in this launch, or gen 0. The receiver's next launch rewrites it only after
// this launch's final sync, which comes after this read.
OX_DEV RegOffer ox_reg_offer_read(const DevComm& c, int peer) {
  const volatile RegOffer* o = ox_reg_offers(c, c.rank) + peer;
  RegOffer r;
  r.gen = o->gen;
  r.dst = o->dst;
  r.off = o->off;
  r.bytes = o->bytes;
  return r;
}

// Sender: `peer`'s buffer holding [dst, dst + bytes) of its address space, as mapped here, or 0 if
// this rank has not mapped that registration (yet: the registration thread maps it on its own
// time; the stream then simply goes through scratch).
OX_DEV uint64_t ox_reg_translate(const DevComm& c, int peer, const RegOffer& o) {
  if (c.reg_table == 0) return 0;
  const RegEntry* e = reinterpret_cast<const RegEntry*>(c.reg_table) + (uint64_t)peer * OX_REG_SLOTS + o.gen % OX_REG_SLOTS;
  // Acquire: the registration thread writes gen last (a second stream-ordered copy, or, in a
  // host-mapped table, a later x86 store), so a matching gen brings the entry's other fields.
  if (ox_ld_acquire_sys(&e->gen) != o.gen) return 0;
  const uint64_t base = ox_ld_relaxed_sys(&e->base);
  const uint64_t size = ox_ld_relaxed_sys(&e->size);
  const uint64_t local = ox_ld_relaxed_sys(&e->local);
  if (o.dst < base || o.bytes > size || o.dst - base > size - o.bytes) return 0;
  return local + (o.dst - base);
}

// Sender: answer the receiver's offer for this block (1 taken, 0 declined). Published by the
// round-1 signal's release.
OX_DEV void ox_reg_answer(const DevComm& c, int peer, uint32_t taken) {
  ox_reg_accepts(c, peer)[(uint64_t)blockIdx.x * OX_MAX_RANKS + c.rank] = taken;
}

// Receiver (after the round-1 wait, whose acquire covers the answer): did this block's partner on
// `peer` take the offer?
OX_DEV bool ox_reg_taken(const DevComm& c, int peer) {
  const volatile uint32_t* a = ox_reg_accepts(c, c.rank) + (uint64_t)blockIdx.x * OX_MAX_RANKS + peer;
  return *a != 0;
}
