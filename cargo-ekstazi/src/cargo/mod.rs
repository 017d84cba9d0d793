//! Cargo and libtest: what `cargo test` would do before its tests run.
//!
//! The workspace ([`workspace::Workspace`]), the cargo build of the test
//! binaries ([`test_build::Built`], [`test_build::TestBinary`]) and the
//! instrumented build behind function granularity ([`instrument`]), what
//! a build read, for the stamp that lets an unchanged build skip cargo
//! ([`build_footprint`]), the
//! doctest units ([`doctests`]), each binary's tests as libtest lists them
//! ([`libtest::TestCase`]), the variables cargo gives a test process
//! ([`test_env`]), and the rustdoc wrapper that puts doctests under the
//! shim ([`rustdoc`]).
//!
//! Invariant: this folder knows nothing of records, selection or runs; it
//! imports only `cli`, `style` and `exit` from this crate.

pub mod archived;
pub mod build_footprint;
pub mod doctests;
pub mod instrument;
pub mod libtest;
pub mod rustdoc;
pub mod test_build;
pub mod test_env;
pub mod workspace;
