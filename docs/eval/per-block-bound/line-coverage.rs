//! EXPERIMENT, not part of cargo-ekstazi: which tests executed a source line
//! that a commit changes, and which functions the commit edits.
//!
//!   line-coverage <blocks dir> <worktree at the parent> <git diff -U0 parent commit>
//!
//! Reads the block dumps of experiment.patch's shim (`BLOCKS_V2=1`: a test's
//! processes grouped by their trace file), maps each covered block — from its
//! address to the next instrumented block's — to source lines through the
//! binary's line table, and prints JSON lines: `{"edited": <function>}` for
//! every function with an edited line, then one line per test with whether
//! it executed a changed line. `REGISTRY_SRC=<~/.cargo/registry/src/<index>>`
//! also reads dependencies' lines, keyed `<crate>-<version>/…` as a diff
//! between two versions' directories names them. A standalone binary crate
//! with `addr2line` 0.25 (feature `loader`), `object` 0.40 and
//! `rustc-demangle` 0.1; never built by this workspace.
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

struct Hunk {
    start: u32,
    len: u32,
    pure_deletion: bool,
}

fn parse_diff(text: &str) -> HashMap<String, Vec<Hunk>> {
    let mut out: HashMap<String, Vec<Hunk>> = HashMap::new();
    let mut file: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("--- ") {
            file = rest.strip_prefix("a/").map(str::to_owned);
        } else if let Some(rest) = line.strip_prefix("@@ -") {
            let Some(f) = &file else { continue };
            if !f.ends_with(".rs") {
                continue;
            }
            let mut parts = rest.split(' ');
            let old = parts.next().unwrap();
            let new = parts.next().unwrap();
            let mut it = old.split(',');
            let start: u32 = it.next().unwrap().parse().unwrap();
            let len: u32 = it.next().map(|l| l.parse().unwrap()).unwrap_or(1);
            let pure_deletion = new.ends_with(",0");
            out.entry(f.clone()).or_default().push(Hunk { start, len, pure_deletion });
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(&args[1]);
    let root = format!("{}/", args[2].trim_end_matches('/'));
    let registry = std::env::var("REGISTRY_SRC")
        .ok()
        .map(|r| format!("{}/", r.trim_end_matches('/')));
    let diff = parse_diff(&std::fs::read_to_string(&args[3]).unwrap());

    // Per test (a test's processes share its trace file; v1 dumps have no
    // trace line and are keyed by their own `--exact` argument): per exe,
    // covered pcs.
    let v2 = std::env::var_os("BLOCKS_V2").is_some();
    let mut groups: HashMap<String, (Option<String>, HashMap<String, Vec<u32>>)> = HashMap::new();
    let mut exes: HashMap<String, PathBuf> = HashMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "blk") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let mut cut = 0;
        let mut fields = Vec::new();
        for _ in 0..if v2 { 3 } else { 2 } {
            let n = cut + bytes[cut..].iter().position(|&b| b == b'\n').unwrap();
            fields.push(&bytes[cut..n]);
            cut = n + 1;
        }
        let exe = PathBuf::from(String::from_utf8_lossy(fields[0]).into_owned());
        let args: Vec<String> = fields[1]
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let test = args
            .iter()
            .position(|a| a == "--exact")
            .map(|i| args[i + 1].clone());
        let key = if v2 {
            String::from_utf8_lossy(fields[2]).into_owned()
        } else {
            match &test {
                Some(t) => format!("{}\0{t}", exe.display()),
                None => continue,
            }
        };
        if key.is_empty() {
            continue;
        }
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        exes.insert(name.clone(), exe.clone());
        let group = groups.entry(key).or_default();
        if let Some(t) = test {
            group.0 = Some(format!("{}\0{t}", name));
        }
        let pcs = group.1.entry(name).or_default();
        for c in bytes[cut..].chunks_exact(4) {
            pcs.push(u32::from_le_bytes(c.try_into().unwrap()));
        }
    }
    let mut hits_of: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut noncode_hunks = 0usize;
    let mut slid_hunks = 0usize;
    let mut between_items = 0usize;
    let mut total_hunks = 0usize;
    for (name, exe) in &exes {
        let mut table: Vec<u32> = std::fs::read(dir.join(format!("table-{name}")))
            .unwrap()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        table.sort_unstable();
        table.dedup();
        let loader = addr2line::Loader::new(exe).unwrap();
        let mut files: HashMap<String, u32> = HashMap::new();
        let mut rows: Vec<(u64, u64, u32, u32)> = Vec::new();
        let mut code_lines: HashMap<u32, BTreeSet<u32>> = HashMap::new();
        for (addr, len, loc) in loader.find_location_range(0, u64::MAX).unwrap() {
            let (Some(file), Some(line)) = (loc.file, loc.line) else {
                continue;
            };
            // Dependencies' sources: keyed by their path in the registry
            // (`<crate>-<version>/src/…`), as a diff between two versions'
            // directories names them.
            let Some(rel) = file
                .strip_prefix(&root)
                .or_else(|| registry.as_deref().and_then(|r| file.strip_prefix(r)))
            else {
                continue;
            };
            let next = files.len() as u32;
            let id = *files.entry(rel.to_owned()).or_insert(next);
            rows.push((addr, len, id, line));
            code_lines.entry(id).or_default().insert(line);
        }
        rows.sort_unstable();
        let data = std::fs::read(exe).unwrap();
        let mut symbols: Vec<(u64, u64, String)> = {
            use object::{Object, ObjectSymbol, SymbolKind};
            let file = object::File::parse(&*data).unwrap();
            file.symbols()
                .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
                .map(|s| (s.address(), s.address() + s.size(), s.name().unwrap_or("").to_owned()))
                .collect()
        };
        symbols.sort_unstable();
        let diff_ids: HashSet<u32> = diff.keys().filter_map(|f| files.get(f).copied()).collect();
        let mut addrs_of_line: HashMap<(u32, u32), Vec<u64>> = HashMap::new();
        for r in &rows {
            if diff_ids.contains(&r.2) {
                addrs_of_line.entry((r.2, r.3)).or_default().push(r.0);
            }
        }
        let functions_of = |key: (u32, u32)| -> BTreeSet<usize> {
            let mut out = BTreeSet::new();
            for &a in addrs_of_line.get(&key).map(|v| v.as_slice()).unwrap_or(&[]) {
                let i = symbols.partition_point(|s| s.0 <= a);
                if i > 0 && a < symbols[i - 1].1 {
                    out.insert(i - 1);
                }
            }
            out
        };
        let mut touched: HashSet<(u32, u32)> = HashSet::new();
        let mut edited_lines: HashSet<(u32, u32)> = HashSet::new();
        for (file, hunks) in &diff {
            let Some(&id) = files.get(file) else {
                continue;
            };
            let lines = &code_lines[&id];
            // The parent's text: a pure deletion can slide over equal lines
            // (git picks one alignment); only the lines deleted in every
            // alignment are surely deleted.
            let text = std::fs::read_to_string(format!("{root}{file}"))
                .or_else(|_| std::fs::read_to_string(format!("{}{file}", registry.as_deref().unwrap_or("/"))))
                .unwrap_or_default();
            let old: Vec<&str> = text.lines().collect();
            let at = |n: u32| old.get(n as usize - 1).copied();
            for h in hunks {
                total_hunks += 1;
                let (mut lo, mut hi) = if h.len == 0 {
                    (h.start + 1, h.start)
                } else {
                    (h.start, h.start + h.len - 1)
                };
                if h.len > 0 && h.pure_deletion {
                    let (a, b) = (h.start, h.len);
                    let mut down = 0;
                    while at(a + down).is_some() && at(a + down) == at(a + b + down) {
                        down += 1;
                    }
                    let mut up = 0;
                    while a > up + 1 && at(a - up - 1).is_some() && at(a - up - 1) == at(a + b - 1 - up) {
                        up += 1;
                    }
                    if down > 0 || up > 0 {
                        slid_hunks += 1;
                    }
                    lo = a + down;
                    hi = (a + b - 1).saturating_sub(up);
                    if lo > hi {
                        continue;
                    }
                }
                let inside: Vec<u32> = if lo <= hi {
                    lines.range(lo..=hi).copied().collect()
                } else {
                    vec![]
                };
                if inside.is_empty() && h.len > 0 {
                    // No code line: a type, a constant, a comment. Functions
                    // it changes show up as changed without an edited line.
                    noncode_hunks += 1;
                } else if inside.is_empty() {
                    // An insertion: it edits the function around it only
                    // when the code lines before and after share a function
                    // (otherwise it adds an item between two functions).
                    let p = lines.range(..lo).next_back().copied();
                    let n = lines.range(lo..).next().copied();
                    if let (Some(p), Some(n)) = (p, n)
                        && !functions_of((id, p)).is_disjoint(&functions_of((id, n)))
                    {
                        for l in [p, n] {
                            touched.insert((id, l));
                            edited_lines.insert((id, l));
                        }
                    } else {
                        between_items += 1;
                    }
                } else {
                    edited_lines.extend(inside.iter().map(|&l| (id, l)));
                    touched.extend(inside.into_iter().map(|l| (id, l)));
                }
            }
        }
        {
            let mut edited: BTreeSet<String> = BTreeSet::new();
            for (lo, hi, name) in &symbols {
                let mut j = rows.partition_point(|r| r.0 + r.1 <= *lo);
                while j < rows.len() && rows[j].0 < *hi {
                    if edited_lines.contains(&(rows[j].2, rows[j].3)) {
                        edited.insert(format!("{:#}", rustc_demangle::demangle(name)));
                        break;
                    }
                    j += 1;
                }
            }
            for name in edited {
                println!("{{\"edited\":{}}}", q(&name));
            }
        }
        let names: HashMap<u32, &str> = files.iter().map(|(k, v)| (*v, k.as_str())).collect();
        for (test_key, per_exe) in groups.values() {
            let Some(test_key) = test_key else { continue };
            let Some(pcs) = per_exe.get(name) else { continue };
            let hits = hits_of.entry(test_key.clone()).or_default();
            for &pc in pcs {
                let i = table.partition_point(|&p| p <= pc);
                let end = table.get(i).copied().unwrap_or(pc + 1) as u64;
                let pc = pc as u64;
                let mut j = rows.partition_point(|r| r.0 + r.1 <= pc);
                while j < rows.len() && rows[j].0 < end {
                    let key = (rows[j].2, rows[j].3);
                    if touched.contains(&key) {
                        hits.insert(format!("{}:{}", names[&key.0], key.1));
                    }
                    j += 1;
                }
            }
        }
    }
    for (test_key, _) in groups.values() {
        let Some(test_key) = test_key else { continue };
        let (exe_name, test) = test_key.split_once('\0').unwrap();
        let hits = hits_of.get(test_key.as_str()).cloned().unwrap_or_default();
        let sample: Vec<String> = hits.iter().take(4).cloned().collect();
        println!("{}", serde_json_line(exe_name, test, !hits.is_empty(), &sample));
    }
    eprintln!("hunks {total_hunks}, without code lines {noncode_hunks}, deletions slid {slid_hunks}, insertions between items {between_items}");
}

fn serde_json_line(exe: &str, test: &str, touched: bool, lines: &[String]) -> String {
    format!(
        "{{\"exe\":{},\"test\":{},\"touched\":{},\"lines\":[{}]}}",
        q(exe),
        q(test),
        touched,
        lines.iter().map(|l| q(l)).collect::<Vec<_>>().join(",")
    )
}

fn q(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}
