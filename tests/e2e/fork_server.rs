//! The fork server: a binary's tests are forked from one process that
//! loaded it, and each still runs alone, in a process started for it, and
//! is recorded exactly as if the runner had started it itself.

use crate::support::{Fixture, labels};

const ALL: &[&str] = &[
    "forked::fresh a_first",
    "forked::fresh b_second",
    "forked::fresh c_ignored",
];
const NAMES: [&str; 3] = ["a_first", "b_second", "c_ignored"];

/// Every test's record as `why --all` shows it, without the durations.
fn records(f: &Fixture) -> String {
    NAMES
        .iter()
        .map(|name| {
            let run = f.run(&["why", "--all", name]);
            assert_eq!(run.code(), Some(0), "{run:?}");
            run.stdout
                .lines()
                .filter(|line| !line.contains("passed in"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn tests_forked_from_a_server_run_alone_and_are_recorded_as_if_started_by_the_runner() {
    let f = Fixture::new("forked");
    let all = ["--forceall", "--", "--include-ignored"];
    // Each test checks its own name is its argument, its TMPDIR is its own
    // and empty, no other test ran in its process, and the server's
    // variable is gone.
    let forked = f.test_ok_with(&all, &[("EXPECT_FORKED", "1")]);
    assert_eq!(forked.ran(), labels(ALL), "{forked:?}");
    let spawned = f.test_ok_with(
        &["--no-fork-server", "--forceall", "--", "--include-ignored"],
        &[("EXPECT_FORKED", "0")],
    );
    assert_eq!(spawned.ran(), labels(ALL), "{spawned:?}");
    // The check can fail: asked to be forked, a test started by the runner
    // fails (and the setting in the file and the environment turn it off).
    f.write(".config/ekstazi.toml", "[run]\nfork-server = false\n");
    let refused = f.run_with(&["test", "--forceall"], &[("EXPECT_FORKED", "1")]);
    assert_eq!(refused.code(), Some(101), "{refused:?}");
    assert!(
        refused.stdout.contains("not forked from a server"),
        "{refused:?}"
    );
    // (The file's setting comes before the environment's.)
    std::fs::remove_file(f.file(".config/ekstazi.toml")).unwrap();
    let from_env = f.run_with(
        &["test", "--forceall"],
        &[("EXPECT_FORKED", "1"), ("EKSTAZI_FORK_SERVER", "0")],
    );
    assert_eq!(from_env.code(), Some(101), "{from_env:?}");

    // The records are the same either way.
    f.test_ok(&all);
    let by_server = records(&f);
    f.test_ok(&["--no-fork-server", "--forceall", "--", "--include-ignored"]);
    let by_runner = records(&f);
    assert_eq!(by_server, by_runner);
    assert!(by_server.contains("data.txt"), "{by_server}");
    assert!(by_server.contains("EXPECT_FORKED"), "{by_server}");

    // And they select as any record does.
    assert!(f.selected(&["--", "--include-ignored"]).is_empty());
    f.write("data.txt", "data, changed\n");
    let run = f.test_ok(&["--", "--include-ignored"]);
    assert_eq!(run.ran(), labels(ALL), "{run:?}");
}

#[test]
fn a_binary_that_starts_a_thread_before_the_shim_is_run_without_a_server() {
    // A library preloaded after the shim whose constructor starts a
    // thread: forking then would leave that thread behind, so the server
    // refuses, and the tests are started the ordinary way.
    let f = Fixture::new("forked");
    let source = f.tmp().join("threaded.c");
    std::fs::write(
        &source,
        "#include <pthread.h>\n#include <unistd.h>\n\
         static void *idle(void *arg) { (void)arg; for (;;) pause(); return 0; }\n\
         __attribute__((constructor)) static void start(void) {\n\
         pthread_t t; if (pthread_create(&t, 0, idle, 0) == 0) pthread_detach(t); }\n",
    )
    .unwrap();
    let library = f.tmp().join("libthreaded.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-pthread", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    let library = library.to_str().unwrap();
    let run = f.test_ok_with(
        &["--", "--include-ignored"],
        &[("LD_PRELOAD", library), ("EXPECT_FORKED", "0")],
    );
    assert_eq!(run.ran(), labels(ALL), "{run:?}");
    // Without it, the same tests are forked.
    let run = f.test_ok_with(&["--", "--include-ignored"], &[("EXPECT_FORKED", "1")]);
    assert_eq!(run.ran(), labels(ALL), "{run:?}");
}
