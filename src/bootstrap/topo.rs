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
    *H.get_or_init(|| match env("OXCCL_HOSTID").or_else(|| env("NCCL_HOSTID")) {
        Some(id) => fnv1a(id.as_bytes()),
        None => machine_hash(),
    })
}

/// Identifies the machine whatever NCCL_HOSTID says (hostname + boot id): the processes that share
/// its cores, also when hosts are simulated on one machine.
pub fn machine_hash() -> u64 {
    static H: OnceLock<u64> = OnceLock::new();
    *H.get_or_init(|| {
        let mut s = hostname();
        if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
            s.push_str(boot.trim());
        }
        fnv1a(s.as_bytes())
    })
}

/// Identifies the network stack: the machine and its network namespace. Ranks that share one share
/// its loopback; hosts simulated in namespaces of their own (`bench/netsim.sh`) each have a
/// link of their own, as separate machines do (`net::plan::hosts_apart`).
pub fn network_hash() -> u64 {
    static H: OnceLock<u64> = OnceLock::new();
    *H.get_or_init(|| {
        let mut s = machine_hash().to_le_bytes().to_vec();
        // "net:[4026531840]": the namespace's inode, the same for every process in it.
        if let Ok(ns) = std::fs::read_link("/proc/self/ns/net") {
            s.extend_from_slice(ns.as_os_str().as_encoded_bytes());
        }
        fnv1a(&s)
    })
}

/// The CPUs this process may use (its affinity mask and cgroup quota; 1 if unknown).
pub fn cpus() -> usize {
    // Asked once: std reads the cgroup's CPU quota from files at every call (tens of us, more
    // than a small step's whole reduction).
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// This host's name (gethostname), for logs.
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
    /// Its rank.
    pub rank: u32,
    /// Its host (NCCL_HOSTID where set): ranks with equal hashes share a host.
    pub host_hash: u64,
    /// Its process (`process_token`).
    pub process: u64,
    /// Its process id, for logs.
    pub pid: u32,
    /// Its CUDA device ordinal, in its own process.
    pub device: i32,
    /// Its GPU's compute capability, major.
    pub cc_major: i32,
    /// Its GPU's compute capability, minor.
    pub cc_minor: i32,
    /// SMs of its GPU, capped by its maxCTAs (block_budget): the blocks its kernels may use.
    pub sm_count: i32,
    /// PCI bus id, NUL-padded.
    pub bus_id: [u8; 16],
    /// The transports it chose (net::select::Paths::code); every rank must choose alike.
    pub paths: u32,
    /// Its machine (`machine_hash`) and the CPUs it may use (`usable_cpus`): how many threads
    /// can spin there (transport::link::Spin).
    pub machine: u64,
    /// The CPUs it may use (`usable_cpus`).
    pub cpus: u32,
    /// Its network stack (`network_hash`): which ranks share a loopback rather than links.
    pub network: u64,
    /// Its GPU (`gpu_hash`) and that GPU's SMs: ranks with the same `gpu` share those SMs
    /// (`share_gpus`).
    pub gpu: u64,
    /// That GPU's SMs.
    pub gpu_sms: i32,
    /// Its communicator config's CTA policy (NCCL_CTA_POLICY_*): ranks must agree
    /// (algo::policy::agree).
    pub cta_policy: i32,
    /// A hash of the OXCCL_* tuning it read (`Tuning`'s values): every rank must read the same,
    /// or the selectors choose differently on different ranks.
    pub tuning: u64,
}

impl PeerInfo {
    /// Encoded length.
    pub const BYTES: usize = 4 + 8 + 8 + 4 + 4 * 4 + 16 + 4 + 8 + 4 + 8 + 8 + 4 + 4 + 8;

    /// Whether `o` is on the same host.
    pub fn same_host(&self, o: &PeerInfo) -> bool {
        self.host_hash == o.host_hash
    }
    /// Whether `o` is in the same process.
    pub fn same_process(&self, o: &PeerInfo) -> bool {
        self.same_host(o) && self.process == o.process
    }
    /// The PCI bus id as text.
    pub fn bus_id_str(&self) -> String {
        let end = self.bus_id.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.bus_id[..end]).into_owned()
    }

    /// The bytes sent to the other ranks.
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
        v.extend_from_slice(&self.paths.to_le_bytes());
        v.extend_from_slice(&self.machine.to_le_bytes());
        v.extend_from_slice(&self.cpus.to_le_bytes());
        v.extend_from_slice(&self.network.to_le_bytes());
        v.extend_from_slice(&self.gpu.to_le_bytes());
        v.extend_from_slice(&self.gpu_sms.to_le_bytes());
        v.extend_from_slice(&self.cta_policy.to_le_bytes());
        v.extend_from_slice(&self.tuning.to_le_bytes());
        v
    }

    /// Parses another rank's `encode`; a wrong length is an error.
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
            paths: u32at(56),
            machine: u64at(60),
            cpus: u32at(68),
            network: u64at(72),
            gpu: u64at(80),
            gpu_sms: u32at(88) as i32,
            cta_policy: u32at(92) as i32,
            tuning: u64at(96),
        })
    }
}

/// The thread blocks one of this rank's kernels may use: the GPU's SMs (every oxccl kernel runs one
/// block per SM at most), capped by the communicator's maxCTAs (ncclConfig_t, NCCL_MAX_CTAS) when
/// that is below NCCL's channel maximum, its default. So maxCTAs 64 (the default) leaves oxccl's
/// own grid choices (up to 128 blocks on H200) and a lower value caps every launch, as NCCL caps
/// its channels: what a user lowers it for is to leave SMs to other work, such as another
/// communicator's kernels, which must fit on the GPU alongside for both to make progress.
/// Ranks take the minimum over the communicator, so every rank derives the same grids.
pub fn block_budget(sm_count: i32, max_ctas: i32) -> i32 {
    if (1..crate::config::MAX_CHANNELS).contains(&max_ctas) {
        sm_count.min(max_ctas)
    } else {
        sm_count
    }
}

/// Identifies a GPU's SMs across processes and hosts: its UUID (a MIG instance's under MIG, which
/// has SMs of its own), or where the driver gave none, the machine and the PCI bus id.
pub fn gpu_hash(uuid: &[u8; 16], bus_id: &str) -> u64 {
    if uuid.iter().any(|&b| b != 0) {
        fnv1a(uuid)
    } else {
        fnv1a(format!("{:016x}{bus_id}", machine_hash()).as_bytes())
    }
}

/// Ranks of one communicator on one GPU: every oxccl kernel takes up to one block per SM, and a
/// kernel waiting on a peer's kernel can only finish if that kernel gets SMs too. Ranks sharing a
/// GPU (a test layout NCCL refuses within a host; oxccl runs it, under MPS side by side) all spin at
/// once, so with full grids the first ones in filled the SMs and their peers never started: under
/// MPS, 3 simulated hosts x 2 ranks on one H200 hung at its first AllReduce with 32 blocks per
/// rank and passed with 16 or 8 (BENCHMARKS.md of 2026-11-29, a4938b6). So each of the k ranks on a GPU of
/// S SMs gets at most S / 2k blocks: all of them fit at once, with room for each one's next kernel
/// launched early (PDL). Lowers `sm_count` (the budget) in place, the same way on every rank.
/// Returns how many ranks share `me`'s GPU.
pub fn share_gpus(peers: &mut [PeerInfo], me: usize) -> usize {
    let mut ranks_on: std::collections::HashMap<u64, i32> = std::collections::HashMap::new();
    for p in peers.iter() {
        *ranks_on.entry(p.gpu).or_default() += 1;
    }
    for p in peers.iter_mut() {
        let k = ranks_on.get(&p.gpu).copied().unwrap_or(1);
        if k > 1 {
            p.sm_count = p.sm_count.min((p.gpu_sms / (2 * k)).max(1));
        }
    }
    peers.get(me).and_then(|m| ranks_on.get(&m.gpu)).map_or(1, |&k| k as usize)
}

/// Parses a Linux CPU list ("0-3,8,10-11"); None if malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?),
            None => {
                let v = part.trim().parse::<usize>().ok()?;
                (v, v)
            }
        };
        if lo > hi || hi >= 1 << 16 {
            return None;
        }
        out.extend(lo..=hi);
    }
    (!out.is_empty()).then_some(out)
}

/// The CPUs nearest a PCI device ("0000:3b:00.0"), from sysfs; None where unknown.
pub fn local_cpus(bus_id: &str) -> Option<Vec<usize>> {
    let path = format!("/sys/bus/pci/devices/{}/local_cpulist", bus_id.to_ascii_lowercase());
    parse_cpulist(&std::fs::read_to_string(path).ok()?)
}

/// Restricts the calling thread to `cpus` (those the process may use); best effort, logged.
pub fn bind_current_thread(cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET/sched_* get valid pointers and sizes.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut any = false;
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            if libc::CPU_ISSET(c, &allowed) {
                libc::CPU_SET(c, &mut set);
                any = true;
            }
        }
        if any && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
            nccl_trace!(crate::log::Subsys::Init, "thread bound to CPUs {cpus:?} (those allowed)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ctas_below_the_channel_maximum_caps_the_blocks() {
        assert_eq!(block_budget(132, 64), 132, "NCCL's default (and maximum) leaves oxccl's choice");
        assert_eq!(block_budget(132, 16), 16);
        assert_eq!(block_budget(132, 1), 1);
        assert_eq!(block_budget(8, 16), 8, "never more than the SMs");
        assert_eq!(block_budget(132, 0), 132, "not a valid cap");
    }

    #[test]
    fn ranks_sharing_a_gpu_split_its_sms() {
        let peer = |rank: u32, gpu: u64, budget: i32| PeerInfo {
            rank,
            host_hash: rank as u64, // simulated hosts apart: the GPU still says who shares
            process: rank as u64,
            pid: rank,
            device: 0,
            cc_major: 9,
            cc_minor: 0,
            sm_count: budget,
            bus_id: [0; 16],
            paths: 0,
            machine: 1,
            cpus: 16,
            network: 0,
            gpu,
            gpu_sms: 132,
            cta_policy: 0,
            tuning: 0,
        };
        // 3 hosts x 2 on one GPU: 132 / 12 = 11 blocks each (16 and 8 passed on the H200, 32 hung).
        let mut six: Vec<_> = (0..6).map(|r| peer(r, 7, 132)).collect();
        assert_eq!(share_gpus(&mut six, 2), 6);
        assert!(six.iter().all(|p| p.sm_count == 11), "{:?}", six.iter().map(|p| p.sm_count).collect::<Vec<_>>());
        // A lower maxCTAs stays; two GPUs with 1 and 3 ranks: only the shared one is split.
        let mut mixed = vec![peer(0, 1, 132), peer(1, 2, 132), peer(2, 2, 8), peer(3, 2, 132)];
        assert_eq!(share_gpus(&mut mixed, 0), 1);
        assert_eq!(mixed.iter().map(|p| p.sm_count).collect::<Vec<_>>(), vec![132, 22, 8, 22]);
        assert_eq!(share_gpus(&mut mixed, 3), 3);
        // One GPU each: unchanged.
        let mut apart: Vec<_> = (0..4).map(|r| peer(r, r as u64, 132)).collect();
        assert_eq!(share_gpus(&mut apart, 1), 1);
        assert!(apart.iter().all(|p| p.sm_count == 132));
        // Never below one block, however many share.
        let mut many: Vec<_> = (0..300).map(|r| peer(r, 9, 132)).collect();
        share_gpus(&mut many, 0);
        assert!(many.iter().all(|p| p.sm_count == 1));
        assert_ne!(gpu_hash(&[1; 16], "0000:1b:00.0"), gpu_hash(&[2; 16], "0000:1b:00.0"));
        assert_ne!(gpu_hash(&[0; 16], "0000:1b:00.0"), gpu_hash(&[0; 16], "0000:1c:00.0"));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), None);
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a-b"), None);
        assert_eq!(parse_cpulist("0-99999999"), None);
        bind_current_thread(&[0]); // best effort, must not fail or panic
    }

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
            paths: 0x21,
            machine: 0x0123_4567_89ab_cdef,
            cpus: 64,
            network: 0xfeed_0000_0000_beef,
            gpu: 0x1111_2222_3333_4444,
            gpu_sms: 132,
            cta_policy: 2,
            tuning: 0x0123_4567_89ab_cdef,
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
