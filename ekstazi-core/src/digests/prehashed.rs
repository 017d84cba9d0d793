//! A hasher for map keys that are hashes already (function ids, which are
//! digests; keys made with a hash of their own): hashing them again with
//! SipHash costs more than the lookup. Only for keys nobody can choose to
//! collide, or whose collisions cost time and never a wrong answer.

/// Builds [`Prehashed`] hashers.
pub(crate) type PrehashedState = std::hash::BuildHasherDefault<Prehashed>;

/// Takes the last 8 bytes a key writes as the hash: an `[u8; 8]` writes
/// its length, then its bytes; a `u64` its bytes.
#[derive(Default)]
pub(crate) struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}
