//! A directory its caller recorded by device and inode, opened again by
//! path without following a symbolic link (spec 3.6: a deterministic path
//! is a lookup hint, the recorded identity is the proof). The removal and
//! mount-point workers start from one.
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};

/// Why the recorded directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RecordedDirError {
    #[error("cannot open {path} (expected a directory reached without a symbolic link): {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} is no longer the recorded directory (expected device {device} inode {inode})")]
    Changed {
        path: PathBuf,
        device: u64,
        inode: u64,
    },
}

/// Opens the directory `path` without following a symbolic link anywhere
/// on the way, and only if it is still `(device, inode)`.
pub fn open_recorded_dir(
    path: &Path,
    (device, inode): (u64, u64),
) -> Result<OwnedFd, RecordedDirError> {
    let open = |e: rustix::io::Errno| RecordedDirError::Open {
        path: path.to_owned(),
        source: e.into(),
    };
    let dir = rustix::fs::openat2(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(open)?;
    let st = rustix::fs::fstat(&dir).map_err(open)?;
    if (st.st_dev, st.st_ino) != (device, inode) {
        return Err(RecordedDirError::Changed {
            path: path.to_owned(),
            device,
            inode,
        });
    }
    Ok(dir)
}
