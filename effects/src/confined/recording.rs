//! A recording fake around another [`ConfinedSys`]: it records every call
//! with its typed arguments, can rewrite the metadata of chosen inodes, can
//! fail the next call of a kind (or the n-th call of a kind at one path), and
//! can impersonate another user. Tests pass it in explicitly.
use std::cell::RefCell;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::sys::{ConfinedSys, FileStat, UserIds};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedCall {
    OpenRoot,
    OpenAmbient {
        path: PathBuf,
        follow: bool,
    },
    Openat2 {
        path: PathBuf,
        flags: OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    },
    Reopen {
        flags: OFlags,
    },
    FdPath,
    Stat,
    Mkdirat {
        name: PathBuf,
        mode: Mode,
    },
    ReadAt {
        len: usize,
        offset: u64,
    },
    Unlinkat {
        name: PathBuf,
    },
    Chmod {
        mode: Mode,
    },
    WriteAll {
        len: usize,
    },
    Renameat {
        from: PathBuf,
        to: PathBuf,
    },
    ReadDir,
    UserIds,
}

impl RecordedCall {
    fn kind(&self) -> &'static str {
        match self {
            Self::OpenRoot => "open_root",
            Self::OpenAmbient { .. } => "open_ambient",
            Self::Openat2 { .. } => "openat2",
            Self::Reopen { .. } => "reopen",
            Self::FdPath => "fd_path",
            Self::Stat => "stat",
            Self::Mkdirat { .. } => "mkdirat",
            Self::ReadAt { .. } => "read_at",
            Self::Unlinkat { .. } => "unlinkat",
            Self::Chmod { .. } => "chmod",
            Self::WriteAll { .. } => "write_all",
            Self::Renameat { .. } => "renameat",
            Self::ReadDir => "read_dir",
            Self::UserIds => "user_ids",
        }
    }

    /// The path argument of calls that take one.
    fn path(&self) -> Option<&Path> {
        match self {
            Self::OpenAmbient { path, .. } | Self::Openat2 { path, .. } => Some(path),
            Self::Mkdirat { name, .. } | Self::Unlinkat { name } => Some(name),
            Self::Renameat { to, .. } => Some(to),
            Self::OpenRoot
            | Self::Reopen { .. }
            | Self::FdPath
            | Self::Stat
            | Self::ReadAt { .. }
            | Self::Chmod { .. }
            | Self::WriteAll { .. }
            | Self::ReadDir
            | Self::UserIds => None,
        }
    }
}

/// An armed failure: the call kind, the path it must carry (any when
/// `None`), how many matching calls still pass first, and the error.
#[derive(Debug)]
struct Failure {
    kind: &'static str,
    path: Option<PathBuf>,
    skip: usize,
    errno: rustix::io::Errno,
}

impl Failure {
    fn matches(&self, call: &RecordedCall) -> bool {
        self.kind == call.kind() && self.path.as_deref().is_none_or(|p| call.path() == Some(p))
    }
}

type StatPatch = Box<dyn Fn(&mut FileStat)>;

/// The recording fake.
pub struct RecordingSys<S> {
    inner: S,
    calls: RefCell<Vec<RecordedCall>>,
    patches: RefCell<Vec<(u64, StatPatch)>>,
    failures: RefCell<Vec<Failure>>,
    user: RefCell<Option<UserIds>>,
}

impl<S> fmt::Debug for RecordingSys<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingSys")
            .field("calls", &self.calls.borrow().len())
            .field("patches", &self.patches.borrow().len())
            .field("failures", &self.failures.borrow())
            .finish_non_exhaustive()
    }
}

impl<S: ConfinedSys> RecordingSys<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            calls: RefCell::new(Vec::new()),
            patches: RefCell::new(Vec::new()),
            failures: RefCell::new(Vec::new()),
            user: RefCell::new(None),
        }
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls.borrow().clone()
    }

    /// Rewrites the metadata reported for inode `ino`.
    pub fn patch_stat(&self, ino: u64, patch: impl Fn(&mut FileStat) + 'static) {
        self.patches.borrow_mut().push((ino, Box::new(patch)));
    }

    /// Fails the next call of `kind` (for example `"mkdirat"`) with `errno`.
    pub fn fail_next(&self, kind: &'static str, errno: rustix::io::Errno) {
        self.failures.borrow_mut().push(Failure {
            kind,
            path: None,
            skip: 0,
            errno,
        });
    }

    /// Fails the `nth` (0-based) call of `kind` from now on whose path
    /// argument is `path` (for `openat2`, the path relative to its
    /// directory), with `errno`; earlier matching calls pass through.
    pub fn fail_nth_at(
        &self,
        kind: &'static str,
        path: impl Into<PathBuf>,
        nth: usize,
        errno: rustix::io::Errno,
    ) {
        self.failures.borrow_mut().push(Failure {
            kind,
            path: Some(path.into()),
            skip: nth,
            errno,
        });
    }

    /// Reports `user` as the invoking user.
    pub fn impersonate(&self, user: UserIds) {
        *self.user.borrow_mut() = Some(user);
    }

    fn record(&self, call: RecordedCall) -> io::Result<()> {
        let mut failures = self.failures.borrow_mut();
        let due = failures
            .iter()
            .position(|f| f.skip == 0 && f.matches(&call));
        for f in failures.iter_mut() {
            if f.skip > 0 && f.matches(&call) {
                f.skip -= 1;
            }
        }
        self.calls.borrow_mut().push(call);
        match due {
            Some(i) => Err(failures.remove(i).errno.into()),
            None => Ok(()),
        }
    }
}

impl<S: ConfinedSys> ConfinedSys for RecordingSys<S> {
    fn open_root(&self) -> io::Result<OwnedFd> {
        self.record(RecordedCall::OpenRoot)?;
        self.inner.open_root()
    }

    fn open_ambient(&self, path: &Path, follow: bool) -> io::Result<OwnedFd> {
        self.record(RecordedCall::OpenAmbient {
            path: path.to_owned(),
            follow,
        })?;
        self.inner.open_ambient(path, follow)
    }

    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    ) -> io::Result<OwnedFd> {
        self.record(RecordedCall::Openat2 {
            path: path.to_owned(),
            flags,
            mode,
            resolve,
        })?;
        self.inner.openat2(dir, path, flags, mode, resolve)
    }

    fn reopen(&self, fd: BorrowedFd<'_>, flags: OFlags) -> io::Result<OwnedFd> {
        self.record(RecordedCall::Reopen { flags })?;
        self.inner.reopen(fd, flags)
    }

    fn fd_path(&self, fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
        self.record(RecordedCall::FdPath)?;
        self.inner.fd_path(fd)
    }

    fn stat(&self, fd: BorrowedFd<'_>) -> io::Result<FileStat> {
        self.record(RecordedCall::Stat)?;
        let mut st = self.inner.stat(fd)?;
        for (ino, patch) in self.patches.borrow().iter() {
            if *ino == st.identity.ino {
                patch(&mut st);
            }
        }
        Ok(st)
    }

    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: Mode) -> io::Result<()> {
        self.record(RecordedCall::Mkdirat {
            name: name.to_owned(),
            mode,
        })?;
        self.inner.mkdirat(dir, name, mode)
    }

    fn read_at(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.record(RecordedCall::ReadAt {
            len: buf.len(),
            offset,
        })?;
        self.inner.read_at(fd, buf, offset)
    }

    fn unlinkat(&self, dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
        self.record(RecordedCall::Unlinkat {
            name: name.to_owned(),
        })?;
        self.inner.unlinkat(dir, name)
    }

    fn chmod(&self, fd: BorrowedFd<'_>, mode: Mode) -> io::Result<()> {
        self.record(RecordedCall::Chmod { mode })?;
        self.inner.chmod(fd, mode)
    }

    fn write_all(&self, fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
        self.record(RecordedCall::WriteAll { len: bytes.len() })?;
        self.inner.write_all(fd, bytes)
    }

    fn renameat(&self, dir: BorrowedFd<'_>, from: &Path, to: &Path) -> io::Result<()> {
        self.record(RecordedCall::Renameat {
            from: from.to_owned(),
            to: to.to_owned(),
        })?;
        self.inner.renameat(dir, from, to)
    }

    fn read_dir(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<OsString>, bool)> {
        self.record(RecordedCall::ReadDir)?;
        self.inner.read_dir(dir, max)
    }

    fn user_ids(&self) -> io::Result<UserIds> {
        self.record(RecordedCall::UserIds)?;
        match self.user.borrow().clone() {
            Some(user) => Ok(user),
            None => self.inner.user_ids(),
        }
    }
}
