//! What a test reached over sockets that may be another machine, as a
//! record keeps it ([`Peer`]). Whether a peer makes its test external is
//! decided at selection time, under the configuration's policy
//! (`capture::network::is_external`).

use crate::model::path::StoredPath;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;

/// Something a test reached over a socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Peer {
    /// An IPv4 or IPv6 address and port.
    Ip(SocketAddr),
    /// A Unix socket at a path.
    Unix(StoredPath),
    /// A Unix socket in the abstract name space (no file).
    Abstract(Vec<u8>),
    /// A host name the test resolved.
    Host(String),
    /// A socket of another family (`AF_*` number).
    Other(u16),
    /// A loopback (or unspecified) address whose port a process of the
    /// test's own tree bound during the test: a server the test started.
    Own(SocketAddr),
    /// A loopback (or unspecified) address whose port belongs to a service
    /// the workspace declared (`[[network.service]]`): the test depends on
    /// the service's declared inputs instead, and it is not external
    /// unless `loopback-is-external` says every loopback peer is.
    Service {
        /// The service's name, as declared.
        name: String,
        /// The address the test reached.
        addr: SocketAddr,
    },
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Ip(addr) => write!(f, "{addr}"),
            Peer::Unix(path) => write!(f, "unix socket {path}"),
            Peer::Abstract(name) => write!(f, "abstract socket @{}", String::from_utf8_lossy(name)),
            Peer::Host(name) => write!(f, "host name {name}"),
            Peer::Other(family) => write!(f, "socket family {family}"),
            Peer::Own(addr) => write!(f, "{addr} (bound by the test)"),
            Peer::Service { name, addr } => write!(f, "{addr} (service {name})"),
        }
    }
}
