//! Other processes, as `/proc` shows them: whether one named by a process
//! id file (a verdict-first recording, a `bisect` that owned a worktree)
//! still runs.

/// Whether `pid` is running: it exists and is not a zombie (an orphan's
/// end may never be reaped where the init process does not reap).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}
