//! PortChannel triggers: what a GPU thread asks the proxy to do, packed into 128 bits
//! (layout in `device_abi::Trigger`; kernels/prims/fifo.cuh packs the same bits).

use crate::device_abi::{
    Trigger, OX_TRIGGER_COMMIT_SHIFT, OX_TRIGGER_DATA, OX_TRIGGER_DST_MEM_SHIFT, OX_TRIGGER_FLAG, OX_TRIGGER_MEMID_BITS,
    OX_TRIGGER_SEMID_BITS, OX_TRIGGER_SEMID_SHIFT, OX_TRIGGER_SRC_MEM_SHIFT, OX_TRIGGER_SYNC, OX_TRIGGER_TYPE_BITS,
    OX_TRIGGER_TYPE_SHIFT,
};
use crate::error::{Error, Result};

const fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// A decoded trigger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// OX_TRIGGER_DATA | OX_TRIGGER_FLAG | OX_TRIGGER_SYNC bits.
    pub kind: u64,
    /// Bytes to move (data requests).
    pub size: u32,
    /// Byte offset in the source memory.
    pub src_offset: u32,
    /// Byte offset in the destination memory.
    pub dst_offset: u32,
    /// The registered memory read from (a transport's memory id).
    pub src_mem: u16,
    /// The registered memory written to.
    pub dst_mem: u16,
    /// The semaphore a flag request signals.
    pub semaphore: u16,
}

impl Request {
    /// Moves data.
    pub fn is_data(&self) -> bool {
        self.kind & OX_TRIGGER_DATA != 0
    }
    /// Signals the peer's semaphore (after the data before it).
    pub fn is_flag(&self) -> bool {
        self.kind & OX_TRIGGER_FLAG != 0
    }
    /// Asks for a flush: the device waits until everything before it was carried out.
    pub fn is_sync(&self) -> bool {
        self.kind & OX_TRIGGER_SYNC != 0
    }

    /// Packs the request (commit bit clear: the FIFO sets it).
    pub fn encode(&self) -> Result<Trigger> {
        let fits = |v: u64, bits: u32, what: &str| {
            if v > mask(bits) {
                Err(Error::invalid_argument(format!("trigger {what} {v} does not fit {bits} bits")))
            } else {
                Ok(v)
            }
        };
        let kind = fits(self.kind, OX_TRIGGER_TYPE_BITS, "type")?;
        let src_mem = fits(self.src_mem.into(), OX_TRIGGER_MEMID_BITS, "source memory id")?;
        let dst_mem = fits(self.dst_mem.into(), OX_TRIGGER_MEMID_BITS, "destination memory id")?;
        let sem = fits(self.semaphore.into(), OX_TRIGGER_SEMID_BITS, "semaphore id")?;
        Ok(Trigger {
            fst: u64::from(self.size) | u64::from(self.src_offset) << 32,
            snd: u64::from(self.dst_offset)
                | src_mem << OX_TRIGGER_SRC_MEM_SHIFT
                | dst_mem << OX_TRIGGER_DST_MEM_SHIFT
                | kind << OX_TRIGGER_TYPE_SHIFT
                | sem << OX_TRIGGER_SEMID_SHIFT,
        })
    }

    /// Unpacks a trigger (the commit bit is ignored). Every bit pattern decodes; what it names is
    /// checked by the transport against its registered memories.
    pub fn decode(t: &Trigger) -> Request {
        Request {
            size: t.fst as u32,
            src_offset: (t.fst >> 32) as u32,
            dst_offset: t.snd as u32,
            src_mem: (t.snd >> OX_TRIGGER_SRC_MEM_SHIFT & mask(OX_TRIGGER_MEMID_BITS)) as u16,
            dst_mem: (t.snd >> OX_TRIGGER_DST_MEM_SHIFT & mask(OX_TRIGGER_MEMID_BITS)) as u16,
            kind: t.snd >> OX_TRIGGER_TYPE_SHIFT & mask(OX_TRIGGER_TYPE_BITS),
            semaphore: (t.snd >> OX_TRIGGER_SEMID_SHIFT & mask(OX_TRIGGER_SEMID_BITS)) as u16,
        }
    }
}

/// The commit bit a trigger at FIFO position `pos` carries: the inverse of its lap's parity, so
/// zeroed memory is never a committed trigger and a slot needs no clearing between laps.
pub fn commit_bit(pos: u64, size: u32) -> u64 {
    (((pos / u64::from(size)) & 1) ^ 1) << OX_TRIGGER_COMMIT_SHIFT
}

/// The commit bit of a trigger's first word: its parity tells a published slot from a stale one.
pub const COMMIT_MASK: u64 = 1 << OX_TRIGGER_COMMIT_SHIFT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_their_limits_and_leave_the_commit_bit_alone() {
        let r = Request { kind: 7, size: u32::MAX, src_offset: u32::MAX, dst_offset: u32::MAX, src_mem: 511, dst_mem: 511, semaphore: 1023 };
        let t = r.encode().unwrap();
        assert_eq!(t.snd & COMMIT_MASK, 0);
        assert_eq!(Request::decode(&t), r);
        let z = Request::default();
        assert_eq!(z.encode().unwrap(), Trigger { fst: 0, snd: 0 }, "an all-zero trigger is valid");
        for (i, r) in [
            Request { kind: OX_TRIGGER_DATA, size: 4096, src_offset: 1, dst_offset: 2, src_mem: 3, dst_mem: 4, semaphore: 5 },
            Request { kind: OX_TRIGGER_DATA | OX_TRIGGER_FLAG, semaphore: 1, ..Default::default() },
            Request { kind: OX_TRIGGER_SYNC, ..Default::default() },
        ]
        .into_iter()
        .enumerate()
        {
            let mut t = r.encode().unwrap();
            t.snd |= COMMIT_MASK;
            assert_eq!(Request::decode(&t), r, "case {i}");
        }
    }

    #[test]
    fn out_of_range_fields_are_rejected() {
        assert!(Request { src_mem: 512, ..Default::default() }.encode().is_err());
        assert!(Request { dst_mem: 600, ..Default::default() }.encode().is_err());
        assert!(Request { semaphore: 1024, ..Default::default() }.encode().is_err());
        assert!(Request { kind: 8, ..Default::default() }.encode().is_err());
    }

    #[test]
    fn commit_bit_alternates_per_lap() {
        assert_eq!(commit_bit(0, 4), COMMIT_MASK);
        assert_eq!(commit_bit(3, 4), COMMIT_MASK);
        assert_eq!(commit_bit(4, 4), 0);
        assert_eq!(commit_bit(8, 4), COMMIT_MASK);
        assert_eq!(commit_bit(u64::MAX, 1 << 31) >> 63, (((u64::MAX >> 31) & 1) ^ 1));
    }
}
