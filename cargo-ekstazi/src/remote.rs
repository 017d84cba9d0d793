//! The remote store's transport: `history push` and `history fetch` over
//! OpenDAL (`s3://`, `gcs://`, `azblob://`, `ghac://`, `webdav://`,
//! `file://`, ...: the URI names the service, each service's usual
//! environment variables its credentials). What a push holds and whether a
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
}

/// What a push moved.
pub struct PushReport {
    pub files: usize,
    pub uploaded: usize,
    pub uploaded_bytes: u64,
    pub manifest_bytes: u64,
}

/// What a fetch took, before merging.
pub struct Fetched {
    pub commit: String,
    /// Each push, as a state directory of its own to merge.
    pub pushes: Vec<std::path::PathBuf>,
    pub downloaded: usize,
    pub downloaded_bytes: u64,
}

impl Remote {
    /// The store `uri` names, its requests retried and each given at most
    /// `timeout`.
    pub fn open(uri: &str, timeout: Duration) -> Result<Remote> {
        opendal::install_default();
        let op = opendal::Operator::from_uri(uri)
            .with_context(|| format!("cannot use the remote store {uri}"))?
            .layer(opendal::layers::RetryLayer::new().with_max_times(2))
            .layer(
                opendal::layers::TimeoutLayer::new()
                    .with_timeout(timeout)
                    .with_io_timeout(timeout),
            );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the remote store's runtime")?;
        Ok(Remote { op, runtime })
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
            let listed = self.listed_blobs().await?;
            let missing: Vec<&Pushed> = {
                let mut seen = HashSet::new();
                files
                    .iter()
                    .filter(|f| !listed.contains(&f.blob) && seen.insert(f.blob))
                    .collect()
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
            self.op
                .write(&layout::manifest_path(commit, &encoded), encoded)
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

    /// The blobs the remote holds.
    async fn listed_blobs(&self) -> Result<HashSet<[u8; 32]>> {
        let entries = self
            .op
            .list(&layout::blobs_dir())
            .await
            .or_else(not_found_is_empty)
            .context("cannot list the remote store's blobs")?;
        Ok(entries
            .iter()
            .filter_map(|e| layout::blob_of_name(e.path()))
            .collect())
    }

    /// Takes what the remote holds for the nearest pushed commit of
    /// `ancestry` (`HEAD` first), checked with `trusted` in `project`,
    /// into `into` (an empty directory: a state directory per push, then
    /// merged); at most `max_bytes` downloaded. `None` when no commit of
    /// `ancestry` was pushed.
    pub fn fetch(
        &self,
        store: &Store,
        ancestry: &[String],
        trusted: &[PublicKey],
        project: &str,
        into: &Path,
        max_bytes: u64,
    ) -> Result<Option<Fetched>> {
        self.runtime.block_on(async {
            let pushed: HashSet<String> = self
                .op
                .list(&layout::commits_dir())
                .await
                .or_else(not_found_is_empty)
                .context("cannot list the remote store's commits")?
                .iter()
                .filter_map(|e| layout::commit_of_dir(e.path()))
                .collect();
            let Some(commit) = layout::nearest(&pushed, ancestry) else {
                return Ok(None);
            };
            let mut manifests = Vec::new();
            for entry in self
                .op
                .list(&layout::commit_dir(commit))
                .await
                .context("cannot list the remote store's pushes")?
            {
                if entry.path().ends_with('/') {
                    continue;
                }
                let size = self.op.stat(entry.path()).await?.content_length();
                if size > layout::MAX_MANIFEST_BYTES {
                    return Err(anyhow!(
                        "a manifest of {commit} is over {} bytes",
                        layout::MAX_MANIFEST_BYTES
                    ));
                }
                let bytes = self.op.read(entry.path()).await?.to_vec();
                let manifest = layout::decode(&bytes, trusted, project, commit)
                    .map_err(|e| anyhow!("a push of {commit} is refused: {e}"))?;
                manifests.push(manifest);
            }
            // Each push whole in a directory of its own, merged one after
            // the other as shards are; a file the state already holds,
            // byte for byte, copied from it, and every other blob
            // downloaded once.
            let dirs: Vec<std::path::PathBuf> =
                (0..manifests.len()).map(|i| into.join(i.to_string())).collect();
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
                downloaded,
                downloaded_bytes,
            }))
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
