//! The record model.
pub mod code_dep;
pub mod dep;
pub mod key;
pub mod path;
pub mod peer;
pub mod record;
