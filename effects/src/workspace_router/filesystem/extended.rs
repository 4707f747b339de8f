//! The router's operations beyond lookup, read and write (spec 3.5, the v1
//! operation contract): allocation and hole punching, hole and data
//! queries, copy range within one backing (`EXDEV` across), and `user.*`
//! extended attributes. Each acts on the object of the open handle or
//! node, in its own backing, and never on the other.

use super::{refused, Handle, RouterFs};
use crate::fuse_passthrough::{errno, lock, proc_path};
use fuser::{Errno, FileHandle, INodeNo};
use lazaret_runtime::git_sentry::Change;
use lazaret_runtime::workspace_routing::operations::{
    joining, may_set_attribute, shows_attribute, Operation,
};
use lazaret_runtime::workspace_routing::Backing;
use rustix::fs::{FallocateFlags, SeekFrom, XattrFlags};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Largest extended attribute value, and largest list of names (Linux's
/// `XATTR_SIZE_MAX` and `XATTR_LIST_MAX`).
const MAX_XATTR_BYTES: usize = 65_536;
/// Most bytes one copy-range request copies (the reply counts in 32 bits;
/// the caller asks again for the rest).
const MAX_COPY_BYTES: u64 = 1 << 30;
/// `lseek` whences the kernel forwards (it answers the others itself).
const SEEK_DATA: i32 = 3;
const SEEK_HOLE: i32 = 4;

/// An extended attribute answer: the size asked for, or the bytes.
pub(super) enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

impl RouterFs {
    /// The backing of node `ino` as recorded (the node of an open file
    /// stays recorded while it is open).
    fn backing_of(&self, ino: u64) -> Result<Backing, Errno> {
        if ino == INodeNo::ROOT.0 {
            return Ok(Backing::Host);
        }
        lock(&self.inodes)
            .by_ino
            .get(&ino)
            .map(|i| i.backing)
            .ok_or(Errno::ESTALE)
    }

    /// The node id of open file `fh`.
    fn node_of(&self, fh: FileHandle) -> Result<u64, Errno> {
        match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::File(_, ino, _)) => Ok(*ino),
            _ => Err(Errno::EBADF),
        }
    }

    /// `fallocate` on open file `fh`: allocation, hole punching, zeroing,
    /// as the backing supports them (a read-only handle: `EBADF`).
    pub(super) fn do_fallocate(
        &self,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let file = self.file(fh)?;
        let mode = FallocateFlags::from_bits(u32::from_ne_bytes(mode.to_ne_bytes()))
            .ok_or(Errno::EOPNOTSUPP)?;
        rustix::fs::fallocate(&*file, mode, offset, length).map_err(errno)
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` on open file `fh`.
    pub(super) fn do_lseek(&self, fh: FileHandle, offset: i64, whence: i32) -> Result<i64, Errno> {
        let file = self.file(fh)?;
        let from = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let to = match whence {
            SEEK_DATA => SeekFrom::Data(from),
            SEEK_HOLE => SeekFrom::Hole(from),
            _ => return Err(Errno::EINVAL),
        };
        // The handle's own offset is never used (reads and writes are
        // positional), so moving it is harmless.
        let at = rustix::fs::seek(&*file, to).map_err(errno)?;
        i64::try_from(at).map_err(|_| Errno::EOVERFLOW)
    }

    /// `copy_file_range` between two open files of one backing; `EXDEV`
    /// between backings, before anything is copied (spec 3.5).
    pub(super) fn do_copy_range(
        &self,
        (from, from_at): (FileHandle, u64),
        (to, to_at): (FileHandle, u64),
        len: u64,
        flags: u64,
    ) -> Result<u32, Errno> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let source = self.backing_of(self.node_of(from)?)?;
        let destination = self.backing_of(self.node_of(to)?)?;
        joining(source, destination).map_err(refused)?;
        let (src, dst) = (self.file(from)?, self.file(to)?);
        let (mut src_at, mut dst_at) = (from_at, to_at);
        let len = usize::try_from(len.min(MAX_COPY_BYTES)).map_err(|_| Errno::EINVAL)?;
        let n =
            rustix::fs::copy_file_range(&*src, Some(&mut src_at), &*dst, Some(&mut dst_at), len)
                .map_err(errno)?;
        u32::try_from(n).map_err(|_| Errno::EIO)
    }

    /// The extended attribute `name` of node `ino` (its size when `size`
    /// is 0); names the router does not show read as absent.
    pub(super) fn do_getxattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
    ) -> Result<Xattr, Errno> {
        if !shows_attribute(name.as_bytes()) {
            return Err(Errno::NO_XATTR);
        }
        // The node holds the descriptor the path names.
        let node = self.node(ino)?;
        let path = proc_path(&node.fd);
        if size == 0 {
            let n = rustix::fs::getxattr_query(&path, name).map_err(errno)?;
            return u32::try_from(n).map(Xattr::Size).map_err(|_| Errno::E2BIG);
        }
        let mut buf = vec![
            0u8;
            usize::try_from(size)
                .unwrap_or(MAX_XATTR_BYTES)
                .min(MAX_XATTR_BYTES)
        ];
        let n = rustix::fs::getxattr(&path, name, &mut buf[..]).map_err(errno)?;
        buf.truncate(n);
        Ok(Xattr::Data(buf))
    }

    /// The names of node `ino`'s extended attributes the router shows (their
    /// total size when `size` is 0).
    pub(super) fn do_listxattr(&self, ino: INodeNo, size: u32) -> Result<Xattr, Errno> {
        // The node holds the descriptor the path names.
        let node = self.node(ino)?;
        let path = proc_path(&node.fd);
        let mut all = vec![0u8; MAX_XATTR_BYTES];
        let n = rustix::fs::listxattr(&path, &mut all[..]).map_err(errno)?;
        all.truncate(n);
        let mut shown = Vec::with_capacity(n);
        for name in all.split(|b| *b == 0).filter(|n| shows_attribute(n)) {
            shown.extend_from_slice(name);
            shown.push(0);
        }
        if size == 0 {
            return u32::try_from(shown.len())
                .map(Xattr::Size)
                .map_err(|_| Errno::E2BIG);
        }
        if shown.len() > usize::try_from(size).unwrap_or(usize::MAX) {
            return Err(Errno::ERANGE);
        }
        Ok(Xattr::Data(shown))
    }

    /// Sets (`value` given) or removes the extended attribute `name` of node
    /// `ino`: `user.*` only, and not where a nested host repository's Git
    /// keeps what it trusts.
    pub(super) fn do_change_xattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: Option<(&[u8], i32)>,
    ) -> Result<(), Errno> {
        may_set_attribute(name.as_bytes()).map_err(refused)?;
        let node = self.node(ino)?;
        let snap = self.snapshot.current();
        let dir = super::is_dir(&crate::fuse_passthrough::stat_fd(&node.fd)?);
        self.may_change(&snap, &node.path, dir, Operation::Change(Change::Xattr))?;
        let path = proc_path(&node.fd);
        match value {
            Some((bytes, flags)) => {
                let flags = XattrFlags::from_bits(u32::from_ne_bytes(flags.to_ne_bytes()))
                    .ok_or(Errno::EINVAL)?;
                rustix::fs::setxattr(&path, name, bytes, flags).map_err(errno)
            }
            None => rustix::fs::removexattr(&path, name).map_err(errno),
        }
    }
}
