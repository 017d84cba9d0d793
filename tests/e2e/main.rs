//! End-to-end tests: the real `cargo ekstazi` on fixture projects copied to
//! temporary directories, asserting on which tests ran and why.

mod support;

mod adoption;
mod bisect;
mod bounds;
mod capture;
mod cargo_runs;
mod completions;
mod doctests;
mod doors;
mod faults;
mod field;
mod fork_server;
mod functions;
mod github_action;
mod handed_state;
mod history;
mod merge_check;
mod nextest;
mod nextest_archive;
mod options;
mod raw_syscalls;
mod reasons;
mod record_index;
mod remote;
mod selection;
mod shim;
mod stability;
mod transparent;
mod unchanged_build;
mod ux;
mod verdict_first;
mod watch;
