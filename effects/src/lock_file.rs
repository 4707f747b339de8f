//! The one way Lazaret takes a host lock: a non-blocking exclusive `flock`
//! on a lock file it opens without following a symlink. Used by the Domain
//! lock (spec 3.3, FR-17), the Storage Catalog lock (spec 3.6, OR-6) and a
//! preparation's liveness lock (OR-7, opened descriptor-relatively by its
//! caller).
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a lock file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error("cannot open it: {0}")]
    Open(#[source] io::Error),
    #[error("it is not a regular file")]
    NotAFile,
}

/// Opens the lock file at `path`, creating it (mode 0600) when missing. A
/// symlink is not followed, and anything but a regular file (a directory,
/// a FIFO another user planted) is refused.
pub fn open_lock_file(path: &Path) -> Result<File, LockFileError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .map_err(LockFileError::Open)?;
    if !file.metadata().map_err(LockFileError::Open)?.is_file() {
        return Err(LockFileError::NotAFile);
    }
    Ok(file)
}

/// What a non-blocking exclusive `flock` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flock {
    /// This descriptor holds the lock now (until it is closed).
    Taken,
    /// Another open file description holds it.
    Held,
}

/// Takes the exclusive `flock` on `fd` without waiting. An interrupted
/// attempt counts as held: every caller either retries or reports the
/// lock busy.
pub fn try_lock(fd: impl AsFd) -> rustix::io::Result<Flock> {
    match rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Flock::Taken),
        Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => Ok(Flock::Held),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_description_finds_the_lock_held_until_the_first_closes(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("x.lock");
        let first = open_lock_file(&path)?;
        assert_eq!(try_lock(&first)?, Flock::Taken);
        let second = open_lock_file(&path)?;
        assert_eq!(try_lock(&second)?, Flock::Held);
        drop(first);
        assert_eq!(try_lock(&second)?, Flock::Taken);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o600
        );
        Ok(())
    }

    #[test]
    fn a_symlink_a_directory_or_a_fifo_is_not_a_lock_file() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("target");
        std::fs::write(&target, b"")?;
        let link = dir.path().join("link.lock");
        std::os::unix::fs::symlink(&target, &link)?;
        assert!(matches!(open_lock_file(&link), Err(LockFileError::Open(_))));
        let sub = dir.path().join("dir.lock");
        std::fs::create_dir(&sub)?;
        assert!(open_lock_file(&sub).is_err());
        let fifo = dir.path().join("fifo.lock");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )?;
        assert!(matches!(
            open_lock_file(&fifo),
            Err(LockFileError::NotAFile)
        ));
        Ok(())
    }
}
