//! ncclCommSuspend / ncclCommResume with NCCL_SUSPEND_MEM, and ncclCommMemStats (NCCL 2.29+;
//! src/mem_manager.cc in NCCL 2.30). While suspended, the communicator's channel buffer (its
//! scratch, packets and semaphores: nearly all of its device memory) is given back to the driver;
//! its address stays reserved, so the DevComm, the peers' mappings and CUDA graphs captured before
//! still point at it after the resume (gpu::suspendable). What stays: the small private buffer,
//! the registration table, the copy-engine and network staging buffers, symmetric windows
//! (the application's memory) and device communicators' resources.
//!
//! Both calls are collective over the communicator, as in NCCL (each runs bootstrap barriers),
//! and run at the outermost ncclGroupEnd inside a group (launch::group::submit_window).

use std::sync::atomic::Ordering;

use super::Comm;
use crate::error::{Error, Result};
use crate::gpu::{check, cu, CtxGuard};
use crate::log::Subsys;

/// ncclCommMemStats' answer (NCCL's ncclCommMemStat_t values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// ncclStatGpuMemSuspend: device bytes a suspend gives back.
    pub suspendable: u64,
    /// ncclStatGpuMemPersist: device bytes the communicator keeps while suspended.
    pub persistent: u64,
    /// ncclStatGpuMemSuspended.
    pub suspended: bool,
}

impl MemStats {
    /// ncclStatGpuMemTotal.
    pub fn total(&self) -> u64 {
        self.suspendable + self.persistent
    }
}

impl Comm {
    /// Whether a suspend is in effect.
    pub fn is_suspended(&self) -> bool {
        self.suspended.load(Ordering::Acquire)
    }

    /// Gives back the channel buffer's device memory (collective). Fails with ncclInvalidUsage
    /// where the communicator is already suspended.
    pub fn suspend_memory(&self) -> Result<()> {
        let r = self.ready()?;
        self.check_live()?;
        {
            // Under the launch lock: a launch either ran before (and the synchronise below waits
            // for it) or sees the flag and is refused.
            let _ls = r.launch.lock();
            if self.suspended.swap(true, Ordering::AcqRel) {
                return Err(Error::invalid_usage("the communicator is already suspended"));
            }
        }
        let _ctx = CtxGuard::new(r.dev)?;
        // As NCCL (cudaDeviceSynchronize): every kernel and copy that may touch the buffers,
        // graph replays included, has ended on this rank ...
        // SAFETY: plain driver call in the device's context (current by the guard).
        check(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize")?;
        // ... and on every rank, before any rank unmaps or releases.
        r.bootstrap.barrier()?;
        if let Some(net) = &r.net {
            net.local().suspend_memory()?;
        }
        let given = {
            let mut ch = r.channels.lock();
            match ch.as_mut() {
                Some(ch) => {
                    ch.suspend()?;
                    ch.suspendable_bytes()
                }
                None => 0,
            }
        };
        // The memory is gone everywhere (the peers' mappings held it too) when the call returns.
        r.bootstrap.barrier()?;
        nccl_info!(Subsys::Alloc, "ncclCommSuspend: rank {} gave back {given} bytes of device memory", self.rank);
        Ok(())
    }

    /// Maps new device memory where the channel buffer was, with its contents, and the peers'
    /// (collective). Fails with ncclInvalidUsage where the communicator is not suspended.
    pub fn resume_memory(&self) -> Result<()> {
        let r = self.ready()?;
        self.check_live()?;
        if !self.is_suspended() {
            return Err(Error::invalid_usage("the communicator is not suspended"));
        }
        let _ctx = CtxGuard::new(r.dev)?;
        let listener = match r.channels.lock().as_mut() {
            Some(ch) => ch.resume_local()?,
            None => None,
        };
        r.bootstrap.barrier()?;
        if let Some(ch) = r.channels.lock().as_mut() {
            ch.resume_peers(listener)?;
        }
        if let Some(net) = &r.net {
            net.local().resume_memory()?;
        }
        // Every rank maps every peer again before any of them launches.
        r.bootstrap.barrier()?;
        self.suspended.store(false, Ordering::Release);
        nccl_info!(Subsys::Alloc, "ncclCommResume: rank {} has its device memory back", self.rank);
        Ok(())
    }

    /// What ncclCommMemStats reports.
    pub fn mem_stats(&self) -> Result<MemStats> {
        let r = self.ready()?;
        let mut s = match r.channels.lock().as_ref() {
            Some(ch) => MemStats { suspendable: ch.suspendable_bytes(), persistent: ch.persistent_bytes(), suspended: false },
            None => MemStats::default(),
        };
        if let Some(net) = &r.net {
            let l = net.local().mem_stats()?;
            s.suspendable += l.suspendable;
            s.persistent += l.persistent;
        }
        s.suspended = self.is_suspended();
        Ok(s)
    }
}
