//! The Domain lifecycle lock: a non-blocking exclusive host `flock` (spec 3.3,
//! FR-17). Holding a [`DomainLock`] is the type-level precondition for
//! opening the Domain Store.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DomainLockError {
    #[error("cannot open the Domain lock file {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("the Domain lock {path} is held by another Host Coordinator")]
    Held { path: PathBuf },
    #[error("flock on the Domain lock {path} failed: {source}")]
    Flock { path: PathBuf, source: io::Error },
}

/// An exclusively held Domain flock; released when dropped (or when the
/// process dies, which is what makes bootstrap recovery possible).
#[derive(Debug)]
pub struct DomainLock {
    // Kept open: closing the descriptor would release the flock.
    _file: File,
    path: PathBuf,
}

impl DomainLock {
    /// Takes the lock without blocking; another holder refuses.
    pub fn try_acquire(path: &Path) -> Result<Self, DomainLockError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|source| DomainLockError::Open {
                path: path.to_owned(),
                source,
            })?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Self {
                _file: file,
                path: path.to_owned(),
            }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(DomainLockError::Held {
                path: path.to_owned(),
            }),
            Err(e) => Err(DomainLockError::Flock {
                path: path.to_owned(),
                source: e.into(),
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
