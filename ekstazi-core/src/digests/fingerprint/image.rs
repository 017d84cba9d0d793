//! A linked executable as the fingerprinter sees it: sections, function and
//! data symbols, relocations (static ones kept by `--emit-relocs`, and the
//! dynamic ones of a position-independent executable), the thread-local
//! block, and the input-section extents from the linker's map.

use super::FastMap;
use super::FingerprintError;
use super::map::Extent;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags,
    RelocationTarget, SymbolKind,
};
use rayon::prelude::*;

/// One allocated section of the executable.
#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    /// Where its bytes are in the file; `None` for `.bss`-like sections.
    pub file_range: Option<(usize, usize)>,
    pub exec: bool,
    pub write: bool,
}

/// A sized symbol.
#[derive(Debug, Clone)]
pub(crate) struct Symbol {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    /// How references to it enter a hash: its demangled name without the
    /// crate hashes (so that a dependency's version bump, which rehashes
    /// every symbol of the crate, changes no fingerprint).
    pub token: String,
    /// Whether another symbol has the same [`Symbol::token`] (each crate
    /// keeps its own copy of some generic instances): references to it are
    /// then also told apart by its content (see `normalise`).
    pub ambiguous: bool,
    /// How a reference to it as writable data names it: its token, or for
    /// an ambiguous symbol its mangled name without the crate hashes
    /// ([`super::without_crate_hashes`]), which still tells apart items of
    /// one name in one scope (`static`s in sibling blocks).
    pub identity: String,
    /// Weak (`STB_WEAK`): another object's definition of the same name may
    /// take its place at link time. Any other symbol is bound by its exact
    /// name: locally, when its object was compiled, or as a strong global,
    /// which the linker allows once.
    pub weak: bool,
}

/// A static relocation in data (kept in the executable by `--emit-relocs`):
/// the place holds a pointer or offset to `target` (`S + A`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum StaticReloc {
    /// An absolute address of `size` bytes.
    Absolute { target: u64, size: u8 },
    /// A 32-bit difference (jump tables: label minus table).
    Relative32,
    /// Anything else, masked: `size` bytes.
    Other { size: u8 },
}

/// A relocation in code that the instruction decoder cannot see through
/// (everything that is not relative to the instruction pointer).
#[derive(Debug, Clone, Copy)]
pub(crate) enum CodeReloc {
    /// `size` bytes holding an absolute address or a thread-pointer offset
    /// of `target`.
    Absolute { target: u64, size: u8, tls: bool },
    /// Relative to the instruction pointer: the decoder resolves it, except
    /// where the linker rewrote the instruction (thread-local accesses
    /// relaxed to the local-exec model); `target` is `S + A`.
    PcRelative { size: u8, target: u64, tls: bool },
    /// Against a symbol defined elsewhere (resolved at load time).
    External { size: u8, symbol: usize },
}

/// A dynamic relocation of a slot (GOT entries, pointers in data).
#[derive(Debug, Clone)]
pub(crate) enum DynReloc {
    /// The slot holds `base + addend`.
    Relative(u64),
    /// The slot holds the address of a symbol resolved at load time.
    Symbol(String),
    /// The slot holds a thread-pointer offset of a (possibly local) symbol.
    Tpoff(Option<String>, i64),
}

/// The thread-local block. Thread-local symbols' values, and `S` of their
/// relocations, are offsets into the block's template; x86-64 thread-pointer
/// offsets are relative to the block's (aligned) end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tls {
    pub aligned_size: u64,
}

pub(crate) struct Image<'a> {
    pub data: &'a [u8],
    /// Allocated sections, by address.
    pub sections: Vec<Section>,
    /// Functions (sized), by address.
    pub functions: Vec<Symbol>,
    /// Data objects (sized), by address.
    pub objects: Vec<Symbol>,
    /// Thread-local objects, by offset into the TLS template.
    pub tls_objects: Vec<Symbol>,
    pub data_relocs: ByPlace<StaticReloc>,
    pub code_relocs: ByPlace<CodeReloc>,
    /// Names of the undefined symbols code relocations refer to.
    pub externals: Vec<String>,
    pub dynamic: FastMap<u64, DynReloc>,
    pub tls: Option<Tls>,
    /// Input sections from the link map, by start address.
    pub extents: Vec<Extent>,
    /// The coverage flag of every instrumented function, with the
    /// function's entry address (from the PC table; see
    /// [`crate::digests::coverage_table`]), by flag address.
    pub coverage_flags: Vec<(u64, u64)>,
}

/// Relocations by the address they patch. Filled once, then only looked
/// up: a sorted vector, where a B-tree's inserts and lookups were a visible
/// cost of fingerprinting (hundreds of thousands of relocations a binary).
pub(crate) struct ByPlace<R>(Vec<(u64, R)>);

impl<R> ByPlace<R> {
    /// For a place listed twice, the later entry holds, as an insert into a
    /// map would leave it.
    fn new(mut entries: Vec<(u64, R)>) -> ByPlace<R> {
        entries.sort_by_key(|(place, _)| *place);
        let mut unique: Vec<(u64, R)> = Vec::with_capacity(entries.len());
        for (place, reloc) in entries {
            match unique.last_mut() {
                Some(last) if last.0 == place => last.1 = reloc,
                _ => unique.push((place, reloc)),
            }
        }
        ByPlace(unique)
    }

    pub fn get(&self, place: &u64) -> Option<&R> {
        let i = self.0.binary_search_by_key(place, |(p, _)| *p).ok()?;
        Some(&self.0[i].1)
    }

    /// The relocations at places in `range`, by place.
    pub fn range(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = (&u64, &R)> {
        let start = self.0.partition_point(|(p, _)| *p < range.start);
        let end = self.0.partition_point(|(p, _)| *p < range.end).max(start);
        self.0[start..end].iter().map(|(p, r)| (p, r))
    }
}

impl<'a> Image<'a> {
    /// Reads the executable `data`, with `extents` reading its linker map
    /// (given which output sections to keep) at the same time as the
    /// executable's symbols and relocations: both are a large binary's
    /// serial part of fingerprinting, and the rest waits for them.
    pub fn parse_with(
        data: &'a [u8],
        extents: impl FnOnce(&(dyn Fn(&str) -> bool + Sync)) -> Result<Vec<Extent>, FingerprintError>
        + Send,
    ) -> Result<Image<'a>, FingerprintError> {
        let file = ElfFile64::<Endianness>::parse(data)
            .map_err(|e| FingerprintError::Parse(e.to_string()))?;
        if file.elf_header().e_machine(file.endian()) != object::elf::EM_X86_64 {
            return Err(FingerprintError::Unsupported(
                "function fingerprints support x86-64 only".into(),
            ));
        }

        let mut sections = Vec::new();
        for section in file.sections() {
            let header = section.elf_section_header();
            let flags = header.sh_flags(file.endian()).0;
            if flags & object::elf::SHF_ALLOC.0 == 0 {
                continue;
            }
            let nobits = header.sh_type(file.endian()) == object::elf::SHT_NOBITS;
            sections.push(Section {
                name: section.name().unwrap_or_default().to_owned(),
                addr: section.address(),
                size: section.size(),
                file_range: if nobits {
                    None
                } else {
                    section
                        .file_range()
                        .map(|(off, len)| (off as usize, len as usize))
                },
                exec: flags & object::elf::SHF_EXECINSTR.0 != 0,
                write: flags & object::elf::SHF_WRITE.0 != 0,
            });
        }
        sections.sort_by_key(|s| s.addr);

        // Only what the loader maps: the map also lists debug sections, at
        // offsets that look like addresses. By name first: a large map has
        // hundreds of thousands of debug and relocation input sections, and
        // skipping them unread is most of reading the map.
        let mut by_name: FastMap<&str, Vec<&Section>> = FastMap::default();
        for s in &sections {
            by_name.entry(s.name.as_str()).or_default().push(s);
        }
        let (extents, contents) = rayon::join(
            || extents(&|output| by_name.contains_key(output)),
            || Contents::of(&file),
        );
        let extents: Vec<Extent> = extents?
            .into_iter()
            .filter(|e| {
                by_name.get(&*e.output).is_some_and(|named| {
                    named
                        .iter()
                        .any(|s| e.start >= s.addr && e.start + e.size <= s.addr + s.size)
                })
            })
            .collect();
        if extents.is_empty() {
            return Err(FingerprintError::NoMap);
        }
        let mut image = Image {
            data,
            sections,
            functions: contents.functions,
            objects: contents.objects,
            tls_objects: contents.tls_objects,
            data_relocs: ByPlace::new(contents.data_relocs),
            code_relocs: ByPlace::new(contents.code_relocs),
            externals: contents.externals,
            dynamic: contents.dynamic,
            tls: contents.tls,
            extents,
            coverage_flags: Vec::new(),
        };
        image.coverage_flags = image.read_coverage_flags();
        Ok(image)
    }

    /// The section containing `addr`.
    pub fn section_at(&self, addr: u64) -> Option<&Section> {
        let i = self.sections.partition_point(|s| s.addr <= addr);
        let section = self.sections.get(i.checked_sub(1)?)?;
        (addr < section.addr + section.size.max(1)).then_some(section)
    }

    /// The function containing `addr`.
    pub fn function_at(&self, addr: u64) -> Option<&Symbol> {
        containing(&self.functions, addr)
    }

    /// The data object containing `addr`.
    pub fn object_at(&self, addr: u64) -> Option<&Symbol> {
        containing(&self.objects, addr)
    }

    /// The thread-local object at an offset into the TLS template.
    pub fn tls_object_at(&self, offset: u64) -> Option<&Symbol> {
        containing(&self.tls_objects, offset)
    }

    /// A data object starting exactly at `addr`.
    pub fn object_starting_at(&self, addr: u64) -> Option<&Symbol> {
        let i = self.objects.partition_point(|s| s.addr < addr);
        self.objects.get(i).filter(|s| s.addr == addr)
    }

    /// The input section (from the link map) containing `addr`.
    pub fn extent_at(&self, addr: u64) -> Option<&Extent> {
        let i = self.extents.partition_point(|e| e.start <= addr);
        let extent = self.extents.get(i.checked_sub(1)?)?;
        (addr < extent.start + extent.size).then_some(extent)
    }

    /// The bytes at `[addr, addr + len)`, if they are in the file (not
    /// `.bss`) and within one section.
    pub fn bytes(&self, addr: u64, len: u64) -> Option<&'a [u8]> {
        let section = self.section_at(addr)?;
        let (offset, size) = section.file_range?;
        let start = usize::try_from(addr - section.addr).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        if end > size {
            return None;
        }
        self.data.get(offset + start..offset + end)
    }

    /// The pointer stored at `addr`, as the loader would leave it.
    pub fn pointer_at(&self, addr: u64) -> Option<u64> {
        if let Some(DynReloc::Relative(target)) = self.dynamic.get(&addr) {
            return Some(*target);
        }
        if let Some(StaticReloc::Absolute { target, size: 8 }) = self.data_relocs.get(&addr) {
            return Some(*target);
        }
        let bytes = self.bytes(addr, 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    /// Each coverage flag's address with its function's entry: with
    /// `-sanitizer-coverage-pc-table` the flag array and the PC table
    /// (`(entry, flags)` pairs) are parallel. Empty when they are not the
    /// same length, or an entry cannot be read: no flag can then be trusted
    /// to name its function.
    fn read_coverage_flags(&self) -> Vec<(u64, u64)> {
        use crate::digests::coverage_table::{FLAGS_SECTION, PCS_SECTION};
        let section = |name: &str| self.sections.iter().find(|s| s.name == name);
        let (Some(flags), Some(table)) = (section(FLAGS_SECTION), section(PCS_SECTION)) else {
            return Vec::new();
        };
        if table.size != 16 * flags.size {
            return Vec::new();
        }
        (0..flags.size)
            .map(|i| Some((flags.addr + i, self.pointer_at(table.addr + 16 * i)?)))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }
}

/// Gives every symbol its [`Symbol::token`].
/// What an executable's symbol table and relocations say, read apart from
/// its map.
struct Contents {
    functions: Vec<Symbol>,
    objects: Vec<Symbol>,
    tls_objects: Vec<Symbol>,
    data_relocs: Vec<(u64, StaticReloc)>,
    code_relocs: Vec<(u64, CodeReloc)>,
    externals: Vec<String>,
    dynamic: FastMap<u64, DynReloc>,
    tls: Option<Tls>,
}

impl Contents {
    fn of(file: &ElfFile64<'_, Endianness>) -> Contents {
        let mut functions = Vec::new();
        let mut objects = Vec::new();
        let mut tls_objects = Vec::new();
        for symbol in file.symbols() {
            if symbol.size() == 0 || symbol.is_undefined() {
                continue;
            }
            let Ok(name) = symbol.name() else { continue };
            let entry = Symbol {
                name: name.to_owned(),
                addr: symbol.address(),
                size: symbol.size(),
                token: String::new(),
                ambiguous: false,
                identity: String::new(),
                weak: symbol.is_weak(),
            };
            match symbol.kind() {
                SymbolKind::Text => functions.push(entry),
                SymbolKind::Data => objects.push(entry),
                SymbolKind::Tls => tls_objects.push(entry),
                _ => {}
            }
        }
        assign_tokens([&mut functions, &mut objects, &mut tls_objects]);
        functions.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        objects.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        tls_objects.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));

        let mut data_relocs = Vec::new();
        let mut code_relocs = Vec::new();
        let mut externals = Vec::new();
        for section in file.sections() {
            let header = section.elf_section_header();
            let flags = header.sh_flags(file.endian()).0;
            if flags & object::elf::SHF_ALLOC.0 == 0 {
                continue;
            }
            let exec = flags & object::elf::SHF_EXECINSTR.0 != 0;
            for (place, reloc) in section.relocations() {
                let RelocationFlags::Elf { r_type } = reloc.flags() else {
                    continue;
                };
                let external = match reloc.target() {
                    RelocationTarget::Symbol(index) => file
                        .symbol_by_index(index)
                        .ok()
                        .filter(|s| s.is_undefined())
                        .and_then(|s| s.name().ok().map(str::to_owned)),
                    _ => None,
                };
                let target = match reloc.target() {
                    RelocationTarget::Symbol(index) => file
                        .symbol_by_index(index)
                        .map(|s| s.address())
                        .unwrap_or(0)
                        .wrapping_add_signed(reloc.addend()),
                    RelocationTarget::Absolute => reloc.addend() as u64,
                    _ => 0,
                };
                let size = (reloc.size() / 8).max(4);
                if exec && let Some(name) = external {
                    externals.push(name);
                    code_relocs.push((
                        place,
                        CodeReloc::External {
                            size,
                            symbol: externals.len() - 1,
                        },
                    ));
                } else if exec {
                    code_relocs.push((place, classify_code(r_type, target, size)));
                } else {
                    data_relocs.push((place, classify_data(r_type, target, size)));
                }
            }
        }

        let mut dynamic = FastMap::default();
        if let Some(relocs) = file.dynamic_relocations() {
            for (place, reloc) in relocs {
                let RelocationFlags::Elf { r_type } = reloc.flags() else {
                    continue;
                };
                let symbol = match reloc.target() {
                    RelocationTarget::Symbol(index) => file
                        .dynamic_symbol_table()
                        .and_then(|table| table.symbol_by_index(index).ok())
                        .and_then(|s| s.name().ok().map(str::to_owned))
                        .filter(|n| !n.is_empty()),
                    _ => None,
                };
                let entry = match r_type {
                    object::elf::R_X86_64_RELATIVE => DynReloc::Relative(reloc.addend() as u64),
                    object::elf::R_X86_64_TPOFF64 => DynReloc::Tpoff(symbol, reloc.addend()),
                    _ => match symbol {
                        Some(name) => DynReloc::Symbol(name),
                        None => continue,
                    },
                };
                dynamic.insert(place, entry);
            }
        }

        let tls = file.elf_program_headers().iter().find_map(|ph| {
            use object::read::elf::ProgramHeader;
            (ph.p_type(file.endian()) == object::elf::PT_TLS).then(|| {
                let align = ph.p_align(file.endian()).max(1);
                Tls {
                    aligned_size: ph.p_memsz(file.endian()).div_ceil(align) * align,
                }
            })
        });

        Contents {
            functions,
            objects,
            tls_objects,
            data_relocs,
            code_relocs,
            externals,
            dynamic,
            tls,
        }
    }
}

fn assign_tokens(lists: [&mut Vec<Symbol>; 3]) {
    let mut counts: FastMap<String, usize> = FastMap::default();
    let mut stable: Vec<Vec<String>> = Vec::new();
    for list in &lists {
        // Demangling is among the largest costs of fingerprinting.
        let names: Vec<String> = list
            .par_iter()
            .map(|s| super::stable_name(&s.name))
            .collect();
        for name in &names {
            *counts.entry(name.clone()).or_default() += 1;
        }
        stable.push(names);
    }
    for (list, names) in lists.into_iter().zip(stable) {
        for (symbol, name) in list.iter_mut().zip(names) {
            symbol.ambiguous = counts[&name] > 1;
            symbol.identity = if symbol.ambiguous {
                super::without_crate_hashes(&symbol.name)
            } else {
                name.clone()
            };
            symbol.token = name;
        }
    }
}

fn containing(symbols: &[Symbol], addr: u64) -> Option<&Symbol> {
    let i = symbols.partition_point(|s| s.addr <= addr);
    symbols[..i]
        .iter()
        .rev()
        .take(4)
        .find(|s| addr < s.addr + s.size)
}

fn classify_code(r_type: object::elf::RelocationType, target: u64, size: u8) -> CodeReloc {
    use object::elf::*;
    match r_type {
        R_X86_64_64 => CodeReloc::Absolute {
            target,
            size: 8,
            tls: false,
        },
        R_X86_64_32 | R_X86_64_32S => CodeReloc::Absolute {
            target,
            size: 4,
            tls: false,
        },
        R_X86_64_TPOFF32 | R_X86_64_DTPOFF32 => CodeReloc::Absolute {
            target,
            size: 4,
            tls: true,
        },
        R_X86_64_TPOFF64 | R_X86_64_DTPOFF64 => CodeReloc::Absolute {
            target,
            size: 8,
            tls: true,
        },
        R_X86_64_TLSGD | R_X86_64_TLSLD | R_X86_64_GOTTPOFF | R_X86_64_GOTPC32_TLSDESC => {
            CodeReloc::PcRelative {
                size,
                target,
                tls: true,
            }
        }
        _ => CodeReloc::PcRelative {
            size,
            target,
            tls: false,
        },
    }
}

fn classify_data(r_type: object::elf::RelocationType, target: u64, size: u8) -> StaticReloc {
    use object::elf::*;
    match r_type {
        R_X86_64_64 => StaticReloc::Absolute { target, size: 8 },
        R_X86_64_32 | R_X86_64_32S => StaticReloc::Absolute { target, size: 4 },
        R_X86_64_PC32 => StaticReloc::Relative32,
        _ => StaticReloc::Other { size },
    }
}
