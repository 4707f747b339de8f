//! One direction of a generation's Escalation Mailbox (spec 3.8; SR-10): a
//! directory the Host Coordinator holds open, whose entries it reads and
//! writes only relative to that handle. Entries are regular files written
//! whole under a temporary name (`.tmp.` prefix, never read) and renamed
//! into place, so a reader sees a complete file or none.
//!
//! Reading follows the specification's order: the entry is opened beneath
//! the handle without following a symbolic link or magic link and without
//! crossing a mount; it must be a regular file (a FIFO cannot block the
//! open: it is opened non-blocking); its size is bounded by
//! [`MAX_MAILBOX_RECORD`] before a buffer is allocated, and it is read once,
//! a file that grows past its size while being read is refused. What the
//! bytes say is checked by `lazaret_runtime::escalation`, never by names.
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::protocol::mailbox::{MailboxEntry, MAX_MAILBOX_RECORD, TEMPORARY_PREFIX};
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::confined::{ConfinedSys, FileKind};

/// Entries one listing reads; a directory with more is refused whole.
pub const MAX_ENTRIES: usize = 1024;

/// Why a mailbox entry cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MailboxReadError {
    #[error("cannot list the mailbox {dir}: {source}")]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open mailbox entry {name:?} in {dir} (a symbolic link, a mount or a vanished entry is refused): {source}")]
    Open {
        dir: PathBuf,
        name: OsString,
        source: std::io::Error,
    },
    #[error("mailbox entry {name:?} in {dir} is {kind}; expected a regular file")]
    NotRegular {
        dir: PathBuf,
        name: OsString,
        kind: &'static str,
    },
    #[error("mailbox entry {name:?} in {dir} is {size} bytes; a mailbox record is at most {MAX_MAILBOX_RECORD}")]
    TooLarge {
        dir: PathBuf,
        name: OsString,
        size: u64,
    },
    #[error("mailbox entry {name:?} in {dir} has {links} hard links; expected exactly one")]
    Linked {
        dir: PathBuf,
        name: OsString,
        links: u32,
    },
    #[error("mailbox entry {name:?} in {dir} changed size while it was read")]
    Changed { dir: PathBuf, name: OsString },
    #[error("cannot read mailbox entry {name:?} in {dir}: {source}")]
    Read {
        dir: PathBuf,
        name: OsString,
        source: std::io::Error,
    },
}

/// Why a mailbox entry cannot be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum MailboxWriteError {
    #[error("cannot create {name} in the mailbox {dir}: {source}")]
    Create {
        dir: PathBuf,
        name: String,
        source: std::io::Error,
    },
    #[error("cannot write {name} in the mailbox {dir}: {source}")]
    Write {
        dir: PathBuf,
        name: String,
        source: std::io::Error,
    },
    #[error("cannot rename {name} into place in the mailbox {dir}: {source}")]
    Rename {
        dir: PathBuf,
        name: String,
        source: std::io::Error,
    },
    #[error("cannot remove {name} from the mailbox {dir}: {source}")]
    Remove {
        dir: PathBuf,
        name: String,
        source: std::io::Error,
    },
}

/// What a listing found: entries by their names, every other name
/// (nothing Lazaret writes; reported, never read), the temporaries of
/// writes under way with their ages, and whether the directory held more
/// than [`MAX_ENTRIES`] names (the rest are seen once some are removed).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<MailboxEntry>,
    pub foreign: Vec<OsString>,
    pub temporary: Vec<(OsString, std::time::Duration)>,
    pub truncated: bool,
}

/// A mailbox directory the Host Coordinator holds open.
#[derive(Debug)]
pub struct MailboxDir {
    dir: OwnedFd,
    label: PathBuf,
}

/// Beneath the handle, no symbolic or magic links, no mount crossing.
fn confined() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

impl MailboxDir {
    /// The mailbox directory behind `dir` (a directory handle the caller
    /// opened through its confined Domain root), named `label` in messages.
    pub fn new(dir: OwnedFd, label: PathBuf) -> Self {
        Self { dir, label }
    }

    pub fn label(&self) -> &Path {
        &self.label
    }

    fn handle(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The entries present now, in name order; temporary entries are
    /// skipped. At most [`MAX_ENTRIES`].
    pub fn list(&self, sys: &dyn ConfinedSys) -> Result<Listing, MailboxReadError> {
        let (names, truncated) =
            sys.read_dir(self.handle(), MAX_ENTRIES)
                .map_err(|source| MailboxReadError::List {
                    dir: self.label.clone(),
                    source,
                })?;
        let mut listing = Listing {
            truncated,
            ..Listing::default()
        };
        for name in names {
            if name.as_bytes().starts_with(TEMPORARY_PREFIX.as_bytes()) {
                if let Some(age) = self.age(sys, &name) {
                    listing.temporary.push((name, age));
                }
                continue;
            }
            match MailboxEntry::parse(name.as_bytes()) {
                Some(entry) => listing.entries.push(entry),
                None => listing.foreign.push(name),
            }
        }
        listing.entries.sort();
        listing.foreign.sort();
        Ok(listing)
    }

    /// How long ago entry `name` last changed (its status change time),
    /// when it can be looked at without following a link.
    pub fn age(&self, sys: &dyn ConfinedSys, name: &OsStr) -> Option<std::time::Duration> {
        let fd = sys
            .openat2(
                self.handle(),
                Path::new(name),
                OFlags::PATH | OFlags::NOFOLLOW,
                Mode::empty(),
                confined(),
            )
            .ok()?;
        let st = sys.stat(fd.as_fd()).ok()?;
        let changed = std::time::UNIX_EPOCH
            + std::time::Duration::new(u64::try_from(st.ctime_sec).ok()?, st.ctime_nsec);
        Some(
            std::time::SystemTime::now()
                .duration_since(changed)
                .unwrap_or_default(),
        )
    }

    /// The complete bytes of entry `name`, read once (module docs).
    pub fn read(&self, sys: &dyn ConfinedSys, name: &OsStr) -> Result<Vec<u8>, MailboxReadError> {
        let dir = || self.label.clone();
        let fd = sys
            .openat2(
                self.handle(),
                Path::new(name),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
                Mode::empty(),
                confined(),
            )
            .map_err(|source| MailboxReadError::Open {
                dir: dir(),
                name: name.to_owned(),
                source,
            })?;
        let st = sys
            .stat(fd.as_fd())
            .map_err(|source| MailboxReadError::Read {
                dir: dir(),
                name: name.to_owned(),
                source,
            })?;
        if st.kind() != FileKind::Regular {
            return Err(MailboxReadError::NotRegular {
                dir: dir(),
                name: name.to_owned(),
                kind: st.kind().describe(),
            });
        }
        // Spec 3.8 "rejects links": a hard link to another file too.
        if st.nlink != 1 {
            return Err(MailboxReadError::Linked {
                dir: dir(),
                name: name.to_owned(),
                links: st.nlink,
            });
        }
        let size = usize::try_from(st.size)
            .ok()
            .filter(|s| *s <= MAX_MAILBOX_RECORD)
            .ok_or_else(|| MailboxReadError::TooLarge {
                dir: dir(),
                name: name.to_owned(),
                size: st.size,
            })?;
        // One byte more than the size, to see a file that grew.
        let mut bytes = vec![0u8; size + 1];
        let mut filled = 0;
        // Bounded: every pass reads at least one byte or ends the loop.
        while filled < bytes.len() {
            let n = sys
                .read_at(fd.as_fd(), &mut bytes[filled..], filled as u64)
                .map_err(|source| MailboxReadError::Read {
                    dir: dir(),
                    name: name.to_owned(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled != size {
            return Err(MailboxReadError::Changed {
                dir: dir(),
                name: name.to_owned(),
            });
        }
        bytes.truncate(size);
        Ok(bytes)
    }

    /// Writes `bytes` as `entry`: a new temporary file (mode 0644: the
    /// Agent Sandbox reads what the coordinator writes), renamed into
    /// place. A temporary left by a failed write is removed.
    pub fn write(
        &self,
        sys: &dyn ConfinedSys,
        entry: MailboxEntry,
        bytes: &[u8],
    ) -> Result<(), MailboxWriteError> {
        let name = entry.name();
        let temporary = format!("{TEMPORARY_PREFIX}{name}");
        let fd = sys
            .openat2(
                self.handle(),
                Path::new(&temporary),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
                confined(),
            )
            .map_err(|source| MailboxWriteError::Create {
                dir: self.label.clone(),
                name: temporary.clone(),
                source,
            })?;
        let written = sys
            .chmod(fd.as_fd(), Mode::from_raw_mode(0o644))
            .and_then(|()| sys.write_all(fd.as_fd(), bytes))
            .map_err(|source| MailboxWriteError::Write {
                dir: self.label.clone(),
                name: name.clone(),
                source,
            })
            .and_then(|()| {
                sys.renameat(self.handle(), Path::new(&temporary), Path::new(&name))
                    .map_err(|source| MailboxWriteError::Rename {
                        dir: self.label.clone(),
                        name: name.clone(),
                        source,
                    })
            });
        if written.is_err() {
            let _ = sys.unlinkat(self.handle(), Path::new(&temporary));
        }
        written
    }

    /// Removes entry `name` (an entry read, or a result given up).
    pub fn remove(&self, sys: &dyn ConfinedSys, name: &OsStr) -> Result<(), MailboxWriteError> {
        sys.unlinkat(self.handle(), Path::new(name))
            .map_err(|source| MailboxWriteError::Remove {
                dir: self.label.clone(),
                name: name.to_string_lossy().into_owned(),
                source,
            })
    }
}
