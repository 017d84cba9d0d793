//! Signatures a reader checks without a secret: Ed25519, over what a CI
//! hands to others (an exported state, `history export`; a push to a
//! remote store, `history push`).
//!
//! A keyed seal ([`super::sealed`]) needs its secret to be checked, so a
//! job that cannot be given the secret (a fork's pull request, a laptop)
//! can trust none of a keyed state. A signature is checked with a public
//! key: CI signs with its secret key (`EKSTAZI_SIGNING_KEY`), and a project
//! lists the public keys it trusts (`[history] trusted-keys` in
//! `.config/ekstazi.toml`).
//!
//! What is signed, so that a signature cannot be moved to something else:
//!
//! ```text
//! "cargo-ekstazi signature 1" NUL  kind NUL  project NUL  blake3(subject)
//! ```
//!
//! - the kind of thing signed (`archive`, `push`), so that a signature on one kind
//!   never vouches for another;
//! - the project: the root commits of the repository it was made in
//!   ([`project_of_roots`]), so that a signature made for one project is
//!   refused in another;
//! - the subject's digest: any change to the signed bytes is refused.
//!
//! The signature file (`<file>.sig`): `EKSG`, a version byte, then the
//! signer's public key, the project and the subject's digest as postcard,
//! then the 64-byte signature. It is not sealed: a seal keyed with a
//! secret would make it unreadable to exactly the readers it is for, and
//! the signature already covers everything in it.

use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a signature can be made over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole exported state (`history export`).
    Archive,
    /// A push's manifest in a remote store (`storage::remote`).
    Push,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Archive => "archive",
            Kind::Push => "push",
        }
    }
}

/// A secret key to sign with.
pub struct SigningKey(ed25519_dalek::SigningKey);

/// A public key: what a project lists as trusted, written
/// `ed25519:<64 hex digits>`. Kept as its 32 bytes, checked to be a point
/// of the curve when made; expanded only to verify.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKey([u8; 32]);

const PUBLIC_PREFIX: &str = "ed25519:";

/// A key that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// A secret that is not 64 hexadecimal digits.
    #[error(
        "a secret signing key is 64 hexadecimal digits (`cargo ekstazi history keygen` makes one)"
    )]
    BadSecret,
    /// Not `ed25519:` and 64 hexadecimal digits of a point of the curve:
    /// the text given.
    #[error("`{0}` is not a public key: `ed25519:` and 64 hexadecimal digits")]
    BadPublic(String),
    /// The system gave no randomness for a new key: why.
    #[error("cannot draw a random key: {0}")]
    NoRandomness(String),
}

impl SigningKey {
    /// A new key, from the system's randomness.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::NoRandomness(e.to_string()))?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The key `EKSTAZI_SIGNING_KEY` holds: its 32-byte secret in hex.
    pub fn parse(secret: &str) -> Result<SigningKey, KeyError> {
        let mut seed = [0u8; 32];
        hex::decode_to_slice(secret.trim(), &mut seed).map_err(|_| KeyError::BadSecret)?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The secret in hex, as [`SigningKey::parse`] reads it.
    pub fn secret_hex(&self) -> String {
        hex::encode(self.0.to_bytes())
    }

    /// Its public key, the one a project lists to trust it.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }
}

impl PublicKey {
    /// A key written `ed25519:<64 hex digits>` (as [`PublicKey`] displays
    /// it); refused unless it is a point of the curve.
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let bad = || KeyError::BadPublic(text.to_owned());
        let digits = text.trim().strip_prefix(PUBLIC_PREFIX).ok_or_else(bad)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| bad())?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| bad())?;
        Ok(PublicKey(bytes))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", hex::encode(self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A project's identity in a signature: its repository's root commits,
/// sorted and joined (a fork shares them; another project does not).
pub fn project_of_roots(roots: &[String]) -> String {
    let mut roots = roots.to_vec();
    roots.sort();
    roots.dedup();
    roots.join(",")
}

const MAGIC: &[u8; 4] = b"EKSG";
const VERSION: u8 = 1;
const DOMAIN: &[u8] = b"cargo-ekstazi signature 1";

/// What a signature file says, besides the signature itself.
#[derive(Serialize, Deserialize)]
struct Claim {
    signer: PublicKey,
    /// Empty when it was made outside a repository.
    project: String,
    subject: [u8; 32],
}

fn message(kind: Kind, project: &str, subject: &[u8; 32]) -> Vec<u8> {
    let mut message = Vec::with_capacity(DOMAIN.len() + project.len() + 48);
    for part in [DOMAIN, kind.name().as_bytes(), project.as_bytes()] {
        message.extend_from_slice(part);
        message.push(0);
    }
    message.extend_from_slice(subject);
    message
}

/// The signature file for `subject` (the digest of the signed bytes) of
/// `kind`, made in `project`.
pub fn sign(key: &SigningKey, kind: Kind, project: &str, subject: &blake3::Hash) -> Vec<u8> {
    let claim = Claim {
        signer: key.public(),
        project: project.to_owned(),
        subject: *subject.as_bytes(),
    };
    let signature = key.0.sign(&message(kind, project, &claim.subject));
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    out.extend(postcard::to_stdvec(&claim).expect("a claim serialises"));
    out.extend_from_slice(&signature.to_bytes());
    out
}

/// Why a signature was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// Not a signature file's magic, version, claim and 64-byte signature.
    #[error("the signature file is not one cargo-ekstazi writes, or is damaged")]
    Malformed,
    /// Made for other bytes, or not by the key it names.
    #[error("the signature does not match: the file or its signature was changed after signing")]
    BadSignature,
    /// Made by a key the project does not trust: that key.
    #[error("signed by {0}, which is not among the trusted keys ([history] trusted-keys)")]
    Untrusted(PublicKey),
    /// Made in another project.
    #[error("signed for another project (root commits {signed:?}; here {here:?})")]
    OtherProject {
        /// The project the signature names.
        signed: String,
        /// This project.
        here: String,
    },
}

/// Checks `signature` (a file [`sign`] wrote) for the bytes whose digest is
/// `subject`, of `kind`, in `project`: by one of `trusted`, or, when
/// `trusted` is empty, by whoever signed it (the file is then intact, not
/// vouched for). Returns the signer.
pub fn check(
    signature: &[u8],
    trusted: &[PublicKey],
    kind: Kind,
    project: &str,
    subject: &blake3::Hash,
) -> Result<PublicKey, SignatureError> {
    let body = signature
        .strip_prefix(MAGIC.as_slice())
        .and_then(|rest| rest.strip_prefix(&[VERSION]))
        .ok_or(SignatureError::Malformed)?;
    let (claim, rest): (Claim, &[u8]) =
        postcard::take_from_bytes(body).map_err(|_| SignatureError::Malformed)?;
    let bytes: [u8; 64] = rest.try_into().map_err(|_| SignatureError::Malformed)?;
    let signature = ed25519_dalek::Signature::from_bytes(&bytes);
    // The claim is checked against what is here before the signature:
    // a signature that holds for another subject or project says nothing
    // of this one.
    if claim.subject != *subject.as_bytes() {
        return Err(SignatureError::BadSignature);
    }
    // A claim decoded from bytes names any 32 bytes: a key off the curve
    // signs nothing.
    ed25519_dalek::VerifyingKey::from_bytes(&claim.signer.0)
        .and_then(|key| {
            key.verify_strict(&message(kind, &claim.project, &claim.subject), &signature)
        })
        .map_err(|_| SignatureError::BadSignature)?;
    if !trusted.is_empty() && !trusted.contains(&claim.signer) {
        return Err(SignatureError::Untrusted(claim.signer));
    }
    if claim.project != project {
        return Err(SignatureError::OtherProject {
            signed: claim.project,
            here: project.to_owned(),
        });
    }
    Ok(claim.signer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&[byte; 32]))
    }

    #[test]
    fn a_signature_holds_for_its_subject_project_and_signer_only() {
        let (ci, other) = (key(1), key(2));
        let subject = blake3::hash(b"the archive");
        let signed = sign(&ci, Kind::Archive, "root", &subject);
        let trusted = [ci.public()];
        assert_eq!(
            check(&signed, &trusted, Kind::Archive, "root", &subject),
            Ok(ci.public())
        );
        // Any signer, when none is listed: the file is intact.
        assert_eq!(
            check(&signed, &[], Kind::Archive, "root", &subject),
            Ok(ci.public())
        );
        assert_eq!(
            check(&signed, &[other.public()], Kind::Archive, "root", &subject),
            Err(SignatureError::Untrusted(ci.public()))
        );
        assert_eq!(
            check(
                &signed,
                &trusted,
                Kind::Archive,
                "root",
                &blake3::hash(b"x")
            ),
            Err(SignatureError::BadSignature)
        );
        assert!(matches!(
            check(&signed, &trusted, Kind::Archive, "another", &subject),
            Err(SignatureError::OtherProject { .. })
        ));
    }

    #[test]
    fn a_changed_byte_anywhere_in_the_signature_file_is_refused() {
        let ci = key(1);
        let subject = blake3::hash(b"the archive");
        let signed = sign(&ci, Kind::Archive, "root", &subject);
        for i in 0..signed.len() {
            let mut forged = signed.clone();
            forged[i] ^= 0x01;
            assert!(
                check(&forged, &[ci.public()], Kind::Archive, "root", &subject).is_err(),
                "byte {i}"
            );
        }
        assert!(
            check(
                &signed[..signed.len() - 1],
                &[],
                Kind::Archive,
                "root",
                &subject
            )
            .is_err()
        );
        assert!(check(b"", &[], Kind::Archive, "root", &subject).is_err());
    }

    #[test]
    fn a_project_named_in_the_claim_cannot_be_swapped_for_another() {
        // The claim names the project the signer signed: rewriting it to
        // the reader's breaks the signature.
        let ci = key(1);
        let subject = blake3::hash(b"the archive");
        let signed = sign(&ci, Kind::Archive, "aaaa", &subject);
        let at = signed.windows(4).position(|w| w == b"aaaa").unwrap();
        let mut forged = signed.clone();
        forged[at..at + 4].copy_from_slice(b"bbbb");
        assert_eq!(
            check(&forged, &[ci.public()], Kind::Archive, "bbbb", &subject),
            Err(SignatureError::BadSignature)
        );
    }

    #[test]
    fn keys_round_trip_through_their_text() {
        let ci = key(7);
        assert_eq!(
            SigningKey::parse(&ci.secret_hex()).unwrap().public(),
            ci.public()
        );
        let text = ci.public().to_string();
        assert!(
            text.starts_with("ed25519:") && text.len() == 8 + 64,
            "{text}"
        );
        assert_eq!(PublicKey::parse(&text), Ok(ci.public()));
        assert!(PublicKey::parse(&text[8..]).is_err());
        assert!(PublicKey::parse("ed25519:zz").is_err());
        assert!(SigningKey::parse("12").is_err());
        assert_ne!(
            SigningKey::generate().unwrap().public(),
            SigningKey::generate().unwrap().public()
        );
    }

    #[test]
    fn the_project_is_the_sorted_set_of_root_commits() {
        assert_eq!(
            project_of_roots(&["b".into(), "a".into(), "b".into()]),
            "a,b"
        );
    }
}
