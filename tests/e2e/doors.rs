//! Every door of the shim that "What is recorded"
//! (docs/reference/recorded.md) names and no other fixture opens, on the
//! `doors` fixture: for each, changing what its probe observed selects that
//! probe alone, for exactly the reason the docs list, and changing what it did not observe
//! selects nothing. One recorded fixture serves every door: each change is
//! undone before the next, and the records still hold after it.

use crate::support::Fixture;
use std::path::PathBuf;

/// The probes that reach another machine, and so run every time: left
/// out of the door checks with libtest's `--skip`, and checked on their own.
const SKIP_EXTERNAL: &[&str] = &["--", "--skip", "external_"];

type Selection = Vec<(String, Vec<String>)>;

fn probe(name: &str) -> String {
    format!("doors::probes {name}")
}

fn only(name: &str, reasons: &[&str]) -> Selection {
    vec![(
        probe(name),
        reasons.iter().map(|r| (*r).to_owned()).collect(),
    )]
}

/// The fixture, with the symbolic links its probes read (a fixture is
/// copied file by file, which would turn links into copies) and its `bin`
/// directory first on `PATH`, after a first run that recorded every probe
/// and a second that ran what the first could not vouch for.
fn recorded() -> Fixture {
    let f = Fixture::new("doors");
    std::fs::create_dir(f.file("links")).unwrap();
    for link in ["read", "readat", "real", "canon"] {
        point(&f, link, "../text/a.txt");
    }
    let path = format!(
        "{}:{}",
        f.file("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let f = f.with_env("PATH", &path);
    let first = f.test_ok(&[]);
    assert_eq!(first.ran().len(), 17, "{first:?}");
    // A file a probe renamed, linked or stamped after reading it changed
    // while the probe ran: on a first run nothing checksummed it before,
    // and the checksum after proves nothing.
    let unsettled = vec![
        (
            probe("hard_links_a_file"),
            vec!["file changed while the test ran: text/h.txt".to_owned()],
        ),
        (
            probe("renames_a_file_and_back"),
            vec!["file changed while the test ran: text/r.txt".to_owned()],
        ),
        (
            probe("touches_what_it_reads"),
            vec!["file changed while the test ran: text/t.txt".to_owned()],
        ),
    ];
    assert_eq!(f.selected(SKIP_EXTERNAL), unsettled);
    // From the second run on, each file's checksum is taken before the
    // probe starts: that is what it read.
    let second = f.test_ok(SKIP_EXTERNAL);
    assert_eq!(
        second.ran(),
        unsettled.into_iter().map(|(label, _)| label).collect(),
        "{second:?}"
    );
    f
}

/// Makes (or remakes) `links/<name>` point to `target`.
fn point(f: &Fixture, name: &str, target: &str) {
    let link = f.file(&format!("links/{name}"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Where the build put the fixture's own shared library, and how a reason
/// names it (the build script's output directory has a hash in its name).
fn plug_library(f: &Fixture) -> (PathBuf, String) {
    let target = f.file("target");
    let found: Vec<PathBuf> = walkdir::WalkDir::new(target.join("ekstazi/build"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "libplug.so" && e.path().parent().unwrap().ends_with("out"))
        .map(|e| e.path().to_path_buf())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let shown = format!(
        "$CARGO_TARGET_DIR/{}",
        found[0].strip_prefix(&target).unwrap().display()
    );
    (found[0].clone(), shown)
}

/// A program of the fixture in the instrumented build, as a reason names it.
fn built(f: &Fixture, name: &str) -> String {
    let target = f.file("target");
    let found: Vec<PathBuf> = walkdir::WalkDir::new(target.join("ekstazi/build"))
        .max_depth(3)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == name && e.path().parent().unwrap().ends_with("debug"))
        .map(|e| e.path().to_path_buf())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    format!(
        "$CARGO_TARGET_DIR/{}",
        found[0].strip_prefix(&target).unwrap().display()
    )
}

/// Applies `change`, expects `expected` (of the probes that are not
/// external), undoes it, and expects nothing again.
#[track_caller]
fn door(f: &Fixture, what: &str, change: impl FnOnce(), expected: Selection, undo: impl FnOnce()) {
    change();
    assert_eq!(f.selected(SKIP_EXTERNAL), expected, "{what}");
    undo();
    assert_eq!(f.selected(SKIP_EXTERNAL), vec![], "{what}, undone");
}

#[test]
fn each_door_selects_its_probe_alone_and_external_probes_always_run() {
    let f = recorded();
    each_door_selects_its_probe_alone(&f);
    probes_that_reach_another_machine_always_run(&f);
}

fn each_door_selects_its_probe_alone(f: &Fixture) {
    assert!(f.selected(SKIP_EXTERNAL).is_empty(), "nothing changed");
    door(
        f,
        "a file no probe read",
        || f.write("text/unread.txt", "other"),
        vec![],
        || (),
    );

    // rename / link: the source's content is what the test reads back
    // under the new name.
    door(
        f,
        "rename",
        || f.write("text/r.txt", "other"),
        only("renames_a_file_and_back", &["file changed: text/r.txt"]),
        || f.write("text/r.txt", "text r\n"),
    );
    door(
        f,
        "link",
        || f.write("text/h.txt", "other"),
        only("hard_links_a_file", &["file changed: text/h.txt"]),
        || f.write("text/h.txt", "text h\n"),
    );
    door(
        f,
        "a file read, then stamped",
        || f.write("text/t.txt", "other"),
        only("touches_what_it_reads", &["file changed: text/t.txt"]),
        || f.write("text/t.txt", "text t\n"),
    );

    // readlink / readlinkat: where a link points, not what is there.
    for link in ["read", "readat"] {
        door(
            f,
            link,
            || point(f, link, "../text/b.txt"),
            only(
                "reads_links",
                &[&format!("symbolic link changed: links/{link}")],
            ),
            || point(f, link, "../text/a.txt"),
        );
    }
    // realpath / canonicalize_file_name: the canonical path.
    for link in ["real", "canon"] {
        door(
            f,
            link,
            || point(f, link, "../text/b.txt"),
            only(
                "resolves_paths",
                &[&format!("resolved path changed: links/{link}")],
            ),
            || point(f, link, "../text/a.txt"),
        );
    }
    // Contrary: what the links point to was never read.
    door(
        f,
        "a link's pointee",
        || f.write("text/a.txt", "other"),
        vec![],
        || (),
    );

    // dlopen of a library the project builds.
    let (plug, library) = plug_library(f);
    door(
        f,
        "dlopen",
        || f.edit("c/plug.c", "return 2;", "return 3;"),
        only(
            "loads_a_project_library",
            &[&format!("library changed: {library}")],
        ),
        || f.edit("c/plug.c", "return 3;", "return 2;"),
    );
    // (The build script makes it only when its source changes.)
    let away = plug.with_extension("away");
    door(
        f,
        "dlopen, the library deleted",
        || std::fs::rename(&plug, &away).unwrap(),
        only(
            "loads_a_project_library",
            &[&format!("library deleted: {library}")],
        ),
        || std::fs::rename(&away, &plug).unwrap(),
    );

    // chdir: the directory's existence and kind, not its entries.
    door(
        f,
        "chdir",
        || {
            std::fs::rename(f.file("sub"), f.file("sub.away")).unwrap();
            f.write("sub", "a file now");
        },
        only("changes_directory", &["file type changed: sub"]),
        || {
            std::fs::remove_file(f.file("sub")).unwrap();
            std::fs::rename(f.file("sub.away"), f.file("sub")).unwrap();
        },
    );
    door(
        f,
        "an entry of the directory chdir entered",
        || f.write("sub/new.txt", ""),
        vec![],
        || std::fs::remove_file(f.file("sub/new.txt")).unwrap(),
    );

    // scandir: the entries, not their contents.
    door(
        f,
        "scandir",
        || f.write("scanned/y.txt", ""),
        only("scans_a_directory", &["directory listing changed: scanned"]),
        || std::fs::remove_file(f.file("scanned/y.txt")).unwrap(),
    );
    door(
        f,
        "scandir, the directory deleted",
        || std::fs::rename(f.file("scanned"), f.file("scanned.away")).unwrap(),
        only("scans_a_directory", &["directory deleted: scanned"]),
        || std::fs::rename(f.file("scanned.away"), f.file("scanned")).unwrap(),
    );
    door(
        f,
        "a scanned file's content",
        || f.write("scanned/x.txt", "other"),
        vec![],
        || (),
    );

    // A program: the file run, and (a script) the bytes its interpreter read.
    door(
        f,
        "a script changed",
        || f.edit("tool.sh", "echo tool", "echo other"),
        only(
            "runs_a_script",
            // In the order records keep dependencies: by target.
            &["file changed: tool.sh", "program changed: tool.sh"],
        ),
        || f.edit("tool.sh", "echo other", "echo tool"),
    );
    door(
        f,
        "a script deleted",
        || std::fs::rename(f.file("tool.sh"), f.file("tool.away")).unwrap(),
        only(
            "runs_a_script",
            &["file deleted: tool.sh", "program deleted: tool.sh"],
        ),
        || std::fs::rename(f.file("tool.away"), f.file("tool.sh")).unwrap(),
    );
    // The PATH candidates a search found missing.
    door(
        f,
        "a missing PATH candidate",
        || f.write("bin/doors-absent-tool", "#!/bin/sh\n"),
        only(
            "looks_for_a_missing_program",
            &["file created: bin/doors-absent-tool"],
        ),
        || std::fs::remove_file(f.file("bin/doors-absent-tool")).unwrap(),
    );
    door(
        f,
        "another file on PATH",
        || f.write("bin/other-tool", ""),
        vec![],
        || (),
    );

    // A helper killed before it exits (a documented blind spot): it reported
    // no functions, so the test depends on the whole program. An edit of a
    // function no run of it executed selects that test alone; an edit of
    // one the finished run executed selects both, each for its reason.
    let sleeper = built(f, "sleeper");
    let whole = format!("program changed: {sleeper}");
    door(
        f,
        "a helper killed before it exits",
        || f.edit("src/bin/sleeper.rs", "\"other\"", "\"another\""),
        only("kills_a_helper_before_it_exits", &[&whole]),
        || f.edit("src/bin/sleeper.rs", "\"another\"", "\"other\""),
    );
    let mut both = only("kills_a_helper_before_it_exits", &[&whole]);
    both.extend(only(
        "runs_a_helper_to_its_end",
        &[&format!("function changed: sleeper::report (in {sleeper})")],
    ));
    door(
        f,
        "a helper run to its end",
        || f.edit("src/bin/sleeper.rs", "\"awake\"", "\"{}\", \"awake\""),
        both,
        || f.edit("src/bin/sleeper.rs", "\"{}\", \"awake\"", "\"awake\""),
    );

    // getenv of an unset variable; and the shell that runs the script
    // inherits every variable, a new one too.
    let walked = "environment variables added or removed (the test walks every variable)";
    let mut set = only(
        "reads_an_unset_variable",
        &["environment variable set: DOORS_UNSET"],
    );
    set.extend(only("runs_a_script", &[walked]));
    assert_eq!(
        f.selected_with(SKIP_EXTERNAL, &[("DOORS_UNSET", "now set")]),
        set
    );
    assert_eq!(
        f.selected_with(SKIP_EXTERNAL, &[("DOORS_OTHER", "1")]),
        only("runs_a_script", &[walked])
    );

    // Nothing was run since the first run: every record still holds.
    let run = f.test_ok(SKIP_EXTERNAL);
    assert!(run.ran().is_empty(), "{run:?}");
}

fn probes_that_reach_another_machine_always_run(f: &Fixture) {
    let external: Selection = [
        (
            "external_resolves_a_host_name",
            "external: host name doors-probe.invalid",
        ),
        (
            "external_resolves_with_gethostbyname",
            "external: host name 192.0.2.8",
        ),
        ("external_sends_a_datagram", "external: 192.0.2.9:9"),
        ("external_sends_a_message", "external: 192.0.2.10:9"),
    ]
    .iter()
    .flat_map(|(name, reason)| only(name, &[reason]))
    .collect();
    assert_eq!(f.selected(&[]), external);
    // Selected on their local dependencies, they are skipped, and still
    // shown as external.
    assert_eq!(f.selected(&["--external", "select"]), vec![]);
    let list = f.list(&["--external", "select"]);
    let shown: std::collections::BTreeSet<String> = list["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["external"].as_bool().unwrap())
        .map(|t| probe(t["name"].as_str().unwrap()))
        .collect();
    let names: std::collections::BTreeSet<String> =
        external.iter().map(|(label, _)| label.clone()).collect();
    assert_eq!(shown, names);
    // And they do run, every time.
    for _ in 0..2 {
        let run = f.test_ok(&[]);
        assert_eq!(run.ran(), names, "{run:?}");
    }
}
