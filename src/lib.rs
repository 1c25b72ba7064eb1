//! oxccl: a drop-in, ABI-compatible replacement for NVIDIA NCCL 2.28, written in Rust.
//!
//! The path of one call: `api` (C ABI: panic boundary, validation) → `launch::group`
//! (thread-local groups) → `launch::enqueue` (algorithm choice by `algo`, kernel launch on the
//! user's stream; `net` for communicators spanning hosts) → kernels (kernels/*.cu) moving data
//! through `channel` primitives set up by `comm` over `transport`/`gpu`, after `bootstrap` has
//! connected the ranks. Modules depend only on those below them (docs/architecture.md, Layout).

// Every public item is documented (with clippy's -D warnings in CI, a missing doc fails it).
#![warn(missing_docs)]

#[macro_use]
pub mod error;
#[macro_use]
pub mod log;

pub mod algo;
pub mod api;
pub mod bootstrap;
pub mod channel;
pub mod comm;
pub mod config;
pub mod device_abi;
pub mod diag;
pub mod getenv;
pub mod gpu;
pub mod launch;
pub mod net;
pub mod proxy;
pub mod reg;
pub mod symmem;
pub mod tls;
pub mod transport;
pub mod types;

pub use error::{Error, Result, ResultCode};

/// The newest NCCL version whose whole host API (and exported symbol set) this library
/// implements: NCCL_VERSION_CODE of 2.32.3, what ncclGetVersion reports.
pub const NCCL_VERSION_CODE: i32 = 23203;
/// oxccl's own version, shown in the NCCL_DEBUG=VERSION banner.
pub const OXCCL_VERSION: &str = env!("CARGO_PKG_VERSION");
