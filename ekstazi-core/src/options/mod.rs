//! What the workspace and the user choose: the workspace's configuration
//! file ([`config::Config`], `.config/ekstazi.toml`, with the policies it
//! sets: [`config::NetworkPolicy`], the declared [`config::Service`]s, the
//! ignore patterns) and the run's settings, resolved from the command
//! line, `EKSTAZI_*` variables and the file ([`settings::Settings`]).
//!
//! Invariant: options are read, not acted on: they import only the record
//! model and `files` (the keys trusted keys are parsed as), never capture,
//! storage or selection, which read them. Their errors are types
//! ([`errors`]), in the words a user reads.

pub mod config;
pub mod errors;
pub mod settings;
