//! The fork server's messages, between the runner and the shim.
//!
//! The runner (`cargo-ekstazi`) encodes requests and reads replies; the
//! shim's fork server (`ekstazi-runtime`) does the reverse. The decoder
//! borrows from the buffer and never allocates: it runs in the server,
//! before the test binary's `main`.
//!
//! Over a `SOCK_SEQPACKET` socket, one message each:
//! - request (runner → server), with the test's output descriptor attached
//!   (`SCM_RIGHTS`): `b'R'`, the test's name (`u16` length, bytes), the
//!   number of variables (`u16`), each `NAME=VALUE` (`u16` length, bytes).
//!   The named variables replace the server's placeholders of the same name.
//! - reply (server → runner), [`REPLY_LEN`] bytes: a tag and an `i32`:
//!   [`STARTED`] with the test's pid, then [`ENDED`] with its wait status;
//!   or [`REFUSED`] with an `errno`, when no test was started.

/// The largest request the server reads; a larger one is never sent (the
/// runner starts that test the ordinary way).
pub const MAX_REQUEST: usize = 16 * 1024;
/// Every reply's length.
pub const REPLY_LEN: usize = 8;

/// The tag that starts every request: run one test.
pub const REQUEST: u8 = b'R';
/// The test process was forked: its pid (and process group).
pub const STARTED: u8 = b'P';
/// The test process ended: its wait status.
pub const ENDED: u8 = b'W';
/// Nothing was started: an `errno`.
pub const REFUSED: u8 = b'E';

/// The environment variable naming the server's end of the socket (its
/// descriptor number); its presence is what makes the shim serve.
pub const SERVE_FD_VAR: &[u8] = b"EKSTAZI_SERVE_FD";

/// A request as the server reads it.
pub struct Request<'a> {
    /// The test's name, which the forked child runs under `--exact`: never
    /// empty, without NULs.
    pub name: &'a [u8],
    vars: &'a [u8],
    count: u16,
}

impl<'a> Request<'a> {
    /// Reads a request; `None` for anything malformed (trailing bytes
    /// included), or a name or variable holding a NUL.
    pub fn decode(bytes: &'a [u8]) -> Option<Request<'a>> {
        let (&tag, rest) = bytes.split_first()?;
        if tag != REQUEST {
            return None;
        }
        let (name, rest) = field(rest)?;
        let (count, vars) = u16_at(rest)?;
        let request = Request { name, vars, count };
        let mut seen = 0u16;
        let mut rest = vars;
        while !rest.is_empty() {
            let (var, tail) = field(rest)?;
            if !var.contains(&b'=') {
                return None;
            }
            seen = seen.checked_add(1)?;
            rest = tail;
        }
        (seen == count && !name.is_empty() && !name.contains(&0)).then_some(request)
    }

    /// Each `NAME=VALUE`, in order.
    pub fn vars(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let mut rest = self.vars;
        let mut left = self.count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let (var, tail) = field(rest)?;
            rest = tail;
            Some(var)
        })
    }
}

/// A length-prefixed field without NULs, and what follows it.
fn field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = u16_at(bytes)?;
    let len = usize::from(len);
    if rest.len() < len || rest[..len].contains(&0) {
        return None;
    }
    Some(rest.split_at(len))
}

fn u16_at(bytes: &[u8]) -> Option<(u16, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<2>()?;
    Some((u16::from_le_bytes(*head), rest))
}

/// Writes a request, or `None` when it would not fit [`MAX_REQUEST`] or a
/// piece holds a NUL (the runner then starts the test the ordinary way).
#[allow(dead_code)] // the shim only reads requests
pub fn encode_request(name: &[u8], vars: &[Vec<u8>]) -> Option<Vec<u8>> {
    if name.is_empty() || vars.iter().any(|var| !var.contains(&b'=')) {
        return None;
    }
    let mut out = vec![REQUEST];
    put_field(&mut out, name)?;
    out.extend_from_slice(&u16::try_from(vars.len()).ok()?.to_le_bytes());
    for var in vars {
        put_field(&mut out, var)?;
    }
    (out.len() <= MAX_REQUEST).then_some(out)
}

/// Appends a field as [`field`] reads it; `None` for one too long, or
/// holding a NUL.
#[allow(dead_code)] // the shim only reads requests
fn put_field(out: &mut Vec<u8>, piece: &[u8]) -> Option<()> {
    let len = u16::try_from(piece.len()).ok()?;
    if piece.contains(&0) {
        return None;
    }
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(piece);
    Some(())
}

/// A reply's bytes.
pub fn encode_reply(tag: u8, value: i32) -> [u8; REPLY_LEN] {
    let mut out = [0u8; REPLY_LEN];
    out[0] = tag;
    out[4..].copy_from_slice(&value.to_le_bytes());
    out
}

/// A reply's tag and value; `None` unless it is exactly one reply.
#[allow(dead_code)] // the shim only writes replies
pub fn decode_reply(bytes: &[u8]) -> Option<(u8, i32)> {
    let bytes: &[u8; REPLY_LEN] = bytes.try_into().ok()?;
    let tag = bytes[0];
    [STARTED, ENDED, REFUSED].contains(&tag).then(|| {
        (
            tag,
            i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_as_written() {
        let vars = [
            b"TMPDIR=/tmp/t-1".to_vec(),
            b"EKSTAZI_TRACE_FILE=/x".to_vec(),
        ];
        let bytes = encode_request(b"tests::a", &vars).unwrap();
        let request = Request::decode(&bytes).unwrap();
        assert_eq!(request.name, b"tests::a");
        let read: Vec<&[u8]> = request.vars().collect();
        assert_eq!(read, [&b"TMPDIR=/tmp/t-1"[..], b"EKSTAZI_TRACE_FILE=/x"]);
    }

    #[test]
    fn a_malformed_request_is_refused_whole() {
        let bytes = encode_request(b"t", &[b"A=1".to_vec()]).unwrap();
        // Cut anywhere, or with a byte more, it is not a request.
        for cut in 0..bytes.len() {
            assert!(Request::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Request::decode(&longer).is_none());
        // A count that disagrees with the variables present.
        let mut miscounted = bytes.clone();
        miscounted[4] = 2;
        assert!(Request::decode(&miscounted).is_none());
        // A NUL in a name, or a variable without `=`, would not survive as
        // a C string or an environment entry.
        assert!(encode_request(b"a\0b", &[]).is_none());
        assert!(encode_request(b"a", &[b"NOEQUALS".to_vec()]).is_none());
        let mut nul = encode_request(b"ab", &[]).unwrap();
        nul[4] = 0;
        assert!(Request::decode(&nul).is_none());
        assert!(
            Request::decode(&[REQUEST, 0, 0, 0, 0]).is_none(),
            "empty name"
        );
    }

    #[test]
    fn a_request_too_large_for_the_server_is_not_written() {
        let long = vec![b'x'; MAX_REQUEST];
        assert!(encode_request(&long, &[]).is_none());
        assert!(encode_request(b"t", &[[b"V=".as_slice(), &long].concat()]).is_none());
    }

    #[test]
    fn replies_read_back_and_nothing_else_does() {
        for (tag, value) in [(STARTED, 4242), (ENDED, 101 << 8), (REFUSED, -1)] {
            assert_eq!(decode_reply(&encode_reply(tag, value)), Some((tag, value)));
        }
        assert_eq!(decode_reply(&encode_reply(b'?', 1)), None);
        assert_eq!(decode_reply(&encode_reply(STARTED, 1)[..7]), None);
    }
}
