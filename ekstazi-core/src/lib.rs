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
//! use ekstazi_core::path::Anchors;
//! use std::path::Path;
//!
//! // Paths are stored relative to the workspace, so records move with it.
//! let anchors = Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None);
//! assert_eq!(anchors.store(Path::new("/ws/data/a.txt")).to_string(), "data/a.txt");
//! ```

pub mod archive;
pub mod bisect;
pub mod checksum;
pub mod code;
pub mod collect;
pub mod config;
pub mod coverage_table;
pub mod dep;
pub mod depinfo;
pub mod doctests;
pub mod env;
pub mod filter;
pub mod fingerprint;
pub mod functions;
pub mod gc;
pub mod history;
pub mod ignore;
pub mod key;
pub mod mapped;
pub mod merge;
pub mod merge_check;
pub mod network;
pub mod path;
mod prehashed;
pub mod record;
pub mod select;
pub mod settings;
pub mod store;
pub mod trace;
pub mod vouch;
