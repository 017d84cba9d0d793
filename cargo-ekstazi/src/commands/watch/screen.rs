//! `watch`'s terminal: its lines, the clearing between cycles, and the
//! keys.
//!
//! In a terminal (standard input and output both), the keys are read one
//! at a time, without Enter and without echo: the terminal's canonical
//! mode and echo are turned off, and nothing else. Hand-written on
//! `libc`'s termios rather than a terminal crate's raw mode because raw
//! mode also turns off output processing and signals: the cycles' output,
//! which goes straight to the terminal, would lose its carriage returns,
//! and Ctrl-C would stop being SIGINT. The settings are put back when the
//! watch ends, also by a panic.
//!
//! When standard input or output is not a terminal (a pipe, a file, CI),
//! the output is plain: no clearing, no escape sequences, no keys.

use super::Event;
use anyhow::Result;
use std::io::{IsTerminal, Read, Write};
use std::sync::Mutex;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// The keys `watch` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `a`: every test.
    All,
    /// `f`: the tests that failed in the last cycle.
    Failures,
    /// Enter: the last cycle's tests again.
    Rerun,
    /// `q`.
    Quit,
}

impl Key {
    fn of(byte: u8) -> Option<Key> {
        match byte {
            b'a' | b'A' => Some(Key::All),
            b'f' | b'F' => Some(Key::Failures),
            b'\n' | b'\r' => Some(Key::Rerun),
            b'q' | b'Q' => Some(Key::Quit),
            _ => None,
        }
    }
}

/// The terminal settings to put back, while they are changed.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

pub struct Screen {
    /// A terminal, with keys.
    terminal: bool,
    clear: bool,
}

impl Screen {
    /// In a terminal, turns off its line mode and echo and starts reading
    /// keys into `events`.
    pub fn open(clear: bool, events: Sender<Event>) -> Result<Screen> {
        let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
        if terminal && keys_one_at_a_time() {
            std::thread::spawn(move || read_keys(events));
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        }
        Ok(Screen { terminal, clear })
    }

    /// A line of the watch's own, on standard output.
    pub fn line(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    /// Before a cycle: a clear screen, in a terminal unless `--no-clear`.
    pub fn clear(&self) {
        if self.terminal && self.clear {
            let mut out = std::io::stdout().lock();
            // Home, clear the screen, and its scrollback.
            let _ = out.write_all(b"\x1b[H\x1b[2J\x1b[3J");
            let _ = out.flush();
        }
    }

    /// After a cycle: what it took, and that the watch waits.
    pub fn idle(&self, spent: Duration) {
        self.line(&format!(
            "cargo-ekstazi: the cycle took {:.2}s",
            spent.as_secs_f64()
        ));
        let keys = match self.terminal {
            true => "  [a] all  [f] failures  [Enter] rerun  [q] quit",
            false => "",
        };
        self.line(&format!("cargo-ekstazi: watching for changes…{keys}"));
    }

    /// Puts the terminal back as it was.
    pub fn close(&self) {
        restore();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Turns off canonical mode and echo on standard input; whether it could.
fn keys_one_at_a_time() -> bool {
    // SAFETY: a zeroed termios is a valid value for tcgetattr to fill.
    let mut settings: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is standard input, the pointer valid.
    if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut settings) } != 0 {
        return false;
    }
    let saved = settings;
    settings.c_lflag &= !(libc::ICANON | libc::ECHO);
    settings.c_cc[libc::VMIN] = 1;
    settings.c_cc[libc::VTIME] = 0;
    // SAFETY: as above.
    if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &settings) } != 0 {
        return false;
    }
    *SAVED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(saved);
    true
}

fn restore() {
    let saved = SAVED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some(saved) = saved {
        // SAFETY: the descriptor is standard input, the pointer valid.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
    }
}

fn read_keys(events: Sender<Event>) {
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0u8; 1];
    while let Ok(1) = stdin.read(&mut byte) {
        if let Some(key) = Key::of(byte[0])
            && events.send(Event::Key(key)).is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_bacon_users_expect() {
        assert_eq!(Key::of(b'a'), Some(Key::All));
        assert_eq!(Key::of(b'f'), Some(Key::Failures));
        assert_eq!(Key::of(b'\r'), Some(Key::Rerun));
        assert_eq!(Key::of(b'\n'), Some(Key::Rerun));
        assert_eq!(Key::of(b'q'), Some(Key::Quit));
        assert_eq!(Key::of(b'x'), None);
    }
}
