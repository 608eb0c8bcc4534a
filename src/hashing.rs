//! A fast hash for the planner's own keys: value names and ids.
//!
//! The standard library's SipHash resists collision attacks by a keyed hash, and pays for
//! it per byte: hashing every name of a million-op step was a tenth of parsing it and a
//! fifth of expanding it. The keys here come from the user's own step and only find
//! entries (the order of a map hashed this way is never seen), so a plain multiplicative
//! hash is enough: words are folded in as rustc's FxHash does (a rotate, a xor, a
//! multiply) and mixed at the end with MurmurHash3's finaliser, without which names that
//! differ only in their last digits share their low bits, which pick the bucket.
//!
//! A crafted step could make its names collide; that costs its author time, never a
//! wrong answer.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` hashed with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// The hasher of [`FastMap`] and [`FastSet`] (see the module doc).
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        z ^ (z >> 33)
    }
}

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Names that differ only in their last digits land in different buckets of a small
    /// table (the finaliser spreads the multiply's high bits down).
    #[test]
    fn numbered_names_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<FastHasher>::default();
        let buckets: FastSet<u64> = (0..1024).map(|k| build.hash_one(format!("h{k}")) & 1023).collect();
        assert!(buckets.len() > 550, "{} of 1024 buckets", buckets.len());
    }

    #[test]
    fn maps_find_what_they_hold() {
        let mut map: FastMap<String, usize> = FastMap::default();
        for k in 0..10_000 {
            map.insert(format!("%x.grad.t{k}"), k);
        }
        assert!((0..10_000).all(|k| map[&format!("%x.grad.t{k}")] == k));
        assert!(!map.contains_key("%x.grad.t10000"));
    }
}
