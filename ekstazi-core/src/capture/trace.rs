//! The raw trace the runtime shim writes while a test runs.
//!
//! A trace is a sequence of events, each `tag: u8, flags: u8, len: u16
//! little-endian, path: [u8; len]`, in the order the test's processes made
//! the calls. The writer is `ekstazi-runtime`; both ends read the tags and
//! flags from `ekstazi_wire::trace`.

use crate::model::dep::FileKind;
use ekstazi_wire::trace as wire;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The file the shim makes beside a trace when it could not write one of
/// its events (a full disk, a file size limit, a descriptor it could not
/// open again): the trace is then missing something, and cannot vouch.
pub fn lost_marker(trace: &Path) -> PathBuf {
    let mut name = trace.as_os_str().to_owned();
    name.push(OsStr::from_bytes(wire::LOST_SUFFIX));
    PathBuf::from(name)
}

/// What a process did with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Opened an existing file for reading.
    Read,
    /// Created the path or replaced its content.
    Created,
    /// Opened an existing file for writing without truncating it.
    Modified,
    /// Looked it up and found nothing.
    Missing,
    /// Looked it up (stat, access) and found it.
    Exists,
    /// Removed it.
    Deleted,
    /// Touched a path the shim could not name.
    Lost,
    /// The shim began tracing a process (the path is empty).
    Start,
    /// A process of the test runs this program.
    Exec,
    /// Listed the entries of a directory (`readdir`); with [`FLAG_OPTION`]:
    /// `path NUL witness`, what the directory held as the process began
    /// (`checksum::ListingWitness`).
    List,
    /// Read an environment variable: the payload is `NAME=VALUE`, or `NAME`
    /// when it was unset ([`FLAG_OPTION`]: the value was too long to carry).
    Env,
    /// Read a symbolic link: `path NUL target` ([`FLAG_OPTION`]: the target
    /// may have been cut short by the caller's buffer).
    Link,
    /// Resolved a path to its canonical form (`realpath`): `path NUL resolved`.
    Resolve,
    /// A shared library mapped into a process of the test.
    Library,
    /// Ran a program the shim cannot follow into: statically linked, or
    /// ([`FLAG_OPTION`]) set-user-ID, where the loader drops `LD_PRELOAD`, or
    /// ([`FLAG_FOREIGN`]) built for another ELF class or dynamic loader.
    Untraceable,
    /// A socket address (`struct sockaddr` bytes) the test connected or sent
    /// to, or ([`FLAG_OPTION`]) bound itself.
    Network,
    /// Looked a host name up (`getaddrinfo`).
    HostLookup,
    /// Used a channel the shim cannot see (io_uring, a system call made
    /// outside libc that it cannot decode): the payload is a short reason.
    Unseen,
}

impl Access {
    fn from_tag(tag: u8) -> Option<Access> {
        Some(match tag {
            wire::READ => Access::Read,
            wire::CREATED => Access::Created,
            wire::MODIFIED => Access::Modified,
            wire::MISSING => Access::Missing,
            wire::EXISTS => Access::Exists,
            wire::DELETED => Access::Deleted,
            wire::LOST => Access::Lost,
            wire::START => Access::Start,
            wire::EXEC => Access::Exec,
            wire::LISTED => Access::List,
            wire::ENV => Access::Env,
            wire::LINK => Access::Link,
            wire::RESOLVED => Access::Resolve,
            wire::LIBRARY => Access::Library,
            wire::UNTRACEABLE => Access::Untraceable,
            wire::NETWORK => Access::Network,
            wire::HOST => Access::HostLookup,
            wire::UNSEEN => Access::Unseen,
            _ => return None,
        })
    }
}

pub use ekstazi_wire::trace::{FLAG_FOREIGN, FLAG_HARNESS, FLAG_NOFOLLOW, FLAG_OPTION};
use ekstazi_wire::trace::{KIND_MASK, KIND_SHIFT};

/// One traced call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What the process did.
    pub access: Access,
    /// The event's flags: the `FLAG_*` bits and, on `E` and `W` events,
    /// the path's kind.
    pub flags: u8,
    /// Absolute, as resolved by the shim, not yet normalised. For events
    /// that are not about a path (`V`, `N`, `H`, `G`) it holds the raw payload:
    /// see [`Event::payload`].
    pub path: PathBuf,
}

impl Event {
    /// Whether the libtest harness, not the test, made the call.
    pub fn by_harness(&self) -> bool {
        self.flags & FLAG_HARNESS != 0
    }

    /// Whether the lookup was about a symbolic link itself.
    pub fn nofollow(&self) -> bool {
        self.flags & FLAG_NOFOLLOW != 0
    }

    /// The raw bytes the shim wrote after the header.
    pub fn payload(&self) -> &[u8] {
        self.path.as_os_str().as_bytes()
    }

    /// Whether the per-tag option bit is set.
    pub fn option(&self) -> bool {
        self.flags & FLAG_OPTION != 0
    }

    /// For `K` and `P` events: the path and what the call returned for it.
    pub fn path_and_answer(&self) -> (PathBuf, Option<&[u8]>) {
        let payload = self.payload();
        match memchr::memchr(0, payload) {
            Some(at) => (
                PathBuf::from(OsStr::from_bytes(&payload[..at])),
                Some(&payload[at + 1..]),
            ),
            None => (self.path.clone(), None),
        }
    }

    /// What the path was when the call saw it, if the shim could tell.
    pub fn kind(&self) -> Option<FileKind> {
        match (self.flags >> KIND_SHIFT) & KIND_MASK {
            wire::KIND_FILE => Some(FileKind::File),
            wire::KIND_DIR => Some(FileKind::Dir),
            wire::KIND_SYMLINK => Some(FileKind::Symlink),
            wire::KIND_OTHER => Some(FileKind::Other),
            _ => None,
        }
    }
}

/// What a process reported about the functions it executed (sanitizer
/// coverage; the shim's `coverage` module writes these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoverageEvent {
    /// Process `pid`, running `program`, has instrumented code.
    Instrumented {
        /// The process's id.
        pid: u32,
        /// The instrumented program's path.
        program: PathBuf,
    },
    /// Process `pid` executed the functions whose coverage flags are at
    /// these addresses of `program` (relative to its load address).
    Functions {
        /// The process's id.
        pid: u32,
        /// The instrumented program's path.
        program: PathBuf,
        /// The addresses of the coverage flags it set, relative to the
        /// program's load address.
        flags: Vec<u32>,
    },
    /// Process `pid` reported all its coverage.
    Complete {
        /// The process's id.
        pid: u32,
    },
}

/// A parsed trace.
#[derive(Debug, Default)]
pub struct Trace {
    /// The traced calls, in the order the test's processes made them.
    pub events: Vec<Event>,
    /// What the processes reported about the functions they executed, in
    /// order.
    pub coverage: Vec<CoverageEvent>,
    /// False when the trace ends mid-event or holds an unknown tag: some
    /// accesses of the test are unknown, so it must not be trusted.
    pub complete: bool,
}

/// Parses a trace; never fails, but says when it is incomplete.
pub fn parse(bytes: &[u8]) -> Trace {
    let mut trace = Trace::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some((header, tail)) = rest.split_first_chunk::<4>() else {
            return trace;
        };
        let len = usize::from(u16::from_le_bytes([header[2], header[3]]));
        let Some(payload) = tail.get(..len) else {
            return trace;
        };
        if let Some(access) = Access::from_tag(header[0]) {
            trace.events.push(Event {
                access,
                flags: header[1],
                path: path_of(payload),
            });
        } else if let Some(event) = parse_coverage(header[0], payload) {
            trace.coverage.push(event);
        } else {
            return trace;
        }
        rest = &tail[len..];
    }
    trace.complete = true;
    trace
}

fn path_of(bytes: &[u8]) -> PathBuf {
    Path::new(OsStr::from_bytes(bytes)).to_path_buf()
}

/// `I [pid u32][path]`, `F [pid u32][path len u16][path][u32...]`, `Q [pid u32]`.
fn parse_coverage(tag: u8, payload: &[u8]) -> Option<CoverageEvent> {
    let (pid, rest) = payload.split_first_chunk::<4>()?;
    let pid = u32::from_le_bytes(*pid);
    match tag {
        wire::INSTRUMENTED => Some(CoverageEvent::Instrumented {
            pid,
            program: path_of(rest),
        }),
        wire::COMPLETE => rest.is_empty().then_some(CoverageEvent::Complete { pid }),
        wire::FUNCTIONS => {
            let (len, rest) = rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let (program, addresses) = (rest.get(..len)?, rest.get(len..)?);
            if addresses.len() % 4 != 0 {
                return None;
            }
            let flags = addresses
                .chunks_exact(4)
                .map(|a| u32::from_le_bytes(a.try_into().expect("4 bytes")))
                .collect();
            Some(CoverageEvent::Functions {
                pid,
                program: path_of(program),
                flags,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(tag: u8, flags: u8, path: &str) -> Vec<u8> {
        let mut out = vec![tag, flags];
        out.extend_from_slice(&(path.len() as u16).to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        out
    }

    #[test]
    fn parses_events_in_order() {
        let mut bytes = event(wire::READ, 0, "/ws/a");
        bytes.extend(event(wire::MISSING, FLAG_HARNESS, "/ws/b"));
        let trace = parse(&bytes);
        assert!(trace.complete);
        assert_eq!(trace.events.len(), 2);
        assert_eq!(trace.events[0].access, Access::Read);
        assert!(trace.events[1].by_harness());
        assert_eq!(trace.events[1].path, Path::new("/ws/b"));
    }

    #[test]
    fn a_cut_or_garbled_trace_is_incomplete() {
        let bytes = event(wire::READ, 0, "/ws/a");
        for cut in 1..bytes.len() {
            assert!(!parse(&bytes[..cut]).complete, "cut at {cut}");
        }
        assert!(!parse(&event(b'?', 0, "/x")).complete);
        assert!(parse(&[]).complete);
    }

    #[test]
    fn coverage_events_are_parsed() {
        let raw = |tag: u8, payload: &[u8]| {
            let mut out = vec![tag, 0];
            out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            out.extend_from_slice(payload);
            out
        };
        let mut functions = 7u32.to_le_bytes().to_vec();
        functions.extend_from_slice(&4u16.to_le_bytes());
        functions.extend_from_slice(b"/bin");
        functions.extend_from_slice(&0x10u32.to_le_bytes());
        functions.extend_from_slice(&0x20u32.to_le_bytes());
        let mut instrumented = 7u32.to_le_bytes().to_vec();
        instrumented.extend_from_slice(b"/bin");
        let mut bytes = raw(wire::INSTRUMENTED, &instrumented);
        bytes.extend(raw(wire::FUNCTIONS, &functions));
        bytes.extend(raw(wire::COMPLETE, &7u32.to_le_bytes()));
        let trace = parse(&bytes);
        assert!(trace.complete);
        assert_eq!(
            trace.coverage,
            [
                CoverageEvent::Instrumented {
                    pid: 7,
                    program: "/bin".into()
                },
                CoverageEvent::Functions {
                    pid: 7,
                    program: "/bin".into(),
                    flags: vec![0x10, 0x20]
                },
                CoverageEvent::Complete { pid: 7 },
            ]
        );
        assert!(
            !parse(&raw(wire::FUNCTIONS, &functions[..functions.len() - 1])).complete,
            "a torn address list"
        );
    }
}
