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
pub const FORMAT_VERSION: u16 = 12;

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

/// The name of sealed bytes: the digest they end with.
pub(crate) fn name_of(sealed: &[u8]) -> std::io::Result<[u8; DIGEST]> {
    sealed_digest(sealed).ok_or_else(|| std::io::Error::other("sealed bytes too short"))
}

/// Whether sealed bytes read under `name` are sealed with that name (a
/// history object, a base's link): checking the seal then checks the name.
pub(crate) fn named(sealed: &[u8], name: &[u8; DIGEST]) -> bool {
    sealed_digest(sealed).is_some_and(|digest| digest == *name)
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

/// zstd's level for what is written once and kept long, [`pack_kept`].
pub(crate) const KEPT_LEVEL: i32 = 9;

/// [`pack`], harder, for what is written once and kept as long as its
/// build or its records (code snapshots, function table segments): on
/// coreutils' multicall program, a 17.0 MB snapshot took 3.10 MB at
/// level 9 against 3.41 MB at 3, in 0.25 s against 0.06 s.
pub(crate) fn pack_kept(sealed: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(sealed, KEPT_LEVEL).expect("compressing to memory cannot fail")
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

/// The largest zstd window, as a power of two, that a packed file of ours
/// is streamed with: 4 MiB. `pack` (zstd's level 3) never uses more than
/// 2 MiB (a window log of 21), and a stream decoder holds a whole window:
/// at zstd's own default limit (a log of 27), a hostile frame with a
/// 128 MiB window cost 136 MiB resident (measured); refused here at its
/// header, before anything is decompressed.
pub const WINDOW_LOG_MAX: u32 = 22;

/// What a packed file of ours may unpack to at once, without first being
/// checked as a stream: ripgrep's manifests (1 165 tests) are 47 KB each
/// packed, so the common case costs one decompression.
pub(crate) const SMALL: u64 = 1 << 20;

/// Held while a large file (over [`SMALL`], packed or not) is read,
/// unpacked and used: one at a time across threads, so that the threads
/// reading a history in parallel hold at most one large manifest between
/// them, not one each. A thread that holds it already (a merge reading the
/// destination's manifest while it holds the source's) goes on.
pub(crate) fn one_large_at_a_time() -> Large {
    static LARGE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if HOLDING.get() {
        return Large(None);
    }
    let guard = LARGE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    HOLDING.set(true);
    Large(Some(guard))
}

thread_local! {
    /// This thread holds [`one_large_at_a_time`].
    static HOLDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// See [`one_large_at_a_time`].
pub(crate) struct Large(Option<std::sync::MutexGuard<'static, ()>>);

impl Drop for Large {
    fn drop(&mut self) {
        if self.0.take().is_some() {
            HOLDING.set(false);
        }
    }
}

/// Whether packed bytes declare, in their first frame's header, that they
/// unpack to no more than [`SMALL`] (what [`pack`] writes declares it).
pub(crate) fn declares_small(packed: &[u8]) -> bool {
    zstd::zstd_safe::get_frame_content_size(packed)
        .ok()
        .flatten()
        .is_some_and(|size| size <= SMALL)
}

/// Unpacks a sealed file of `magic`, bounded before anything is trusted:
/// what declares itself small is unpacked at once, no more than [`SMALL`];
/// anything else is first checked as a stream ([`check_streaming`]: a
/// window of at most [`WINDOW_LOG_MAX`], the length its header claims no
/// more than `limit`, its seal), holding none of it, and only then
/// unpacked, at exactly its checked length. The seal is checked again by
/// whoever opens the bytes.
pub(crate) fn unpack_sealed(
    magic: &[u8; 4],
    packed: &[u8],
    limit: u64,
) -> Result<Vec<u8>, DecodeError> {
    if declares_small(packed) {
        return unpack(packed, SMALL.min(limit)).ok_or(DecodeError::BadBody);
    }
    let len = check_streaming(KEY.get(), magic, packed, limit)?;
    unpack(packed, len).ok_or(DecodeError::BadBody)
}

/// Checks packed sealed bytes as they decompress, keeping none of them: a
/// window over [`WINDOW_LOG_MAX`] is refused from the frame's header,
/// sealed bytes whose header claims more than `limit` from their first ten
/// bytes, and what follows is hashed as it comes, up to the length the
/// header claims and no further. Returns that length. (Sealed without the
/// key is not told apart from damaged here: both are [`DecodeError::BadDigest`].)
pub(crate) fn check_streaming(
    key: Option<&[u8; 32]>,
    magic: &[u8; 4],
    packed: &[u8],
    limit: u64,
) -> Result<u64, DecodeError> {
    use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer};
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
        .map_err(|_| DecodeError::BadBody)?;
    let mut hasher = match key {
        Some(key) => blake3::Hasher::new_keyed(key),
        None => blake3::Hasher::new(),
    };
    let mut input = InBuffer::around(packed);
    let mut buffer = vec![0u8; 1 << 17];
    let mut header = [0u8; HEADER];
    let mut digest = [0u8; DIGEST];
    // Bytes seen so far, and how many the header claims (once read).
    let mut seen: u64 = 0;
    let mut total: Option<u64> = None;
    loop {
        let mut output = OutBuffer::around(&mut buffer[..]);
        let hint = dctx
            .decompress_stream(&mut output, &mut input)
            .map_err(|code| {
                if zstd::zstd_safe::get_error_name(code).contains("too much memory") {
                    DecodeError::TooLarge
                } else {
                    DecodeError::BadBody
                }
            })?;
        let produced = output.as_slice();
        let mut chunk = produced;
        if seen < HEADER as u64 {
            let at = seen as usize;
            let take = (HEADER - at).min(chunk.len());
            header[at..at + take].copy_from_slice(&chunk[..take]);
            seen += take as u64;
            chunk = &chunk[take..];
            if seen == HEADER as u64 {
                total = Some(claimed_len(magic, &header, limit)?);
                hasher.update(&header);
            }
        }
        if let Some(end) = total {
            if seen + chunk.len() as u64 > end {
                return Err(DecodeError::BadLength);
            }
            let body_end = end - DIGEST as u64;
            if seen < body_end {
                let take = ((body_end - seen) as usize).min(chunk.len());
                hasher.update(&chunk[..take]);
                seen += take as u64;
                chunk = &chunk[take..];
            }
            if !chunk.is_empty() {
                let at = (seen - body_end) as usize;
                digest[at..at + chunk.len()].copy_from_slice(chunk);
                seen += chunk.len() as u64;
            }
        }
        if hint == 0 && input.pos() == packed.len() {
            break;
        }
        if produced.is_empty() && input.pos() == packed.len() {
            return Err(DecodeError::Truncated);
        }
    }
    let end = total.ok_or(DecodeError::Truncated)?;
    if seen != end {
        return Err(DecodeError::Truncated);
    }
    if hasher.finalize().as_bytes() != &digest {
        return Err(DecodeError::BadDigest);
    }
    Ok(end)
}

/// The whole length of sealed bytes, from their header: refused when it
/// is not of `magic` and this format, or is more than `limit`.
fn claimed_len(magic: &[u8; 4], header: &[u8; HEADER], limit: u64) -> Result<u64, DecodeError> {
    if &header[..4] != magic {
        return Err(DecodeError::BadMagic);
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != FORMAT_VERSION {
        return Err(DecodeError::OtherVersion(version));
    }
    let body_len = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
    let total = (HEADER + DIGEST) as u64 + u64::from(body_len);
    if total > limit {
        return Err(DecodeError::TooLarge);
    }
    Ok(total)
}

/// Why a record was not accepted. Every variant means: run the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its header, or than the length it claims.
    #[error("record is truncated")]
    Truncated,
    /// Not the magic of the kind being read.
    #[error("not a cargo-ekstazi record (bad magic)")]
    BadMagic,
    /// Written in another format version (the one it names).
    #[error("record has format version {0}, this cargo-ekstazi reads version {FORMAT_VERSION}")]
    OtherVersion(u16),
    /// Longer than the length its header claims.
    #[error("record length does not match its file")]
    BadLength,
    /// The digest does not match: damaged, or sealed with another key.
    #[error("record failed its integrity check")]
    BadDigest,
    /// Intact, but sealed without the key this process seals with.
    #[error("record was sealed without the key (EKSTAZI_SEAL_KEY is set): not trusted")]
    Unkeyed,
    /// The body does not decode whole, or the packed bytes do not unpack.
    #[error("record body does not decode")]
    BadBody,
    /// A path that leaves its anchor.
    #[error("record names a path outside its anchor")]
    BadPath,
    /// A record of another binary or test than the one it is kept under.
    #[error("record belongs to another test")]
    OtherTest,
    /// Larger than any file of its kind, or than the bound it is read within.
    #[error("record file is larger than any record")]
    TooLarge,
    /// Names executed functions kept in a base that is missing or damaged.
    #[error("record names executed functions kept in a base that is missing or damaged")]
    MissingBase,
    /// Compressed with a dictionary that is missing or damaged.
    #[error("record is compressed with a dictionary that is missing or damaged")]
    MissingDictionary,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of sealed bytes has a magic of its own: a kind read as
    /// another could only fail to decode, but a shared magic is one check
    /// fewer between a file and a wrong reading. Magics are private to
    /// their modules, so they are found in the sources.
    #[test]
    fn every_magic_names_one_kind() {
        let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut seen = std::collections::HashMap::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("[u8; 4] = b\"") {
                    let magic = &text[at + 12..at + 16];
                    if let Some(other) = seen.insert(magic.to_owned(), path.clone()) {
                        panic!("{magic} in {} and {}", other.display(), path.display());
                    }
                }
            }
        }
        assert!(seen.len() > 20, "{seen:?}");
    }

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

    /// `bytes` as one zstd frame with a window of 2^`window_log` bytes,
    /// declaring its size or not.
    fn framed(bytes: &[u8], window_log: u32, declared: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = zstd::stream::write::Encoder::new(&mut out, 1).unwrap();
        encoder.window_log(window_log).unwrap();
        if declared {
            encoder
                .set_pledged_src_size(Some(bytes.len() as u64))
                .unwrap();
        }
        std::io::Write::write_all(&mut encoder, bytes).unwrap();
        encoder.finish().unwrap();
        out
    }

    #[test]
    fn a_frame_whose_window_exceeds_the_limit_is_refused_from_its_header() {
        // 128 MiB of window, zstd's own default limit: refused before
        // anything is decompressed, whatever the bytes would have been.
        let sealed = seal_with(None, b"TEST", &vec![1u8; 2 << 20]);
        let wide = framed(&sealed, 27, false);
        assert_eq!(
            check_streaming(None, b"TEST", &wide, 64 << 20),
            Err(DecodeError::TooLarge)
        );
        assert_eq!(
            unpack_sealed(b"TEST", &wide, 64 << 20),
            Err(DecodeError::TooLarge)
        );
        // The window `pack` uses, and the limit itself, are taken.
        for log in [21, WINDOW_LOG_MAX] {
            let packed = framed(&sealed, log, false);
            assert_eq!(
                check_streaming(None, b"TEST", &packed, 64 << 20),
                Ok(sealed.len() as u64),
                "window log {log}"
            );
            assert_eq!(
                unpack_sealed(b"TEST", &packed, 64 << 20),
                Ok(sealed.clone())
            );
        }
    }

    #[test]
    fn a_stream_is_refused_at_the_length_its_header_claims() {
        let body = vec![3u8; 3 << 20];
        let sealed = seal_with(None, b"TEST", &body);
        let len = sealed.len() as u64;
        // Larger than a small file, so checked as a stream.
        let packed = framed(&sealed, 21, true);
        assert!(!declares_small(&packed));
        assert_eq!(unpack_sealed(b"TEST", &packed, len), Ok(sealed.clone()));
        // A header claiming more than the limit: refused from its ten
        // bytes, the rest never decompressed.
        assert_eq!(
            check_streaming(None, b"TEST", &packed, len - 1),
            Err(DecodeError::TooLarge)
        );
        // A header claiming less than follows: refused as it passes.
        let mut lying = sealed.clone();
        lying[6..10].copy_from_slice(&1024u32.to_le_bytes());
        assert_eq!(
            check_streaming(None, b"TEST", &framed(&lying, 21, true), len),
            Err(DecodeError::BadLength)
        );
        // A flipped byte, a cut, another magic, another key.
        let mut flipped = sealed.clone();
        flipped[1 << 20] ^= 1;
        assert_eq!(
            check_streaming(None, b"TEST", &framed(&flipped, 21, true), len),
            Err(DecodeError::BadDigest)
        );
        assert_eq!(
            check_streaming(
                None,
                b"TEST",
                &framed(&sealed[..sealed.len() - 1], 21, true),
                len
            ),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            check_streaming(None, b"OTHR", &packed, len),
            Err(DecodeError::BadMagic)
        );
        assert_eq!(
            check_streaming(Some(&[1; 32]), b"TEST", &packed, len),
            Err(DecodeError::BadDigest)
        );
        let keyed = seal_with(Some(&[1; 32]), b"TEST", &body);
        assert_eq!(
            check_streaming(Some(&[1; 32]), b"TEST", &framed(&keyed, 21, true), len),
            Ok(len)
        );
        // What declares itself small is unpacked at once, up to SMALL only.
        let small = seal_with(None, b"TEST", b"small");
        assert!(declares_small(&pack(&small)));
        assert_eq!(unpack_sealed(b"TEST", &pack(&small), 1 << 30), Ok(small));
        // A first frame that declares 1 KiB, then 2 MiB more: unpacked at
        // once, and refused at SMALL, not given a larger buffer.
        let claims_1k = framed(&[0u8; 1024], 21, true);
        assert!(declares_small(&claims_1k));
        let then_more = [claims_1k, framed(&vec![0u8; 2 << 20], 21, true)].concat();
        assert!(unpack_sealed(b"TEST", &then_more, 1 << 30).is_err());
    }
}
