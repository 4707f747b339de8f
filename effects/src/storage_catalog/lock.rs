//! The host-wide Storage Catalog lock: an exclusive `flock` on
//! `<storage root>/catalog/catalog.lock`, waited for with a bound (spec 3.6,
//! OR-6: Domain coordinators serialize short catalog sections on it).
use super::CatalogError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|source| CatalogError::OpenLock {
                path: path.to_owned(),
                source,
            })?;
        let is_file = file
            .metadata()
            .map_err(|source| CatalogError::OpenLock {
                path: path.to_owned(),
                source,
            })?
            .is_file();
        if !is_file {
            return Err(CatalogError::LockNotAFile {
                path: path.to_owned(),
            });
        }
        let started = Instant::now();
        // Bounded: every attempt but the last sleeps at least until the next
        // interval, and the loop also ends once `wait` has passed.
        let attempts_max = wait.as_millis() / RETRY_INTERVAL.as_millis() + 2;
        for _ in 0..attempts_max {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Self { _file: file }),
                Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {}
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
