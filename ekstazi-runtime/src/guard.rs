//! Re-entry guard: libc calls made by the shim itself must not be traced.

use std::cell::Cell;

thread_local! {
    // `const` initialisation and no destructor: the slot lives in static TLS,
    // so touching it never allocates and works during thread teardown.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Proof that this thread is inside the shim's bookkeeping; released on drop.
pub struct Inside(());

/// Enters the shim unless this thread already is inside it.
pub fn enter() -> Option<Inside> {
    INSIDE
        .try_with(|inside| {
            if inside.replace(true) {
                None
            } else {
                Some(Inside(()))
            }
        })
        .ok()
        .flatten()
}

/// Whether this thread is inside the shim's bookkeeping (a thread being
/// torn down counts as inside: nothing is recorded for it).
pub fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}
