//! The trace: what a traced process appends to its trace file.
//!
//! A trace is a sequence of events, each `tag: u8, flags: u8, len: u16
//! little-endian, payload: [u8; len]`, appended with one `write` per event to
//! the file named by `EKSTAZI_TRACE_FILE`. Every process of a test (the test
//! binary, its forks and the programs it runs) appends to the same file;
//! `O_APPEND` keeps events whole and in order. For most tags the payload is
//! an absolute path; the tags below say when it is something else.
//!
//! The shim writes events (`ekstazi-runtime`'s `trace` and `coverage`);
//! `ekstazi-core` parses them.

/// Opened for reading (or for reading and writing) a file that existed.
pub const READ: u8 = b'R';
/// Created the path, or replaced its content (truncate, rename onto it).
pub const CREATED: u8 = b'C';
/// Opened an existing file for writing without truncating it.
pub const MODIFIED: u8 = b'W';
/// Looked the path up and found nothing (`ENOENT`, `ENOTDIR`).
pub const MISSING: u8 = b'M';
/// Looked the path up (stat, access) and found it.
pub const EXISTS: u8 = b'E';
/// Removed the path (unlink, rmdir, rename away).
pub const DELETED: u8 = b'D';
/// An access happened whose path could not be named: the test is untraceable.
pub const LOST: u8 = b'L';
/// The shim started tracing this process (no path): a trace without one
/// means the shim never loaded, and the test cannot be trusted.
pub const START: u8 = b'S';
/// This process runs the program at the path (written once, at start, by
/// every traced process except the test binary itself, whose checksum the
/// runner takes anyway): the programs a test runs are its dependencies.
pub const EXEC: u8 = b'X';

/// Listed a directory's entries (`readdir`); with [`FLAG_OPTION`]:
/// `path NUL witness`, what the directory held as the process began.
pub const LISTED: u8 = b'T';
/// Read an environment variable: `NAME=VALUE`, or `NAME` when unset
/// ([`FLAG_OPTION`]: the value was too long to carry).
pub const ENV: u8 = b'V';
/// Read a symbolic link: `path NUL target` ([`FLAG_OPTION`]: the caller's
/// buffer may have cut the target short).
pub const LINK: u8 = b'K';
/// Resolved a path (`realpath`): `path NUL canonical path`.
pub const RESOLVED: u8 = b'P';
/// A shared library mapped into the process.
pub const LIBRARY: u8 = b'O';
/// Ran a program the shim cannot follow into: statically linked, or
/// ([`FLAG_OPTION`]) set-user-ID, or ([`FLAG_FOREIGN`]) for another ELF
/// class or dynamic loader.
pub const UNTRACEABLE: u8 = b'U';
/// A socket address connected or sent to, or ([`FLAG_OPTION`]) bound:
/// `struct sockaddr` bytes (a Unix path made absolute).
pub const NETWORK: u8 = b'N';
/// Looked a host name up.
pub const HOST: u8 = b'H';
/// Used a channel the shim cannot see (io_uring, a system call outside
/// libc it cannot decode): a short reason, and the test always runs.
pub const UNSEEN: u8 = b'G';

/// The event happened on the test harness's main thread, before or around the
/// test rather than in it (libtest runs each test on a thread of its own).
pub const FLAG_HARNESS: u8 = 1;
/// The lookup did not follow a final symbolic link (`lstat`).
pub const FLAG_NOFOLLOW: u8 = 2;
/// Bits 2..5 of the flags: what the path was when the call saw it
/// (`EXISTS` and `MODIFIED` events), so that the reader need not look later,
/// when the test may have replaced it.
pub const KIND_SHIFT: u8 = 2;
/// The three bits of a kind, once shifted down.
pub const KIND_MASK: u8 = 0b111;
/// The kind of a regular file.
pub const KIND_FILE: u8 = 1;
/// The kind of a directory.
pub const KIND_DIR: u8 = 2;
/// The kind of a symbolic link (seen without following it).
pub const KIND_SYMLINK: u8 = 3;
/// The kind of anything else: a device, a FIFO, a socket. Zero, no kind,
/// means the shim could not tell.
pub const KIND_OTHER: u8 = 4;
/// Bit 2 of the flags on events that carry no kind: a per-tag option.
pub const FLAG_OPTION: u8 = 4;
/// Bit 3 on [`UNTRACEABLE`] events: the program is for another ELF class or
/// dynamic loader.
pub const FLAG_FOREIGN: u8 = 8;

/// Function coverage: a process runs an instrumented program,
/// `[pid u32][path]`.
pub const INSTRUMENTED: u8 = b'I';
/// Function coverage: the functions a process executed in one program,
/// `[pid u32][path len u16][path][u32 flag address...]`, each the address
/// of a coverage flag it set, relative to the program's load address.
pub const FUNCTIONS: u8 = b'F';
/// Function coverage: a process wrote all of its coverage, `[pid u32]`.
pub const COMPLETE: u8 = b'Q';

/// The suffix of the file the shim makes beside a trace when it could not
/// write one of its events: the trace is then missing something.
pub const LOST_SUFFIX: &[u8] = b".lost";
