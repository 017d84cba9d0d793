//! Nothing changed, nothing runs: the causes of reruns found on real
//! projects on the run after a full one, each with the case that made it.

use crate::support::Fixture;

#[test]
fn a_directory_run_as_a_program_is_a_dependency_that_holds() {
    let f = Fixture::new("stability");
    f.test_ok(&["-p", "scratch", "--test", "programs"]);
    let selected = f.selected(&["-p", "scratch", "--test", "programs"]);
    assert!(selected.is_empty(), "{selected:?}");

    // Where a directory was, a program now.
    std::fs::remove_dir_all(f.file("scratch/editor")).unwrap();
    f.write("scratch/editor", "#!/bin/sh\nexit 0\n");
    let selected = f.selected(&["-p", "scratch", "--test", "programs"]);
    assert_eq!(
        selected,
        [(
            "scratch::programs runs_a_directory_as_a_program".to_owned(),
            vec!["program changed: scratch/editor".to_owned()]
        )]
    );
}
