//! The Domain lifecycle lock: a non-blocking exclusive host `flock` (spec 3.3,
//! FR-17). Holding a [`DomainLock`] is the type-level precondition for
//! opening the Domain Store.
use crate::lock_file::{open_lock_file, try_lock, Flock, LockFileError};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DomainLockError {
    #[error("cannot use the Domain lock file {path}: {source}")]
    Open {
        path: PathBuf,
        source: LockFileError,
    },
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
        let file = open_lock_file(path).map_err(|source| DomainLockError::Open {
            path: path.to_owned(),
            source,
        })?;
        match try_lock(&file) {
            Ok(Flock::Taken) => Ok(Self {
                _file: file,
                path: path.to_owned(),
            }),
            Ok(Flock::Held) => Err(DomainLockError::Held {
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
