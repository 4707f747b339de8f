//! The kernel calls of confined path handling, behind a trait so tests can
//! record them and inject results (youki style: the implementation is passed
//! in, never chosen by `cfg!(test)`).
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};

/// Device, inode and mount identity of an opened object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub ino: u64,
    pub mnt_id: u64,
}

/// The file type of an opened object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Unknown,
}

impl FileKind {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Regular => "a regular file",
            Self::Directory => "a directory",
            Self::Symlink => "a symbolic link",
            Self::Fifo => "a FIFO",
            Self::Socket => "a socket",
            Self::CharDevice => "a character device",
            Self::BlockDevice => "a block device",
            Self::Unknown => "an object of unknown type",
        }
    }
}

/// The metadata Lazaret checks (statx).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub identity: Identity,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub ctime_sec: i64,
    pub ctime_nsec: u32,
}

impl FileStat {
    pub fn kind(&self) -> FileKind {
        match self.mode & 0o170_000 {
            0o100_000 => FileKind::Regular,
            0o040_000 => FileKind::Directory,
            0o120_000 => FileKind::Symlink,
            0o010_000 => FileKind::Fifo,
            0o140_000 => FileKind::Socket,
            0o020_000 => FileKind::CharDevice,
            0o060_000 => FileKind::BlockDevice,
            _ => FileKind::Unknown,
        }
    }

    /// Permission bits including setuid, setgid and sticky.
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }
}

/// The invoking user's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Kernel calls used by confined path handling.
pub trait ConfinedSys {
    /// `open("/", O_PATH | O_DIRECTORY)`.
    fn open_root(&self) -> io::Result<OwnedFd>;
    /// `open(path, O_PATH)` relative to the working directory, following the
    /// final symlink only when `follow` is set. Used once per declared path to
    /// resolve ancestors to a canonical target (spec 3.2).
    fn open_ambient(&self, path: &Path, follow: bool) -> io::Result<OwnedFd>;
    /// `openat2(dir, path, {flags | O_CLOEXEC, mode, resolve})`.
    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    ) -> io::Result<OwnedFd>;
    /// Reopens the exact object behind `fd` with new flags.
    fn reopen(&self, fd: BorrowedFd<'_>, flags: OFlags) -> io::Result<OwnedFd>;
    /// The kernel's canonical pathname of `fd`.
    fn fd_path(&self, fd: BorrowedFd<'_>) -> io::Result<PathBuf>;
    /// `statx(fd, "", AT_EMPTY_PATH)` with the basic fields and mount id.
    fn stat(&self, fd: BorrowedFd<'_>) -> io::Result<FileStat>;
    /// `mkdirat(dir, name, mode)`.
    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: Mode) -> io::Result<()>;
    /// `pread(fd, buf, offset)`.
    fn read_at(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// `unlinkat(dir, name, 0)`.
    fn unlinkat(&self, dir: BorrowedFd<'_>, name: &Path) -> io::Result<()>;
    /// Sets the exact mode of the object behind `fd` (an `O_PATH` descriptor
    /// too), so the process umask cannot weaken or narrow a mode Lazaret
    /// requires (spec 3.2: created roots are exactly `0700`).
    fn chmod(&self, fd: BorrowedFd<'_>, mode: Mode) -> io::Result<()>;
    /// Writes all of `bytes` at the current offset.
    fn write_all(&self, fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()>;
    /// `renameat(dir, from, dir, to)`: atomically replaces `to`.
    fn renameat(&self, dir: BorrowedFd<'_>, from: &Path, to: &Path) -> io::Result<()>;
    /// The names in the directory behind `dir` (without `.` and `..`): the
    /// first `max` it yields, and whether it holds more.
    fn read_dir(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<OsString>, bool)>;
    /// The effective user and group IDs and supplementary groups.
    fn user_ids(&self) -> io::Result<UserIds>;
}

/// The real kernel, through rustix.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealSys;

fn proc_fd(fd: BorrowedFd<'_>) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

impl ConfinedSys for RealSys {
    fn open_root(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    fn open_ambient(&self, path: &Path, follow: bool) -> io::Result<OwnedFd> {
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        Ok(rustix::fs::open(path, flags, Mode::empty())?)
    }

    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    ) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat2(
            dir,
            path,
            flags | OFlags::CLOEXEC,
            mode,
            resolve,
        )?)
    }

    fn reopen(&self, fd: BorrowedFd<'_>, flags: OFlags) -> io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            proc_fd(fd),
            flags | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )?)
    }

    fn fd_path(&self, fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
        let target = rustix::fs::readlink(proc_fd(fd), Vec::new())?;
        Ok(PathBuf::from(OsString::from_vec(target.into_bytes())))
    }

    fn stat(&self, fd: BorrowedFd<'_>) -> io::Result<FileStat> {
        let st = rustix::fs::statx(
            fd,
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
        )?;
        Ok(FileStat {
            identity: Identity {
                dev_major: st.stx_dev_major,
                dev_minor: st.stx_dev_minor,
                ino: st.stx_ino,
                mnt_id: st.stx_mnt_id,
            },
            mode: u32::from(st.stx_mode),
            uid: st.stx_uid,
            gid: st.stx_gid,
            nlink: st.stx_nlink,
            size: st.stx_size,
            ctime_sec: st.stx_ctime.tv_sec,
            ctime_nsec: st.stx_ctime.tv_nsec,
        })
    }

    fn mkdirat(&self, dir: BorrowedFd<'_>, name: &Path, mode: Mode) -> io::Result<()> {
        Ok(rustix::fs::mkdirat(dir, name, mode)?)
    }

    fn read_at(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pread(fd, buf, offset)?)
    }

    fn unlinkat(&self, dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
    }

    fn chmod(&self, fd: BorrowedFd<'_>, mode: Mode) -> io::Result<()> {
        // fchmod refuses O_PATH descriptors (EBADF); the descriptor's procfs
        // link names exactly its object, never a path that could be swapped.
        Ok(rustix::fs::chmod(proc_fd(fd), mode)?)
    }

    fn write_all(&self, fd: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
        const WRITES_MAX: usize = 1 << 20;
        for _ in 0..WRITES_MAX {
            if bytes.is_empty() {
                return Ok(());
            }
            let n = rustix::io::write(fd.as_fd(), bytes)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
            }
            bytes = bytes.get(n..).unwrap_or_default();
        }
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "write did not finish",
        ))
    }

    fn renameat(&self, dir: BorrowedFd<'_>, from: &Path, to: &Path) -> io::Result<()> {
        Ok(rustix::fs::renameat(dir, from, dir, to)?)
    }

    fn read_dir(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<(Vec<OsString>, bool)> {
        // A directory stream of its own: reopened from the (O_PATH) handle.
        let fd = self.reopen(dir, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(fd)? {
            let name = entry?.file_name().to_bytes().to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == max {
                return Ok((names, true));
            }
            names.push(OsString::from_vec(name));
        }
        Ok((names, false))
    }

    fn user_ids(&self) -> io::Result<UserIds> {
        Ok(UserIds {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            groups: rustix::process::getgroups()?
                .into_iter()
                .map(|g| g.as_raw())
                .collect(),
        })
    }
}
