//! Storage.
pub mod archive;
pub mod gc;
pub mod history;
pub mod merge_state;
pub mod snapshots;
pub mod store;
