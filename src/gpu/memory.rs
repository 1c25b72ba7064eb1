//! Device memory and host memory mapped into the device, freed on drop.

use cudarc::driver::sys as cu;

use super::context::{CtxGuard, Device};
use super::driver::check;
use crate::error::Result;

/// A cuMemAlloc allocation on one device.
pub struct DeviceBuffer {
    /// Device address of the first byte.
    pub ptr: cu::CUdeviceptr,
    /// Bytes.
    pub size: usize,
    dev: &'static Device,
}

impl DeviceBuffer {
    /// Allocates and zeroes `size` bytes on `dev`; the zeroes are in place on return, seen by a
    /// kernel launched afterwards on any stream.
    pub fn zeroed(dev: &'static Device, size: usize) -> Result<DeviceBuffer> {
        let _g = CtxGuard::new(dev)?;
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the device's context is current.
        check(unsafe { cu::cuMemAlloc_v2(&mut ptr, size.max(1)) }, "cuMemAlloc")?;
        let buf = DeviceBuffer { ptr, size, dev };
        // SAFETY: ptr..ptr+size was just allocated.
        buf.on_copy_stream(|s| unsafe { cu::cuMemsetD8Async(ptr, 0, size, s) }, "cuMemsetD8Async")?;
        Ok(buf)
    }

    /// `Device::on_copy_stream` (which says why) on this buffer's device.
    fn on_copy_stream(&self, op: impl FnOnce(cu::CUstream) -> cu::CUresult, what: &str) -> Result<()> {
        self.dev.on_copy_stream(op, what)
    }

    /// Fills `count` u32 words at byte offset `off` with `value`; done on return.
    pub fn fill_u32(&self, off: usize, value: u32, count: usize) -> Result<()> {
        assert!(off.is_multiple_of(4) && off + count * 4 <= self.size, "fill_u32 outside the buffer");
        let _g = CtxGuard::new(self.dev)?;
        // SAFETY: the range is inside this allocation (asserted above).
        self.on_copy_stream(|s| unsafe { cu::cuMemsetD32Async(self.ptr + off as u64, value, count, s) }, "cuMemsetD32Async")
    }

    /// Copies `bytes` from the host to byte offset `off`; the data is in place on return.
    pub fn write(&self, off: usize, bytes: &[u8]) -> Result<()> {
        assert!(off + bytes.len() <= self.size, "write outside the buffer");
        let _g = CtxGuard::new(self.dev)?;
        // SAFETY: destination range inside this allocation, source is a valid slice that outlives
        // the synchronise in on_copy_stream.
        self.on_copy_stream(
            |s| unsafe { cu::cuMemcpyHtoDAsync_v2(self.ptr + off as u64, bytes.as_ptr().cast(), bytes.len(), s) },
            "cuMemcpyHtoDAsync",
        )
    }

    /// Copies `out.len()` bytes from byte offset `off` to the host; done on return. It does not
    /// wait for kernels on other streams: the caller orders it after the work that wrote them.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        assert!(off + out.len() <= self.size, "read outside the buffer");
        let _g = CtxGuard::new(self.dev)?;
        // SAFETY: source range inside this allocation, destination is a valid slice that outlives
        // the synchronise in on_copy_stream.
        self.on_copy_stream(
            |s| unsafe { cu::cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), self.ptr + off as u64, out.len(), s) },
            "cuMemcpyDtoHAsync",
        )
    }

    /// The device it lives on.
    pub fn device(&self) -> &'static Device {
        self.dev
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Errors are ignored on the free path: there is nothing useful to do with them.
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: ptr was returned by cuMemAlloc and is freed once.
            unsafe { cu::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Pinned host memory mapped into every context's address space (for flags the host writes and
/// kernels poll, such as the abort flag).
pub struct HostMapped {
    /// The host address.
    pub host: *mut u8,
    /// The same bytes' device address (identical in every context).
    pub dev_ptr: cu::CUdeviceptr,
    /// Bytes.
    pub size: usize,
}

// SAFETY: the allocation is process-wide pinned memory; access goes through raw volatile ops.
unsafe impl Send for HostMapped {}
unsafe impl Sync for HostMapped {}

impl HostMapped {
    /// Allocates `size` zeroed bytes of pinned, device-mapped host memory.
    pub fn zeroed(dev: &'static Device, size: usize) -> Result<HostMapped> {
        let _g = CtxGuard::new(dev)?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = cu::CU_MEMHOSTALLOC_DEVICEMAP | cu::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: out-pointer to a local.
        check(unsafe { cu::cuMemHostAlloc(&mut host, size, flags) }, "cuMemHostAlloc")?;
        // SAFETY: host points to `size` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, size) };
        let mut dev_ptr: cu::CUdeviceptr = 0;
        // SAFETY: host was allocated with DEVICEMAP.
        let rc = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut dev_ptr, host, 0) };
        let mapped = HostMapped { host: host.cast(), dev_ptr, size };
        check(rc, "cuMemHostGetDevicePointer")?;
        Ok(mapped)
    }

    /// Volatile store of a u32 at byte offset `off`, seen by kernels polling it.
    pub fn store_u32(&self, off: usize, v: u32) {
        assert!(off.is_multiple_of(4) && off + 4 <= self.size);
        // SAFETY: in bounds and aligned (asserted); volatile because the GPU reads it concurrently.
        unsafe { std::ptr::write_volatile(self.host.add(off).cast::<u32>(), v) };
    }

    /// Volatile store of a u64 at byte offset `off` (8-byte aligned), seen by kernels reading it.
    pub fn store_u64(&self, off: usize, v: u64) {
        assert!(off.is_multiple_of(8) && off + 8 <= self.size);
        // SAFETY: in bounds and aligned (asserted); volatile because the GPU reads it concurrently.
        unsafe { std::ptr::write_volatile(self.host.add(off).cast::<u64>(), v) };
    }

    /// Volatile load of a u64 at byte offset `off` (8-byte aligned).
    pub fn load_u64(&self, off: usize) -> u64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.size);
        // SAFETY: in bounds and aligned (asserted).
        unsafe { std::ptr::read_volatile(self.host.add(off).cast::<u64>()) }
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        // SAFETY: host was returned by cuMemHostAlloc and is freed once.
        unsafe { cu::cuMemFreeHost(self.host.cast()) };
    }
}
