//! A remote store: what `history export` would hold, kept in an object
//! store content-addressed, with one signed manifest per push (`history
//! push`, `history fetch`). This module decides what a push holds and
//! whether a fetched manifest is taken; the transport (OpenDAL, which names
//! the services: `s3://`, `gcs://`, `file://`, ...) is cargo-ekstazi's.
//!
//! ```text
//! <prefix>/v12/blobs/<64 hex>                  a file of a state, named by its blake3
//! <prefix>/v12/commits/<commit id>/<64 hex>    a push: its manifest, named by its blake3
//! <prefix>/v12/commits/<commit id>/<n>         the same, in a store that cannot list (0, 1, ...)
//! ```
//!
//! - **Content-addressed, write-once.** A blob is named by its content, so
//!   a push uploads only the blobs the store does not have, and two jobs
//!   pushing at once write the same bytes under the same name. Each push's
//!   manifest is named by its own digest, under its commit: two pushes of
//!   one commit leave two manifests, and a fetch takes both. The manifest
//!   goes last, so a push cut short leaves blobs no manifest names, never
//!   a manifest naming blobs that are not there.
//! - **A manifest** (`EKRP`) lists, per file of the state, its path, its
//!   blob and its size, with the project (its repository's root commits)
//!   and the commit it was pushed at, signed ([`crate::files::signed`],
//!   kind `push`) when the pusher holds a signing key.
//! - **Taken only whole and checked** ([`decode`]): with trusted keys, a
//!   manifest no trusted key signed is refused; one filed under another
//!   commit than it names, or naming another project, is refused; every
//!   path must be one a store uses, and the counts and sizes stay within
//!   an import's bounds. A blob is taken only if its bytes hash to its
//!   name ([`blob_holds`]); what a fetch takes is then merged like an
//!   imported state (`merge_state`), which checks every record again.

use crate::files::signed::{self, Kind, PublicKey, SignatureError, SigningKey};
use crate::storage::archive::{self, MAX_BYTES, MAX_ENTRIES};
use crate::storage::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io;
use std::path::Path;

/// One file of the state a push holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushed {
    /// Relative to the state directory (`v12/...`).
    pub path: String,
    /// The blake3 of its bytes: the name of its blob.
    pub blob: [u8; 32],
    /// Its length, in bytes.
    pub size: u64,
}

/// What one push holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushManifest {
    /// The project it was pushed in: its repository's root commits
    /// (`signed::project_of_roots`).
    pub project: String,
    /// The commit it was pushed at, under whose directory it is kept.
    pub commit: String,
    /// When it was pushed (ms since the epoch).
    pub pushed_at_ms: u64,
    /// Every file of the state it holds.
    pub files: Vec<Pushed>,
}

const MAGIC: &[u8; 4] = b"EKRP";
const VERSION: u8 = 1;

/// A manifest larger than this is refused unread: a million entries of
/// about 120 bytes each.
pub const MAX_MANIFEST_BYTES: u64 = 128 << 20;

fn version_dir() -> String {
    format!("v{}", crate::files::sealed::FORMAT_VERSION)
}

/// Where a blob is kept, below the remote's prefix.
pub fn blob_path(blob: &[u8; 32]) -> String {
    format!("{}/blobs/{}", version_dir(), hex::encode(blob))
}

/// The directory of the blobs, to list them.
pub fn blobs_dir() -> String {
    format!("{}/blobs/", version_dir())
}

/// The directory of every commit's pushes.
pub fn commits_dir() -> String {
    format!("{}/commits/", version_dir())
}

/// The directory of one commit's pushes.
pub fn commit_dir(commit: &str) -> String {
    format!("{}{commit}/", commits_dir())
}

/// Where a push's manifest goes: under its commit, named by its bytes.
pub fn manifest_path(commit: &str, encoded: &[u8]) -> String {
    format!("{}{}", commit_dir(commit), blake3::hash(encoded).to_hex())
}

/// Where the `n`th push of a commit goes in a store that cannot list what
/// it holds: a reader looks the numbers up from 0 until one is missing.
pub fn numbered_manifest_path(commit: &str, n: usize) -> String {
    format!("{}{n}", commit_dir(commit))
}

/// The blob a listed name stands for (the last component of a blob path).
pub fn blob_of_name(name: &str) -> Option<[u8; 32]> {
    let mut blob = [0u8; 32];
    hex::decode_to_slice(name.trim_end_matches('/').rsplit('/').next()?, &mut blob).ok()?;
    Some(blob)
}

/// The state's files a push holds (those of `history export`'s files an
/// import takes: not this store's own notes and indexes), each with its
/// blob.
pub fn state_files(store: &Store) -> io::Result<Vec<Pushed>> {
    Ok(archive::exported_paths(store)?
        .into_iter()
        .filter(|path| archive::is_store_path(Path::new(path)))
        .filter_map(|path| {
            let bytes = archive::read_exported(store, &path)?;
            Some(Pushed {
                path,
                blob: *blake3::hash(&bytes).as_bytes(),
                size: bytes.len() as u64,
            })
        })
        .collect())
}

/// A file a push holds, read again to be uploaded: `None` when it changed
/// or went since [`state_files`] hashed it (the push then leaves it out).
pub fn read_pushed(store: &Store, file: &Pushed) -> Option<Vec<u8>> {
    archive::read_exported(store, &file.path).filter(|bytes| blob_holds(file, bytes))
}

/// A manifest's bytes, signed with `key` when there is one.
pub fn encode(manifest: &PushManifest, key: Option<&SigningKey>) -> Vec<u8> {
    let body = postcard::to_stdvec(manifest).expect("a manifest serialises");
    let signature = key.map_or_else(Vec::new, |key| {
        signed::sign(key, Kind::Push, &manifest.project, &blake3::hash(&body))
    });
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    out.extend_from_slice(&(signature.len() as u32).to_le_bytes());
    out.extend(signature);
    out.extend(body);
    out
}

/// Why a fetched manifest is not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RemoteError {
    /// Not the magic and version of a push manifest, cut short, or a body
    /// that does not decode.
    #[error("not a manifest cargo-ekstazi writes, or damaged")]
    Malformed,
    /// No signature, while trusted keys are listed.
    #[error("not signed, and [history] trusted-keys lists the keys that must sign it")]
    Unsigned,
    /// A signature that was refused.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// Filed under another commit than the one it names.
    #[error("it was pushed at commit {named} but is filed under {filed}")]
    OtherCommit {
        /// The commit the manifest names.
        named: String,
        /// The commit whose directory it was fetched from.
        filed: String,
    },
    /// Pushed in another project.
    #[error("it was pushed in another project (root commits {pushed:?}; here {here:?})")]
    OtherProject {
        /// The project the manifest names.
        pushed: String,
        /// This project.
        here: String,
    },
    /// A path no state uses, or one named twice: that path.
    #[error("it names a path no state uses: {0:?}")]
    BadPath(String),
    /// More files or bytes than an import takes: which bound it passed.
    #[error("it holds more than any state: {0}")]
    TooLarge(String),
}

/// Checks a manifest fetched from under `commit`'s directory, in `project`:
/// signed by one of `trusted` when any is listed (a signature present must
/// hold either way), for that commit and project, naming only paths a
/// store uses, within an import's bounds.
pub fn decode(
    bytes: &[u8],
    trusted: &[PublicKey],
    project: &str,
    commit: &str,
) -> Result<PushManifest, RemoteError> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .and_then(|rest| rest.strip_prefix(&[VERSION]))
        .ok_or(RemoteError::Malformed)?;
    let (len, rest) = rest
        .split_first_chunk::<4>()
        .ok_or(RemoteError::Malformed)?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err(RemoteError::Malformed);
    }
    let (signature, body) = rest.split_at(len);
    if signature.is_empty() {
        if !trusted.is_empty() {
            return Err(RemoteError::Unsigned);
        }
    } else {
        signed::check(signature, trusted, Kind::Push, project, &blake3::hash(body))?;
    }
    let manifest: PushManifest = postcard::from_bytes(body).map_err(|_| RemoteError::Malformed)?;
    if manifest.commit != commit {
        return Err(RemoteError::OtherCommit {
            named: manifest.commit,
            filed: commit.to_owned(),
        });
    }
    if manifest.project != project {
        return Err(RemoteError::OtherProject {
            pushed: manifest.project,
            here: project.to_owned(),
        });
    }
    if manifest.files.len() > MAX_ENTRIES {
        return Err(RemoteError::TooLarge(format!("over {MAX_ENTRIES} files")));
    }
    let mut total = 0u64;
    let mut seen = HashSet::new();
    for file in &manifest.files {
        if !archive::is_store_path(Path::new(&file.path)) || !seen.insert(file.path.as_str()) {
            return Err(RemoteError::BadPath(file.path.clone()));
        }
        total = total.saturating_add(file.size);
    }
    if total > MAX_BYTES {
        return Err(RemoteError::TooLarge(format!("over {MAX_BYTES} bytes")));
    }
    Ok(manifest)
}

/// Whether fetched bytes are the blob a manifest names.
pub fn blob_holds(file: &Pushed, bytes: &[u8]) -> bool {
    bytes.len() as u64 == file.size && blake3::hash(bytes).as_bytes() == &file.blob
}

/// Writes a fetched file into `into`, a scratch state directory that is
/// then merged: only at a path a store uses ([`decode`] checked it), never
/// through a link.
pub fn materialize(into: &Path, file: &Pushed, bytes: &[u8]) -> io::Result<()> {
    let relative = Path::new(&file.path);
    if !archive::is_store_path(relative) {
        return Err(io::Error::other(format!(
            "not a state's path: {}",
            file.path
        )));
    }
    let state = crate::files::contained::StateDir::new(into);
    let target = into.join(relative);
    state.make_dir(target.parent().expect("a store path has a parent"))?;
    let mut out = state.open(
        &target,
        crate::files::contained::How {
            write: true,
            create: true,
            truncate: true,
            ..Default::default()
        },
    )?;
    io::Write::write_all(&mut out, bytes)
}

/// The commit whose pushes a fetch takes: the nearest of `ancestry`
/// (`HEAD` first, then its ancestors, nearest first) that has any.
pub fn nearest<'a>(pushed: &HashSet<String>, ancestry: &'a [String]) -> Option<&'a str> {
    ancestry
        .iter()
        .find(|commit| pushed.contains(*commit))
        .map(String::as_str)
}

/// The commit directories a listing of [`commits_dir`] shows, as commit ids.
pub fn commit_of_dir(name: &str) -> Option<String> {
    let id = name.trim_end_matches('/').rsplit('/').next()?;
    crate::storage::history::is_commit_id(id).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "cccccccccccccccccccccccccccccccccccccccc";

    fn key(byte: u8) -> SigningKey {
        SigningKey::parse(&hex::encode([byte; 32])).unwrap()
    }

    fn manifest(paths: &[&str]) -> PushManifest {
        PushManifest {
            project: "root".into(),
            commit: COMMIT.into(),
            pushed_at_ms: 1,
            files: paths
                .iter()
                .map(|path| Pushed {
                    path: (*path).to_owned(),
                    blob: *blake3::hash(path.as_bytes()).as_bytes(),
                    size: path.len() as u64,
                })
                .collect(),
        }
    }

    fn record_path() -> String {
        format!("{}/pkg%3A%3Aint/tests%3A%3Aa", version_dir())
    }

    #[test]
    fn a_signed_manifest_is_taken_for_its_commit_and_project_only() {
        let ci = key(1);
        let m = manifest(&[&record_path()]);
        let bytes = encode(&m, Some(&ci));
        let trusted = [ci.public()];
        assert_eq!(decode(&bytes, &trusted, "root", COMMIT), Ok(m.clone()));
        let other = "dddddddddddddddddddddddddddddddddddddddd";
        assert!(matches!(
            decode(&bytes, &trusted, "root", other),
            Err(RemoteError::OtherCommit { .. })
        ));
        assert!(matches!(
            decode(&bytes, &trusted, "elsewhere", COMMIT),
            Err(RemoteError::Signature(SignatureError::OtherProject { .. }))
        ));
        assert!(matches!(
            decode(&bytes, &[key(2).public()], "root", COMMIT),
            Err(RemoteError::Signature(SignatureError::Untrusted(_)))
        ));
    }

    #[test]
    fn without_trusted_keys_an_unsigned_manifest_is_taken_and_a_signed_one_must_hold() {
        let m = manifest(&[&record_path()]);
        let unsigned = encode(&m, None);
        assert_eq!(decode(&unsigned, &[], "root", COMMIT), Ok(m.clone()));
        assert_eq!(
            decode(&unsigned, &[key(1).public()], "root", COMMIT),
            Err(RemoteError::Unsigned)
        );
        let mut signed = encode(&m, Some(&key(1)));
        *signed.last_mut().unwrap() ^= 1;
        assert!(decode(&signed, &[], "root", COMMIT).is_err());
    }

    #[test]
    fn any_changed_byte_of_a_signed_manifest_is_refused() {
        let ci = key(1);
        let bytes = encode(&manifest(&[&record_path()]), Some(&ci));
        for i in 0..bytes.len() {
            let mut forged = bytes.clone();
            forged[i] ^= 0x01;
            assert!(
                decode(&forged, &[ci.public()], "root", COMMIT).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn a_path_no_state_uses_is_refused() {
        for path in ["../escape", "v1/pkg/test", "/etc/passwd", "lock"] {
            let bytes = encode(&manifest(&[path]), None);
            assert!(
                matches!(
                    decode(&bytes, &[], "root", COMMIT),
                    Err(RemoteError::BadPath(_))
                ),
                "{path}"
            );
        }
        let twice = encode(&manifest(&[&record_path(), &record_path()]), None);
        assert!(matches!(
            decode(&twice, &[], "root", COMMIT),
            Err(RemoteError::BadPath(_))
        ));
    }

    #[test]
    fn a_blob_holds_only_with_its_bytes() {
        let m = manifest(&["abc"]);
        assert!(blob_holds(&m.files[0], b"abc"));
        assert!(!blob_holds(&m.files[0], b"abd"));
        assert!(!blob_holds(&m.files[0], b"abcd"));
    }

    #[test]
    fn the_nearest_pushed_ancestor_is_fetched() {
        let ancestry: Vec<String> = ["h", "p", "g"].map(String::from).to_vec();
        let pushed: HashSet<String> = ["g", "p"].map(String::from).into();
        assert_eq!(nearest(&pushed, &ancestry), Some("p"));
        assert_eq!(nearest(&HashSet::new(), &ancestry), None);
        assert_eq!(
            commit_of_dir(&format!("v12/commits/{COMMIT}/")),
            Some(COMMIT.to_owned())
        );
        assert_eq!(commit_of_dir("v12/commits/HEAD/"), None);
        let blob = [7u8; 32];
        assert_eq!(blob_of_name(&blob_path(&blob)), Some(blob));
    }
}
