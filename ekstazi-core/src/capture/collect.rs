//! From a test's trace to its dependency targets.
//!
//! Events are taken in the order the test made them. A path the test created
//! or removed belongs to the test from then on, and so does everything below
//! a directory it created: reading back its own output is not an input. What
//! was observed before that still is (the path existed; its parent was
//! missing). Events of the harness's main thread and ignored trees are left
//! out, and said so.

use crate::capture::environment::Environment;
use crate::capture::ignore::Ignore;
use crate::capture::network::{is_external, is_local_address, parse_sockaddr};
use crate::capture::trace::{Access, Event, Trace};
use crate::digests::checksum::{self, ListingWitness};
use crate::model::dep::{EnvName, FileKind, Sum, Target};
use crate::model::path::{Anchor, Anchors, normalize};
use crate::model::peer::Peer;
use crate::model::record::{Ignored, MAX_IGNORED, MAX_IGNORED_PER_REASON};
use crate::options::config::{NetworkPolicy, Service};
use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A target and, when the trace itself tells, its checksum (a lookup that
/// found nothing is `Absent` then and there, whatever the path holds later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// What the test observed.
    pub target: Target,
    /// Its checksum when the trace itself tells it; `None`: taken after
    /// the run, as the test saw the target.
    pub known: Option<Sum>,
}

/// What a trace amounts to.
#[derive(Debug, Default)]
pub struct Collected {
    /// In first-seen order, without repeats.
    pub observed: Vec<Observed>,
    /// Accesses that are not dependencies, with the reason (at most
    /// [`MAX_IGNORED`], each once).
    pub ignored: Vec<Ignored>,
    /// Reasons the test cannot be trusted to be skipped later.
    pub always: Vec<String>,
    /// Peers that are external under some policy, each once.
    pub network: Vec<Peer>,
    /// For each listing, what the test found in the directory (see
    /// [`ListingWitness`]), as the shim saw it when a process began to read
    /// it; `None` when its reads found different listings, one came after
    /// the test changed the directory's entries, or one was not witnessed.
    pub witnesses: HashMap<Target, Option<ListingWitness>>,
}

/// What collecting needs to know about the run.
pub struct Context<'a> {
    /// Where stored paths are anchored.
    pub anchors: &'a Anchors,
    /// What is not a dependency: ignore patterns and the defaults.
    pub ignore: &'a Ignore,
    /// The environment the test was given.
    pub env: &'a Environment,
    /// The local services the workspace declares.
    pub services: &'a [Service],
}

/// The strictest policy: a peer that is not external even under it never is.
const STRICTEST: NetworkPolicy = NetworkPolicy {
    loopback_is_external: true,
};

/// Turns a trace into dependency targets.
pub fn collect(trace: &Trace, cx: &Context<'_>) -> Collected {
    let mut state = State {
        cx,
        out: Collected::default(),
        owned: HashSet::new(),
        changed_dirs: HashSet::new(),
        seen: HashSet::new(),
        ignored_seen: HashSet::new(),
        ignored_per_reason: Vec::new(),
        bound_ports: HashSet::new(),
    };
    if !trace.complete {
        state.always("its trace is incomplete".to_owned());
    }
    if !trace.events.iter().any(|e| e.access == Access::Start) {
        state.always("the shim did not trace it".to_owned());
    }
    for event in &trace.events {
        state.event(event);
    }
    state.settle_loopback_peers();
    state.count_ignored_left_out();
    let mut out = state.out;
    drop_implied_kinds(&mut out.observed);
    out
}

struct State<'a> {
    cx: &'a Context<'a>,
    out: Collected,
    /// Paths the test created or removed: its own from then on.
    owned: HashSet<PathBuf>,
    /// Directories whose entries the test created or removed.
    changed_dirs: HashSet<PathBuf>,
    seen: HashSet<(Target, Option<Sum>)>,
    ignored_seen: HashSet<String>,
    /// Per reason, in the order first met, how many distinct accesses it
    /// ignored.
    ignored_per_reason: Vec<(String, usize)>,
    /// Local ports a process of the test bound (any protocol: the trace
    /// does not say which, and a port is rarely both).
    bound_ports: HashSet<u16>,
}

impl State<'_> {
    fn always(&mut self, why: String) {
        if !self.out.always.contains(&why) {
            self.out.always.push(why);
        }
    }

    fn ignore(&mut self, what: String, why: &str) {
        if !self.ignored_seen.insert(what.clone()) {
            return;
        }
        let count = match self.ignored_per_reason.iter_mut().find(|(w, _)| *w == why) {
            Some((_, count)) => count,
            None => {
                self.ignored_per_reason.push((why.to_owned(), 0));
                &mut self.ignored_per_reason.last_mut().expect("just pushed").1
            }
        };
        *count += 1;
        if *count <= MAX_IGNORED_PER_REASON && self.out.ignored.len() < MAX_IGNORED {
            self.out.ignored.push(Ignored {
                what,
                why: why.to_owned(),
            });
        }
    }

    /// One entry per reason that ignored more accesses than were kept.
    fn count_ignored_left_out(&mut self) {
        for (why, count) in std::mem::take(&mut self.ignored_per_reason) {
            let kept = self.out.ignored.iter().filter(|i| i.why == why).count();
            if count > kept && self.out.ignored.len() < MAX_IGNORED {
                self.out.ignored.push(Ignored {
                    what: format!("and {} more", count - kept),
                    why,
                });
            }
        }
    }

    fn observe(&mut self, target: Target, known: Option<Sum>) {
        if self.seen.insert((target.clone(), known.clone())) {
            self.out.observed.push(Observed { target, known });
        }
    }

    fn is_owned(&self, path: &Path) -> bool {
        path.ancestors().any(|p| self.owned.contains(p))
    }

    /// Why an access to a path is not a dependency, if it is not.
    fn why_ignored(&self, event: &Event, path: &Path) -> Option<String> {
        if event.by_harness() && event.access != Access::Library {
            Some("test harness".to_owned())
        } else if let Some(why) = self.cx.ignore.check(path) {
            Some(why.to_owned())
        } else if self.is_owned(path) {
            Some("created by the test".to_owned())
        } else {
            None
        }
    }

    fn event(&mut self, event: &Event) {
        match event.access {
            Access::Start => {}
            Access::Lost => self.always("it touched a path the shim could not name".to_owned()),
            // Whoever used it, harness or test: what comes through such a
            // channel is unknown, so no absence of events can be trusted.
            Access::Unseen => self.always(format!(
                "it uses a channel the shim cannot see: {}",
                String::from_utf8_lossy(event.payload())
            )),
            Access::Env => self.env(event),
            Access::Network => self.network(event),
            // Whoever reached the network, the run depended on it: even the
            // harness's events count here (libtest makes none).
            Access::HostLookup => {
                let name = String::from_utf8_lossy(event.payload()).into_owned();
                self.peer(Peer::Host(name));
            }
            _ => self.path_event(event),
        }
    }

    /// Keeps what the shim saw of a directory as a process began to read
    /// it, if it can stand for the directory as the test found it: not
    /// after the test created or removed entries of it, and the same at
    /// every read. A read without a witness (`scandir`, or one the shim
    /// could not witness) saw something unknown.
    fn witness(&mut self, target: &Target, path: &Path, answer: Option<&[u8]>) {
        let seen = answer
            .and_then(ListingWitness::from_bytes)
            .filter(|_| !self.changed_dirs.contains(path));
        self.out
            .witnesses
            .entry(target.clone())
            .and_modify(|known| {
                if *known != seen {
                    *known = None;
                }
            })
            .or_insert(seen);
    }

    fn env(&mut self, event: &Event) {
        let (name, seen) = crate::capture::environment::parse_event(event.payload());
        let shown = format!("${}", String::from_utf8_lossy(name));
        if event.by_harness() {
            return self.ignore(shown, "test harness");
        }
        if let Some(why) = self.cx.ignore.check_env(name) {
            return self.ignore(shown, why);
        }
        let given = self.cx.env.given(name);
        // A value too long to carry is taken to be the given one: if the
        // test set it itself, a change of the given value reruns it for
        // nothing, which is safe.
        if event.option() || seen == given {
            let name = EnvName(name.to_vec());
            let sum = self.cx.env.sum(&name);
            self.observe(Target::Env(name), Some(sum));
        } else {
            self.ignore(shown, "set by the test");
        }
    }

    fn network(&mut self, event: &Event) {
        let anchors = self.cx.anchors;
        let Some(peer) = parse_sockaddr(event.payload(), |p| anchors.store(&normalize(p))) else {
            return;
        };
        if event.option() {
            // Bound by the test: a Unix socket file it made is its own, and
            // so is a local port.
            match &peer {
                Peer::Unix(path) => {
                    if let Some(path) = anchors.resolve(path) {
                        self.owned.insert(path);
                    }
                }
                Peer::Ip(addr) if addr.port() != 0 => {
                    self.bound_ports.insert(addr.port());
                }
                _ => {}
            }
            return;
        }
        if let Peer::Unix(path) = &peer
            && anchors.resolve(path).is_some_and(|p| self.is_owned(&p))
        {
            return;
        }
        self.peer(peer);
    }

    /// Once every bind is known (a server may bind after its client first
    /// tried to connect): a local peer whose port the test bound is its
    /// own; one on a declared service's port is that service, whose inputs
    /// become dependencies; any other stays an address, external.
    fn settle_loopback_peers(&mut self) {
        let peers = std::mem::take(&mut self.out.network);
        for peer in peers {
            let peer = match peer {
                Peer::Ip(addr) if is_local_address(addr.ip()) => {
                    let service = self
                        .cx
                        .services
                        .iter()
                        .find(|s| s.ports.contains(&addr.port()));
                    if self.bound_ports.contains(&addr.port()) {
                        Peer::Own(addr)
                    } else if let Some(service) = service {
                        self.service_inputs(service);
                        Peer::Service {
                            name: service.name.clone(),
                            addr,
                        }
                    } else {
                        Peer::Ip(addr)
                    }
                }
                other => other,
            };
            if !self.out.network.contains(&peer) {
                self.out.network.push(peer);
            }
        }
    }

    /// A declared service's inputs as dependencies: each file's content,
    /// each directory's listing and every file below it; a missing input's
    /// absence.
    fn service_inputs(&mut self, service: &Service) {
        let anchors = self.cx.anchors;
        for input in &service.inputs {
            let walk = ignore::WalkBuilder::new(input)
                .standard_filters(false)
                .sort_by_file_path(|a, b| a.cmp(b))
                .build();
            let mut found = false;
            for entry in walk {
                let Ok(entry) = entry else {
                    continue;
                };
                found = true;
                let stored = anchors.store(&normalize(entry.path()));
                match entry.file_type() {
                    Some(kind) if kind.is_dir() => self.observe(Target::Listing(stored), None),
                    _ => self.observe(Target::Content(stored), None),
                }
            }
            if !found {
                let path = anchors.store(&normalize(input));
                self.observe(Target::Kind { path, follow: true }, Some(Sum::Absent));
            }
        }
    }

    fn peer(&mut self, peer: Peer) {
        if is_external(&peer, &STRICTEST) && !self.out.network.contains(&peer) {
            self.out.network.push(peer);
        }
    }

    fn path_event(&mut self, event: &Event) {
        let anchors = self.cx.anchors;
        let (raw, answer) = match event.access {
            Access::Link | Access::Resolve => event.path_and_answer(),
            Access::List if event.option() => event.path_and_answer(),
            _ => (event.path.clone(), None),
        };
        let path = normalize(&raw);
        if matches!(event.access, Access::Created | Access::Deleted)
            && let Some(parent) = path.parent()
        {
            self.changed_dirs.insert(parent.to_owned());
        }
        if let Some(why) = self.why_ignored(event, &path) {
            return self.ignore(anchors.store(&path).to_string(), &why);
        }
        let stored = anchors.store(&path);
        let (target, known) = match event.access {
            Access::Created | Access::Deleted => {
                self.owned.insert(path);
                return;
            }
            Access::Read => (Target::Content(stored), None),
            Access::Exec => (Target::Program(stored), None),
            Access::List => {
                let target = Target::Listing(stored);
                // Only a witnessed listing (`FLAG_OPTION`) carries an answer.
                self.witness(&target, &path, answer);
                (target, None)
            }
            Access::Library => {
                if stored.anchor() == Anchor::Root && !self.cx.ignore.system_libraries {
                    return self.ignore(stored.to_string(), "system library");
                }
                (Target::Library(stored), None)
            }
            Access::Link => {
                let known = answer
                    .filter(|_| !event.option())
                    .map(|target| checksum::link_target(target, anchors));
                (Target::Link(stored), known)
            }
            Access::Resolve => {
                let known = answer.map(|resolved| {
                    checksum::resolved_path(
                        &normalize(Path::new(std::ffi::OsStr::from_bytes(resolved))),
                        anchors,
                    )
                });
                (Target::Resolved(stored), known)
            }
            Access::Untraceable => {
                let why = if event.option() {
                    "a set-user-ID program, or one with file capabilities, that the shim is not loaded into"
                } else if event.flags & crate::capture::trace::FLAG_FOREIGN != 0 {
                    "a program for another ELF class or dynamic loader, which the shim cannot be loaded into"
                } else {
                    "a statically linked program the shim cannot see into"
                };
                return self.always(format!("it runs {stored}, {why}"));
            }
            Access::Missing => (
                Target::Kind {
                    path: stored,
                    follow: !event.nofollow(),
                },
                Some(Sum::Absent),
            ),
            Access::Exists | Access::Modified => (
                Target::Kind {
                    path: stored,
                    follow: !event.nofollow(),
                },
                event.kind().map(Sum::Kind),
            ),
            Access::Lost
            | Access::Start
            | Access::Env
            | Access::Network
            | Access::HostLookup
            | Access::Unseen => {
                unreachable!("handled in State::event")
            }
        };
        self.observe(target, known);
    }
}

/// A file's content checksum already says that it exists and is a regular
/// file, so a plain existence lookup of the same path adds nothing.
fn drop_implied_kinds(observed: &mut Vec<Observed>) {
    let read: HashSet<_> = observed
        .iter()
        .filter_map(|o| match &o.target {
            Target::Content(path) => Some(path.clone()),
            _ => None,
        })
        .collect();
    observed.retain(|o| match (&o.target, &o.known) {
        (Target::Kind { path, follow: true }, None | Some(Sum::Kind(FileKind::File))) => {
            !read.contains(path)
        }
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::trace::{FLAG_HARNESS, FLAG_OPTION};
    use std::os::unix::ffi::OsStringExt;

    fn trace(events: &[(Access, u8, &str)]) -> Trace {
        Trace {
            events: [(Access::Start, FLAG_HARNESS, "")]
                .iter()
                .chain(events)
                .map(|(access, flags, path)| Event {
                    access: *access,
                    flags: *flags,
                    path: PathBuf::from(path),
                })
                .collect(),
            coverage: vec![],
            complete: true,
        }
    }

    fn anchors() -> Anchors {
        Anchors::new(Path::new("/ws"), Path::new("/ws/target"), None)
    }

    fn environment(vars: &[(&str, &str)]) -> Environment {
        Environment::new(
            vars.iter().map(|(k, v)| (k.into(), v.into())),
            &anchors(),
            None,
            Path::new("/ws/target/ekstazi"),
        )
    }

    fn collect_with(t: &Trace, env: &Environment) -> Collected {
        let anchors = anchors();
        let ignore = Ignore::defaults();
        collect(
            t,
            &Context {
                anchors: &anchors,
                ignore: &ignore,
                env,
                services: &[],
            },
        )
    }

    fn run(events: &[(Access, u8, &str)]) -> Collected {
        collect_with(&trace(events), &environment(&[]))
    }

    fn names(c: &Collected) -> Vec<String> {
        c.observed
            .iter()
            .map(|o| {
                let kind = match (&o.target, &o.known) {
                    (Target::Content(_), _) => "read",
                    (Target::Listing(_), _) => "list",
                    (Target::Env(_), _) => "env",
                    (Target::Library(_), _) => "library",
                    (Target::Link(_), _) => "link",
                    (Target::Resolved(_), _) => "resolved",
                    (_, Some(Sum::Absent)) => "absent",
                    _ => "exists",
                };
                format!("{kind} {}", o.target)
            })
            .collect()
    }

    fn why(c: &Collected) -> Vec<String> {
        c.ignored
            .iter()
            .map(|i| format!("{}: {}", i.what, i.why))
            .collect()
    }

    fn witnessed(path: &str, entries: &[&str]) -> (Access, u8, PathBuf) {
        let mut seen = ListingWitness::default();
        let mut bytes = Vec::new();
        for name in entries {
            seen.add(name.as_bytes(), b'f');
        }
        for part in [path.as_bytes(), b"\0"] {
            bytes.extend_from_slice(part);
        }
        bytes.extend_from_slice(&seen.to_bytes());
        (
            Access::List,
            FLAG_OPTION,
            PathBuf::from(std::ffi::OsString::from_vec(bytes)),
        )
    }

    fn run_raw(events: Vec<(Access, u8, PathBuf)>) -> Collected {
        let mut t = trace(&[]);
        t.events
            .extend(events.into_iter().map(|(access, flags, path)| Event {
                access,
                flags,
                path,
            }));
        collect_with(&t, &environment(&[]))
    }

    #[test]
    fn a_witnessed_listing_counts_only_before_the_test_changes_the_directory() {
        let listing = Target::Listing(anchors().store(Path::new("/ws/scratch")));
        let plain = (Access::List, 0, PathBuf::from("/ws/scratch"));
        let made = (Access::Created, 0, PathBuf::from("/ws/scratch/new.txt"));
        let found = |c: &Collected| c.witnesses.get(&listing).copied();
        let c = run_raw(vec![witnessed("/ws/scratch", &["a"])]);
        assert!(matches!(found(&c), Some(Some(_))), "{c:?}");
        assert_eq!(names(&c), ["list scratch"]);
        // Read again unchanged: still one listing.
        let c = run_raw(vec![
            witnessed("/ws/scratch", &["a"]),
            witnessed("/ws/scratch", &["a"]),
        ]);
        assert!(matches!(found(&c), Some(Some(_))));
        // Two different listings, a listing after the test made an entry,
        // or a read the shim could not witness: what it found is unknown.
        for events in [
            vec![
                witnessed("/ws/scratch", &["a"]),
                witnessed("/ws/scratch", &["a", "b"]),
            ],
            vec![made.clone(), witnessed("/ws/scratch", &["a", "new.txt"])],
            vec![witnessed("/ws/scratch", &["a"]), plain],
        ] {
            assert_eq!(found(&run_raw(events.clone())), Some(None), "{events:?}");
        }
        // Changing it after reading it is the test's own business.
        let c = run_raw(vec![witnessed("/ws/scratch", &["a"]), made]);
        assert!(matches!(found(&c), Some(Some(_))));
    }

    #[test]
    fn reads_lookups_and_absences_become_targets() {
        let c = run(&[
            (Access::Read, 0, "/ws/data/a.txt"),
            (Access::Missing, 0, "/ws/./somefile.txt"),
            (Access::Exists, 0, "/ws/data"),
            (Access::Exists, 0, "/ws/data/a.txt"),
            (Access::Read, 0, "/ws/data/a.txt"),
        ]);
        assert_eq!(
            names(&c),
            ["read data/a.txt", "absent somefile.txt", "exists data"]
        );
        assert!(c.always.is_empty());
    }

    #[test]
    fn the_tests_own_files_are_not_inputs() {
        let c = run(&[
            (Access::Missing, 0, "/ws/out.txt"),
            (Access::Created, 0, "/ws/out.txt"),
            (Access::Read, 0, "/ws/out.txt"),
            (Access::Created, 0, "/tmp/.tmpX"),
            (Access::Read, 0, "/tmp/.tmpX/inner/f"),
            (Access::List, 0, "/tmp/.tmpX"),
            (Access::Read, 0, "/ws/pre.txt"),
            (Access::Exists, 2, "/ws/pre.txt"),
            (Access::Deleted, 0, "/ws/pre.txt"),
            (Access::Read, 0, "/ws/pre.txt"),
        ]);
        assert_eq!(
            names(&c),
            ["absent out.txt", "read pre.txt", "exists pre.txt"]
        );
        assert_eq!(
            why(&c),
            [
                "out.txt: created by the test",
                "/tmp/.tmpX/inner/f: created by the test",
                "/tmp/.tmpX: created by the test",
                "pre.txt: created by the test"
            ]
        );
    }

    #[test]
    fn harness_and_kernel_accesses_are_ignored_and_reported() {
        let c = run(&[
            (Access::Read, FLAG_HARNESS, "/lib/terminfo/x/xterm"),
            (Access::Env, FLAG_HARNESS, "TERM=xterm"),
            (Access::Read, 0, "/proc/self/cgroup"),
        ]);
        assert!(c.observed.is_empty());
        assert_eq!(
            why(&c),
            [
                "/lib/terminfo/x/xterm: test harness",
                "$TERM: test harness",
                "/proc/self/cgroup: kernel interface"
            ]
        );
    }

    #[test]
    fn listings_are_dependencies_unless_the_test_made_the_directory() {
        let c = run(&[
            (Access::List, 0, "/ws/data"),
            (Access::Created, 0, "/ws/scratch"),
            (Access::List, 0, "/ws/scratch"),
        ]);
        assert_eq!(names(&c), ["list data"]);
        assert_eq!(
            c.observed[0].known, None,
            "checksummed as the test saw it, later"
        );
    }

    #[test]
    fn variables_count_when_the_test_saw_the_given_value() {
        let env = environment(&[("MODE", "fast"), ("HOME", "/root")]);
        let c = collect_with(
            &trace(&[
                (Access::Env, 0, "MODE=fast"),
                (Access::Env, 0, "UNSET_ONE"),
                (Access::Env, 0, "HOME=/elsewhere"),
                (Access::Env, 0, "EKSTAZI_TRACE_FILE=/tmp/t"),
                (Access::Env, FLAG_OPTION, "MODE"),
            ]),
            &env,
        );
        assert_eq!(names(&c), ["env $MODE", "env $UNSET_ONE"]);
        assert_eq!(
            c.observed[0].known,
            Some(env.sum(&EnvName(b"MODE".to_vec())))
        );
        assert_eq!(c.observed[1].known, Some(Sum::Absent));
        assert_eq!(
            why(&c),
            [
                "$HOME: set by the test",
                "$EKSTAZI_TRACE_FILE: cargo-ekstazi's own variable"
            ]
        );
    }

    #[test]
    fn links_and_resolved_paths_carry_what_the_test_saw() {
        let c = run(&[
            (Access::Link, 0, "/ws/l\0target"),
            (Access::Link, 0, "/ws/m\0/ws/data"),
            (Access::Link, FLAG_OPTION, "/ws/long\0cut"),
            (Access::Resolve, 0, "/ws/./x\0/ws/y"),
        ]);
        assert_eq!(names(&c), ["link l", "link m", "link long", "resolved x"]);
        let a = anchors();
        assert_eq!(
            c.observed[0].known,
            Some(checksum::link_target(b"target", &a))
        );
        assert_eq!(
            c.observed[1].known,
            Some(checksum::link_target(b"/ws/data", &a))
        );
        assert_eq!(c.observed[2].known, None, "cut short: checksummed later");
        assert_eq!(
            c.observed[3].known,
            Some(checksum::resolved_path(Path::new("/ws/y"), &a))
        );
    }

    #[test]
    fn project_libraries_count_and_system_ones_do_not() {
        let c = run(&[
            (
                Access::Library,
                FLAG_HARNESS,
                "/ws/target/debug/libnative.so",
            ),
            (Access::Library, 0, "/lib/x86_64-linux-gnu/libc.so.6"),
        ]);
        assert_eq!(names(&c), ["library $CARGO_TARGET_DIR/debug/libnative.so"]);
        assert_eq!(why(&c), ["/lib/x86_64-linux-gnu/libc.so.6: system library"]);
    }

    #[test]
    fn untraceable_programs_make_the_test_always_run() {
        let c = run(&[
            (Access::Untraceable, 0, "/ws/target/debug/static-helper"),
            (Access::Untraceable, FLAG_OPTION, "/usr/bin/sudo"),
            (
                Access::Untraceable,
                crate::capture::trace::FLAG_FOREIGN,
                "/opt/musl/tool",
            ),
        ]);
        assert_eq!(
            c.always,
            [
                "it runs $CARGO_TARGET_DIR/debug/static-helper, a statically linked program the shim cannot see into",
                "it runs /usr/bin/sudo, a set-user-ID program, or one with file capabilities, that the shim is not loaded into",
                "it runs /opt/musl/tool, a program for another ELF class or dynamic loader, which the shim cannot be loaded into"
            ]
        );
    }

    #[test]
    fn unseen_channels_make_the_test_always_run_with_the_reason() {
        let c = run(&[
            (Access::Unseen, 0, "io_uring"),
            (Access::Unseen, 0, "system call 303 outside libc"),
        ]);
        assert_eq!(
            c.always,
            [
                "it uses a channel the shim cannot see: io_uring",
                "it uses a channel the shim cannot see: system call 303 outside libc"
            ]
        );
    }

    fn sockaddr_v4(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = 2u16.to_ne_bytes().to_vec();
        b.extend_from_slice(&port.to_be_bytes());
        b.extend_from_slice(&ip);
        b.extend_from_slice(&[0; 8]);
        b
    }

    fn unix(path: &str) -> Vec<u8> {
        let mut b = 1u16.to_ne_bytes().to_vec();
        b.extend_from_slice(path.as_bytes());
        b
    }

    #[test]
    fn peers_are_kept_when_they_can_be_external() {
        let local = sockaddr_v4([127, 0, 0, 1], 8080);
        let remote = sockaddr_v4([10, 1, 2, 3], 443);
        let events: Vec<(Access, u8, Vec<u8>)> = vec![
            (Access::Start, 0, vec![]),
            (Access::Network, 0, local),
            (Access::Network, 0, remote.clone()),
            (Access::Network, 0, remote),
            (Access::Network, FLAG_OPTION, unix("/tmp/own.sock")),
            (Access::Network, 0, unix("/tmp/own.sock")),
            (Access::Network, 0, unix("/ws/target/s.sock")),
            (Access::Network, 0, unix("/run/daemon.sock")),
            (Access::HostLookup, 0, b"localhost".to_vec()),
        ];
        let t = raw_trace(events);
        let c = collect_with(&t, &environment(&[]));
        let peers: Vec<String> = c.network.iter().map(ToString::to_string).collect();
        assert_eq!(
            peers,
            [
                "127.0.0.1:8080",
                "10.1.2.3:443",
                "unix socket /run/daemon.sock",
                "host name localhost"
            ]
        );
    }

    fn raw_trace(events: Vec<(Access, u8, Vec<u8>)>) -> Trace {
        Trace {
            events: events
                .into_iter()
                .map(|(access, flags, bytes)| Event {
                    access,
                    flags,
                    path: PathBuf::from(std::ffi::OsString::from_vec(bytes)),
                })
                .collect(),
            coverage: vec![],
            complete: true,
        }
    }

    #[test]
    fn a_loopback_port_is_the_tests_own_a_declared_service_or_external() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("migrations")).unwrap();
        std::fs::write(dir.path().join("migrations/1.sql"), "create table t;").unwrap();
        let t = raw_trace(vec![
            (Access::Start, 0, vec![]),
            // The client's first try comes before its server's bind.
            (Access::Network, 0, sockaddr_v4([127, 0, 0, 1], 5000)),
            (
                Access::Network,
                FLAG_OPTION,
                sockaddr_v4([0, 0, 0, 0], 5000),
            ),
            (Access::Network, 0, sockaddr_v4([127, 0, 0, 1], 5432)),
            (Access::Network, 0, sockaddr_v4([127, 0, 0, 1], 6379)),
        ]);
        let services = [Service {
            name: "db".to_owned(),
            ports: vec![5432],
            inputs: vec![dir.path().join("migrations"), dir.path().join("seed.sql")],
        }];
        let anchors = Anchors::new(dir.path(), &dir.path().join("target"), None);
        let ignore = Ignore::defaults();
        let env = environment(&[]);
        let c = collect(
            &t,
            &Context {
                anchors: &anchors,
                ignore: &ignore,
                env: &env,
                services: &services,
            },
        );
        let peers: Vec<String> = c.network.iter().map(ToString::to_string).collect();
        assert_eq!(
            peers,
            [
                "127.0.0.1:5000 (bound by the test)",
                "127.0.0.1:5432 (service db)",
                "127.0.0.1:6379"
            ]
        );
        let inputs: Vec<(String, Option<Sum>)> = c
            .observed
            .iter()
            .map(|o| {
                let kind = match &o.target {
                    Target::Listing(_) => "listing",
                    Target::Content(_) => "content",
                    Target::Kind { .. } => "kind",
                    _ => "other",
                };
                (
                    format!("{kind} {}", o.target.path().unwrap()),
                    o.known.clone(),
                )
            })
            .collect();
        assert_eq!(
            inputs,
            [
                ("listing migrations".to_owned(), None),
                ("content migrations/1.sql".to_owned(), None),
                ("kind seed.sql".to_owned(), Some(Sum::Absent)),
            ]
        );
    }

    #[test]
    fn untraceable_tests_are_flagged() {
        let mut t = trace(&[(Access::Lost, 0, "")]);
        let env = environment(&[]);
        assert_eq!(collect_with(&t, &env).always.len(), 1);
        t.complete = false;
        assert_eq!(collect_with(&t, &env).always.len(), 2);
    }

    #[test]
    fn a_trace_is_trusted_only_with_the_shims_start() {
        let read = Event {
            access: Access::Read,
            flags: 0,
            path: PathBuf::from("/ws/data/a.txt"),
        };
        let without_start = Trace {
            events: vec![read],
            coverage: vec![],
            complete: true,
        };
        assert_eq!(
            collect_with(&without_start, &environment(&[])).always,
            ["the shim did not trace it"]
        );
        assert_eq!(
            run(&[]).always,
            Vec::<String>::new(),
            "a test that touched nothing, traced"
        );
    }

    #[test]
    fn a_path_looked_at_without_following_links_is_recorded_so() {
        use crate::capture::trace::FLAG_NOFOLLOW;
        let c = run(&[
            (Access::Missing, FLAG_NOFOLLOW, "/ws/gone-link"),
            (Access::Missing, 0, "/ws/gone"),
            (Access::Exists, FLAG_NOFOLLOW, "/ws/link"),
            (Access::Exists, 0, "/ws/file"),
        ]);
        let follows: Vec<(String, bool)> = c
            .observed
            .iter()
            .filter_map(|o| match &o.target {
                Target::Kind { path, follow } => Some((path.to_string(), *follow)),
                _ => None,
            })
            .collect();
        assert_eq!(
            follows,
            [
                ("gone-link".to_owned(), false),
                ("gone".to_owned(), true),
                ("link".to_owned(), false),
                ("file".to_owned(), true),
            ]
        );
    }

    #[test]
    fn ignored_accesses_are_kept_up_to_their_bound_per_reason_and_the_rest_counted() {
        let paths: Vec<String> = (0..MAX_IGNORED + 5)
            .map(|i| format!("/proc/self/task/{i}"))
            .collect();
        let events: Vec<(Access, u8, &str)> = paths
            .iter()
            .map(|p| (Access::Read, 0, p.as_str()))
            .collect();
        let c = run(&events);
        assert_eq!(c.ignored.len(), MAX_IGNORED_PER_REASON + 1);
        assert_eq!(c.ignored[0].what, "/proc/self/task/0");
        let more = c.ignored.last().unwrap();
        assert_eq!(
            (more.what.as_str(), more.why.as_str()),
            (
                format!("and {} more", MAX_IGNORED + 5 - MAX_IGNORED_PER_REASON).as_str(),
                c.ignored[0].why.as_str()
            )
        );
        // Other reasons keep their own.
        let mixed = run(&[
            (Access::Read, 0, "/proc/self/status"),
            (Access::Read, 0, "/dev/null"),
        ]);
        assert_eq!(mixed.ignored.len(), 2);
        assert_ne!(mixed.ignored[0].why, mixed.ignored[1].why);
        let twice = run(&[
            (Access::Read, 0, "/proc/self/status"),
            (Access::Read, 0, "/proc/self/status"),
        ]);
        assert_eq!(twice.ignored.len(), 1, "each once");
    }

    #[test]
    fn a_trace_without_the_shim_is_untrusted() {
        let empty = Trace {
            complete: true,
            ..Trace::default()
        };
        assert_eq!(
            collect_with(&empty, &environment(&[])).always,
            ["the shim did not trace it"]
        );
    }
}
