//! Options.
pub mod config;
pub mod settings;
