//! The files and variables glibc reads for itself: time zones, locales,
//! users and groups, and the name service.
//!
//! glibc opens these through its internal `__open_nocancel` and reads
//! `TZ`, `LANG` and the like through its internal `getenv`: neither goes
//! through the symbols the shim interposes, so a test that called
//! `localtime` depended on `/etc/localtime` and `TZ` unseen. The functions
//! that make those reads are exported, though, and interposed here: each
//! records, as the test's own reads, the variables it consults and the
//! files it would read for them — a file that is missing is recorded
//! absent, so that creating it reruns the test.
//!
//! - time zone (`tzset`, `localtime`, `localtime_r`, `mktime`, `timelocal`,
//!   `ctime`, `ctime_r`): `TZ`; unset, `/etc/localtime`; a path, that
//!   file; a name (or empty, `Universal`), `TZDIR` and the file of that name
//!   under it (`/usr/share/zoneinfo` by default);
//! - locale (`setlocale`, `newlocale`, for a name other than `C`/`POSIX`):
//!   `LOCPATH`, the locale archive and the list of locales installed as
//!   directories; for the empty name, `LC_ALL`, each requested category's
//!   `LC_*` and `LANG`;
//! - users and groups (`getpw*`, `getgr*`, `getgrouplist`, `initgroups`):
//!   `/etc/nsswitch.conf` and `/etc/passwd` or `/etc/group`;
//! - name service (`getaddrinfo` and `gethostbyname` through
//!   [`super::net`], `gethostbyname2`, the `_r` forms, `gethostbyaddr`,
//!   `getnameinfo`, `getservbyname`, `getservbyport`): `/etc/nsswitch.conf`,
//!   `/etc/host.conf`, `/etc/hosts`, `/etc/resolv.conf`, and `/etc/gai.conf`
//!   (address sorting) or `/etc/services` (service names). A numeric host
//!   is not looked up: only `gai.conf` then.
//!
//! What the name service's other sources hold (LDAP, `systemd-resolved`,
//! DNS answers) is not a file and stays unseen; a lookup of another
//! machine's name is external already. Everything here is written on the
//! caller's stack, without allocating.

use super::{env, observe};
use crate::environ::lookup;
use crate::path::EventBuf;
use crate::{real, trace};
use libc::{c_char, c_int, c_void, gid_t, size_t, socklen_t, time_t, uid_t};

/// Where glibc keeps zone files unless `TZDIR` says otherwise.
const ZONEINFO: &[u8] = b"/usr/share/zoneinfo";
/// The locale archive, and the directory of locales installed one by one.
const LOCALE_ARCHIVE: &[u8] = b"/usr/lib/locale/locale-archive";
const LOCALE_DIR: &[u8] = b"/usr/lib/locale";
const NSSWITCH: &[u8] = b"/etc/nsswitch.conf";

/// Records a read (`tag`: reading a file or listing a directory) of the
/// absolute path `parts` joined, or its absence when it is missing (a
/// read would have found nothing).
fn file(parts: &[&[u8]], tag: u8) {
    let mut path = [0u8; libc::PATH_MAX as usize];
    let mut len = 0;
    for part in parts {
        // One byte kept for the NUL.
        if len + part.len() >= path.len() {
            return trace::record_lost();
        }
        path[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    let missing = real::faccessat().is_some_and(|faccessat| {
        // SAFETY: `path` is NUL-terminated (the array was zeroed).
        let failed = unsafe { faccessat(libc::AT_FDCWD, path.as_ptr().cast(), libc::F_OK, 0) };
        failed != 0 && super::is_absence(super::errno())
    });
    let mut buf = EventBuf::empty();
    if !buf.push_bytes(&path[..len]) {
        return trace::record_lost();
    }
    trace::record(if missing { trace::MISSING } else { tag }, 0, &mut buf);
}

/// Records that `name` was read, with its value now; returns the value.
fn var(name: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: `lookup` reads `environ` as glibc's `getenv` does.
    let value = unsafe { lookup(name) };
    env::record(name, value);
    // SAFETY: a value found in `environ` is a C string, alive until the
    // program changes that variable.
    (!value.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes())
}

/// What glibc's `tzset` reads.
fn time_zone() {
    observe(|_| {
        let Some(tz) = var(b"TZ") else {
            return file(&[b"/etc/localtime"], trace::READ);
        };
        let tz = tz.strip_prefix(b":").unwrap_or(tz);
        let tz: &[u8] = if tz.is_empty() { b"Universal" } else { tz };
        if tz.starts_with(b"/") {
            return file(&[tz], trace::READ);
        }
        // A name is looked up under `TZDIR`; a POSIX rule (`UTC0`,
        // `EST5EDT`) is too, before glibc parses it.
        let dir = var(b"TZDIR").filter(|d| !d.is_empty()).unwrap_or(ZONEINFO);
        file(&[dir, b"/", tz], trace::READ);
    });
}

/// Every locale category but `LC_ALL`, by number (`<locale.h>`), and the
/// variable that names its locale.
const CATEGORIES: [(c_int, &[u8]); 12] = [
    (libc::LC_CTYPE, b"LC_CTYPE"),
    (libc::LC_NUMERIC, b"LC_NUMERIC"),
    (libc::LC_TIME, b"LC_TIME"),
    (libc::LC_COLLATE, b"LC_COLLATE"),
    (libc::LC_MONETARY, b"LC_MONETARY"),
    (libc::LC_MESSAGES, b"LC_MESSAGES"),
    (libc::LC_PAPER, b"LC_PAPER"),
    (libc::LC_NAME, b"LC_NAME"),
    (libc::LC_ADDRESS, b"LC_ADDRESS"),
    (libc::LC_TELEPHONE, b"LC_TELEPHONE"),
    (libc::LC_MEASUREMENT, b"LC_MEASUREMENT"),
    (libc::LC_IDENTIFICATION, b"LC_IDENTIFICATION"),
];

/// What loading the locale `name` for the categories `wanted` selects
/// reads.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn locale(name: *const c_char, wanted: impl Fn(c_int) -> bool) {
    if name.is_null() {
        return; // a query
    }
    // SAFETY: the caller passes a C string.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    if name == b"C" || name == b"POSIX" {
        return; // built in
    }
    observe(|_| {
        if name.is_empty() {
            var(b"LC_ALL");
            for (category, variable) in CATEGORIES {
                if wanted(category) {
                    var(variable);
                }
            }
            var(b"LANG");
        }
        var(b"LOCPATH");
        file(&[LOCALE_ARCHIVE], trace::READ);
        file(&[LOCALE_DIR], trace::LISTED);
    });
}

/// What a user or group lookup reads.
fn accounts(database: &'static [u8]) {
    observe(|_| {
        file(&[NSSWITCH], trace::READ);
        file(&[database], trace::READ);
    });
}

/// What a host name lookup reads; `node` null or numeric: nothing but the
/// sorting rules.
///
/// # Safety
/// `node` and `service` are null or NUL-terminated strings.
pub(super) unsafe fn name_service(node: *const c_char, service: *const c_char) {
    // SAFETY: forwarded from the caller.
    let looked_up = !node.is_null() && !unsafe { is_numeric_host(node) };
    // SAFETY: as above.
    let named_service = !service.is_null() && !unsafe { is_number(service) };
    observe(|_| {
        file(&[b"/etc/gai.conf"], trace::READ);
        if looked_up || named_service {
            file(&[NSSWITCH], trace::READ);
        }
        if looked_up {
            hosts_files();
        }
        if named_service {
            file(&[b"/etc/services"], trace::READ);
        }
    });
}

/// The files glibc's `files` and `dns` sources read for a host.
fn hosts_files() {
    file(&[b"/etc/host.conf"], trace::READ);
    file(&[b"/etc/hosts"], trace::READ);
    file(&[b"/etc/resolv.conf"], trace::READ);
}

/// What a host lookup by name or address reads.
fn hosts() {
    observe(|_| {
        file(&[NSSWITCH], trace::READ);
        hosts_files();
    });
}

/// What a service lookup reads.
fn services() {
    observe(|_| {
        file(&[NSSWITCH], trace::READ);
        file(&[b"/etc/services"], trace::READ);
    });
}

/// Whether `host` is an address literal, which glibc answers without a
/// lookup: an IPv6 address (no name has a colon) or digits and dots, as
/// `inet_aton` reads them. Hexadecimal forms count as names, which only
/// adds dependencies.
///
/// # Safety
/// `host` is a NUL-terminated string.
unsafe fn is_numeric_host(host: *const c_char) -> bool {
    // SAFETY: the caller passes a C string.
    let host = unsafe { std::ffi::CStr::from_ptr(host) }.to_bytes();
    !host.is_empty()
        && (host.contains(&b':') || host.iter().all(|b| b.is_ascii_digit() || *b == b'.'))
}

/// Whether `text` is a port number.
///
/// # Safety
/// `text` is a NUL-terminated string.
unsafe fn is_number(text: *const c_char) -> bool {
    // SAFETY: the caller passes a C string.
    let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_bytes();
    !text.is_empty() && text.iter().all(u8::is_ascii_digit)
}

/// Defines a hook that calls the real function, then records `$what`.
macro_rules! hook {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty, $failure:expr, $what:expr; )*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = real::$name() else {
                return super::unavailable($failure);
            };
            // SAFETY: the caller's contract is libc's.
            let result = unsafe { real($($arg),*) };
            #[allow(unused_unsafe)]
            // SAFETY: the arguments are the caller's, valid as libc needs.
            unsafe { $what };
            result
        }
    )*};
}

type Tm = c_void;
type Passwd = c_void;
type Group = c_void;
type Hostent = c_void;
type Servent = c_void;

hook! {
    tzset() -> (), (), time_zone();
    localtime(t: *const time_t) -> *mut Tm, std::ptr::null_mut(), time_zone();
    localtime_r(t: *const time_t, out: *mut Tm) -> *mut Tm, std::ptr::null_mut(), time_zone();
    mktime(tm: *mut Tm) -> time_t, -1, time_zone();
    timelocal(tm: *mut Tm) -> time_t, -1, time_zone();
    ctime(t: *const time_t) -> *mut c_char, std::ptr::null_mut(), time_zone();
    ctime_r(t: *const time_t, out: *mut c_char) -> *mut c_char, std::ptr::null_mut(), time_zone();

    setlocale(category: c_int, name: *const c_char) -> *mut c_char, std::ptr::null_mut(),
        locale(name, |c| category == libc::LC_ALL || c == category);
    newlocale(mask: c_int, name: *const c_char, base: libc::locale_t) -> libc::locale_t, std::ptr::null_mut(),
        locale(name, |c| mask & (1 << c) != 0);

    getpwnam(name: *const c_char) -> *mut Passwd, std::ptr::null_mut(), accounts(b"/etc/passwd");
    getpwuid(uid: uid_t) -> *mut Passwd, std::ptr::null_mut(), accounts(b"/etc/passwd");
    getpwnam_r(name: *const c_char, out: *mut Passwd, buf: *mut c_char, len: size_t, found: *mut *mut Passwd) -> c_int, libc::ENOSYS,
        accounts(b"/etc/passwd");
    getpwuid_r(uid: uid_t, out: *mut Passwd, buf: *mut c_char, len: size_t, found: *mut *mut Passwd) -> c_int, libc::ENOSYS,
        accounts(b"/etc/passwd");
    getpwent() -> *mut Passwd, std::ptr::null_mut(), accounts(b"/etc/passwd");
    getgrnam(name: *const c_char) -> *mut Group, std::ptr::null_mut(), accounts(b"/etc/group");
    getgrgid(gid: gid_t) -> *mut Group, std::ptr::null_mut(), accounts(b"/etc/group");
    getgrnam_r(name: *const c_char, out: *mut Group, buf: *mut c_char, len: size_t, found: *mut *mut Group) -> c_int, libc::ENOSYS,
        accounts(b"/etc/group");
    getgrgid_r(gid: gid_t, out: *mut Group, buf: *mut c_char, len: size_t, found: *mut *mut Group) -> c_int, libc::ENOSYS,
        accounts(b"/etc/group");
    getgrent() -> *mut Group, std::ptr::null_mut(), accounts(b"/etc/group");
    getgrouplist(user: *const c_char, group: gid_t, groups: *mut gid_t, count: *mut c_int) -> c_int, -1,
        accounts(b"/etc/group");
    initgroups(user: *const c_char, group: gid_t) -> c_int, -1, accounts(b"/etc/group");

    gethostbyname2(name: *const c_char, family: c_int) -> *mut Hostent, std::ptr::null_mut(),
        { super::net::host(name); name_service(name, std::ptr::null()) };
    gethostbyname_r(name: *const c_char, out: *mut Hostent, buf: *mut c_char, len: size_t, found: *mut *mut Hostent, err: *mut c_int) -> c_int, libc::ENOSYS,
        { super::net::host(name); name_service(name, std::ptr::null()) };
    gethostbyname2_r(name: *const c_char, family: c_int, out: *mut Hostent, buf: *mut c_char, len: size_t, found: *mut *mut Hostent, err: *mut c_int) -> c_int, libc::ENOSYS,
        { super::net::host(name); name_service(name, std::ptr::null()) };
    gethostbyaddr(addr: *const c_void, len: socklen_t, family: c_int) -> *mut Hostent, std::ptr::null_mut(), hosts();
    getnameinfo(addr: *const libc::sockaddr, addrlen: socklen_t, host: *mut c_char, hostlen: socklen_t, serv: *mut c_char, servlen: socklen_t, flags: c_int) -> c_int, libc::EAI_SYSTEM,
        {
            if flags & libc::NI_NUMERICHOST == 0 { hosts() }
            if flags & libc::NI_NUMERICSERV == 0 { services() }
        };
    getservbyname(name: *const c_char, proto: *const c_char) -> *mut Servent, std::ptr::null_mut(), services();
    getservbyname_r(name: *const c_char, proto: *const c_char, out: *mut Servent, buf: *mut c_char, len: size_t, found: *mut *mut Servent) -> c_int, libc::ENOSYS,
        services();
    getservbyport(port: c_int, proto: *const c_char) -> *mut Servent, std::ptr::null_mut(), services();
}
