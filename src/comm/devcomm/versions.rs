//! Which device-API headers a caller was compiled against, and what each expects: NCCL 2.32.3's
//! version checks (getNcclVersionCompat), its compat table (NCCL 2.32.3's devCommCompat[], read
//! off its libnccl.so.2: v22902 serves 2.29.2-2.29.3, v22907 2.29.5-2.29.7, v23000
//! 2.30.0-2.30.7, v23100 2.31.0-2.32.3), each entry's requirement filter, and the copy of
//! 2.32.3's `ncclDevComm` into the caller's older layout (NCCL's devCommCopyNewToOld_v*, same
//! fields). NCCL 2.28.9's headers predate versioning; oxccl serves them too (`Abi::V22809`).

use crate::error::{Error, Result};
use crate::symmem::abi::ncclDevComm;
use crate::symmem::abi232::{ncclDevComm_v22907, ncclDevComm_v23000, ncclDevComm_v23100, ncclResourceWindow_vidmem_v23000, NCCL_API_MAGIC};

/// The device-API version whose headers the library serves natively (the NCCL version it
/// reports): newer callers are "too old" errors, as in NCCL.
pub const RUNTIME_VERSION: i32 = crate::NCCL_VERSION_CODE;

/// The `ncclDevComm` layout a caller expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    /// NCCL 2.28.9's headers: unversioned requirements and `ncclDevComm` (200 bytes).
    V22809,
    /// NCCL 2.29.2-2.29.3: versioned requirements, unversioned `ncclDevComm` (2.28's 200 bytes).
    V22902,
    /// NCCL 2.29.5-2.29.7: versioned requirements, unversioned `ncclDevComm` of 224 bytes.
    V22907,
    /// NCCL 2.30.0-2.30.7: versioned `ncclDevComm` of 240 bytes.
    V23000,
    /// NCCL 2.31.0-2.32.3: NCCL 2.32.3's own `ncclDevComm` (248 bytes).
    V23100,
}

impl Abi {
    /// Bytes of the `ncclDevComm` this layout writes.
    pub fn dev_comm_size(self) -> usize {
        match self {
            Abi::V22809 | Abi::V22902 => std::mem::size_of::<ncclDevComm>(),
            Abi::V22907 => std::mem::size_of::<ncclDevComm_v22907>(),
            Abi::V23000 => std::mem::size_of::<ncclDevComm_v23000>(),
            Abi::V23100 => std::mem::size_of::<ncclDevComm_v23100>(),
        }
    }
}

/// NCCL 2.32.3's compat table: (first version, last version, layout), searched in this order.
pub const COMPAT: [(i32, i32, Abi); 4] = [(22902, 22903, Abi::V22902), (22905, 22907, Abi::V22907), (23000, 23007, Abi::V23000), (23100, 23203, Abi::V23100)];

/// NCCL's ncclVersionToString: "major.minor.patch" of a version code (C's truncating division).
pub fn version_string(v: i32) -> String {
    format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
}

/// NCCL 2.32.3's getNcclVersionCompat: the layout for headers of `version`, or ncclInvalidUsage
/// with NCCL's WARN text: "too old" for a version above the library's (unless `check` is off,
/// NCCL_ENABLE_VERSION_CHECK=0), "not backwards compatible" for one no compat entry serves.
pub fn compat_of(version: i32, check: bool) -> Result<Abi> {
    let runtime = version_string(RUNTIME_VERSION);
    if version > RUNTIME_VERSION && check {
        return Err(Error::invalid_usage(format!(
            "NCCL library is too old. This application was compiled with NCCL version {}, but is running with NCCL library version {runtime}.",
            version_string(version)
        )));
    }
    COMPAT.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&version)).map(|&(_, _, abi)| abi).ok_or_else(|| {
        Error::invalid_usage(format!(
            "NCCL library is not backwards compatible. This application was compiled with NCCL version {}, but is running with NCCL library version {runtime}. \
             oxccl serves device code compiled against NCCL 2.28.9 and 2.29.2-2.29.3, 2.29.5-2.29.7, 2.30.0-2.30.7 and 2.31.0-2.32.3 headers.",
            version_string(version)
        ))
    })
}

/// `compat_of` with NCCL_ENABLE_VERSION_CHECK read from the environment (default 1; any value
/// NCCL's parameter parser reads as 0 turns the "too old" check off).
pub fn compat(version: i32) -> Result<Abi> {
    compat_of(version, crate::config::env_i64("NCCL_ENABLE_VERSION_CHECK", 1) != 0)
}

/// The version a device communicator is made for: NCCL_DEV_API_JIT=1, or `useRuntimeVersion` in
/// requirements of 2.31.0 or later, make it the library's own (NCCL 2.32.3's ncclDevCommCreate),
/// the caller's `version` otherwise.
pub fn effective_version(version: i32, use_runtime_version: bool, jit: bool) -> i32 {
    if jit || (version > 23099 && use_runtime_version) {
        RUNTIME_VERSION
    } else {
        version
    }
}

/// What a versioned requirements struct asks for, as NCCL 2.32.3 reads it (the fields the
/// filters and checks look at).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// The caller's `version`.
    pub version: i32,
    /// `ginForceEnable`.
    pub gin_force_enable: bool,
    /// `ginSignalCount`.
    pub gin_signals: i32,
    /// `ginCounterCount`.
    pub gin_counters: i32,
    /// `barrierCount`.
    pub barriers: i32,
    /// `lsaBarrierCount`.
    pub lsa_barriers: i32,
    /// `railGinBarrierCount`.
    pub rail_gin_barriers: i32,
    /// `worldGinBarrierCount`.
    pub world_gin_barriers: i32,
    /// `ginConnectionType`.
    pub gin_connection_type: i32,
    /// `cftCaps`.
    pub cft_caps: i32,
    /// Some resource requirement asks for GIN signals or counters.
    pub resource_gin: bool,
}

impl Wanted {
    /// NCCL's ncclGinResourcesRequested.
    pub fn gin_resources(&self) -> bool {
        self.gin_signals > 0 || self.gin_counters > 0 || self.barriers > 0 || self.rail_gin_barriers > 0 || self.world_gin_barriers > 0 || self.resource_gin
    }
}

/// NCCL 2.32.3's devCommRequirementsFilter of the caller's compat entry: 2.29 callers asking for
/// GIN are refused (ncclInvalidUsage, NCCL's WARN), and 2.29.2-3's `barrierCount` means LSA
/// barriers only (their rail GIN barriers are dropped). v23000's filter sets the GIN type, which
/// nothing reads without GIN.
pub fn filter(abi: Abi, w: &mut Wanted) -> Result<()> {
    let too_old = |w: &Wanted| {
        Error::invalid_usage(format!(
            "The application was compiled with too old version of NCCL. It was compiled with NCCL version {}, but is running with NCCL library version {}. \
             Because of its use of GIN device kernels, it needs to be recompiled, preferably with the same NCCL version that it will be running with.",
            version_string(w.version),
            version_string(RUNTIME_VERSION)
        ))
    };
    match abi {
        Abi::V22902 => {
            if w.gin_force_enable || w.gin_signals > 0 || w.gin_counters > 0 || w.resource_gin {
                return Err(too_old(w));
            }
            if w.barriers != 0 {
                w.lsa_barriers = w.lsa_barriers.max(w.barriers);
                w.barriers = 0;
            }
            w.rail_gin_barriers = 0;
        }
        Abi::V22907 => {
            let asked = w.gin_signals > 0 || w.gin_counters > 0 || w.barriers > 0 || w.rail_gin_barriers > 0 || w.resource_gin;
            if asked && (w.gin_connection_type != 0 || w.gin_force_enable) {
                return Err(too_old(w));
            }
        }
        Abi::V22809 | Abi::V23000 | Abi::V23100 => {}
    }
    Ok(())
}

/// What NCCL 2.32.3 answers, on a machine without GIN and without CFT, to what the (filtered)
/// requirements ask of them: ncclInvalidArgument with NCCL's WARN for CFT capabilities (checked
/// in its ncclDevCommCreate), GIN resources without GIN enabled, and GIN enabled (a connection
/// type, or the deprecated `ginForceEnable`) where no rank has it (its ncclDevrCommCreateInternal).
pub fn check_gin_and_cft(w: &Wanted) -> Result<()> {
    if w.cft_caps != 0 {
        return Err(Error::invalid_argument(format!(
            "User requested CFT capabilities (cftCaps={:#x}), but not all ranks in the communicator support CFT.",
            w.cft_caps
        )));
    }
    let connection = if w.gin_force_enable { 1 } else { w.gin_connection_type };
    if w.gin_resources() && connection == 0 {
        return Err(Error::invalid_argument("User requested GIN resources but did not request GIN to be enabled!"));
    }
    if connection != 0 {
        return Err(Error::invalid_argument("User requested GIN but not all ranks in the communicator support GIN (oxccl has no GIN transport)"));
    }
    Ok(())
}

/// NCCL's devCommCopyNewToOld_v22902: the LSA part of 2.32.3's `ncclDevComm` in the 2.29.2
/// layout (2.28.9's), everything else zero (no GIN for those callers).
pub fn to_v22902(n: &ncclDevComm_v23100) -> ncclDevComm {
    let mut o = ncclDevComm {
        rank: n.rank,
        nRanks: n.nRanks,
        nRanks_rcp32: n.nRanks_rcp32,
        lsaRank: n.lsaRank,
        lsaSize: n.lsaSize,
        lsaSize_rcp32: n.lsaSize_rcp32,
        windowTable: n.windowTable,
        resourceWindow: n.resourceWindow,
        lsaMultimem: n.lsaMultimem,
        lsaBarrier: n.lsaBarrier,
        ..Default::default()
    };
    o.resourceWindow_inlined.lsaFlatBase = n.resourceWindow_inlined.lsaFlatBase;
    o.resourceWindow_inlined.stride4G = n.resourceWindow_inlined.stride4G;
    o.resourceWindow_inlined.mcOffset4K = n.resourceWindow_inlined.mcOffset4K;
    o
}

/// NCCL's devCommCopyNewToOld_v22907: v22902's fields and the abort flag.
pub fn to_v22907(n: &ncclDevComm_v23100) -> ncclDevComm_v22907 {
    ncclDevComm_v22907 { base: to_v22902(n), abortFlag: n.abortFlag, ..Default::default() }
}

/// NCCL's devCommCopyNewToOld_v23000: every field 2.30 has, its railed flags from the strides.
pub fn to_v23000(n: &ncclDevComm_v23100) -> ncclDevComm_v23000 {
    let w = &n.resourceWindow_inlined;
    ncclDevComm_v23000 {
        magic: n.magic,
        version: n.version,
        rank: n.rank,
        nRanks: n.nRanks,
        nRanks_rcp32: n.nRanks_rcp32,
        lsaRank: n.lsaRank,
        lsaSize: n.lsaSize,
        lsaSize_rcp32: n.lsaSize_rcp32,
        windowTable: n.windowTable,
        resourceWindow: n.resourceWindow,
        resourceWindow_inlined: ncclResourceWindow_vidmem_v23000 { lsaFlatBase: w.lsaFlatBase, stride4G: w.stride4G, mcOffset4K: w.mcOffset4K, ..Default::default() },
        hybridWorldGinBarrier: n.hybridDenseGinBarrier,
        lsaMultimem: n.lsaMultimem,
        lsaBarrier: n.lsaBarrier,
        railGinBarrier: n.railGinBarrier,
        ginConnectionCount: n.ginConnectionCount,
        ginNetDeviceTypes: n.ginNetDeviceTypes,
        _pad0: [0; 3],
        ginHandles: n.ginHandles,
        ginSignalCount: n.ginSignalCount,
        ginCounterCount: n.ginCounterCount,
        ginSignalShadows: n.ginSignalShadows,
        ginContextCount: n.ginContextCount,
        ginConnectionsRailed: (n.ginConnectionStride > 1) as u8,
        ginStrongLegacySignals: n.ginStrongLegacySignals,
        ginContextsRailed: (n.ginContextStride > 1) as u8,
        _pad1: 0,
        abortFlag: n.abortFlag,
        hybridLsaBarrier: n.hybridLsaBarrier,
        hybridRailGinBarrier: n.hybridRailGinBarrier,
        worldGinBarrier: n.worldGinBarrier,
    }
}

/// Where a caller's `ncclDevComm` keeps its resource window, as NCCL 2.32.3's ncclDevCommDestroy
/// tells the layouts apart: a struct starting with NCCL_API_MAGIC is versioned (2.30+; its
/// `version` must pass `compat`), any other is 2.28-2.29's (its first field, `rank`, is never
/// the magic). Byte offset of `resourceWindow`, or `compat`'s error.
pub fn resource_window_offset(magic: u32, version: u32) -> Result<usize> {
    if magic != NCCL_API_MAGIC {
        return Ok(std::mem::offset_of!(ncclDevComm, resourceWindow));
    }
    Ok(match compat(version as i32)? {
        // Only unversioned structs have these layouts; NCCL reads a versioned one claiming them
        // through its v22902 copy (2.29.2-3) or as its own layout (2.29.5-7), so does oxccl.
        Abi::V22809 | Abi::V22902 => std::mem::offset_of!(ncclDevComm, resourceWindow),
        Abi::V22907 | Abi::V23000 | Abi::V23100 => std::mem::offset_of!(ncclDevComm_v23100, resourceWindow),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn compat_table_is_nccl_2_32_3s() {
        for (v, want) in [
            (22902, Abi::V22902),
            (22903, Abi::V22902),
            (22905, Abi::V22907),
            (22907, Abi::V22907),
            (23000, Abi::V23000),
            (23003, Abi::V23000),
            (23007, Abi::V23000),
            (23100, Abi::V23100),
            (23199, Abi::V23100),
            (23203, Abi::V23100),
        ] {
            assert_eq!(compat_of(v, true).unwrap(), want, "{v}");
        }
        // Gaps NCCL 2.32.3 does not serve, and anything newer than 2.32.3.
        for v in [0, 22809, 22901, 22904, 22908, 22999, 23008, 23099, -1] {
            let e = compat_of(v, true).unwrap_err();
            assert_eq!(e.code, ResultCode::InvalidUsage, "{v}");
            assert!(e.msg.starts_with("NCCL library is not backwards compatible."), "{v}: {}", e.msg);
        }
        let e = compat_of(23204, true).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert_eq!(
            e.msg,
            "NCCL library is too old. This application was compiled with NCCL version 2.32.4, but is running with NCCL library version 2.32.3."
        );
        // NCCL_ENABLE_VERSION_CHECK=0: no "too old", but no compat entry serves it either.
        assert!(compat_of(23300, false).unwrap_err().msg.starts_with("NCCL library is not backwards compatible."));
    }

    #[test]
    fn version_strings_as_nccl_prints_them() {
        assert_eq!(version_string(23203), "2.32.3");
        assert_eq!(version_string(22902), "2.29.2");
        assert_eq!(version_string(23010), "2.30.10");
        assert_eq!(version_string(-23203), "-2.-32.-3");
    }

    #[test]
    fn runtime_version_when_asked() {
        assert_eq!(effective_version(23100, true, false), RUNTIME_VERSION);
        assert_eq!(effective_version(23100, false, false), 23100);
        assert_eq!(effective_version(23007, true, false), 23007, "2.30 has no useRuntimeVersion");
        assert_eq!(effective_version(22902, false, true), RUNTIME_VERSION, "NCCL_DEV_API_JIT=1");
    }

    #[test]
    fn filters_as_nccl_2_32_3s() {
        // 2.29.2: barrierCount is LSA barriers only; rail GIN barriers are dropped.
        let mut w = Wanted { version: 22902, barriers: 4, lsa_barriers: 2, rail_gin_barriers: 3, ..Default::default() };
        filter(Abi::V22902, &mut w).unwrap();
        assert_eq!((w.barriers, w.lsa_barriers, w.rail_gin_barriers), (0, 4, 0));
        assert!(!w.gin_resources());
        let mut w = Wanted { version: 22902, resource_gin: true, ..Default::default() };
        let e = filter(Abi::V22902, &mut w).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert!(e.msg.contains("compiled with NCCL version 2.29.2, but is running with NCCL library version 2.32.3"), "{}", e.msg);
        // 2.29.7: GIN resources with GIN enabled are refused; without, left to the GIN checks.
        let mut w = Wanted { version: 22907, barriers: 1, gin_connection_type: 1, ..Default::default() };
        assert_eq!(filter(Abi::V22907, &mut w).unwrap_err().code, ResultCode::InvalidUsage);
        let mut w = Wanted { version: 22907, barriers: 1, ..Default::default() };
        filter(Abi::V22907, &mut w).unwrap();
        assert_eq!(check_gin_and_cft(&w).unwrap_err().code, ResultCode::InvalidArgument);
    }

    #[test]
    fn gin_and_cft_refused_as_without_them() {
        assert!(check_gin_and_cft(&Wanted::default()).is_ok(), "zero counts are fine");
        let e = check_gin_and_cft(&Wanted { cft_caps: 2, ..Default::default() }).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (ResultCode::InvalidArgument, "User requested CFT capabilities (cftCaps=0x2), but not all ranks in the communicator support CFT."));
        for w in [
            Wanted { world_gin_barriers: 1, ..Default::default() },
            Wanted { rail_gin_barriers: 1, ..Default::default() },
            Wanted { barriers: 1, ..Default::default() },
            Wanted { gin_signals: 1, ..Default::default() },
            Wanted { resource_gin: true, ..Default::default() },
        ] {
            let e = check_gin_and_cft(&w).unwrap_err();
            assert_eq!((e.code, e.msg.as_str()), (ResultCode::InvalidArgument, "User requested GIN resources but did not request GIN to be enabled!"), "{w:?}");
        }
        for w in [Wanted { gin_force_enable: true, ..Default::default() }, Wanted { gin_connection_type: 2, ..Default::default() }] {
            let e = check_gin_and_cft(&w).unwrap_err();
            assert!(e.code == ResultCode::InvalidArgument && e.msg.starts_with("User requested GIN but not all ranks"), "{w:?}");
        }
    }

    /// Field for field what NCCL 2.32.3's devCommCopyNewToOld_v* copy (read off its disassembly).
    #[test]
    fn old_layouts_get_nccls_fields() {
        use crate::symmem::abi::{ncclGinBarrierHandle, ncclLsaBarrierHandle};
        use crate::symmem::abi232::ncclResourceWindow_vidmem;
        let n = ncclDevComm_v23100 {
            magic: NCCL_API_MAGIC,
            version: 23007,
            rank: 1,
            nRanks: 2,
            nRanks_rcp32: 7,
            lsaRank: 1,
            lsaSize: 2,
            lsaSize_rcp32: 8,
            windowTable: 0x1000,
            resourceWindow: 0x2000,
            resourceWindow_inlined: ncclResourceWindow_vidmem { lsaFlatBase: 0x7f00_0000_0000, stride4G: 4, mcOffset4K: 5 },
            hybridDenseGinBarrier: ncclGinBarrierHandle { signal0: 9, bufHandle: 0 },
            lsaMultimem: 0x3000,
            lsaBarrier: ncclLsaBarrierHandle { bufHandle: 3, nBarriers: 6 },
            railGinBarrier: ncclGinBarrierHandle { signal0: 11, bufHandle: 0 },
            ginConnectionStride: 2,
            ginContextStride: 1,
            abortFlag: 0x4000,
            hybridLsaBarrier: ncclLsaBarrierHandle { bufHandle: 12, nBarriers: 0 },
            worldGinBarrier: ncclGinBarrierHandle { signal0: 13, bufHandle: 0 },
            ..Default::default()
        };
        let o = to_v22902(&n);
        assert_eq!((o.rank, o.nRanks, o.nRanks_rcp32, o.lsaRank, o.lsaSize, o.lsaSize_rcp32), (1, 2, 7, 1, 2, 8));
        assert_eq!((o.windowTable, o.resourceWindow, o.lsaMultimem, o.lsaBarrier), (0x1000, 0x2000, 0x3000, n.lsaBarrier));
        let w = o.resourceWindow_inlined;
        assert_eq!((w.lsaFlatBase, w.stride4G, w.mcOffset4K, w.lsaRank, w.winHost), (0x7f00_0000_0000, 4, 5, 0, 0), "only what kernels read");
        assert_eq!((o.railGinBarrier, o.ginSignalShadows), (Default::default(), 0), "no GIN fields for 2.29.2");
        let o7 = to_v22907(&n);
        assert_eq!((o7.base, o7.abortFlag, o7.ginContextCount), (o, 0x4000, 0));
        let o30 = to_v23000(&n);
        assert_eq!((o30.magic, o30.version, o30.rank, o30.resourceWindow), (NCCL_API_MAGIC, 23007, 1, 0x2000));
        assert_eq!((o30.resourceWindow_inlined.lsaFlatBase, o30.resourceWindow_inlined.stride4G, o30.resourceWindow_inlined.mcOffset4K), (0x7f00_0000_0000, 4, 5));
        assert_eq!((o30.hybridWorldGinBarrier.signal0, o30.railGinBarrier.signal0, o30.worldGinBarrier.signal0, o30.hybridLsaBarrier.bufHandle), (9, 11, 13, 12));
        assert_eq!((o30.ginConnectionsRailed, o30.ginContextsRailed, o30.abortFlag), (1, 0, 0x4000));
    }

    #[test]
    fn destroy_finds_the_resource_window_in_either_layout() {
        assert_eq!(resource_window_offset(0, 0).unwrap(), 32, "2.28 / 2.29: rank 0");
        assert_eq!(resource_window_offset(5, 0).unwrap(), 32);
        assert_eq!(resource_window_offset(NCCL_API_MAGIC, 23203).unwrap(), 40);
        assert_eq!(resource_window_offset(NCCL_API_MAGIC, 23003).unwrap(), 40);
        assert_eq!(resource_window_offset(NCCL_API_MAGIC, 23204).unwrap_err().code, ResultCode::InvalidUsage);
        assert_eq!(resource_window_offset(NCCL_API_MAGIC, 22000).unwrap_err().code, ResultCode::InvalidUsage);
        assert_eq!((Abi::V22809.dev_comm_size(), Abi::V22907.dev_comm_size(), Abi::V23000.dev_comm_size(), Abi::V23100.dev_comm_size()), (200, 224, 240, 248));
    }
}
