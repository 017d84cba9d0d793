//! Programs the project did not build that may walk their inherited
//! environment.
//!
//! A shell copies its whole environment at start (`sh -c 'test "$MODE" =
//! on'` reads `MODE` without a `getenv` the shim can see), and so do
//! interpreters (`python`, `perl`), `env`, `make` and `git`. Their code
//! carries no coverage, so the function fingerprints that tell a walk in
//! the project's own programs ([`crate::digests::program::Build::walks_environment`])
//! cannot tell it here. What can be told is whether the program refers to
//! `environ` at all: a program that walks it names `environ`, `__environ`
//! or `_environ` in its dynamic symbol table, as an import or, in an
//! executable, as the copy the loader relocates into it (`nm -D /bin/sh`:
//! `B __environ`, `V environ`). A program that names none of them reaches
//! its variables only through `getenv`, which the shim sees (`ls`, `cat`,
//! `date`, `id` on Debian 13).
//!
//! A file the answer cannot be read from may walk: a statically linked
//! program (no dynamic symbol table), a script (its interpreter runs it),
//! a file that is not ELF or cannot be read. The program's own code is
//! what is looked at; a walk made inside one of its shared libraries (an
//! interpreter built as a small executable over its library) is not seen
//! (see the limitations page).
//!
//! The answer is cached by the program's checksum: a run looks at each
//! program once however many tests run it.

use crate::model::dep::Hash;
use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// The names glibc gives the environment's array.
const ENVIRON: [&str; 3] = ["environ", "__environ", "_environ"];

/// Whether programs may walk their environment, by checksum.
#[derive(Debug, Default)]
pub struct EnvironWalkers {
    known: Mutex<HashMap<Hash, bool>>,
}

impl EnvironWalkers {
    /// Whether the program at `path`, whose content has the checksum `id`,
    /// may walk the environment it inherited.
    pub fn may_walk(&self, path: &Path, id: &Hash) -> bool {
        if let Some(known) = self.known.lock().ok().and_then(|k| k.get(id).copied()) {
            return known;
        }
        let walks = match std::fs::read(path) {
            Ok(bytes) => bytes_may_walk(&bytes),
            Err(_) => true,
        };
        if let Ok(mut known) = self.known.lock() {
            known.insert(*id, walks);
        }
        walks
    }
}

/// Whether a program with these bytes may walk its environment.
pub fn bytes_may_walk(bytes: &[u8]) -> bool {
    let Ok(file) = object::File::parse(bytes) else {
        return true; // a script, or not a program we can read
    };
    if file.format() != object::BinaryFormat::Elf {
        return true;
    }
    let mut symbols = file.dynamic_symbols().peekable();
    if symbols.peek().is_none() {
        return true; // statically linked: `environ` is its own
    }
    symbols.any(|symbol| symbol.name().is_ok_and(|name| ENVIRON.contains(&name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_walks_and_a_program_without_environ_does_not() {
        // The test binary itself: a Rust program that spawns processes
        // and walks `std::env::vars`, so it names `environ`.
        let me = std::env::current_exe().unwrap();
        assert!(bytes_may_walk(&std::fs::read(&me).unwrap()));
        for shell in ["/bin/sh", "/bin/bash", "/bin/dash"] {
            if let Ok(bytes) = std::fs::read(shell) {
                assert!(bytes_may_walk(&bytes), "{shell}");
            }
        }
        // coreutils' `cat` on glibc reads its variables through `getenv`
        // alone.
        if let Ok(bytes) = std::fs::read("/bin/cat") {
            assert!(!bytes_may_walk(&bytes));
        }
    }

    #[test]
    fn what_cannot_be_read_may_walk() {
        assert!(bytes_may_walk(b"#!/bin/sh\necho $MODE\n"));
        assert!(bytes_may_walk(b""));
        assert!(bytes_may_walk(b"\x7fELF garbage"));
        let walkers = EnvironWalkers::default();
        assert!(walkers.may_walk(Path::new("/nonexistent/program"), &[7; 32]));
        // Cached by checksum: the same id answers without reading.
        assert!(walkers.may_walk(Path::new("/bin/cat"), &[7; 32]));
    }
}
