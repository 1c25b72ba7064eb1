//! From a validated call to kernels on the user's stream: `group` (thread-local groups, deferred
//! work run at ncclGroupEnd), `enqueue` (algorithm choice by `algo`, the launch itself), and
//! `checksum` (OXCCL_CHECKSUM: the end-to-end check around each submitted wave).

pub mod checksum;
pub mod enqueue;
pub mod group;
