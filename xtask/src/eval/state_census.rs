//! `cargo xtask eval state`: what a recorded state's bytes are, and how
//! much of them tests share. For the state's size at scale: on coreutils
//! a record is about 40 KB, most of it the ids of the functions its test
//! executed, and thousands of tests run the same program's start-up code.
//!
//! Printed: the state's files by part, as they are on disk, and per test
//! (the size goal counts the current records, the bases they name, the
//! code tables and the history); the records' encoded bytes by part (executed functions'
//! ids, dependencies, ignored accesses, the rest); what the history takes
//! for one commit of them, filed anew as this tool files, and what the
//! history's commits take with their manifests filed anew; how many
//! distinct dependencies the records name; and per program, how many distinct
//! functions all its tests executed together (its universe), how many
//! every test (or nine in ten) executed, and what the tests' sets would
//! take as bitsets over that universe (ordered by how many tests executed
//! each function) compressed with zstd one by one: a bound for a record
//! format that keeps the universe once and a test's set against it.

use anyhow::{Context, Result, bail};
use ekstazi_core::model::code_dep::FnId;
use ekstazi_core::model::record::Record;
use ekstazi_core::storage::store::Store;
use std::collections::{HashMap, HashSet};
use std::path::Path;

pub fn census(state: &Path) -> Result<()> {
    let store = Store::new(state);
    let records: Vec<Record> = store
        .records()
        .with_context(|| format!("reading the records in {}", state.display()))?
        .into_iter()
        .filter_map(|(_, record)| record.ok())
        .collect();
    if records.is_empty() {
        bail!("no intact record of this format in {}", state.display());
    }
    on_disk(state, records.len())?;
    let (mut all, mut ids, mut deps, mut ignored) = (0, 0, 0, 0);
    let mut distinct_deps = HashSet::new();
    let mut ignored_by_why: HashMap<String, (usize, usize)> = HashMap::new();
    let mut per_program: HashMap<String, Vec<&[FnId]>> = HashMap::new();
    for record in &records {
        all += record.encode().len();
        deps += encoded_len(&record.deps);
        ignored += encoded_len(&record.ignored);
        for access in &record.ignored {
            let (count, bytes) = ignored_by_why.entry(access.why.clone()).or_default();
            *count += 1;
            *bytes += encoded_len(access);
        }
        for dep in &record.deps {
            distinct_deps.insert(postcard::to_stdvec(dep)?);
        }
        for code in &record.code {
            ids += code.functions.len() * std::mem::size_of::<FnId>();
            per_program
                .entry(code.unit.to_string())
                .or_default()
                .push(&code.functions);
        }
    }
    let n = records.len();
    println!("records: {n}, encoded {}", mb(all));
    println!(
        "  executed functions' ids {} ({:.0} %), dependencies {}, ignored accesses {}, the rest {}",
        mb(ids),
        100.0 * ids as f64 / all as f64,
        mb(deps),
        mb(ignored),
        mb(all.saturating_sub(ids + deps + ignored))
    );
    println!(
        "  distinct dependencies: {} ({} encoded)",
        distinct_deps.len(),
        mb(distinct_deps.iter().map(Vec::len).sum())
    );
    let mut whys: Vec<_> = ignored_by_why.into_iter().collect();
    whys.sort_by_key(|(_, (_, bytes))| std::cmp::Reverse(*bytes));
    for (why, (count, bytes)) in whys.iter().take(8) {
        println!("  ignored because {why}: {count} accesses, {}", mb(*bytes));
    }
    refiled(&store, &records)?;
    manifests_refiled(&store)?;
    let mut programs: Vec<_> = per_program.into_iter().collect();
    programs.sort();
    for (program, sets) in programs {
        describe(&program, &sets)?;
    }
    Ok(())
}

fn describe(program: &str, sets: &[&[FnId]]) -> Result<()> {
    let tests = sets.len();
    let mut executed_by: HashMap<FnId, usize> = HashMap::new();
    for set in sets {
        for id in *set {
            *executed_by.entry(*id).or_default() += 1;
        }
    }
    let mut universe: Vec<(FnId, usize)> = executed_by.into_iter().collect();
    universe.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let rank: HashMap<FnId, usize> = universe
        .iter()
        .enumerate()
        .map(|(rank, (id, _))| (*id, rank))
        .collect();
    let by_all = universe.iter().filter(|(_, by)| *by == tests).count();
    let by_most = universe
        .iter()
        .filter(|(_, by)| by * 10 >= tests * 9)
        .count();
    let mut packed = 0;
    for set in sets {
        let mut bits = vec![0u8; universe.len().div_ceil(8)];
        for id in *set {
            let at = rank[id];
            bits[at / 8] |= 1 << (at % 8);
        }
        packed += zstd::bulk::compress(&bits, 19)?.len();
    }
    let ids: usize = sets.iter().map(|set| set.len()).sum();
    println!("{program}: {tests} tests, {ids} ids (mean {})", ids / tests);
    println!(
        "  universe {} functions ({} as ids); executed by every test {by_all}, by nine in ten {by_most}",
        universe.len(),
        mb(universe.len() * std::mem::size_of::<FnId>())
    );
    println!(
        "  the sets as bitsets over the universe, zstd each: {} ({} B a test)",
        mb(packed),
        packed / tests
    );
    Ok(())
}

/// The format directory's files by part: the directories the store keeps
/// beside the records (`.sets`, `.code`, ...) each alone, every record
/// file together.
fn on_disk(state: &Path, tests: usize) -> Result<()> {
    let dir = state.join(format!("v{}", ekstazi_core::files::sealed::FORMAT_VERSION));
    let mut parts: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut sets, mut deps, mut bodies, mut files) = (0, 0, 0, 0);
    let dicts = Store::new(state).dicts().clone();
    for entry in walkdir::WalkDir::new(&dir).min_depth(1) {
        let entry = entry?;
        if !entry.file_type().is_file() {
            continue;
        }
        let top = entry
            .path()
            .strip_prefix(&dir)?
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        let part = if top.starts_with('.') && entry.depth() > 1 {
            top
        } else if top.starts_with('.') {
            "other files".into()
        } else {
            "records".into()
        };
        if part == "records" && entry.depth() == 2 {
            let bytes = std::fs::read(entry.path())?;
            if let Some((s, d, b)) = ekstazi_core::storage::record_file::sizes(&bytes, &dicts) {
                sets += s;
                deps += d;
                bodies += b;
                files += bytes.len();
            }
        }
        *parts.entry(part).or_default() += usize::try_from(entry.metadata()?.len())?;
    }
    let total: usize = parts.values().sum();
    println!(
        "on disk: {} for {tests} tests, {:.1} KB a test",
        mb(total),
        total as f64 / tests as f64 / 1e3
    );
    for (part, bytes) in &parts {
        println!("  {part}: {}", mb(*bytes));
    }
    println!(
        "  the record files: {} compressed from {}, of which the sets of executed functions {} and of dependencies {}",
        mb(files),
        mb(bodies),
        mb(sets),
        mb(deps)
    );
    Ok(())
}

/// What the history takes for one commit of these records, filed anew
/// into an empty history as a run files them (cut by the store's bases):
/// the history's share of the state's size, as this tool would write it
/// now, whatever tool wrote the state's own.
fn refiled(store: &Store, records: &[Record]) -> Result<()> {
    use ekstazi_core::storage::history::{Filing, History, Known};
    let filed = |records: &[Record]| -> Result<(u64, u64)> {
        let scratch = tempfile::tempdir()?;
        let history = History::new(scratch.path()).cut_by(
            store.sets().clone(),
            store.deps().clone(),
            store.dicts().clone(),
        );
        let filings: Vec<Filing<'_>> = records
            .iter()
            .map(|record| Filing::of(record, true, Known::Nothing))
            .collect();
        history.file_known(&"0".repeat(40), &filings, 0)?;
        let (manifests, objects) = history.sizes();
        Ok((manifests.values().sum(), objects))
    };
    let (manifests, objects) = filed(records)?;
    // Filed again without their executed functions: what the skeletons
    // and bodies take, the rest being the functions' chunks.
    let mut bare = records.to_vec();
    for code in bare.iter_mut().flat_map(|r| &mut r.code) {
        code.functions.clear();
    }
    let (_, without_functions) = filed(&bare)?;
    println!(
        "history of one commit, filed anew: {} (manifest {}, skeletons and bodies {}, executed functions' chunks {}), {:.1} KB a test",
        mb(usize::try_from(manifests + objects)?),
        mb(usize::try_from(manifests)?),
        mb(usize::try_from(without_functions)?),
        mb(usize::try_from(objects.saturating_sub(without_functions))?),
        (manifests + objects) as f64 / records.len() as f64 / 1e3
    );
    Ok(())
}

/// The history's manifests, each filed again oldest first as this tool
/// files them, in a copy of the history: what the history of the same
/// commits takes as this tool would write it now (a manifest of many tests
/// is kept as its changes over a base), whatever tool wrote the state's own.
fn manifests_refiled(store: &Store) -> Result<()> {
    use ekstazi_core::storage::history::History;
    let found = store.history();
    let scratch = tempfile::tempdir()?;
    crate::common::files::copy_tree(found.dir(), scratch.path())?;
    let copy = History::new(scratch.path());
    let sum = |history: &History| {
        let (manifests, objects) = history.sizes();
        (manifests.values().sum::<u64>(), objects)
    };
    let (was_manifests, was_objects) = sum(&copy);
    let mut manifests = copy.manifests();
    if manifests.is_empty() {
        return Ok(());
    }
    manifests.reverse();
    for manifest in &manifests {
        copy.put_manifest(manifest)?;
    }
    let (manifests_now, objects_now) = sum(&copy);
    println!(
        "the history's {} commits, their manifests filed anew: {} (manifests {}, objects {}); as found {} (manifests {})",
        manifests.len(),
        mb(usize::try_from(manifests_now + objects_now)?),
        mb(usize::try_from(manifests_now)?),
        mb(usize::try_from(objects_now)?),
        mb(usize::try_from(was_manifests + was_objects)?),
        mb(usize::try_from(was_manifests)?),
    );
    Ok(())
}

fn mb(bytes: usize) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// A part's size as postcard writes it in a record.
fn encoded_len<T: serde::Serialize>(part: &T) -> usize {
    postcard::to_stdvec(part).map_or(0, |bytes| bytes.len())
}
