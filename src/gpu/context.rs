//! Devices and their primary contexts. oxccl works in the primary context of each device, as the
//! CUDA runtime does, so user streams and memory (cudaMalloc, cudaStreamCreate) are usable as is.

use std::collections::HashSet;
use std::ffi::c_char;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;
use parking_lot::Mutex;

use super::driver::{check, ensure};
use super::module::Module;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// A device whose primary context this process has retained (for the process lifetime).
pub struct Device {
    /// The CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them for this process).
    pub ordinal: i32,
    /// The driver's handle of it.
    pub cu: cu::CUdevice,
    /// Its primary context, retained (the one the CUDA runtime uses).
    pub ctx: cu::CUcontext,
    /// Streaming multiprocessors: the most blocks of one per SM a kernel may have.
    pub sm_count: i32,
    /// Compute capability, major (9 for H100/H200).
    pub cc_major: i32,
    /// Compute capability, minor.
    pub cc_minor: i32,
    /// The driver's CUDA version (cuDriverGetVersion: 13000 for 13.0).
    pub driver: i32,
    /// PCI bus id, "0000:xx:yy.z", identifying the GPU across processes.
    pub bus_id: String,
    /// The driver's UUID of the device (of the MIG instance under MIG): which SMs it runs on,
    /// across processes and hosts. All zero where the driver gave none.
    pub uuid: [u8; 16],
    module: OnceLock<std::result::Result<Module, Error>>,
    /// A non-blocking stream of the library's own for synchronous copies and memsets (see
    /// `Device::copy_stream`); created on first use, never destroyed.
    copy_stream: OnceLock<std::result::Result<usize, Error>>,
    /// cuCtxGetId of the primary context when it was retained (0 where the driver gave none):
    /// `was_reset` compares it.
    ctx_id: u64,
}

// SAFETY: a CUcontext handle may be made current and used from any thread.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());
static PEER_ENABLED: Mutex<Option<HashSet<(i32, i32)>>> = Mutex::new(None);

impl Device {
    /// The device with this ordinal, its primary context retained on first use.
    pub fn get(ordinal: i32) -> Result<&'static Device> {
        ensure()?;
        let mut devs = DEVICES.lock();
        if let Some(d) = devs.iter().find(|d| d.ordinal == ordinal) {
            return Ok(d);
        }
        let n = device_count()?;
        if ordinal < 0 || ordinal >= n {
            return Err(Error::invalid_argument(format!("CUDA device {ordinal} does not exist ({n} visible)")));
        }
        let d = Box::leak(Box::new(Device::open(ordinal)?));
        devs.push(d);
        Ok(d)
    }

    fn open(ordinal: i32) -> Result<Device> {
        let mut dev: cu::CUdevice = 0;
        // SAFETY: out-pointers to locals.
        unsafe {
            check(cu::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
            let mut ctx: cu::CUcontext = std::ptr::null_mut();
            check(cu::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
            let attr = |a: cu::CUdevice_attribute| -> Result<i32> {
                let mut v = 0;
                check(cu::cuDeviceGetAttribute(&mut v, a, dev), "cuDeviceGetAttribute")?;
                Ok(v)
            };
            let sm_count = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            let cc_major = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let cc_minor = attr(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            let mut buf = [0 as c_char; 32];
            check(cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev), "cuDeviceGetPCIBusId")?;
            let bus_id = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().to_lowercase();
            let mut driver = 0;
            check(cu::cuDriverGetVersion(&mut driver), "cuDriverGetVersion")?;
            let mut id: cu::CUuuid = std::mem::zeroed();
            // Only used to tell which ranks share a GPU: without it, the bus id says (topo::gpu_hash).
            let uuid = if cu::cuDeviceGetUuid_v2(&mut id, dev) == cu::CUresult::CUDA_SUCCESS { id.bytes.map(|b| b as u8) } else { [0; 16] };
            let mut ctx_id = 0u64;
            if cu::cuCtxGetId(ctx, &mut ctx_id) != cu::CUresult::CUDA_SUCCESS {
                ctx_id = 0;
            }
            Ok(Device { ordinal, cu: dev, ctx, sm_count, cc_major, cc_minor, driver, bus_id, uuid, module: OnceLock::new(), copy_stream: OnceLock::new(), ctx_id })
        }
    }

    /// The embedded kernels, loaded into this device's context on first use.
    pub fn module(&'static self) -> Result<&'static Module> {
        self.module
            .get_or_init(|| {
                let _g = CtxGuard::new(self)?;
                Module::load(self)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The stream `DeviceBuffer` copies and memsets run on, each followed by a synchronise of this
    /// stream alone. Why not cuMemcpyHtoD / cuMemsetD8 on the legacy default stream: from pageable
    /// memory cuMemcpyHtoD may return before the data lands and cuMemsetD8 returns before it runs
    /// (CUDA's "API synchronization behavior"), so a kernel on a non-blocking stream could read
    /// the old bytes; and the legacy stream waits for every blocking stream, so a kernel stuck
    /// waiting for a peer would hold them. (Streams beyond CUDA_DEVICE_MAX_CONNECTIONS share
    /// hardware queues, so this one is not proof against that either, only against the legacy
    /// stream's rule.)
    pub fn copy_stream(&'static self) -> Result<cu::CUstream> {
        self.copy_stream
            .get_or_init(|| {
                let _g = CtxGuard::new(self)?;
                let mut s: cu::CUstream = std::ptr::null_mut();
                // SAFETY: out-pointer to a local; this device's context is current.
                check(unsafe { cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }, "cuStreamCreate")?;
                Ok(s as usize)
            })
            .as_ref()
            .map(|&s| s as cu::CUstream)
            .map_err(Clone::clone)
    }

    /// Runs one asynchronous copy or memset on `copy_stream` and waits for that stream alone. The
    /// caller's guard makes this device's context current.
    pub fn on_copy_stream(&'static self, op: impl FnOnce(cu::CUstream) -> cu::CUresult, what: &str) -> Result<()> {
        let s = self.copy_stream()?;
        check(op(s), what)?;
        // SAFETY: s is this device's live copy stream; its context is current.
        check(unsafe { cu::cuStreamSynchronize(s) }, "cuStreamSynchronize")
    }

    /// Whether the primary context this device's resources were made in is gone: reset by the
    /// application (cudaDeviceReset, cuDevicePrimaryCtxReset: inactive since, or active again as
    /// a context with another id), or the driver deinitialised at exit (any error here). Its
    /// memory, streams and events went with it; freeing their stale handles can crash in the
    /// driver. nccl-tests calls cudaDeviceReset after ncclCommDestroy, while frees a CUDA graph
    /// held back may still be due (`UnlessReset`).
    pub fn was_reset(&self) -> bool {
        let (mut flags, mut active) = (0u32, 0i32);
        // SAFETY: out-pointers to locals; a device handle of this process.
        if unsafe { cu::cuDevicePrimaryCtxGetState(self.cu, &mut flags, &mut active) } != cu::CUresult::CUDA_SUCCESS || active == 0 {
            return true;
        }
        if self.ctx_id == 0 {
            return false; // no id to compare: the state above is all there is to go by
        }
        let mut id = 0u64;
        // SAFETY: out-pointer to a local; ctx is our retained primary context handle.
        let rc = unsafe { cu::cuCtxGetId(self.ctx, &mut id) };
        rc != cu::CUresult::CUDA_SUCCESS || id != self.ctx_id
    }

    /// Whether this device can address `peer`'s memory (`can_access`).
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        can_access(self.ordinal, peer.ordinal)
    }

    /// Lets this device's context access memory allocated in `peer`'s context (same process).
    pub fn enable_peer_access(&'static self, peer: &Device) -> Result<()> {
        if peer.ordinal == self.ordinal {
            return Ok(());
        }
        let mut set = PEER_ENABLED.lock();
        let set = set.get_or_insert_with(HashSet::new);
        if set.contains(&(self.ordinal, peer.ordinal)) {
            return Ok(());
        }
        let _g = CtxGuard::new(self)?;
        // SAFETY: both contexts are retained primary contexts.
        let rc = unsafe { cu::cuCtxEnablePeerAccess(peer.ctx, 0) };
        if rc != cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            check(rc, "cuCtxEnablePeerAccess")?;
        }
        set.insert((self.ordinal, peer.ordinal));
        Ok(())
    }
}

/// Whether device `a` can access device `b`'s memory directly. Touches no context: retaining a
/// context on a GPU this process does not use would cost that GPU hundreds of MiB.
pub fn can_access(a: i32, b: i32) -> Result<bool> {
    if a == b {
        return Ok(true);
    }
    ensure()?;
    let (mut da, mut db, mut v) = (0, 0, 0);
    // SAFETY: out-pointers to locals.
    unsafe {
        check(cu::cuDeviceGet(&mut da, a), "cuDeviceGet")?;
        check(cu::cuDeviceGet(&mut db, b), "cuDeviceGet")?;
        check(cu::cuDeviceCanAccessPeer(&mut v, da, db), "cuDeviceCanAccessPeer")?;
    }
    Ok(v != 0)
}

/// The local ordinal of the GPU with this PCI bus id, if this process can see it.
pub fn ordinal_by_bus_id(bus: &str) -> Option<i32> {
    ensure().ok()?;
    let c = std::ffi::CString::new(bus).ok()?;
    let mut d: cu::CUdevice = 0;
    // SAFETY: out-pointer to a local, NUL-terminated id.
    (unsafe { cu::cuDeviceGetByPCIBusId(&mut d, c.as_ptr()) } == cu::CUresult::CUDA_SUCCESS).then_some(d)
}

/// The NVML index of the GPU at PCI bus `bus` ("dddd:bb:dd.f", any case): its place among the
/// NVIDIA GPUs the kernel driver lists in /proc/driver/nvidia/gpus, in bus-id order, which is the
/// order NVML enumerates them in on Linux (whatever CUDA_VISIBLE_DEVICES hides). None where the
/// listing is unavailable or does not hold the GPU.
pub fn nvml_index(bus: &str) -> Option<i32> {
    let names: Vec<String> = std::fs::read_dir("/proc/driver/nvidia/gpus").ok()?.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    index_by_bus_id(&names, bus)
}

/// `bus`'s place among `all` (PCI bus ids) sorted by (domain, bus, device, function).
pub fn index_by_bus_id(all: &[String], bus: &str) -> Option<i32> {
    fn parse(id: &str) -> Option<(u32, u32, u32, u32)> {
        let (rest, func) = id.trim().rsplit_once('.')?;
        let mut p = rest.split(':');
        let (d, b, v) = (p.next()?, p.next()?, p.next()?);
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        Some((hex(d)?, hex(b)?, hex(v)?, hex(func)?))
    }
    let me = parse(bus)?;
    let mut ids: Vec<_> = all.iter().filter_map(|s| parse(s)).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.iter().position(|&x| x == me).and_then(|i| i32::try_from(i).ok())
}

/// The CUDA devices this process sees.
pub fn device_count() -> Result<i32> {
    ensure()?;
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    check(unsafe { cu::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
    Ok(n)
}

/// The calling thread's current device, as cudaGetDevice would report it: the device of the
/// current context, or device 0 when no context is current.
pub fn current_device() -> Result<i32> {
    ensure()?;
    let mut ctx: cu::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    check(unsafe { cu::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent")?;
    if ctx.is_null() {
        if device_count()? < 1 {
            return Err(Error::cuda("no CUDA-capable device is detected"));
        }
        return Ok(0);
    }
    let mut dev: cu::CUdevice = 0;
    // SAFETY: out-pointer to a local; a context is current.
    check(unsafe { cu::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice")?;
    Ok(dev)
}

/// Something holding CUDA resources of one device, dropped only if that device's context was not
/// reset meanwhile (`Device::was_reset`), else forgotten: the reset freed them already.
pub struct UnlessReset {
    dev: &'static Device,
    hold: Option<Box<dyn Send>>,
}

impl UnlessReset {
    /// Holds `hold`, whose resources live in `dev`'s primary context.
    pub fn new(dev: &'static Device, hold: Box<dyn Send>) -> UnlessReset {
        UnlessReset { dev, hold: Some(hold) }
    }
}

impl Drop for UnlessReset {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else { return };
        if self.dev.was_reset() {
            nccl_info!(Subsys::Init, "GPU {}: its context was reset (or CUDA shut down) before a deferred free: left to the reset", self.dev.ordinal);
            std::mem::forget(hold);
        } else {
            drop(hold);
        }
    }
}

/// Makes a device's primary context current for a scope and restores the caller's context after:
/// callers (nccl-tests -g N) expect their current device to be unchanged by any NCCL call.
pub struct CtxGuard {
    prev: cu::CUcontext,
    switched: bool,
}

impl CtxGuard {
    /// Makes `dev`'s primary context current until the guard drops.
    pub fn new(dev: &Device) -> Result<CtxGuard> {
        let mut prev: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check(unsafe { cu::cuCtxGetCurrent(&mut prev) }, "cuCtxGetCurrent")?;
        if prev == dev.ctx {
            return Ok(CtxGuard { prev, switched: false });
        }
        // SAFETY: dev.ctx is a retained primary context.
        check(unsafe { cu::cuCtxSetCurrent(dev.ctx) }, "cuCtxSetCurrent")?;
        Ok(CtxGuard { prev, switched: true })
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        if self.switched {
            // SAFETY: restores the context that was current (possibly NULL) when the guard was made.
            unsafe { cu::cuCtxSetCurrent(self.prev) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::index_by_bus_id;

    #[test]
    fn nvml_indices_follow_the_bus_order() {
        let all: Vec<String> = ["0000:9a:00.0", "0000:18:00.0", "0000:2a:00.0", "0000:db:00.0"].iter().map(|s| s.to_string()).collect();
        assert_eq!(index_by_bus_id(&all, "0000:18:00.0"), Some(0));
        assert_eq!(index_by_bus_id(&all, "0000:9A:00.0"), Some(2), "CUDA writes the hex in capitals");
        assert_eq!(index_by_bus_id(&all, "00000000:db:00.0"), Some(3), "NVML's 8-digit domain");
        assert_eq!(index_by_bus_id(&all, "0000:19:00.0"), None);
        assert_eq!(index_by_bus_id(&all, "garbage"), None);
    }
}
