//! The remote store (`history push`, `history fetch`), on a directory
//! (`file://`): what CI pushed reaches a fresh clone, checked; what cannot
//! be checked is refused whole.

use crate::support::{Fixture, clone_trusting, keygen};
use std::collections::BTreeSet;
use std::path::Path;

fn selected(f: &Fixture) -> BTreeSet<String> {
    f.selected(&[])
        .into_iter()
        .map(|(label, _)| label)
        .collect()
}

fn uri(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// `history push` with `secret` (if any); its output.
fn push(f: &Fixture, remote: &str, secret: Option<&str>) -> String {
    let env: Vec<(&str, &str)> = secret
        .map(|s| vec![("EKSTAZI_SIGNING_KEY", s)])
        .unwrap_or_default();
    let run = f.run_with(&["history", "push", "--remote", remote], &env);
    assert_eq!(run.code(), Some(0), "{run:?}");
    run.stdout
}

/// The number before `word` in `text` (`12 uploaded`).
fn count_before(text: &str, word: &str) -> usize {
    let at = text
        .find(word)
        .unwrap_or_else(|| panic!("{word:?} in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count before {word:?} in {text}"))
}

#[test]
fn a_fresh_clone_fetches_what_ci_pushed_and_runs_nothing() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    let (secret, public) = keygen(&f);
    let store = tempfile::tempdir().unwrap();
    let remote = uri(store.path());
    let first = push(&f, &remote, Some(&secret));
    assert!(first.contains(&format!("signed by {public}")), "{first}");
    let files = count_before(&first, "files at");
    assert_eq!(count_before(&first, "uploaded"), files, "{first}");

    // A clone that names the remote fetches before it selects, unless
    // told not to; once taken, a push is not fetched again.
    let (_dir, g) = clone_trusting(&f, &public, false);
    g.write(
        ".config/ekstazi.toml",
        &format!("[history]\ntrusted-keys = [\"{public}\"]\nremote = \"{remote}\"\n"),
    );
    let everything: BTreeSet<String> = g
        .selected(&["--offline"])
        .into_iter()
        .map(|(label, _)| label)
        .collect();
    assert!(!everything.is_empty());
    let fetching = g.run(&["list"]);
    assert!(fetching.stderr.contains("fetched 1 push"), "{fetching:?}");
    assert!(fetching.stdout.contains("0 of"), "{fetching:?}");
    let again = g.run(&["list"]);
    assert!(!again.stderr.contains("fetched"), "{again:?}");
    assert!(selected(&g).is_empty());

    // Pushing again moves only what changed: nothing, then what one run
    // at a new commit wrote.
    let again = push(&f, &remote, Some(&secret));
    assert_eq!(count_before(&again, "uploaded"), 0, "{again}");
    f.edit("src/price.rs", "    amount\n", "    amount + 1\n");
    f.edit(
        "src/lib.rs",
        "assert_eq!(price::price(10), 10);",
        "assert_eq!(price::price(10), 11);",
    );
    f.commit("raise the price");
    f.test_ok(&[]);
    let next = push(&f, &remote, Some(&secret));
    let uploaded = count_before(&next, "uploaded");
    assert!(
        uploaded > 0 && uploaded < count_before(&next, "files at"),
        "{next}"
    );
}

#[test]
fn what_the_remote_cannot_vouch_for_is_refused_whole() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    let base = f.git(&["rev-parse", "HEAD"]);
    let head = f.commit_empty("second");
    f.test_ok(&[]);
    let (secret, public) = keygen(&f);
    let (other_secret, _) = keygen(&f);
    let (_dir, g) = clone_trusting(&f, &public, false);
    let everything = selected(&g);
    let refused = |remote: &str, args: &[&str], why: &str| {
        let mut all = vec!["history", "fetch", "--remote", remote];
        all.extend_from_slice(args);
        let run = g.run(&all);
        assert_ne!(run.code(), Some(0), "{run:?}");
        assert!(run.stderr.contains(why), "{why:?} in {run:?}");
        assert_eq!(selected(&g), everything, "nothing of it was kept");
    };

    // Not signed, or signed by a key the project does not list.
    let unsigned = tempfile::tempdir().unwrap();
    push(&f, &uri(unsigned.path()), None);
    refused(&uri(unsigned.path()), &[], "not signed");
    let untrusted = tempfile::tempdir().unwrap();
    push(&f, &uri(untrusted.path()), Some(&other_secret));
    refused(&uri(untrusted.path()), &[], "not among the trusted keys");

    let store = tempfile::tempdir().unwrap();
    let remote = uri(store.path());
    push(&f, &remote, Some(&secret));
    // More to download than allowed.
    refused(&remote, &["--limit", "10"], "over the limit");
    // A blob changed on the remote.
    let blobs: Vec<_> = walkdir::WalkDir::new(store.path())
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file() && e.path().to_string_lossy().contains("/blobs/"))
        .map(|e| e.into_path())
        .collect();
    let victim = blobs
        .iter()
        .max_by_key(|p| p.metadata().unwrap().len())
        .unwrap();
    let original = std::fs::read(victim).unwrap();
    let mut forged = original.clone();
    forged[0] ^= 1;
    std::fs::write(victim, &forged).unwrap();
    refused(&remote, &[], "not what its push named");
    std::fs::write(victim, &original).unwrap();
    // A push's manifest moved under another commit of the same history.
    let commits = walkdir::WalkDir::new(store.path())
        .into_iter()
        .map(Result::unwrap)
        .find(|e| e.file_type().is_dir() && e.file_name() == "commits")
        .unwrap()
        .into_path();
    std::fs::rename(commits.join(&head), commits.join(&base)).unwrap();
    refused(&remote, &[], "but is filed under");
    std::fs::rename(commits.join(&base), commits.join(&head)).unwrap();
    // A manifest changed in the store: one byte of its list of files.
    let manifest = std::fs::read_dir(commits.join(&head))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let kept = std::fs::read(&manifest).unwrap();
    let mut tampered = kept.clone();
    *tampered.last_mut().unwrap() ^= 1;
    std::fs::write(&manifest, &tampered).unwrap();
    refused(&remote, &[], "does not match");
    std::fs::write(&manifest, &kept).unwrap();
    // A push cut short before its manifest: as if it never began.
    std::fs::remove_file(&manifest).unwrap();
    std::fs::remove_dir(commits.join(&head)).unwrap();
    let run = g.run(&["history", "fetch", "--remote", &remote]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stdout.contains("holds no push"), "{run:?}");
    assert_eq!(selected(&g), everything);
    // Whole again, it is taken; a forged push beside it is refused
    // alone, and said so.
    std::fs::create_dir(commits.join(&head)).unwrap();
    std::fs::write(&manifest, kept).unwrap();
    std::fs::write(commits.join(&head).join("0".repeat(64)), b"EKRP forged").unwrap();
    let run = g.run(&["history", "fetch", "--remote", &remote]);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("is refused"), "{run:?}");
    assert!(selected(&g).is_empty(), "{run:?}");
}

#[test]
fn two_pushes_at_once_both_reach_the_remote_and_a_store_that_is_down_costs_nothing() {
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    // Two shards of one commit, each with its own state, pushed at once.
    for m in 1..=2 {
        let partition = format!("count:{m}/2");
        let dir = format!("shard-{m}");
        f.test_ok(&["--forceall", "--partition", &partition, "--state-dir", &dir]);
    }
    let store = tempfile::tempdir().unwrap();
    let remote = uri(store.path());
    let pushes: Vec<_> = (1..=2)
        .map(|m| {
            f.command(&[
                "history",
                "--state-dir",
                &format!("shard-{m}"),
                "push",
                "--remote",
                &remote,
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
        })
        .collect();
    for mut push in pushes {
        assert!(push.wait().unwrap().success());
    }
    let other = tempfile::tempdir().unwrap();
    crate::support::copy_tree(f.path(), other.path(), false);
    let g = Fixture::at(other.path());
    let fetch = g.run(&["history", "fetch", "--remote", &remote]);
    assert_eq!(fetch.code(), Some(0), "{fetch:?}");
    assert!(fetch.stdout.contains("fetched 2 pushes"), "{fetch:?}");
    assert!(selected(&g).is_empty(), "both shards' records: {fetch:?}");

    // A run whose remote store is down warns and selects on the records
    // at hand.
    g.write(
        ".config/ekstazi.toml",
        "[history]\nremote = \"s3://bucket?endpoint=http://127.0.0.1:9&region=us-east-1&access_key_id=a&secret_access_key=b\"\n",
    );
    let run = g.test_ok(&[]);
    assert!(run.stderr.contains("nothing was fetched"), "{run:?}");
    assert!(run.ran().is_empty(), "{run:?}");

    // A store nobody answers for: an error, quickly, and the state as it was.
    let down = "s3://bucket?endpoint=http://127.0.0.1:9&region=us-east-1&access_key_id=a&secret_access_key=b";
    let clock = std::time::Instant::now();
    let run = g.run(&["history", "fetch", "--remote", down]);
    assert_ne!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("nothing was taken"), "{run:?}");
    assert!(clock.elapsed().as_secs() < 60, "{:?}", clock.elapsed());
    assert!(selected(&g).is_empty());
}

/// An S3-compatible server (moto's, from PyPI: `tests/services/s3-server`),
/// on a free port of this machine, with one bucket; killed when dropped.
struct S3Server {
    child: std::process::Child,
    port: u16,
}

impl S3Server {
    fn start() -> S3Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/services/s3-server");
        let child = std::process::Command::new(script)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = S3Server { child, port };
        // The first start installs it: minutes on a slow machine.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        while server.request("PUT", "/ekstazi") != Some(200) {
            assert!(
                std::time::Instant::now() < deadline,
                "the S3 server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        server
    }

    /// A bare HTTP request; its status.
    fn request(&self, method: &str, path: &str) -> Option<u16> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).ok()?;
        reply.split_whitespace().nth(1)?.parse().ok()
    }

    fn uri(&self) -> String {
        format!(
            "s3://ekstazi/team?endpoint=http://127.0.0.1:{}&region=us-east-1",
            self.port
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The credentials the S3 service reads, as a team's CI would set them.
const CREDENTIALS: [(&str, &str); 2] = [
    ("AWS_ACCESS_KEY_ID", "ekstazi"),
    ("AWS_SECRET_ACCESS_KEY", "ekstazi-secret"),
];

#[test]
fn an_s3_store_carries_signed_records_and_its_loss_costs_a_warning() {
    let mut server = S3Server::start();
    let remote = server.uri();
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    let (secret, public) = keygen(&f);
    let mut env = CREDENTIALS.to_vec();
    env.push(("EKSTAZI_SIGNING_KEY", &secret));
    let pushed = f.run_with(&["history", "push", "--remote", &remote], &env);
    assert_eq!(pushed.code(), Some(0), "{pushed:?}");
    assert!(pushed.stdout.contains("signed by"), "{pushed:?}");
    // The URI's options are not printed: a team may put a key there.
    assert!(!pushed.stdout.contains("endpoint="), "{pushed:?}");

    let (_dir, g) = clone_trusting(&f, &public, false);
    g.write(
        ".config/ekstazi.toml",
        &format!("[history]\ntrusted-keys = [\"{public}\"]\nremote = \"{remote}\"\n"),
    );
    let listed = g.run_with(&["list"], &CREDENTIALS);
    assert!(listed.stderr.contains("fetched 1 push"), "{listed:?}");
    assert!(g.selected_with(&[], &CREDENTIALS).is_empty(), "{listed:?}");

    // The server goes away: a fresh clone warns and runs everything.
    let _ = server.child.kill();
    let _ = server.child.wait();
    let (_dir, h) = clone_trusting(&f, &public, false);
    h.write(
        ".config/ekstazi.toml",
        &format!("[history]\ntrusted-keys = [\"{public}\"]\nremote = \"{remote}\"\n"),
    );
    let run = h.run_with(&["test"], &CREDENTIALS);
    assert_eq!(run.code(), Some(0), "{run:?}");
    assert!(run.stderr.contains("nothing was fetched"), "{run:?}");
    assert!(!run.ran().is_empty(), "{run:?}");
}

/// A store that cannot list what it holds (the GitHub Actions cache
/// service), played by a directory: blobs looked up by name, a commit's
/// pushes numbered.
#[test]
fn a_store_that_cannot_list_finds_blobs_by_name_and_pushes_by_number() {
    const WITHOUT_LISTING: (&str, &str) = ("EKSTAZI_REMOTE_WITHOUT_LISTING", "1");
    let f = Fixture::new("history").in_git();
    f.test_ok(&[]);
    let (secret, public) = keygen(&f);
    let store = tempfile::tempdir().unwrap();
    let remote = uri(store.path());
    let env = [WITHOUT_LISTING, ("EKSTAZI_SIGNING_KEY", &secret)];
    let push = |env: &[(&str, &str)]| {
        let run = f.run_with(&["history", "push", "--remote", &remote], env);
        assert_eq!(run.code(), Some(0), "{run:?}");
        run.stdout
    };
    let first = push(&env);
    assert!(count_before(&first, "uploaded") > 0, "{first}");
    let again = push(&env);
    assert_eq!(count_before(&again, "uploaded"), 0, "{again}");
    let head = f.git(&["rev-parse", "HEAD"]);
    let numbered: BTreeSet<String> = walkdir::WalkDir::new(store.path())
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file() && e.path().to_string_lossy().contains(&head))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        numbered,
        ["0", "1"].map(String::from).into(),
        "{numbered:?}"
    );

    let (_dir, g) = clone_trusting(&f, &public, false);
    let fetch = g.run_with(
        &["history", "fetch", "--remote", &remote],
        &[WITHOUT_LISTING],
    );
    assert_eq!(fetch.code(), Some(0), "{fetch:?}");
    assert!(fetch.stdout.contains("fetched 2 pushes"), "{fetch:?}");
    assert!(selected(&g).is_empty(), "{fetch:?}");
}
