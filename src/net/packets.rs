//! LL16 packets in a small staged step's arena: the step kernel and the proxy pass the step's
//! data as packets of 8 payload bytes and a 32-bit flag in each 8-byte half (`{d0, flag, d1,
//! flag}`, kernels/prims/packet.cuh), so the data is its own signal.
//!
//! Why: at 2 simulated hosts x 1 a small exchange took about 20 us, against 15.5 for NCCL's
//! AllGather over sockets, and the proxy's part was only 8-10. `scripts/lab/netstep_lab.cu` (in git before 7bcb34d) put
//! the step kernel's own cost at 9.2 us with no transfer at all (H200): 1.4 us of it is the system
//! fence before the trigger (the pre-copies' host writes must be visible first), and 2.5 + 1.4 us
//! the wait for `done` and then the copy out, two PCIe round trips in turn. With packets the
//! trigger needs no fence (the proxy checks each packet's flags before using it), and each thread
//! reads its results' packets directly (one round trip): 5.4 us in the lab.
//!
//! Ordering on the host: the proxy writes the results' packets only after the whole step, its
//! sends' reads of the arena included, and after raising `done`. A kernel that has seen every
//! packet of its results may therefore let the next kernel refill the arena without asking for
//! `done` (kernels/colls/net_step.cu, `issued[2]`). x86 keeps the stores in program order, and each
//! 8-byte half is written by one atomic store, so a reader never sees a flag without its data.
//!
//! The flag is the step's number (the device's count), low 31 bits, with the top bit set so
//! zeroed memory never matches; the kernel sends those bits in the trigger.

use std::sync::atomic::{AtomicU64, Ordering};

use super::plan::Step;
use super::stage::Staged;
use crate::error::{Error, Result};
use crate::log::Subsys;

/// Default payload bytes, per direction, up to which a staged step uses packets. Measured at
/// 2 simulated hosts x 2 (BENCHMARKS.md of 2026-11-26, a205a11): packets took 0.5-1 us off
/// 256 B-1 KB steps but added 1-4 us at 4 KB (Broadcast, Reduce, AllReduce, Send/Recv) and were no
/// better at 2 KB: the GPU's 16-byte stores of twice the payload into host memory take longer than
/// the completion read they save.
pub const DEFAULT_MAX: u64 = 1024;
/// The most OXCCL_NET_PACKETS_MAX may ask: a step this small is copied by one block (the
/// kernel's packet loops also work across blocks, but the host keeps them to one).
const MAX_MAX: u64 = 32 << 10;

/// OXCCL_NET_PACKETS_MAX: payload bytes per direction up to which a staged step passes its data
/// as packets; 0 turns them off. Per rank: only this rank's kernel and proxy see the format.
pub fn max_bytes() -> u64 {
    match crate::config::env("OXCCL_NET_PACKETS_MAX") {
        None => DEFAULT_MAX,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) => {
                let n = n.min(MAX_MAX);
                nccl_info!(Subsys::Net, "OXCCL_NET_PACKETS_MAX set by environment to {n}");
                n
            }
            Err(_) => {
                nccl_warn!("OXCCL_NET_PACKETS_MAX={v}: not a byte count, using {DEFAULT_MAX}");
                DEFAULT_MAX
            }
        },
    }
}

/// One arena range passed as packets: `bytes` of plain data at arena offset `plain` (what the
/// proxy's step reads or writes) and its packets at `packets`. `result`: written by the proxy
/// for the kernel (a post-copy), else by the kernel for the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Byte offset of the plain data in the step's arena.
    pub plain: u64,
    /// Byte offset of the packets in the step's arena (`packet_bytes(bytes)` bytes).
    pub packets: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// True for a result (proxy to kernel), false for a kernel's input to the proxy.
    pub result: bool,
}

/// Bytes of packets that carry `bytes` of payload.
pub fn packet_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(8) * 16
}

/// The flag of the step whose trigger carried `src_offset` (bits 1-31: the step number's low
/// bits; kernels/colls/net_step.cu, ox_net_flag).
pub fn flag(src_offset: u32) -> u32 {
    (src_offset >> 1) | 0x8000_0000
}

/// Reserves packet areas in `st`'s arena for every pre- and post-copy when both directions
/// carry at most `max` bytes; returns the ranges, the pre-copies' first, in the order of
/// `st.pre` then `st.post` (empty: plain copies).
pub fn reserve(st: &mut Staged, max: u64) -> Vec<Range> {
    let total = |v: &[super::stage::HostCopy]| v.iter().map(|c| c.bytes).sum::<u64>();
    if max == 0 || total(&st.pre) > max || total(&st.post) > max || st.pre.len() + st.post.len() == 0 {
        return Vec::new();
    }
    let step: &mut Step = &mut st.step;
    let mut out = Vec::with_capacity(st.pre.len() + st.post.len());
    for (v, result) in [(&st.pre, false), (&st.post, true)] {
        for c in v {
            out.push(Range { plain: c.host, packets: step.host(packet_bytes(c.bytes)), bytes: c.bytes, result });
        }
    }
    out
}

/// The `i`th 8-byte word at `p`, for atomic access.
///
/// # Safety
/// p + 8i is an 8-byte-aligned word (packet areas are 16-aligned) that stays mapped while the
/// returned reference is used; the GPU and this thread access it only atomically.
unsafe fn word<'a>(p: *mut u8, i: usize) -> &'a AtomicU64 {
    // SAFETY: the caller's promise above.
    unsafe { &*p.add(8 * i).cast::<AtomicU64>() }
}

/// Waits for the kernel's packets of every pre-copy range and writes their payload to the plain
/// range. `stopped` is asked now and then (an abort). `arena` is the step's arena (the one its
/// kernel used).
///
/// # Safety
/// Every range lies in the arena at `arena`, which stays mapped until this returns.
pub unsafe fn unpack(arena: *mut u8, ranges: &[Range], flag: u32, stopped: &dyn Fn() -> Option<Error>) -> Result<()> {
    for r in ranges.iter().filter(|r| !r.result) {
        let (pk, plain) = (arena.add(r.packets as usize), arena.add(r.plain as usize));
        for i in 0..r.bytes.div_ceil(8) as usize {
            let (mut lo, mut hi);
            let mut spins = 0u32;
            loop {
                // Relaxed: each half's data comes with its own flag in one 8-byte store.
                (lo, hi) = (word(pk, 2 * i).load(Ordering::Relaxed), word(pk, 2 * i + 1).load(Ordering::Relaxed));
                if (lo >> 32) as u32 == flag && (hi >> 32) as u32 == flag {
                    break;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(1024) {
                    if let Some(e) = stopped() {
                        return Err(e);
                    }
                }
                std::hint::spin_loop();
            }
            let v = (lo & 0xffff_ffff) | (hi << 32);
            let n = (r.bytes as usize - 8 * i).min(8);
            std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), plain.add(8 * i), n);
        }
    }
    Ok(())
}

/// Writes every result range's payload as packets flagged `flag`: after the whole step.
///
/// # Safety
/// As `unpack`.
pub unsafe fn pack(arena: *mut u8, ranges: &[Range], flag: u32) {
    for r in ranges.iter().filter(|r| r.result) {
        let (pk, plain) = (arena.add(r.packets as usize), arena.add(r.plain as usize));
        for i in 0..r.bytes.div_ceil(8) as usize {
            let n = (r.bytes as usize - 8 * i).min(8);
            let mut b = [0u8; 8];
            std::ptr::copy_nonoverlapping(plain.add(8 * i), b.as_mut_ptr(), n);
            let v = u64::from_le_bytes(b);
            let f = u64::from(flag) << 32;
            word(pk, 2 * i).store((v & 0xffff_ffff) | f, Ordering::Relaxed);
            word(pk, 2 * i + 1).store((v >> 32) | f, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::stage::HostCopy;

    /// What the kernel writes for a pre-copy (kernels/colls/net_step.cu, ox_ll16_write).
    fn device_pack(pk: &mut [u64], data: &[u8], flag: u32) {
        for (i, c) in data.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            let v = u64::from_le_bytes(b);
            pk[2 * i] = (v & 0xffff_ffff) | u64::from(flag) << 32;
            pk[2 * i + 1] = (v >> 32) | u64::from(flag) << 32;
        }
    }

    fn staged(pre: &[u64], post: &[u64]) -> Staged {
        let mut st = Staged { step: Step::default(), pre: Vec::new(), post: Vec::new(), combine: None };
        for &b in pre {
            let host = st.step.host(b);
            st.pre.push(HostCopy { dev: 0x1000, host, bytes: b, with: None });
        }
        for &b in post {
            let host = st.step.host(b);
            st.post.push(HostCopy { dev: 0x2000, host, bytes: b, with: None });
        }
        st
    }

    #[test]
    fn flags_match_the_kernels_and_never_zero() {
        // The kernel sends (target & 0x7fffffff) << 1 | arena, and flags target's low 31 bits | top bit.
        for target in [1u64, 2, 0x7fff_ffff, 0x8000_0000, 0x1_2345_6789] {
            for arena in [0u32, 1] {
                let src = arena | ((target & 0x7fff_ffff) as u32) << 1;
                assert_eq!(flag(src), ((target as u32) & 0x7fff_ffff) | 0x8000_0000);
                assert_ne!(flag(src), 0);
            }
        }
    }

    #[test]
    fn packet_areas_follow_the_plain_ones_and_only_small_steps_get_them() {
        let mut st = staged(&[13, 8], &[100]);
        let before = st.step.arena_bytes;
        let r = reserve(&mut st, 128);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].plain, r[0].bytes, r[0].result), (st.pre[0].host, 13, false));
        assert_eq!((r[2].plain, r[2].bytes, r[2].result), (st.post[0].host, 100, true));
        assert!(r.iter().all(|x| x.packets >= before && x.packets % 16 == 0));
        assert_eq!(st.step.arena_bytes, before + 32 + 16 + 208);
        // 100 bytes of results against a limit of 64: plain copies, arena untouched.
        let mut st = staged(&[8], &[100]);
        let before = st.step.arena_bytes;
        assert!(reserve(&mut st, 64).is_empty());
        assert_eq!(st.step.arena_bytes, before);
        assert!(reserve(&mut staged(&[8], &[8]), 0).is_empty(), "0 turns packets off");
    }

    #[test]
    fn unpack_reads_what_the_kernel_packed_and_pack_writes_what_it_reads() {
        let mut st = staged(&[13, 24], &[21]);
        let r = reserve(&mut st, 4096);
        let mut arena = vec![0u64; st.step.arena_bytes as usize / 8 + 2];
        let base = arena.as_mut_ptr().cast::<u8>();
        let data: Vec<Vec<u8>> = [13usize, 24].iter().map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect()).collect();
        let flag = 0x8000_0005;
        for (x, d) in r.iter().filter(|x| !x.result).zip(&data) {
            let at = x.packets as usize / 8;
            device_pack(&mut arena[at..at + x.bytes.div_ceil(8) as usize * 2], d, flag);
        }
        // SAFETY: every range lies in `arena`.
        unsafe { unpack(base, &r, flag, &|| None) }.unwrap();
        for (x, d) in r.iter().filter(|x| !x.result).zip(&data) {
            // SAFETY: within `arena`.
            let got = unsafe { std::slice::from_raw_parts(base.add(x.plain as usize), x.bytes as usize) };
            assert_eq!(got, &d[..]);
        }
        // The result: plain bytes to packets, each half flagged.
        let res = r[2];
        for i in 0..21 {
            // SAFETY: within `arena`.
            unsafe { *base.add(res.plain as usize + i) = 200 - i as u8 };
        }
        // SAFETY: as above.
        unsafe { pack(base, &r, flag) };
        let at = res.packets as usize / 8;
        let mut back = Vec::new();
        for i in 0..3 {
            let (lo, hi) = (arena[at + 2 * i], arena[at + 2 * i + 1]);
            assert_eq!(((lo >> 32) as u32, (hi >> 32) as u32), (flag, flag));
            back.extend_from_slice(&(((lo & 0xffff_ffff) | (hi << 32)).to_le_bytes()));
        }
        assert_eq!(&back[..21], &(0..21).map(|i| 200 - i as u8).collect::<Vec<_>>()[..]);
        assert!(back[21..].iter().all(|&b| b == 0), "the last packet's tail is zero");
    }

    #[test]
    fn unpack_gives_up_when_stopped_and_ignores_stale_flags() {
        let mut st = staged(&[16], &[]);
        let r = reserve(&mut st, 4096);
        let mut arena = vec![0u64; st.step.arena_bytes as usize / 8];
        let at = r[0].packets as usize / 8;
        // Packets of the step before: the flag differs.
        device_pack(&mut arena[at..at + 4], &[1; 16], 0x8000_0001);
        let base = arena.as_mut_ptr().cast::<u8>();
        // SAFETY: every range lies in `arena`.
        let e = unsafe { unpack(base, &r, 0x8000_0002, &|| Some(Error::remote("aborted"))) }.unwrap_err();
        assert!(e.msg.contains("aborted"));
        // One half flagged, the other still stale: not yet.
        arena[at] = 0x8000_0002u64 << 32;
        let base = arena.as_mut_ptr().cast::<u8>();
        // SAFETY: as above.
        assert!(unsafe { unpack(base, &r, 0x8000_0002, &|| Some(Error::remote("aborted"))) }.is_err());
    }
}
