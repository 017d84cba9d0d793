//! The seal every file cargo-ekstazi keeps is wrapped in, and the
//! compression of what is kept packed.
//!
//! ```text
//! magic: 4 bytes | format version: u16 LE | body length: u32 LE | body | blake3(everything before)
//! ```
//! A sealed file is accepted only whole: right magic, this format version,
//! a length that matches the file, an intact digest and a body that decodes
//! completely. Anything else is a [`DecodeError`]. The magic tells the kinds
//! apart (`EKZR` a record, see `model::record`; the others are named where
//! their files are written).
//!
//! The digest detects damage, not forgery: anyone can compute it. With a
//! key ([`use_key`], from a secret a CI sets), the digest is blake3's keyed
//! hash instead, which no one without the secret can compute; a file
//! sealed without the key is then refused ([`DecodeError::Unkeyed`]), so
//! its test runs. One key holds for the whole process.

use std::cell::RefCell;
use std::sync::OnceLock;

/// The key every seal of this process is made and checked with, if any.
static KEY: OnceLock<[u8; 32]> = OnceLock::new();

/// Seals and checks every file with a key derived from `secret`, from now
/// on (once per process; a second call changes nothing).
pub fn use_key(secret: &[u8]) {
    let _ = KEY.set(blake3::derive_key("cargo-ekstazi 2026 seal key", secret));
}

/// Whether seals are keyed.
pub fn keyed() -> bool {
    KEY.get().is_some()
}

/// The digest that seals `signed`: keyed when there is a key.
fn digest_of(key: Option<&[u8; 32]>, signed: &[u8]) -> blake3::Hash {
    match key {
        Some(key) => blake3::keyed_hash(key, signed),
        None => blake3::hash(signed),
    }
}

/// Bumped whenever the body or the meaning of a checksum changes.
pub const FORMAT_VERSION: u16 = 11;

const HEADER: usize = 4 + 2 + 4;
const DIGEST: usize = 32;

/// Wraps a serialised body: magic, format version, length, body, digest.
pub(crate) fn seal(magic: &[u8; 4], body: &[u8]) -> Vec<u8> {
    seal_with(KEY.get(), magic, body)
}

fn seal_with(key: Option<&[u8; 32]>, magic: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let body_len = u32::try_from(body.len()).expect("a body fits in 4 GiB");
    let mut out = Vec::with_capacity(HEADER + body.len() + DIGEST);
    out.extend_from_slice(magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(body);
    let digest = digest_of(key, &out);
    out.extend_from_slice(digest.as_bytes());
    out
}

/// Checks a sealed body whole and decodes it (a type that borrows, such as
/// `&str`, borrows from `bytes`).
pub(crate) fn open<'a, T: serde::Deserialize<'a>>(
    magic: &[u8; 4],
    bytes: &'a [u8],
) -> Result<T, DecodeError> {
    let (value, rest) =
        postcard::take_from_bytes(open_raw(magic, bytes)?).map_err(|_| DecodeError::BadBody)?;
    if !rest.is_empty() {
        return Err(DecodeError::BadBody);
    }
    Ok(value)
}

/// Checks sealed bytes whole and returns their body, undecoded.
pub(crate) fn open_raw<'a>(magic: &[u8; 4], bytes: &'a [u8]) -> Result<&'a [u8], DecodeError> {
    open_raw_with(KEY.get(), magic, bytes)
}

fn open_raw_with<'a>(
    key: Option<&[u8; 32]>,
    magic: &[u8; 4],
    bytes: &'a [u8],
) -> Result<&'a [u8], DecodeError> {
    if bytes.len() < HEADER + DIGEST {
        return Err(DecodeError::Truncated);
    }
    if &bytes[..4] != magic {
        return Err(DecodeError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(DecodeError::OtherVersion(version));
    }
    let body_len = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    if body_len != bytes.len() - HEADER - DIGEST {
        return Err(if body_len > bytes.len() - HEADER - DIGEST {
            DecodeError::Truncated
        } else {
            DecodeError::BadLength
        });
    }
    let (signed, digest) = bytes.split_at(HEADER + body_len);
    if digest_of(key, signed).as_bytes() != digest {
        // Intact, but sealed by someone without the key.
        if key.is_some() && blake3::hash(signed).as_bytes() == digest {
            return Err(DecodeError::Unkeyed);
        }
        return Err(DecodeError::BadDigest);
    }
    Ok(&signed[HEADER..])
}

/// The digest sealed bytes end with: what names a history object, so that
/// checking the seal also checks the name.
pub(crate) fn sealed_digest(sealed: &[u8]) -> Option<[u8; DIGEST]> {
    sealed
        .get(sealed.len().checked_sub(DIGEST)?..)?
        .try_into()
        .ok()
}

/// Compresses sealed bytes for keeping (function table segments, history
/// objects): names and paths repeat, and zstd at its default level costs
/// little next to the write.
pub(crate) fn pack(sealed: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(sealed, 0).expect("compressing to memory cannot fail")
}

/// Decompresses packed bytes, refusing anything that would exceed `limit`.
pub(crate) fn unpack(packed: &[u8], limit: u64) -> Option<Vec<u8>> {
    thread_local! {
        // One decompression context per thread, reused: making one per
        // call (zstd's stream decoder does) took 39 % of an analysis that
        // read ~1 000 history objects (ripgrep, `perf`), more than the
        // decompression itself.
        static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { RefCell::new(None) };
    }
    let capacity = usize::try_from(limit).ok()?;
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = zstd::bulk::Decompressor::new().ok();
        }
        // The buffer is the size the frame declares, capped at `limit`;
        // output beyond the buffer is an error, not a larger allocation.
        cell.as_mut()?.decompress(packed, capacity).ok()
    })
}

/// Why a record was not accepted. Every variant means: run the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record is truncated")]
    Truncated,
    #[error("not a cargo-ekstazi record (bad magic)")]
    BadMagic,
    #[error("record has format version {0}, this cargo-ekstazi reads version {FORMAT_VERSION}")]
    OtherVersion(u16),
    #[error("record length does not match its file")]
    BadLength,
    #[error("record failed its integrity check")]
    BadDigest,
    #[error("record was sealed without the key (EKSTAZI_SEAL_KEY is set): not trusted")]
    Unkeyed,
    #[error("record body does not decode")]
    BadBody,
    #[error("record names a path outside its anchor")]
    BadPath,
    #[error("record belongs to another test")]
    OtherTest,
    #[error("record file is larger than any record")]
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_seal_opens_with_its_key_only() {
        let (key, other) = ([1u8; 32], [2u8; 32]);
        let keyed = seal_with(Some(&key), b"TEST", b"body");
        let plain = seal_with(None, b"TEST", b"body");
        assert_eq!(open_raw_with(Some(&key), b"TEST", &keyed), Ok(&b"body"[..]));
        assert_eq!(
            open_raw_with(Some(&key), b"TEST", &plain),
            Err(DecodeError::Unkeyed)
        );
        assert_eq!(
            open_raw_with(Some(&other), b"TEST", &keyed),
            Err(DecodeError::BadDigest)
        );
        assert_eq!(
            open_raw_with(None, b"TEST", &keyed),
            Err(DecodeError::BadDigest)
        );
        assert_eq!(open_raw_with(None, b"TEST", &plain), Ok(&b"body"[..]));
    }

    #[test]
    fn unpacking_stops_at_the_limit_whatever_the_frame_declares() {
        let bytes = vec![7u8; 4096];
        let packed = pack(&bytes);
        assert_eq!(unpack(&packed, 4096).as_deref(), Some(&bytes[..]));
        assert_eq!(unpack(&packed, 4095), None);
        // A frame that does not declare its size (the stream encoder's).
        let mut undeclared = Vec::new();
        let mut encoder = zstd::stream::write::Encoder::new(&mut undeclared, 0).unwrap();
        std::io::Write::write_all(&mut encoder, &bytes).unwrap();
        encoder.finish().unwrap();
        assert_eq!(unpack(&undeclared, 4096).as_deref(), Some(&bytes[..]));
        assert_eq!(unpack(&undeclared, 4095), None);
        // Two frames: their total counts.
        let twice = [packed.clone(), packed].concat();
        assert_eq!(unpack(&twice, 8192).map(|b| b.len()), Some(8192));
        assert_eq!(unpack(&twice, 8191), None);
        assert_eq!(unpack(b"not zstd", 4096), None);
        // The context is reused after a failure.
        assert_eq!(unpack(&pack(b"after"), 16).as_deref(), Some(&b"after"[..]));
    }
}
