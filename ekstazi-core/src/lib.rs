//! The model and the decisions of cargo-ekstazi, free of processes and
//! terminals so that every rule can be unit-tested.
//!
//! The data flow of a run, and the module that owns each step:
//!
//! 1. [`storage`] loads each test's [`model::record::Record`] (or says why it
//!    cannot) from the [`storage::store::Store`];
//! 2. [`digests`] computes the present checksum of every dependency named in
//!    the records, once each, in parallel ([`digests::checksum::Checksums`]),
//!    and the fingerprints of the programs' functions
//!    ([`digests::fingerprint`], [`digests::program::Build`]);
//! 3. [`selection`] compares record and present and names every
//!    [`selection::select::Reason`] to run a test; [`selection::filter`]
//!    applies libtest's name filters, and [`selection::vouch`] asks the
//!    [`storage::history`] for a record of another commit that vouches;
//! 4. the selected tests run under the shim, which writes a
//!    [`capture::trace`];
//! 5. [`capture`] turns the trace into dependency targets
//!    ([`capture::collect`]), leaving out what [`capture::ignore`] (with the
//!    workspace's [`options::config`]) and the test's own files say are not
//!    inputs; [`capture::environment`] normalises environment variables and
//!    [`capture::network`] judges the peers a test reached; [`recording`]
//!    checksums the targets (as the test saw them) into a new record, from
//!    the test's evidence, which storage keeps, sealed ([`files::sealed`]),
//!    and files in the history.
//!
//! [`workflows`] builds git workflows on the history: bisecting a
//! regression, checking a merge.
//!
//! The top-level modules import one way, each only the ones before it:
//! `files` < [`model`] < [`options`] < [`digests`] < [`capture`] <
//! [`storage`] < [`recording`], [`selection`], [`workflows`]. A type two of them share
//! lives in the lower one. The formats the shim shares with the runner (the
//! trace's tags, the fork server's messages, the listing hashes) are the
//! `ekstazi-wire` crate's.
//!
//! ```
//! use ekstazi_core::model::path::Anchors;
//! use std::path::Path;
//!
//! // Paths are stored relative to the workspace, so records move with it.
//! let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
//! assert_eq!(anchors.store(Path::new("/ws/data/a.txt")).to_string(), "data/a.txt");
//! ```

#![warn(missing_docs)]

pub mod capture;
pub mod digests;
pub mod files;
pub mod model;
pub mod options;
pub mod recording;
pub mod selection;
pub mod storage;
pub mod workflows;
