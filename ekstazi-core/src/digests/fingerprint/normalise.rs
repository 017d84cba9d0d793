//! Hashing code and data with addresses replaced by what they refer to.

use super::FastMap;
use super::image::{CodeReloc, DynReloc, Image, Section, StaticReloc, Symbol};
use super::map::Merge;
use super::source_path::stable_source_path;
use super::{Fp, truncate};
use crate::model::path::Placeholders;
use iced_x86::{ConstantOffsets, Decoder, DecoderOptions, Instruction, OpKind};
use std::sync::atomic::{AtomicU64, Ordering};

/// What an address in code or data refers to, as it enters a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Referent<'a> {
    /// Inside the function being hashed, at this offset.
    Local(u64),
    /// A function (or a dynamically resolved symbol), at an offset into it.
    Function(&'a str, u64),
    /// Data, by the digest of its content (and, for writable data, its
    /// identity), at an offset into it.
    Data([u8; 32], u64),
    /// A sanitizer-coverage flag: which one depends on the layout, not on
    /// what the function does.
    CoverageFlag,
    /// The end of a section (`__stop_<name>`); for a section that code can
    /// walk ([`Normaliser::walkable`]), the digest of its whole content.
    SectionEnd(&'a str, [u8; 32]),
    /// The start of a section code can walk (`__start_<name>`), and the
    /// digest of its whole content.
    SectionStart(&'a str, [u8; 32]),
    /// Nothing better known: a section and offset (layout-dependent).
    Unresolved(&'a str, u64),
    /// The length of a string that names a directory of this checkout,
    /// given as the length it has with the directory replaced by its
    /// placeholder (see [`Normaliser::checkout_text`]).
    CheckoutTextLength(u64),
}

impl Referent<'_> {
    fn feed(&self, out: &mut Vec<u8>) {
        match self {
            Referent::Local(off) => {
                out.push(1);
                out.extend_from_slice(&off.to_le_bytes());
            }
            Referent::Function(name, off) => {
                out.push(2);
                out.extend_from_slice(name.as_bytes());
                out.push(0);
                out.extend_from_slice(&off.to_le_bytes());
            }
            Referent::Data(digest, off) => {
                out.push(3);
                out.extend_from_slice(digest);
                out.extend_from_slice(&off.to_le_bytes());
            }
            Referent::CoverageFlag => out.push(4),
            Referent::SectionStart(section, content) => {
                out.push(8);
                out.extend_from_slice(section.as_bytes());
                out.push(0);
                out.extend_from_slice(content);
            }
            Referent::SectionEnd(section, content) => {
                out.push(6);
                out.extend_from_slice(section.as_bytes());
                out.push(0);
                out.extend_from_slice(content);
            }
            Referent::Unresolved(section, off) => {
                out.push(5);
                out.extend_from_slice(section.as_bytes());
                out.push(0);
                out.extend_from_slice(&off.to_le_bytes());
            }
            Referent::CheckoutTextLength(len) => {
                out.push(9);
                out.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
}

/// Per-thread memory of data already hashed: `(extent start, entry)` →
/// digest.
#[derive(Default)]
pub(crate) struct Memo {
    /// Digest, and the ambiguous functions (see [`Symbol::ambiguous`]) the
    /// data refers to.
    done: FastMap<(u64, u64), ([u8; 32], Vec<u64>)>,
    /// The ambiguous functions the function being hashed refers to, in the
    /// order met.
    ambiguous: Vec<u64>,
    /// Extents being hashed, to break cycles (a linked structure in data).
    stack: Vec<(u64, u64)>,
    /// Cycles met so far. A digest computed where a cycle was cut depends on
    /// where the walk entered the cycle, so it is not remembered: remembering
    /// it would make fingerprints depend on the order functions were hashed
    /// in.
    cycles: usize,
    /// Whether the function being hashed refers, in its own code, to one of
    /// the ways to walk the whole environment ([`is_environment_walk`]).
    walks_environment: bool,
    /// Data that names a directory of this checkout, by its start: its
    /// length, and its length with the directories replaced.
    checkout_texts: FastMap<u64, (u64, u64)>,
    /// Those the function being hashed refers to in its own code.
    texts_referred: Vec<(u64, u64)>,
}

/// Whether a referent's name is a way to walk the whole environment: std's
/// walkers (which read `environ` themselves, calling no libc function the
/// shim could see), or libc's `environ` itself, read by code that links it
/// (`libc::environ`, C code compiled into the test).
pub(crate) fn is_environment_walk(name: &str) -> bool {
    matches!(name, "environ" | "__environ" | "_environ")
        || name.starts_with("std::env::vars")
        || name.starts_with("<std::env::Vars")
}

pub(crate) struct Normaliser<'i, 'a> {
    image: &'i Image<'a>,
    /// This checkout's directories: hashed as placeholders wherever a
    /// string constant names them (see [`Normaliser::checkout_text`]).
    placeholders: &'i Placeholders,
    unresolved: AtomicU64,
    /// The values of the types' `TypeId`s, found where the type-id
    /// functions load them (see [`type_id_values`]), and the type of each.
    type_ids: FastMap<[u8; 16], Option<&'i str>>,
    /// The sections code can walk from `__start_<name>` to `__stop_<name>`
    /// (a `linkme` distributed slice): the linker defines those symbols
    /// only for sections named like a C identifier. Such code sees every
    /// element, so an element added, removed or changed anywhere in the
    /// section changes what it does: a reference to either bound stands
    /// for the whole section's content.
    walkable: Vec<&'i Section>,
}

/// A masked copy of some bytes, and the referents of the masked fields in
/// the order of their places.
struct Masked<'r> {
    bytes: Vec<u8>,
    referents: Vec<(u64, Referent<'r>)>,
    /// The masked ranges, `[start, end)`.
    ranges: Vec<(u64, u64)>,
}

impl<'r> Masked<'r> {
    fn new(bytes: &[u8]) -> Self {
        Masked {
            bytes: bytes.to_vec(),
            referents: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Replaces `len` bytes at `offset` by zeros, remembering what they meant.
    fn mask(&mut self, offset: u64, len: u64, referent: Referent<'r>) {
        let start = offset as usize;
        let end = (start + len as usize).min(self.bytes.len());
        if start < end {
            self.bytes[start..end].fill(0);
        }
        self.referents.push((offset, referent));
        self.ranges.push((offset, offset + len));
    }

    /// Whether any of `[offset, offset + len)` is masked already.
    fn covers(&self, offset: u64, len: u64) -> bool {
        self.ranges
            .iter()
            .any(|(start, end)| offset < *end && *start < offset + len)
    }

    fn digest(mut self, prefix: &[u8]) -> [u8; 32] {
        self.referents.sort_by_key(|(at, _)| *at);
        let mut tail = Vec::new();
        for (at, referent) in &self.referents {
            tail.extend_from_slice(&at.to_le_bytes());
            referent.feed(&mut tail);
        }
        let mut h = blake3::Hasher::new();
        h.update(prefix);
        h.update(&(self.bytes.len() as u64).to_le_bytes());
        h.update(&self.bytes);
        h.update(&tail);
        *h.finalize().as_bytes()
    }
}

impl<'i, 'a> Normaliser<'i, 'a> {
    pub fn new(image: &'i Image<'a>, placeholders: &'i Placeholders) -> Self {
        Normaliser {
            image,
            placeholders,
            unresolved: AtomicU64::new(0),
            type_ids: type_id_values(image),
            walkable: image
                .sections
                .iter()
                .filter(|s| is_c_identifier(&s.name) && !s.name.starts_with("__sancov"))
                .collect(),
        }
    }

    /// The digest of an output section's whole content, every reference in
    /// it by what it refers to; `None` without such a section.
    pub fn section_digest(&self, name: &str, memo: &mut Memo) -> Option<[u8; 32]> {
        let s = self.image.sections.iter().find(|s| s.name == name)?;
        Some(self.extent(s.addr, s.addr + s.size, s.addr, None, memo))
    }

    pub fn unresolved(&self) -> u64 {
        self.unresolved.load(Ordering::Relaxed)
    }

    /// The fingerprint of one function, before the content of the ambiguous
    /// functions it refers to is mixed in (see `fingerprint`), those
    /// functions' addresses, and whether its code walks the environment.
    pub fn function(&self, f: &'i Symbol, memo: &mut Memo) -> (Fp, Vec<u64>, bool) {
        if is_type_id(&f.token) {
            // What it does is named in full by its name: return the `TypeId`
            // of the type in it. The value is a hash of the crate's build
            // metadata, which a version bump changes without changing any
            // behaviour (type ids are only ever compared with each other).
            let mut h = blake3::Hasher::new();
            h.update(b"type id of ");
            h.update(f.token.as_bytes());
            return (truncate(h.finalize()), Vec::new(), false);
        }
        memo.ambiguous.clear();
        memo.walks_environment = false;
        memo.texts_referred.clear();
        let fp = self.shallow(f, memo);
        (
            fp,
            std::mem::take(&mut memo.ambiguous),
            memo.walks_environment,
        )
    }

    fn shallow(&self, f: &'i Symbol, memo: &mut Memo) -> Fp {
        let Some(code) = self.image.bytes(f.addr, f.size) else {
            let mut h = blake3::Hasher::new();
            h.update(b"no code");
            h.update(&f.size.to_le_bytes());
            return truncate(h.finalize());
        };
        let mut masked = Masked::new(code);

        // Fields the decoder cannot interpret: absolute addresses and
        // thread-pointer offsets, known from the kept relocations.
        for (&place, reloc) in self.image.code_relocs.range(f.addr..f.addr + f.size) {
            if let CodeReloc::Absolute { target, size, tls } = *reloc {
                let referent = if tls {
                    self.tls(target)
                } else {
                    self.referent(target, Some(f), memo)
                };
                masked.mask(place - f.addr, u64::from(size), referent);
            }
        }

        // Fields relative to the instruction pointer, exactly resolved.
        for (at, instruction, offsets) in decoded(code, f.addr) {
            if instruction.is_ip_rel_memory_operand() && offsets.has_displacement() {
                let target = instruction.ip_rel_memory_address();
                let referent = self.referent(target, Some(f), memo);
                masked.mask(
                    at + offsets.displacement_offset() as u64,
                    offsets.displacement_size() as u64,
                    referent,
                );
            }
            let branches = (0..instruction.op_count()).any(|i| {
                matches!(
                    instruction.op_kind(i),
                    OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                )
            });
            if branches && offsets.has_immediate() {
                let target = instruction.near_branch_target();
                let referent = self.referent(target, Some(f), memo);
                masked.mask(
                    at + offsets.immediate_offset() as u64,
                    offsets.immediate_size() as u64,
                    referent,
                );
            }
        }

        // A relocated field the decoder did not explain is still an address.
        for (&place, reloc) in self.image.code_relocs.range(f.addr..f.addr + f.size) {
            if let CodeReloc::External { size, symbol } = *reloc {
                let name = &self.image.externals[symbol];
                masked.mask(place - f.addr, u64::from(size), Referent::Function(name, 0));
            }
            if let CodeReloc::PcRelative { size, target, tls } = *reloc
                && !masked.covers(place - f.addr, u64::from(size))
            {
                // The field ends the instruction (true of every such
                // relocation but immediates, which none of these are).
                let at = target.wrapping_add(u64::from(size));
                let referent = if tls {
                    self.tls(at)
                } else {
                    self.referent(at, Some(f), memo)
                };
                masked.mask(place - f.addr, u64::from(size), referent);
            }
        }
        if !memo.texts_referred.is_empty() {
            self.mask_text_lengths(code, f.addr, &memo.texts_referred, &mut masked);
        }
        memo.walks_environment = masked
            .referents
            .iter()
            .any(|(_, r)| matches!(r, Referent::Function(name, _) if is_environment_walk(name)));
        truncate_digest(masked.digest(b"fn"))
    }

    /// Masks the immediates of `code` that equal the length of a checkout
    /// text it refers to (`lea rsi, [path]; mov edx, <its length>`), as that
    /// text's length with placeholders. An immediate that only happens to
    /// equal the length is masked too: in another checkout it no longer
    /// equals the length, stays as it is, and the fingerprint differs, so
    /// the error can only run a test, never skip one.
    fn mask_text_lengths(
        &self,
        code: &[u8],
        addr: u64,
        texts: &[(u64, u64)],
        masked: &mut Masked<'i>,
    ) {
        for (at, _, offsets) in decoded(code, addr) {
            if !offsets.has_immediate() {
                continue;
            }
            let (place, size) = (
                at + offsets.immediate_offset() as u64,
                offsets.immediate_size() as u64,
            );
            if masked.covers(place, size) {
                continue;
            }
            let Some(field) = code.get(place as usize..(place + size) as usize) else {
                continue;
            };
            let mut value = [0u8; 8];
            value[..field.len()].copy_from_slice(field);
            let value = u64::from_le_bytes(value);
            if let Some((_, blinded)) = texts.iter().find(|(len, _)| *len == value) {
                masked.mask(place, size, Referent::CheckoutTextLength(*blinded));
            }
        }
    }

    /// What an address refers to, seen from function `from` (if any).
    fn referent(&self, addr: u64, from: Option<&Symbol>, memo: &mut Memo) -> Referent<'i> {
        if let Some(f) = from
            && addr >= f.addr
            && addr < f.addr + f.size
        {
            return Referent::Local(addr - f.addr);
        }
        let image = self.image;
        if let Some(s) = self
            .walkable
            .iter()
            .find(|s| addr == s.addr || addr == s.addr + s.size)
        {
            let content = self.extent(s.addr, s.addr + s.size, s.addr, None, memo);
            return if addr == s.addr + s.size && s.size > 0 {
                Referent::SectionEnd(&s.name, content)
            } else {
                Referent::SectionStart(&s.name, content)
            };
        }
        let Some(section) = image.section_at(addr) else {
            // `__stop_<section>` and the like: the end of a section.
            return match image.sections.iter().find(|s| s.addr + s.size == addr) {
                Some(s) if s.name.starts_with("__sancov") => Referent::CoverageFlag,
                Some(s) => Referent::SectionEnd(&s.name, [0; 32]),
                None => self.unresolved_at("(none)", addr),
            };
        };
        if section.name.starts_with("__sancov") {
            return Referent::CoverageFlag;
        }
        if section.exec {
            if section.name.starts_with(".plt") {
                if let Some(name) = self.plt_target(addr) {
                    return Referent::Function(name, 0);
                }
                return self.unresolved_at(&section.name, addr - section.addr);
            }
            return match image.function_at(addr) {
                Some(g) => {
                    if g.ambiguous {
                        memo.ambiguous.push(g.addr);
                    }
                    Referent::Function(&g.token, addr - g.addr)
                }
                None => self.unresolved_at(&section.name, addr - section.addr),
            };
        }
        if section.name.starts_with(".got") {
            return match image.dynamic.get(&addr) {
                Some(DynReloc::Symbol(name)) => Referent::Function(name, 0),
                Some(DynReloc::Relative(target)) => self.referent(*target, None, memo),
                Some(DynReloc::Tpoff(Some(name), addend)) => {
                    Referent::Function(name, *addend as u64)
                }
                Some(DynReloc::Tpoff(None, addend)) => self.tls_offset(*addend),
                None => self.unresolved_at(&section.name, addr - section.addr),
            };
        }
        self.data(addr, from, memo)
    }

    fn unresolved_at(&self, section: &'i str, offset: u64) -> Referent<'i> {
        self.unresolved.fetch_add(1, Ordering::Relaxed);
        Referent::Unresolved(section, offset)
    }

    /// The symbol a PLT stub jumps to: decode the stub's indirect jump and
    /// look its GOT slot up.
    fn plt_target(&self, addr: u64) -> Option<&'i str> {
        let code = self.image.bytes(addr, 16)?;
        let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
        let mut instruction = Instruction::default();
        for _ in 0..4 {
            if !decoder.can_decode() {
                break;
            }
            decoder.decode_out(&mut instruction);
            if instruction.is_ip_rel_memory_operand() {
                return match self.image.dynamic.get(&instruction.ip_rel_memory_address()) {
                    Some(DynReloc::Symbol(name)) => Some(name),
                    _ => None,
                };
            }
        }
        None
    }

    /// A thread-local variable, by its offset into the TLS template.
    fn tls(&self, offset: u64) -> Referent<'i> {
        match self.image.tls_object_at(offset) {
            Some(var) => Referent::Function(&var.token, offset - var.addr),
            None => self.unresolved_at(".tdata", offset),
        }
    }

    /// The type whose `TypeId` the read-only constant `[start, end)` holds,
    /// if it is one.
    fn type_id_at(&self, start: u64, end: u64) -> Option<&'i str> {
        if end - start != 16 || self.image.section_at(start).is_none_or(|s| s.write) {
            return None;
        }
        let value: [u8; 16] = self.image.bytes(start, 16)?.try_into().ok()?;
        *self.type_ids.get(&value)?
    }

    /// A thread-local variable given by its offset from the thread pointer.
    fn tls_offset(&self, offset: i64) -> Referent<'i> {
        match self.image.tls {
            Some(tls) => self.tls(tls.aligned_size.wrapping_add_signed(offset)),
            None => self.unresolved_at(".tdata", offset as u64),
        }
    }

    /// Data at `addr`: the digest of the object (input section) containing
    /// it, entered at `addr`.
    fn data(&self, addr: u64, from: Option<&Symbol>, memo: &mut Memo) -> Referent<'i> {
        let image = self.image;
        let section = image.section_at(addr).expect("callers checked the section");
        if let Some(StaticReloc::Relative32) = image.data_relocs.get(&addr) {
            return self.jump_table(addr, from, memo);
        }
        let Some((start, end)) = data_bounds(image, addr) else {
            return self.unresolved_at(&section.name, addr - section.addr);
        };
        if let Some(ty) = self.type_id_at(start, end) {
            // A `TypeId`: its value hashes the crate's metadata, which a
            // version bump changes without changing behaviour. The type
            // names it.
            let mut h = blake3::Hasher::new();
            h.update(b"type id of ");
            h.update(ty.as_bytes());
            return Referent::Data(*h.finalize().as_bytes(), addr - start);
        }
        // Writable data is a place, not just a value: which static a
        // function uses matters even when two hold equal bytes.
        let identity = if section.write {
            image.object_starting_at(start).map(|o| o.identity.as_str())
        } else {
            None
        };
        let digest = self.extent(start, end, addr, identity, memo);
        if from.is_some()
            && addr == start
            && let Some(lengths) = memo.checkout_texts.get(&start)
        {
            memo.texts_referred.push(*lengths);
        }
        Referent::Data(digest, addr - start)
    }

    /// The digest of data `[start, end)` entered at `entry`.
    fn extent(
        &self,
        start: u64,
        end: u64,
        entry: u64,
        identity: Option<&str>,
        memo: &mut Memo,
    ) -> [u8; 32] {
        let key = (start, entry);
        if let Some((digest, ambiguous)) = memo.done.get(&key) {
            let digest = *digest;
            let ambiguous = ambiguous.clone();
            memo.ambiguous.extend(ambiguous);
            return digest;
        }
        let met_before = memo.ambiguous.len();
        let cycles_before = memo.cycles;
        if let Some(depth) = memo.stack.iter().position(|k| *k == key) {
            memo.cycles += 1;
            let mut h = blake3::Hasher::new();
            h.update(b"cycle");
            h.update(&(memo.stack.len() - depth).to_le_bytes());
            return *h.finalize().as_bytes();
        }
        memo.stack.push(key);
        let image = self.image;
        let len = end - start;
        let zeros;
        let bytes = match image.bytes(start, len) {
            Some(bytes) => bytes,
            None => {
                zeros = vec![0; len.min(1 << 20) as usize];
                &zeros[..]
            }
        };
        // The name of a `tracing` event's callsite is `event <file>:<line>`:
        // hashed without its line, which moving code changes, and with its
        // file as a panic location's.
        let event_name = event_name_parts(bytes).map(|(file, _)| file);
        let relocs: Vec<(u64, StaticReloc)> = image
            .data_relocs
            .range(start..end)
            .map(|(p, r)| (*p, *r))
            .collect();
        let checkout_text = match event_name {
            Some(_) => None,
            None => self.checkout_text(start, bytes, &relocs),
        };
        let mut masked = match (event_name, &checkout_text) {
            (Some(file), _) => Masked::new(&[b"event ", &*stable_source_path(file), b":"].concat()),
            (None, Some(text)) => {
                memo.checkout_texts.insert(start, (len, text.len() as u64));
                Masked::new(text)
            }
            (None, None) => Masked::new(bytes),
        };
        // `core::panic::Location { file: &str, line: u32, col: u32 }`: the
        // file is kept, as a `source_file`, and where in it is forgotten.
        if let Some(file) = self.panic_location_file(start, len, &relocs) {
            masked.mask(0, 16, source_file(file));
            masked.mask(16, 8, Referent::Local(0));
        }
        // `tracing_core::Metadata` of an event: its `file` field too.
        let event = self.event_callsite(start, end, &relocs);
        if let Some(event) = &event {
            for place in (start.next_multiple_of(8)..end.saturating_sub(15)).step_by(8) {
                if self.str_at(place, &relocs) == Some(event.file) {
                    masked.mask(place - start, 16, source_file(event.file));
                }
            }
        }
        if relocs.is_empty() {
            // Without kept relocations, the loader's list of pointers to fix.
            for place in (start.next_multiple_of(8)..end.saturating_sub(7)).step_by(8) {
                if masked.covers(place - start, 8) {
                    continue;
                }
                if let Some(DynReloc::Relative(target)) = image.dynamic.get(&place) {
                    let referent = self.referent(*target, None, memo);
                    masked.mask(place - start, 8, referent);
                }
            }
        }
        for (place, reloc) in &relocs {
            if masked.covers(place - start, 1) {
                continue;
            }
            match *reloc {
                StaticReloc::Absolute { target, size } => {
                    let referent = self.referent(target, None, memo);
                    masked.mask(place - start, u64::from(size), referent);
                    // A `&str` naming a checkout directory: its length
                    // follows the pointer.
                    if size == 8
                        && let Some(&(len, blinded)) = memo.checkout_texts.get(&target)
                        && self.image.bytes(place + 8, 8) == Some(&len.to_le_bytes()[..])
                        && place + 16 <= end
                        && !masked.covers(place + 8 - start, 8)
                    {
                        masked.mask(place + 8 - start, 8, Referent::CheckoutTextLength(blinded));
                    }
                }
                StaticReloc::Relative32 => {
                    // `.long sym - .`: relative to the place itself.
                    let label = place.wrapping_add_signed(i64::from(self.i32_at(*place)));
                    let referent = self.referent(label, None, memo);
                    masked.mask(place - start, 4, referent);
                }
                StaticReloc::Other { size } => {
                    masked.mask(place - start, u64::from(size), Referent::CoverageFlag)
                }
            }
        }
        if let Some(event) = event
            && let Some(line) = self.event_line(start, end, event.line, &masked)
        {
            // The event's `line: Option<u32>`, and the length of its name,
            // whose line digits are not hashed.
            masked.mask(event.name + 8 - start, 8, Referent::Local(0));
            masked.mask(line - start, 4, Referent::Local(0));
        }
        let mut prefix = b"data".to_vec();
        if event_name.is_some() {
            prefix.extend_from_slice(b" tracing event name");
        }
        if let Some(identity) = identity {
            prefix.extend_from_slice(identity.as_bytes());
        }
        let digest = masked.digest(&prefix);
        memo.stack.pop();
        if memo.cycles == cycles_before {
            memo.done
                .insert(key, (digest, memo.ambiguous[met_before..].to_vec()));
        }
        digest
    }

    /// The bytes of the data `[start, start + len)` with this checkout's
    /// directories replaced by placeholders, when it names one and is plain
    /// bytes (no pointer in it): `env!("CARGO_MANIFEST_DIR")`,
    /// `env!("CARGO_BIN_EXE_<name>")` and the like compile to such a
    /// string, and the same code built in another checkout — a state
    /// restored at another path, a worktree — must keep its fingerprint.
    fn checkout_text(
        &self,
        start: u64,
        bytes: &[u8],
        relocs: &[(u64, StaticReloc)],
    ) -> Option<Vec<u8>> {
        if self.placeholders.is_empty() || !relocs.is_empty() {
            return None;
        }
        let text = self.placeholders.replaced(bytes)?;
        let end = start + bytes.len() as u64;
        let has_pointer = (start.next_multiple_of(8)..end.saturating_sub(7))
            .step_by(8)
            .any(|place| self.image.dynamic.contains_key(&place));
        (!has_pointer).then_some(text)
    }

    fn i32_at(&self, addr: u64) -> i32 {
        self.image
            .bytes(addr, 4)
            .map_or(0, |b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// A jump table entered at `table` from function `from`: consecutive
    /// 32-bit entries, each a label's distance from the table's start. Only
    /// the table itself is hashed — it ends where a label would leave the
    /// function (the next function's table may follow it directly).
    fn jump_table(&self, table: u64, from: Option<&Symbol>, memo: &mut Memo) -> Referent<'i> {
        let owner = from.or_else(|| {
            let first = table.wrapping_add_signed(i64::from(self.i32_at(table)));
            self.image.function_at(first)
        });
        let mut labels = Vec::new();
        let mut place = table;
        while let Some(StaticReloc::Relative32) = self.image.data_relocs.get(&place) {
            let label = table.wrapping_add_signed(i64::from(self.i32_at(place)));
            if owner.is_some_and(|f| label < f.addr || label >= f.addr + f.size) {
                break;
            }
            labels.push(label);
            place += 4;
        }
        let mut masked = Masked::new(&[]);
        for (i, label) in labels.into_iter().enumerate() {
            let referent = self.referent(label, owner, memo);
            masked.mask(4 * i as u64, 0, referent);
        }
        Referent::Data(masked.digest(b"jump table"), 0)
    }

    /// The address `place` holds, if it holds one: a kept relocation, or
    /// without kept relocations the loader's.
    fn pointer_at(&self, place: u64, relocs: &[(u64, StaticReloc)]) -> Option<u64> {
        if relocs.is_empty() {
            return match self.image.dynamic.get(&place) {
                Some(DynReloc::Relative(target)) => Some(*target),
                _ => None,
            };
        }
        match relocs.binary_search_by_key(&place, |(p, _)| *p) {
            Ok(i) => match relocs[i].1 {
                StaticReloc::Absolute { target, size: 8 } => Some(target),
                _ => None,
            },
            Err(_) => None,
        }
    }

    /// The bytes of a `&str` (or `&[u8]`) stored at `place` — a pointer,
    /// then a length — if the pointer is known and the length plausible for
    /// a name (under 4 KiB).
    fn str_at(&self, place: u64, relocs: &[(u64, StaticReloc)]) -> Option<&'i [u8]> {
        let target = self.pointer_at(place, relocs)?;
        let len = self
            .image
            .bytes(place + 8, 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))?;
        if len >= 4096 {
            return None;
        }
        self.image.bytes(target, len)
    }

    /// The `tracing` event callsite metadata that `[start, end)` may be: an
    /// object (of at most 512 bytes) pointing to exactly one name `event
    /// <file>.rs:<N>` (a `&str`: pointer, then length). Found by what the
    /// `tracing` macros put there rather than by offsets, which are the
    /// compiler's choice; `None` when anything is ambiguous.
    fn event_callsite(
        &self,
        start: u64,
        end: u64,
        relocs: &[(u64, StaticReloc)],
    ) -> Option<EventCallsite<'i>> {
        if end - start > 512 {
            return None;
        }
        let mut found = None;
        for place in (start.next_multiple_of(8)..end.saturating_sub(15)).step_by(8) {
            if let Some((file, line)) = self.str_at(place, relocs).and_then(event_name_parts) {
                if found.is_some() {
                    return None;
                }
                found = Some(EventCallsite {
                    name: place,
                    file,
                    line,
                });
            }
        }
        found
    }

    /// Where an event's metadata in `[start, end)` holds its line `Some(N)`
    /// as an `Option<u32>` (tag 1, then N), outside the fields `masked`
    /// already covers: the place of N, if there is exactly one. Otherwise
    /// the line is hashed like any other byte.
    fn event_line(&self, start: u64, end: u64, line: u32, masked: &Masked<'_>) -> Option<u64> {
        let mut found = None;
        for place in (start.next_multiple_of(4)..end.saturating_sub(7)).step_by(4) {
            if masked.covers(place - start, 8) {
                continue;
            }
            let pair = self.image.bytes(place, 8)?;
            if pair[..4] == 1u32.to_le_bytes() && pair[4..] == line.to_le_bytes() {
                if found.is_some() {
                    return None;
                }
                found = Some(place + 4);
            }
        }
        found
    }

    /// The file name of `[start, start + len)` if it has the shape of a
    /// panic location: 24 bytes, a pointer at 0 to a `.rs` file name whose
    /// length is at 8.
    fn panic_location_file(
        &self,
        start: u64,
        len: u64,
        relocs: &[(u64, StaticReloc)],
    ) -> Option<&'i [u8]> {
        // The file name is its one pointer (its only kept relocation).
        if len != 24 || relocs.len() > 1 {
            return None;
        }
        self.str_at(start, relocs)
            .filter(|name| name.ends_with(b".rs") && std::str::from_utf8(name).is_ok())
    }
}

/// The valid instructions of `code` (loaded at `addr`), each with its offset
/// in `code` and where its fields are.
fn decoded(code: &[u8], addr: u64) -> impl Iterator<Item = (u64, Instruction, ConstantOffsets)> {
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    std::iter::from_fn(move || {
        while decoder.can_decode() {
            let at = decoder.position() as u64;
            let instruction = decoder.decode();
            if !instruction.is_invalid() {
                let offsets = decoder.get_constant_offsets(&instruction);
                return Some((at, instruction, offsets));
            }
        }
        None
    })
}

/// The extent of the data object that `addr` is in: a string of a merged
/// string section, a slot of a merged constant section, an input section,
/// or a sized symbol.
fn data_bounds(image: &Image<'_>, addr: u64) -> Option<(u64, u64)> {
    Some(match image.extent_at(addr) {
        Some(extent) => match extent.merge {
            Merge::Strings => {
                let limit = extent.start + extent.size;
                let bytes = image.bytes(addr, limit - addr).unwrap_or(&[]);
                let len = bytes
                    .iter()
                    .position(|b| *b == 0)
                    .map_or(bytes.len(), |n| n + 1);
                (addr, addr + len as u64)
            }
            Merge::Constants(n) => {
                let n = u64::from(n.max(1));
                let start = extent.start + (addr - extent.start) / n * n;
                (start, start + n)
            }
            Merge::None => (extent.start, extent.start + extent.size),
        },
        None => {
            let object = image.object_at(addr)?;
            (object.addr, object.addr + object.size)
        }
    })
}

/// A `tracing` event's callsite metadata, as [`Normaliser::event_callsite`]
/// finds it.
struct EventCallsite<'i> {
    /// Where it keeps its name (a `&str`).
    name: u64,
    /// The file and line of the name.
    file: &'i [u8],
    line: u32,
}

/// A `tracing` event's callsite name, `event <file>.rs:<line>` (what its
/// macros make with `concat!("event ", file!(), ":", line!())`): its file
/// and its line.
fn event_name_parts(bytes: &[u8]) -> Option<(&[u8], u32)> {
    let rest = bytes.strip_prefix(b"event ")?;
    let colon = rest.iter().rposition(|b| *b == b':')?;
    let (file, digits) = (&rest[..colon], &rest[colon + 1..]);
    if !file.ends_with(b".rs") || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let line = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((file, line))
}

/// What a source file name stands for in a hash: the file, without where
/// its crate was unpacked (see `source_path`).
fn source_file(file: &[u8]) -> Referent<'static> {
    let mut h = blake3::Hasher::new();
    h.update(b"source file ");
    h.update(&stable_source_path(file));
    Referent::Data(*h.finalize().as_bytes(), 0)
}

/// The values of `TypeId`s: the read-only 16-byte constants that the
/// type-id functions ([`is_type_id`]) load, each with the type it is the id
/// of. Code that compares a `TypeId` (`downcast`, clap's value parsers)
/// loads the same value, often from its own copy of the constant, and
/// through it would depend on the crate's metadata hash. A value two types
/// claim (it cannot happen: it is a 128-bit hash of the type) maps to
/// `None` and is hashed as the bytes it is.
fn type_id_values<'i>(image: &'i Image<'_>) -> FastMap<[u8; 16], Option<&'i str>> {
    let mut found: FastMap<[u8; 16], Option<&'i str>> = FastMap::default();
    for f in image.functions.iter() {
        let Some(ty) = type_of_type_id(&f.token) else {
            continue;
        };
        let Some(code) = image.bytes(f.addr, f.size) else {
            continue;
        };
        let mut decoder = Decoder::with_ip(64, code, f.addr, DecoderOptions::NONE);
        let mut instruction = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut instruction);
            if instruction.is_invalid() || !instruction.is_ip_rel_memory_operand() {
                continue;
            }
            let target = instruction.ip_rel_memory_address();
            if image.section_at(target).is_none_or(|s| s.write) {
                continue;
            }
            let Some((start, end)) = data_bounds(image, target) else {
                continue;
            };
            let value = (end - start == 16)
                .then(|| image.bytes(start, 16))
                .flatten()
                .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok());
            if let Some(value) = value {
                let claim = found.entry(value).or_insert(Some(ty));
                if *claim != Some(ty) {
                    *claim = None;
                }
            }
        }
    }
    found
}

/// The type whose `TypeId` a type-id function returns, from its name.
fn type_of_type_id(token: &str) -> Option<&str> {
    if let Some(ty) = token.strip_prefix("<core::any::TypeId>::of::<") {
        return ty.strip_suffix('>');
    }
    let inner = token.strip_prefix('<')?;
    inner
        .strip_suffix(" as core::any::Any>::type_id")
        .or_else(|| inner.strip_suffix(" as core::error::Error>::type_id"))
}

/// `TypeId::of::<T>` and the `type_id` methods of `Any` and `Error`
/// (a blanket and a sealed default: no user code can differ from them).
fn is_c_identifier(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_type_id(token: &str) -> bool {
    token.starts_with("<core::any::TypeId>::of::<")
        || token.ends_with(" as core::any::Any>::type_id")
        || token.ends_with(" as core::error::Error>::type_id")
}

fn truncate_digest(digest: [u8; 32]) -> Fp {
    truncate(blake3::Hash::from_bytes(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_give_their_file_and_line() {
        assert_eq!(
            event_name_parts(b"event src/lib.rs:5"),
            Some((&b"src/lib.rs"[..], 5))
        );
        assert_eq!(
            event_name_parts(b"event crates/a b/src/x.rs:1234"),
            Some((&b"crates/a b/src/x.rs"[..], 1234))
        );
        for not_one in [
            &b"event src/lib.rs:"[..],
            b"event src/lib.rs",
            b"event src/lib.txt:5",
            b"event src/lib.rs:5a",
            b"src/lib.rs:5",
            b"event src/lib.rs:99999999999",
            b"events src/lib.rs:5",
        ] {
            assert_eq!(event_name_parts(not_one), None, "{not_one:?}");
        }
    }

    #[test]
    fn type_id_functions_name_their_type() {
        for (token, ty) in [
            (
                "<core::any::TypeId>::of::<fd::cli::ColorWhen>",
                "fd::cli::ColorWhen",
            ),
            (
                "<fd::cli::ColorWhen as core::any::Any>::type_id",
                "fd::cli::ColorWhen",
            ),
            (
                "<alloc::vec::Vec<u8> as core::error::Error>::type_id",
                "alloc::vec::Vec<u8>",
            ),
        ] {
            assert!(is_type_id(token));
            assert_eq!(type_of_type_id(token), Some(ty), "{token}");
        }
        assert_eq!(
            type_of_type_id("<fd::Opts as clap::Args>::augment_args"),
            None
        );
    }
}
