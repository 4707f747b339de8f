//! The host-wide Storage Catalog lock: an exclusive `flock` on
//! `<storage root>/catalog/catalog.lock`, waited for with a bound (spec 3.6,
//! OR-6: Domain coordinators serialize short catalog sections on it).
use super::CatalogError;
use crate::lock_file::{open_lock_file, try_lock, Flock, LockFileError};
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long to sleep between two non-blocking attempts.
const RETRY_INTERVAL: Duration = Duration::from_millis(10);

/// The held catalog lock; released when dropped (closing the descriptor).
#[derive(Debug)]
pub(super) struct CatalogLock {
    _file: File,
}

impl CatalogLock {
    /// Takes the lock, retrying a non-blocking `flock` until `wait` has
    /// passed; a holder that keeps it longer is a [`CatalogError::LockTimeout`].
    pub(super) fn acquire(path: &Path, wait: Duration) -> Result<Self, CatalogError> {
        let file = open_lock_file(path).map_err(|e| match e {
            LockFileError::Open(source) => CatalogError::OpenLock {
                path: path.to_owned(),
                source,
            },
            LockFileError::NotAFile => CatalogError::LockNotAFile {
                path: path.to_owned(),
            },
        })?;
        let started = Instant::now();
        // Bounded: every attempt but the last sleeps at least until the next
        // interval, and the loop also ends once `wait` has passed.
        let attempts_max = wait.as_millis() / RETRY_INTERVAL.as_millis() + 2;
        for _ in 0..attempts_max {
            match try_lock(&file) {
                Ok(Flock::Taken) => return Ok(Self { _file: file }),
                Ok(Flock::Held) => {}
                Err(e) => {
                    return Err(CatalogError::Flock {
                        path: path.to_owned(),
                        source: e.into(),
                    })
                }
            }
            let Some(left) = wait.checked_sub(started.elapsed()) else {
                break;
            };
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(RETRY_INTERVAL));
        }
        Err(CatalogError::LockTimeout {
            path: path.to_owned(),
            waited: wait,
        })
    }
}
