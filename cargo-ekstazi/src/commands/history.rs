//! `cargo ekstazi history`: the commits that have records, and the history
//! carried to other machines (`export`, `import`). Needs no build.

use crate::cli::{HistoryAction, HistoryArgs};
use crate::git::repo::Repo;
use crate::style::{self, BOLD, DIM};
use anyhow::{Context, Result};
use ekstazi_core::files::signed::{self, Kind};
use ekstazi_core::model::record::Outcome;
use ekstazi_core::options::config::Config;
use ekstazi_core::storage::history::Manifest;
use ekstazi_core::storage::store::Store;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(args: HistoryArgs) -> Result<ExitCode> {
    let action = args.action.unwrap_or(HistoryAction::List { json: false });
    if let HistoryAction::Keygen = action {
        return keygen();
    }
    let (root, state) = match &args.state_dir {
        // The workspace, where there is one, still names the project and
        // the keys it trusts.
        Some(dir) => (
            super::workspace_state_dir(args.manifest_path.as_deref())
                .ok()
                .map(|(root, _)| root),
            std::path::absolute(dir)?,
        ),
        None => {
            let (root, state) = super::workspace_state_dir(args.manifest_path.as_deref())?;
            (Some(root), state)
        }
    };
    let store = Store::new(&state);
    match action {
        HistoryAction::List { json } => list(&store, root, json),
        HistoryAction::Export { file } => export(&store, root.as_deref(), &file),
        HistoryAction::Import { file, signature } => {
            import(&store, root.as_deref(), &file, signature.as_deref())
        }
        HistoryAction::Push { remote } => push(&store, root.as_deref(), remote),
        HistoryAction::Fetch { remote, limit } => fetch(&store, root.as_deref(), remote, limit),
        HistoryAction::Keygen => unreachable!("answered above"),
    }
}

/// `history list --json` (docs/reference/json.md).
#[derive(Serialize)]
struct HistoryJson {
    version: u32,
    /// Newest filed first.
    commits: Vec<CommitJson>,
    /// Bytes on disk: the manifests and record objects of the history, and
    /// the current records (one per test).
    history_bytes: u64,
    current_bytes: u64,
    current_records: usize,
}

#[derive(Serialize)]
struct CommitJson {
    commit: String,
    subject: Option<String>,
    filed_at_ms: u64,
    tests: usize,
    /// Tests that ran at this commit (the others were vouched for).
    ran: usize,
    failed: usize,
    /// The manifest and the objects of the tests that ran here.
    bytes: u64,
}

fn list(store: &Store, root: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let history = store.history();
    let manifests = history.manifests();
    let (manifest_sizes, object_bytes) = history.sizes();
    let subjects = root
        .as_deref()
        .and_then(Repo::at)
        .map(|repo| repo.subjects(manifests.iter().map(|m| m.commit.as_str())))
        .unwrap_or_default();
    let commits: Vec<CommitJson> = manifests
        .iter()
        .map(|m| CommitJson {
            commit: m.commit.clone(),
            subject: subjects.get(&m.commit).cloned(),
            filed_at_ms: m.filed_at_ms,
            tests: m.entries.len(),
            ran: m.entries.iter().filter(|e| e.ran).count(),
            failed: m
                .entries
                .iter()
                .filter(|e| e.outcome != Outcome::Passed)
                .count(),
            bytes: manifest_sizes.get(&m.commit).copied().unwrap_or(0) + filed_bytes(store, m),
        })
        .collect();
    let (current_records, current_bytes) = current_size(store);
    let listing = HistoryJson {
        version: 1,
        history_bytes: manifest_sizes.values().sum::<u64>() + object_bytes,
        current_bytes,
        current_records,
        commits,
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, &listing)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if listing.commits.is_empty() {
        writeln!(
            out,
            "no commit has records in {} yet: a `cargo ekstazi test` on a clean work tree files \
             them under HEAD",
            store.root().display()
        )?;
    } else {
        writeln!(
            out,
            "{BOLD}{:<12} {:>6} {:>6} {:>6} {:>10}  SUBJECT{BOLD:#}",
            "COMMIT", "TESTS", "RAN", "FAILED", "SIZE"
        )?;
        for c in &listing.commits {
            writeln!(
                out,
                "{:<12} {:>6} {:>6} {:>6} {:>10}  {}",
                &c.commit[..12],
                c.tests,
                c.ran,
                c.failed,
                human(c.bytes),
                c.subject.as_deref().unwrap_or("")
            )?;
        }
    }
    writeln!(
        out,
        "\n{} commit(s) with records: {} on disk; the current records ({} tests): {}",
        listing.commits.len(),
        human(listing.history_bytes),
        listing.current_records,
        human(listing.current_bytes),
    )?;
    writeln!(
        out,
        "{DIM}(size: a commit's list of records (for many tests, what it changed in a list \
         commits share), and the records of the tests that ran there; a record unchanged since \
         is not stored again){DIM:#}"
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The packed size of the records the tests that ran at a commit filed.
fn filed_bytes(store: &Store, manifest: &Manifest) -> u64 {
    let history = store.history();
    manifest
        .entries
        .iter()
        .filter(|e| e.ran)
        .filter_map(|e| history.object_size(&e.record))
        .sum()
}

/// The current records: how many, and their bytes.
fn current_size(store: &Store) -> (usize, u64) {
    let Ok(records) = store.records() else {
        return (0, 0);
    };
    let bytes = records
        .iter()
        .filter_map(|(path, _)| std::fs::metadata(path).ok())
        .map(|m| m.len())
        .sum();
    (records.len(), bytes)
}

fn export(store: &Store, root: Option<&Path>, file: &Path) -> Result<ExitCode> {
    // A bad key is reported before anything is written.
    let key = crate::secrets::signing_key()?;
    let _lock = store
        .lock(false, true)
        .with_context(|| format!("cannot lock the state directory {}", store.root().display()))?;
    let counted = ekstazi_core::storage::archive::export(store, file)
        .with_context(|| format!("cannot write {}", file.display()))?;
    let written = std::fs::metadata(file).map_or(0, |m| m.len());
    println!(
        "cargo-ekstazi: exported {} files ({}) to {} ({})",
        counted.files,
        human(counted.bytes),
        file.display(),
        human(written)
    );
    if let Some(key) = key {
        let sig = signature_path(file);
        let digest = digest_of(std::fs::File::open(file)?)?;
        let signed = signed::sign(&key, Kind::Archive, &project(root), &digest);
        write_whole(&sig, &signed).with_context(|| format!("cannot write {}", sig.display()))?;
        println!(
            "cargo-ekstazi: signed by {} ({})",
            key.public(),
            sig.display()
        );
        if ekstazi_core::files::sealed::keyed() {
            style::warn(format!(
                "the state is sealed with {}: a reader without that secret refuses its files, \
                 signed or not",
                crate::secrets::SEAL_KEY
            ));
        }
    } else {
        // An earlier export's signature would not hold for this file.
        let _ = std::fs::remove_file(signature_path(file));
    }
    Ok(ExitCode::SUCCESS)
}

fn import(
    store: &Store,
    root: Option<&Path>,
    file: &Path,
    signature: Option<&Path>,
) -> Result<ExitCode> {
    let trusted = trusted_keys(root)?;
    let _lock = store
        .lock(true, true)
        .with_context(|| format!("cannot lock the state directory {}", store.root().display()))?;
    let scratch = crate::remote::scratch(store)?;
    // The bytes checked are the bytes unpacked: a copy of the file, made
    // as it is hashed, so that the file cannot change in between.
    let copy = tempfile::Builder::new()
        .tempfile_in(scratch.path())
        .context("cannot make a scratch file in the state directory")?;
    let digest = {
        let mut hasher = blake3::Hasher::new();
        let mut source = std::fs::File::open(file)
            .with_context(|| format!("cannot import {}", file.display()))?;
        std::io::copy(&mut source, &mut Tee(&mut hasher, copy.as_file()))
            .with_context(|| format!("cannot import {}", file.display()))?;
        hasher.finalize()
    };
    if let Some(signer) = check_signature(
        root,
        &trusted,
        file,
        signature.map_or_else(|| signature_path(file), Path::to_path_buf),
        &digest,
    )? {
        println!("cargo-ekstazi: {} is signed by {signer}", file.display());
    }
    // Beside the copy, so that both go with the scratch directory.
    let unpacked = scratch.path().join("state");
    std::fs::create_dir(&unpacked)?;
    let counted = ekstazi_core::storage::archive::unpack(copy.path(), &unpacked)
        .with_context(|| format!("cannot import {}", file.display()))?;
    let merged = ekstazi_core::storage::merge_state::merge(store, &Store::new(&unpacked))
        .with_context(|| format!("cannot import {}", file.display()))?;
    println!(
        "cargo-ekstazi: imported {}: {} records added, {} newer, {} kept; {} commits of history; \
         {} functions added to the table",
        file.display(),
        merged.added,
        merged.replaced,
        merged.kept,
        merged.commits,
        merged.functions
    );
    if counted.left_out > 0 {
        style::warn(format!(
            "{} entries of the file are not part of a state directory and were left out",
            counted.left_out
        ));
    }
    for why in merged.refused.lines() {
        style::warn(format!(
            "not imported: {why} (the tests concerned run next time)"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks the signature of an archive to import, whose bytes hash to
/// `digest`. With trusted keys, one of them must have signed it for this
/// project; without, a signature present must still hold. The signer, if
/// the file is signed.
fn check_signature(
    root: Option<&Path>,
    trusted: &[signed::PublicKey],
    file: &Path,
    sig: PathBuf,
    digest: &blake3::Hash,
) -> Result<Option<signed::PublicKey>> {
    let refused = |why: String| {
        anyhow::anyhow!(
            "{} is not imported: {why}; nothing of it was kept, and the tests run as before",
            file.display()
        )
    };
    let bytes = match std::fs::read(&sig) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && trusted.is_empty() => {
            return Ok(None);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refused(format!(
                "it is not signed ({} not found), and [history] trusted-keys lists the keys \
                 whose signature it must carry",
                sig.display()
            )));
        }
        Err(e) => return Err(refused(format!("cannot read {}: {e}", sig.display()))),
    };
    signed::check(&bytes, trusted, Kind::Archive, &project(root), digest)
        .map(Some)
        .map_err(|e| refused(e.to_string()))
}

/// The keys `.config/ekstazi.toml` trusts (none outside a workspace).
fn trusted_keys(root: Option<&Path>) -> Result<Vec<signed::PublicKey>> {
    match root {
        Some(root) => Config::load(root)?
            .history
            .trusted_keys()
            .map_err(anyhow::Error::msg),
        None => Ok(Vec::new()),
    }
}

/// Where an archive's signature is: `FILE.sig`.
fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// This project's name in a signature: its repository's root commits.
fn project(root: Option<&Path>) -> String {
    root.and_then(Repo::at).map_or_else(String::new, |repo| {
        signed::project_of_roots(&repo.root_commits())
    })
}

/// Writes `bytes` to `path` whole or not at all: a temporary file beside
/// it, renamed into place.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn digest_of(mut file: std::fs::File) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize())
}

/// Writes to a file and a hash at once.
struct Tee<'a>(&'a mut blake3::Hasher, &'a std::fs::File);

impl std::io::Write for Tee<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = (&mut self.1).write(bytes)?;
        self.0.update(&bytes[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&mut self.1).flush()
    }
}

/// `history keygen`: a new key pair, the secret for CI, the public key
/// for the project's configuration.
fn keygen() -> Result<ExitCode> {
    let key = signed::SigningKey::generate()?;
    println!(
        "# The secret key: keep it in CI's secrets as {}, nowhere else.",
        crate::secrets::SIGNING_KEY
    );
    println!("{}={}", crate::secrets::SIGNING_KEY, key.secret_hex());
    println!("# The public key: list it in .config/ekstazi.toml.");
    println!("[history]");
    println!("trusted-keys = [\"{}\"]", key.public());
    Ok(ExitCode::SUCCESS)
}

/// The remote store: `--remote`, else `EKSTAZI_REMOTE`, else `[history]
/// remote`.
fn remote_uri(root: Option<&Path>, given: Option<String>) -> Result<String> {
    if let Some(uri) = given.or_else(|| std::env::var("EKSTAZI_REMOTE").ok()) {
        return Ok(uri);
    }
    root.map(Config::load)
        .transpose()?
        .and_then(|config| config.history.remote)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no remote store: give --remote, set EKSTAZI_REMOTE, or `[history] remote` in \
                 .config/ekstazi.toml"
            )
        })
}

/// How long one request to a remote store may take.
const REMOTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `history push`: the state, as recorded at `HEAD`, to the remote store.
fn push(store: &Store, root: Option<&Path>, remote: Option<String>) -> Result<ExitCode> {
    let uri = remote_uri(root, remote)?;
    let key = crate::secrets::signing_key()?;
    if ekstazi_core::files::sealed::keyed() {
        anyhow::bail!(
            "the state is sealed with {}: a reader without that secret would refuse all of it; \
             push from a state without it (a signature stands in for it: {})",
            crate::secrets::SEAL_KEY,
            crate::secrets::SIGNING_KEY
        );
    }
    let head = root
        .and_then(Repo::at)
        .map(|repo| repo.head)
        .ok_or_else(|| anyhow::anyhow!("history push needs a git repository: it pushes at HEAD"))?;
    let _lock = store
        .lock(false, true)
        .with_context(|| format!("cannot lock the state directory {}", store.root().display()))?;
    let clock = std::time::Instant::now();
    let remote = crate::remote::Remote::open(&uri, REMOTE_TIMEOUT)?;
    let pushed = remote
        .push(store, &project(root), &head, key.as_ref())
        .with_context(|| format!("cannot push to {}", crate::remote::shown(&uri)))?;
    println!(
        "cargo-ekstazi: pushed {} files at {} to {}: {} uploaded ({}), the rest already there; \
         manifest {}{} in {:.2}s",
        pushed.files,
        &head[..head.len().min(12)],
        crate::remote::shown(&uri),
        pushed.uploaded,
        human(pushed.uploaded_bytes),
        human(pushed.manifest_bytes),
        key.map_or_else(
            || ", unsigned".to_owned(),
            |key| format!(", signed by {}", key.public())
        ),
        clock.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// `history fetch`: what the remote store holds for `HEAD` or its nearest
/// pushed ancestor, checked and merged.
fn fetch(
    store: &Store,
    root: Option<&Path>,
    remote: Option<String>,
    limit: u64,
) -> Result<ExitCode> {
    let uri = remote_uri(root, remote)?;
    let trusted = trusted_keys(root)?;
    let ancestry = root
        .and_then(Repo::at)
        .map_or_else(Vec::new, |repo| repo.ancestry(1000));
    if ancestry.is_empty() {
        anyhow::bail!("history fetch needs a git repository: it fetches for HEAD");
    }
    let clock = std::time::Instant::now();
    let request = crate::remote::FetchRequest {
        uri: &uri,
        ancestry: &ancestry,
        trusted: &trusted,
        project: &project(root),
        limit,
        within: REMOTE_TIMEOUT,
        wait: true,
    };
    let Some(fetched) = crate::remote::fetch_into_store(store, &request)
        .with_context(|| format!("nothing was taken from {}", crate::remote::shown(&uri)))?
    else {
        println!(
            "cargo-ekstazi: {} holds no push of HEAD or of its ancestors that this state \
             has not taken",
            crate::remote::shown(&uri)
        );
        return Ok(ExitCode::SUCCESS);
    };
    println!(
        "{}",
        crate::remote::describe(&uri, &fetched, clock.elapsed())
    );
    for why in &fetched.refused {
        style::warn(format!(
            "not taken: {why} (the tests concerned run next time)"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes for people: `812 B`, `4.1 KiB`, `61.2 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
