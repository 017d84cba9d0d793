//! Selection.
pub mod changed_code;
pub mod filter;
pub mod select;
pub mod vouch;
