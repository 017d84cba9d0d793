//! The remote store's transport: `history push` and `history fetch` over
//! OpenDAL (`s3://`, `gcs://`, `azblob://`, `ghac://`, `webdav://`,
//! `file://`: the URI names the service, each service's usual environment
//! variables its credentials). In a store that cannot list what it holds
//! (the GitHub Actions cache service), blobs are looked up by name and a
//! commit's pushes are numbered. What a push holds and whether a
//! fetched manifest is taken are `ekstazi_core::storage::remote`'s.
//!
//! A push uploads the blobs the remote does not list, then its manifest;
//! a fetch takes every manifest of the nearest pushed commit (`HEAD`, or
//! the nearest of its ancestors), downloads the blobs the state does not
//! have, checks each against its name, and merges what it took like an
//! imported state. Every call is bounded by a deadline: a remote that is
//! down or slow costs a warning, never the run.

use anyhow::{Context, Result, anyhow};
use ekstazi_core::files::signed::{PublicKey, SigningKey};
use ekstazi_core::storage::remote::{self as layout, PushManifest, Pushed};
use ekstazi_core::storage::store::Store;
use futures::StreamExt;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// Requests in flight at once.
const CONCURRENCY: usize = 16;

/// A remote store, and the runtime its requests run on.
pub struct Remote {
    op: opendal::Operator,
    runtime: tokio::runtime::Runtime,
    /// The store cannot list what it holds (the GitHub Actions cache
    /// service): a blob is looked up by name, and a commit's pushes are
    /// numbered from 0 instead of named by their content.
    numbered: bool,
}

/// Treats any store as one that cannot list what it holds: how the way
/// such a store is used is tested where none runs.
const WITHOUT_LISTING: &str = "EKSTAZI_REMOTE_WITHOUT_LISTING";

/// How many of `HEAD`'s ancestors a fetch looks up one by one in a store
/// that cannot list its commits.
const NUMBERED_PROBE: usize = 32;

/// How many pushes of one commit a store that cannot list holds at most.
const NUMBERED_PUSHES: usize = 256;

/// What a push moved.
pub struct PushReport {
    pub files: usize,
    pub uploaded: usize,
    pub uploaded_bytes: u64,
    pub manifest_bytes: u64,
}

/// What a fetch took, before merging.
struct Fetched {
    commit: String,
    /// Each push, as a state directory of its own to merge.
    pushes: Vec<std::path::PathBuf>,
    /// The manifests taken, by their names in the store.
    taken: Vec<String>,
    /// The pushes refused, and why.
    refused: Vec<String>,
    downloaded: usize,
    downloaded_bytes: u64,
}

/// What to fetch, and within what.
#[derive(Clone, Copy)]
pub struct FetchRequest<'a> {
    pub uri: &'a str,
    /// `HEAD` and its ancestors, nearest first.
    pub ancestry: &'a [String],
    pub trusted: &'a [PublicKey],
    pub project: &'a str,
    /// At most this many bytes downloaded, or nothing taken.
    pub limit: u64,
    /// The whole fetch's time.
    pub within: Duration,
    /// Wait for the state directory's lock; otherwise, when another run
    /// holds it, fetch nothing.
    pub wait: bool,
}

/// What a fetch took and merged.
pub struct FetchSummary {
    pub commit: String,
    pub pushes: usize,
    pub downloaded: usize,
    pub downloaded_bytes: u64,
    pub added: usize,
    pub replaced: usize,
    pub kept: usize,
    /// What the merge did not take, and why.
    pub refused: Vec<String>,
}

/// The manifests this state took already, so that a run fetches nothing
/// twice: a note of the store's own, which lost or forged costs a fetch
/// again or a record not taken (its test runs), nothing else.
const FETCHED: &str = "remote-fetched";

/// How many taken manifests the note keeps.
const FETCHED_KEPT: usize = 1000;

/// Takes what the remote store holds for the nearest pushed commit of
/// `request.ancestry` into `store`, each push checked and then merged as a
/// shard's state is. `None` when there is nothing new: no push of
/// `ancestry`, or every push of the nearest already taken.
pub fn fetch_into_store(store: &Store, request: &FetchRequest<'_>) -> Result<Option<FetchSummary>> {
    let _lock = store.lock(true, request.wait).with_context(|| {
        format!(
            "cannot lock the state directory {} (another run holds it?)",
            store.root().display()
        )
    })?;
    let notes = store.root().join(FETCHED);
    let noted = store
        .state()
        .read_bounded(&notes, 1 << 20)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let already: HashSet<String> = noted.lines().map(str::to_owned).collect();
    let into = scratch(store)?;
    let remote = Remote::open(request.uri, request.within)?;
    let Some(fetched) = remote.fetch(store, request, &already, into.path())? else {
        return Ok(None);
    };
    let mut summary = FetchSummary {
        commit: fetched.commit,
        pushes: fetched.pushes.len(),
        downloaded: fetched.downloaded,
        downloaded_bytes: fetched.downloaded_bytes,
        added: 0,
        replaced: 0,
        kept: 0,
        refused: fetched.refused,
    };
    for push in &fetched.pushes {
        let merged = ekstazi_core::storage::merge_state::merge(store, &Store::new(push))
            .with_context(|| format!("cannot merge what {} holds", shown(request.uri)))?;
        summary.added += merged.added;
        summary.replaced += merged.replaced;
        summary.kept += merged.kept;
        summary.refused.extend(merged.refused.lines());
    }
    let mut lines: Vec<&str> = noted.lines().collect();
    lines.extend(fetched.taken.iter().map(String::as_str));
    let start = lines.len().saturating_sub(FETCHED_KEPT);
    let _ = store
        .state()
        .write_atomic(&notes, (lines[start..].join("\n") + "\n").as_bytes());
    Ok(Some(summary))
}

/// A remote store's URI as it is shown: without its options (`?...`),
/// where a team may have put a key.
pub fn shown(uri: &str) -> &str {
    uri.split_once('?').map_or(uri, |(shown, _)| shown)
}

/// One line on what a fetch took.
pub fn describe(uri: &str, fetched: &FetchSummary, took: Duration) -> String {
    let uri = shown(uri);
    format!(
        "cargo-ekstazi: fetched {} push{} of {} from {uri}: {} files downloaded ({:.1} KiB) in \
         {:.2}s; {} records added, {} newer, {} kept",
        fetched.pushes,
        if fetched.pushes == 1 { "" } else { "es" },
        &fetched.commit[..fetched.commit.len().min(12)],
        fetched.downloaded,
        fetched.downloaded_bytes as f64 / 1024.0,
        took.as_secs_f64(),
        fetched.added,
        fetched.replaced,
        fetched.kept,
    )
}

/// An import's or a fetch's scratch directory in the state directory.
const SCRATCH_PREFIX: &str = ".import";

/// A new scratch directory in the state directory, to unpack or fetch a
/// state into before merging it; those of imports and fetches that were
/// killed are removed first (the caller holds the state's lock, so no
/// other is running).
pub fn scratch(store: &Store) -> Result<tempfile::TempDir> {
    if let Ok(Some(entries)) = store.state().read_dir(store.root()) {
        for entry in entries {
            if entry.name.to_string_lossy().starts_with(SCRATCH_PREFIX) {
                // A link is removed as a link, never followed.
                let _ = store.state().remove(&store.root().join(&entry.name));
            }
        }
    }
    tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        .tempdir_in(store.root())
        .context("cannot make a scratch directory in the state directory")
}

impl Remote {
    /// The store `uri` names, its requests retried and each given at most
    /// `timeout`.
    pub fn open(uri: &str, timeout: Duration) -> Result<Remote> {
        opendal::install_default();
        let op = opendal::Operator::from_uri(uri)
            .with_context(|| format!("cannot use the remote store {}", shown(uri)))?
            .layer(opendal::layers::RetryLayer::new().with_max_times(2))
            .layer(
                opendal::layers::TimeoutLayer::new()
                    .with_timeout(timeout)
                    .with_io_timeout(timeout),
            );
        let capability = op.info().capability();
        if !(capability.read && capability.write && capability.stat) {
            anyhow::bail!(
                "the remote store {} cannot read, write and look up what it holds",
                shown(uri)
            );
        }
        let numbered = !capability.list || std::env::var_os(WITHOUT_LISTING).is_some();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the remote store's runtime")?;
        Ok(Remote {
            op,
            runtime,
            numbered,
        })
    }

    /// Uploads what the state holds now, as pushed at `commit` in
    /// `project`, signed with `key` when there is one.
    pub fn push(
        &self,
        store: &Store,
        project: &str,
        commit: &str,
        key: Option<&SigningKey>,
    ) -> Result<PushReport> {
        let files = layout::state_files(store).context("cannot read the state directory")?;
        self.runtime.block_on(async {
            let missing: Vec<&Pushed> = {
                let mut seen = HashSet::new();
                let unique: Vec<&Pushed> = files.iter().filter(|f| seen.insert(f.blob)).collect();
                self.not_held(unique).await?
            };
            let uploads = futures::stream::iter(missing.into_iter().map(|file| async move {
                let Some(bytes) = layout::read_pushed(store, file) else {
                    return Ok((file.blob, None));
                };
                let len = bytes.len() as u64;
                self.op
                    .write(&layout::blob_path(&file.blob), bytes)
                    .await
                    .with_context(|| format!("cannot upload {}", file.path))?;
                Ok::<_, anyhow::Error>((file.blob, Some(len)))
            }))
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
            let mut gone = HashSet::new();
            let (mut uploaded, mut uploaded_bytes) = (0, 0);
            for upload in uploads {
                match upload? {
                    (blob, None) => {
                        gone.insert(blob);
                    }
                    (_, Some(len)) => {
                        uploaded += 1;
                        uploaded_bytes += len;
                    }
                }
            }
            // A file that changed since it was hashed is left out: the
            // manifest names only blobs the remote holds.
            let files: Vec<Pushed> = files
                .iter()
                .filter(|f| !gone.contains(&f.blob))
                .cloned()
                .collect();
            let manifest = PushManifest {
                project: project.to_owned(),
                commit: commit.to_owned(),
                pushed_at_ms: now_ms(),
                files,
            };
            let encoded = layout::encode(&manifest, key);
            let manifest_bytes = encoded.len() as u64;
            self.put_manifest(commit, encoded)
                .await
                .context("cannot upload the push's manifest")?;
            Ok(PushReport {
                files: manifest.files.len(),
                uploaded,
                uploaded_bytes,
                manifest_bytes,
            })
        })
    }

    /// Of `files`, those whose blob the store does not hold: from one
    /// listing, or looked up one by one where the store cannot list.
    async fn not_held<'f>(&self, files: Vec<&'f Pushed>) -> Result<Vec<&'f Pushed>> {
        if self.numbered {
            let held = futures::stream::iter(files.into_iter().map(|file| async move {
                let held = self.op.exists(&layout::blob_path(&file.blob)).await?;
                Ok::<_, anyhow::Error>((file, held))
            }))
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
            let mut missing = Vec::new();
            for item in held {
                let (file, held) = item.context("cannot look up the remote store's blobs")?;
                if !held {
                    missing.push(file);
                }
            }
            return Ok(missing);
        }
        let listed = self
            .listed(&layout::blobs_dir(), "blobs", layout::blob_of_name)
            .await?;
        Ok(files
            .into_iter()
            .filter(|f| !listed.contains(&f.blob))
            .collect())
    }

    /// What `parse` makes of the names listed in `dir` (`what` it holds,
    /// for the error); nothing where nothing was written yet.
    async fn listed<T: std::hash::Hash + Eq>(
        &self,
        dir: &str,
        what: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<HashSet<T>> {
        Ok(self
            .op
            .list(dir)
            .await
            .or_else(not_found_is_empty)
            .with_context(|| format!("cannot list the remote store's {what}"))?
            .iter()
            .filter_map(|e| parse(e.path()))
            .collect())
    }

    /// Writes a push's manifest: named by its content, or, where the store
    /// cannot list, under the first number of its commit no push took (a
    /// write that finds the number taken since tries the next).
    async fn put_manifest(&self, commit: &str, encoded: Vec<u8>) -> Result<()> {
        if !self.numbered {
            self.op
                .write(&layout::manifest_path(commit, &encoded), encoded)
                .await?;
            return Ok(());
        }
        let exclusive = self.op.info().capability().write_with_if_not_exists;
        for n in 0..NUMBERED_PUSHES {
            let path = layout::numbered_manifest_path(commit, n);
            if self.op.exists(&path).await? {
                continue;
            }
            let written = self
                .op
                .write_with(&path, encoded.clone())
                .if_not_exists(exclusive)
                .await;
            match written {
                Ok(_) => return Ok(()),
                // Another push took the number since: the next one.
                Err(_) if self.op.exists(&path).await? => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(anyhow!("{commit} has {NUMBERED_PUSHES} pushes already"))
    }

    /// The nearest commit of `ancestry` with a push, and the names of its
    /// pushes' manifests.
    async fn pushes(&self, ancestry: &[String]) -> Result<Option<(String, Vec<String>)>> {
        if self.numbered {
            for commit in ancestry.iter().take(NUMBERED_PROBE) {
                let mut names = Vec::new();
                while names.len() < NUMBERED_PUSHES {
                    let path = layout::numbered_manifest_path(commit, names.len());
                    if !self.op.exists(&path).await? {
                        break;
                    }
                    names.push(path);
                }
                if !names.is_empty() {
                    return Ok(Some((commit.clone(), names)));
                }
            }
            return Ok(None);
        }
        let pushed = self
            .listed(&layout::commits_dir(), "commits", layout::commit_of_dir)
            .await?;
        let Some(commit) = layout::nearest(&pushed, ancestry) else {
            return Ok(None);
        };
        let names = self
            .op
            .list(&layout::commit_dir(commit))
            .await
            .context("cannot list the remote store's pushes")?
            .into_iter()
            .filter(|entry| !entry.path().ends_with('/'))
            .map(|entry| entry.path().to_owned())
            .collect();
        Ok(Some((commit.to_owned(), names)))
    }

    /// Takes what the remote holds for the nearest pushed commit of
    /// `ancestry` (`HEAD` first), checked with `trusted` in `project`,
    /// into `into` (an empty directory: a state directory per push, then
    /// merged); at most `max_bytes` downloaded. `None` when no commit of
    /// `ancestry` was pushed, or every push of the nearest was taken before.
    fn fetch(
        &self,
        store: &Store,
        request: &FetchRequest<'_>,
        already: &HashSet<String>,
        into: &Path,
    ) -> Result<Option<Fetched>> {
        let FetchRequest {
            ancestry,
            trusted,
            project,
            limit: max_bytes,
            within,
            ..
        } = *request;
        let fetching = async {
            let Some((commit, names)) = self.pushes(ancestry).await? else {
                return Ok(None);
            };
            let commit = commit.as_str();
            let mut manifests = Vec::new();
            let mut taken = Vec::new();
            let mut refused = Vec::new();
            for name in names {
                if already.contains(&name) {
                    continue;
                }
                let size = self.op.stat(&name).await?.content_length();
                if size > layout::MAX_MANIFEST_BYTES {
                    return Err(anyhow!(
                        "a manifest of {commit} is over {} bytes",
                        layout::MAX_MANIFEST_BYTES
                    ));
                }
                let bytes = self.op.read(&name).await?.to_vec();
                // A push that cannot be checked is refused alone, and not
                // noted as taken: whoever can write one cannot keep the
                // others out, and a key trusted later takes it then.
                match layout::decode(&bytes, trusted, project, commit) {
                    Ok(manifest) => {
                        taken.push(name);
                        manifests.push(manifest);
                    }
                    Err(e) => refused.push(format!("a push of {commit} is refused: {e}")),
                }
            }
            if manifests.is_empty() {
                // Every push of the nearest commit taken already, or refused.
                return match refused.is_empty() {
                    true => Ok(None),
                    false => Err(anyhow!("{}", refused.join("; "))),
                };
            }
            // Each push whole in a directory of its own, merged one after
            // the other as shards are; a file the state already holds,
            // byte for byte, copied from it, and every other blob
            // downloaded once.
            let dirs: Vec<std::path::PathBuf> = (0..manifests.len())
                .map(|i| into.join(i.to_string()))
                .collect();
            let mut wanted: Vec<&Pushed> = Vec::new();
            let mut later: Vec<(usize, &Pushed)> = Vec::new();
            let mut asked = HashSet::new();
            for (i, manifest) in manifests.iter().enumerate() {
                for file in &manifest.files {
                    match layout::read_pushed(store, file) {
                        Some(bytes) => layout::materialize(&dirs[i], file, &bytes)
                            .with_context(|| format!("cannot write {}", file.path))?,
                        None => {
                            if asked.insert(file.blob) {
                                wanted.push(file);
                            }
                            later.push((i, file));
                        }
                    }
                }
            }
            let total: u64 = wanted.iter().map(|f| f.size).sum();
            if total > max_bytes {
                return Err(anyhow!(
                    "{commit}'s records are {total} bytes to download, over the limit of {max_bytes}"
                ));
            }
            let fetched = futures::stream::iter(wanted.iter().map(|file| async move {
                let bytes = self
                    .op
                    .read(&layout::blob_path(&file.blob))
                    .await
                    .with_context(|| format!("cannot download {}", file.path))?
                    .to_vec();
                if !layout::blob_holds(file, &bytes) {
                    return Err(anyhow!(
                        "the remote's copy of {} is not what its push named",
                        file.path
                    ));
                }
                Ok((file.blob, bytes))
            }))
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
            let mut blobs = std::collections::HashMap::new();
            for item in fetched {
                let (blob, bytes) = item?;
                blobs.insert(blob, bytes);
            }
            for (i, file) in later {
                layout::materialize(&dirs[i], file, &blobs[&file.blob])
                    .with_context(|| format!("cannot write {}", file.path))?;
            }
            let downloaded = blobs.len();
            let downloaded_bytes = blobs.values().map(|b| b.len() as u64).sum();
            Ok(Some(Fetched {
                commit: commit.to_owned(),
                pushes: dirs,
                taken,
                refused,
                downloaded,
                downloaded_bytes,
            }))
        };
        self.runtime.block_on(async {
            tokio::time::timeout(within, fetching)
                .await
                .unwrap_or_else(|_| {
                    Err(anyhow!(
                        "the remote store did not answer within {:.0}s",
                        within.as_secs_f64()
                    ))
                })
        })
    }
}

/// A prefix nothing was written under yet lists as nothing.
fn not_found_is_empty(e: opendal::Error) -> Result<Vec<opendal::Entry>, opendal::Error> {
    if e.kind() == opendal::ErrorKind::NotFound {
        Ok(Vec::new())
    } else {
        Err(e)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
