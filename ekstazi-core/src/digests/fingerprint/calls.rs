//! Direct calls between the instrumented functions of a binary: who calls
//! whom by a `call` or a tail `jmp` to another function's entry. It is
//! TOM's static call graph, taken from the machine code so it needs
//! nothing but what fingerprinting already reads. Calls through a pointer
//! (trait objects, closures passed along) are not in it: `merge-check`
//! uses it only to point at missing tests, never to skip one.
//!
//! Functions are named by the hash of their stable name, as snapshots and
//! records name them.

use super::image::Image;
use super::{FastSet, FingerprintError, hash_of_stable_name};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use rayon::prelude::*;
use std::path::Path;

/// `(caller, callee)` pairs of stable-name hashes, sorted, without
/// duplicates or self-calls.
fn direct_calls(image: &Image<'_>) -> Result<Vec<(u64, u64)>, FingerprintError> {
    let instrumented: FastSet<u64> = image
        .coverage_flags
        .iter()
        .map(|(_, entry)| *entry)
        .collect();
    let mut calls: Vec<(u64, u64)> = image
        .functions
        .par_iter()
        .filter(|f| instrumented.contains(&f.addr))
        .flat_map_iter(|f| {
            let caller = hash_of_stable_name(&f.token);
            let mut found = Vec::new();
            let Some(code) = image.bytes(f.addr, f.size) else {
                return found;
            };
            let mut decoder = Decoder::with_ip(64, code, f.addr, DecoderOptions::NONE);
            let mut instruction = Instruction::default();
            while decoder.can_decode() {
                decoder.decode_out(&mut instruction);
                let direct = matches!(instruction.mnemonic(), Mnemonic::Call | Mnemonic::Jmp)
                    && matches!(
                        instruction.op0_kind(),
                        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                    );
                if !direct {
                    continue;
                }
                let target = instruction.near_branch_target();
                if target == f.addr || !instrumented.contains(&target) {
                    continue;
                }
                if let Some(callee) = image.function_at(target).filter(|g| g.addr == target) {
                    let callee = hash_of_stable_name(&callee.token);
                    if callee != caller {
                        found.push((caller, callee));
                    }
                }
            }
            found
        })
        .collect();
    calls.sort_unstable();
    calls.dedup();
    Ok(calls)
}

/// The direct calls of the executable at `binary`, with its extents from
/// `source`.
pub fn direct_calls_file(
    binary: &Path,
    source: super::ExtentSource,
) -> Result<Vec<(u64, u64)>, FingerprintError> {
    super::with_image_file(binary, source, |image| direct_calls(&image))
}
