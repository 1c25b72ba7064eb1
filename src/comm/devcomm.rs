//! Device communicators (ncclDevCommCreate / ncclDevCommDestroy): what a kernel written against
//! NCCL's device API needs to reach its peers itself. The `ncclDevComm` it receives names the LSA
//! team (every rank: a communicator with symmetric memory is one host), the window table
//! (`ncclFindWindow`), and one symmetric "resource window" holding the LSA barriers' counters and
//! the buffers the caller asked for, laid out exactly as NCCL 2.28.9 lays them out: the rail GIN
//! barrier's words, then the LSA barriers', then the caller's requirements in list order, each at
//! a multiple of 128 bytes (a resource handle is its offset / 128).
//!
//! What oxccl never provides is refused with NCCL's codes: multicast memory (`lsaMultimem`, a
//! team with `multimem`; NVLS stays off) is ncclInvalidArgument, as NCCL answers where multicast
//! is unavailable, and GPU-initiated networking (`ginForceEnable`, GIN signals or counters) is
//! ncclInvalidUsage: a communicator with symmetric memory has no network.

use crate::comm::{Comm, Ready};
use crate::error::{Error, Result};
use crate::symmem::abi::{idiv_rcp32, ncclDevComm, ncclDevCommRequirements, ncclGinBarrierHandle, ncclLsaBarrierHandle, GIN_MAX_CONTEXTS, RESOURCE_UNIT};
use crate::symmem::{lsa_team, unsupported};
use crate::comm::window::Window;

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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// LSA barriers to provide: the larger of `barrierCount` and `lsaBarrierCount`.
    pub lsa_barriers: u32,
    /// Rail GIN barriers to lay out: the larger of `barrierCount` and `railGinBarrierCount`.
    pub rail_barriers: u32,
    /// The caller's buffer requirements (`resourceRequirementsList`), in list order.
    pub resources: Vec<Resource>,
}

fn count(v: i32, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid_argument(format!("ncclDevCommCreate: {what} = {v} is negative")))
}

impl Request {
    /// Reads and checks the caller's requirements.
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
        let mut t = reqs.teamRequirementsList;
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
        let mut resources = Vec::new();
        let mut p = reqs.resourceRequirementsList;
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
        Ok(Request {
            lsa_barriers: barriers.max(count(reqs.lsaBarrierCount, "lsaBarrierCount")?),
            rail_barriers: barriers.max(count(reqs.railGinBarrierCount, "railGinBarrierCount")?),
            resources,
        })
    }

    /// Every buffer of the resource window, in NCCL's order: the rail GIN barrier
    /// (ncclGinBarrierCreateRequirement's sizes), the LSA barrier (ncclLsaBarrierCreateRequirement's),
    /// then the caller's.
    pub fn all(&self, lsa_size: usize) -> Vec<Resource> {
        let rail = Resource { size: self.rail_barriers as u64 * GIN_MAX_CONTEXTS as u64 * 4, align: 4, gin_signals: self.rail_barriers, ..Default::default() };
        let lsa = Resource { size: (3 * self.lsa_barriers as u64 + self.lsa_barriers as u64 * lsa_size as u64) * 4, align: 4, ..Default::default() };
        let mut v = vec![rail, lsa];
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

/// Creates the device communicator (collective) and writes it to `out` (an `ncclDevComm*`).
pub fn create(comm: &Comm, r: &Ready, req: &Request, out: usize) -> Result<()> {
    check_supported(r)?;
    let (lsa_size, lsa_rank) = lsa_team(&r.peers, comm.rank);
    let all = req.all(lsa_size);
    let lay = layout(&all)?;
    let (dc, _) = comm.windows.with_sym(
        || crate::comm::window::init_sym(comm, r),
        |sm| {
            let mut dc = ncclDevComm {
                rank: comm.rank as i32,
                nRanks: comm.nranks as i32,
                nRanks_rcp32: idiv_rcp32(comm.nranks as u32),
                lsaRank: lsa_rank as i32,
                lsaSize: lsa_size as i32,
                lsaSize_rcp32: idiv_rcp32(lsa_size as u32),
                windowTable: sm.table_head()?,
                lsaBarrier: ncclLsaBarrierHandle { bufHandle: lay.handles[1], nBarriers: req.lsa_barriers as i32 },
                railGinBarrier: ncclGinBarrierHandle { signal0: lay.signals[0], bufHandle: lay.handles[0] },
                ..Default::default()
            };
            if lay.total == 0 {
                return Ok((dc, None));
            }
            let w = sm.alloc_window(&r.bootstrap, lay.total)?;
            let own = w.local(sm.lsa_rank());
            dc.resourceWindow = w.vidmem.ptr;
            dc.resourceWindow_inlined = w.desc.v22902();
            dc.ginSignalShadows = own + lay.shadows;
            let size = lay.total.div_ceil(sm.granularity()) * sm.granularity();
            Ok((dc, Some((Window { base: own, size, flags: 0, reg: 0 }, w))))
        },
    )?;
    for (i, res) in req.resources.iter().enumerate() {
        // SAFETY: output addresses the caller passed in its requirements and keeps valid until
        // the call (or its group) completes, as NCCL requires.
        unsafe {
            if res.out_handle != 0 {
                *(res.out_handle as *mut u32) = lay.handles[i + 2];
            }
            if res.out_signal != 0 {
                *(res.out_signal as *mut u32) = lay.signals[i + 2];
            }
            if res.out_counter != 0 {
                *(res.out_counter as *mut u32) = lay.counters[i + 2];
            }
        }
    }
    // SAFETY: the caller's non-NULL ncclDevComm* (checked at the call).
    unsafe { std::ptr::write_unaligned(out as *mut ncclDevComm, dc) };
    // No rank's kernel may use a peer's barrier words before that peer zeroed them.
    r.bootstrap.barrier()
}

/// Frees what `create` made for `dc` (local, as in NCCL).
pub fn destroy(comm: &Comm, dc: &ncclDevComm) -> Result<()> {
    if dc.resourceWindow != 0 {
        comm.windows.remove(dc.resourceWindow as usize)?;
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
}
