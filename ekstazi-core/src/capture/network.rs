//! Network peers, and the rule that makes a test *external*.
//!
//! A test that talks to another machine depends on something no checksum
//! covers, so it is *external*: by default it always runs. The shim reports
//! the raw socket addresses a test connects or sends to (and those it binds
//! itself) and the host names it looks up; [`parse_sockaddr`] reads them and
//! [`is_external`] decides, under the [`NetworkPolicy`] of the workspace's
//! configuration. Peers are kept in the record and judged at selection time,
//! so a change of policy applies to existing records at once.
//!
//! A loopback address is no proof of a local, deterministic peer: CI starts
//! databases and caches on `127.0.0.1`, and their state is no file the test
//! read. So a loopback port is the test's own ([`Peer::Own`]) only when a
//! process of the test's tree bound it during the test; any other loopback
//! peer is external, unless the workspace declares the service behind the
//! port ([`crate::options::config::Service`]): then the peer is [`Peer::Service`], and the test
//! depends on the files the user named as that service's state instead.

use crate::model::path::{Anchor, StoredPath};
use crate::model::peer::Peer;
use crate::options::config::NetworkPolicy;
use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether an address reaches this machine: loopback, or the unspecified
/// address (which Linux connects to the local host).
pub fn is_local_address(ip: IpAddr) -> bool {
    let ip = canonical_ip(ip);
    ip.is_loopback() || ip.is_unspecified()
}

/// Whether reaching `peer` makes a test external.
///
/// Local: a loopback port the test's own tree bound, a declared service's
/// port (both unless the policy says otherwise), a `localhost` lookup (a
/// lookup alone reaches nothing), and Unix sockets inside the workspace or
/// target directory. Everything else — another address, a loopback port
/// nothing of the test bound, a Unix socket elsewhere (a system daemon), an
/// abstract socket, a host name that is not `localhost`, another family —
/// is external. Netlink talks to the kernel and is local.
pub fn is_external(peer: &Peer, policy: &NetworkPolicy) -> bool {
    match peer {
        Peer::Ip(_) => true,
        Peer::Own(_) | Peer::Service { .. } => policy.loopback_is_external,
        Peer::Unix(path) => !matches!(path.anchor(), Anchor::Workspace | Anchor::Target),
        Peer::Abstract(_) => true,
        Peer::Host(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let loopback = name == "localhost"
                || name.ends_with(".localhost")
                || name
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| canonical_ip(ip).is_loopback());
            if loopback {
                policy.loopback_is_external
            } else {
                !name.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
            }
        }
        Peer::Other(family) => *family != AF_NETLINK,
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:127.0.0.1`) as the IPv4
/// address it is.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const AF_NETLINK: u16 = 16;

/// The address in a `struct sockaddr` as the shim copied it (native byte
/// order for the family, network order for port and address). A Unix path
/// is absolute as the shim resolved it; `store` anchors it. `None`: too
/// short to be an address of its family, or `AF_UNSPEC`.
pub fn parse_sockaddr(bytes: &[u8], store: impl FnOnce(&Path) -> StoredPath) -> Option<Peer> {
    let family = u16::from_ne_bytes(bytes.get(..2)?.try_into().ok()?);
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    match family {
        0 => None,
        AF_INET => {
            let b = bytes.get(..8)?;
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(Peer::Ip(SocketAddr::new(IpAddr::V4(ip), port(b))))
        }
        AF_INET6 => {
            let b = bytes.get(..24)?;
            let octets: [u8; 16] = b[8..24].try_into().ok()?;
            Some(Peer::Ip(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(b),
            )))
        }
        AF_UNIX => {
            let path = &bytes[2..];
            match path.first() {
                None => None,
                Some(0) => Some(Peer::Abstract(path[1..].to_vec())),
                Some(_) => {
                    let end = memchr::memchr(0, path).unwrap_or(path.len());
                    Some(Peer::Unix(store(Path::new(OsStr::from_bytes(
                        &path[..end],
                    )))))
                }
            }
        }
        other => Some(Peer::Other(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::path::Anchors;

    const DEFAULT: NetworkPolicy = NetworkPolicy {
        loopback_is_external: false,
    };
    const STRICT: NetworkPolicy = NetworkPolicy {
        loopback_is_external: true,
    };

    fn ip(s: &str) -> Peer {
        Peer::Ip(s.parse().unwrap())
    }

    fn anchors() -> Anchors {
        Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None)
    }

    #[test]
    fn an_address_is_external_unless_the_test_bound_it_or_it_is_declared() {
        for any in ["127.0.0.1:5432", "[::1]:6379", "0.0.0.0:80", "10.0.0.1:80"] {
            assert!(is_external(&ip(any), &DEFAULT), "{any}");
        }
        let own = Peer::Own("127.0.0.1:5000".parse().unwrap());
        let service = Peer::Service {
            name: "db".to_owned(),
            addr: "127.0.0.1:5432".parse().unwrap(),
        };
        for local in [&own, &service] {
            assert!(!is_external(local, &DEFAULT), "{local}");
            assert!(is_external(local, &STRICT), "{local}");
        }
    }

    #[test]
    fn local_addresses() {
        for local in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_local_address(local.parse().unwrap()), "{local}");
        }
        for remote in [
            "10.0.0.1",
            "128.0.0.1",
            "::ffff:8.8.8.8",
            "fe80::1",
            "2001:db8::1",
        ] {
            assert!(!is_local_address(remote.parse().unwrap()), "{remote}");
        }
    }

    #[test]
    fn unix_sockets_and_other_families() {
        let a = anchors();
        let unix = |p: &str| Peer::Unix(a.store(Path::new(p)));
        assert!(
            !is_external(&unix("/ws/sock"), &STRICT),
            "inside the workspace"
        );
        assert!(!is_external(&unix("/ws/target/tmp/s"), &STRICT));
        assert!(
            is_external(&unix("/run/docker.sock"), &DEFAULT),
            "a system daemon"
        );
        assert!(is_external(&Peer::Abstract(b"x".to_vec()), &DEFAULT));
        assert!(!is_external(&Peer::Other(AF_NETLINK), &DEFAULT));
        assert!(is_external(&Peer::Other(40), &DEFAULT), "vsock");
    }

    #[test]
    fn host_names() {
        let host = |h: &str| Peer::Host(h.to_owned());
        assert!(!is_external(&host("localhost"), &DEFAULT));
        assert!(!is_external(&host("LocalHost."), &DEFAULT));
        assert!(!is_external(&host("api.localhost"), &DEFAULT));
        assert!(!is_external(&host("127.0.0.1"), &DEFAULT));
        assert!(!is_external(&host("::1"), &DEFAULT));
        assert!(is_external(&host("localhost"), &STRICT));
        assert!(is_external(&host("example.com"), &DEFAULT));
        assert!(is_external(&host("localhost.example.com"), &DEFAULT));
        assert!(is_external(&host("10.1.2.3"), &DEFAULT));
    }

    #[test]
    fn raw_addresses_parse() {
        let a = anchors();
        let store = |p: &Path| a.store(p);
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&AF_INET.to_ne_bytes());
        v4[2..4].copy_from_slice(&8080u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(parse_sockaddr(&v4, store), Some(ip("127.0.0.1:8080")));
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        v6[2..4].copy_from_slice(&443u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(parse_sockaddr(&v6, store), Some(ip("[::1]:443")));
        let mut unix = AF_UNIX.to_ne_bytes().to_vec();
        unix.extend_from_slice(b"/ws/s\0garbage");
        assert_eq!(
            parse_sockaddr(&unix, store),
            Some(Peer::Unix(a.store(Path::new("/ws/s"))))
        );
        let mut abstract_ = AF_UNIX.to_ne_bytes().to_vec();
        abstract_.extend_from_slice(b"\0name");
        assert_eq!(
            parse_sockaddr(&abstract_, store),
            Some(Peer::Abstract(b"name".to_vec()))
        );
        assert_eq!(parse_sockaddr(&v4[..5], store), None, "too short");
        assert_eq!(parse_sockaddr(&[0, 0, 1, 2], store), None, "AF_UNSPEC");
        assert_eq!(parse_sockaddr(&[], store), None);
    }
}
