//! What identifies one version of a file without reading it: device,
//! inode, size, modification and status-change times, as git's index keeps
//! them. Two reads that find the same identity found the same bytes,
//! unless the file was changed within the file system's clock resolution
//! of the first read: [`settled_before`] says when a time is far enough
//! behind to rule that out.

use serde::{Deserialize, Serialize};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// One version of a file system entry, as `stat` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    /// The entry at `path` (through a final link when `follow`); `None`
    /// when nothing is there or it cannot be examined.
    pub fn of(path: &Path, follow: bool) -> Option<Identity> {
        let meta = if follow {
            fs::metadata(path)
        } else {
            fs::symlink_metadata(path)
        }
        .ok()?;
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// An identity from what `stat` gave (`(seconds, nanoseconds)` times).
    pub(crate) fn from_parts(
        dev: u64,
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    ) -> Identity {
        Identity {
            dev,
            ino,
            size,
            mtime,
            ctime,
        }
    }

    /// The later of the modification and status-change times: a file
    /// changed and then given an old modification time still has a new
    /// status-change time.
    pub fn changed(&self) -> SystemTime {
        let at = |(secs, nanos): (i64, i64)| {
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(secs.max(0) as u64)
                + Duration::from_nanos(nanos.max(0) as u64)
        };
        at(self.mtime).max(at(self.ctime))
    }
}

/// Whether a modification time proves the entry was last changed before
/// `since`. Kernels stamp files from a coarse clock (a few milliseconds
/// behind), and some file systems keep whole seconds only, so a time too
/// close to `since` proves nothing.
pub fn settled_before(mtime: SystemTime, since: SystemTime) -> bool {
    let coarse = mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    let margin = if coarse {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(50)
    };
    since.checked_sub(margin).is_some_and(|limit| mtime < limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_modification_proves_nothing() {
        let now = SystemTime::now();
        assert!(!settled_before(now, now));
        assert!(!settled_before(now - Duration::from_millis(10), now));
        assert!(settled_before(
            now - Duration::from_secs(1),
            now + Duration::from_nanos(1)
        ));
        let whole_second = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(!settled_before(
            whole_second,
            whole_second + Duration::from_secs(1)
        ));
        assert!(settled_before(
            whole_second,
            whole_second + Duration::from_secs(3)
        ));
    }
}
