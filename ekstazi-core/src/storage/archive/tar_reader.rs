//! Reading an archive's tar stream one header at a time, with every size
//! checked before anything is buffered.
//!
//! Written here rather than taken from the `tar` crate (which writes the
//! archives, `super::export`): its reader buffers a GNU long name or a PAX
//! extended header whole, at the size the header claims, before the caller
//! sees the entry, so that a few bytes of zstd can claim gigabytes of
//! memory. Here an extension over [`MAX_EXTENSION`] is an error before it
//! is read, and an entry's data is only ever streamed.
//!
//! What is read is what `super::export` writes and what `tar` tools write
//! for plain files: 512-byte ustar/GNU headers (checksum verified, sizes in
//! octal or base-256), GNU long names (`L`), PAX path and size records
//! (`x`), global PAX headers (`g`, skipped), and GNU's old sparse files
//! (`S`, which the `tar` crate writes for a file with holes: cargo-nextest
//! archives linked executables so); any other entry is reported with its
//! type, for the caller to leave out.
//!
//! Every byte read counts against the reader's limit
//! ([`TarReader::with_limit`]), headers and extensions included: an
//! archive of nothing but extension headers (endless PAX globals: 18 MB of
//! zstd, 216 GB of tar) stops at the limit with an error
//! ([`ErrorKind::FileTooLarge`](io::ErrorKind::FileTooLarge)), rather than
//! being read to its end without ever returning an entry.

use std::io::{self, Read};

/// The largest GNU long name or PAX header taken: a store's longest path
/// is a few hundred bytes.
pub const MAX_EXTENSION: u64 = 64 * 1024;

const BLOCK: usize = 512;

/// One entry's header: its path, its type flag, and the size of its data,
/// which follows (see [`TarReader::copy_data`], [`TarReader::skip_data`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// The entry's path: a GNU long name or PAX path when one came before it,
    /// else the header's own.
    pub path: Vec<u8>,
    /// The type flag (`0` a regular file, `S` a sparse one, ...).
    pub kind: u8,
    /// The bytes of data that follow the header (for a sparse file, its
    /// pieces only).
    pub size: u64,
    /// The permission bits (`0o7777` at most); `0o644` when the field
    /// cannot be read.
    pub mode: u32,
    /// A sparse file's map: its data is these (offset, length) pieces of
    /// a file of `real_size` bytes, the rest holes.
    pub sparse: Option<Sparse>,
}

/// Where a sparse entry's data goes (see [`TarReader::copy_sparse`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Sparse {
    /// Each piece's offset in the file and length, in order, not overlapping.
    pub pieces: Vec<(u64, u64)>,
    /// The whole file's length, holes included.
    pub real_size: u64,
}

/// At most this many pieces in a sparse file's map (each extension block
/// of 21 counts against the reader's limit too).
const MAX_SPARSE_PIECES: usize = 1 << 16;

impl Header {
    /// A regular file (`0`, or NUL in old archives).
    pub fn is_regular(&self) -> bool {
        self.kind == b'0' || self.kind == 0
    }

    /// A GNU sparse file (`S`), its map read and checked.
    pub fn is_sparse(&self) -> bool {
        self.kind == b'S' && self.sparse.is_some()
    }
}

/// A tar stream read one header at a time, within a limit of bytes.
pub struct TarReader<R> {
    inner: R,
    /// Bytes of the current entry's data not yet read, and its padding.
    pending: u64,
    /// Bytes read from the stream so far.
    pub read: u64,
    /// The most [`TarReader::read`] may reach.
    limit: u64,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl<R: Read> TarReader<R> {
    /// A reader that reads no more than `limit` bytes of `inner`.
    pub fn with_limit(inner: R, limit: u64) -> TarReader<R> {
        TarReader {
            inner,
            pending: 0,
            read: 0,
            limit,
        }
    }

    /// Fails unless `n` more bytes fit within the limit.
    fn reserve(&self, n: u64) -> io::Result<()> {
        if self.read.saturating_add(n) > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "over {} bytes decompressed (headers and extended headers count)",
                    self.limit
                ),
            ));
        }
        Ok(())
    }

    /// The next entry's header, `None` at the end of the archive. Whatever
    /// of the previous entry's data was not read is skipped first.
    pub fn next_header(&mut self) -> io::Result<Option<Header>> {
        self.skip_data()?;
        let mut long_path: Option<Vec<u8>> = None;
        let mut pax_size: Option<u64> = None;
        loop {
            let mut block = [0u8; BLOCK];
            if !self.read_block(&mut block)? {
                return Ok(None);
            }
            if block.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            check_sum(&block)?;
            let size = parse_size(&block[124..136])?;
            let kind = block[156];
            match kind {
                b'L' | b'x' | b'g' => {
                    if size > MAX_EXTENSION {
                        return Err(invalid(format!(
                            "an extended header of {size} bytes (at most {MAX_EXTENSION} are read)"
                        )));
                    }
                    self.reserve(size)?;
                    let mut data = vec![0u8; size as usize];
                    self.read_exact_counted(&mut data)?;
                    self.pending = padding(size);
                    self.skip_data()?;
                    match kind {
                        b'L' => {
                            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                            data.truncate(end);
                            long_path = Some(data);
                        }
                        b'x' => {
                            for (key, value) in pax_records(&data)? {
                                match key {
                                    b"path" => long_path = Some(value.to_vec()),
                                    b"size" => {
                                        pax_size = Some(
                                            std::str::from_utf8(value)
                                                .ok()
                                                .and_then(|v| v.parse().ok())
                                                .ok_or_else(|| {
                                                    invalid("a PAX size that is no number")
                                                })?,
                                        )
                                    }
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                }
                _ => {
                    let size = pax_size.unwrap_or(size);
                    let path = long_path.unwrap_or_else(|| ustar_path(&block));
                    let mode = parse_size(&block[100..108]).map_or(0o644, |m| (m & 0o7777) as u32);
                    let sparse = if kind == b'S' {
                        Some(self.sparse_map(&block, size)?)
                    } else {
                        None
                    };
                    self.pending = size + padding(size);
                    return Ok(Some(Header {
                        path,
                        kind,
                        size,
                        mode,
                        sparse,
                    }));
                }
            }
        }
    }

    /// Copies the current entry's data to `out`.
    pub fn copy_data(&mut self, size: u64, out: &mut impl io::Write) -> io::Result<()> {
        self.copy_counted(size, out)?;
        self.skip_data()
    }

    /// Copies the next `len` bytes of the current entry's data to `out`.
    fn copy_counted(&mut self, len: u64, out: &mut impl io::Write) -> io::Result<()> {
        self.reserve(len)?;
        let copied = io::copy(&mut (&mut self.inner).take(len), out)?;
        self.read += copied;
        if copied != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.pending -= len;
        Ok(())
    }

    /// A GNU sparse header's map, and the extension blocks that follow
    /// it: pieces in order, apart, inside the file, holding exactly the
    /// `size` bytes stored.
    fn sparse_map(&mut self, block: &[u8; BLOCK], size: u64) -> io::Result<Sparse> {
        let bad = || invalid("a sparse file's map that does not hold together");
        let mut pieces = Vec::new();
        let take = |fields: &[u8], pieces: &mut Vec<(u64, u64)>| -> io::Result<()> {
            for entry in fields.chunks_exact(24) {
                if entry.iter().all(|&b| b == 0) {
                    continue;
                }
                pieces.push((parse_size(&entry[..12])?, parse_size(&entry[12..])?));
            }
            Ok(())
        };
        take(&block[386..482], &mut pieces)?;
        let real_size = parse_size(&block[483..495])?;
        let mut extended = block[482] != 0;
        while extended {
            if pieces.len() > MAX_SPARSE_PIECES {
                return Err(bad());
            }
            let mut more = [0u8; BLOCK];
            if !self.read_block(&mut more)? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            take(&more[..504], &mut pieces)?;
            extended = more[504] != 0;
        }
        let mut end = 0u64;
        let mut stored = 0u64;
        for &(offset, len) in &pieces {
            let to = offset.checked_add(len).ok_or_else(bad)?;
            if offset < end || to > real_size {
                return Err(bad());
            }
            end = to;
            stored += len;
        }
        if stored != size {
            return Err(bad());
        }
        Ok(Sparse { pieces, real_size })
    }

    /// Writes the current sparse entry's data to `out` at its pieces'
    /// offsets, and gives `out` its full length (the rest holes).
    pub fn copy_sparse(&mut self, sparse: &Sparse, out: &mut std::fs::File) -> io::Result<()> {
        use std::io::{Seek, SeekFrom};
        for &(offset, len) in &sparse.pieces {
            out.seek(SeekFrom::Start(offset))?;
            self.copy_counted(len, out)?;
        }
        out.set_len(sparse.real_size)?;
        self.skip_data()
    }

    /// Skips what is left of the current entry's data and padding.
    pub fn skip_data(&mut self) -> io::Result<()> {
        self.reserve(self.pending)?;
        let pending = std::mem::take(&mut self.pending);
        let skipped = io::copy(&mut (&mut self.inner).take(pending), &mut io::sink())?;
        self.read += skipped;
        if skipped != pending {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// Reads one block; `false` at a clean end of the stream.
    fn read_block(&mut self, block: &mut [u8; BLOCK]) -> io::Result<bool> {
        self.reserve(BLOCK as u64)?;
        let mut filled = 0;
        while filled < BLOCK {
            match self.inner.read(&mut block[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.read += BLOCK as u64;
        Ok(true)
    }

    fn read_exact_counted(&mut self, data: &mut [u8]) -> io::Result<()> {
        self.inner.read_exact(data)?;
        self.read += data.len() as u64;
        Ok(())
    }
}

/// Bytes after `size` bytes of data up to the next block.
fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// The header's checksum: the sum of its bytes with the checksum field
/// read as spaces.
fn check_sum(block: &[u8; BLOCK]) -> io::Result<()> {
    let field = &block[148..156];
    let text: Vec<u8> = field
        .iter()
        .copied()
        .filter(|&b| b != 0 && b != b' ')
        .collect();
    let claimed = std::str::from_utf8(&text)
        .ok()
        .and_then(|t| u64::from_str_radix(t, 8).ok())
        .ok_or_else(|| invalid("a tar header whose checksum is unreadable"))?;
    let sum: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum();
    if sum != claimed {
        return Err(invalid("a tar header whose checksum does not match"));
    }
    Ok(())
}

/// A size field: octal digits, or GNU's base-256 (high bit set).
fn parse_size(field: &[u8]) -> io::Result<u64> {
    if field[0] & 0x80 != 0 {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            value = value
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or_else(|| invalid("a tar size too large"))?;
        }
        return Ok(value);
    }
    let text: Vec<u8> = field
        .iter()
        .copied()
        .filter(|&b| b != 0 && b != b' ')
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(&text)
        .ok()
        .and_then(|t| u64::from_str_radix(t, 8).ok())
        .ok_or_else(|| invalid("a tar size that is no number"))
}

/// A ustar header's path: its prefix, then its name, each NUL-terminated.
fn ustar_path(block: &[u8; BLOCK]) -> Vec<u8> {
    let field = |range: std::ops::Range<usize>| {
        let bytes = &block[range];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        bytes[..end].to_vec()
    };
    let name = field(0..100);
    let ustar = &block[257..262] == b"ustar";
    let prefix = if ustar && &block[257..263] == b"ustar\0" {
        field(345..500)
    } else {
        Vec::new()
    };
    if prefix.is_empty() {
        name
    } else {
        [prefix, b"/".to_vec(), name].concat()
    }
}

/// A PAX header's records: `<length> <key>=<value>\n`, each length
/// counting the whole record.
fn pax_records(data: &[u8]) -> io::Result<Vec<(&[u8], &[u8])>> {
    let mut records = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| invalid("a PAX record without a length"))?;
        let length: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|t| t.parse().ok())
            .filter(|&n: &usize| n > space + 1 && n <= rest.len())
            .ok_or_else(|| invalid("a PAX record with a wrong length"))?;
        let record = &rest[space + 1..length];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        let equals = record
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| invalid("a PAX record without a key"))?;
        records.push((&record[..equals], &record[equals + 1..]));
        rest = &rest[length..];
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(path: &str, kind: u8, size: u64) -> [u8; BLOCK] {
        let mut h = tar::Header::new_gnu();
        h.set_path(path).unwrap();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_cksum();
        *h.as_bytes()
    }

    #[test]
    fn what_the_tar_crate_writes_is_read_back() {
        let long = format!("v1/{}/test", "k".repeat(150));
        let mut builder = tar::Builder::new(Vec::new());
        for (path, data) in [("v1/a/b", &b"hello"[..]), (long.as_str(), &[7u8; 700][..])] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            builder.append_data(&mut h, path, data).unwrap();
        }
        let bytes = builder.into_inner().unwrap();
        let mut reader = TarReader::with_limit(bytes.as_slice(), u64::MAX);
        let mut seen = Vec::new();
        while let Some(h) = reader.next_header().unwrap() {
            let mut data = Vec::new();
            reader.copy_data(h.size, &mut data).unwrap();
            assert!(h.is_regular());
            seen.push((String::from_utf8(h.path).unwrap(), data));
        }
        assert_eq!(seen[0], ("v1/a/b".to_owned(), b"hello".to_vec()));
        assert_eq!(seen[1], (long, vec![7u8; 700]));
        // Read to the first of the two zero blocks that end an archive.
        assert_eq!(reader.read + 512, bytes.len() as u64);
    }

    #[test]
    fn a_file_with_holes_the_tar_crate_writes_as_sparse_is_read_back_whole() {
        use std::io::{Seek, SeekFrom, Write};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holes");
        let mut file = std::fs::File::create(&path).unwrap();
        // Data, a hole of 1 MiB, data, and a hole at the end.
        file.write_all(&[1u8; 5000]).unwrap();
        file.seek(SeekFrom::Start(5000 + (1 << 20))).unwrap();
        file.write_all(&[2u8; 3000]).unwrap();
        file.set_len(4 << 20).unwrap();
        drop(file);
        let whole = std::fs::read(&path).unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        builder.sparse(true);
        builder.append_path_with_name(&path, "bin/holes").unwrap();
        let bytes = builder.into_inner().unwrap();
        let mut reader = TarReader::with_limit(bytes.as_slice(), u64::MAX);
        let header = reader.next_header().unwrap().unwrap();
        // A file system without holes stores it whole, as a plain file.
        let out_path = dir.path().join("out");
        let mut out = std::fs::File::create(&out_path).unwrap();
        match &header.sparse {
            Some(sparse) => {
                assert!(header.is_sparse() && !header.is_regular());
                assert!(header.size < whole.len() as u64);
                reader.copy_sparse(sparse, &mut out).unwrap();
            }
            None => reader.copy_data(header.size, &mut out).unwrap(),
        }
        drop(out);
        assert_eq!(std::fs::read(&out_path).unwrap(), whole);
        assert!(reader.next_header().unwrap().is_none());

        // A map whose pieces hold more than the entry stores is refused.
        let mut forged = header_block(b"bin/x", b'S', 10);
        forged[386..398].copy_from_slice(b"00000000000\0");
        forged[398..410].copy_from_slice(b"00000000100\0");
        forged[483..495].copy_from_slice(b"00000000200\0");
        set_checksum(&mut forged);
        let mut bytes = forged.to_vec();
        bytes.extend_from_slice(&[0u8; BLOCK * 3]);
        let mut reader = TarReader::with_limit(bytes.as_slice(), u64::MAX);
        assert!(reader.next_header().is_err());
    }

    fn header_block(path: &[u8], kind: u8, size: u64) -> [u8; BLOCK] {
        let mut block = [0u8; BLOCK];
        block[..path.len()].copy_from_slice(path);
        block[100..108].copy_from_slice(b"0000644\0");
        block[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        block[156] = kind;
        block[257..265].copy_from_slice(b"ustar  \0");
        block
    }

    fn set_checksum(block: &mut [u8; BLOCK]) {
        block[148..156].copy_from_slice(b"        ");
        let sum: u64 = block.iter().map(|&b| u64::from(b)).sum();
        block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    #[test]
    fn an_extension_larger_than_the_limit_is_refused_before_it_is_read() {
        for kind in [b'L', b'x'] {
            // The claimed gigabyte is never there: refused from the header.
            let bytes = header("././@LongLink", kind, 1 << 30).to_vec();
            let error = TarReader::with_limit(bytes.as_slice(), u64::MAX)
                .next_header()
                .unwrap_err();
            assert!(error.to_string().contains("extended header"), "{error}");
        }
    }

    #[test]
    fn a_damaged_header_is_refused() {
        let mut block = header("v1/a/b", b'0', 3);
        block[0] = b'w';
        let error = TarReader::with_limit(&block[..], u64::MAX)
            .next_header()
            .unwrap_err();
        assert!(error.to_string().contains("checksum"), "{error}");
    }

    #[test]
    fn pax_paths_and_sizes_are_read() {
        let record = |kv: &str| {
            let mut n = kv.len() + 3;
            if format!("{n} {kv}\n").len() != n {
                n += 1;
            }
            format!("{n} {kv}\n")
        };
        let pax = format!("{}{}", record("path=v1/long/name"), record("size=4"));
        let mut bytes = header("PaxHeader", b'x', pax.len() as u64).to_vec();
        bytes.extend_from_slice(pax.as_bytes());
        bytes.resize(bytes.len() + padding(pax.len() as u64) as usize, 0);
        bytes.extend_from_slice(&header("short", b'0', 0));
        bytes.extend_from_slice(b"data");
        bytes.resize(bytes.len() + 508, 0);
        let mut reader = TarReader::with_limit(bytes.as_slice(), u64::MAX);
        let h = reader.next_header().unwrap().unwrap();
        assert_eq!(h.path, b"v1/long/name");
        assert_eq!(h.size, 4);
        let mut data = Vec::new();
        reader.copy_data(h.size, &mut data).unwrap();
        assert_eq!(data, b"data");
        assert_eq!(reader.next_header().unwrap(), None);
    }

    #[test]
    fn extension_headers_count_against_the_limit() {
        // Global PAX headers without end, and never an entry: read up to
        // the limit, then an error, not to the end of the stream.
        let mut global = header("pax_global_header", b'g', 12).to_vec();
        global.extend_from_slice(b"12 comment=\n");
        global.resize(2 * BLOCK, 0);
        let endless = Cycle(&global, 0);
        let mut reader = TarReader::with_limit(endless, 1 << 20);
        let error = reader.next_header().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge, "{error}");
        assert!(error.to_string().contains("1048576 bytes"), "{error}");
        assert!(reader.read <= 1 << 20);
        // A GNU long name of 40 KiB before an entry: counted too.
        let mut bytes = header("././@LongLink", b'L', 40 * 1024).to_vec();
        bytes.resize(bytes.len() + 40 * 1024, b'n');
        bytes.extend_from_slice(&header("short", b'0', 0));
        bytes.resize(bytes.len() + 2 * BLOCK, 0);
        let error = TarReader::with_limit(bytes.as_slice(), 32 * 1024)
            .next_header()
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge, "{error}");
        let mut reader = TarReader::with_limit(bytes.as_slice(), u64::MAX);
        assert_eq!(
            reader.next_header().unwrap().unwrap().path,
            vec![b'n'; 40 * 1024]
        );
    }

    /// `bytes` again and again, without end.
    struct Cycle<'a>(&'a [u8], usize);

    impl Read for Cycle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 = (self.1 + n) % self.0.len();
            Ok(n)
        }
    }
}
