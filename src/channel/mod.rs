//! Host side of the channels. `MemoryChannels` owns one rank's buffers that peers write into (LL
//! scratch, put scratch, inbound semaphores), its private device state (LL flags, expected
//! semaphore counts) and its mappings of every peer's buffers, and publishes all of it to the
//! kernels as one `DevComm` in device memory.

mod memory;

pub use memory::MemoryChannels;
