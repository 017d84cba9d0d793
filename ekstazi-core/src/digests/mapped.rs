//! A test binary's bytes, mapped instead of read.
//!
//! An instrumented debug test binary is 50–150 MB, most of it debug
//! information that neither the smart checksum nor the fingerprints look
//! at. Reading it whole copies every byte into the heap; mapping it makes
//! the kernel bring in only the pages of the sections that are parsed
//! (measured in `docs/design/performance.md`, "Selection cost").
//!
//! Only for the test binaries the run's own build has just linked. Reading
//! a mapped file that another process truncates raises `SIGBUS`, which
//! would end the whole run; the programs and libraries tests run are read
//! with `fs::read` instead, since a test may rewrite one in place (a script
//! made with `fs::write`, say) while another test's record is checksummed.

use memmap2::Mmap;
use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::Path;

/// The bytes of a file: mapped, or read when the file cannot be mapped
/// (an empty file, or a file system without `mmap`).
#[derive(Debug)]
pub enum Bytes {
    /// The file mapped into memory.
    Mapped(Mmap),
    /// The file read whole.
    Read(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Read(bytes) => bytes,
        }
    }
}

/// Maps the file at `path` (read-only, private). Only a regular file: a
/// FIFO would block the open, a device never end.
pub fn bytes(path: &Path) -> io::Result<Bytes> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let file = File::open(path)?;
    // SAFETY: the mapping is only read. Its one hazard is another process
    // truncating or rewriting the file while it is mapped. Callers map only
    // executables cargo has just linked (see the module comment); linkers
    // (ld, lld, mold) write a new file and rename or unlink over the old
    // one rather than rewrite it in place, and cargo hard-links, so the
    // mapped inode keeps its bytes. A file changed in place while it is
    // read would give a mixed checksum with `fs::read` as well.
    match unsafe { Mmap::map(&file) } {
        Ok(map) => Ok(Bytes::Mapped(map)),
        Err(_) => std::fs::read(path).map(Bytes::Read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_bytes_are_the_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"\x7fELF and the rest").unwrap();
        assert_eq!(&*bytes(&path).unwrap(), b"\x7fELF and the rest");
        std::fs::write(&path, b"").unwrap();
        assert_eq!(&*bytes(&path).unwrap(), b"");
        assert_eq!(
            bytes(&dir.path().join("absent")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            bytes(dir.path()).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
