//! The router's FUSE connection: the `/dev/fuse` device mounted on the
//! mount point, and the notices that tell the kernel what it must no longer
//! take from its caches.
//!
//! The router mounts the device itself rather than through fuser so that it
//! keeps the device: fuser's notifier cannot say that an entry has only
//! *expired*. Dropping an entry (`d_invalidate`) makes the kernel unhash
//! it, and a process working in that directory finds its working directory
//! gone (`getcwd` fails with ENOENT) even when the directory is still
//! there. An expired entry is looked up again on its next use and dropped
//! only if the router answers with another object or none (spec 3.5:
//! "a subsequent lookup uses the current snapshot").

use super::invalidation::Invalidation;
use std::ffi::OsStr;
use std::io::IoSlice;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::Arc;

/// The name the mount shows in the mount table.
const FS_NAME: &std::ffi::CStr = c"lazaret-router";

/// `FUSE_NOTIFY_INVAL_INODE`: a node's attributes and cached content.
const NOTIFY_INVAL_INODE: i32 = 2;
/// `FUSE_NOTIFY_INVAL_ENTRY`: an entry of a directory.
const NOTIFY_INVAL_ENTRY: i32 = 3;
/// `FUSE_EXPIRE_ONLY` (Linux 6.2): the entry expires instead of being
/// unhashed. Older kernels ignore the field and drop the entry.
const EXPIRE_ONLY: u32 = 1;
/// The longest name a notice carries (the kernel refuses longer ones).
const NAME_MAX: usize = 1024;

/// Opens `/dev/fuse` and mounts it on `mountpoint` (nodev, nosuid; only the
/// mounting user may use it). Returns the device, which the session serves
/// and notices are written to.
pub(crate) fn mount_device(mountpoint: &Path) -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let device = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
    let root = rustix::fs::stat(mountpoint)?;
    let options = std::ffi::CString::new(format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        device.as_raw_fd(),
        root.st_mode,
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    ))
    .map_err(|_| rustix::io::Errno::INVAL)?;
    rustix::mount::mount(
        FS_NAME,
        mountpoint,
        c"fuse",
        rustix::mount::MountFlags::NODEV | rustix::mount::MountFlags::NOSUID,
        options.as_c_str(),
    )?;
    Ok(device)
}

/// Where the router tells the kernel what to drop: the connection's
/// device.
#[derive(Clone, Debug)]
pub(crate) struct KernelNotifier {
    device: Arc<OwnedFd>,
}

impl KernelNotifier {
    pub(crate) fn new(device: OwnedFd) -> Self {
        Self {
            device: Arc::new(device),
        }
    }

    /// Tells the kernel to drop each of `drops`: an entry expires, a node's
    /// attributes (and content) are read again. Never called with a lock of
    /// the router held: the kernel may wait, before it expires an entry,
    /// for a request on its directory that the router is serving.
    pub(crate) fn send(&self, drops: Vec<Invalidation>) {
        for drop in drops {
            let sent = match &drop {
                Invalidation::Entry { parent, name } => self.expire_entry(*parent, name),
                Invalidation::Inode(ino) => self.invalidate_node(*ino, 0),
                Invalidation::Attributes(ino) => self.invalidate_node(*ino, -1),
            };
            match sent {
                // The kernel forgot the object: it caches nothing of it.
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                // The connection is ending (unmount): nothing is cached any
                // more either.
                Err(e) => {
                    tracing::debug!(error = %e, ?drop, "a kernel cache invalidation was not taken");
                }
            }
        }
    }

    /// Expires the entry `name` of directory node `parent`.
    fn expire_entry(&self, parent: u64, name: &OsStr) -> rustix::io::Result<()> {
        let name = name.as_bytes();
        if name.len() > NAME_MAX {
            return Err(rustix::io::Errno::NAMETOOLONG);
        }
        let namelen = u32::try_from(name.len()).map_err(|_| rustix::io::Errno::NAMETOOLONG)?;
        let mut body = [0u8; 16];
        body[..8].copy_from_slice(&parent.to_ne_bytes());
        body[8..12].copy_from_slice(&namelen.to_ne_bytes());
        body[12..].copy_from_slice(&EXPIRE_ONLY.to_ne_bytes());
        self.write(NOTIFY_INVAL_ENTRY, &[&body, name, &[0]])
    }

    /// Drops node `ino`'s attributes and, from `offset` on (-1: none), its
    /// cached content.
    fn invalidate_node(&self, ino: u64, offset: i64) -> rustix::io::Result<()> {
        let mut body = [0u8; 24];
        body[..8].copy_from_slice(&ino.to_ne_bytes());
        body[8..16].copy_from_slice(&offset.to_ne_bytes());
        // Length 0: to the end.
        body[16..].copy_from_slice(&0i64.to_ne_bytes());
        self.write(NOTIFY_INVAL_INODE, &[&body])
    }

    /// Writes one notice: a `fuse_out_header` (length, the notice's code
    /// in the error field, unique 0) and `parts`, in one `writev`.
    fn write(&self, code: i32, parts: &[&[u8]]) -> rustix::io::Result<()> {
        const HEADER: usize = 16;
        let len = HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        let len = u32::try_from(len).map_err(|_| rustix::io::Errno::TOOBIG)?;
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&len.to_ne_bytes());
        header[4..8].copy_from_slice(&code.to_ne_bytes());
        let mut iov = Vec::with_capacity(1 + parts.len());
        iov.push(IoSlice::new(&header));
        iov.extend(parts.iter().map(|p| IoSlice::new(p)));
        let written = rustix::io::writev(self.device.as_fd(), &iov)?;
        // A notice is taken whole or refused.
        debug_assert_eq!(u32::try_from(written).ok(), Some(len));
        Ok(())
    }
}
