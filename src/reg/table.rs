//! The table of peers' registrations the kernels read (`DevComm::reg_table`).
//!
//! It lives in device memory: a kernel looks an offer up once per block and peer, and reads of
//! host-mapped memory at that rate cost hundreds of microseconds per launch (measured on H200:
//! a 32 MiB send/recv took 596 us instead of 132). The registration thread writes an entry with
//! two stream-ordered copies, fields first and the generation second, so a kernel that reads a
//! generation equal to the one offered (acquire) finds that registration's fields.
//! `OXCCL_REG_TABLE=host` keeps it in host-mapped memory instead (for measuring).

use crate::device_abi::RegEntry;
use crate::error::Result;
use crate::gpu::stream::OwnedStream;
use crate::gpu::{check, cu, CtxGuard, Device, DeviceBuffer, HostMapped};

/// The registration table kernels read (`RegEntry` per slot and peer): in pinned host memory
/// (OXCCL_REG_TABLE=host), or in device memory written through a staging word and a stream.
pub enum Table {
    /// Pinned, device-mapped host memory.
    Host(HostMapped),
    /// Device memory.
    Device {
        /// The table.
        buf: DeviceBuffer,
        /// Host words an entry is staged in before its copy.
        staging: HostMapped,
        /// The stream those copies run on, made at first use.
        stream: parking_lot::Mutex<Option<OwnedStream>>,
    },
}

impl Table {
    /// A zeroed table of `bytes` on `dev`.
    pub fn new(dev: &'static Device, bytes: usize) -> Result<Table> {
        if crate::config::env("OXCCL_REG_TABLE").as_deref() == Some("host") {
            return Ok(Table::Host(HostMapped::zeroed(dev, bytes)?));
        }
        Ok(Table::Device {
            buf: DeviceBuffer::zeroed(dev, bytes)?,
            staging: HostMapped::zeroed(dev, 64)?,
            stream: parking_lot::Mutex::new(None),
        })
    }

    /// The table's address as kernels see it.
    pub fn dev_ptr(&self) -> u64 {
        match self {
            Table::Host(h) => h.dev_ptr,
            Table::Device { buf, .. } => buf.ptr,
        }
    }

    /// Bytes of device memory it holds (0 in host memory).
    pub fn device_bytes(&self) -> u64 {
        match self {
            Table::Host(_) => 0,
            Table::Device { buf, .. } => buf.size as u64,
        }
    }
}

impl super::import::Sink for Table {
    /// Enters `e` at byte offset `off`: invalidates the slot, writes the fields, then the
    /// generation. Called by the registration thread only.
    fn publish(&self, off: usize, e: RegEntry) -> Result<()> {
        match self {
            Table::Host(h) => {
                h.store_u64(off, 0);
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                h.store_u64(off + 8, e.base);
                h.store_u64(off + 16, e.size);
                h.store_u64(off + 24, e.local);
                // x86 keeps stores in order; the fence keeps the compiler from reordering.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                h.store_u64(off, e.gen);
                Ok(())
            }
            Table::Device { .. } => {
                self.copy(off, &[0])?;
                self.copy(off + 8, &[e.base, e.size, e.local])?;
                self.copy(off, &[e.gen])
            }
        }
    }

    /// Clears the slot at `off` if it still holds generation `gen`.
    fn retire(&self, off: usize, gen: u64) -> Result<()> {
        match self {
            Table::Host(h) => {
                if h.load_u64(off) == gen {
                    h.store_u64(off, 0);
                }
                Ok(())
            }
            // A later registration in this slot is published only after this message (in order on
            // the same connection), so clearing unconditionally never hides a newer one.
            Table::Device { .. } => self.copy(off, &[0]),
        }
    }
}

impl Table {
    /// Device table: copies `words` to byte offset `off` and waits for the copy (a copy engine
    /// from pinned memory on a stream of our own: it never queues behind the application's work).
    fn copy(&self, off: usize, words: &[u64]) -> Result<()> {
        let Table::Device { buf, staging, stream } = self else { return Ok(()) };
        assert!(off + words.len() * 8 <= buf.size && words.len() * 8 <= staging.size);
        let _g = CtxGuard::new(buf.device())?;
        let mut s = stream.lock();
        if s.is_none() {
            *s = Some(OwnedStream::new(buf.device())?);
        }
        let st = s.as_ref().expect("created above");
        for (i, w) in words.iter().enumerate() {
            staging.store_u64(i * 8, *w);
        }
        // SAFETY: source: `words.len() * 8` bytes of pinned staging; destination inside the
        // table (asserted). The stream is synchronised before the staging is reused.
        check(
            unsafe { cu::cuMemcpyHtoDAsync_v2(buf.ptr + off as u64, staging.host.cast(), words.len() * 8, st.raw) },
            "cuMemcpyHtoDAsync (registration table)",
        )?;
        st.sync("cuStreamSynchronize (registration table)")
    }
}
