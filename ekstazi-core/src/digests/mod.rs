//! Checksums and fingerprints of the present world: what selection compares
//! records with, and what a new record is made of.
//!
//! Main types: [`checksum::Checksums`] (file contents, path kinds, listings,
//! the smart checksum of a binary), [`fingerprint::Snapshot`] (every
//! function of a build and its fingerprint, from the binary and its linker
//! map), [`program::Build`] (a build as records are compared with it) and
//! [`program::Uninstrumented`], [`environ_walkers::EnvironWalkers`]
//! (whether a program the project did not build may walk its environment),
//! the [`functions::FunctionTable`] that names functions by id, programs'
//! smart checksums kept between runs by their files' identity
//! ([`kept_sums`]), and the
//! helpers they read binaries with
//! ([`coverage_table`], [`mapped`], `prehashed`).
//!
//! Invariant: digests compute, they neither capture nor decide: they import
//! the record model, `files` (the function table keeps segments) and
//! `ekstazi_wire::listing`, never capture, options, storage or selection.

pub mod checksum;
pub mod coverage_table;
pub mod environ_walkers;
pub mod fingerprint;
pub mod functions;
pub mod kept_sums;
pub mod mapped;
pub(crate) mod prehashed;
pub mod program;
