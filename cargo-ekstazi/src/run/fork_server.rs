//! The runner's end of a test binary's fork server.
//!
//! A server is the test binary started under the shim with
//! `EKSTAZI_SERVE_FD` and placeholder arguments; it stops in the shim's
//! constructor, before any of the binary's own code, and forks one child
//! per request, each of which goes on to run exactly one test
//! (`ekstazi-runtime`'s `fork_server` has the how and why). What a test
//! process pays for `exec`, loading and relocating its binary and the
//! shim's start is paid once per binary and worker instead of once per
//! test.
//!
//! A server that will not serve (its constructor found another thread
//! running, say) or that goes away is dropped, and that binary's tests
//! start the ordinary way: the server is only ever an optimisation.

use anyhow::{Context, Result, bail};
use ekstazi_wire::fork::{self, ENDED, REFUSED, REPLY_LEN, STARTED};
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags,
    SocketType,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};

/// The arguments a server is started with, after the binary: libtest's
/// for one test, with a placeholder where each child puts its test's name.
/// `--include-ignored` changes nothing for a test that is not ignored, and
/// lets one server run both kinds.
pub const SERVER_ARGS: [&str; 4] = [
    "--exact",
    "(cargo-ekstazi fork server)",
    "--nocapture",
    "--include-ignored",
];

/// One worker's servers, by test binary; `None` for a binary whose server
/// failed: its tests start the ordinary way.
#[derive(Default)]
pub struct Servers {
    by_binary: HashMap<usize, Option<ForkServer>>,
}

impl Servers {
    /// The server of `binary`, started with `command` on first use.
    pub fn get(
        &mut self,
        binary: usize,
        command: impl FnOnce() -> Command,
    ) -> Option<&mut ForkServer> {
        self.by_binary
            .entry(binary)
            .or_insert_with(|| ForkServer::start(command()).ok())
            .as_mut()
    }

    /// Stops using the server of `binary` for the rest of the run.
    pub fn disable(&mut self, binary: usize) {
        self.by_binary.insert(binary, None);
    }
}

/// A running server and the socket to it.
pub struct ForkServer {
    process: Child,
    socket: OwnedFd,
}

/// What became of a request.
pub enum Start {
    /// The test runs as this process (and process group).
    Started(i32),
    /// Nothing was started: run the test the ordinary way.
    Refused,
}

impl ForkServer {
    /// Starts the server `command` describes (the test binary, its working
    /// directory and environment with placeholders, [`SERVER_ARGS`]).
    fn start(mut command: Command) -> Result<ForkServer> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .context("cannot create the fork server's socket")?;
        let fd = theirs.as_raw_fd();
        command
            .env(OsStr::from_bytes(fork::SERVE_FD_VAR), fd.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: only `fcntl` runs between fork and exec: it keeps the
        // server's end of the socket open across `exec`.
        unsafe {
            command.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let process = command.spawn().context("cannot start a fork server")?;
        drop(theirs);
        Ok(ForkServer {
            process,
            socket: ours,
        })
    }

    /// Asks for a child to run test `name` with `vars` (each `NAME=VALUE`
    /// replacing the server's placeholder of that name) and `output` as its
    /// stdout and stderr.
    pub fn start_test(
        &mut self,
        name: &str,
        vars: &[Vec<u8>],
        output: BorrowedFd<'_>,
    ) -> Result<Start> {
        let Some(request) = fork::encode_request(name.as_bytes(), vars) else {
            return Ok(Start::Refused);
        };
        let fds = [output];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            &self.socket,
            &[IoSlice::new(&request)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .context("the fork server went away")?;
        match self.reply()? {
            (STARTED, pid) if pid > 0 => Ok(Start::Started(pid)),
            (REFUSED, _) => Ok(Start::Refused),
            (tag, value) => bail!("the fork server answered {tag} {value}"),
        }
    }

    /// Waits for the test started last to end: its wait status.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        match self.reply()? {
            (ENDED, status) => Ok(ExitStatus::from_raw(status)),
            (tag, value) => bail!("the fork server answered {tag} {value}"),
        }
    }

    fn reply(&self) -> Result<(u8, i32)> {
        let mut buf = [0u8; REPLY_LEN + 1];
        let (n, _) = loop {
            match rustix::net::recv(self.socket.as_fd(), &mut buf, RecvFlags::empty()) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other.context("the fork server went away")?,
            }
        };
        if n == 0 {
            bail!("the fork server went away");
        }
        fork::decode_reply(&buf[..n.min(buf.len())])
            .context("the fork server's answer is malformed")
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        // Between tests a server only waits for the next request: nothing
        // of a test is lost by stopping it.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
