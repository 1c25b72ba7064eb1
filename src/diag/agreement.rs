//! OXCCL_CHECK=1: before each collective, the ranks of the communicator agree on what they are
//! about to run (sequence number, collective, datatype, op, count, root) over the bootstrap. A
//! mismatch, which with NCCL would hang or corrupt data, becomes ncclInvalidUsage on every rank,
//! with a WARN naming which ranks asked for what. Off by default; when off it costs one branch.

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::types::{Coll, DataType, RedOp};

/// What every rank must agree on for one collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The communicator's collective number (counted per rank from 0).
    pub seq: u64,
    /// The collective (its code here, `COLL_NAMES`).
    pub coll: u8,
    /// The datatype's NCCL value.
    pub dtype: u8,
    /// The reduction's kind (PreMulSum scalars may differ per rank).
    pub op: u8,
    /// The root of a rooted collective, else -1.
    pub root: i32,
    /// NCCL's count argument.
    pub count: u64,
}

const BYTES: usize = 24;

const COLL_NAMES: [&str; 8] = ["AllReduce", "ReduceScatter", "Reduce", "AllGather", "Broadcast", "AlltoAll", "Gather", "Scatter"];

fn coll_code(c: Coll) -> u8 {
    match c {
        Coll::AllReduce => 0,
        Coll::ReduceScatter => 1,
        Coll::Reduce => 2,
        Coll::AllGather => 3,
        Coll::Broadcast => 4,
        Coll::AlltoAll => 5,
        Coll::Gather => 6,
        Coll::Scatter => 7,
    }
}

impl Signature {
    /// The signature of one call (`op` 0 where it does not reduce, `root` -1 where unrooted).
    pub fn of(coll: Coll, dtype: DataType, op: RedOp, root: i32, count: u64, seq: u64) -> Signature {
        let reduces = matches!(coll, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce);
        let rooted = matches!(coll, Coll::Reduce | Coll::Broadcast | Coll::Gather | Coll::Scatter);
        Signature {
            seq,
            coll: coll_code(coll),
            dtype: dtype as u8,
            op: if reduces { op as u8 } else { 0 },
            root: if rooted { root } else { -1 },
            count,
        }
    }

    fn encode(&self) -> [u8; BYTES] {
        let mut b = [0u8; BYTES];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8] = self.coll;
        b[9] = self.dtype;
        b[10] = self.op;
        b[12..16].copy_from_slice(&self.root.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Signature> {
        let b: &[u8; BYTES] = b.try_into().map_err(|_| Error::system(format!("OXCCL_CHECK: signature of {} bytes", b.len())))?;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(Signature {
            seq: u64_at(0),
            coll: b[8],
            dtype: b[9],
            op: b[10],
            root: i32::from_le_bytes([b[12], b[13], b[14], b[15]]),
            count: u64_at(16),
        })
    }

    fn describe(&self) -> String {
        let coll = COLL_NAMES.get(self.coll as usize).copied().unwrap_or("?");
        let dt = DataType::from_raw(i32::from(self.dtype)).map_or("?", |d| d.name());
        let mut s = format!("#{} {coll} {dt} count {}", self.seq, self.count);
        if self.coll <= 2 {
            s.push_str(&format!(" op {}", RedOp::builtin(i32::from(self.op)).map_or("premulsum", |o| o.name())));
        }
        if self.root >= 0 {
            s.push_str(&format!(" root {}", self.root));
        }
        s
    }
}

/// Ok if every rank's signature is the same; else the error every rank reports.
pub fn compare(all: &[Signature]) -> Result<()> {
    let Some(first) = all.first() else { return Ok(()) };
    if all.iter().all(|s| s == first) {
        return Ok(());
    }
    let mut groups: Vec<(Signature, Vec<usize>)> = Vec::new();
    for (r, s) in all.iter().enumerate() {
        match groups.iter_mut().find(|(g, _)| g == s) {
            Some((_, ranks)) => ranks.push(r),
            None => groups.push((*s, vec![r])),
        }
    }
    let parts: Vec<String> = groups.iter().map(|(s, ranks)| format!("ranks {ranks:?}: {}", s.describe())).collect();
    Err(Error::invalid_usage(format!("OXCCL_CHECK: ranks disagree on the next collective: {}", parts.join("; "))))
}

/// Collective over the communicator's ranks: exchanges signatures and compares them.
pub fn agree(bs: &Bootstrap, mine: Signature) -> Result<()> {
    let all = bs.all_gather(&mine.encode())?.iter().map(|b| Signature::decode(b)).collect::<Result<Vec<_>>>()?;
    compare(&all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    fn sig(seq: u64, coll: u8, count: u64, root: i32) -> Signature {
        Signature { seq, coll, dtype: 7, op: 0, root, count }
    }

    #[test]
    fn agreement_and_a_mismatch_that_names_the_ranks() {
        assert!(compare(&[sig(3, 0, 1024, -1); 4]).is_ok());
        let e = compare(&[sig(3, 0, 1024, -1), sig(3, 0, 1000, -1), sig(3, 0, 1024, -1)]).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidUsage);
        assert!(e.msg.contains("ranks [0, 2]: #3 AllReduce f32 count 1024 op sum"), "{}", e.msg);
        assert!(e.msg.contains("ranks [1]: #3 AllReduce f32 count 1000"), "{}", e.msg);
        let e = compare(&[sig(0, 4, 8, 0), sig(0, 4, 8, 1)]).unwrap_err();
        assert!(e.msg.contains("Broadcast") && e.msg.contains("root 1"), "{}", e.msg);
        let e = compare(&[sig(5, 0, 8, -1), sig(6, 0, 8, -1)]).unwrap_err();
        assert!(e.msg.contains("#5") && e.msg.contains("#6"), "a rank that skipped a collective: {}", e.msg);
    }

    #[test]
    fn signatures_round_trip() {
        let s = Signature { seq: u64::MAX, coll: 7, dtype: 11, op: 5, root: i32::MIN, count: 1 << 40 };
        assert_eq!(Signature::decode(&s.encode()).unwrap(), s);
        assert!(Signature::decode(&[0; 23]).is_err());
    }

    /// Over real bootstraps: every rank sees the same error when one rank disagrees.
    #[test]
    fn every_rank_reports_the_mismatch() {
        // Takes the process-wide encryption setting: no test changes it meanwhile.
        let _setting = crate::tls::tests_read_setting();
        let id = crate::bootstrap::get_unique_id().unwrap();
        let t = std::time::Duration::from_secs(20);
        let res: Vec<Result<()>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    s.spawn(move || {
                        let bs = Bootstrap::init(&id, r, 3, t).unwrap();
                        agree(&bs, sig(0, 0, 64, -1))?;
                        agree(&bs, sig(1, 0, if r == 2 { 32 } else { 64 }, -1))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in &res {
            let e = r.as_ref().unwrap_err();
            assert!(e.msg.contains("ranks [0, 1]") && e.msg.contains("ranks [2]"), "{}", e.msg);
        }
    }
}
