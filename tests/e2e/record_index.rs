//! The index of the records decides only that a record holds: a run with
//! nothing changed reads no record whole, and any change (a data file, a
//! function, a record rewritten, the index damaged, the state copied
//! elsewhere) is judged from the record itself, with its reasons.

use crate::support::{BASIC_ALL, Fixture};

/// The index of `binary`'s records in the fixture's state.
fn index_of(f: &Fixture, binary: &str) -> std::path::PathBuf {
    f.file(&format!(
        ".ekstazi/v{}/.index/{binary}",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ))
}

#[test]
fn an_index_entry_skips_only_what_its_record_would() {
    let f = Fixture::new("basic");
    f.test_ok(&[]);
    // The first analysis after the records were written reads them whole,
    // and indexes them; the next one decides from the index alone.
    assert!(f.selected(&[]).is_empty());
    assert!(index_of(&f, "beta%3A%3Afiles").is_file());
    assert!(f.selected(&[]).is_empty());
    assert!(f.test_ok(&[]).ran().is_empty());

    // A data file: its reader, for that reason.
    f.write("beta/data/a.txt", "other data\n");
    assert_eq!(
        f.selected(&[]),
        [(
            "beta::files reads_data".to_owned(),
            vec!["file changed: beta/data/a.txt".to_owned()]
        )]
    );
    f.test_ok(&[]);

    // A function: the record is read whole for its executed functions.
    f.edit("alpha/src/lib.rs", "x * 3", "x + x + x");
    assert_eq!(
        f.selected(&[]),
        [(
            "alpha tests::triples".to_owned(),
            vec!["function changed: alpha::triple".to_owned()]
        )]
    );
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());

    // A record rewritten (the test failed): the entry no longer stands
    // for it, and the record says why it runs.
    let failing = f.run_with(&["test", "--forceall"], &[("FIXTURE_FAIL", "1")]);
    assert_eq!(failing.code(), Some(101), "{failing:?}");
    // Twice, in the world it failed in (nothing it depends on changed):
    // the second analysis holds the failed record's index entry.
    for _ in 0..2 {
        let selected = f.selected_with(&[], &[("FIXTURE_FAIL", "1")]);
        assert!(
            selected
                .iter()
                .any(|(t, r)| t == "beta::files fails_on_request" && r == &["failed last time"]),
            "{selected:?}"
        );
    }
    f.test_ok(&[]);
    assert!(f.selected(&[]).is_empty());

    // A damaged index is no index.
    let index = index_of(&f, "beta%3A%3Afiles");
    let mut bytes = std::fs::read(&index).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&index, bytes).unwrap();
    assert!(f.selected(&[]).is_empty());
    f.write("beta/data/a.txt", "third data\n");
    assert_eq!(
        f.selected(&[])
            .into_iter()
            .map(|(t, _)| t)
            .collect::<Vec<_>>(),
        ["beta::files reads_data"]
    );

    // The state copied to another checkout: no entry stands for a copied
    // record file, and the records decide there.
    let elsewhere = f.checkout_elsewhere();
    let selected: Vec<String> = elsewhere
        .selected(&[])
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(selected, ["beta::files reads_data"]);
    assert_eq!(
        elsewhere.test_ok(&["--forceall"]).ran().len(),
        BASIC_ALL.len()
    );
}
