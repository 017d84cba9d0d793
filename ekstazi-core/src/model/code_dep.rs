//! Code dependencies as a record keeps them: per program ([`CodeUnit`]),
//! the build the test ran, the table of its uninstrumented functions, and
//! the ids of the functions it executed ([`CodeDep`], [`FnId`]).
//!
//! Whether one still holds is decided against the present build
//! (`digests::program::Build`, `selection::changed_code`); what an id stands
//! for is the function table's (`digests::functions`).

use crate::model::dep::Hash;
use crate::model::path::StoredPath;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A function as records name it: a digest of its stable name's hash and
/// its fingerprint.
pub type FnId = [u8; 8];

/// Whose code.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CodeUnit {
    /// The test binary itself.
    TestBinary,
    /// A program the test ran.
    Program(StoredPath),
}

impl fmt::Display for CodeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeUnit::TestBinary => f.write_str("test binary"),
            CodeUnit::Program(path) => path.fmt(f),
        }
    }
}

/// The functions a test executed in one program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeDep {
    /// The program: the test binary or one the test ran.
    pub unit: CodeUnit,
    /// The program's smart checksum when the test ran: while the program
    /// still has it, nothing in it changed.
    pub build: Hash,
    /// The digest of the table of the program's functions compiled without
    /// coverage (`digests::program::Uninstrumented`): every test depends on all of them.
    pub uninstrumented: Hash,
    /// The executed functions, ascending.
    pub functions: Vec<FnId>,
}
