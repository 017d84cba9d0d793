//! Garbage collection of what records share: the function table's entries,
//! the uninstrumented tables, the bases of executed functions (`fn_sets`)
//! and the dictionaries of record files (`dicts`) that no current record
//! and no filed record names any more
//! (after the history was pruned, or tests were removed).
//!
//! Marking reads every current record and every filed record, so it is not
//! done at every run: [`due`] says when the table has grown well past its
//! size at the last collection. The sweep rewrites the table as one
//! segment; records name functions by content, so none is rewritten.

use crate::digests::functions::FunctionTable;
use crate::model::code_dep::FnId;
use crate::model::dep::Hash;
use crate::model::record::Record;
use crate::storage::store::Store;
use std::collections::HashSet;
use std::io;

/// The table is collected once it holds this many times the entries the
/// last collection kept (and at least [`MIN_GROWTH`] more).
const GROWTH: f64 = 1.5;
const MIN_GROWTH: usize = 10_000;
/// Where the size after the last collection is kept.
const MARK: &str = ".collected";

/// What a collection removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Entries of the function table.
    pub functions: usize,
    /// Tables of uninstrumented functions.
    pub uninstrumented: usize,
    /// Links of bases (only current records name them).
    pub links: usize,
    /// Dictionaries of record files.
    pub dicts: usize,
}

/// Whether the table has grown enough since the last collection to be
/// worth one; also when it is spread over many segment files.
pub fn due(store: &Store, table: &FunctionTable) -> bool {
    let (entries, segments) = table.len();
    let last: usize = store
        .state()
        .read_bounded(&store.functions_dir().join(MARK), 32)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    segments > 64 || (entries > last + MIN_GROWTH && entries as f64 > last as f64 * GROWTH)
}

/// Keeps the functions and uninstrumented tables some intact record (current
/// or filed) names, and removes the rest. A record that cannot be read
/// names nothing: its test runs, and records anew, anyway.
pub fn collect(store: &Store, table: &FunctionTable) -> io::Result<Collected> {
    let mut functions: HashSet<FnId> = HashSet::new();
    let mut tables: HashSet<Hash> = HashSet::new();
    let mut mark = |record: &Record| {
        for code in &record.code {
            functions.extend(code.functions.iter().copied());
            tables.insert(code.uninstrumented);
        }
    };
    for (_, record) in store.records()? {
        if let Ok(record) = record {
            mark(&record);
        }
    }
    let history = store.history();
    let mut objects = HashSet::new();
    for manifest in history.manifests() {
        objects.extend(manifest.entries.into_iter().map(|e| e.record));
    }
    for id in objects {
        if let Some(record) = history.object(&id) {
            mark(&record);
        }
    }
    let before = table.len().0;
    table.compact(Some(&functions))?;
    let after = table.len().0;
    store.state().write_atomic(
        &store.functions_dir().join(MARK),
        after.to_string().as_bytes(),
    )?;
    let uninstrumented = store.retain_uninstrumented(&tables)?;
    let (links, dicts) = store.collect_sets_and_dicts()?;
    Ok(Collected {
        functions: before - after,
        uninstrumented,
        links,
        dicts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digests::program::Uninstrumented;
    use crate::model::record::tests_support::sample;

    #[test]
    fn what_no_record_names_goes_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let table = FunctionTable::load(&store.functions_dir());
        let kept = table.intern("kept", 1, &[1; 16]).unwrap();
        let filed = table.intern("filed", 2, &[2; 16]).unwrap();
        let gone = table.intern("gone", 3, &[3; 16]).unwrap();
        table.flush().unwrap();
        let used = Uninstrumented {
            names: vec!["memcpy".into()],
            fps: vec![[4; 16]],
        };
        let unused = Uninstrumented {
            names: vec!["memset".into()],
            fps: vec![[5; 16]],
        };
        for t in [&used, &unused] {
            store.save_uninstrumented(&t.digest(), t).unwrap();
        }
        let mut current = sample();
        current.code[0].functions = vec![kept];
        current.code[0].uninstrumented = used.digest();
        store.save(&current).unwrap();
        // A base a record was written against, and two no record names;
        // with `heads` gone, nothing keeps those two.
        let many =
            |from: u8| -> Vec<FnId> { (0..100).map(|i| [from, i, 0, 0, 0, 0, 0, 0]).collect() };
        // Likewise a base of dependencies: the record's, and one no record
        // names.
        let deps = |from: u8| -> Vec<crate::model::dep::Dep> {
            (0..20)
                .map(|i| crate::model::dep::Dep {
                    target: crate::model::dep::Target::Env(crate::model::dep::EnvName(vec![
                        from, i,
                    ])),
                    sum: crate::model::dep::Sum::Absent,
                })
                .collect()
        };
        let mut based = sample();
        based.test = "based".into();
        based.code[0].functions = many(1);
        based.deps = deps(1);
        based.sort_deps();
        store.save(&based).unwrap();
        let unnamed = store.sets().encode("another program", many(2));
        store.sets().encode("a program", many(3));
        let unnamed_deps = store.deps().encode("another workspace", deps(2));
        for dir_name in [".sets", ".deps"] {
            let heads = format!("v{}/{dir_name}/heads", crate::files::sealed::FORMAT_VERSION);
            std::fs::remove_file(dir.path().join(heads)).unwrap();
        }
        let mut old = sample();
        old.test = "old".into();
        old.code[0].functions = vec![filed];
        old.code[0].uninstrumented = used.digest();
        store
            .history()
            .file(&"a".repeat(40), &[(&old, true)], 1)
            .unwrap();

        // Collected by another process, which reads the heads anew.
        let collected = collect(&Store::new(dir.path()), &table).unwrap();
        assert_eq!(
            collected,
            Collected {
                functions: 1,
                uninstrumented: 1,
                links: 3,
                dicts: 0,
            }
        );
        let again = Store::new(dir.path());
        let based_again = again.load("demo::integration", "based");
        assert!(matches!(based_again, crate::storage::store::Loaded::Found(r) if *r == based));
        assert_eq!(again.sets().decode(&unnamed), None);
        assert_eq!(again.deps().decode(&unnamed_deps), None);
        let reloaded = FunctionTable::load(&store.functions_dir());
        assert!(reloaded.get(&kept).is_some() && reloaded.get(&filed).is_some());
        assert!(reloaded.get(&gone).is_none());
        assert!(store.load_uninstrumented(&used.digest()).is_some());
        assert!(store.load_uninstrumented(&unused.digest()).is_none());
        assert!(!due(&store, &reloaded), "just collected");
    }
}
