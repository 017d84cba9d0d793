//! Git: the repository a run is filed under ([`repo::Repo`]: `HEAD`, its
//! parents, a clean work tree), and the scratch worktrees where the tests
//! of other commits are built and run ([`worktree::Worktree`], for
//! `bisect` and `merge-check`).
//!
//! Invariant: from the `git` command, never a library; this folder imports
//! only `cli`, `style`, `secrets` and `processes` from this crate.

pub mod repo;
pub mod worktree;
