//! Files' and programs' checksums kept from one run to the next, each by
//! the identity of its file ([`Identity`]: device, inode, size, times), as
//! git's index keeps the digests of the files it tracks. Every test of a
//! multicall project depends on the program it runs; its smart checksum
//! reads the whole program (on coreutils, a debug build of over a hundred
//! megabytes), and its tests' data files are thousands: a run with nothing
//! changed reads none of them.
//!
//! Invariants:
//! - a kept checksum is used only while its file has the identity it had
//!   when it was computed, and only under the same erased directories (a
//!   smart checksum erases the checkout's paths, so a checksum taken for
//!   another checkout is another checksum): the binding is in the file;
//! - a checksum is kept only when the file's identity was the same before
//!   and after it was read, and settled before then ([`settled_before`]):
//!   a program rewritten within the clock's resolution keeps its times.

use crate::files::identity::{Identity, settled_before};
use crate::files::sealed::{open, seal};
use crate::model::dep::{Hash, Sum};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::SystemTime;

const MAGIC: &[u8; 4] = b"EKZP";

/// The kept checksums of one state directory: a larger file is not one of
/// ours, and is refused before it is read.
pub const MAX_KEPT_SUMS_BYTES: u64 = 16 << 20;

/// The checksums kept, for one binding (the erased directories).
#[derive(Debug, Default)]
pub struct KeptSums {
    binding: Hash,
    entries: HashMap<Vec<u8>, (Identity, Sum)>,
    changed: bool,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    binding: Hash,
    entries: Vec<(Vec<u8>, Identity, Sum)>,
}

impl KeptSums {
    /// The checksums kept in `bytes` for `binding`; none if `bytes` are
    /// damaged, foreign or for another binding.
    pub fn decode(bytes: Option<&[u8]>, binding: Hash) -> KeptSums {
        let entries = bytes
            .and_then(|bytes| open::<Stored>(MAGIC, bytes).ok())
            .filter(|stored| stored.binding == binding)
            .map(|stored| {
                stored
                    .entries
                    .into_iter()
                    .map(|(path, identity, sum)| (path, (identity, sum)))
                    .collect()
            })
            .unwrap_or_default();
        KeptSums {
            binding,
            entries,
            changed: false,
        }
    }

    /// The checksum kept for the file at `path` while it has `identity`.
    pub fn get(&self, path: &[u8], identity: &Identity) -> Option<Sum> {
        match self.entries.get(path) {
            Some((kept, sum)) if kept == identity => Some(sum.clone()),
            _ => None,
        }
    }

    /// Keeps `sum`, computed between two looks at the file that both
    /// found `identity`, if that identity is settled by now.
    pub fn put(&mut self, path: &[u8], identity: Identity, sum: &Sum) {
        if !matches!(sum, Sum::Hash(_)) || !settled_before(identity.changed(), SystemTime::now()) {
            return;
        }
        let entry = (identity, sum.clone());
        if self.entries.get(path) != Some(&entry) {
            self.entries.insert(path.to_vec(), entry);
            self.changed = true;
        }
    }

    /// The bytes to keep, if anything was added since they were read.
    pub fn encode_if_changed(&self) -> Option<Vec<u8>> {
        self.changed.then(|| {
            let stored = Stored {
                binding: self.binding,
                entries: self
                    .entries
                    .iter()
                    .map(|(path, (identity, sum))| (path.clone(), *identity, sum.clone()))
                    .collect(),
            };
            seal(
                MAGIC,
                &postcard::to_stdvec(&stored).expect("kept sums always serialise"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settled_file(dir: &std::path::Path, content: &str) -> Identity {
        let path = dir.join("program");
        std::fs::write(&path, content).unwrap();
        // Old enough to be settled.
        std::thread::sleep(Duration::from_millis(120));
        Identity::of(&path, true).unwrap()
    }

    #[test]
    fn a_kept_sum_serves_its_file_while_its_identity_holds() {
        let dir = tempfile::tempdir().unwrap();
        let identity = settled_file(dir.path(), "one");
        let mut kept = KeptSums::decode(None, [1; 32]);
        kept.put(b"/p", identity, &Sum::Hash([9; 32]));
        let bytes = kept.encode_if_changed().unwrap();
        let again = KeptSums::decode(Some(&bytes), [1; 32]);
        assert_eq!(again.get(b"/p", &identity), Some(Sum::Hash([9; 32])));
        assert!(again.encode_if_changed().is_none(), "nothing added");

        let rewritten = settled_file(dir.path(), "two, longer");
        assert_eq!(again.get(b"/p", &rewritten), None);
        assert_eq!(again.get(b"/q", &identity), None);
        assert!(
            KeptSums::decode(Some(&bytes), [2; 32])
                .get(b"/p", &identity)
                .is_none(),
            "another checkout's erased directories"
        );
        let mut damaged = bytes.clone();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 1;
        assert!(
            KeptSums::decode(Some(&damaged), [1; 32])
                .get(b"/p", &identity)
                .is_none()
        );
    }

    #[test]
    fn a_file_changed_just_now_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("program");
        std::fs::write(&path, "one").unwrap();
        let identity = Identity::of(&path, true).unwrap();
        let mut kept = KeptSums::decode(None, [1; 32]);
        kept.put(b"/p", identity, &Sum::Hash([9; 32]));
        assert!(kept.encode_if_changed().is_none());
        assert_eq!(kept.get(b"/p", &identity), None);
    }
}
