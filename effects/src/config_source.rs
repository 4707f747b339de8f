//! Reading the trusted host configuration source safely (spec 3.2): an
//! `O_PATH` open through a confined plan, type/owner/link/mode/size checks
//! before any read, a nonblocking reopen of that exact descriptor with an
//! identity comparison, two reads of exactly the recorded size, and no retry.
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use lazaret_runtime::config::SOURCE_SIZE_MAX_BYTES;
use rustix::fs::OFlags;

use crate::confined::{ConfinedError, ConfinedSys, FileKind, FileStat, OpenedObject};

/// Why a configuration source was refused before decoding.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Confined(#[from] ConfinedError),
    #[error("{path}: grants group or other write permission (mode {mode:04o}); expected no group or other write bit")]
    Writable { path: PathBuf, mode: u32 },
    #[error("{path}: is {size} bytes; expected at most {max} bytes", max = SOURCE_SIZE_MAX_BYTES)]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{path}: reopening for reading failed: {source}")]
    Reopen { path: PathBuf, source: io::Error },
    #[error("{path}: the reopened descriptor is a different object; expected the object opened by O_PATH")]
    ReopenMismatch { path: PathBuf },
    #[error("{path}: reading failed: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: read {got} of {expected} bytes; expected the recorded size")]
    ShortRead {
        path: PathBuf,
        expected: u64,
        got: u64,
    },
    #[error("{path}: grew while being read; expected an unchanging file")]
    Grew { path: PathBuf },
    #[error("{path}: {what} changed between the two reads; expected an unchanging file (the load is not retried)")]
    Changed { path: PathBuf, what: &'static str },
}

/// The checked bytes of a configuration source and its retained object.
#[derive(Debug)]
pub struct ConfigSource {
    object: OpenedObject,
    bytes: Vec<u8>,
}

impl ConfigSource {
    pub fn object(&self) -> &OpenedObject {
        &self.object
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn label(&self) -> PathBuf {
        self.object.label()
    }

    /// Drops the bytes once decoded: configuration bytes are not retained as
    /// runtime authority (spec 3.2).
    pub fn into_object(self) -> OpenedObject {
        self.object
    }
}

fn check_metadata(path: &Path, st: &FileStat, uid: u32) -> Result<(), SourceError> {
    if st.kind() != FileKind::Regular {
        return Err(ConfinedError::WrongType {
            path: path.to_owned(),
            found: st.kind().describe(),
            expected: "a regular file",
        }
        .into());
    }
    if st.uid != 0 && st.uid != uid {
        return Err(ConfinedError::Owner {
            path: path.to_owned(),
            owner: st.uid,
            expected: format!("root or the invoking user (uid {uid})"),
        }
        .into());
    }
    if st.nlink != 1 {
        return Err(ConfinedError::HardLinks {
            path: path.to_owned(),
            nlink: st.nlink,
        }
        .into());
    }
    if st.permissions() & 0o022 != 0 {
        return Err(SourceError::Writable {
            path: path.to_owned(),
            mode: st.permissions(),
        });
    }
    if st.size > SOURCE_SIZE_MAX_BYTES {
        return Err(SourceError::TooLarge {
            path: path.to_owned(),
            size: st.size,
        });
    }
    Ok(())
}

/// Reads exactly `size` bytes from offset 0 and refuses trailing growth.
fn read_exact(
    sys: &dyn ConfinedSys,
    fd: BorrowedFd<'_>,
    path: &Path,
    size: u64,
) -> Result<Vec<u8>, SourceError> {
    let len = usize::try_from(size).map_err(|_| SourceError::TooLarge {
        path: path.to_owned(),
        size,
    })?;
    let mut buf = vec![0u8; len];
    let mut filled = 0usize;
    // Each successful pread returns at least one byte, so `len + 1`
    // iterations bound the loop.
    for _ in 0..=len {
        if filled == len {
            break;
        }
        let offset = u64::try_from(filled).unwrap_or(u64::MAX);
        let n = sys
            .read_at(fd, buf.get_mut(filled..).unwrap_or_default(), offset)
            .map_err(|source| SourceError::Read {
                path: path.to_owned(),
                source,
            })?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    if filled != len {
        return Err(SourceError::ShortRead {
            path: path.to_owned(),
            expected: size,
            got: u64::try_from(filled).unwrap_or(u64::MAX),
        });
    }
    let mut probe = [0u8; 1];
    let extra = sys
        .read_at(fd, &mut probe, size)
        .map_err(|source| SourceError::Read {
            path: path.to_owned(),
            source,
        })?;
    if extra != 0 {
        return Err(SourceError::Grew {
            path: path.to_owned(),
        });
    }
    Ok(buf)
}

/// Opens, checks and reads the configuration source at `path` (absolute,
/// normalized) for the invoking user `uid`.
pub fn read_config_source(
    sys: &dyn ConfinedSys,
    path: &Path,
    uid: u32,
) -> Result<ConfigSource, SourceError> {
    let object = OpenedObject::open_existing(sys, path)?;
    let label = object.label();
    let before = *object.stat();
    check_metadata(&label, &before, uid)?;
    let reader = sys
        .reopen(object.fd(), OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|source| SourceError::Reopen {
            path: label.clone(),
            source,
        })?;
    let stat_now = || {
        sys.stat(reader.as_fd()).map_err(|source| {
            SourceError::from(ConfinedError::Stat {
                path: label.clone(),
                source,
            })
        })
    };
    let opened = stat_now()?;
    if opened.identity != before.identity || opened.kind() != FileKind::Regular {
        return Err(SourceError::ReopenMismatch { path: label });
    }
    let first = read_exact(sys, reader.as_fd(), &label, before.size)?;
    let second = read_exact(sys, reader.as_fd(), &label, before.size)?;
    let after = stat_now()?;
    let changed = |what| SourceError::Changed {
        path: label.clone(),
        what,
    };
    if first != second {
        return Err(changed("content"));
    }
    if after.identity != before.identity {
        return Err(changed("identity"));
    }
    if after.size != before.size {
        return Err(changed("size"));
    }
    if (after.ctime_sec, after.ctime_nsec) != (before.ctime_sec, before.ctime_nsec) {
        return Err(changed("change time"));
    }
    Ok(ConfigSource {
        object,
        bytes: first,
    })
}
