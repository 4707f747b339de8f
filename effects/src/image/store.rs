//! Lazaret's content-addressed blob store: `<root>/blobs/sha256/<hex>`, laid
//! out as the blob part of an OCI image layout so the preparer can read it
//! directly. Every blob is hashed while it is written and published by rename
//! only when its digest and size match, so a blob present in the store is
//! verified content.

use sha2::Digest as _;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

type Sha256Hasher = sha2::Sha256;

/// Bytes between two progress reports while copying a blob.
const PROGRESS_STEP: u64 = 1 << 20;

/// A `sha256:<64 hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256(String);

impl Sha256 {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(text: &str) -> Result<Sha256, StoreError> {
        match text.strip_prefix("sha256:") {
            Some(h)
                if h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(Sha256(h.to_owned()))
            }
            _ => Err(StoreError::BadDigest {
                digest: text.to_owned(),
            }),
        }
    }
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256 {
        Sha256(hex::encode(Sha256Hasher::digest(bytes)))
    }
    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// Errors of the blob store; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A digest that is not `sha256:<64 hex>`.
    #[error(
        "unsupported or malformed digest {digest:?} (expected sha256:<64 lowercase hex digits>)"
    )]
    BadDigest { digest: String },
    /// Creating the store directories failed.
    #[error("cannot create blob store directory {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    /// Writing the staged blob failed.
    #[error("cannot write blob {digest} to {path}: {source}")]
    Write {
        digest: Sha256,
        path: PathBuf,
        source: io::Error,
    },
    /// Reading the blob source failed.
    #[error("cannot read blob {digest} from {from}: {source}")]
    Source {
        digest: Sha256,
        from: String,
        source: io::Error,
    },
    /// The content is larger than its descriptor says.
    #[error("blob {digest} from {from} is larger than its descriptor's {size} bytes")]
    TooLarge {
        digest: Sha256,
        from: String,
        size: u64,
    },
    /// The content does not match its digest or size.
    #[error("blob from {from} does not match its descriptor: expected {expected} ({size} bytes), got {actual} ({actual_size} bytes)")]
    Mismatch {
        from: String,
        expected: Sha256,
        size: u64,
        actual: Sha256,
        actual_size: u64,
    },
    /// Publishing the verified blob failed.
    #[error("cannot publish blob {digest} at {path}: {source}")]
    Publish {
        digest: Sha256,
        path: PathBuf,
        source: io::Error,
    },
    /// Reading a stored blob failed.
    #[error("cannot read stored blob {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// The blob store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
}

impl BlobStore {
    /// Opens (creating if needed) the store under `root`.
    pub fn open(root: &Path) -> Result<BlobStore, StoreError> {
        for d in [root.join("blobs/sha256"), root.join("incoming")] {
            fs::create_dir_all(&d).map_err(|source| StoreError::Create {
                path: d.clone(),
                source,
            })?;
        }
        Ok(BlobStore {
            root: root.to_owned(),
        })
    }

    /// The store root (its `blobs/` is an OCI layout's blob directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where blob `d` lives.
    pub fn path(&self, d: &Sha256) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    /// Whether the verified blob `d` of `size` bytes is present.
    pub fn contains(&self, d: &Sha256, size: u64) -> bool {
        fs::symlink_metadata(self.path(d)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// Copies `source` into the store, verifying `digest` and `size` on the
    /// way; `progress` gets the bytes copied so far. Returns the blob's path.
    pub fn put(
        &self,
        digest: &Sha256,
        size: u64,
        from: &str,
        source: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
    ) -> Result<PathBuf, StoreError> {
        let final_path = self.path(digest);
        let staged =
            self.root
                .join("incoming")
                .join(format!("{}.{}", digest.hex(), std::process::id()));
        let result = self.stage(digest, size, from, source, progress, &staged);
        let result = result.and_then(|()| {
            fs::rename(&staged, &final_path).map_err(|source| StoreError::Publish {
                digest: digest.clone(),
                path: final_path.clone(),
                source,
            })
        });
        if result.is_err() {
            let _ = fs::remove_file(&staged);
        }
        result.map(|()| final_path)
    }

    fn stage(
        &self,
        digest: &Sha256,
        size: u64,
        from: &str,
        source: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
        staged: &Path,
    ) -> Result<(), StoreError> {
        let werr = |source| StoreError::Write {
            digest: digest.clone(),
            path: staged.to_owned(),
            source,
        };
        let mut out = File::create(staged).map_err(werr)?;
        let mut hasher = Sha256Hasher::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut done: u64 = 0;
        let mut reported: u64 = 0;
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(StoreError::Source {
                        digest: digest.clone(),
                        from: from.to_owned(),
                        source,
                    })
                }
            };
            done += n as u64;
            if done > size {
                return Err(StoreError::TooLarge {
                    digest: digest.clone(),
                    from: from.to_owned(),
                    size,
                });
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(werr)?;
            if done - reported >= PROGRESS_STEP {
                reported = done;
                progress(done);
            }
        }
        out.sync_all().map_err(werr)?;
        progress(done);
        let actual = Sha256(hex::encode(hasher.finalize()));
        if &actual != digest || done != size {
            return Err(StoreError::Mismatch {
                from: from.to_owned(),
                expected: digest.clone(),
                size,
                actual,
                actual_size: done,
            });
        }
        Ok(())
    }

    /// Reads a small stored blob (manifest, config) and re-verifies it.
    pub fn read_verified(&self, d: &Sha256) -> Result<Vec<u8>, StoreError> {
        let path = self.path(d);
        let bytes = fs::read(&path).map_err(|source| StoreError::Read {
            path: path.clone(),
            source,
        })?;
        let actual = Sha256::of(&bytes);
        if &actual != d {
            return Err(StoreError::Mismatch {
                from: path.display().to_string(),
                expected: d.clone(),
                size: bytes.len() as u64,
                actual,
                actual_size: bytes.len() as u64,
            });
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_put_and_refused_mismatch() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let store = BlobStore::open(dir.path()).map_err(|e| e.to_string())?;
        let data = b"hello blob".to_vec();
        let d = Sha256::of(&data);
        let mut seen = Vec::new();
        let p = store
            .put(
                &d,
                data.len() as u64,
                "test",
                &mut data.as_slice(),
                &mut |n| seen.push(n),
            )
            .map_err(|e| e.to_string())?;
        assert_eq!(fs::read(&p).map_err(|e| e.to_string())?, data);
        assert_eq!(seen, vec![10]);
        assert!(store.contains(&d, 10));
        assert_eq!(store.read_verified(&d).map_err(|e| e.to_string())?, data);

        let wrong = Sha256::of(b"other");
        let err = store
            .put(&wrong, 10, "test", &mut data.as_slice(), &mut |_| {})
            .map(|_| ());
        assert!(matches!(err, Err(StoreError::Mismatch { .. })), "{err:?}");
        assert!(!store.contains(&wrong, 10));
        let err = store
            .put(&d, 5, "test", &mut data.as_slice(), &mut |_| {})
            .map(|_| ());
        assert!(matches!(err, Err(StoreError::TooLarge { .. })), "{err:?}");
        // Nothing half-written is left behind.
        let incoming = fs::read_dir(dir.path().join("incoming"))
            .map_err(|e| e.to_string())?
            .count();
        assert_eq!(incoming, 0);
        Ok(())
    }

    #[test]
    fn digest_syntax() {
        assert!(Sha256::parse(&format!("sha256:{}", "0".repeat(64))).is_ok());
        assert!(Sha256::parse(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(Sha256::parse("sha512:00").is_err());
    }
}
