//! Symmetric memory for NCCL's device API: a flat virtual address space in which every rank of a
//! communicator sees every peer's copy of a window at a fixed stride, as NCCL 2.28 lays it out.
//!
//! Each rank reserves `n * big` bytes of virtual addresses (`n` ranks, `big` the largest GPU's
//! memory rounded up to 4 GiB, as NCCL's default window stride). Slot `r` of that range holds
//! rank `r`'s memory: a window registered at offset `off` of the big space is mapped, on every
//! rank, at `flat + r * big + off` for each `r`, so a kernel reaches peer `r`'s copy of any window
//! by arithmetic alone (`ncclGetLsaPointer`). Mapping is collective: the ranks agree on the offset
//! (space::first_fit), pass each other their allocation's POSIX file descriptor over a local
//! socket, and each maps all of them.
//!
//! Only communicators whose ranks all reach each other's GPU memory (one host, peer access on)
//! have symmetric memory, as in NCCL (`symmetricSupport`); and only cuMem allocations with a
//! POSIX file descriptor handle (`ncclMemAlloc`) can be mapped this way.

pub mod abi;
pub mod abi232;
pub mod space;

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use abi::{ncclDevCommWindowTable, TableEntry, TABLE_ENTRIES};
use abi232::{ncclWindow_vidmem, NCCL_LE_ID_INVALID};
use space::{first_fit, Space};

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::gpu::{check, cu, CtxGuard, Device, DeviceBuffer};
use crate::log::Subsys;
use crate::gpu::vmm::location;
use crate::reg::export::{export_fd, import_fd};
use crate::reg::uds;
use crate::bootstrap::topo::PeerInfo;

/// How long a rank waits for its peers' descriptors before it reports the mapping failed.
const FD_TIMEOUT: Duration = Duration::from_secs(30);

/// The LSA team (ranks sharing load/store access) as NCCL computes it: the greatest common divisor
/// of the sizes of the runs of consecutive ranks on one host, so every team has one size and
/// holds consecutive ranks. Returns (size, this rank's index in its team).
pub fn lsa_team(peers: &[PeerInfo], rank: usize) -> (usize, usize) {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut size = 0;
    let mut run = 1;
    for r in 1..peers.len() {
        if peers[r].same_host(&peers[r - 1]) {
            run += 1;
        } else {
            size = gcd(size, run);
            run = 1;
        }
    }
    let size = gcd(size, run).max(1);
    (size, rank % size)
}

/// Why a communicator has no symmetric memory, or None if it has.
pub fn unsupported(one_host_peer_memory: bool) -> Option<String> {
    if !one_host_peer_memory {
        return Some("its ranks do not all reach each other's GPU memory (several hosts, or peer memory turned off)".into());
    }
    if !crate::config::env_bool("NCCL_WIN_ENABLE", true) {
        return Some("NCCL_WIN_ENABLE=0".into());
    }
    if !crate::config::env_bool("NCCL_CUMEM_ENABLE", true) {
        return Some("NCCL_CUMEM_ENABLE=0".into());
    }
    None
}

/// Recommended granularity of pinned device allocations with a POSIX file descriptor handle.
fn granularity(dev: &Device) -> Result<u64> {
    let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location(dev.ordinal);
    prop.requestedHandleTypes = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    let mut gran = 0usize;
    // SAFETY: out-pointer to a local, prop fully initialised.
    check(
        unsafe { cu::cuMemGetAllocationGranularity(&mut gran, &prop, cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) },
        "cuMemGetAllocationGranularity",
    )?;
    Ok(gran.max(1) as u64)
}

/// A plain-old-data struct's bytes (the ABI structs spell out their padding).
fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is Copy plain data with explicit padding fields; reading its bytes is sound.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// What this rank brings to a collective mapping: a cuMem allocation it may share.
pub struct Local {
    /// Bytes of the allocation (mapped whole).
    pub size: u64,
    /// Where the window starts inside it.
    pub at: u64,
    /// A reference to the allocation, released once mapped.
    handle: cu::CUmemGenericAllocationHandle,
    fd: OwnedFd,
}

impl Drop for Local {
    fn drop(&mut self) {
        // SAFETY: the reference taken by describe/create, released once.
        unsafe { cu::cuMemRelease(self.handle) };
    }
}

impl Local {
    /// The cuMem allocation holding [ptr, ptr + size), or why peers cannot map it.
    pub fn describe(dev: &'static Device, ptr: u64, size: u64) -> Result<std::result::Result<Local, String>> {
        let _g = CtxGuard::new(dev)?;
        let (mut base, mut asize): (cu::CUdeviceptr, usize) = (0, 0);
        // SAFETY: out-pointers to locals; the driver validates ptr.
        if unsafe { cu::cuMemGetAddressRange_v2(&mut base, &mut asize, ptr) } != cu::CUresult::CUDA_SUCCESS {
            return Ok(Err(format!("{ptr:#x} is not device memory")));
        }
        let asize = asize as u64;
        if ptr - base > asize || size > asize - (ptr - base) {
            return Ok(Err(format!("[{ptr:#x}, +{size}) spans more than one allocation")));
        }
        let mut h: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local; base is the start of a mapped allocation.
        if unsafe { cu::cuMemRetainAllocationHandle(&mut h, base as *mut std::ffi::c_void) } != cu::CUresult::CUDA_SUCCESS {
            return Ok(Err(format!("{ptr:#x} is not cuMem memory (allocate windows with ncclMemAlloc)")));
        }
        let fd = match export_fd(h) {
            Some(fd) => fd,
            None => {
                // SAFETY: drops the reference retained above.
                unsafe { cu::cuMemRelease(h) };
                return Ok(Err(format!("{ptr:#x}: its allocation has no POSIX file descriptor handle (allocate windows with ncclMemAlloc)")));
            }
        };
        Ok(Ok(Local { size: asize, at: ptr - base, handle: h, fd }))
    }

    /// A fresh allocation of `size` bytes (a multiple of the granularity) for the device API's
    /// own buffers.
    fn create(dev: &'static Device, size: u64) -> Result<Local> {
        let _g = CtxGuard::new(dev)?;
        let mut prop: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location = location(dev.ordinal);
        prop.requestedHandleTypes = cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        let mut h: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local, prop initialised.
        check(unsafe { cu::cuMemCreate(&mut h, size as usize, &prop, 0) }, "cuMemCreate")?;
        match export_fd(h) {
            Some(fd) => Ok(Local { size, at: 0, handle: h, fd }),
            None => {
                // SAFETY: created above, released once.
                unsafe { cu::cuMemRelease(h) };
                Err(Error::cuda("cuMemExportToShareableHandle failed for the device communicator's buffers"))
            }
        }
    }
}


/// Memory mapped at one offset of every rank's slot.
pub struct Mapping {
    /// Offset of the mapping in each rank's slot of the flat space, in bytes.
    pub off: u64,
    maps: Vec<(u64, usize)>,
}

/// A window in symmetric memory: its mapping and the `ncclWindow_vidmem` kernels read.
pub struct SymWindow {
    mapping: Mapping,
    /// Device copy of `desc`: the address an `ncclWindow_t` holds.
    pub vidmem: DeviceBuffer,
    /// Host copy of the window's descriptor (`vidmem` holds the same bytes on the device).
    pub desc: ncclWindow_vidmem,
    /// (table block, entry) of its `ncclDevCommWindowTable` entry.
    entry: (usize, usize),
}

impl SymWindow {
    /// This rank's own copy of the window in the flat space.
    pub fn local(&self, me: usize) -> u64 {
        self.desc.lsaFlatBase + ((me as u64 * self.desc.stride4G as u64) << 32)
    }
}

/// One block of the device window table and its host copy.
struct Table {
    buf: DeviceBuffer,
    host: ncclDevCommWindowTable,
}

/// A communicator's symmetric memory.
pub struct SymMem {
    dev: &'static Device,
    key: u64,
    world_rank: usize,
    me: usize,
    n: usize,
    /// Bytes of each rank's slot of the flat space (the window stride): a multiple of 4 GiB.
    pub big: u64,
    gran: u64,
    flat: u64,
    space: Space,
    seq: u64,
    tables: Vec<Table>,
}

impl SymMem {
    /// Collective over `bs`: agrees on the stride and reserves the flat space. `key` names the
    /// communicator's local sockets (the same on every rank).
    pub fn init(dev: &'static Device, bs: &Bootstrap, key: u64, world_rank: usize, nranks: usize) -> Result<SymMem> {
        let _g = CtxGuard::new(dev)?;
        let mut total = 0usize;
        // SAFETY: out-pointer to a local.
        check(unsafe { cu::cuDeviceTotalMem_v2(&mut total, dev.cu) }, "cuDeviceTotalMem")?;
        let all = bs.all_gather(&(total as u64).to_le_bytes())?;
        let most = all.iter().filter_map(|b| b.as_slice().try_into().ok().map(u64::from_le_bytes)).max().unwrap_or(total as u64);
        let big = crate::config::env("NCCL_WIN_STRIDE").and_then(|v| v.trim().parse::<u64>().ok()).filter(|&s| s > 1).unwrap_or(most);
        let big = big.max(1).div_ceil(1 << 32) << 32;
        let gran = granularity(dev)?;
        let mut flat: cu::CUdeviceptr = 0;
        let span = big as usize * nranks;
        // SAFETY: out-pointer to a local; reserves addresses only.
        check(unsafe { cu::cuMemAddressReserve(&mut flat, span, gran as usize, 0, 0) }, "cuMemAddressReserve (symmetric memory)")?;
        nccl_info!(Subsys::Reg, "rank {world_rank}: symmetric memory: {} GiB a rank, flat space at {flat:#x}", big >> 30);
        Ok(SymMem { dev, key, world_rank, me: world_rank, n: nranks, big, gran, flat, space: Space::default(), seq: 0, tables: Vec::new() })
    }

    /// The recommended cuMem allocation granularity, in bytes: symmetric mappings are sized and
    /// placed in multiples of it.
    pub fn granularity(&self) -> u64 {
        self.gran
    }

    /// This rank's index in the LSA team (its slot of the flat space).
    pub fn lsa_rank(&self) -> usize {
        self.me
    }

    fn socket_name(&self, seq: u64, rank: usize) -> String {
        format!("oxccl-sym-{:016x}-{seq}-{rank}", self.key)
    }

    /// Collective: maps every rank's `local` at one offset of every rank's slot. Ok(Err) when some
    /// rank has nothing it can share (every rank gets the same answer).
    pub fn map_all(&mut self, bs: &Bootstrap, local: std::result::Result<Local, String>) -> Result<std::result::Result<Mapping, String>> {
        self.seq += 1;
        let seq = self.seq;
        let listener = match &local {
            Ok(_) => match uds::listen(&self.socket_name(seq, self.world_rank)) {
                Ok(l) => Some(l),
                Err(e) => return self.refuse(bs, format!("no local socket ({e})")),
            },
            Err(_) => None,
        };
        let local = match local {
            Ok(l) => l,
            Err(why) => return self.refuse(bs, why),
        };
        // [1][size][at][used ranges]: every rank can take part.
        let mut msg = vec![1u8];
        msg.extend_from_slice(&local.size.to_le_bytes());
        msg.extend_from_slice(&local.at.to_le_bytes());
        msg.extend_from_slice(&self.space.encode());
        let all = bs.all_gather(&msg)?;
        let mut sizes = Vec::with_capacity(all.len());
        let mut ats = Vec::with_capacity(all.len());
        let mut used = Vec::with_capacity(all.len());
        let mut refused = Vec::new();
        for (r, m) in all.iter().enumerate() {
            match m.split_first() {
                Some((1, rest)) if rest.len() >= 16 => {
                    sizes.push(u64::from_le_bytes(rest[..8].try_into().unwrap_or_default()));
                    ats.push(u64::from_le_bytes(rest[8..16].try_into().unwrap_or_default()));
                    used.push(Space::decode(&rest[16..]).ok_or_else(|| Error::system(format!("symmetric memory: rank {r} sent a bad message")))?);
                }
                Some((0, why)) => refused.push(format!("rank {r}: {}", String::from_utf8_lossy(why))),
                _ => return Err(Error::system(format!("symmetric memory: rank {r} sent a bad message"))),
            }
        }
        if !refused.is_empty() {
            return Ok(Err(refused.join("; ")));
        }
        if ats.iter().any(|&a| a != ats[0]) {
            let list: Vec<String> = ats.iter().enumerate().map(|(r, a)| format!("rank {r}: {a}")).collect();
            return Ok(Err(format!("the buffers start at different offsets in their allocations ({})", list.join(", "))));
        }
        let len = sizes.iter().copied().max().unwrap_or(0).div_ceil(self.gran) * self.gran;
        let off = first_fit(&used, len, self.gran, self.big)
            .ok_or_else(|| Error::system(format!("symmetric memory: no room for {len} more bytes in the {} GiB window space", self.big >> 30)))?;
        let result = self.exchange_and_map(seq, listener, &local, &sizes, off);
        drop(local);
        // Everyone's outcome: a rank that failed makes every rank fail.
        let ok = result.is_ok();
        let oks = bs.all_gather(&[ok as u8])?;
        match result {
            Ok(maps) if oks.iter().all(|b| b.first() == Some(&1)) => {
                self.space.insert(off, len);
                Ok(Ok(Mapping { off, maps }))
            }
            Ok(maps) => {
                self.unmap(&maps);
                let bad: Vec<String> = oks.iter().enumerate().filter(|(_, b)| b.first() != Some(&1)).map(|(r, _)| r.to_string()).collect();
                Err(Error::system(format!("symmetric memory: mapping failed on rank(s) {}", bad.join(", "))))
            }
            Err(e) => Err(e),
        }
    }

    /// This rank cannot take part: tells the others why, then reports everyone's reasons.
    fn refuse(&mut self, bs: &Bootstrap, why: String) -> Result<std::result::Result<Mapping, String>> {
        let mut msg = vec![0u8];
        msg.extend_from_slice(why.as_bytes());
        let all = bs.all_gather(&msg)?;
        let reasons: Vec<String> =
            all.iter().enumerate().filter(|(_, m)| m.first() == Some(&0)).map(|(r, m)| format!("rank {r}: {}", String::from_utf8_lossy(&m[1..]))).collect();
        // Every rank sees this rank's refusal in the same gather, so none goes on to map.
        Ok(Err(reasons.join("; ")))
    }

    fn exchange_and_map(&self, seq: u64, listener: Option<OwnedFd>, local: &Local, sizes: &[u64], off: u64) -> Result<Vec<(u64, usize)>> {
        let listener = listener.ok_or_else(|| Error::internal("symmetric memory: no listener"))?;
        // The peers' listeners exist: bound before the gather above.
        let peers: Vec<usize> = (0..self.n).filter(|&r| r != self.me).collect();
        let mut fds: Vec<Option<OwnedFd>> = (0..self.n).map(|_| None).collect();
        for (r, fd) in uds::exchange_fds(&listener, |r| self.socket_name(seq, r), self.me, Some(local.fd.as_raw_fd()), &peers, &peers, FD_TIMEOUT, "symmetric memory")? {
            fds[r] = Some(fd);
        }
        let _g = CtxGuard::new(self.dev)?;
        let mut maps = Vec::with_capacity(self.n);
        for r in 0..self.n {
            let size = sizes[r] as usize;
            let addr = self.flat + r as u64 * self.big + off;
            let handle = if r == self.me {
                local.handle
            } else {
                let fd = fds[r].as_ref().ok_or_else(|| Error::internal("symmetric memory: descriptor missing"))?;
                match import_fd(fd) {
                    Ok(h) => h,
                    Err(e) => {
                        self.unmap(&maps);
                        return Err(e);
                    }
                }
            };
            let desc = cu::CUmemAccessDesc { location: location(self.dev.ordinal), flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
            // SAFETY: addr..addr+size lies in this rank's reservation (off + size <= big by
            // first_fit) and is unmapped; the handle covers at least `size` bytes.
            let mapped = check(unsafe { cu::cuMemMap(addr, size, 0, handle, 0) }, "cuMemMap (symmetric memory)");
            let result = mapped.and_then(|_| {
                maps.push((addr, size));
                // SAFETY: the range was just mapped.
                check(unsafe { cu::cuMemSetAccess(addr, size, &desc, 1) }, "cuMemSetAccess (symmetric memory)")
            });
            if r != self.me {
                // SAFETY: the imported reference; a mapping keeps the memory alive on its own.
                unsafe { cu::cuMemRelease(handle) };
            }
            if let Err(e) = result {
                self.unmap(&maps);
                return Err(e.context(format!("mapping rank {r}'s memory")));
            }
        }
        Ok(maps)
    }

    fn unmap(&self, maps: &[(u64, usize)]) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            for &(a, s) in maps {
                // SAFETY: mapped by exchange_and_map; no kernel uses it any more (the caller's
                // promise on deregistration, as with NCCL).
                unsafe { cu::cuMemUnmap(a, s) };
            }
        }
    }

    /// Makes a window of `mapping` (its start `at` bytes into it), registered with `flags`
    /// (NCCL_WIN_*), entered in the window table under the caller's address range
    /// [user_base, +user_size); user_base 0 means this rank's copy in the flat space.
    pub fn window(&mut self, mapping: Mapping, at: u64, user_base: u64, user_size: u64, flags: i32) -> Result<SymWindow> {
        let base = self.flat + mapping.off + at;
        let desc = descriptor(base, self.me, self.world_rank, self.big, mapping.off + at, at, flags);
        let vidmem = match DeviceBuffer::zeroed(self.dev, std::mem::size_of::<ncclWindow_vidmem>()).and_then(|b| b.write(0, bytes_of(&desc)).map(|_| b)) {
            Ok(b) => b,
            Err(e) => {
                self.release_mapping(mapping);
                return Err(e);
            }
        };
        let user_base = if user_base == 0 { base + self.me as u64 * self.big } else { user_base };
        let entry = match self.table_insert(TableEntry { base: user_base, size: user_size, window: vidmem.ptr }) {
            Ok(e) => e,
            Err(e) => {
                self.release_mapping(mapping);
                return Err(e);
            }
        };
        Ok(SymWindow { mapping, vidmem, desc, entry })
    }

    /// The first block of the window table (created on first need).
    pub fn table_head(&mut self) -> Result<u64> {
        if self.tables.is_empty() {
            self.grow_table()?;
        }
        Ok(self.tables[0].buf.ptr)
    }

    fn grow_table(&mut self) -> Result<()> {
        let host = ncclDevCommWindowTable { entries: [TableEntry::default(); TABLE_ENTRIES], next: 0 };
        let buf = DeviceBuffer::zeroed(self.dev, std::mem::size_of::<ncclDevCommWindowTable>())?;
        if let Some(last) = self.tables.last_mut() {
            last.host.next = buf.ptr;
            last.buf.write(std::mem::offset_of!(ncclDevCommWindowTable, next), &buf.ptr.to_le_bytes())?;
        }
        self.tables.push(Table { buf, host });
        Ok(())
    }

    fn table_insert(&mut self, e: TableEntry) -> Result<(usize, usize)> {
        let free = self.tables.iter().enumerate().find_map(|(b, t)| t.host.entries.iter().position(|x| x.window == 0).map(|i| (b, i)));
        let (b, i) = match free {
            Some(p) => p,
            None => {
                self.grow_table()?;
                (self.tables.len() - 1, 0)
            }
        };
        let t = &mut self.tables[b];
        t.buf.write(i * std::mem::size_of::<TableEntry>(), bytes_of(&e))?;
        t.host.entries[i] = e;
        Ok((b, i))
    }

    fn release_mapping(&mut self, m: Mapping) {
        self.unmap(&m.maps);
        self.space.remove(m.off);
    }

    /// Undoes `window`: its table entry, its mappings and its device descriptor.
    pub fn release(&mut self, w: SymWindow) {
        let (b, i) = w.entry;
        if let Some(t) = self.tables.get_mut(b) {
            t.host.entries[i] = TableEntry::default();
            let _ = t.buf.write(i * std::mem::size_of::<TableEntry>(), bytes_of(&TableEntry::default()));
        }
        self.release_mapping(w.mapping);
        drop(w.vidmem);
    }

    /// Allocates `size` bytes (rounded to the granularity) of fresh memory, mapped symmetrically
    /// (collective), zeroed, as a window whose table entry is this rank's copy.
    pub fn alloc_window(&mut self, bs: &Bootstrap, size: u64) -> Result<SymWindow> {
        let size = size.div_ceil(self.gran) * self.gran;
        let local = Local::create(self.dev, size);
        let local = match local {
            Ok(l) => Ok(l),
            Err(e) => Err(e.msg),
        };
        let mapping = match self.map_all(bs, local)? {
            Ok(m) => m,
            Err(why) => return Err(Error::system(format!("device communicator buffers: {why}"))),
        };
        let own = self.flat + self.me as u64 * self.big + mapping.off;
        let w = self.window(mapping, 0, own, size, 0)?;
        let _g = CtxGuard::new(self.dev)?;
        // Done before the caller's closing barrier, so before any peer's kernel uses it: on the
        // device's copy stream, waited for (cuMemsetD8 could still be running when it returns).
        // SAFETY: own..own+size is this rank's mapping of the fresh allocation.
        self.dev.on_copy_stream(|s| unsafe { cu::cuMemsetD8Async(own, 0, size as usize, s) }, "cuMemsetD8Async (device communicator buffers)")?;
        Ok(w)
    }
}

/// The descriptor of a window whose LSA rank 0 copy starts at `lsa_flat_base`: `off` bytes into
/// each rank's slot of `big` bytes, `at` bytes into its allocation, registered with `flags`. As
/// NCCL 2.32.3's symWindowCreate fills it where there is neither GIN nor CFT: `winFlags` the
/// registration's flags, the CFT team a team of one (`cftFlatRank` 0) and no logical endpoint
/// (`ucLeIdBase` NCCL_LE_ID_INVALID, counted or not), GIN fields zero.
pub fn descriptor(lsa_flat_base: u64, lsa_rank: usize, world_rank: usize, big: u64, off: u64, at: u64, flags: i32) -> ncclWindow_vidmem {
    ncclWindow_vidmem {
        winHost: 0,
        lsaFlatBase: lsa_flat_base,
        lsaRank: lsa_rank as i32,
        worldRank: world_rank as i32,
        stride4G: (big >> 32) as u32,
        mcOffset4K: (off >> 12) as u32,
        ginOffset4K: (at >> 12) as u32,
        winFlags: flags as u32,
        cftFlatRank: 0,
        ucLeIdBase: NCCL_LE_ID_INVALID,
        ..Default::default()
    }
}

impl Drop for SymMem {
    fn drop(&mut self) {
        if let Ok(_g) = CtxGuard::new(self.dev) {
            // SAFETY: reserved in init; every window was released first (the owner's Drop order).
            unsafe { cu::cuMemAddressFree(self.flat, self.big as usize * self.n) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(rank: u32, host: u64) -> PeerInfo {
        PeerInfo { rank, host_hash: host, process: 0, pid: 0, device: 0, cc_major: 9, cc_minor: 0, sm_count: 132, bus_id: [0; 16], paths: 0, machine: 0, cpus: 1, network: 0, gpu: 0, gpu_sms: 132, cta_policy: 0, tuning: 0 }
    }

    /// What kernels compiled against 2.28 (the first 72 bytes) and 2.32 headers read.
    #[test]
    fn descriptors_carry_the_flags_and_no_cft_endpoint() {
        let d = descriptor(1 << 40, 1, 3, 8 << 32, 3 << 21, 4096, 0x5);
        assert_eq!((d.lsaFlatBase, d.lsaRank, d.worldRank, d.stride4G, d.mcOffset4K, d.ginOffset4K), (1 << 40, 1, 3, 8, 3 << 9, 1));
        assert_eq!((d.winFlags, d.cftFlatRank, d.ucLeIdBase, d.numSegments, d.ginMultiSegmentWins), (5, 0, u32::MAX, 0, 0));
        let old = d.v22902();
        assert_eq!((old.lsaFlatBase, old.stride4G, old.mcOffset4K, old._pad), (1 << 40, 8, 3 << 9, 0));
        // The 2.28 prefix is the same bytes but for the padding where 2.32 keeps winFlags.
        let new_bytes = bytes_of(&d);
        let old_bytes = bytes_of(&old);
        assert_eq!(&new_bytes[..36], &old_bytes[..36]);
        assert_eq!(&new_bytes[40..72], &old_bytes[40..72]);
    }

    #[test]
    fn lsa_team_is_the_gcd_of_host_runs() {
        let p = |hosts: &[u64]| hosts.iter().enumerate().map(|(r, &h)| peer(r as u32, h)).collect::<Vec<_>>();
        assert_eq!(lsa_team(&p(&[1, 1, 1, 1]), 2), (4, 2));
        assert_eq!(lsa_team(&p(&[1, 1, 2, 2]), 3), (2, 1));
        assert_eq!(lsa_team(&p(&[1, 1, 1, 1, 2, 2]), 5), (2, 1), "runs of 4 and 2");
        assert_eq!(lsa_team(&p(&[1, 2, 3]), 2), (1, 0));
        assert_eq!(lsa_team(&p(&[7]), 0), (1, 0));
    }
}
