//! Lazaret's content-addressed blob store: `<root>/blobs/sha256/<hex>`, laid
//! out as the blob part of an OCI image layout so the preparer can read it
//! directly. Every blob is hashed while it is written and published by rename
//! only when its digest and size match, so a blob present in the store is
//! verified content.
//!
//! A blob being written lives in `<root>/incoming/` under a name that is
//! never a blob's, with an exclusive `flock` held on it for as long as its
//! writer lives. Opening the store removes every staged file whose lock is
//! free: what a killed pull left behind.

use sha2::Digest as _;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

type Sha256Hasher = sha2::Sha256;

/// Bytes between two progress reports while copying a blob.
const PROGRESS_STEP: u64 = 1 << 20;
/// Staged files looked at when the store is opened.
const MAX_SWEEP: usize = 4096;
/// A file still being named (`.`-prefixed) this old was left by a writer
/// that died between creating and locking it.
const UNNAMED_STALE: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// The store's lock file could not be opened or locked.
    #[error("cannot lock the blob store at {path}: {detail}")]
    Lock { path: PathBuf, detail: String },
    /// Removing a blob failed.
    #[error("cannot remove blob {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
}

/// A shared hold on the blob store, released on drop: every pull and
/// launch holds one while it reads or adds blobs.
#[derive(Debug)]
pub struct StoreHold {
    _file: File,
}

/// The exclusive hold `lazaret image rm` deletes blobs under, released on
/// drop: no pull or launch holds the store meanwhile, so no blob
/// disappears under a reader.
#[derive(Debug)]
pub struct ExclusiveHold {
    _file: File,
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
        let store = BlobStore {
            root: root.to_owned(),
        };
        store.sweep_incoming();
        Ok(store)
    }

    /// Removes the staged files no live writer holds (best effort: a file
    /// that cannot be removed now is tried again at the next open).
    fn sweep_incoming(&self) {
        let incoming = self.root.join("incoming");
        let Ok(entries) = fs::read_dir(&incoming) else {
            return;
        };
        for entry in entries.take(MAX_SWEEP).flatten() {
            let path = entry.path();
            let unnamed = entry.file_name().as_encoded_bytes().starts_with(b".");
            if unnamed {
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > UNNAMED_STALE);
                if old {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            let Ok(file) = fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path)
            else {
                continue;
            };
            if crate::lock_file::try_lock(&file) == Ok(crate::lock_file::Flock::Taken) {
                tracing::info!(path = %path.display(), "removing a partial blob a killed pull left");
                let _ = fs::remove_file(&path);
            }
        }
    }

    fn lock_file(&self) -> Result<File, StoreError> {
        let path = self.root.join("store.lock");
        crate::lock_file::open_lock_file(&path).map_err(|e| StoreError::Lock {
            path,
            detail: e.to_string(),
        })
    }

    /// Holds the store shared, waiting for a removal to finish.
    pub fn hold_shared(&self) -> Result<StoreHold, StoreError> {
        let file = self.lock_file()?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared).map_err(|e| {
            StoreError::Lock {
                path: self.root.join("store.lock"),
                detail: e.to_string(),
            }
        })?;
        Ok(StoreHold { _file: file })
    }

    /// Holds the store exclusively, or `None` while a pull or launch
    /// holds it.
    pub fn try_hold_exclusive(&self) -> Result<Option<ExclusiveHold>, StoreError> {
        let file = self.lock_file()?;
        match crate::lock_file::try_lock(&file) {
            Ok(crate::lock_file::Flock::Taken) => Ok(Some(ExclusiveHold { _file: file })),
            Ok(crate::lock_file::Flock::Held) => Ok(None),
            Err(e) => Err(StoreError::Lock {
                path: self.root.join("store.lock"),
                detail: e.to_string(),
            }),
        }
    }

    /// Every blob in the store, at most `max` (more is an error).
    pub fn blobs(&self, max: usize) -> Result<Vec<Sha256>, StoreError> {
        let dir = self.root.join("blobs/sha256");
        let read_err = |source| StoreError::Read {
            path: dir.clone(),
            source,
        };
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir).map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            let name = entry.file_name();
            // Only `<64 hex>` names are blobs; anything else is left alone.
            let Ok(d) = Sha256::parse(&format!("sha256:{}", name.to_string_lossy())) else {
                continue;
            };
            if found.len() >= max {
                return Err(read_err(io::Error::other(format!("more than {max} blobs"))));
            }
            found.push(d);
        }
        found.sort();
        Ok(found)
    }

    /// Removes blob `d` if present; the bytes freed. Only under the
    /// exclusive hold.
    pub fn remove(&self, d: &Sha256, _hold: &ExclusiveHold) -> Result<u64, StoreError> {
        let path = self.path(d);
        let size = match fs::symlink_metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => return Err(StoreError::Remove { path, source }),
        };
        match fs::remove_file(&path) {
            Ok(()) => Ok(size),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(StoreError::Remove { path, source }),
        }
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
        // `out` stays open, and so locked, until the rename is done: a
        // sweep never takes a finished blob for a dead writer's.
        let (staged, mut out) = self.create_staged(digest)?;
        let result = self.stage(digest, size, from, source, progress, &staged, &mut out);
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
        drop(out);
        result.map(|()| final_path)
    }

    /// Creates a locked staging file for `digest`: made under a `.` name,
    /// locked, then renamed, so every staged file [`Self::sweep_incoming`]
    /// may look at is locked from the moment it has its name.
    fn create_staged(&self, digest: &Sha256) -> Result<(PathBuf, File), StoreError> {
        let unique = format!(
            "{}.{}.{}",
            digest.hex(),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        let incoming = self.root.join("incoming");
        let unnamed = incoming.join(format!(".{unique}"));
        let staged = incoming.join(unique);
        let werr = |path: &Path| {
            let path = path.to_owned();
            move |source| StoreError::Write {
                digest: digest.clone(),
                path,
                source,
            }
        };
        let out = File::create_new(&unnamed).map_err(werr(&unnamed))?;
        let locked = crate::lock_file::try_lock(&out).map_err(|e| werr(&unnamed)(e.into()));
        let named = locked.and_then(|lock| {
            if lock != crate::lock_file::Flock::Taken {
                return Err(werr(&unnamed)(io::Error::other(
                    "a new staging file is locked by another process",
                )));
            }
            fs::rename(&unnamed, &staged).map_err(werr(&staged))
        });
        if let Err(e) = named {
            let _ = fs::remove_file(&unnamed);
            return Err(e);
        }
        Ok((staged, out))
    }

    #[allow(clippy::too_many_arguments)] // the blob, its source and its staging file
    fn stage(
        &self,
        digest: &Sha256,
        size: u64,
        from: &str,
        source: &mut dyn Read,
        progress: &mut dyn FnMut(u64),
        staged: &Path,
        out: &mut File,
    ) -> Result<(), StoreError> {
        let werr = |source| StoreError::Write {
            digest: digest.clone(),
            path: staged.to_owned(),
            source,
        };
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
    fn open_sweeps_staged_files_no_writer_holds() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let store = BlobStore::open(dir.path()).map_err(|e| e.to_string())?;
        let d = Sha256::of(b"x");
        let (live, held) = store.create_staged(&d).map_err(|e| e.to_string())?;
        let (dead, file) = store.create_staged(&d).map_err(|e| e.to_string())?;
        drop(file);
        let fresh_unnamed = dir.path().join("incoming/.abc.1.2");
        fs::write(&fresh_unnamed, b"").map_err(|e| e.to_string())?;
        BlobStore::open(dir.path()).map_err(|e| e.to_string())?;
        assert!(live.exists(), "a live writer's file stays");
        assert!(!dead.exists(), "a dead writer's file is removed");
        assert!(fresh_unnamed.exists(), "a file still being named stays");
        drop(held);
        BlobStore::open(dir.path()).map_err(|e| e.to_string())?;
        assert!(!live.exists());
        Ok(())
    }

    #[test]
    fn digest_syntax() {
        assert!(Sha256::parse(&format!("sha256:{}", "0".repeat(64))).is_ok());
        assert!(Sha256::parse(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(Sha256::parse("sha512:00").is_err());
    }
}
