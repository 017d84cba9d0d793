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
    pub merge: Merge,
}

/// Parses an LLD map. Lines that are not input sections are skipped; an
/// empty result means the map was not in a format this reader knows.
pub fn parse(text: &str) -> Vec<Extent> {
    let mut extents: Vec<Extent> = text.lines().filter_map(parse_line).collect();
    extents.sort_by_key(|e| e.start);
    extents
}

fn parse_line(line: &str) -> Option<Extent> {
    let mut fields = line.split_whitespace();
    let start = u64::from_str_radix(fields.next()?, 16).ok()?;
    let _lma = fields.next()?;
    let size = u64::from_str_radix(fields.next()?, 16).ok()?;
    let _align = fields.next()?;
    let rest = fields.collect::<Vec<_>>().join(" ");
    // An input section names its object: `path:(section)`.
    let open = rest.rfind(":(")?;
    let name = rest[open + 2..].strip_suffix(')')?.to_owned();
    if size == 0 {
        return None;
    }
    let merge = if name.starts_with(".rodata.str") {
        Merge::Strings
    } else if let Some(n) = name
        .strip_prefix(".rodata.cst")
        .and_then(|n| n.parse().ok())
    {
        Merge::Constants(n)
    } else {
        Merge::None
    };
    Some(Extent {
        start,
        size,
        name,
        merge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lld_input_sections() {
        let map = "\
             VMA              LMA     Size Align Out     In      Symbol
             2e0              2e0       1c     1 .interp
             2e0              2e0       1c     1         <internal>:(.interp)
           1f4ea            1f4ea        e     1         /x/a b.rcgu.o:(.rodata..Lanon.744f.2)
           1bb90            1bb90     395a     1         <internal>:(.rodata.str1.1)
           1f940            1f940      480    16         <internal>:(.rodata.cst16)
           1f940            1f940        0    16                 some_symbol
";
        let extents = parse(map);
        assert_eq!(extents.len(), 4);
        assert_eq!(extents[0].name, ".interp");
        let anon = extents
            .iter()
            .find(|e| e.name == ".rodata..Lanon.744f.2")
            .unwrap();
        assert_eq!(
            (anon.start, anon.size, anon.merge),
            (0x1f4ea, 0xe, Merge::None)
        );
        assert!(extents.iter().any(|e| e.merge == Merge::Strings));
        assert!(extents.iter().any(|e| e.merge == Merge::Constants(16)));
    }
}
