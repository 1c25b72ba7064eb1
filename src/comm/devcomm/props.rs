//! ncclCommQueryProperties: what a communicator offers the device API, written into the caller's
//! `ncclCommProperties_t` as NCCL 2.32.3 writes it (its libnccl.so.2, read off the disassembly;
//! NCCL 2.30.7's src/dev_runtime.cc for the shape): fields gated by the caller's `version`, then
//! the caller's compat entry's filter, and, here, never a byte past the caller's `size`.

use super::versions::Abi;
use crate::symmem::abi232::{ncclCommProperties_v23203 as P, ncclDevComm_v23100, PROPS_V22902_GIN_TYPE};
use std::mem::{offset_of, size_of};

/// What oxccl's communicator offers: no NVLS, no GIN, no CFT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Properties {
    /// This rank.
    pub rank: i32,
    /// Ranks.
    pub nranks: i32,
    /// CUDA device ordinal.
    pub cuda_dev: i32,
    /// NVML index of the device.
    pub nvml_dev: i32,
    /// The communicator has symmetric memory (device communicators can be made): NCCL's
    /// `symmetricSupport`.
    pub device_api: bool,
    /// Ranks in this rank's LSA team.
    pub lsa_size: i32,
    /// One-sided host operations work: numRmaCtx > 0 and symmetric memory (NCCL's
    /// `hostRmaSupport` where all ranks are one LSA team; oxccl has no RMA proxy between hosts).
    pub host_rma: bool,
    /// The communicator's hash (the key every rank shares, ordering groups as NCCL's commHash).
    pub comm_hash: u64,
    /// Consecutive ranks per host where every host has the same number (NCCL's
    /// `contiguousRanksPerHost`), i32::MAX where they differ: the GIN stride NCCL reports without
    /// full GIN connectivity.
    pub contiguous_ranks_per_host: i32,
}

impl Properties {
    /// The properties of `comm` (initialised: `r`).
    pub fn of(comm: &crate::comm::Comm, r: &crate::comm::Ready) -> Properties {
        let (lsa_size, _) = crate::symmem::lsa_team(&r.peers, comm.rank);
        let device_api = super::check_supported(r).is_ok();
        Properties {
            rank: comm.rank as i32,
            nranks: comm.nranks as i32,
            cuda_dev: comm.device,
            nvml_dev: crate::gpu::context::nvml_index(&r.dev.bus_id).unwrap_or(comm.device),
            device_api,
            lsa_size: lsa_size as i32,
            host_rma: device_api && comm.config.num_rma_ctx > 0,
            comm_hash: r.key,
            contiguous_ranks_per_host: contiguous_ranks_per_host(r.peers.len(), |a, b| r.peers[a].same_host(&r.peers[b])),
        }
    }
}

/// NCCL's contiguousRanksPerHost (initTransportsRank, 2.32.3): the length of the runs of
/// consecutive ranks on one host (`same_host(r - 1, r)`) if every run has one length, else
/// i32::MAX.
pub fn contiguous_ranks_per_host(n: usize, same_host: impl Fn(usize, usize) -> bool) -> i32 {
    let mut runs = Vec::new();
    let mut run = 1;
    for r in 1..n {
        if same_host(r - 1, r) {
            run += 1;
        } else {
            runs.push(run);
            run = 1;
        }
    }
    runs.push(run);
    if runs.iter().all(|&x| x == runs[0]) {
        runs[0]
    } else {
        i32::MAX
    }
}

/// Writes `p` into `dst`, the caller's struct (its first `size` bytes), as NCCL 2.32.3's
/// ncclCommQueryProperties does for headers of `version` (served by `abi`): rank, sizes, devices
/// and device-API and multimem support always; from 2.29.5 host RMA, GIN types (none: 0) and LSA
/// teams; from 2.31 the hash, GIN stride, connection type (none), per-type GIN support (none)
/// and the size of the library's own `ncclDevComm`; then the 2.29 filters (device API only
/// where one LSA team is the world; no GIN types); from 2.32 CFT support (none). A field that
/// does not fit in `dst` is not written.
pub fn write(p: &Properties, version: i32, abi: Abi, dst: &mut [u8]) {
    let mut put = |at: usize, bytes: &[u8]| {
        if let Some(d) = dst.get_mut(at..at + bytes.len()) {
            d.copy_from_slice(bytes);
        }
    };
    put(offset_of!(P, rank), &p.rank.to_le_bytes());
    put(offset_of!(P, nRanks), &p.nranks.to_le_bytes());
    put(offset_of!(P, cudaDev), &p.cuda_dev.to_le_bytes());
    put(offset_of!(P, nvmlDev), &p.nvml_dev.to_le_bytes());
    let mut device_api = p.device_api;
    put(offset_of!(P, deviceApiSupport), &[device_api as u8]);
    put(offset_of!(P, multimemSupport), &[0]);
    if version > 22903 {
        put(offset_of!(P, hostRmaSupport), &[p.host_rma as u8]);
        put(offset_of!(P, ginType), &0i32.to_le_bytes());
        put(offset_of!(P, railedGinType), &0i32.to_le_bytes());
        put(offset_of!(P, nLsaTeams), &(p.nranks / p.lsa_size.max(1)).to_le_bytes());
        if version > 23099 {
            put(offset_of!(P, commHash), &p.comm_hash.to_le_bytes());
            // ginMinStride: 1 with full GIN connections, else contiguousRanksPerHost.
            put(offset_of!(P, ginMinStride), &p.contiguous_ranks_per_host.to_le_bytes());
            put(offset_of!(P, ginConnectionType), &0i32.to_le_bytes());
            put(offset_of!(P, ginSupport), &[0u8; 64]);
            put(offset_of!(P, devCommRuntimeVersionSize), &size_of::<ncclDevComm_v23100>().to_le_bytes());
        }
    }
    match abi {
        Abi::V22902 | Abi::V22907 => {
            // No GIN for 2.29 callers: the device API only where no GIN is needed.
            device_api = device_api && p.lsa_size == p.nranks;
            put(offset_of!(P, deviceApiSupport), &[device_api as u8]);
            if abi == Abi::V22902 {
                put(PROPS_V22902_GIN_TYPE, &[0]);
            } else {
                put(offset_of!(P, ginType), &0i32.to_le_bytes());
                put(offset_of!(P, railedGinType), &0i32.to_le_bytes());
            }
        }
        Abi::V22809 | Abi::V23000 | Abi::V23100 => {}
    }
    if version > 23199 {
        put(offset_of!(P, cftSupport), &[0]);
        put(offset_of!(P, cftMulticastSupport), &[0]);
        put(offset_of!(P, cftCountedSupport), &[0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> Properties {
        Properties { rank: 1, nranks: 4, cuda_dev: 1, nvml_dev: 3, device_api: true, lsa_size: 2, host_rma: true, comm_hash: 0x1122_3344_5566_7788, contiguous_ranks_per_host: 2 }
    }

    fn i32_at(b: &[u8], at: usize) -> i32 {
        i32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn a_2_32_caller_gets_every_field() {
        let mut b = [0xaau8; 152];
        write(&props(), 23203, Abi::V23100, &mut b);
        assert_eq!([i32_at(&b, 16), i32_at(&b, 20), i32_at(&b, 24), i32_at(&b, 28)], [1, 4, 1, 3]);
        assert_eq!((b[32], b[33], b[44]), (1, 0, 1), "device API, no multimem, host RMA");
        assert_eq!([i32_at(&b, 36), i32_at(&b, 40), i32_at(&b, 48)], [0, 2, 0], "GIN NONE, 2 LSA teams, railed NONE");
        assert_eq!(u64::from_le_bytes(b[56..64].try_into().unwrap()), 0x1122_3344_5566_7788);
        assert_eq!([i32_at(&b, 64), i32_at(&b, 68)], [2, 0], "GIN stride, connection type NONE");
        assert!(b[72..136].iter().all(|&x| x == 0), "no GIN type supported");
        assert_eq!(u64::from_le_bytes(b[136..144].try_into().unwrap()), 248);
        assert_eq!(&b[144..147], &[0, 0, 0], "no CFT");
        assert_eq!(b[147], 0xaa, "padding untouched");
        assert_eq!(&b[..16], &[0xaa; 16], "size, magic, version untouched");
    }

    #[test]
    fn older_callers_get_their_fields_only() {
        // 2.30: 56 bytes, no hash, no CFT.
        let mut b = [0xaau8; 152];
        write(&props(), 23007, Abi::V23000, &mut b[..56]);
        assert_eq!(i32_at(&b, 40), 2);
        assert_eq!(&b[56..], &[0xaa; 96]);
        // A 2.31 caller's struct ends before the CFT fields: nothing past its size.
        let mut b = [0xaau8; 152];
        write(&props(), 23100, Abi::V23100, &mut b[..144]);
        assert_eq!(u64::from_le_bytes(b[136..144].try_into().unwrap()), 248);
        assert_eq!(&b[144..], &[0xaa; 8]);
        // 2.29.7: device API only where one LSA team spans the world (here 2 of 4): false.
        let mut b = [0xaau8; 56];
        write(&props(), 22907, Abi::V22907, &mut b);
        assert_eq!((b[32], i32_at(&b, 36), i32_at(&b, 48), b[44]), (0, 0, 0, 1));
        // 2.29.2: 40 bytes, a one-byte ginType at 34; nothing from 36 on.
        let mut b = [0xaau8; 40];
        write(&Properties { lsa_size: 4, ..props() }, 22902, Abi::V22902, &mut b);
        assert_eq!((b[32], b[33], b[34]), (1, 0, 0));
        assert_eq!(&b[35..], &[0xaa; 5]);
    }

    #[test]
    fn contiguous_ranks_as_nccl_counts_them() {
        let hosts = |h: &'static [u8]| move |a: usize, b: usize| h[a] == h[b];
        assert_eq!(contiguous_ranks_per_host(4, hosts(&[0, 0, 0, 0])), 4);
        assert_eq!(contiguous_ranks_per_host(4, hosts(&[0, 0, 1, 1])), 2);
        assert_eq!(contiguous_ranks_per_host(6, hosts(&[0, 0, 1, 1, 0, 0])), 2, "runs, not hosts");
        assert_eq!(contiguous_ranks_per_host(3, hosts(&[0, 0, 1])), i32::MAX);
        assert_eq!(contiguous_ranks_per_host(1, hosts(&[0])), 1);
    }
}
