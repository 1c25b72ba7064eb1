//! Device communicators (ncclDevCommCreate / ncclDevCommDestroy): what a kernel written against
//! NCCL's device API needs to reach its peers itself. The `ncclDevComm` it receives names the LSA
//! team (every rank: a communicator with symmetric memory is one host), the window table
//! (`ncclFindWindow`), and one symmetric "resource window" holding the LSA barriers' counters and
//! the buffers the caller asked for, each at a multiple of 128 bytes (a resource handle is its
//! offset / 128), in the order NCCL lays them out for the caller's headers:
//! - NCCL 2.28.9 (unversioned requirements): the rail GIN barrier's words, the LSA barriers', then
//!   the caller's requirements in list order;
//! - NCCL 2.29-2.32 (versioned, `versions`): NCCL 2.32.3's list (world, rail GIN barriers, LSA
//!   barriers, the three hybrid barriers, the caller's), where GIN barriers take signals only.
//!   The `ncclDevComm` is 2.32.3's, copied into the caller's older layout as NCCL's compat
//!   entries copy it.
//!
//! What oxccl never provides is refused with NCCL's codes: multicast memory (`lsaMultimem`, a
//! team with `multimem`; NVLS stays off) is ncclInvalidArgument, as NCCL answers where multicast
//! is unavailable; GPU-initiated networking and CFT are refused as NCCL 2.32.3 refuses them on a
//! machine without them (`versions::check_gin_and_cft`), and with ncclInvalidUsage for 2.28.9
//! callers, as before.

pub mod cft;
pub mod props;
pub mod versions;

use crate::comm::{Comm, Ready};
use crate::error::{Error, Result};
use crate::symmem::abi::{idiv_rcp32, ncclDevComm, ncclDevCommRequirements, ncclDevResourceRequirements, ncclGinBarrierHandle, ncclLsaBarrierHandle, ncclTeamRequirements, GIN_MAX_CONTEXTS, RESOURCE_UNIT};
use crate::symmem::abi232::{ncclDevCommRequirements_v23203, ncclDevComm_v23100, ncclResourceWindow_vidmem, NCCL_API_MAGIC, NCCL_LE_ID_INVALID};
use crate::symmem::{lsa_team, unsupported};
use crate::comm::window::Window;
use versions::{Abi, Wanted};

/// Longest requirement list followed (a cycle in a caller's list must not hang the call).
const MAX_LIST: usize = 1 << 16;

/// One buffer requirement: size, alignment, and where the caller wants its handle and its first
/// GIN signal and counter (0: nowhere).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// Bytes of the buffer (`bufferSize`).
    pub size: u64,
    /// Its alignment in bytes (`bufferAlign`); the layout uses at least 128.
    pub align: u64,
    /// GIN signals it asks for (`ginSignalCount`).
    pub gin_signals: u32,
    /// GIN counters it asks for (`ginCounterCount`).
    pub gin_counters: u32,
    /// Where the buffer's handle (a u32) is written (`outBufferHandle`); 0: nowhere.
    pub out_handle: usize,
    /// Where the index of its first GIN signal (a u32) is written (`outGinSignalStart`); 0: nowhere.
    pub out_signal: usize,
    /// Where the index of its first GIN counter (a u32) is written (`outGinCounterStart`); 0: nowhere.
    pub out_counter: usize,
}

/// A copy of the caller's requirements, taken at the call (NCCL copies them too: the lists need
/// not outlive the call, only the output addresses must outlive the group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The `ncclDevComm` layout to write (the caller's headers).
    pub abi: Abi,
    /// The `version` a versioned `ncclDevComm` carries (`versions::effective_version`); 0 for
    /// 2.28.9 callers.
    pub version: u32,
    /// LSA barriers to provide (`lsaBarrierCount`; for 2.28.9 callers at least `barrierCount`).
    pub lsa_barriers: u32,
    /// 2.28.9 callers: rail GIN barriers to lay out, the larger of `barrierCount` and
    /// `railGinBarrierCount`. Versioned callers: 0 (their GIN barriers take no buffer).
    pub rail_barriers: u32,
    /// Versioned callers: `barrierCount`, the hybrid barriers (0: they need GIN, refused).
    pub hybrid_barriers: u32,
    /// The caller's buffer requirements (`resourceRequirementsList`), in list order.
    pub resources: Vec<Resource>,
}

impl Default for Request {
    fn default() -> Self {
        Request { abi: Abi::V22809, version: 0, lsa_barriers: 0, rail_barriers: 0, hybrid_barriers: 0, resources: Vec::new() }
    }
}

fn count(v: i32, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid_argument(format!("ncclDevCommCreate: {what} = {v} is negative")))
}

/// Reads a caller's buffer requirements list, in order.
///
/// # Safety
/// Every node `p` links must be readable.
unsafe fn read_resources(mut p: *const ncclDevResourceRequirements) -> Result<Vec<Resource>> {
    let mut resources = Vec::new();
    while !p.is_null() {
        if resources.len() == MAX_LIST {
            return Err(Error::invalid_argument(format!("ncclDevCommCreate: more than {MAX_LIST} resource requirements (a cycle in the list?)")));
        }
        // SAFETY: the caller's list node (function contract).
        let rr = unsafe { &*p };
        resources.push(Resource {
            size: rr.bufferSize as u64,
            align: rr.bufferAlign as u64,
            gin_signals: count(rr.ginSignalCount, "a resource's ginSignalCount")?,
            gin_counters: count(rr.ginCounterCount, "a resource's ginCounterCount")?,
            out_handle: rr.outBufferHandle as usize,
            out_signal: rr.outGinSignalStart as usize,
            out_counter: rr.outGinCounterStart as usize,
        });
        p = rr.next;
    }
    Ok(resources)
}

/// Refuses a team requirements list asking for multicast memory (NVLS is off).
///
/// # Safety
/// Every node `t` links must be readable.
unsafe fn check_teams(mut t: *const ncclTeamRequirements) -> Result<()> {
    let mut n = 0;
    while !t.is_null() && n < MAX_LIST {
        // SAFETY: the caller's list node (function contract).
        let tr = unsafe { &*t };
        if tr.multimem {
            return Err(Error::invalid_argument("ncclDevCommCreate: a team requirement asks for multicast memory, which oxccl never uses (NVLS is off)"));
        }
        t = tr.next;
        n += 1;
    }
    Ok(())
}

/// What `head`, the first 16 bytes of a caller's requirements, says they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// NCCL 2.28.9's struct: it starts with a pointer (the resource list) or NULL.
    V22809,
    /// A versioned struct (2.29+): `size`, then NCCL_API_MAGIC.
    Versioned,
    /// A versioned struct whose magic is wrong (a small `size` first, not a pointer).
    BadMagic,
}

/// Tells 2.28.9's requirements from versioned ones by their first 16 bytes: a versioned struct
/// has NCCL_API_MAGIC in its 2nd 4-byte-aligned word past `size` (offset 8), which in 2.28.9's is
/// the low half of an 8-byte-aligned pointer (`teamRequirementsList`), never 0xcafebeef. A first
/// word below 4096 that is not followed by the magic is a size with a bad magic (no pointer is
/// that low), and gets NCCL's error. An all-zero struct is 2.28.9's (its documented `= {}`).
pub fn classify(head: [u8; 16]) -> Header {
    let first = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    let magic = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
    if magic == NCCL_API_MAGIC {
        Header::Versioned
    } else if (1..4096).contains(&first) {
        Header::BadMagic
    } else {
        Header::V22809
    }
}

impl Request {
    /// Reads and checks NCCL 2.28.9 requirements (unversioned).
    ///
    /// # Safety
    /// `reqs` and every list node it links must be readable.
    pub unsafe fn copy(reqs: &ncclDevCommRequirements) -> Result<Request> {
        if reqs.lsaMultimem {
            return Err(Error::invalid_argument("ncclDevCommCreate: lsaMultimem asks for NVLink multicast memory, which oxccl never uses (NVLS is off)"));
        }
        if reqs.ginForceEnable || reqs.ginSignalCount != 0 || reqs.ginCounterCount != 0 {
            return Err(Error::invalid_usage(
                "ncclDevCommCreate: GPU-initiated networking (ginForceEnable, ginSignalCount, ginCounterCount) is not available: oxccl has no GIN transport",
            ));
        }
        let barriers = count(reqs.barrierCount, "barrierCount")?;
        // SAFETY: the caller's lists (function contract).
        unsafe { check_teams(reqs.teamRequirementsList) }?;
        // SAFETY: as above.
        let resources = unsafe { read_resources(reqs.resourceRequirementsList) }?;
        Ok(Request {
            abi: Abi::V22809,
            version: 0,
            lsa_barriers: barriers.max(count(reqs.lsaBarrierCount, "lsaBarrierCount")?),
            rail_barriers: barriers.max(count(reqs.railGinBarrierCount, "railGinBarrierCount")?),
            hybrid_barriers: 0,
            resources,
        })
    }

    /// Reads and checks versioned requirements (NCCL 2.29.2 or later), as NCCL 2.32.3's
    /// ncclDevCommCreate and ncclDevrCommCreateInternal do on a machine without GIN and CFT:
    /// the version checks (`versions::compat`: ncclInvalidUsage), the compat entry's filter, the
    /// GIN and CFT refusals (ncclInvalidArgument), multicast (ncclInvalidArgument). `reqs` is
    /// the caller's struct laid over NCCL 2.32.3's initializer (fields past its `size` keep the
    /// initializer's values); `jit` is NCCL_DEV_API_JIT=1.
    ///
    /// # Safety
    /// Every list node `reqs` links must be readable.
    pub unsafe fn copy_versioned(reqs: &ncclDevCommRequirements_v23203, jit: bool) -> Result<Request> {
        let version = reqs.version as i32;
        let filter_abi = versions::compat(version)?;
        let effective = versions::effective_version(version, reqs.useRuntimeVersion != 0, jit);
        let abi = versions::compat(effective)?;
        // SAFETY: the caller's lists (function contract).
        let resources = unsafe { read_resources(reqs.resourceRequirementsList) }?;
        let mut w = Wanted {
            version,
            gin_force_enable: reqs.ginForceEnable != 0,
            gin_signals: reqs.ginSignalCount,
            gin_counters: reqs.ginCounterCount,
            barriers: reqs.barrierCount,
            lsa_barriers: reqs.lsaBarrierCount,
            rail_gin_barriers: reqs.railGinBarrierCount,
            world_gin_barriers: reqs.worldGinBarrierCount,
            gin_connection_type: reqs.ginConnectionType,
            cft_caps: reqs.cftCaps,
            resource_gin: resources.iter().any(|r| r.gin_signals > 0 || r.gin_counters > 0),
        };
        versions::filter(filter_abi, &mut w)?;
        versions::check_gin_and_cft(&w)?;
        if reqs.lsaMultimem != 0 {
            return Err(Error::invalid_argument("ncclDevCommCreate: lsaMultimem asks for NVLink multicast memory, which oxccl never uses (NVLS is off)"));
        }
        // SAFETY: as above.
        unsafe { check_teams(reqs.teamRequirementsList) }?;
        Ok(Request {
            abi,
            version: effective as u32,
            lsa_barriers: count(w.lsa_barriers, "lsaBarrierCount")?,
            rail_barriers: 0,
            hybrid_barriers: count(w.barriers, "barrierCount")?,
            resources,
        })
    }

    /// Buffers of the resource window before the caller's (`all`'s first entries).
    pub fn internal(&self) -> usize {
        match self.abi {
            Abi::V22809 => 2,
            _ => 6,
        }
    }

    /// Every buffer of the resource window, in NCCL's order. For 2.28.9 callers: the rail GIN
    /// barrier (ncclGinBarrierCreateRequirement's 2.28 sizes), the LSA barrier
    /// (ncclLsaBarrierCreateRequirement's), then the caller's. For versioned callers, NCCL
    /// 2.32.3's: world GIN, rail GIN, LSA, hybrid world GIN, hybrid rail GIN and hybrid LSA
    /// barriers, then the caller's; a 2.32 GIN barrier is signals only (none here, GIN being
    /// refused), an LSA barrier three words a barrier and one a barrier and rank.
    pub fn all(&self, lsa_size: usize) -> Vec<Resource> {
        let lsa_bytes = |n: u32| (3 * n as u64 + n as u64 * lsa_size as u64) * 4;
        let mut v = match self.abi {
            Abi::V22809 => {
                let rail = Resource { size: self.rail_barriers as u64 * GIN_MAX_CONTEXTS as u64 * 4, align: 4, gin_signals: self.rail_barriers, ..Default::default() };
                let lsa = Resource { size: lsa_bytes(self.lsa_barriers), align: 4, ..Default::default() };
                vec![rail, lsa]
            }
            _ => {
                let gin = Resource::default();
                let lsa = Resource { size: lsa_bytes(self.lsa_barriers), align: 4, ..Default::default() };
                let hybrid_lsa = Resource { size: lsa_bytes(self.hybrid_barriers), align: 4, ..Default::default() };
                vec![gin, gin, lsa, gin, gin, hybrid_lsa]
            }
        };
        v.extend_from_slice(&self.resources);
        v
    }
}

/// Where each buffer of the resource window goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Bytes in all (before rounding to the allocation granularity); 0: no resource window.
    pub total: u64,
    /// Offset of the (empty) GIN signal shadows, as NCCL places them.
    pub shadows: u64,
    /// Per buffer: its handle (its offset / 128).
    pub handles: Vec<u32>,
    /// Per buffer: the index of its first GIN signal.
    pub signals: Vec<u32>,
    /// Per buffer: the index of its first GIN counter.
    pub counters: Vec<u32>,
}

/// NCCL's layout: each buffer at a multiple of max(128, its alignment), in order.
pub fn layout(all: &[Resource]) -> Result<Layout> {
    let mut l = Layout::default();
    let (mut at, mut sig, mut ctr) = (0u64, 0u32, 0u32);
    for r in all {
        let align = r.align.max(RESOURCE_UNIT);
        at = at.div_ceil(align).checked_mul(align).ok_or_else(|| Error::invalid_argument("ncclDevCommCreate: resource alignment too large"))?;
        l.handles.push(u32::try_from(at / RESOURCE_UNIT).map_err(|_| Error::invalid_argument("ncclDevCommCreate: resource buffers too large"))?);
        l.signals.push(sig);
        l.counters.push(ctr);
        at = at.checked_add(r.size).ok_or_else(|| Error::invalid_argument("ncclDevCommCreate: resource buffers too large"))?;
        sig = sig.saturating_add(r.gin_signals);
        ctr = ctr.saturating_add(r.gin_counters);
    }
    l.total = at.div_ceil(RESOURCE_UNIT) * RESOURCE_UNIT;
    l.shadows = l.total;
    Ok(l)
}

/// Why `comm` cannot have device communicators, as the error every call gets.
pub fn check_supported(r: &Ready) -> Result<()> {
    match unsupported(r.net.is_none()) {
        Some(why) => Err(Error::invalid_usage(format!("ncclDevCommCreate: the communicator has no symmetric memory: {why}"))),
        None => Ok(()),
    }
}

/// What every layout of a device communicator is filled from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub nranks: usize,
    /// (LSA team size, this rank's index in it).
    pub lsa: (usize, usize),
    /// First window table block.
    pub window_table: u64,
    /// The resource window's handle (0: none).
    pub resource_window: u64,
    /// The resource window's descriptor (default: none).
    pub desc: crate::symmem::abi232::ncclWindow_vidmem,
    /// Device address of this rank's GIN signal shadows (0 without a resource window).
    pub shadows: u64,
    /// The communicator's device-visible abort flag (`uint32_t*`).
    pub abort_flag: u64,
}

/// NCCL 2.28.9's `ncclDevComm` (unchanged from before versioned headers).
pub fn dev_comm_v22809(p: &Parts, req: &Request, lay: &Layout) -> ncclDevComm {
    let mut dc = ncclDevComm {
        rank: p.rank as i32,
        nRanks: p.nranks as i32,
        nRanks_rcp32: idiv_rcp32(p.nranks as u32),
        lsaRank: p.lsa.1 as i32,
        lsaSize: p.lsa.0 as i32,
        lsaSize_rcp32: idiv_rcp32(p.lsa.0 as u32),
        windowTable: p.window_table,
        lsaBarrier: ncclLsaBarrierHandle { bufHandle: lay.handles[1], nBarriers: req.lsa_barriers as i32 },
        railGinBarrier: ncclGinBarrierHandle { signal0: lay.signals[0], bufHandle: lay.handles[0] },
        ..Default::default()
    };
    if p.resource_window != 0 {
        dc.resourceWindow = p.resource_window;
        dc.resourceWindow_inlined = p.desc.v22902();
        dc.ginSignalShadows = p.shadows;
    }
    dc
}

/// NCCL 2.32.3's `ncclDevComm`, as its ncclDevrCommCreateInternal fills it for a user (not
/// internal) device communicator where there is neither GIN nor CFT: GIN fields zero; the CFT
/// teams of one (cftSize and cftMultimemSize 1, ranks 0, `cftMultimemSize_rcp32` 2^32 / 1
/// truncated, 0) and no logical endpoints (NCCL_LE_ID_INVALID); GIN barriers with their first
/// signal, LSA barriers with their buffers. NCCL 2.32.3 sets `abortFlag` only for its internal
/// device communicators; oxccl gives every one the communicator's abort flag, so an LSA barrier
/// wait in a user kernel ends when the communicator is aborted instead of spinning on.
pub fn dev_comm_v23100(p: &Parts, req: &Request, lay: &Layout) -> ncclDevComm_v23100 {
    let gin = |i: usize| ncclGinBarrierHandle { signal0: lay.signals[i], bufHandle: 0 };
    let mut dc = ncclDevComm_v23100 {
        magic: NCCL_API_MAGIC,
        version: req.version,
        rank: p.rank as i32,
        nRanks: p.nranks as i32,
        nRanks_rcp32: idiv_rcp32(p.nranks as u32),
        lsaRank: p.lsa.1 as i32,
        lsaSize: p.lsa.0 as i32,
        lsaSize_rcp32: idiv_rcp32(p.lsa.0 as u32),
        windowTable: p.window_table,
        worldGinBarrier: gin(0),
        railGinBarrier: gin(1),
        lsaBarrier: ncclLsaBarrierHandle { bufHandle: lay.handles[2], nBarriers: req.lsa_barriers as i32 },
        hybridDenseGinBarrier: gin(3),
        hybridRailGinBarrier: gin(4),
        hybridLsaBarrier: ncclLsaBarrierHandle { bufHandle: lay.handles[5], nBarriers: req.hybrid_barriers as i32 },
        abortFlag: p.abort_flag,
        cftRank: 0,
        cftSize: 1,
        cftMultimemRank: 0,
        cftMultimemSize: 1,
        cftMultimemSize_rcp32: idiv_rcp32(1),
        ucLeId: NCCL_LE_ID_INVALID,
        mcLeId: NCCL_LE_ID_INVALID,
        ..Default::default()
    };
    if p.resource_window != 0 {
        dc.resourceWindow = p.resource_window;
        dc.resourceWindow_inlined = ncclResourceWindow_vidmem { lsaFlatBase: p.desc.lsaFlatBase, stride4G: p.desc.stride4G, mcOffset4K: p.desc.mcOffset4K };
        dc.ginSignalShadows = p.shadows;
    }
    dc
}

/// The bytes of the device communicator in the caller's layout (`req.abi`).
pub fn dev_comm_bytes(p: &Parts, req: &Request, lay: &Layout) -> Vec<u8> {
    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: plain-old-data ABI structs with their padding spelled out as fields.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
    }
    match req.abi {
        Abi::V22809 => bytes(&dev_comm_v22809(p, req, lay)),
        Abi::V22902 => bytes(&versions::to_v22902(&dev_comm_v23100(p, req, lay))),
        Abi::V22907 => bytes(&versions::to_v22907(&dev_comm_v23100(p, req, lay))),
        Abi::V23000 => bytes(&versions::to_v23000(&dev_comm_v23100(p, req, lay))),
        Abi::V23100 => bytes(&dev_comm_v23100(p, req, lay)),
    }
}

/// Creates the device communicator (collective) and writes it to `out` (an `ncclDevComm*` of
/// the caller's layout, `req.abi`).
pub fn create(comm: &Comm, r: &Ready, req: &Request, out: usize) -> Result<()> {
    check_supported(r)?;
    let lsa = lsa_team(&r.peers, comm.rank);
    let all = req.all(lsa.0);
    let lay = layout(&all)?;
    let (parts, _) = comm.windows.with_sym(
        || crate::comm::window::init_sym(comm, r),
        |sm| {
            let mut p = Parts { rank: comm.rank, nranks: comm.nranks, lsa, window_table: sm.table_head()?, abort_flag: r.abort_flag.dev_ptr, ..Default::default() };
            if lay.total == 0 {
                return Ok((p, None));
            }
            let w = sm.alloc_window(&r.bootstrap, lay.total)?;
            let own = w.local(sm.lsa_rank());
            p.resource_window = w.vidmem.ptr;
            p.desc = w.desc;
            p.shadows = own + lay.shadows;
            let size = lay.total.div_ceil(sm.granularity()) * sm.granularity();
            Ok((p, Some((Window { base: own, size, flags: 0, reg: 0 }, w))))
        },
    )?;
    let first = req.internal();
    for (i, res) in req.resources.iter().enumerate() {
        // SAFETY: output addresses the caller passed in its requirements and keeps valid until
        // the call (or its group) completes, as NCCL requires.
        unsafe {
            if res.out_handle != 0 {
                *(res.out_handle as *mut u32) = lay.handles[i + first];
            }
            if res.out_signal != 0 {
                *(res.out_signal as *mut u32) = lay.signals[i + first];
            }
            if res.out_counter != 0 {
                *(res.out_counter as *mut u32) = lay.counters[i + first];
            }
        }
    }
    let bytes = dev_comm_bytes(&parts, req, &lay);
    // SAFETY: the caller's non-NULL ncclDevComm* (checked at the call), of its headers' size.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len()) };
    // No rank's kernel may use a peer's barrier words before that peer zeroed them.
    r.bootstrap.barrier()
}

/// Frees what `create` made for a device communicator whose `resourceWindow` is
/// `resource_window` (local, as in NCCL).
pub fn destroy(comm: &Comm, resource_window: u64) -> Result<()> {
    if resource_window != 0 {
        comm.windows.remove(resource_window as usize)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symmem::abi::{ncclDevResourceRequirements, ncclTeamRequirements};

    fn reqs() -> ncclDevCommRequirements {
        ncclDevCommRequirements {
            resourceRequirementsList: std::ptr::null_mut(),
            teamRequirementsList: std::ptr::null_mut(),
            lsaMultimem: false,
            barrierCount: 0,
            lsaBarrierCount: 0,
            railGinBarrierCount: 0,
            lsaLLA2ABlockCount: 0,
            lsaLLA2ASlotCount: 0,
            ginForceEnable: false,
            ginContextCount: 0,
            ginSignalCount: 0,
            ginCounterCount: 0,
        }
    }

    /// nccl-tests' -D 1 at 4 ranks: lsaBarrierCount = 16 blocks, nothing else. NCCL puts the
    /// (empty) rail barrier at handle 0 and the LSA barrier at 0 too: 16 * (3 + 4) words.
    #[test]
    fn nccl_tests_layout() {
        let mut q = reqs();
        q.lsaBarrierCount = 16;
        // SAFETY: no lists.
        let r = unsafe { Request::copy(&q) }.unwrap();
        let l = layout(&r.all(4)).unwrap();
        assert_eq!(l.handles, vec![0, 0]);
        assert_eq!(l.total, (16 * 7 * 4u64).div_ceil(128) * 128);
    }

    #[test]
    fn buffers_follow_nccls_order_and_alignment() {
        let mut user_handle = 0u32;
        let mut sig = 0u32;
        let mut second = ncclDevResourceRequirements {
            next: std::ptr::null_mut(),
            bufferSize: 100,
            bufferAlign: 4096,
            outBufferHandle: std::ptr::null_mut(),
            ginSignalCount: 0,
            ginCounterCount: 0,
            outGinSignalStart: std::ptr::null_mut(),
            outGinCounterStart: std::ptr::null_mut(),
        };
        let mut first = ncclDevResourceRequirements {
            next: &mut second,
            bufferSize: 1000,
            bufferAlign: 16,
            outBufferHandle: &mut user_handle,
            ginSignalCount: 3,
            ginCounterCount: 0,
            outGinSignalStart: &mut sig,
            outGinCounterStart: std::ptr::null_mut(),
        };
        let mut q = reqs();
        q.barrierCount = 2;
        q.lsaBarrierCount = 1;
        q.resourceRequirementsList = &mut first;
        // SAFETY: the lists above outlive the call.
        let r = unsafe { Request::copy(&q) }.unwrap();
        assert_eq!((r.lsa_barriers, r.rail_barriers), (2, 2), "barrierCount raises both");
        assert_eq!(r.resources.len(), 2);
        let l = layout(&r.all(2)).unwrap();
        // rail: 2 * 4 * 4 = 32 bytes at 0; lsa: (6 + 4) * 4 = 40 bytes at 128; first: 1000 at 256;
        // second: aligned to 4096.
        assert_eq!(l.handles, vec![0, 1, 2, 32]);
        assert_eq!(l.signals, vec![0, 2, 2, 5], "the rail barrier's signals come first");
        assert_eq!(l.total, 4096 + 128);
    }

    #[test]
    fn what_oxccl_never_has_is_refused_with_nccls_codes() {
        use crate::error::ResultCode;
        let mut q = reqs();
        q.lsaMultimem = true;
        // SAFETY: no lists.
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidArgument);
        let mut q = reqs();
        q.ginSignalCount = 4;
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidUsage);
        let mut q = reqs();
        q.ginForceEnable = true;
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidUsage);
        let mut t = ncclTeamRequirements { next: std::ptr::null_mut(), team: crate::api::types::ncclTeam_t { nRanks: 2, rank: 0, stride: 1 }, multimem: true, outMultimemHandle: std::ptr::null_mut() };
        let mut q = reqs();
        q.teamRequirementsList = &mut t;
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidArgument);
        // SAFETY: t outlives q; written through the list pointer the call reads.
        unsafe { (*q.teamRequirementsList).multimem = false };
        assert!(unsafe { Request::copy(&q) }.is_ok(), "a unicast team needs nothing");
        let mut q = reqs();
        q.lsaBarrierCount = -1;
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidArgument);
        // A cyclic list is cut, not followed forever.
        let mut cyc = ncclDevResourceRequirements {
            next: std::ptr::null_mut(),
            bufferSize: 8,
            bufferAlign: 8,
            outBufferHandle: std::ptr::null_mut(),
            ginSignalCount: 0,
            ginCounterCount: 0,
            outGinSignalStart: std::ptr::null_mut(),
            outGinCounterStart: std::ptr::null_mut(),
        };
        cyc.next = &mut cyc;
        let mut q = reqs();
        q.resourceRequirementsList = &mut cyc;
        assert_eq!(unsafe { Request::copy(&q) }.unwrap_err().code, ResultCode::InvalidArgument);
    }

    fn versioned() -> ncclDevCommRequirements_v23203 {
        ncclDevCommRequirements_v23203::initializer()
    }

    #[test]
    fn headers_are_told_apart_by_their_first_16_bytes() {
        let head = |first: u64, second: u64| {
            let mut h = [0u8; 16];
            h[..8].copy_from_slice(&first.to_le_bytes());
            h[8..].copy_from_slice(&second.to_le_bytes());
            h
        };
        assert_eq!(classify(head(120, 0x5aa3_cafe_beef)), Header::Versioned);
        assert_eq!(classify(head(72, 0x5976_cafe_beef)), Header::Versioned, "2.29.2's 72 bytes");
        assert_eq!(classify(head(0, 0)), Header::V22809, "2.28's = {{}}");
        assert_eq!(classify(head(0x7ffd_1234_5670, 0x7ffd_1234_5690)), Header::V22809, "2.28's two list pointers");
        assert_eq!(classify(head(0, 0x7ffd_1234_5690)), Header::V22809);
        assert_eq!(classify(head(120, 0x5aa3_0000_0000)), Header::BadMagic, "a size without the magic");
    }

    /// NCCL 2.32.3's order: world GIN, rail GIN, LSA, hybrid world GIN, hybrid rail GIN and
    /// hybrid LSA barriers, then the caller's; GIN barriers take no bytes.
    #[test]
    fn versioned_layout_is_nccl_2_32_3s() {
        let mut user = 0u32;
        let mut res = ncclDevResourceRequirements {
            next: std::ptr::null_mut(),
            bufferSize: 1000,
            bufferAlign: 16,
            outBufferHandle: &mut user,
            ginSignalCount: 0,
            ginCounterCount: 0,
            outGinSignalStart: std::ptr::null_mut(),
            outGinCounterStart: std::ptr::null_mut(),
        };
        let mut q = versioned();
        q.lsaBarrierCount = 4;
        q.resourceRequirementsList = &mut res;
        // SAFETY: the list outlives the call.
        let r = unsafe { Request::copy_versioned(&q, false) }.unwrap();
        assert_eq!((r.abi, r.version, r.lsa_barriers, r.rail_barriers, r.hybrid_barriers), (Abi::V23100, 23203, 4, 0, 0));
        assert_eq!(r.internal(), 6);
        // LSA barrier: (3 * 4 + 4 * 2) * 4 = 80 bytes at 0; the empty buffers after it at 128.
        let l = layout(&r.all(2)).unwrap();
        assert_eq!(l.handles, vec![0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(l.total, 128 + 1024);
        assert_eq!(l.signals, vec![0; 7]);
        // No LSA barriers and no buffers: no resource window at all.
        let r = unsafe { Request::copy_versioned(&versioned(), false) }.unwrap();
        assert_eq!(layout(&r.all(2)).unwrap().total, 0);
    }

    #[test]
    fn versioned_requests_pass_nccls_checks() {
        use crate::error::ResultCode;
        // SAFETY (every call below): no lists.
        let ok = |q: &ncclDevCommRequirements_v23203| unsafe { Request::copy_versioned(q, false) };
        // 2.29.2's barrierCount: LSA barriers (the v22902 filter), written in 2.29.2's layout.
        let mut q = versioned();
        q.version = 22902;
        q.barrierCount = 3;
        let r = ok(&q).unwrap();
        assert_eq!((r.abi, r.version, r.lsa_barriers, r.hybrid_barriers), (Abi::V22902, 22902, 3, 0));
        // A 2.32 barrierCount is GIN (hybrid barriers): refused without GIN.
        let mut q = versioned();
        q.barrierCount = 3;
        assert_eq!(ok(&q).unwrap_err().code, ResultCode::InvalidArgument);
        for f in [
            |q: &mut ncclDevCommRequirements_v23203| q.worldGinBarrierCount = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.railGinBarrierCount = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.ginSignalCount = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.ginConnectionType = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.ginForceEnable = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.cftCaps = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.lsaMultimem = 1,
            |q: &mut ncclDevCommRequirements_v23203| q.lsaBarrierCount = -1,
        ] {
            let mut q = versioned();
            f(&mut q);
            assert_eq!(ok(&q).unwrap_err().code, ResultCode::InvalidArgument, "{q:?}");
        }
        // What needs no GIN or CFT is fine: a GIN type, cftBarrierCount without cftCaps.
        let mut q = versioned();
        q.ginType = 3;
        q.cftBarrierCount = 2;
        q.ginContextCount = 8;
        assert!(ok(&q).is_ok());
        // Versions: too new, unserved, 2.30 and 2.31 layouts, useRuntimeVersion, JIT.
        for (v, want) in [(23204, None), (22904, None), (23003, Some((Abi::V23000, 23003))), (23100, Some((Abi::V23100, 23100))), (22907, Some((Abi::V22907, 22907)))] {
            let mut q = versioned();
            q.version = v;
            match want {
                None => assert_eq!(ok(&q).unwrap_err().code, ResultCode::InvalidUsage, "{v}"),
                Some(w) => {
                    let r = ok(&q).unwrap();
                    assert_eq!((r.abi, r.version), w, "{v}");
                }
            }
        }
        let mut q = versioned();
        q.version = 23100;
        q.useRuntimeVersion = 1;
        let r = ok(&q).unwrap();
        assert_eq!((r.abi, r.version), (Abi::V23100, 23203));
        let mut q = versioned();
        q.version = 23003;
        // SAFETY: no lists.
        let r = unsafe { Request::copy_versioned(&q, true) }.unwrap();
        assert_eq!((r.abi, r.version), (Abi::V23100, 23203), "NCCL_DEV_API_JIT=1");
    }

    fn parts() -> Parts {
        let desc = crate::symmem::descriptor(0x7f00_0000_0000, 1, 1, 8 << 32, 1 << 21, 0, 0);
        Parts { rank: 1, nranks: 2, lsa: (2, 1), window_table: 0x1000, resource_window: 0x2000, desc, shadows: 0x7f08_0020_0400, abort_flag: 0x3000 }
    }

    /// NCCL 2.32.3's ncclDevrCommCreateInternal without GIN and CFT, field by field.
    #[test]
    fn the_2_32_dev_comm_is_filled_as_nccl_fills_it() {
        let mut q = versioned();
        q.lsaBarrierCount = 4;
        // SAFETY: no lists.
        let r = unsafe { Request::copy_versioned(&q, false) }.unwrap();
        let l = layout(&r.all(2)).unwrap();
        let d = dev_comm_v23100(&parts(), &r, &l);
        assert_eq!((d.magic, d.version, d.rank, d.nRanks, d.lsaRank, d.lsaSize), (NCCL_API_MAGIC, 23203, 1, 2, 1, 2));
        assert_eq!((d.nRanks_rcp32, d.lsaSize_rcp32), (1 << 31, 1 << 31));
        assert_eq!((d.windowTable, d.resourceWindow, d.ginSignalShadows, d.abortFlag), (0x1000, 0x2000, 0x7f08_0020_0400, 0x3000));
        assert_eq!(d.resourceWindow_inlined, ncclResourceWindow_vidmem { lsaFlatBase: 0x7f00_0000_0000, stride4G: 8, mcOffset4K: 512 });
        assert_eq!(d.lsaBarrier, ncclLsaBarrierHandle { bufHandle: 0, nBarriers: 4 });
        assert_eq!(d.hybridLsaBarrier, ncclLsaBarrierHandle { bufHandle: 1, nBarriers: 0 });
        assert_eq!((d.cftRank, d.cftSize, d.cftMultimemRank, d.cftMultimemSize, d.cftMultimemSize_rcp32), (0, 1, 0, 1, 0));
        assert_eq!((d.ucLeId, d.mcLeId), (u32::MAX, u32::MAX));
        assert_eq!((d.ginConnectionCount, d.ginContextCount, d.ginSignalCount, d.ginConnectionStride, d.lsaMultimem), (0, 0, 0, 0, 0));
        // Each layout is as long as its headers' struct.
        for (abi, len) in [(Abi::V22809, 200), (Abi::V22902, 200), (Abi::V22907, 224), (Abi::V23000, 240), (Abi::V23100, 248)] {
            let r = Request { abi, ..r.clone() };
            let l = layout(&r.all(2)).unwrap();
            assert_eq!(dev_comm_bytes(&parts(), &r, &l).len(), len, "{abi:?}");
        }
        // 2.28.9's is as before: the whole window inline, the shadows, the rail barrier.
        let r28 = Request { abi: Abi::V22809, version: 0, lsa_barriers: 4, rail_barriers: 1, ..Default::default() };
        let l28 = layout(&r28.all(2)).unwrap();
        let d28 = dev_comm_v22809(&parts(), &r28, &l28);
        assert_eq!((d28.resourceWindow_inlined.lsaRank, d28.resourceWindow_inlined.lsaFlatBase, d28.ginSignalShadows), (1, 0x7f00_0000_0000, 0x7f08_0020_0400));
        assert_eq!((d28.lsaBarrier.bufHandle, d28.railGinBarrier.signal0), (1, 0));
    }
}
