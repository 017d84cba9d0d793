//! System calls made outside libc (issue 40), on the `rawsys` fixture: a
//! test that reads a file through rustix's `linux_raw` backend depends on
//! it as one that reads through libc does (syscall user dispatch shows the
//! shim the call), and a test that sets io_uring up, whose file accesses
//! the shim cannot see, runs every time and says why.

use crate::support::{Fixture, labels};

const RAW_READER: &str = "rawsys::raw reads_through_raw_system_calls";
const NEIGHBOUR: &str = "rawsys::raw reads_nothing";
const IO_URING: &str = "rawsys::raw sets_up_io_uring";
const UNSEEN: &str = "always runs: it uses a channel the shim cannot see: io_uring";

#[test]
fn a_file_read_with_raw_system_calls_selects_its_reader_alone() {
    let f = Fixture::new("rawsys");
    let first = f.test_ok(&[]);
    assert_eq!(
        first.ran(),
        labels(&[RAW_READER, NEIGHBOUR, IO_URING]),
        "{first:?}"
    );
    // Nothing changed: only the test the shim cannot follow runs.
    let io_uring_only = vec![(IO_URING.to_owned(), vec![UNSEEN.to_owned()])];
    assert_eq!(f.selected(&[]), io_uring_only);
    // `why` names the channel, and the raw reader's file.
    let why = f.run(&["why", "sets_up_io_uring"]);
    assert!(
        why.stdout
            .contains("it uses a channel the shim cannot see: io_uring"),
        "{why:?}"
    );
    let why = f.run(&["why", "--all", "reads_through_raw_system_calls"]);
    assert!(why.stdout.contains("data/raw.txt"), "{why:?}");

    f.write("data/raw.txt", "other bytes\n");
    assert_eq!(
        f.selected(&[]),
        vec![
            (
                RAW_READER.to_owned(),
                vec!["file changed: data/raw.txt".to_owned()]
            ),
            (IO_URING.to_owned(), vec![UNSEEN.to_owned()]),
        ]
    );
    // The reader now fails (it asserts the old bytes): put them back, and
    // the record it had still holds.
    f.write("data/raw.txt", "raw bytes\n");
    assert_eq!(f.selected(&[]), io_uring_only);
    assert!(!f.selected(&[]).iter().any(|(label, _)| label == NEIGHBOUR));
}
