//! The coverage tables SanitizerCoverage puts in an instrumented executable,
//! and the one change made to them after linking.
//!
//! With `-sanitizer-coverage-inline-bool-flag -sanitizer-coverage-pc-table`
//! every instrumented function gets a one-byte flag in [`FLAGS_SECTION`], set
//! on entry, and an entry `(its address, flags)` at the same index of
//! [`PCS_SECTION`]. The linker orders both arrays by the functions they
//! belong to (each function's pieces are `SHF_LINK_ORDER` sections tied to
//! it), so flag `i` is the function of entry `i`. The shim writes which
//! flags are set, as offsets in the object; the fingerprinter reads the PC
//! table from the file and so knows the function of each flag. Nothing
//! reads the PC table at run time.
//!
//! Yet in a position-independent executable the loader relocates it at
//! every start: one `R_X86_64_RELATIVE` per instrumented function (38 765
//! of the 54 224 relocations of an instrumented `just`), and every page of
//! the table copied on write (620 KB there). A test that runs its project's
//! program pays that at every run. [`unrelocate`] takes those relocations
//! out of the linked file; the table's addresses stay readable offline from
//! the static relocations that `--emit-relocs` keeps (`.rela__sancov_pcs`).
//!
//! Written by hand on top of `object`'s ELF reader: no crate edits the
//! dynamic relocations of a linked executable in place, and a new file
//! written whole would cost a copy of a 100 MB debug binary per link.

use object::Endianness;
use object::elf::{Dyn64, FileHeader64, Rela64, SectionHeader64};
use object::read::elf::{Dyn, FileHeader, Rela, SectionHeader};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The rustc flags that make these tables (SanitizerCoverage at function
/// entries, with inline bool flags and a PC table; stable rustc takes the
/// pass and its LLVM options through `-C`), and v0 symbol mangling: its
/// names carry generic arguments and number closures, so a name without
/// its crate hashes still tells one function from another (legacy mangling
/// puts all of that in the hash, which changes with every version bump of
/// a dependency). cargo-ekstazi's rustc wrapper gives them to every target
/// crate; `cargo xtask bench-edit --parts` builds with them alone.
pub const RUSTC_FLAGS: [&str; 10] = [
    "-C",
    "symbol-mangling-version=v0",
    "-C",
    "passes=sancov-module",
    "-C",
    "llvm-args=-sanitizer-coverage-level=1",
    "-C",
    "llvm-args=-sanitizer-coverage-inline-bool-flag",
    "-C",
    "llvm-args=-sanitizer-coverage-pc-table",
];

/// The per-function coverage flags.
pub const FLAGS_SECTION: &str = "__sancov_bools";
/// The per-function PC table, parallel to [`FLAGS_SECTION`].
pub const PCS_SECTION: &str = "__sancov_pcs";

/// Removes the load-time relocations of the PC table from the executable at
/// `path`, in place; returns how many were removed. A file that is not an
/// x86-64 position-independent executable with a PC table, or whose dynamic
/// relocations are laid out in a way not understood here (packed `DT_RELR`
/// relocations, a relocation table not matching its section), is left as
/// it is: it only starts slower.
///
/// The writes are ordered so that the file is a working executable after
/// each of them: an interrupted edit cannot leave a binary that crashes.
pub fn unrelocate(path: &Path) -> io::Result<usize> {
    let plan = {
        let bytes = crate::digests::mapped::bytes(path)?;
        match plan(&bytes) {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(0),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    };
    let file = OpenOptions::new().write(true).open(path)?;
    // 1. Fewer relocations said to be `RELATIVE` at the front: the loader
    //    applies that many without looking at their type, and the array is
    //    about to move down under it. With the old array, a smaller count
    //    only sends some `RELATIVE` ones through the general path.
    if let Some((offset, count)) = plan.relative_count {
        file.write_all_at(&count.to_le_bytes(), offset)?;
    }
    // 2. The kept relocations, moved down. Every relocation is somewhere in
    //    the old size at every moment of the write (a kept one moves only to
    //    a lower place), and applying one twice writes the same value twice.
    file.write_all_at(&plan.kept, plan.table_offset)?;
    // 3. The new size, in the dynamic section and the section header.
    file.write_all_at(&plan.size.to_le_bytes(), plan.size_offset)?;
    file.write_all_at(&plan.size.to_le_bytes(), plan.section_size_offset)?;
    // No `fsync`: the linker does not sync the file it wrote either, and
    // syncing would wait for the whole executable to be written back.
    Ok(plan.removed)
}

/// The writes that take the PC table's relocations out (all values
/// little-endian: only x86-64 is edited).
#[derive(Debug)]
struct Plan {
    removed: usize,
    /// The kept relocations, to be written at `table_offset`.
    kept: Vec<u8>,
    table_offset: u64,
    /// The new `DT_RELASZ`, and where its value is in the file.
    size: u64,
    size_offset: u64,
    /// Where the relocation section header's `sh_size` is.
    section_size_offset: u64,
    /// Where `DT_RELACOUNT`'s value is, and its new value.
    relative_count: Option<(u64, u64)>,
}

fn plan(data: &[u8]) -> Result<Option<Plan>, String> {
    let e = |what: &'static str| move |err: object::Error| format!("{what}: {err}");
    let header = FileHeader64::<Endianness>::parse(data).map_err(e("ELF header"))?;
    let endian = header.endian().map_err(e("ELF header"))?;
    if header.e_machine(endian) != object::elf::EM_X86_64
        || header.e_type(endian) != object::elf::ET_DYN
        || endian != Endianness::Little
    {
        return Ok(None);
    }
    let sections = header.sections(endian, data).map_err(e("sections"))?;
    let Some((_, pcs)) = sections.section_by_name(endian, PCS_SECTION.as_bytes()) else {
        return Ok(None);
    };
    let pcs = pcs.sh_addr(endian)..pcs.sh_addr(endian) + pcs.sh_size(endian);
    let Some(dynamic) = sections
        .iter()
        .find(|s| s.sh_type(endian) == object::elf::SHT_DYNAMIC)
    else {
        return Ok(None);
    };
    let dynamic_offset = dynamic.sh_offset(endian);
    let entries: &[Dyn64<Endianness>] = dynamic
        .data_as_array(endian, data)
        .map_err(e("dynamic section"))?;
    let tag =
        |wanted: object::elf::DynamicTag| entries.iter().position(|d| d.tag(endian) == wanted);
    let (Some(rela), Some(rela_size), Some(rela_ent)) = (
        tag(object::elf::DT_RELA),
        tag(object::elf::DT_RELASZ),
        tag(object::elf::DT_RELAENT),
    ) else {
        return Ok(None);
    };
    if tag(object::elf::DT_RELR).is_some()
        || entries[rela_ent].d_val(endian) != size_of::<Rela64<Endianness>>() as u64
    {
        return Ok(None);
    }
    let (address, size) = (
        entries[rela].d_val(endian),
        entries[rela_size].d_val(endian),
    );
    let Some((index, section)) = sections.iter().enumerate().find(|(_, s)| {
        s.sh_type(endian) == object::elf::SHT_RELA
            && s.sh_addr(endian) == address
            && s.sh_size(endian) == size
    }) else {
        return Ok(None);
    };
    let relocations: &[Rela64<Endianness>] = section
        .data_as_array(endian, data)
        .map_err(e("dynamic relocations"))?;
    let of_table = |r: &Rela64<Endianness>| {
        r.r_type(endian, false) == object::elf::R_X86_64_RELATIVE
            && pcs.contains(&r.r_offset(endian))
    };
    let removed = relocations.iter().filter(|r| of_table(r)).count();
    if removed == 0 {
        return Ok(None);
    }
    let kept: Vec<Rela64<Endianness>> = relocations
        .iter()
        .filter(|r| !of_table(r))
        .copied()
        .collect();
    let relative_count = tag(object::elf::DT_RELACOUNT).map(|i| {
        let count = entries[i].d_val(endian);
        let prefix = usize::try_from(count).unwrap_or(usize::MAX);
        let removed_there = relocations
            .iter()
            .take(prefix)
            .filter(|r| of_table(r))
            .count();
        (
            dynamic_offset + value_offset(i),
            count - removed_there as u64,
        )
    });
    let section_headers = header.e_shoff(endian);
    let entry_size = u64::from(header.e_shentsize(endian));
    Ok(Some(Plan {
        removed,
        kept: object::pod::bytes_of_slice(&kept).to_vec(),
        table_offset: section.sh_offset(endian),
        size: (kept.len() * size_of::<Rela64<Endianness>>()) as u64,
        size_offset: dynamic_offset + value_offset(rela_size),
        section_size_offset: section_headers
            + index as u64 * entry_size
            + std::mem::offset_of!(SectionHeader64<Endianness>, sh_size) as u64,
        relative_count,
    }))
}

/// Where the value of the `i`th dynamic entry is, from the section's start.
fn value_offset(i: usize) -> u64 {
    (i * size_of::<Dyn64<Endianness>>() + std::mem::offset_of!(Dyn64<Endianness>, d_val)) as u64
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn what_is_not_an_instrumented_executable_is_left_alone_or_refused() {
        assert!(plan(b"not an ELF file").is_err());
        // This test's own executable: position-independent, no PC table.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(matches!(plan(&me), Ok(None)));
        // Cut short anywhere: an error or nothing to do, never a panic.
        for len in [0, 16, 64, 4096, me.len() / 2] {
            assert!(!matches!(plan(&me[..len]), Ok(Some(_))), "{len} bytes");
        }
    }
}
