//! Capture.
pub mod collect;
pub mod coverage;
pub mod depinfo;
pub mod doctests;
pub mod environment;
pub mod ignore;
pub mod network;
pub mod trace;
