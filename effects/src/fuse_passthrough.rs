//! Helpers shared by Lazaret's FUSE filesystems (the Git Sentry filter and
//! the ignored-path router): descriptor-based passthrough of host objects,
//! never following a symbolic link on the host, and the conversions between
//! host metadata and FUSE's.

use fuser::{Errno, FileAttr, FileType, INodeNo};
use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc_eio()))
}

pub(crate) fn libc_eio() -> i32 {
    Errno::EIO.code()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking operation leaves the tables consistent (every mutation is
    // one insert or remove), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn system_time(secs: i64, nsecs: u64) -> SystemTime {
    let nanos = u32::try_from(nsecs.min(999_999_999)).unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos),
        Err(_) => UNIX_EPOCH
            .checked_sub(Duration::new(secs.unsigned_abs(), 0))
            .unwrap_or(UNIX_EPOCH),
    }
}

pub(crate) fn kind_of(mode: u32) -> FileType {
    match rustix::fs::FileType::from_raw_mode(mode) {
        rustix::fs::FileType::Directory => FileType::Directory,
        rustix::fs::FileType::Symlink => FileType::Symlink,
        rustix::fs::FileType::Fifo => FileType::NamedPipe,
        rustix::fs::FileType::Socket => FileType::Socket,
        rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
        rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn dirent_kind(t: rustix::fs::FileType) -> FileType {
    match t {
        rustix::fs::FileType::Directory => FileType::Directory,
        rustix::fs::FileType::Symlink => FileType::Symlink,
        rustix::fs::FileType::Fifo => FileType::NamedPipe,
        rustix::fs::FileType::Socket => FileType::Socket,
        rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
        rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn attr(ino: u64, st: &Stat) -> FileAttr {
    let mode = st.st_mode;
    FileAttr {
        ino: INodeNo(ino),
        size: u64::try_from(st.st_size).unwrap_or(0),
        blocks: u64::try_from(st.st_blocks).unwrap_or(0),
        atime: system_time(st.st_atime, st.st_atime_nsec),
        mtime: system_time(st.st_mtime, st.st_mtime_nsec),
        ctime: system_time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(mode),
        perm: u16::try_from(mode & 0o7777).unwrap_or(0),
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: u32::try_from(st.st_rdev).unwrap_or(0),
        blksize: u32::try_from(st.st_blksize).unwrap_or(4096),
        flags: 0,
    }
}

pub(crate) fn stat_fd(fd: &OwnedFd) -> Result<Stat, Errno> {
    rustix::fs::statat(fd, "", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

pub(crate) fn proc_path(fd: &OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Opens `name` beneath `parent` as an `O_PATH` descriptor, never following
/// a symbolic link.
pub(crate) fn open_path(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Whether `name` beneath `parent` is a symbolic link (a missing name is
/// not; the operation then fails on its own).
pub(crate) fn is_symlink(parent: &OwnedFd, name: &OsStr) -> Result<bool, Errno> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            Ok(rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink)
        }
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(errno(e)),
    }
}

/// A single path component the kernel may send: never empty, `.`, `..` or
/// containing `/` (the kernel guarantees it; the filter checks anyway).
pub(crate) fn component(name: &OsStr) -> Result<&OsStr, Errno> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

/// Sets the access and modification times of the object behind `fd` (a
/// `None` leaves that time as it is), never following a link.
pub(crate) fn set_times(
    fd: &OwnedFd,
    atime: Option<fuser::TimeOrNow>,
    mtime: Option<fuser::TimeOrNow>,
) -> Result<(), Errno> {
    use fuser::TimeOrNow;
    let ts = |t: Option<TimeOrNow>| -> rustix::fs::Timespec {
        match t {
            None => rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            Some(TimeOrNow::Now) => rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_NOW,
            },
            Some(TimeOrNow::SpecificTime(t)) => {
                let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                rustix::fs::Timespec {
                    tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: d.subsec_nanos().into(),
                }
            }
        }
    };
    rustix::fs::utimensat(
        fd,
        "",
        &rustix::fs::Timestamps {
            last_access: ts(atime),
            last_modification: ts(mtime),
        },
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(errno)
}

/// Up to `size` bytes of `file` at `offset`.
pub(crate) fn read_at(file: &std::fs::File, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; usize::try_from(size).unwrap_or(0)];
    let n = rustix::io::pread(file, &mut buf[..], offset).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

/// `fsync` (or `fdatasync`) of `file`.
pub(crate) fn sync(file: &std::fs::File, datasync: bool) -> Result<(), Errno> {
    if datasync {
        rustix::fs::fdatasync(file)
    } else {
        rustix::fs::fsync(file)
    }
    .map_err(errno)
}

/// Replies to `readdir` with the entries of `entries` from `offset` on, as
/// many as fit.
pub(crate) fn reply_entries(
    entries: &[(std::ffi::OsString, u64, FileType)],
    offset: u64,
    mut reply: fuser::ReplyDirectory,
) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    for (i, (name, ino, kind)) in entries.iter().enumerate().skip(start) {
        let next = u64::try_from(i).unwrap_or(u64::MAX).saturating_add(1);
        if reply.add(INodeNo(*ino), next, *kind, name) {
            break;
        }
    }
    reply.ok();
}

/// Replies to `statfs` with the file system of `fd`.
pub(crate) fn reply_statfs(fd: &OwnedFd, reply: fuser::ReplyStatfs) {
    match rustix::fs::fstatvfs(fd) {
        Ok(s) => reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            u32::try_from(s.f_bsize).unwrap_or(4096),
            u32::try_from(s.f_namemax).unwrap_or(255),
            u32::try_from(s.f_frsize).unwrap_or(4096),
        ),
        Err(e) => reply.error(errno(e)),
    }
}

/// Raises the soft descriptor limit to the hard one and returns the soft
/// limit in force: the Git Sentry filter and the ignored-path router hold a
/// descriptor for every inode the kernel has looked up and every open
/// handle, and share the Runtime Supervisor's descriptor table.
pub(crate) fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let before = limit.current;
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(error = %e, "could not raise the descriptor limit for a FUSE filesystem");
            limit.current = before;
        }
    }
    limit.current.unwrap_or(u64::MAX)
}
