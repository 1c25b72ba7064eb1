//! Where a new symmetric mapping goes in the big space: pure bookkeeping, tested on the CPU.
//!
//! Every rank of a communicator keeps the ranges it has mapped in its slot of the flat space.
//! A new mapping must land at one offset on every rank, so it goes at the first offset free on
//! all of them: the ranks gather their used ranges and each computes the same answer. Usually
//! the ranges are the same everywhere; they differ only when a rank has deregistered a window the
//! others still hold (deregistration is local), and then the union keeps them apart.

/// One rank's used ranges `[offset, offset + len)`, sorted by offset.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Space {
    used: Vec<(u64, u64)>,
}

impl Space {
    /// Records `[off, off + len)` as used, keeping the ranges sorted.
    pub fn insert(&mut self, off: u64, len: u64) {
        let i = self.used.partition_point(|&(o, _)| o < off);
        self.used.insert(i, (off, len));
    }

    /// Frees the range starting at `off`; false if there is none.
    pub fn remove(&mut self, off: u64) -> bool {
        match self.used.iter().position(|&(o, _)| o == off) {
            Some(i) => {
                self.used.remove(i);
                true
            }
            None => false,
        }
    }

    /// The used ranges `(offset, len)`, sorted by offset.
    pub fn used(&self) -> &[(u64, u64)] {
        &self.used
    }

    /// The ranges as bytes, for the bootstrap: (offset, len) pairs, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        self.used.iter().flat_map(|&(o, l)| o.to_le_bytes().into_iter().chain(l.to_le_bytes())).collect()
    }

    /// Ranges encoded by `encode`; None if `b` is not a whole number of 16-byte pairs.
    pub fn decode(b: &[u8]) -> Option<Vec<(u64, u64)>> {
        if !b.len().is_multiple_of(16) {
            return None;
        }
        Some(
            b.chunks_exact(16)
                .map(|c| {
                    let (o, l) = c.split_at(8);
                    (u64::from_le_bytes(o.try_into().unwrap_or_default()), u64::from_le_bytes(l.try_into().unwrap_or_default()))
                })
                .collect(),
        )
    }
}

/// The least offset, a multiple of `align`, where `len` bytes fit below `limit` without touching
/// any range of any rank; None if there is no room.
pub fn first_fit(all: &[Vec<(u64, u64)>], len: u64, align: u64, limit: u64) -> Option<u64> {
    let align = align.max(1);
    let mut ranges: Vec<(u64, u64)> = all.iter().flatten().copied().collect();
    ranges.sort_unstable();
    let mut at = 0u64;
    for (o, l) in ranges {
        if o >= at && o - at >= len {
            break;
        }
        at = at.max(o.saturating_add(l).div_ceil(align).saturating_mul(align));
    }
    (at.checked_add(len)? <= limit).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_avoids_every_ranks_ranges() {
        const G: u64 = 2 << 20;
        assert_eq!(first_fit(&[vec![], vec![]], G, G, 10 * G), Some(0));
        // Same ranges everywhere: right after them.
        let a = vec![(0, G), (G, 2 * G)];
        assert_eq!(first_fit(&[a.clone(), a.clone()], G, G, 10 * G), Some(3 * G));
        // Rank 1 freed [G, 3G) but rank 0 still holds it: the hole is not free on both.
        let b = vec![(0, G)];
        assert_eq!(first_fit(&[a.clone(), b.clone()], G, G, 10 * G), Some(3 * G));
        // A hole free on both and large enough is reused.
        let c = vec![(0, G), (3 * G, G)];
        assert_eq!(first_fit(&[c.clone(), c.clone()], 2 * G, G, 10 * G), Some(G));
        assert_eq!(first_fit(&[c.clone(), c], 3 * G, G, 10 * G), Some(4 * G));
        // Unaligned ends round up; no room is None.
        assert_eq!(first_fit(&[vec![(0, 100)]], G, G, 10 * G), Some(G));
        assert_eq!(first_fit(&[vec![(0, 9 * G)]], 2 * G, G, 10 * G), None);
        assert_eq!(first_fit(&[vec![]], 10 * G, G, 10 * G), Some(0));
    }

    #[test]
    fn space_round_trips_and_frees() {
        let mut s = Space::default();
        s.insert(4096, 10);
        s.insert(0, 10);
        assert_eq!(s.used(), &[(0, 10), (4096, 10)]);
        assert_eq!(Space::decode(&s.encode()).unwrap(), s.used());
        assert!(s.remove(0));
        assert!(!s.remove(0));
        assert_eq!(s.used(), &[(4096, 10)]);
        assert!(Space::decode(&[0u8; 15]).is_none());
    }
}
