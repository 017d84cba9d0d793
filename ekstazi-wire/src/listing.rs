//! The per-entry hashes of a listing witness (`ekstazi_core`'s
//! `ListingWitness`): the shim hashes the entries it saw listed, the runner
//! the entries present now, and the two must agree bit for bit.

/// FNV-1a over the kind and the name, spread by MurmurHash3's finaliser;
/// the second hash finalises the first once more with another seed.
pub fn entry_hashes(name: &[u8], kind: u8) -> (u64, u64) {
    fn fmix(mut h: u64) -> u64 {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(&kind).chain(name) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let h1 = fmix(h);
    (h1, fmix(h1 ^ 0x9e37_79b9_7f4a_7c15))
}
