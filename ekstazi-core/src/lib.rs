//! The model and the decisions of cargo-ekstazi, free of processes and
//! terminals so that every rule can be unit-tested.
//!
//! The data flow of a run, and the module that owns each step:
//!
//! 1. [`store`] loads each test's [`record::Record`] (or says why it cannot);
//! 2. [`checksum`] computes the present checksum of every dependency named in
//!    the records, once each, in parallel;
//! 3. [`select`] compares record and present and names every [`select::Reason`]
//!    to run a test; [`filter`] applies libtest's name filters;
//! 4. the selected tests run under the shim, which writes a [`trace`];
//! 5. [`collect`] turns the trace into dependency targets, leaving out what
//!    [`ignore`] (with the workspace's [`config`]) and the test's own files
//!    say are not inputs; [`env`] normalises environment variables and
//!    [`network`] judges the peers a test reached. The targets are
//!    checksummed (as the test saw them) into a new record.
//!
//! ```
//! use ekstazi_core::model::path::Anchors;
//! use std::path::Path;
//!
//! // Paths are stored relative to the workspace, so records move with it.
//! let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
//! assert_eq!(anchors.store(Path::new("/ws/data/a.txt")).to_string(), "data/a.txt");
//! ```

pub mod capture;
pub mod digests;
pub mod files;
pub mod fork_request;
mod listing_hash;
pub mod model;
pub mod options;
pub mod selection;
pub mod storage;
pub mod workflows;
