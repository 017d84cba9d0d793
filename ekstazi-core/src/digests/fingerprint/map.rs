//! The linker's map (`-Wl,-Map=FILE`): the one exact source of where each
//! input section — each anonymous constant (`.rodata..Lanon.<hash>.<n>`),
//! each static — begins and ends in the executable. Without it the extent of
//! anonymous data can only be guessed, and guesses made the fingerprints of
//! unrelated functions move together.
//!
//! LLD's format (rustc's default linker on x86-64 Linux) is read:
//!
//! ```text
//!              VMA              LMA     Size Align Out     In      Symbol
//!          1f4ea            1f4ea        e     1         /x/a.rcgu.o:(.rodata..Lanon.744f.2)
//! ```

use std::io::{self, Read};
use std::sync::Arc;

/// How the bytes of an input section are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// An ordinary section: one object.
    None,
    /// `.rodata.str*`: NUL-terminated strings, merged across objects.
    Strings,
    /// `.rodata.cstN`: constants of N bytes, merged across objects.
    Constants(u8),
}

/// One input section's place in the executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// Its address in the executable.
    pub start: u64,
    /// Its length, in bytes.
    pub size: u64,
    /// The input section's name, e.g. `.rodata..Lanon.744f.2` or `.bss.FOO`.
    pub name: String,
    /// The output section it went into, e.g. `.rodata` (shared by all of
    /// its input sections).
    pub output: Arc<str>,
    /// How the linker merged it, if it did.
    pub merge: Merge,
}

/// Parses an LLD map, keeping the input sections of the output sections
/// `keep` accepts (the ones the loader maps: the map also lists debug
/// sections and, with `--emit-relocs`, relocation sections, at offsets that
/// look like addresses). Lines that are not input sections are skipped; an
/// empty result means the map was not in a format this reader knows, or
/// listed nothing `keep` wants.
///
/// Bytes, not text: an instrumented test binary's map is 30–75 MB, and
/// about two lines in five name relocation and debug sections nobody reads
/// (73 000 of minijinja's `test_templates`' 187 500) and one in five a
/// symbol. So a line is judged by the column its name starts at before
/// anything is parsed or allocated, and only a kept section's name needs
/// to be UTF-8.
pub fn parse(text: &[u8], keep: impl Fn(&str) -> bool) -> Vec<Extent> {
    let mut parser = Parser::new(keep);
    parser.lines(text);
    parser.finish()
}

/// [`parse`], reading the map from `reader` a block at a time: a large
/// map read whole into memory cost more than parsing it (fresh pages to
/// fill, then to free).
pub fn read(reader: impl Read, keep: impl Fn(&str) -> bool) -> io::Result<Vec<Extent>> {
    read_blocks(reader, keep, 1 << 20)
}

fn read_blocks(
    mut reader: impl Read,
    keep: impl Fn(&str) -> bool,
    block: usize,
) -> io::Result<Vec<Extent>> {
    let mut parser = Parser::new(keep);
    let mut buffer = vec![0u8; block.max(1)];
    // `buffer[..filled]` holds what is read and not yet parsed: the start of
    // a line whose end is still to come.
    let mut filled = 0;
    loop {
        if filled == buffer.len() {
            // One line longer than the buffer: not a map this reader knows,
            // but read on rather than cut it.
            buffer.resize(buffer.len() * 2, 0);
        }
        let n = match reader.read(&mut buffer[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            // The last line, if it has no line end.
            parser.lines(&buffer[..filled]);
            return Ok(parser.finish());
        }
        filled += n;
        let Some(last) = memchr::memrchr(b'\n', &buffer[..filled]) else {
            continue;
        };
        parser.lines(&buffer[..=last]);
        buffer.copy_within(last + 1..filled, 0);
        filled -= last + 1;
    }
}

/// The map's lines, one at a time: the header's columns first.
struct Parser<K> {
    keep: K,
    /// Where an output section's name starts (under `Out`), and an input
    /// section's (under `In`); `None` before the header, or after a header
    /// this reader does not know.
    columns: Option<Option<(usize, usize)>>,
    output: Option<Arc<str>>,
    extents: Vec<Extent>,
}

impl<K: Fn(&str) -> bool> Parser<K> {
    fn new(keep: K) -> Parser<K> {
        Parser {
            keep,
            columns: None,
            output: None,
            extents: Vec::new(),
        }
    }

    fn lines(&mut self, text: &[u8]) {
        for line in lines(text) {
            self.line(line);
        }
    }

    fn line(&mut self, line: &[u8]) {
        // The header's columns tell an output section (named under `Out`)
        // from an input section (under `In`) and a symbol (under `Symbol`).
        let Some(columns) = self.columns else {
            let column = |label: &[u8]| memchr::memmem::find(line, label).map(|i| i + 1);
            self.columns = Some(column(b" Out ").zip(column(b" In ")));
            return;
        };
        let Some((out_column, in_column)) = columns else {
            return;
        };
        // A line whose name starts at `column` has a non-blank byte there; a
        // symbol's line, indented further, has a blank one under both columns.
        let names_at = |column: usize| line.get(column).is_some_and(|b| *b != b' ');
        let is_output = names_at(out_column);
        if !is_output && (self.output.is_none() || !names_at(in_column)) {
            return;
        }
        let Some((start, size, name, at)) = parse_line(line) else {
            return;
        };
        if at == out_column {
            self.output = std::str::from_utf8(name)
                .ok()
                .filter(|name| (self.keep)(name))
                .map(Arc::from);
        } else if let Some(output) = &self.output
            && at == in_column
            && size > 0
            && let Some(section) = section_of(name)
        {
            let merge = if section.starts_with(".rodata.str") {
                Merge::Strings
            } else if let Some(n) = section
                .strip_prefix(".rodata.cst")
                .and_then(|n| n.parse().ok())
            {
                Merge::Constants(n)
            } else {
                Merge::None
            };
            self.extents.push(Extent {
                start,
                size,
                name: section.to_owned(),
                output: output.clone(),
                merge,
            });
        }
    }

    fn finish(mut self) -> Vec<Extent> {
        self.extents.sort_by_key(|e| e.start);
        self.extents
    }
}

/// The lines of the map, without their line ends.
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    })
}

/// The section of an input section's name, `<file>:(<section>)`.
fn section_of(name: &[u8]) -> Option<&str> {
    let open = memchr::memmem::rfind(name, b":(")?;
    let section = name[open + 2..].strip_suffix(b")")?;
    std::str::from_utf8(section).ok()
}

/// `VMA LMA Size Align Name`: the address, size, name and the column the
/// name starts at.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8], usize)> {
    let mut rest = line;
    let mut numbers = [0u64; 4];
    for number in &mut numbers {
        let trimmed = rest.trim_ascii_start();
        let end = memchr::memchr(b' ', trimmed)?;
        *number = u64::from_str_radix(std::str::from_utf8(&trimmed[..end]).ok()?, 16).ok()?;
        rest = &trimmed[end..];
    }
    let name = rest.trim_ascii_start();
    if name.is_empty() {
        return None;
    }
    Some((numbers[0], numbers[2], name, line.len() - name.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lld_input_sections_with_their_output_section() {
        let map = "             VMA              LMA     Size Align Out     In      Symbol
             2e0              2e0       1c     1 .interp
             2e0              2e0       1c     1         <internal>:(.interp)
           1bb90            1bb90     dafc    16 .rodata
           1f4ea            1f4ea        e     1         /x/a b.rcgu.o:(.rodata..Lanon.744f.2)
           1bb90            1bb90     395a     1         <internal>:(.rodata.str1.1)
           1f940            1f940      480    16         <internal>:(.rodata.cst16)
           1f940            1f940        0    16                 some_symbol
               0                0     2e9b     1 .debug_abbrev
               0                0      1b8     1         /x/a.o:(.debug_abbrev)
";
        let extents = parse(map.as_bytes(), |_| true);
        assert_eq!(extents.len(), 5);
        assert_eq!(&*extents[0].output, ".debug_abbrev", "kept when asked for");
        assert_eq!(
            (extents[1].name.as_str(), &*extents[1].output),
            (".interp", ".interp")
        );
        let loaded = parse(map.as_bytes(), |output| !output.starts_with(".debug"));
        assert_eq!(loaded.len(), 4);
        assert!(loaded.iter().all(|e| &*e.output != ".debug_abbrev"));
        assert_eq!(
            parse(map.replace('\n', "\r\n").as_bytes(), |_| true),
            extents,
            "CRLF line ends read alike"
        );
        let anon = extents
            .iter()
            .find(|e| e.name == ".rodata..Lanon.744f.2")
            .unwrap();
        assert_eq!(
            (anon.start, anon.size, anon.merge),
            (0x1f4ea, 0xe, Merge::None)
        );
        assert_eq!(&*anon.output, ".rodata");
        assert!(extents.iter().any(|e| e.merge == Merge::Strings));
        assert!(extents.iter().any(|e| e.merge == Merge::Constants(16)));
    }

    /// A reader that hands out at most a few bytes a call.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = self.1 % 7 + 1;
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_map_read_in_blocks_gives_what_it_gives_whole() {
        let map = "             VMA              LMA     Size Align Out     In      Symbol
           1bb90            1bb90     dafc    16 .rodata
           1f4ea            1f4ea        e     1         /x/a b.rcgu.o:(.rodata..Lanon.744f.2)

           1bb90            1bb90     395a     1         <internal>:(.rodata.str1.1)
           1f940            1f940      480    16         <internal>:(.rodata.cst16)
           1f940            1f940        0    16                 some_symbol
           2f000            2f000       10    16 .data
           2f000            2f000       10    16         /x/a.o:(.data.x)";
        let keep = |output: &str| output != ".text";
        for text in [
            map.to_owned(),
            format!("{map}\n"),
            map.replace('\n', "\r\n"),
            format!("\n{map}"),
            String::new(),
            "\n".to_owned(),
        ] {
            let whole = parse(text.as_bytes(), keep);
            // Blocks shorter than a line make the buffer grow; a reader
            // that returns a few bytes at a time ends blocks mid-line.
            for block in [1, 5, 64, 1 << 20] {
                let read = read_blocks(Trickle(text.as_bytes(), 0), keep, block).unwrap();
                assert_eq!(read, whole, "block {block}: {text:?}");
            }
            assert_eq!(read(text.as_bytes(), keep).unwrap(), whole);
        }
        // The last line, without a line end, is an extent too.
        assert_eq!(parse(map.as_bytes(), keep).len(), 4);
    }

    #[test]
    fn symbols_and_unknown_formats_give_no_extents() {
        let symbols_only = "             VMA              LMA     Size Align Out     In      Symbol
           1f940            1f940      480    16                 some_symbol
";
        assert!(parse(symbols_only.as_bytes(), |_| true).is_empty());
        assert!(parse(b"", |_| true).is_empty());
        assert!(parse(b"Address  Size  Name\n0 1 .text\n", |_| true).is_empty());
        // An input section before any output section belongs to none.
        let orphan = "             VMA              LMA     Size Align Out     In      Symbol
             2e0              2e0       1c     1         <internal>:(.interp)
";
        assert!(parse(orphan.as_bytes(), |_| true).is_empty());
        // Bytes that are not UTF-8 in a file's path do not matter; a
        // section name that is not UTF-8 is no extent.
        let odd: &[u8] = b"             VMA              LMA     Size Align Out     In      Symbol
           1bb90            1bb90     dafc    16 .rodata
           1f4ea            1f4ea        e     1         /x/\xff.o:(.rodata.a)
           1f4f8            1f4f8        e     1         /x/a.o:(.rodata.\xff)
";
        let extents = parse(odd, |_| true);
        assert_eq!(extents.len(), 1);
        assert_eq!(extents[0].name, ".rodata.a");
    }
}
