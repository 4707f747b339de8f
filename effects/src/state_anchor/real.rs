//! The real kernel behind [`AnchorSys`]: the new mount API for the overlay
//! (each layer one `fsconfig` string, so no path needs escaping), `statx`
//! with `STATX_MNT_ID_UNIQUE` for mount identity, `NS_GET_MNTNS_ID` for the
//! namespace's identity, and `/proc` for the processes in a namespace.
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use lazaret_runtime::records::participant::{MountIdentity, MountNamespaceIdentity};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags, CWD};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, UnmountFlags};

use super::{AnchorSys, Entry};

/// `STATX_MNT_ID_UNIQUE` (Linux 6.8): the 64-bit mount ID that is never
/// reused while the system runs.
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;
/// `NS_GET_MNTNS_ID` (Linux 6.8): `_IOR(0xb7, 0x5, __u64)`.
const NS_GET_MNTNS_ID: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u64>(0xb7, 0x5);
/// The most `/proc` entries one scan reads (pid_max can be 4,194,304).
const PROC_ENTRIES_MAX: usize = 4_194_304 + 64;

/// The real kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealAnchorSys;

fn identity_of(fd: BorrowedFd<'_>, path: &Path) -> io::Result<MountIdentity> {
    let mask = StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE) | StatxFlags::INO;
    let st = if path.as_os_str().is_empty() {
        rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, mask)?
    } else {
        rustix::fs::statx(fd, path, AtFlags::SYMLINK_NOFOLLOW, mask)?
    };
    if st.stx_mask & STATX_MNT_ID_UNIQUE == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel gives no unique mount ID (STATX_MNT_ID_UNIQUE needs Linux 6.8)",
        ));
    }
    Ok(MountIdentity {
        mount_id: st.stx_mnt_id,
        device: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        inode: st.stx_ino,
    })
}

/// The namespace ID of the mount namespace `fd` refers to.
fn namespace_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: NS_GET_MNTNS_ID is `_IOR(NSIO, 5, __u64)`: the kernel writes
    // exactly one u64 through the pointer, which is the Getter's output
    // type; the descriptor is borrowed for the call only.
    let id =
        unsafe { rustix::ioctl::ioctl(fd, rustix::ioctl::Getter::<NS_GET_MNTNS_ID, u64>::new()) }?;
    Ok(id)
}

fn namespace_at(path: &Path) -> io::Result<MountNamespaceIdentity> {
    let file = std::fs::File::open(path)?;
    let st = rustix::fs::fstat(&file)?;
    Ok(MountNamespaceIdentity {
        id: namespace_id(file.as_fd())?,
        device: st.st_dev,
        inode: st.st_ino,
    })
}

/// `listmount(2)`; a namespace by its ID since Linux 6.11.
const SYS_LISTMOUNT: libc::c_long = 458;
/// `LSMT_ROOT`: list from the namespace's root.
const LSMT_ROOT: u64 = u64::MAX;
/// `MNT_ID_REQ_SIZE_VER1`: the request with `mnt_ns_id`.
const MNT_ID_REQ_SIZE_VER1: u32 = 32;

/// `struct mnt_id_req`, version 1.
#[repr(C)]
struct MntIdReq {
    size: u32,
    spare: u32,
    mnt_id: u64,
    param: u64,
    mnt_ns_id: u64,
}

/// Whether mount namespace `id` exists: `listmount` of its root answers
/// ENOENT once the namespace is freed (the kernel frees it when its last
/// process, descriptor and bind mount are gone) and for a namespace the
/// caller holds no CAP_SYS_ADMIN over. The generation's namespace is owned
/// by the Domain's user namespace, whose owner the Host Coordinator's user
/// is, so it is the first. `None` where the kernel cannot answer: no
/// `listmount` (before 6.8), or none by namespace ID (6.8 to 6.10).
fn mount_namespace_exists(id: u64) -> io::Result<Option<bool>> {
    let req = MntIdReq {
        size: MNT_ID_REQ_SIZE_VER1,
        spare: 0,
        mnt_id: LSMT_ROOT,
        param: 0,
        mnt_ns_id: id,
    };
    let mut ids = [0u64; 1];
    // SAFETY: listmount reads `req.size` bytes of `req` and writes at most
    // `nr_mnt_ids` (1) u64 into `ids`; both outlive the call, and the
    // flags are 0.
    let listed = unsafe {
        libc::syscall(
            SYS_LISTMOUNT,
            std::ptr::from_ref(&req),
            ids.as_mut_ptr(),
            ids.len(),
            0u32,
        )
    };
    if listed >= 0 {
        return Ok(Some(true));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(Some(false)),
        // No listmount (before 6.8), no request with a namespace ID (6.8 to
        // 6.10 answer E2BIG to its size), or no answer for the caller.
        Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM) => Ok(None),
        _ => Err(e),
    }
}

/// A process that vanished or that the caller may not inspect.
fn not_seen(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::NOENT.raw_os_error()
            || code == rustix::io::Errno::ACCESS.raw_os_error()
            || code == rustix::io::Errno::PERM.raw_os_error()
            || code == rustix::io::Errno::SRCH.raw_os_error()
    )
}

impl AnchorSys for RealAnchorSys {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        match rustix::fs::lstat(path) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                Ok(Entry::Directory {
                    mode: st.st_mode,
                    uid: st.st_uid,
                    gid: st.st_gid,
                })
            }
            Ok(_) => Ok(Entry::Other),
            Err(rustix::io::Errno::NOENT) => Ok(Entry::Absent),
            Err(e) => Err(e.into()),
        }
    }

    /// Made under a staging name beside `path`, given its owner and mode,
    /// then renamed into place: a crash never leaves `path` with the wrong
    /// owner or mode (an upper's root is what the sandbox sees at the
    /// persistent path). The staging name (`%staged-<name>`) decodes to no
    /// persistent path, so a leftover is no anchor; the next creation
    /// removes it first.
    fn create_directory(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        let mut staged_name = std::ffi::OsString::from("%staged-");
        staged_name.push(name);
        let staged = parent.join(staged_name);
        match rustix::fs::rmdir(&staged) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        rustix::fs::mkdir(&staged, Mode::from_raw_mode(0o700))?;
        rustix::fs::chownat(
            CWD,
            &staged,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
        rustix::fs::chmod(&staged, Mode::from_raw_mode(mode))?;
        let placed =
            rustix::fs::renameat_with(CWD, &staged, CWD, path, rustix::fs::RenameFlags::NOREPLACE);
        if placed.is_err() {
            let _ = rustix::fs::rmdir(&staged);
        }
        placed.map_err(Into::into)
    }

    fn lower_in(&self, rootfs: &Path, path: &str) -> io::Result<PathBuf> {
        let root = rustix::fs::openat(
            CWD,
            rootfs,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let fd = rustix::fs::openat2(
            &root,
            path.trim_start_matches('/'),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        )?;
        let at = |fd: &OwnedFd| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        let (root_path, resolved) = (at(&root)?, at(&fd)?);
        // Defence in depth: RESOLVE_BENEATH keeps the walk inside.
        if !resolved.starts_with(&root_path) {
            return Err(io::Error::other(format!(
                "{} resolved to {} outside {}",
                path,
                resolved.display(),
                root_path.display()
            )));
        }
        Ok(resolved)
    }

    fn mount_overlay(
        &self,
        lower: &Path,
        upper: &Path,
        work: &Path,
        target: &Path,
    ) -> io::Result<MountIdentity> {
        let fs = rustix::mount::fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
        rustix::mount::fsconfig_set_string(&fs, "lowerdir+", lower)?;
        rustix::mount::fsconfig_set_string(&fs, "upperdir", upper)?;
        rustix::mount::fsconfig_set_string(&fs, "workdir", work)?;
        // The verified user namespace cannot write trusted.* xattrs;
        // without userxattr the overlay mounts but cannot record its
        // metadata (docs/benchmarks.md "State Anchor medium").
        rustix::mount::fsconfig_set_flag(&fs, "userxattr")?;
        rustix::mount::fsconfig_create(&fs)?;
        let mnt = rustix::mount::fsmount(
            &fs,
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
        )?;
        let identity = identity_of(mnt.as_fd(), Path::new(""))?;
        rustix::mount::move_mount(
            &mnt,
            c"",
            CWD,
            target,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )?;
        Ok(identity)
    }

    fn mount_identity(&self, target: &Path) -> io::Result<MountIdentity> {
        identity_of(CWD, target)
    }

    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()> {
        let mut flags = UnmountFlags::NOFOLLOW;
        if detach {
            flags |= UnmountFlags::DETACH;
        }
        rustix::mount::unmount(target, flags)?;
        Ok(())
    }

    fn mount_namespace(&self) -> io::Result<MountNamespaceIdentity> {
        namespace_at(Path::new("/proc/thread-self/ns/mnt"))
    }

    fn processes_in(&self, ns: &MountNamespaceIdentity, limit: usize) -> io::Result<Vec<u32>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc")?.take(PROC_ENTRIES_MAX) {
            let entry = entry?;
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path().join("ns/mnt");
            let st = match rustix::fs::stat(&path) {
                Ok(st) => st,
                Err(e) if not_seen(&e.into()) => continue,
                Err(e) => return Err(e.into()),
            };
            if (st.st_dev, st.st_ino) != (ns.device, ns.inode) {
                continue;
            }
            // The same nsfs inode: the namespace ID tells a reused inode
            // number from the recorded namespace.
            match namespace_at(&path) {
                Ok(seen) if seen.id == ns.id => found.push(pid),
                Ok(_) => {}
                Err(e) if not_seen(&e) => {}
                Err(e) => return Err(e),
            }
            if found.len() >= limit {
                break;
            }
        }
        Ok(found)
    }

    fn namespace_exists(&self, ns: &MountNamespaceIdentity) -> io::Result<Option<bool>> {
        mount_namespace_exists(ns.id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// The kernel answers by the namespace's ID: a mount namespace exists
    /// while a process is in it and is gone once that process is; the
    /// test's own namespace exists.
    #[test]
    fn a_mount_namespace_exists_until_its_last_process_is_gone() {
        let own = namespace_at(Path::new("/proc/thread-self/ns/mnt")).unwrap();
        assert_eq!(mount_namespace_exists(own.id).unwrap(), Some(true));
        // A new user and mount namespace whose only process waits on stdin.
        let mut child = Command::new("unshare")
            .args([
                "--user",
                "--map-root-user",
                "--mount",
                "--",
                "sh",
                "-c",
                "read x; exit 0",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let at = PathBuf::from(format!("/proc/{}/ns/mnt", child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        let ns = loop {
            let seen = namespace_at(&at).unwrap();
            if seen.id != own.id {
                break seen;
            }
            assert!(
                Instant::now() < deadline,
                "unshare never entered its namespace"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(mount_namespace_exists(ns.id).unwrap(), Some(true));
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(5);
        while mount_namespace_exists(ns.id).unwrap() != Some(false) {
            assert!(
                Instant::now() < deadline,
                "namespace {} outlived its process",
                ns.id
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod lower_tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    /// A persistent path must be a real directory path of the image: an
    /// image symlink on the way (an absolute `/opt -> /etc`, a `../..`
    /// escape) is refused, so an anchor never lands on a host directory nor
    /// on another path of the image than the one it is bound at.
    #[test]
    fn an_image_symlink_on_the_way_to_a_lower_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("etc/tools")).unwrap();
        std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("/etc", rootfs.join("opt")).unwrap();
        std::os::unix::fs::symlink("../../../..", rootfs.join("usr/up")).unwrap();
        let root = std::fs::canonicalize(&rootfs).unwrap();
        let sys = RealAnchorSys;
        assert_eq!(
            sys.lower_in(&rootfs, "/usr/lib").unwrap(),
            root.join("usr/lib")
        );
        for through_a_link in ["/opt/tools", "/opt", "/usr/up"] {
            let e = sys.lower_in(&rootfs, through_a_link).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{through_a_link}: {e}");
        }
        let missing = sys.lower_in(&rootfs, "/srv/none").unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }

    /// A directory appears only with its final owner and mode; what a
    /// crashed creation left under the staging name goes first.
    #[test]
    fn a_directory_is_created_whole_under_a_staging_name() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let (uid, gid) = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        std::fs::create_dir(dir.path().join("%staged-usr")).unwrap();
        let usr = dir.path().join("usr");
        RealAnchorSys
            .create_directory(&usr, 0o755, uid, gid)
            .unwrap();
        let meta = std::fs::metadata(&usr).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        assert_eq!((meta.uid(), meta.gid()), (uid, gid));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["usr"]);
        // The staging name is no anchor's.
        assert_eq!(super::super::usage::anchor_path("%staged-usr"), None);
        // An existing directory is never replaced.
        assert!(RealAnchorSys
            .create_directory(&usr, 0o700, uid, gid)
            .is_err());
    }
}
