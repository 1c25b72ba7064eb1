//! Buffer registration (ncclCommRegister / ncclCommDeregister) used zero-copy by peers.
//!
//! A registration is local, as in NCCL: no peer takes part in the call. The registering rank
//! tells every peer of its host about the allocation holding the buffer (a CUDA IPC handle, a
//! cuMem POSIX file descriptor, or the pointer itself within one process) over a Unix socket;
//! each peer's registration thread (`import`) maps it and enters it in that peer's table, which
//! its kernels read. When an exchange launch receives a put stream into a registered buffer, the
//! receiver offers the buffer to the sender and the sender, if it has mapped it by then, writes
//! the stream straight into it (kernels/colls/direct.cuh). A peer that has not mapped it yet simply
//! declines, so nothing waits on the registration thread.
//!
//! A registration's generation (`gen`, never reused within a communicator) names it across
//! ranks; its slot in a peer's table is `gen % OX_REG_SLOTS`, chosen so that no two live
//! registrations share one.

pub(crate) mod export;
mod import;
mod table;
pub mod uds;
pub mod wire;

pub use table::Table;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::device_abi::OX_REG_SLOTS;
use crate::error::{Error, Result};
use crate::gpu::Device;
use crate::log::Subsys;
use crate::bootstrap::topo::PeerInfo;

/// Handles are unique across communicators, so one used with the wrong communicator is caught.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// One buffer this rank registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    /// The handle ncclCommRegister returned.
    pub handle: u64,
    /// The buffer's device address.
    pub ptr: u64,
    /// Its length in bytes.
    pub size: u64,
    /// ncclCommRegister calls on exactly this buffer not yet matched by a deregistration.
    pub refs: u32,
    /// Announced to the peers under this generation; 0 if it could not be shared.
    pub gen: u64,
}

/// The registrations of one rank: a pure bookkeeping structure (tested on the CPU).
#[derive(Debug, Default)]
pub struct Book {
    regs: Vec<Reg>,
    next_gen: u64,
}

impl Book {
    /// The registration of exactly [ptr, ptr + size), if live (NCCL hands out one handle per
    /// buffer and counts references).
    pub fn find_same(&mut self, ptr: u64, size: u64) -> Option<&mut Reg> {
        self.regs.iter_mut().find(|r| r.ptr == ptr && r.size == size)
    }

    /// A generation for a new shared registration whose slot no live one uses, or None if every
    /// slot is taken.
    pub fn next_gen(&mut self) -> Option<u64> {
        for _ in 0..OX_REG_SLOTS {
            self.next_gen += 1;
            let g = self.next_gen;
            let slot = g % OX_REG_SLOTS as u64;
            if !self.regs.iter().any(|r| r.gen != 0 && r.gen % OX_REG_SLOTS as u64 == slot) {
                return Some(g);
            }
        }
        None
    }

    /// Adds a registration.
    pub fn insert(&mut self, r: Reg) {
        self.regs.push(r);
    }

    /// Drops one reference to `handle`: Ok(Some(reg)) when it was the last.
    pub fn release(&mut self, handle: u64) -> Result<Option<Reg>> {
        let i = self
            .regs
            .iter()
            .position(|r| r.handle == handle)
            .ok_or_else(|| Error::invalid_usage(format!("unknown registration handle {handle:#x} (not registered with this communicator, or already deregistered)")))?;
        self.regs[i].refs -= 1;
        Ok((self.regs[i].refs == 0).then(|| self.regs.swap_remove(i)))
    }

    /// Generation of a shared registration holding all of [ptr, ptr + bytes).
    pub fn covering(&self, ptr: u64, bytes: u64) -> Option<u64> {
        self.regs
            .iter()
            .find(|r| r.gen != 0 && ptr >= r.ptr && bytes <= r.size && ptr - r.ptr <= r.size - bytes)
            .map(|r| r.gen)
    }

    /// Whether any live registration was announced to the peers.
    pub fn any_shared(&self) -> bool {
        self.regs.iter().any(|r| r.gen != 0)
    }
}

/// Per-peer connection for announcements.
enum Link {
    NotYet,
    Open(std::os::fd::OwnedFd),
    /// Could not connect or a send failed: that peer gets no more announcements.
    Broken,
}

/// One rank's registrations and its registration thread.
pub struct Registry {
    /// Registrations are offered to peers (MemoryChannels connect every rank).
    share: bool,
    me: usize,
    dev: &'static Device,
    peers: Vec<PeerInfo>,
    /// Socket names are `{prefix}-{rank}`.
    prefix: String,
    /// `comm_key` of the communicator (names its other local sockets too).
    pub key: u64,
    book: Mutex<Book>,
    links: Mutex<Vec<Link>>,
    /// Any shared registration live: enqueue skips the lookup when not.
    any_shared: AtomicBool,
    importer: Mutex<Option<import::Importer>>,
}

/// How long a registration waits for a peer's socket to take a message.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

impl Registry {
    /// Binds this rank's socket and starts its registration thread (before the init barrier,
    /// so every peer's socket exists once any rank can register). `comm_key` is the same on
    /// every rank of the communicator and differs between communicators.
    ///
    /// Without a `table` (no MemoryChannels: ranks on several hosts, or a transport that keeps
    /// off peer memory) registrations are bookkeeping only.
    pub fn start(dev: &'static Device, me: usize, peers: &[PeerInfo], comm_key: u64, table: Option<Arc<Table>>) -> Registry {
        let prefix = format!("oxccl-reg-{comm_key:016x}");
        let share = table.is_some() && peers.len() > 1;
        let importer = match table.filter(|_| share) {
            None => None,
            Some(table) => match import::Importer::start(Some(dev), me, peers.len(), &format!("{prefix}-{me}"), table) {
                Ok(i) => Some(i),
                Err(e) => {
                    nccl_info!(Subsys::Reg, "rank {me}: no registration thread ({}); peers will not write into this rank's registered buffers", e.msg);
                    None
                }
            },
        };
        Registry {
            share,
            me,
            dev,
            peers: peers.to_vec(),
            prefix,
            key: comm_key,
            book: Mutex::new(Book::default()),
            links: Mutex::new((0..peers.len()).map(|_| Link::NotYet).collect()),
            any_shared: AtomicBool::new(false),
            importer: Mutex::new(importer),
        }
    }

    /// ncclCommRegister: a handle for [ptr, ptr + size); the same handle again for the same
    /// buffer (reference-counted).
    pub fn register(&self, ptr: u64, size: u64) -> Result<u64> {
        let mut book = self.book.lock();
        if let Some(r) = book.find_same(ptr, size) {
            r.refs += 1;
            return Ok(r.handle);
        }
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed) << 4;
        let mut gen = 0;
        if self.share && size > 0 {
            match export::describe(self.dev, ptr, size) {
                Ok(Some(alloc)) => {
                    if let Some(g) = book.next_gen() {
                        if self.announce(g, &alloc) {
                            gen = g;
                        }
                    } else {
                        nccl_info!(Subsys::Reg, "rank {}: {OX_REG_SLOTS} registrations live; {ptr:#x} is registered but not shared", self.me);
                    }
                }
                Ok(None) => nccl_info!(Subsys::Reg, "rank {}: buffer {ptr:#x} (+{size}) cannot be shared with peers; registered locally", self.me),
                Err(e) => nccl_info!(Subsys::Reg, "rank {}: buffer {ptr:#x} (+{size}): {}; registered locally", self.me, e.msg),
            }
        }
        book.insert(Reg { handle, ptr, size, refs: 1, gen });
        if gen != 0 {
            self.any_shared.store(true, Ordering::Release);
        }
        nccl_info!(Subsys::Reg, "rank {}: registered {ptr:#x} (+{size} bytes) as handle {handle:#x}, generation {gen}", self.me);
        Ok(handle)
    }

    /// ncclCommDeregister, first half: drops a reference. Returns the generation to retire
    /// (after the caller has waited for the kernels that may still use it), if it was the last.
    pub fn release(&self, handle: u64) -> Result<Option<u64>> {
        let mut book = self.book.lock();
        let gone = book.release(handle)?;
        if !book.any_shared() {
            self.any_shared.store(false, Ordering::Release);
        }
        Ok(gone.map(|r| r.gen).filter(|&g| g != 0))
    }

    /// ncclCommDeregister, second half: peers forget and unmap generation `gen`.
    pub fn retire(&self, gen: u64) {
        let msg = wire::Msg::dead(self.me as u32, gen).encode();
        let mut links = self.links.lock();
        for p in 0..self.peers.len() {
            if p != self.me {
                if let Link::Open(s) = &links[p] {
                    if let Err(e) = uds::send(s, &msg, None) {
                        nccl_info!(Subsys::Reg, "rank {}: cannot tell rank {p} of a deregistration: {e}", self.me);
                        links[p] = Link::Broken;
                    }
                }
            }
        }
    }

    /// Any registration is live and shared: only then are offers looked up (one atomic load on
    /// the launch path otherwise).
    pub fn sharing(&self) -> bool {
        self.any_shared.load(Ordering::Acquire)
    }

    /// The generation to offer for a receive into [ptr, ptr + bytes), if registered and shared
    /// (callers ask only while `sharing()`).
    pub fn offer(&self, ptr: u64, bytes: u64) -> Option<u64> {
        self.book.lock().covering(ptr, bytes)
    }

    /// Tells every peer of the host how to map `alloc` as generation `gen`. True if at least one
    /// peer was told (the others never see an offer they could take anyway: they decline).
    fn announce(&self, gen: u64, alloc: &export::Alloc) -> bool {
        let mut links = self.links.lock();
        let mut told = 0;
        for (p, peer) in self.peers.iter().enumerate() {
            if p == self.me || !peer.same_host(&self.peers[self.me]) {
                continue;
            }
            let same_process = peer.same_process(&self.peers[self.me]);
            let Some((kind, fd)) = alloc.share_with(same_process, peer.device) else { continue };
            if matches!(links[p], Link::NotYet) {
                links[p] = match uds::connect(&format!("{}-{p}", self.prefix), SEND_TIMEOUT) {
                    Ok(s) => Link::Open(s),
                    Err(e) => {
                        nccl_info!(Subsys::Reg, "rank {}: no registration socket at rank {p} ({e}); it will not write into this rank's buffers", self.me);
                        Link::Broken
                    }
                };
            }
            let Link::Open(s) = &links[p] else { continue };
            let msg = wire::Msg { kind, rank: self.me as u32, gen, base: alloc.base, size: alloc.size, handle: alloc.ipc };
            match uds::send(s, &msg.encode(), fd) {
                Ok(()) => told += 1,
                Err(e) => {
                    nccl_info!(Subsys::Reg, "rank {}: cannot announce a registration to rank {p}: {e}", self.me);
                    links[p] = Link::Broken;
                }
            }
        }
        told > 0
    }

    /// Stops the registration thread. With `unmap` (the caller waited for this communicator's
    /// kernels) it unmaps every peer buffer it mapped; without, kernels may still write through
    /// the mappings, so they are leaked.
    pub fn close(&self, unmap: bool) {
        if let Some(i) = self.importer.lock().take() {
            i.stop(unmap);
        }
        self.links.lock().clear();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.close(true);
    }
}

/// A key for the communicator's socket names: the same on every rank (from the unique id every
/// rank was given), different for another id.
pub fn comm_key(id: &[u8]) -> u64 {
    // FNV-1a: stable across processes (std's hasher is randomly seeded per process).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in id {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(book: &mut Book, handle: u64, ptr: u64, size: u64) -> u64 {
        let gen = book.next_gen().expect("a free slot");
        book.insert(Reg { handle, ptr, size, refs: 1, gen });
        gen
    }

    #[test]
    fn lookups_cover_whole_ranges_only() {
        let mut b = Book::default();
        let g = reg(&mut b, 16, 0x1000, 0x1000);
        assert_eq!(b.covering(0x1000, 0x1000), Some(g));
        assert_eq!(b.covering(0x1800, 0x800), Some(g));
        assert_eq!(b.covering(0x1800, 0x801), None, "runs past the end");
        assert_eq!(b.covering(0xfff, 2), None, "starts before");
        assert_eq!(b.covering(u64::MAX - 4, 8), None, "no overflow");
        b.insert(Reg { handle: 32, ptr: 0x9000, size: 64, refs: 1, gen: 0 });
        assert_eq!(b.covering(0x9000, 64), None, "not shared: never offered");
    }

    #[test]
    fn references_count_and_handles_are_checked() {
        let mut b = Book::default();
        reg(&mut b, 16, 0x1000, 0x100);
        b.find_same(0x1000, 0x100).unwrap().refs += 1;
        assert!(b.find_same(0x1000, 0x101).is_none(), "another size is another buffer");
        assert_eq!(b.release(16).unwrap(), None, "one reference left");
        assert_eq!(b.release(16).unwrap().map(|r| r.ptr), Some(0x1000));
        assert_eq!(b.release(16).unwrap_err().code, crate::ResultCode::InvalidUsage);
        assert!(b.find_same(0x1000, 0x100).is_none(), "gone after the last reference");
    }

    #[test]
    fn generations_never_share_a_live_slot() {
        let mut b = Book::default();
        let mut live = Vec::new();
        for i in 0..OX_REG_SLOTS as u64 {
            live.push(reg(&mut b, 16 * (i + 1), 0x1000 * (i + 1), 16));
        }
        assert!(b.next_gen().is_none(), "every slot taken");
        // Free one in the middle: the next generation lands exactly in its slot.
        let freed = live[100];
        b.release(16 * 101).unwrap();
        let g = b.next_gen().unwrap();
        assert_eq!(g % OX_REG_SLOTS as u64, freed % OX_REG_SLOTS as u64);
        assert!(g > freed, "generations only grow");
    }

    #[test]
    fn comm_keys_are_stable_and_distinct() {
        assert_eq!(comm_key(b"abc"), comm_key(b"abc"));
        assert_ne!(comm_key(b"abc"), comm_key(b"abd"));
    }
}
