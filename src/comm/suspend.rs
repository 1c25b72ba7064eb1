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
    /// where the communicator is already suspended; a failure on any rank fails the call on every
    /// rank (the communicator stays suspended; a resume restores what was given back).
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
        // Driver calls that another thread's global-mode capture must not see.
        let _relaxed = crate::gpu::stream::RelaxedCapture::new()?;
        let _ctx = CtxGuard::new(r.dev)?;
        // As NCCL (cudaDeviceSynchronize): every kernel and copy that may touch the buffers,
        // graph replays included, has ended on this rank ...
        // SAFETY: plain driver call in the device's context (current by the guard).
        let synced = check(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize");
        // ... and on every rank, before any rank unmaps or releases.
        agree(&r.bootstrap, synced, "synchronise")?;
        let given = (|| -> Result<u64> {
            if let Some(net) = &r.net {
                net.local().suspend_memory()?;
            }
            let mut ch = r.channels.lock();
            match ch.as_mut() {
                Some(ch) => {
                    ch.suspend()?;
                    Ok(ch.suspendable_bytes())
                }
                None => Ok(0),
            }
        })();
        // The memory is gone everywhere (the peers' mappings held it too) when the call returns.
        let given = agree(&r.bootstrap, given, "give its memory back")?;
        nccl_info!(Subsys::Alloc, "ncclCommSuspend: rank {} gave back {given} bytes of device memory", self.rank);
        Ok(())
    }

    /// Maps new device memory where the channel buffer was, with its contents, and the peers'
    /// (collective). Fails with ncclInvalidUsage where the communicator is not suspended; a
    /// failure on any rank (out of memory) fails the call on every rank, and the communicator
    /// stays suspended: another ncclCommResume tries again.
    pub fn resume_memory(&self) -> Result<()> {
        let r = self.ready()?;
        self.check_live()?;
        if !self.is_suspended() {
            return Err(Error::invalid_usage("the communicator is not suspended"));
        }
        let _relaxed = crate::gpu::stream::RelaxedCapture::new()?;
        let _ctx = CtxGuard::new(r.dev)?;
        let listener = match r.channels.lock().as_mut() {
            Some(ch) => ch.resume_local(),
            None => Ok(None),
        };
        // Every rank's memory is back and its socket bound before any descriptor travels.
        let listener = agree(&r.bootstrap, listener, "allocate its memory again")?;
        let mapped = match r.channels.lock().as_mut() {
            Some(ch) => ch.resume_peers(listener),
            None => Ok(()),
        };
        agree(&r.bootstrap, mapped, "map its peers' memory again")?;
        if let Some(net) = &r.net {
            let local = net.local();
            if local.is_suspended() {
                local.resume_memory()?;
            }
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

/// Every rank's outcome of a step (collective): this rank's error, else the others' failure (each
/// WARNs its own), else this rank's value. Stands where a barrier would, so that a rank failing
/// alone never leaves the others waiting for it.
fn agree<T>(bs: &crate::bootstrap::Bootstrap, mine: Result<T>, step: &str) -> Result<T> {
    let all = bs.all_gather(&[mine.is_ok() as u8])?;
    let v = mine?;
    let bad: Vec<String> = all.iter().enumerate().filter(|(_, b)| b.first() != Some(&1)).map(|(r, _)| r.to_string()).collect();
    if bad.is_empty() {
        Ok(v)
    } else {
        Err(Error::system(format!("rank(s) {} could not {step} (see their WARN)", bad.join(", "))))
    }
}
