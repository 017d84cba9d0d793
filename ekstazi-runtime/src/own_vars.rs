//! The shim's own variables, kept out of the program's sight and carried to
//! the programs it runs.
//!
//! A program under the shim must see the environment the test gave it, byte
//! for byte, as under `cargo test`: `env -i A=1 env` prints `A=1` and
//! nothing else, and `printenv LD_PRELOAD` prints the user's own preload.
//! So the constructor takes out of `environ`
//! - the shim's entry in `LD_PRELOAD` (the variable goes when it held only
//!   the shim; the rest of its value is edited in place);
//! - the tool's `EKSTAZI_*` variables: in the process the runner started,
//!   every one (they are the tool's, never the test's); in a process a
//!   traced program started, exactly those the exec hook added, which it
//!   names in [`MARKER`] — a variable the test itself passed on (a test of
//!   a tool that reads `EKSTAZI_*` itself) stays in sight.
//!
//! The entries taken out are kept (their strings stay where they are,
//! nothing is copied), and the exec hooks add the ones a child's
//! environment lacks back into it, with the shim in `LD_PRELOAD`, so that
//! the child is traced too (`hooks::exec`).
//!
//! What stays visible: `/proc/self/environ` (the kernel's copy of the
//! environment the process started with, which still lists them).

use libc::c_char;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable through which the exec hook tells a child which of its
/// variables are the shim's (names separated by `,`).
pub const MARKER: &[u8] = b"EKSTAZI_CARRIED";

/// The prefix of the tool's variables.
const OWN_PREFIX: &[u8] = b"EKSTAZI_";

/// How many variables are carried at most; more stay in sight, which only
/// shows them (the child still gets them, by inheritance).
pub const MAX_CARRIED: usize = 32;

struct Carried {
    entries: UnsafeCell<[*const c_char; MAX_CARRIED]>,
    len: AtomicUsize,
}

// SAFETY: written once, single-threaded, from the constructor, before any
// hook can read it; the length is published last.
unsafe impl Sync for Carried {}

static CARRIED: Carried = Carried {
    entries: UnsafeCell::new([std::ptr::null(); MAX_CARRIED]),
    len: AtomicUsize::new(0),
};

/// The entries (`NAME=VALUE` C strings) taken out of `environ`, to be
/// given to the programs this process runs.
pub fn carried() -> &'static [*const c_char] {
    let len = CARRIED.len.load(Ordering::Acquire);
    // SAFETY: the first `len` slots were written before `len` was published.
    unsafe { &(&*CARRIED.entries.get())[..len] }
}

/// The name of an entry `NAME=VALUE`.
///
/// # Safety
/// `entry` is a C string.
pub unsafe fn name_of<'a>(entry: *const c_char) -> &'a [u8] {
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::ffi::CStr::from_ptr(entry) }.to_bytes();
    &bytes[..bytes.iter().position(|b| *b == b'=').unwrap_or(bytes.len())]
}

unsafe extern "C" {
    static mut environ: *mut *const c_char;
}

/// Takes the shim's variables out of `environ` and its entry out of
/// `LD_PRELOAD` (`shim` is its path as the loader was given it).
///
/// # Safety
/// Called once, from the constructor, single-threaded, before `main`.
pub unsafe fn hide(shim: &[u8]) {
    // SAFETY: reading the environment, single-threaded.
    let marker = unsafe { crate::environ::lookup(MARKER) };
    let listed: Option<&[u8]> = (!marker.is_null())
        // SAFETY: a value in `environ` is a C string.
        .then(|| unsafe { std::ffi::CStr::from_ptr(marker) }.to_bytes());
    let hidden = |name: &[u8]| match listed {
        Some(list) => name == MARKER || list.split(|b| *b == b',').any(|n| n == name),
        None => name.starts_with(OWN_PREFIX),
    };
    // SAFETY: `environ` is a NULL-terminated array of C strings, which
    // glibc's own `unsetenv` edits in place just as this does.
    unsafe {
        let env = environ;
        if env.is_null() {
            return;
        }
        // SAFETY: not published yet (see the `Sync` impl).
        let saved = &mut *CARRIED.entries.get();
        let mut n_saved = 0;
        let (mut read, mut write) = (0, 0);
        while !(*env.add(read)).is_null() {
            let entry = *env.add(read);
            read += 1;
            let name = name_of(entry);
            if hidden(name) {
                if name == MARKER {
                    continue;
                }
                if n_saved < MAX_CARRIED {
                    saved[n_saved] = entry;
                    n_saved += 1;
                    continue;
                }
            }
            if name == b"LD_PRELOAD" && !without_shim(entry.cast_mut(), shim) {
                continue;
            }
            *env.add(write) = entry;
            write += 1;
        }
        *env.add(write) = std::ptr::null();
        CARRIED.len.store(n_saved, Ordering::Release);
    }
}

/// Takes `shim` out of the `LD_PRELOAD=...` entry, in place, with one
/// separator; false when nothing else was in it (the entry then goes).
///
/// # Safety
/// `entry` is a writable C string starting with `LD_PRELOAD=`.
unsafe fn without_shim(entry: *mut c_char, shim: &[u8]) -> bool {
    const PREFIX: usize = b"LD_PRELOAD=".len();
    // SAFETY: the caller's contract.
    let len = unsafe { libc::strlen(entry) };
    // SAFETY: `entry` holds `len` bytes and a NUL.
    let value =
        unsafe { std::slice::from_raw_parts_mut(entry.cast::<u8>().add(PREFIX), len - PREFIX) };
    if value == shim {
        return false;
    }
    let is_sep = |b: u8| b == b':' || b == b' ';
    let mut start = 0;
    while start <= value.len() {
        let end = value[start..]
            .iter()
            .position(|b| is_sep(*b))
            .map_or(value.len(), |i| start + i);
        if &value[start..end] == shim {
            // The item and the separator after it (or, for the last item,
            // the one before it).
            let (from, to) = if end < value.len() {
                (start, end + 1)
            } else {
                (start.saturating_sub(1), end)
            };
            let rest = value.len() - to;
            value.copy_within(to.., from);
            // SAFETY: within the string; the NUL moves up with the rest.
            unsafe { *entry.add(PREFIX + from + rest) = 0 };
            return true;
        }
        start = end + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::without_shim;

    fn strip(value: &str) -> (bool, String) {
        let mut bytes = format!("LD_PRELOAD={value}\0").into_bytes();
        // SAFETY: a writable C string starting with the prefix.
        let kept = unsafe { without_shim(bytes.as_mut_ptr().cast(), b"/t/shim.so") };
        let text = std::ffi::CStr::from_bytes_until_nul(&bytes).unwrap();
        (
            kept,
            text.to_str().unwrap()["LD_PRELOAD=".len()..].to_owned(),
        )
    }

    #[test]
    fn only_the_shim_leaves_ld_preload() {
        assert!(!strip("/t/shim.so").0, "the variable goes");
        assert_eq!(strip("/t/shim.so:x"), (true, "x".to_owned()));
        assert_eq!(strip("/t/shim.so:"), (true, String::new()));
        assert_eq!(strip("a.so /t/shim.so"), (true, "a.so".to_owned()));
        assert_eq!(strip("a:/t/shim.so:b"), (true, "a:b".to_owned()));
        assert_eq!(strip("a:b"), (true, "a:b".to_owned()));
        assert_eq!(strip("/t/shim.so.1:b"), (true, "/t/shim.so.1:b".to_owned()));
    }
}
