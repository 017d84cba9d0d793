//! Function granularity: only the tests that executed changed code run,
//! including where coverage by source file is unsafe (constants, statics,
//! vtables, macros, generics, included files, C code).

use crate::support::{Fixture, assert_each_selected_for};
use std::collections::BTreeSet;

/// Runs the fixture's tests once so that every test has a record.
fn recorded() -> Fixture {
    let f = Fixture::new("functions");
    let first = f.test_ok(&[]);
    assert_eq!(first.ran().len(), 13, "{first:?}");
    assert!(
        f.selected(&[]).is_empty(),
        "nothing selected after a full run"
    );
    f
}

/// Edits a file, checks which tests are selected and that each names a
/// reason, then runs them so that the next step starts from a clean state.
fn expect_after_edit(
    f: &Fixture,
    file: &str,
    from: &str,
    to: &str,
    expected: &[&str],
) -> Vec<(String, Vec<String>)> {
    f.edit(file, from, to);
    let selected = f.selected(&[]);
    let names: BTreeSet<&str> = selected
        .iter()
        .map(|(label, _)| label.strip_prefix("funcs ").unwrap_or(label))
        .collect();
    let expected: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(
        names, expected,
        "after {file}: {from:?} -> {to:?}: {selected:?}"
    );
    assert!(selected.iter().all(|(_, reasons)| !reasons.is_empty()));
    let run = f.test_ok(&[]);
    assert_eq!(run.ran().len(), expected.len(), "{run:?}");
    assert!(f.selected(&[]).is_empty(), "records rewritten after {file}");
    selected
}

fn reasons_of<'a>(selected: &'a [(String, Vec<String>)], test: &str) -> &'a [String] {
    &selected
        .iter()
        .find(|(label, _)| label.ends_with(test))
        .unwrap_or_else(|| panic!("{test} not selected: {selected:?}"))
        .1
}

#[test]
fn only_tests_that_executed_the_changed_function_run() {
    let f = recorded();
    // A function no test executes here (but linked, because another test does).
    expect_after_edit(
        &f,
        "src/lib.rs",
        "    42\n",
        "    43\n",
        &["tests::t_uncovered"],
    );
    let selected = expect_after_edit(
        &f,
        "src/lib.rs",
        "    x + 1\n",
        "    x.wrapping_add(1)\n",
        &["tests::t_main_like"],
    );
    assert_eq!(
        reasons_of(&selected, "t_main_like"),
        ["function changed: funcs::write"]
    );
    // Renaming without changing behaviour: a different function runs.
    let selected = expect_after_edit(
        &f,
        "src/lib.rs",
        "pub fn read() -> u32 {\n    3\n}\n\npub fn write(x: u32) -> u32 {\n    x.wrapping_add(1)\n}\n\npub fn main_like() -> u32 {\n    write(read())",
        "pub fn read_value() -> u32 {\n    3\n}\n\npub fn write(x: u32) -> u32 {\n    x.wrapping_add(1)\n}\n\npub fn main_like() -> u32 {\n    write(read_value())",
        &["tests::t_main_like"],
    );
    assert!(
        reasons_of(&selected, "t_main_like").contains(&"function removed: funcs::read".to_owned()),
        "{selected:?}"
    );
    // Moving every function down: line numbers in panic locations and in
    // `tracing` events' callsites are not code.
    expect_after_edit(
        &f,
        "src/lib.rs",
        "/// Executed by every test",
        "// A comment that moves everything below it.\n\n/// Executed by every test",
        &[],
    );
    // What the event says is.
    f.edit(
        "src/lib.rs",
        "\"common: {input:?}\"",
        "\"common input: {input:?}\"",
    );
    let selected = f.selected(&[]);
    assert_eq!(selected.len(), 12, "{selected:?}");
    assert_each_selected_for(&selected, "function changed: funcs::common");
    assert_eq!(f.test_ok(&[]).ran().len(), 12);
    // Which type is compared is code: a type id is named by its type.
    let selected = expect_after_edit(
        &f,
        "src/lib.rs",
        "value.downcast_ref::<Marker>().is_some()",
        "value.downcast_ref::<Marker>().is_some() || value.downcast_ref::<u16>().is_some()",
        &["tests::t_downcast"],
    );
    assert!(
        reasons_of(&selected, "t_downcast")
            .contains(&"function changed: funcs::is_marker".to_owned()),
        "{selected:?}"
    );
    // A new version rehashes every symbol of the crate, and every `TypeId`
    // of its types (`t_downcast` compares one), and changes no code.
    expect_after_edit(
        &f,
        "Cargo.toml",
        "version = \"0.1.0\"",
        "version = \"0.2.0\"",
        &[],
    );
    // Records name functions, not builds: only the present build's
    // fingerprints are kept, as the next run's cache.
    let snapshots = std::fs::read_dir(f.file(&format!(
        ".ekstazi/v{}/.code",
        ekstazi_core::files::sealed::FORMAT_VERSION
    )))
    .unwrap()
    .filter(|e| {
        !e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with('.')
    })
    .count();
    assert_eq!(snapshots, 1, "one test binary, one build kept");
}

/// The coverage pass's module constructor only hands coverage to the
/// runtime: no test depends on it, so no build's table of uninstrumented
/// functions names it (what follows the PC table in the file leaked into
/// its fingerprint).
#[test]
fn the_coverage_constructor_is_no_dependency() {
    let f = recorded();
    let code = f.file(&format!(
        ".ekstazi/v{}/.code",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ));
    let store = ekstazi_core::storage::store::Store::new(&f.file(".ekstazi"));
    let mut snapshots = 0;
    for entry in std::fs::read_dir(code).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Some(id) = hex_id(&name) else { continue };
        let snapshot = store.load_snapshot(&id).expect("an intact snapshot");
        snapshots += 1;
        assert!(
            snapshot.names.len() + snapshot.other_names.len() > 100,
            "a real build's functions"
        );
        let constructors: Vec<String> = snapshot
            .names
            .iter()
            .chain(snapshot.other_names.iter())
            .filter(|n| n.starts_with("sancov."))
            .collect();
        assert!(constructors.is_empty(), "{constructors:?}");
    }
    assert_eq!(snapshots, 1);
}

fn hex_id(name: &str) -> Option<[u8; 32]> {
    if name.len() != 64 {
        return None;
    }
    let mut id = [0u8; 32];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

/// Once linked, an instrumented executable's coverage PC table needs no
/// relocating at load time: its load-time relocations are gone from the
/// file, the executables still run (the fixture's tests did), and coverage
/// still names functions (the edits above and below select by them).
#[test]
fn the_coverage_pc_table_is_not_relocated_at_load_time() {
    use object::read::elf::ElfFile64;
    use object::{Object, ObjectSection};
    let f = recorded();
    let mut checked = 0;
    for entry in walkdir::WalkDir::new(f.file("target/ekstazi/build")) {
        let entry = entry.unwrap();
        if !entry.file_type().is_file() || entry.path().extension().is_some() {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap();
        let Ok(file) = ElfFile64::<object::Endianness>::parse(&*bytes) else {
            continue;
        };
        let Some(table) = file.section_by_name("__sancov_pcs") else {
            continue;
        };
        let range = table.address()..table.address() + table.size();
        let relocations: Vec<u64> = file
            .dynamic_relocations()
            .map(|relocations| relocations.map(|(place, _)| place).collect())
            .unwrap_or_default();
        assert!(!relocations.is_empty(), "{}", entry.path().display());
        assert!(
            !relocations.iter().any(|place| range.contains(place)),
            "{}: the PC table is relocated at load time",
            entry.path().display()
        );
        checked += 1;
    }
    assert!(checked > 0, "no instrumented executable found");
}

#[test]
fn dependency_updates_select_by_the_code_they_change() {
    // Offline: every version the test bumps to is in the fixture's own
    // registry (the first run fetched what its lock file names).
    let f = recorded().with_env("CARGO_NET_OFFLINE", "true");
    // memmap2 0.9.4's sources are 0.9.3's: only the directory cargo unpacks
    // it into differs, and with it the file name of every panic location
    // in the functions `t_mapped` executes.
    f.edit("Cargo.toml", "\"=0.9.3\"", "\"=0.9.4\"");
    f.edit("Cargo.lock", "version = \"0.9.3\"", "version = \"0.9.4\"");
    expect_after_edit(
        &f,
        "Cargo.lock",
        "45fd3a57831bf88bc63f8cebc0cf956116276e97fef3966103e96416209f7c92",
        "fe751422e4a8caa417e13c3ea66452215d7d63e19e604f4980461212f3ae1322",
        &[],
    );
    // An update that changes code the test executes (0.9.8 passes a new
    // flag in `MmapInner::map`) selects it, for that code.
    f.edit("Cargo.toml", "\"=0.9.4\"", "\"=0.9.8\"");
    f.edit("Cargo.lock", "version = \"0.9.4\"", "version = \"0.9.8\"");
    let selected = expect_after_edit(
        &f,
        "Cargo.lock",
        "fe751422e4a8caa417e13c3ea66452215d7d63e19e604f4980461212f3ae1322",
        "843a98750cd611cc2965a8213b53b43e715f13c37a9e096c6408e69990961db7",
        &["tests::t_mapped"],
    );
    let reasons = reasons_of(&selected, "t_mapped");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("memmap2::os::MmapInner>::map")),
        "{selected:?}"
    );
}

#[test]
fn constants_statics_vtables_and_included_files_are_code() {
    let f = recorded();
    expect_after_edit(
        &f,
        "src/limits.rs",
        "LIMIT: u32 = 10",
        "LIMIT: u32 = 11",
        &["tests::t_limit_a"],
    );
    expect_after_edit(
        &f,
        "src/lib.rs",
        "[u8; 4] = [1, 2, 3, 4]",
        "[u8; 4] = [1, 9, 3, 4]",
        &["tests::t_table"],
    );
    expect_after_edit(&f, "src/msg.txt", "hello", "goodbye", &["tests::t_message"]);
    // A trait method gains an override used through `&dyn`: the vtable the
    // test builds now points elsewhere.
    expect_after_edit(
        &f,
        "src/lib.rs",
        "impl Fruit for Apple {}",
        "impl Fruit for Apple {\n    fn price(&self) -> u32 {\n        2\n    }\n}",
        &["tests::t_fruit"],
    );
}

#[test]
fn macros_generics_and_c_code_are_followed() {
    let f = recorded();
    expect_after_edit(&f, "src/lib.rs", "$x * 3", "$x * 4", &["tests::t_macro_a"]);
    expect_after_edit(
        &f,
        "src/lib.rs",
        "format!(\"<{value:?}>\")",
        "format!(\"[{value:?}]\")",
        &["tests::t_generic_a"],
    );
    // The crate stops keeping its own copy of an instance libtest also has:
    // libtest's code is unchanged, so no other test of the binary runs.
    expect_after_edit(
        &f,
        "src/lib.rs",
        "format!(\"{}!\", &word)",
        "format!(\"{word}!\")",
        &["tests::t_message"],
    );
    // C code carries no coverage: every test of the binary depends on it.
    let all = [
        "tests::t_c",
        "tests::t_downcast",
        "tests::t_fruit",
        "tests::t_generic_a",
        "tests::t_limit_a",
        "tests::t_limit_b",
        "tests::t_macro_a",
        "tests::t_macro_b",
        "tests::t_main_like",
        "tests::t_mapped",
        "tests::t_message",
        "tests::t_table",
        "tests::t_uncovered",
    ];
    let selected = expect_after_edit(
        &f,
        "c/add.c",
        "    return a + b;",
        "    int sum = a + b;\n    return sum;",
        &all,
    );
    assert_eq!(
        reasons_of(&selected, "t_c"),
        ["uninstrumented function changed: c_add"]
    );
}

/// The files of the instrumented build beside its executables that end in
/// `suffix`.
fn beside_executables(f: &Fixture, suffix: &str) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(f.file("target/ekstazi/build"))
        .into_iter()
        .flatten()
        .map(|e| e.into_path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect()
}

/// A linker map is read once per build of its executable: then only the
/// extents the fingerprints use are kept, and the map goes. A run that must
/// fingerprint the same build again (its snapshots gone, as in a state
/// restored without them) reads the kept extents and gets the fingerprints
/// the map gave: the same selection. A kept file not of this build (damaged
/// here) is not used: the build's tests run, each saying why.
#[test]
fn a_linker_map_gives_way_to_the_extents_it_held() {
    let f = recorded();
    assert!(
        beside_executables(&f, ".map").is_empty(),
        "{:?}",
        beside_executables(&f, ".map")
    );
    let kept = beside_executables(&f, ".extents");
    assert!(!kept.is_empty(), "no extents kept");
    let drop_snapshots = || {
        for entry in walkdir::WalkDir::new(f.file(".ekstazi"))
            .into_iter()
            .flatten()
        {
            if entry.file_name() == ".code" && entry.file_type().is_dir() {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
    };
    // A new build, fingerprinted with its map, which then goes.
    f.edit("src/limits.rs", "LIMIT: u32 = 10", "LIMIT: u32 = 11");
    let names = |selected: Vec<(String, Vec<String>)>| -> Vec<String> {
        selected.into_iter().map(|(label, _)| label).collect()
    };
    let with_map = names(f.selected(&[]));
    assert_eq!(with_map, ["funcs tests::t_limit_a"]);
    assert!(beside_executables(&f, ".map").is_empty());
    // The same build fingerprinted again, from the kept extents.
    drop_snapshots();
    assert_eq!(names(f.selected(&[])), with_map);
    // The kept file damaged: the build cannot be fingerprinted.
    for victim in beside_executables(&f, ".extents") {
        let bytes = std::fs::read(&victim).unwrap();
        std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
    }
    drop_snapshots();
    let selected = f.selected(&[]);
    assert!(selected.len() > with_map.len(), "{selected:?}");
    assert!(
        selected.iter().all(|(_, reasons)| !reasons.is_empty()),
        "{selected:?}"
    );
}

/// A test that starts a program through a `fork` of its own process (as
/// `Command` does with a `pre_exec` closure) depends on what its process
/// and that child executed, not on its whole test binary: the child writes
/// its coverage before its `exec` replaces it.
#[test]
fn a_forked_child_that_execs_keeps_its_coverage() {
    let f = Fixture::new("spawned");
    assert_eq!(f.test_ok(&[]).ran().len(), 2);
    let labels = |selected: Vec<(String, Vec<String>)>| -> Vec<String> {
        selected.into_iter().map(|(label, _)| label).collect()
    };
    // Code neither ran: only the test that executed it.
    f.edit(
        "src/lib.rs",
        "black_box(3)",
        "black_box(3) + 0 * black_box(4)",
    );
    assert_eq!(labels(f.selected(&[])), ["spawned::spawn no_spawn"]);
    f.test_ok(&[]);
    // Code only the child ran, before its `exec`.
    f.edit(
        "src/lib.rs",
        "black_box(2)",
        "black_box(2) + 0 * black_box(5)",
    );
    let selected = f.selected(&[]);
    assert_eq!(labels(selected.clone()), ["spawned::spawn pre_exec_spawn"]);
    assert!(
        selected[0].1.iter().any(|r| r.contains("in_child")),
        "{selected:?}"
    );
}
