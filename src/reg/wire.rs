//! What one rank tells a peer about a buffer it registered: one fixed-size message per event,
//! sent over a Unix seqpacket socket (a POSIX file descriptor rides along for cuMem buffers).

use crate::error::{Error, Result};
use crate::gpu::ipc::IPC_HANDLE_BYTES;

const MAGIC: u32 = 0x6f78_7267; // "oxrg"

/// How the receiving rank maps the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// cuMemAlloc/cudaMalloc memory: open `handle` (a CUDA IPC handle of the allocation).
    Ipc,
    /// cuMem (VMM) memory: import the POSIX file descriptor sent with the message.
    Fd,
    /// Same process: use `base` as it is (the sender checked the receiver's GPU may access it).
    Ptr,
    /// The registration `gen` is gone: forget and unmap it.
    Dead,
}

impl Kind {
    fn code(self) -> u32 {
        match self {
            Kind::Ipc => 1,
            Kind::Fd => 2,
            Kind::Ptr => 3,
            Kind::Dead => 4,
        }
    }
    fn from_code(c: u32) -> Option<Kind> {
        Some(match c {
            1 => Kind::Ipc,
            2 => Kind::Fd,
            3 => Kind::Ptr,
            4 => Kind::Dead,
            _ => return None,
        })
    }
}

/// One registration message between ranks of a host: an allocation announced, or withdrawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Msg {
    /// How the allocation is shared (or that it is withdrawn).
    pub kind: Kind,
    /// The registering rank.
    pub rank: u32,
    /// The registration's generation (its table slot is gen % OX_REG_SLOTS).
    pub gen: u64,
    /// The whole allocation holding the buffer, in the registering rank's address space.
    pub base: u64,
    /// The allocation's length in bytes.
    pub size: u64,
    /// The CUDA IPC handle (Kind::Ipc), else zero.
    pub handle: [u8; IPC_HANDLE_BYTES],
}

impl Msg {
    /// Encoded length: magic, kind, rank, padding, gen, base, size, handle.
    pub const BYTES: usize = 4 + 4 + 4 + 4 + 8 + 8 + 8 + IPC_HANDLE_BYTES;

    /// The withdrawal of `rank`'s registration `gen`.
    pub fn dead(rank: u32, gen: u64) -> Msg {
        Msg { kind: Kind::Dead, rank, gen, base: 0, size: 0, handle: [0; IPC_HANDLE_BYTES] }
    }

    /// The message's bytes.
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.kind.code().to_le_bytes());
        b[8..12].copy_from_slice(&self.rank.to_le_bytes());
        b[16..24].copy_from_slice(&self.gen.to_le_bytes());
        b[24..32].copy_from_slice(&self.base.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..].copy_from_slice(&self.handle);
        b
    }

    /// Parses a message; a wrong length, magic or kind is an error.
    pub fn decode(b: &[u8]) -> Result<Msg> {
        if b.len() != Self::BYTES {
            return Err(Error::internal(format!("registration message of {} bytes, expected {}", b.len(), Self::BYTES)));
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        if u32_at(0) != MAGIC {
            return Err(Error::internal("registration message with a bad magic number"));
        }
        let kind = Kind::from_code(u32_at(4)).ok_or_else(|| Error::internal(format!("registration message of kind {}", u32_at(4))))?;
        let mut handle = [0u8; IPC_HANDLE_BYTES];
        handle.copy_from_slice(&b[40..]);
        Ok(Msg { kind, rank: u32_at(8), gen: u64_at(16), base: u64_at(24), size: u64_at(32), handle })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_reject_garbage() {
        for kind in [Kind::Ipc, Kind::Fd, Kind::Ptr, Kind::Dead] {
            let m = Msg { kind, rank: 3, gen: 0x1_0000_0007, base: 0x7f00_1234_0000, size: 64 << 20, handle: [9; IPC_HANDLE_BYTES] };
            assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
        }
        let good = Msg::dead(1, 5).encode();
        assert!(Msg::decode(&good[..Msg::BYTES - 1]).is_err(), "short");
        let mut bad = good;
        bad[0] ^= 1;
        assert!(Msg::decode(&bad).is_err(), "magic");
        let mut bad = good;
        bad[4] = 9;
        assert!(Msg::decode(&bad).is_err(), "kind");
    }
}
