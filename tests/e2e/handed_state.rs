//! A state directory handed to the tool as it is, not through `import` or
//! `merge-state`: a restored CI cache, a copied checkout. Whatever its
//! entries are, nothing outside it is written or deleted through it, no
//! other workspace's process is stopped, and no test is wrongly skipped.

use crate::support::Fixture;
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// The labels of the tests a run would select, with no variable set.
fn selected_labels(f: &Fixture) -> Vec<String> {
    let env: [(&str, &str); 0] = [];
    f.selected_with(&[], &env)
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

/// The files of the state's directory `dir` named by their content (all
/// but `pointer`, the one naming the newest).
fn named_by_content(f: &Fixture, dir: &str, pointer: &str) -> Vec<PathBuf> {
    std::fs::read_dir(records_dir(f).join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != pointer))
        .collect()
}

/// Adds a test `another` before `test` in `tests/<binary>.rs`: a new build
/// of the binary, in which only the new test is selected.
fn add_a_test_before(f: &Fixture, binary: &str, test: &str) {
    f.edit(
        &format!("tests/{binary}.rs"),
        &format!("#[test]\nfn {test}"),
        &format!("#[test]\nfn another() {{}}\n\n#[test]\nfn {test}"),
    );
    assert_eq!(selected_labels(f), [format!("verdicts::{binary} another")]);
}

fn records_dir(f: &Fixture) -> PathBuf {
    f.file(&format!(
        ".ekstazi/v{}",
        ekstazi_core::files::sealed::FORMAT_VERSION
    ))
}

/// A directory of the user's, beside the checkout, that no run may change.
struct Canary {
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Canary {
    fn new() -> Canary {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("precious.txt"), "the user's").unwrap();
        std::fs::write(path.join("notes"), "more of the user's").unwrap();
        std::fs::create_dir(path.join("sub")).unwrap();
        std::fs::write(path.join("sub/deep"), "deeper").unwrap();
        Canary {
            _dir: dir,
            dir: path,
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("precious.txt")
    }

    /// Every file below it, with its content.
    fn contents(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        walkdir::WalkDir::new(&self.dir)
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| e.file_type().is_file())
            .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
            .collect()
    }
}

fn plant_link(at: &Path, to: &Path) {
    match std::fs::symlink_metadata(at) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(at).unwrap(),
        Ok(_) => std::fs::remove_file(at).unwrap(),
        Err(_) => {}
    }
    symlink(to, at).unwrap();
}

#[test]
fn links_planted_in_the_state_are_removed_never_followed() {
    let f = Fixture::new("basic").in_git();
    f.test_ok(&[]);
    let canary = Canary::new();
    let before = canary.contents();
    let records = records_dir(&f);
    // A binary's record directory: the sweep of stale records would delete
    // every file of the directory the link points to.
    let beta = records.join("beta%3A%3Afiles");
    assert!(beta.is_dir(), "{beta:?}");
    plant_link(&beta, &canary.dir);
    // The history's packs: pruning removes what no index names.
    plant_link(&records.join(".history/packs"), &canary.dir);
    // Files the run appends to, creates or truncates.
    let state = f.file(".ekstazi");
    for name in ["runs.log", ".gitignore", "lock"] {
        plant_link(&state.join(name), &canary.file());
    }
    let run = f.test_ok(&[]);
    assert_eq!(canary.contents(), before, "{run:?}");
    // The tests whose records were behind the link have none: they run.
    let ran = run.ran();
    assert!(ran.contains("beta::files reads_data"), "{run:?}");
    assert!(ran.iter().all(|t| t.starts_with("beta::files")), "{run:?}");
    assert!(
        run.stderr.contains("a link there is never followed"),
        "{run:?}"
    );
    for name in ["runs.log", ".gitignore", "lock"] {
        assert!(
            std::fs::symlink_metadata(state.join(name))
                .unwrap()
                .is_file(),
            "{name}"
        );
    }
    assert!(f.selected(&[]).is_empty(), "{:?}", f.selected(&[]));

    // The verdict-first run's files: its log and failures list.
    for name in ["recording.log", "recording.failed"] {
        plant_link(&state.join(name), &canary.file());
    }
    f.edit("beta/data/a.txt", "", "changed ");
    f.test_ok(&["--verdict-first"]);
    f.wait_for_background_recording();
    assert_eq!(canary.contents(), before);
    assert!(f.selected(&[]).is_empty(), "{:?}", f.selected(&[]));
}

/// Seeded, so that a failure can be replayed: `EKSTAZI_E2E_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: enough to pick paths; no crate needed for that.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random links, FIFOs and device nodes laid over paths of a recorded
/// state directory; after each round's run, nothing outside the state has
/// changed, and the test a change affects ran.
#[test]
fn random_links_fifos_and_devices_over_the_state_touch_nothing_outside() {
    let seed: u64 = std::env::var("EKSTAZI_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x05ee_d0f5_7a7e);
    let mut rng = Rng(seed | 1);
    let f = Fixture::new("basic").in_git();
    f.test_ok(&[]);
    f.test_ok(&[]);
    let canary = Canary::new();
    let before = canary.contents();
    let state = f.file(".ekstazi");
    for round in 0..5 {
        let paths: Vec<PathBuf> = walkdir::WalkDir::new(&state)
            .min_depth(1)
            .into_iter()
            .map(|e| e.unwrap().path().to_path_buf())
            .collect();
        let mut planted = Vec::new();
        for _ in 0..6 {
            let at = paths[rng.below(paths.len())].clone();
            if std::fs::symlink_metadata(&at).is_err() {
                continue; // under a directory planted over already
            }
            match rng.below(4) {
                0 => plant_link(&at, &canary.dir),
                1 => plant_link(&at, &canary.file()),
                2 => {
                    plant_link(&at, Path::new("/nonexistent"));
                    std::fs::remove_file(&at).unwrap();
                    let fifo = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
                    // SAFETY: a NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
                }
                _ => {
                    plant_link(&at, Path::new("/nonexistent"));
                    std::fs::remove_file(&at).unwrap();
                    let node = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
                    // /dev/null's numbers: harmless if opened. Only root
                    // may make a device node; a link stands in otherwise.
                    // SAFETY: a NUL-terminated path.
                    let made = unsafe {
                        libc::mknod(node.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3))
                    };
                    if made != 0 {
                        symlink(canary.file(), &at).unwrap();
                    }
                }
            }
            planted.push(at);
        }
        // A change that only `reads_data` sees: it must run, whatever the
        // state says.
        f.write("beta/data/a.txt", &format!("round {round}\n"));
        let run = f.run(&["test"]);
        assert_eq!(
            run.code(),
            Some(0),
            "seed {seed}, round {round}, planted {planted:?}: {run:?}"
        );
        assert!(
            run.ran().contains("beta::files reads_data"),
            "seed {seed}, round {round}, planted {planted:?}: {run:?}"
        );
        assert_eq!(
            canary.contents(),
            before,
            "seed {seed}, round {round}, planted {planted:?}"
        );
        // What the run rebuilt holds: nothing more to run.
        assert!(f.selected(&[]).is_empty(), "seed {seed}, round {round}");
    }
}

#[test]
fn a_recording_id_naming_another_process_is_not_stopped() {
    let f = Fixture::new("verdicts");
    f.test_ok(&[]);
    // Another workspace's recording, as a copied state directory would
    // name it: a live process whose program is called cargo-ekstazi.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("cargo-ekstazi");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut other = std::process::Command::new(&fake)
        .arg("60")
        .process_group(0)
        .spawn()
        .unwrap();
    std::fs::write(f.file(".ekstazi/recording.pid"), other.id().to_string()).unwrap();
    f.test_ok(&[]);
    let still = other.try_wait().unwrap();
    let _ = other.kill();
    let _ = other.wait();
    assert!(still.is_none(), "another workspace's process was stopped");
}

use std::os::unix::process::CommandExt as _;

#[test]
fn a_snapshot_copied_under_the_new_builds_id_is_refused_with_the_key() {
    let keyed = [("EKSTAZI_SEAL_KEY", "the CI's secret")];
    let f = Fixture::new("verdicts");
    f.test_ok_with(&[], &keyed);
    let code = records_dir(&f).join(".code");
    let snapshots = || -> BTreeMap<PathBuf, Vec<u8>> {
        std::fs::read_dir(&code)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect()
    };
    // Snapshots are kept compressed.
    let has = |bytes: &[u8], needle: &[u8]| {
        let plain = zstd::decode_all(bytes).expect("a compressed snapshot");
        plain.windows(needle.len()).any(|w| w == needle)
    };
    let old = snapshots();
    // The integration test binary's: it names the test.
    let (_, old_bytes) = old
        .iter()
        .find(|(_, bytes)| has(bytes, b"multiplies"))
        .expect("a snapshot of the test binary");
    // Break `multiplies`, build (the new build's snapshot is written under
    // its id), then put the old build's sealed snapshot in its place.
    f.edit("src/lib.rs", "a * b", "a + b");
    assert!(!f.selected_with(&[], &keyed).is_empty());
    let new = snapshots();
    let replaced: Vec<&PathBuf> = new
        .iter()
        .filter(|(path, bytes)| !old.contains_key(*path) && has(bytes, b"multiplies"))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(replaced.len(), 1, "{new:?}");
    std::fs::write(replaced[0], old_bytes).unwrap();

    let selected: Vec<String> = f
        .selected_with(&[], &keyed)
        .into_iter()
        .map(|(label, _)| label)
        .collect();
    assert!(
        selected.contains(&"verdicts::verdicts multiplies".to_owned()),
        "{selected:?}"
    );
    let run = f.run_with(&["test"], &keyed);
    assert_eq!(run.code(), Some(101), "{run:?}");
    assert!(
        run.failed().contains("verdicts::verdicts multiplies"),
        "{run:?}"
    );
}

#[test]
fn the_workspace_path_can_be_made_a_dependency_of_every_test() {
    let f = Fixture::new("basic");
    // A test that puts its package's path unquoted into a shell command:
    // it passes where the path has no space, and fails where it has one.
    f.write(
        "beta/tests/shell.rs",
        "#[test]\nfn lists_its_manifest() {\n    let status = std::process::Command::new(\"sh\")\n        .arg(\"-c\")\n        .arg(format!(\"test -f {}/Cargo.toml\", env!(\"CARGO_MANIFEST_DIR\")))\n        .status()\n        .unwrap();\n    assert!(status.success());\n}\n",
    );
    f.write(".config/ekstazi.toml", "[select]\nworkspace-path = true\n");
    // The tool refuses a target directory whose path has a space (the
    // shim's `LD_PRELOAD` entry could not be carried): one outside.
    let target = tempfile::tempdir().unwrap();
    let target_dir = target.path().to_str().unwrap();
    let args = ["--target-dir", target_dir];
    f.test_ok(&args);
    assert!(f.selected(&args).is_empty());
    let moved = f.moved_to("a checkout with a space");
    let selected = moved.selected(&args);
    assert!(!selected.is_empty());
    assert!(
        selected
            .iter()
            .all(|(_, reasons)| reasons.iter().any(|r| r.contains("config changed"))),
        "{selected:?}"
    );
    let run = moved.run(&["test", "--target-dir", target_dir]);
    assert!(
        run.failed().contains("beta::shell lists_its_manifest"),
        "{run:?}"
    );
}

#[test]
fn a_records_base_missing_or_forged_makes_its_test_run() {
    let f = Fixture::new("verdicts");
    // A test that executes enough functions for its record to keep them
    // as a set over a base (a few are kept as they are).
    let functions: String = (0..24)
        .map(|i| format!("#[inline(never)]\nfn f{i}() -> u32 {{ std::hint::black_box({i}) }}\n"))
        .collect();
    let sum = (0..24).map(|i| format!("f{i}()")).collect::<Vec<_>>();
    f.write(
        "tests/many.rs",
        &format!(
            "{functions}\n#[test]\nfn calls_many() {{\n    assert_eq!({}, 276);\n}}\n",
            sum.join(" + ")
        ),
    );
    // A new build of its binary: whether the test still holds is now
    // decided by the functions it executed, which its base holds.
    let (links, original) = links_before_a_new_build(&f, ".sets", "many", "calls_many");
    // A sealed link of as many other functions, under each one's name.
    for link in &links {
        let len = std::fs::metadata(link).unwrap().len();
        let forged = (16..10_000u32)
            .find_map(|n| {
                let other = tempfile::tempdir().unwrap();
                let dir = other.path().join("sets");
                let forger = ekstazi_core::storage::fn_sets::FnSets::new(
                    ekstazi_core::files::contained::StateDir::new(other.path()),
                    &dir,
                );
                let ids: Vec<[u8; 8]> = (0..n)
                    .map(|i| {
                        let mut id = [0xee; 8];
                        id[4..].copy_from_slice(&i.to_be_bytes());
                        id
                    })
                    .collect();
                let name = forger.encode("any", ids).base?;
                let bytes =
                    std::fs::read(dir.join(blake3::Hash::from_bytes(name).to_hex().as_str()))
                        .unwrap();
                (bytes.len() as u64 == len).then_some(bytes)
            })
            .expect("a link of as many ids");
        std::fs::write(link, &forged).unwrap();
    }
    runs_for_its_base(&f, "many", "calls_many");
    gone_then_put_back(&f, &links, &original, "many", "calls_many");
}

/// Records `f`, then returns the links of its bases in `dir` (all but
/// `heads`) and their bytes, and adds a test before `test` in `binary`: a
/// new build, after which the test's record is read whole again.
fn links_before_a_new_build(
    f: &Fixture,
    dir: &str,
    binary: &str,
    test: &str,
) -> (Vec<PathBuf>, Vec<Vec<u8>>) {
    // Unkeyed, so that a forged link is sealed as well as the real one,
    // and only its name tells them apart.
    let env: [(&str, &str); 0] = [];
    f.test_ok_with(&[], &env);
    assert!(f.selected_with(&[], &env).is_empty());
    let links = named_by_content(f, dir, "heads");
    assert!(!links.is_empty(), "no base was written in {dir}");
    let original = links.iter().map(|p| std::fs::read(p).unwrap()).collect();
    add_a_test_before(f, binary, test);
    (links, original)
}

/// `binary`'s `test` is selected, for its base.
fn runs_for_its_base(f: &Fixture, binary: &str, test: &str) {
    let env: [(&str, &str); 0] = [];
    let selected = f.selected_with(&[], &env);
    let label = format!("verdicts::{binary} {test}");
    let found = selected.iter().find(|(l, _)| *l == label);
    assert!(
        found.is_some_and(|(_, reasons)| reasons.iter().any(|r| r.contains("base"))),
        "{selected:?}"
    );
}

/// With the links of a base forged already: removed, the test runs for its
/// base; put back, only `another` is selected; removed again and run, the
/// test is recorded against a new base.
fn gone_then_put_back(
    f: &Fixture,
    links: &[PathBuf],
    original: &[Vec<u8>],
    binary: &str,
    test: &str,
) {
    let env: [(&str, &str); 0] = [];
    for link in links {
        std::fs::remove_file(link).unwrap();
    }
    runs_for_its_base(f, binary, test);
    for (link, bytes) in links.iter().zip(original) {
        std::fs::write(link, bytes).unwrap();
    }
    assert_eq!(selected_labels(f), [format!("verdicts::{binary} another")]);
    for link in links {
        std::fs::remove_file(link).unwrap();
    }
    f.test_ok_with(&[], &env);
    assert!(f.selected_with(&[], &env).is_empty());
}

#[test]
fn a_records_dependency_base_missing_or_forged_makes_its_test_run() {
    let f = Fixture::new("verdicts");
    // A test that reads enough files for its record to keep them as a set
    // over the base of dependencies (a few are kept as they are).
    for i in 0..24 {
        f.write(&format!("data/many/f{i:02}.txt"), &format!("{i}\n"));
    }
    f.write(
        "tests/reads_many.rs",
        "#[test]\nfn reads_them_all() {\n    let mut sum = 0;\n    for i in 0..24 {\n        \
         let text = std::fs::read_to_string(format!(\"data/many/f{i:02}.txt\")).unwrap();\n        \
         sum += text.trim().parse::<u32>().unwrap();\n    }\n    assert_eq!(sum, 276);\n}\n",
    );
    // A new build of its binary: the record is read whole again.
    let (links, original) = links_before_a_new_build(&f, ".deps", "reads_many", "reads_them_all");
    // A sealed link of other dependencies, under each one's name.
    let other = tempfile::tempdir().unwrap();
    let forger = ekstazi_core::storage::fn_sets::DepSets::new(
        ekstazi_core::files::contained::StateDir::new(other.path()),
        &other.path().join("deps"),
    );
    let deps: Vec<ekstazi_core::model::dep::Dep> = (0..24u8)
        .map(|i| ekstazi_core::model::dep::Dep {
            target: ekstazi_core::model::dep::Target::Env(ekstazi_core::model::dep::EnvName(
                format!("FORGED_{i}").into_bytes(),
            )),
            sum: ekstazi_core::model::dep::Sum::Absent,
        })
        .collect();
    let name = forger.encode("deps", deps).base.expect("a base");
    let forged = std::fs::read(
        other
            .path()
            .join("deps")
            .join(blake3::Hash::from_bytes(name).to_hex().as_str()),
    )
    .unwrap();
    for link in &links {
        std::fs::write(link, &forged).unwrap();
    }
    runs_for_its_base(&f, "reads_many", "reads_them_all");
    gone_then_put_back(&f, &links, &original, "reads_many", "reads_them_all");
}

#[test]
fn a_records_dictionary_missing_or_forged_makes_its_test_run() {
    let env: [(&str, &str); 0] = [];
    let f = Fixture::new("verdicts");
    // More tests than a state takes to train a dictionary from its first
    // records, each reading a file of its own, as a project's do.
    let tests = ekstazi_core::storage::dicts::TRAIN_AFTER + 40;
    let cases: String = (0..tests)
        .map(|i| {
            format!(
                "#[test]\nfn case_{i:03}() {{\n    \
                 assert!(std::fs::read(\"tests/alike/input_{}.txt\").is_ok());\n}}\n",
                i % 9
            )
        })
        .collect();
    f.write("tests/alike.rs", &cases);
    for k in 0..9 {
        f.write(&format!("tests/alike/input_{k}.txt"), "input\n");
    }
    f.test_ok_with(&[], &env);
    assert!(f.selected_with(&[], &env).is_empty());
    let dicts_written = named_by_content(&f, ".dicts", "current");
    let [dict] = &dicts_written[..] else {
        panic!("one dictionary: {dicts_written:?}");
    };
    // The first records were its samples; those written once it was
    // trained name it.
    let (compressed_with_it, plain): (Vec<bool>, Vec<bool>) =
        walkdir::WalkDir::new(records_dir(&f))
            .min_depth(2)
            .max_depth(2)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| !e.path().parent().unwrap().ends_with(".dicts"))
            .filter(|e| e.path().parent().unwrap().ends_with("verdicts%3A%3Aalike"))
            .map(|e| std::fs::read(e.path()).unwrap().starts_with(b"EKZ3"))
            .partition(|named| *named);
    let compressed_with_it = compressed_with_it.len();
    // (Records compressed in parallel with the training go without; the
    // fixture's other tests were recorded too.)
    assert_eq!(compressed_with_it + plain.len(), tests);
    assert!(compressed_with_it > 0);
    // A new build of the binary: whether each test still holds is now
    // decided by its record read whole (the index cannot say).
    add_a_test_before(&f, "alike", "case_000");
    let for_its_dictionary = |f: &Fixture| {
        let selected = f.selected_with(&[], &env);
        let (new, old): (Vec<_>, Vec<_>) = selected
            .iter()
            .partition(|(label, _)| label == "verdicts::alike another");
        assert_eq!(new.len(), 1);
        assert!(
            old.iter()
                .all(|(_, reasons)| reasons.iter().any(|r| r.contains("dictionary"))),
            "{selected:?}"
        );
        old.len()
    };
    let original = std::fs::read(dict).unwrap();
    // Gone: the tests whose records name it run, and only they.
    std::fs::remove_file(dict).unwrap();
    assert_eq!(for_its_dictionary(&f), compressed_with_it);
    // Another dictionary's bytes under its name: the same.
    let mut forged = original.clone();
    let middle = forged.len() / 2;
    forged[middle] ^= 1;
    std::fs::write(dict, &forged).unwrap();
    assert_eq!(for_its_dictionary(&f), compressed_with_it);
    // Put back, the records hold again.
    std::fs::write(dict, &original).unwrap();
    assert_eq!(selected_labels(&f), ["verdicts::alike another"]);
}
