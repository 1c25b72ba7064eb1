//! PortChannel transports: what the proxy uses to carry out a trigger. A transport moves bytes
//! between registered memories (`MemAccess`: device memory through staging copies, or host memory
//! in tests and host-only use) and signals the peer's host-to-device semaphores after the data.

pub mod ce;
pub mod ce_direct;
pub mod cuda;
pub mod hca;
#[cfg(feature = "ib")]
pub mod ib;
pub mod inline;
pub(crate) mod lanetrace;
pub mod link;
pub mod progress;
pub mod select;
pub mod tcp;

use crate::error::{Error, Result};
use parking_lot::Mutex;

/// The memories a transport may touch, by memory id (the ids triggers carry), and the
/// semaphores it may signal, by semaphore id.
pub trait MemAccess: Send + Sync {
    /// Copies `dst.len()` bytes from memory `mem` at `off` into host memory.
    fn read(&self, mem: u16, off: u64, dst: &mut [u8]) -> Result<()>;
    /// Copies `src` into memory `mem` at `off`. Complete when it returns (a later `signal` must
    /// not become visible before these bytes).
    fn write(&self, mem: u16, off: u64, src: &[u8]) -> Result<()>;
    /// Sets semaphore `sem` to `value` (values only grow), after every earlier write.
    fn signal(&self, sem: u16, value: u64) -> Result<()>;
}

/// Host memories and semaphores: for tests, and for transports between host buffers.
#[derive(Default)]
pub struct HostMem {
    /// The memories, indexed by memory id.
    pub mems: Vec<Mutex<Vec<u8>>>,
    /// The semaphores' values, indexed by semaphore id.
    pub sems: Vec<Mutex<u64>>,
}

impl HostMem {
    /// Zeroed memories of `sizes` bytes (ids 0, 1, ...) and `nsems` semaphores at 0.
    pub fn new(sizes: &[usize], nsems: usize) -> HostMem {
        HostMem {
            mems: sizes.iter().map(|&n| Mutex::new(vec![0u8; n])).collect(),
            sems: (0..nsems).map(|_| Mutex::new(0)).collect(),
        }
    }

    fn range(&self, mem: u16, off: u64, len: usize) -> Result<(&Mutex<Vec<u8>>, usize)> {
        let m = self.mems.get(mem as usize).ok_or_else(|| Error::invalid_usage(format!("unknown memory id {mem}")))?;
        let size = m.lock().len();
        let off = usize::try_from(off).ok().filter(|o| o.checked_add(len).is_some_and(|end| end <= size));
        let off = off.ok_or_else(|| Error::invalid_usage(format!("{len} bytes at offset out of range of memory {mem} ({size} bytes)")))?;
        Ok((m, off))
    }
}

impl MemAccess for HostMem {
    fn read(&self, mem: u16, off: u64, dst: &mut [u8]) -> Result<()> {
        let (m, o) = self.range(mem, off, dst.len())?;
        dst.copy_from_slice(&m.lock()[o..o + dst.len()]);
        Ok(())
    }
    fn write(&self, mem: u16, off: u64, src: &[u8]) -> Result<()> {
        let (m, o) = self.range(mem, off, src.len())?;
        m.lock()[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn signal(&self, sem: u16, value: u64) -> Result<()> {
        let s = self.sems.get(sem as usize).ok_or_else(|| Error::invalid_usage(format!("unknown semaphore id {sem}")))?;
        let mut v = s.lock();
        *v = (*v).max(value);
        Ok(())
    }
}
