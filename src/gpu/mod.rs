//! The CUDA driver, through cudarc's raw bindings loaded at run time: the library loads and
//! answers ncclGetVersion on a machine without libcuda; every entry point that needs the GPU calls
//! [`driver::ensure`] first and gets an error code, never a panic, when the driver is missing.
// CUDA handles (streams, events) are opaque values the driver validates; Rust never dereferences them.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod context;
pub mod driver;
pub mod ipc;
pub mod memory;
pub mod module;
pub mod stream;
pub mod suspendable;
pub mod vmm;

pub use context::{current_device, CtxGuard, Device, UnlessReset};
pub use driver::{check, ensure};
pub use memory::{DeviceBuffer, HostMapped};

pub use cudarc::driver::sys as cu;
