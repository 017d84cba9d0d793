//! Workflows.
pub mod bisect;
pub mod merge_check;
