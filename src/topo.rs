//! Who is where: host and process identity of each rank, exchanged at init, from which the
//! communicator decides which peers MemoryChannel can reach and how (same process: plain pointers;
//! same host: CUDA IPC).

use std::sync::OnceLock;

use crate::config::env;
use crate::error::{Error, Result};

/// FNV-1a: a stable hash, identical in every process and build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Identifies the host: NCCL_HOSTID (or OXCCL_HOSTID) when set, else hostname + boot id, so two
/// containers of one machine with different hostnames still differ, and one machine's processes agree.
pub fn host_hash() -> u64 {
    static H: OnceLock<u64> = OnceLock::new();
    *H.get_or_init(|| {
        if let Some(id) = env("OXCCL_HOSTID").or_else(|| env("NCCL_HOSTID")) {
            return fnv1a(id.as_bytes());
        }
        let mut s = hostname();
        if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
            s.push_str(boot.trim());
        }
        fnv1a(s.as_bytes())
    })
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Random bytes from the kernel.
pub fn random_bytes(out: &mut [u8]) -> Result<()> {
    let mut filled = 0;
    while filled < out.len() {
        // SAFETY: writes at most the remaining length into the slice.
        let n = unsafe { libc::getrandom(out[filled..].as_mut_ptr().cast(), out.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("getrandom", &e));
        }
        filled += n as usize;
    }
    Ok(())
}

/// A random token per process: ranks with equal host hash and token share an address space.
/// (PIDs are not enough: two containers may run the same PID on one host.)
pub fn process_token() -> u64 {
    static T: OnceLock<u64> = OnceLock::new();
    *T.get_or_init(|| {
        let mut b = [0u8; 8];
        if random_bytes(&mut b).is_err() {
            // Fallback keeps tokens distinct per process on this host.
            b = (std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes();
        }
        u64::from_le_bytes(b)
    })
}

/// What each rank tells the others about itself at init.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub rank: u32,
    pub host_hash: u64,
    pub process: u64,
    pub pid: u32,
    pub device: i32,
    pub cc_major: i32,
    pub cc_minor: i32,
    pub sm_count: i32,
    /// PCI bus id, NUL-padded.
    pub bus_id: [u8; 16],
}

impl PeerInfo {
    pub const BYTES: usize = 4 + 8 + 8 + 4 + 4 * 4 + 16;

    pub fn same_host(&self, o: &PeerInfo) -> bool {
        self.host_hash == o.host_hash
    }
    pub fn same_process(&self, o: &PeerInfo) -> bool {
        self.same_host(o) && self.process == o.process
    }
    pub fn bus_id_str(&self) -> String {
        let end = self.bus_id.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.bus_id[..end]).into_owned()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::BYTES);
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.host_hash.to_le_bytes());
        v.extend_from_slice(&self.process.to_le_bytes());
        v.extend_from_slice(&self.pid.to_le_bytes());
        for x in [self.device, self.cc_major, self.cc_minor, self.sm_count] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.bus_id);
        v
    }

    pub fn decode(b: &[u8]) -> Result<PeerInfo> {
        if b.len() != Self::BYTES {
            return Err(Error::internal(format!("peer info of {} bytes, expected {}", b.len(), Self::BYTES)));
        }
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| (u32at(o) as u64) | ((u32at(o + 4) as u64) << 32);
        let mut bus_id = [0u8; 16];
        bus_id.copy_from_slice(&b[40..56]);
        Ok(PeerInfo {
            rank: u32at(0),
            host_hash: u64at(4),
            process: u64at(12),
            pid: u32at(20),
            device: u32at(24) as i32,
            cc_major: u32at(28) as i32,
            cc_minor: u32at(32) as i32,
            sm_count: u32at(36) as i32,
            bus_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_info_round_trips() {
        let mut bus_id = [0u8; 16];
        bus_id[..12].copy_from_slice(b"0000:1b:00.0");
        let p = PeerInfo {
            rank: 3,
            host_hash: 0xdead_beef_0123_4567,
            process: 42,
            pid: 777,
            device: 2,
            cc_major: 9,
            cc_minor: 0,
            sm_count: 132,
            bus_id,
        };
        let e = p.encode();
        assert_eq!(e.len(), PeerInfo::BYTES);
        assert_eq!(PeerInfo::decode(&e).expect("decodes"), p);
        assert_eq!(p.bus_id_str(), "0000:1b:00.0");
        assert!(PeerInfo::decode(&e[1..]).is_err());
    }

    #[test]
    fn identities_are_stable() {
        assert_eq!(host_hash(), host_hash());
        assert_eq!(process_token(), process_token());
        assert_eq!(fnv1a(b"abc"), 0xe71f_a219_0541_574b);
    }
}
