//! The import path against hostile bytes: whatever an archive holds, the
//! tar reader and the unpacking never panic, and read nothing they were
//! not sized for.

use ekstazi_core::files::sealed::FORMAT_VERSION;
use ekstazi_core::storage::archive::{self, tar_reader::TarReader};
use proptest::prelude::*;
use std::io::Write;

/// A small archive as `history export` writes one: a record, a long name,
/// a history pack.
fn valid_tar() -> Vec<u8> {
    let v = format!("v{FORMAT_VERSION}");
    let mut builder = tar::Builder::new(Vec::new());
    let entries = [
        (format!("{v}/pkg/tests%3A%3Aa"), vec![1u8; 300]),
        (format!("{v}/pkg/{}", "t".repeat(180)), vec![2u8; 40]),
        (
            format!("{v}/.history/packs/{}", "d".repeat(64)),
            vec![3u8; 600],
        ),
    ];
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, data.as_slice())
            .unwrap();
    }
    builder.into_inner().unwrap()
}

/// Reads every entry of `bytes`, the data of regular files copied out.
fn read_all(bytes: &[u8]) {
    let mut reader = TarReader::with_limit(bytes, u64::MAX);
    for _ in 0..1000 {
        match reader.next_header() {
            Ok(Some(header)) if header.is_regular() && header.size < 1 << 20 => {
                if reader.copy_data(header.size, &mut std::io::sink()).is_err() {
                    return;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        read_all(&bytes);
    }

    #[test]
    fn a_valid_archive_changed_anywhere_never_panics(
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid_tar();
        for (at, byte) in changes {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        read_all(&bytes);
        // Truncated anywhere, and as `history import` reads it.
        let len = cut.index(bytes.len() + 1);
        read_all(&bytes[..len]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state.tar.zst");
        let mut out = zstd::Encoder::new(std::fs::File::create(&file).unwrap(), 1).unwrap();
        out.write_all(&bytes).unwrap();
        out.finish().unwrap();
        let into = dir.path().join("into");
        std::fs::create_dir(&into).unwrap();
        let _ = archive::unpack(&file, &into);
    }
}

#[test]
fn the_valid_archive_unpacks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.tar.zst");
    let mut out = zstd::Encoder::new(std::fs::File::create(&file).unwrap(), 1).unwrap();
    out.write_all(&valid_tar()).unwrap();
    out.finish().unwrap();
    let into = dir.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let counted = archive::unpack(&file, &into).unwrap();
    assert_eq!((counted.files, counted.left_out), (3, 0));
}
