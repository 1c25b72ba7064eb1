//! OXCCL_DEBUG_DUMP's dump of one communicator (the monitor that asks for it is diag's): what the
//! host knows, then the device state, read without blocking the monitor on a stalled driver.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Comm, Ready};
use crate::error::{Error, Result};
use crate::gpu::{cu, CtxGuard};

impl Comm {
    /// OXCCL_DEBUG_DUMP: a dump of this communicator if its stream has been busy for `after`
    /// with no new operation (once per stall), given to `emit` in two parts (see src/diag/):
    /// what the host knows first, then the device state. Reading the device copies into host
    /// memory, which a stalled driver can hold up (an application thread blocked in a synchronous
    /// copy; every copy under an MPS server whose clients hung), so the
    /// read runs on a thread of its own and is given up after `diag::DEVICE_READ_LIMIT`: the
    /// monitor goes on to the other communicators.
    pub fn stall_dump(self: &Arc<Self>, after: Duration, emit: &mut dyn FnMut(&str)) {
        let Some(r) = self.ready.get() else { return };
        let Ok(_ctx) = CtxGuard::new(r.dev) else { return };
        let Some(ops) = self.stalled_ops(r, after) else { return };
        let net = r.net.as_ref().map_or_else(String::new, |n| format!("\n  cross-host steps (host side): {}", n.describe_host()));
        emit(&format!(
            "OXCCL_DEBUG_DUMP: comm rank {}/{} (CUDA device {}, async state {:?}): its stream has been busy for {after:?} \
             with no new operation. {ops}{net}\n  device state: reading...",
            self.rank,
            self.nranks,
            r.dev.ordinal,
            self.async_state()
        ));
        let me = Arc::clone(self);
        let device = crate::diag::bounded(crate::diag::DEVICE_READ_LIMIT, move || {
            let r = me.ready.get().ok_or_else(|| Error::internal("not ready"))?;
            let _ctx = CtxGuard::new(r.dev)?;
            me.device_state(r)
        });
        let device = match device {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => format!("unavailable: {}", e.msg),
            Err(e) => e.to_string(),
        };
        emit(&format!("OXCCL_DEBUG_DUMP: comm rank {}/{}: device state: {device}", self.rank, self.nranks));
    }

    /// The operations of a stall, if this communicator's stream has been busy for `after` with
    /// no new operation (once per stall). The device's context is current (caller).
    fn stalled_ops(&self, r: &Ready, after: Duration) -> Option<String> {
        let mut ls = r.launch.try_lock_for(Duration::from_millis(100))?;
        ls.last_stream?;
        // A launch captured into a graph has nothing running to query: no dump then.
        if ls.done.mark().capture().is_some() {
            return None;
        }
        // The communicator's last launch has not finished.
        let busy = matches!(ls.done.query(), Ok(false));
        let now = Instant::now();
        if !ls.progress.stalled(busy, now, after) {
            return None;
        }
        Some(ls.progress.describe(now))
    }

    /// LL flags and semaphore counters per peer, copied through a private non-blocking stream
    /// (kernels may be spinning meanwhile): block 0's, and where blocks differ every block's, as
    /// runs of equal values. A kernel whose blocks each bump their flags on exit and whose flags
    /// differ by block has run part of its grid: the rest never got onto the GPU, or waits.
    fn device_state(&self, r: &Ready) -> Result<String> {
        use crate::device_abi::{DevComm, OX_MAX_BLOCKS, OX_MAX_RANKS};
        if r.dev_comm == 0 {
            return self.net_state(r);
        }
        let mut stream: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current (caller).
        crate::gpu::check(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate")?;
        let copy = |dst: *mut u8, src: u64, n: usize| -> Result<()> {
            // SAFETY: `src` is inside this communicator's buffers; dst is a local of n bytes.
            crate::gpu::check(unsafe { cu::cuMemcpyDtoHAsync_v2(dst.cast(), src, n, stream) }, "cuMemcpyDtoHAsync")?;
            // SAFETY: our stream.
            crate::gpu::check(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize")
        };
        let mut out = String::new();
        let res = (|| -> Result<()> {
            // SAFETY: DevComm is plain old data; every bit pattern is a valid value.
            let mut dc: DevComm = unsafe { std::mem::zeroed() };
            copy((&mut dc as *mut DevComm).cast(), r.dev_comm, std::mem::size_of::<DevComm>())?;
            let n = self.nranks.min(OX_MAX_RANKS);
            // Whole tables, `[block][peer]`.
            let cells = OX_MAX_BLOCKS * OX_MAX_RANKS;
            let (mut flags, mut expected, mut inbound) = (vec![0u32; cells], vec![0u64; cells], vec![0u64; cells]);
            let mut pending = [0u32; OX_MAX_RANKS];
            let mut acks = [0u32; OX_MAX_RANKS];
            copy(flags.as_mut_ptr().cast(), dc.ll_flags, 4 * cells)?;
            copy(pending.as_mut_ptr().cast(), dc.ll_pending, 4 * n)?;
            copy(acks.as_mut_ptr().cast(), dc.ll_ack[self.rank], 4 * n)?;
            copy(expected.as_mut_ptr().cast(), dc.sem_expected, 8 * cells)?;
            copy(inbound.as_mut_ptr().cast(), dc.sem_inbound[self.rank], 8 * cells)?;
            for p in (0..n).filter(|&p| p != self.rank) {
                let _ = write!(
                    out,
                    "\n    peer {p}: LL flag {} (last one-way send {}, its ack {}); semaphore received {} of {} expected",
                    flags[p], pending[p], acks[p], inbound[p], expected[p]
                );
                let (f, i, e) = (block_column(&flags, p), block_column(&inbound, p), block_column(&expected, p));
                if [&f, &i, &e].iter().any(|c| c.iter().any(|&v| v != c[0])) {
                    let _ = write!(out, "\n      by block: LL flag {}; semaphore received {}; expected {}", crate::diag::runs(&f), crate::diag::runs(&i), crate::diag::runs(&e));
                }
            }
            Ok(())
        })();
        // SAFETY: our stream; nothing is queued on it any more.
        unsafe { cu::cuStreamDestroy_v2(stream) };
        res.map(|()| out)
    }
}

/// Peer `p`'s values of a `[block][peer]` table, block by block.
fn block_column<T: Copy + Into<u64>>(table: &[T], p: usize) -> Vec<u64> {
    use crate::device_abi::{OX_MAX_BLOCKS, OX_MAX_RANKS};
    (0..OX_MAX_BLOCKS).map(|b| table[b * OX_MAX_RANKS + p].into()).collect()
}

impl Comm {
    /// A communicator spanning hosts: its cross-host steps (net::Net::describe), then the
    /// host-local communicator's LL flags and semaphores.
    fn net_state(&self, r: &Ready) -> Result<String> {
        let Some(net) = r.net.as_ref() else { return Ok(String::from(" (none: no peers)")) };
        let mut stream: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the device's context is current (caller).
        crate::gpu::check(unsafe { cu::cuStreamCreate(&mut stream, 1) }, "cuStreamCreate")?;
        let read = |src: u64| -> Result<u64> {
            let mut v = 0u64;
            // SAFETY: `src` is a counter of this communicator's; v is a local of 8 bytes.
            crate::gpu::check(unsafe { cu::cuMemcpyDtoHAsync_v2((&mut v as *mut u64).cast(), src, 8, stream) }, "cuMemcpyDtoHAsync")?;
            // SAFETY: our stream.
            crate::gpu::check(unsafe { cu::cuStreamSynchronize(stream) }, "cuStreamSynchronize")?;
            Ok(v)
        };
        let mut out = format!("\n    {}", net.describe(&read));
        // SAFETY: our stream; nothing is queued on it any more.
        unsafe { cu::cuStreamDestroy_v2(stream) };
        let local = net.local();
        if let Some(lr) = local.ready.get().filter(|_| local.nranks > 1) {
            let state = local.device_state(lr).unwrap_or_else(|e| format!(" unavailable: {}", e.msg));
            let _ = write!(out, "\n    host-local communicator, rank {}/{}:{}", local.rank, local.nranks, state.replace("\n    ", "\n      "));
        }
        Ok(out)
    }
}
