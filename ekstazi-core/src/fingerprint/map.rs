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
    pub start: u64,
    pub size: u64,
    /// The input section's name, e.g. `.rodata..Lanon.744f.2` or `.bss.FOO`.
    pub name: String,
    /// The output section it went into, e.g. `.rodata` (shared by all of
    /// its input sections).
    pub output: Arc<str>,
    pub merge: Merge,
}

/// Parses an LLD map. Lines that are not input sections are skipped; an
/// empty result means the map was not in a format this reader knows. The
/// map lists non-allocated sections too (debug information, relocations),
/// with offsets where addresses would be: callers keep the extents whose
/// output section is loaded.
pub fn parse(text: &str) -> Vec<Extent> {
    let mut lines = text.lines();
    // The header's columns tell an output section (named under `Out`) from
    // an input section (under `In`) and a symbol (under `Symbol`).
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let (Some(out_column), Some(in_column)) = (
        header.find(" Out ").map(|i| i + 1),
        header.find(" In ").map(|i| i + 1),
    ) else {
        return Vec::new();
    };
    let mut output: Arc<str> = Arc::from("");
    let mut extents = Vec::new();
    for line in lines {
        let Some((start, size, name, column)) = parse_line(line) else {
            continue;
        };
        if column == out_column {
            output = Arc::from(name);
        } else if column == in_column
            && size > 0
            && let Some(section) = name
                .rfind(":(")
                .and_then(|open| name[open + 2..].strip_suffix(')'))
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
            extents.push(Extent {
                start,
                size,
                name: section.to_owned(),
                output: output.clone(),
                merge,
            });
        }
    }
    extents.sort_by_key(|e| e.start);
    extents
}

/// `VMA LMA Size Align Name`: the address, size, name and the column the
/// name starts at.
fn parse_line(line: &str) -> Option<(u64, u64, &str, usize)> {
    let mut rest = line;
    let mut numbers = [0u64; 4];
    for number in &mut numbers {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ')?;
        *number = u64::from_str_radix(&trimmed[..end], 16).ok()?;
        rest = &trimmed[end..];
    }
    let name = rest.trim_start();
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
        let extents = parse(map);
        assert_eq!(extents.len(), 5);
        assert_eq!(
            &*extents[0].output, ".debug_abbrev",
            "kept, for the caller to drop"
        );
        assert_eq!(
            (extents[1].name.as_str(), &*extents[1].output),
            (".interp", ".interp")
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
}
