//! A state handed over as is (a restored cache, a copied checkout, an
//! archive to import): what reading it costs is bounded before anything in
//! it is trusted, and a run over it behaves as over the state alone. Each
//! attack's input is generated here, small (`bomb`, `forged_manifest`,
//! `endless_globals`); `generate_attack_inputs` writes them at the scale
//! the figures in docs/design/reliability.md were measured at.

use crate::support::{Fixture, with_peak_rss};
use std::io::Write;

const FORMAT: u16 = ekstazi_core::files::sealed::FORMAT_VERSION;
const KEYED: [(&str, &str); 1] = [("EKSTAZI_SEAL_KEY", "the CI's secret")];
/// The bound every attack here must stay under (the acceptance's 200 MB).
const PEAK_KIB: i64 = 200 * 1000;

/// One zstd frame of `size` bytes, `prefix` then zeros, declaring its
/// size (as the frames cargo-ekstazi writes do), with a window of
/// 2^`window_log` bytes: a few KiB that unpack to `size`. Written by hand
/// (RFC 8878: a raw block, then run-length blocks of 128 KiB), since a
/// compressor would hold the window, and this process's resident size is
/// where a child's peak, as `wait4` reports it, starts (Linux keeps the
/// high-water mark across `exec`).
fn bomb(prefix: &[u8], size: u64, window_log: u32) -> Vec<u8> {
    const MAX_BLOCK: u64 = 128 * 1024;
    let block = |last: bool, kind: u32, len: u64| {
        let h = u32::from(last) | (kind << 1) | ((len as u32) << 3);
        h.to_le_bytes()[..3].to_vec()
    };
    // Magic; a descriptor: an 8-byte content size, a window descriptor;
    // the window's exponent; the content size.
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD, 0xC0, ((window_log - 10) << 3) as u8];
    out.extend_from_slice(&size.to_le_bytes());
    let mut left = size - prefix.len() as u64;
    out.extend(block(left == 0, 0, prefix.len() as u64));
    out.extend_from_slice(prefix);
    while left > 0 {
        let len = left.min(MAX_BLOCK);
        left -= len;
        out.extend(block(left == 0, 1, len));
        out.push(0);
    }
    out
}

/// The first bytes of a sealed manifest of `size` bytes in all: what
/// cargo-ekstazi reads first, true to the size.
fn manifest_header(size: u64) -> Vec<u8> {
    sealed_header(b"EKZH", size)
}

/// The first bytes of a sealed file of `magic`, `size` bytes in all.
fn sealed_header(magic: &[u8; 4], size: u64) -> Vec<u8> {
    let mut header = magic.to_vec();
    header.extend_from_slice(&FORMAT.to_le_bytes());
    header.extend_from_slice(&u32::try_from(size - 42).unwrap().to_le_bytes());
    header
}

/// A postcard varint.
fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A manifest of `commit`, sealed without a key and packed, naming
/// `entries` tests (`b t0000000`, …) that passed, each with a record no
/// state holds: written as cargo-ekstazi writes a manifest, a byte at a
/// time, straight into the hash and the compressor. Never held whole:
/// this process's resident size is where a child's peak, as `wait4`
/// reports it, starts (Linux keeps the high-water mark across `exec`).
fn forged_manifest(commit: &str, entries: u32) -> Vec<u8> {
    let mut head = Vec::new();
    varint(commit.len() as u64, &mut head);
    head.extend_from_slice(commit.as_bytes());
    varint(1, &mut head);
    varint(u64::from(entries), &mut head);
    // Each entry: 3 + 8 + 32 + 2 bytes.
    let body_len = head.len() as u64 + u64::from(entries) * 45;
    let header = manifest_header(body_len + 42);
    let mut hasher = blake3::Hasher::new();
    let mut out = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut out, 1).unwrap();
    encoder.set_pledged_src_size(Some(body_len + 42)).unwrap();
    let mut put = |bytes: &[u8]| {
        hasher.update(bytes);
        encoder.write_all(bytes).unwrap();
    };
    put(&header);
    put(&head);
    let mut entry = [0u8; 45];
    entry[..3].copy_from_slice(b"\x01b\x08");
    entry[11..43].copy_from_slice(&[7; 32]);
    // Passed, ran.
    entry[43..].copy_from_slice(&[0, 1]);
    for i in 0..entries {
        entry[3..11].copy_from_slice(format!("t{i:07}").as_bytes());
        put(&entry);
    }
    let digest = hasher.finalize();
    encoder.write_all(digest.as_bytes()).unwrap();
    encoder.finish().unwrap();
    out
}

/// A tar header block for `name`, of type `kind` and `size` bytes.
fn tar_header(name: &str, kind: u8, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// An archive (`history export`'s form) of these files.
fn archive(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, data) in files {
        tar.extend_from_slice(&tar_header(name, b'0', data.len() as u64));
        tar.extend_from_slice(data);
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    tar.resize(tar.len() + 1024, 0);
    zstd::bulk::compress(&tar, 1).unwrap()
}

/// An archive of nothing but global PAX headers, `frames` times the same
/// zstd frame of 16 of them (60 KiB of data each): about `frames` MiB of
/// tar, from a few bytes a frame.
fn endless_globals(frames: usize) -> Vec<u8> {
    let mut chunk = Vec::new();
    for _ in 0..16 {
        chunk.extend_from_slice(&tar_header("pax_global_header", b'g', 60 * 1024));
        chunk.resize(chunk.len() + 60 * 1024, 0);
    }
    zstd::bulk::compress(&chunk, 1).unwrap().repeat(frames)
}

/// A commit id of the forged ones: `n` in hex.
fn forged_id(n: usize) -> String {
    format!("{n:040x}")
}

#[test]
fn forged_manifests_and_segments_of_a_keyed_state_are_refused_in_bounded_memory() {
    let f = Fixture::new("verdicts").in_git();
    f.test_ok_with(&[], &KEYED);
    let commits = f
        .path()
        .join(format!(".ekstazi/v{FORMAT}/.history/commits"));
    assert_eq!(std::fs::read_dir(&commits).unwrap().count(), 1);
    // 16 files of a few KiB, each a manifest's header and 255 MiB: half
    // with a window of 128 MiB (what zstd itself decodes by default), half
    // with the window the level gives.
    let size = 255 << 20;
    let bombs = [
        bomb(&manifest_header(size), size, 27),
        bomb(&manifest_header(size), size, 19),
    ];
    for n in 0..16 {
        std::fs::write(commits.join(forged_id(n)), &bombs[n % 2]).unwrap();
    }
    // And segments of the function table: one with a wide window, one
    // claiming more than a segment may be (256 MiB).
    let functions = f.path().join(format!(".ekstazi/v{FORMAT}/.functions"));
    for (n, (claimed, window)) in [(255 << 20, 27), (300 << 20, 19)].into_iter().enumerate() {
        let segment = bomb(&sealed_header(b"EKZF", claimed), claimed, window);
        std::fs::write(functions.join(format!("f{n:031x}")), segment).unwrap();
    }
    // A change: the test it affects is tried against the history.
    f.edit("src/lib.rs", "a * b", "b * a");
    let mut command = f.command(&["test"]);
    command.envs(KEYED);
    let (run, peak_kib) = with_peak_rss(command, f.tmp());
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert_eq!(
        run.ran(),
        crate::support::labels(&["verdicts::verdicts multiplies"]),
        "{run:?}"
    );
    assert!(peak_kib < PEAK_KIB, "a peak of {peak_kib} KiB");
}

#[test]
fn an_import_of_forged_manifests_is_bounded_and_its_refusals_summarised() {
    let f = Fixture::new("verdicts").in_git();
    f.test_ok(&[]);
    let records = f.records();
    let at = |n| format!("v{FORMAT}/.history/commits/{}", forged_id(n));
    // Two manifests under any limit, 100 000 entries each, and one past
    // what a manifest may be (34 MiB), each entry naming a record the
    // archive does not hold.
    let file = f.tmp().join("forged.tar.zst");
    std::fs::write(
        &file,
        archive(&[
            (at(1), forged_manifest(&forged_id(1), 100_000)),
            (at(2), forged_manifest(&forged_id(2), 100_000)),
            (at(3), forged_manifest(&forged_id(3), 800_000)),
        ]),
    )
    .unwrap();
    let (run, peak_kib) = with_peak_rss(
        f.command(&["history", "import", file.to_str().unwrap()]),
        f.tmp(),
    );
    assert_eq!(run.code(), Some(0), "{run:?}");
    let refusals: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("not imported"))
        .collect();
    assert_eq!(refusals.len(), 2, "one line per kind: {refusals:#?}");
    assert!(
        refusals
            .iter()
            .any(|l| l.contains("missing or damaged; and 199999 more like it")),
        "{refusals:#?}"
    );
    assert!(
        refusals.iter().any(|l| l.contains("larger than any")),
        "{refusals:#?}"
    );
    assert!(peak_kib < PEAK_KIB, "a peak of {peak_kib} KiB");
    assert_eq!(f.records(), records);
    // Nothing of it was filed: the history is the fixture's own.
    let listed = f.run(&["history", "list", "--json"]);
    assert!(!listed.stdout.contains(&forged_id(1)), "{listed:?}");
}

#[test]
fn an_archive_of_endless_extension_headers_stops_at_the_limit() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let records = f.records();
    // 1 200 MiB of global PAX headers and no entry, past the 1 GiB an
    // import reads.
    let file = f.tmp().join("globals.tar.zst");
    std::fs::write(&file, endless_globals(1200)).unwrap();
    assert!(std::fs::metadata(&file).unwrap().len() < 1 << 20);
    let (run, peak_kib) = with_peak_rss(
        f.command(&["history", "import", file.to_str().unwrap()]),
        f.tmp(),
    );
    assert_eq!(run.code(), Some(1), "{run:?}");
    assert!(run.stderr.contains("more than any state"), "{run:?}");
    assert!(run.stderr.contains("extended headers count"), "{run:?}");
    assert!(peak_kib < PEAK_KIB, "a peak of {peak_kib} KiB");
    assert_eq!(f.records(), records);
}

#[test]
fn an_archive_asking_for_a_wide_window_is_refused_from_its_header() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    let records = f.records();
    // A valid archive of one entry a store does not use, in a frame with a
    // window of 128 MiB (zstd's own default limit).
    let data: u64 = 2 << 20;
    let wide = bomb(&tar_header("junk", b'0', data), 512 + data + 1024, 27);
    let file = f.tmp().join("wide.tar.zst");
    std::fs::write(&file, wide).unwrap();
    let run = f.run(&["history", "import", file.to_str().unwrap()]);
    assert_eq!(run.code(), Some(1), "{run:?}");
    assert!(run.stderr.contains("a zstd window over 8 MiB"), "{run:?}");
    assert_eq!(f.records(), records);
}

#[test]
fn a_run_logged_in_the_future_does_not_postpone_the_full_run() {
    let f = Fixture::new("verdicts").with_env("EKSTAZI_FULL_EVERY", "1h");
    // The first run is a full one (none in the log yet).
    let first = f.test_ok(&[]);
    assert_eq!(first.ran().len(), 5, "{first:?}");
    let log = f.path().join(".ekstazi/runs.log");
    let text = std::fs::read_to_string(&log).unwrap();
    // That full run, two hours ago; then a forged full run at the end of
    // time.
    let two_hours_ago = ekstazi_core::model::record::now_ms() - 2 * 3600 * 1000;
    let (_, rest) = text.trim_end().split_once('\t').unwrap();
    std::fs::write(
        &log,
        format!("{two_hours_ago}\t{rest}\n{}\t{rest}\n", u64::MAX,),
    )
    .unwrap();
    let run = f.test_ok(&[]);
    assert_eq!(run.ran().len(), 5, "an audit is due: {run:?}");
    assert!(
        run.stderr.contains("running every test as an audit"),
        "{run:?}"
    );
    assert_eq!(
        run.stderr
            .matches("dated after this machine's clock")
            .count(),
        1,
        "{run:?}"
    );
    // Audited now: the next run selects as usual.
    assert!(f.test_ok(&[]).ran().is_empty());
}

/// Writes the attacks' inputs at the scale they were measured at, into
/// `$EKSTAZI_ATTACK_DIR` (see docs/design/reliability.md):
/// `commits/` 16 manifests of 255 MiB (8 KiB each), `forged.tar.zst` 4
/// manifests of 5 000 000 entries (`forged-under.tar.zst`: of 745 000, just
/// under the limit), `globals.tar.zst` 216 GB of global PAX
/// headers, `window23.tar.zst` and `window27.tar.zst` 255 MiB in a frame
/// with a window of 8 and 128 MiB.
#[test]
#[ignore = "writes the attacks' inputs at full scale; run by hand"]
fn generate_attack_inputs() {
    let dir = std::path::PathBuf::from(std::env::var_os("EKSTAZI_ATTACK_DIR").unwrap());
    std::fs::create_dir_all(dir.join("commits")).unwrap();
    let size = 255 << 20;
    let bombs = [
        bomb(&manifest_header(size), size, 27),
        bomb(&manifest_header(size), size, 19),
    ];
    for n in 0..16 {
        std::fs::write(dir.join("commits").join(forged_id(n)), &bombs[n % 2]).unwrap();
    }
    let at = |n| format!("v{FORMAT}/.history/commits/{}", forged_id(n));
    let forged: Vec<(String, Vec<u8>)> = (1..=4)
        .map(|n| (at(n), forged_manifest(&forged_id(n), 5_000_000)))
        .collect();
    std::fs::write(dir.join("forged.tar.zst"), archive(&forged)).unwrap();
    // The same, each just under what a manifest may be (32 MiB).
    let under: Vec<(String, Vec<u8>)> = (1..=4)
        .map(|n| (at(n), forged_manifest(&forged_id(n), 745_000)))
        .collect();
    std::fs::write(dir.join("forged-under.tar.zst"), archive(&under)).unwrap();
    std::fs::write(
        dir.join("globals.tar.zst"),
        endless_globals(216_000_000_000 / (16 * (512 + 60 * 1024))),
    )
    .unwrap();
    // An archive of one entry a store does not use, 255 MiB of zeros, in
    // a frame with a window of 2^log bytes: what a window costs.
    let data: u64 = 255 << 20;
    for log in [23, 27] {
        let tar = bomb(&tar_header("junk", b'0', data), 512 + data + 1024, log);
        std::fs::write(dir.join(format!("window{log}.tar.zst")), tar).unwrap();
    }
}
