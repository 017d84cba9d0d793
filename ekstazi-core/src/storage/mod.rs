//! Keeping records, and what they refer to, between runs.
//!
//! Main types: the [`store::Store`] (one record per test, the snapshots of
//! builds, the uninstrumented tables, the function table's directory), the
//! [`snapshots::Snapshots`] cache of builds' fingerprints, the
//! [`history::History`] of the records that held at each commit, the
//! [`archive`] a state travels in, the garbage collection of the function
//! table ([`gc`]), the merging of shards' state directories
//! ([`merge_state`]), the per-binary [`record_index`] that lets a run
//! decide that a record holds without reading it whole, and the stamp of the last build ([`build_stamp`]),
//! which lets a run whose build inputs are unchanged skip cargo. Every file is written and read through `files`.
//!
//! Invariant: storage never imports selection, capture or the workflows:
//! it keeps the model and the digests, and decides nothing about a test.

pub mod archive;
pub mod build_stamp;
pub mod chains;
pub mod dicts;
pub mod fn_sets;
pub mod gc;
pub mod history;
pub mod merge_state;
pub mod record_file;
pub mod record_index;
pub mod remote;
pub mod run_log;
pub mod snapshots;
pub mod store;
