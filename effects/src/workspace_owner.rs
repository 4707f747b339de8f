//! Workspace files stay the developer's (spec README decision "Sandbox
//! capabilities": files under `/workspace` stay owned by the developer on the
//! host).
//!
//! The sandbox runs as uid 0 of the Domain user namespace, whose 0 is the
//! developer and whose 1..=65536 are subordinate IDs. With `CAP_CHOWN` (which
//! package managers need) a `chown 1000 /workspace/f` inside reaches the
//! host through the gofer and leaves a file owned by a subordinate ID: a
//! directory of such files is one the developer cannot even remove. No
//! rootless kernel mechanism refuses that per operation here (idmapped mounts
//! need `CAP_SYS_ADMIN` over the workspace's filesystem, and runsc has no
//! ownership option), so the Runtime Supervisor *restores* ownership: it walks
//! the workspace and gives every entry owned by another ID of its namespace
//! back to namespace 0:0, before the sandbox starts after a generation that
//! did not finish its own restore, and after the sandbox has stopped. The
//! kernel clears setuid and setgid bits on such a `chown`; the walk also
//! clears them on regular files the developer owns, so no set-ID program the
//! sandbox made stays behind in the workspace.
//!
//! While a sandbox runs, a file it re-owned stays re-owned until the
//! restore (docs/config.md "Ownership of workspace files"); the ignored-path
//! router (spec 3.5), a FUSE filesystem over the whole workspace, is where a
//! per-operation refusal belongs.
//!
//! The walk never follows a symbolic link, never leaves the workspace's
//! mount (an entry on another mount is neither changed nor entered), and is
//! bounded in depth and in entries. Entries the namespace cannot change (a
//! host user's file the developer keeps in the project, shown as the
//! overflow ID) are counted and left alone.
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The deepest directory the walk enters (each level holds a descriptor).
pub const MAX_DEPTH: usize = 256;
/// The most entries one walk looks at.
pub const MAX_ENTRIES: u64 = 10_000_000;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o0010;

/// What the walk needs to know of one entry (`statx` without following).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryStat {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub mount_id: u64,
}

impl EntryStat {
    fn is_dir(self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// A regular file whose mode would run it as its owner or group.
    fn set_id(self) -> bool {
        self.mode & S_IFMT == S_IFREG
            && (self.mode & S_ISUID != 0 || self.mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP)
    }
}

/// The kernel calls of the walk (youki style: the real one and a fake are
/// passed in).
pub trait OwnerSys {
    /// `statx(dir, name, AT_SYMLINK_NOFOLLOW)`; `name` "." is `dir` itself.
    fn stat(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<EntryStat>;
    /// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`.
    fn open_dir(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd>;
    /// The names in `dir` (no `.` or `..`), at most `max`.
    fn names(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<Vec<CString>>;
    /// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
    fn chown(&self, dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()>;
    /// Sets the permission bits of the regular file `name` to `mode`
    /// without following a link: opened `O_PATH | O_NOFOLLOW`, checked to
    /// be the same regular file, changed through that descriptor.
    fn chmod_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        expected: EntryStat,
        mode: u32,
    ) -> io::Result<()>;
}

/// What one restore did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Entries looked at.
    pub entries: u64,
    /// Entries given back to the developer.
    pub reowned: u64,
    /// Set-ID bits cleared on developer-owned regular files.
    pub set_id_cleared: u64,
    /// Entries the namespace may not change (not the sandbox's doing).
    pub not_ours: u64,
    /// Entries on another mount (neither changed nor entered).
    pub other_mounts: u64,
    /// Directories not entered because of [`MAX_DEPTH`].
    pub too_deep: u64,
    /// Whether [`MAX_ENTRIES`] stopped the walk.
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("reading the workspace root for the ownership restore: {0}")]
    Root(#[source] io::Error),
}

/// Gives every entry under `root` (an open directory) that is not owned by
/// `owner` back to it, and clears set-ID bits of regular files. Errors on
/// single entries are counted, not fatal: a restore does all it can.
pub fn restore_owner(
    sys: &dyn OwnerSys,
    root: BorrowedFd<'_>,
    owner: (u32, u32),
) -> Result<Restored, OwnerError> {
    let _span = tracing::info_span!("RestoreWorkspaceOwner").entered();
    let dot = c".";
    let top = sys.stat(root, dot).map_err(OwnerError::Root)?;
    let mount = top.mount_id;
    let mut done = Restored::default();
    let first = sys.open_dir(root, dot).map_err(OwnerError::Root)?;
    // (directory, depth); every descriptor on the stack is one level of the
    // path being walked, so the stack is bounded by MAX_DEPTH.
    let mut stack: Vec<(OwnedFd, Vec<CString>, usize)> = Vec::new();
    let names = sys
        .names(first.as_fd(), usize::MAX)
        .map_err(OwnerError::Root)?;
    stack.push((first, names, 0));
    while let Some((dir, mut names, depth)) = stack.pop() {
        let Some(name) = names.pop() else {
            continue;
        };
        let child = {
            if done.entries >= MAX_ENTRIES {
                done.truncated = true;
                break;
            }
            done.entries += 1;
            match sys.stat(dir.as_fd(), &name) {
                Err(_) => None,
                Ok(st) if st.mount_id != mount => {
                    done.other_mounts += 1;
                    None
                }
                Ok(st) => {
                    restore_entry(sys, dir.as_fd(), &name, st, owner, &mut done);
                    st.is_dir().then_some(())
                }
            }
        };
        let opened = match child {
            Some(()) if depth + 1 >= MAX_DEPTH => {
                done.too_deep += 1;
                None
            }
            Some(()) => sys.open_dir(dir.as_fd(), &name).ok(),
            None => None,
        };
        stack.push((dir, names, depth));
        if let Some(sub) = opened {
            let left =
                usize::try_from(MAX_ENTRIES.saturating_sub(done.entries)).unwrap_or(usize::MAX);
            if let Ok(sub_names) = sys.names(sub.as_fd(), left) {
                stack.push((sub, sub_names, depth + 1));
            }
        }
    }
    if done.reowned > 0 || done.set_id_cleared > 0 || done.truncated {
        tracing::info!(?done, "workspace ownership restored");
    }
    Ok(done)
}

fn restore_entry(
    sys: &dyn OwnerSys,
    dir: BorrowedFd<'_>,
    name: &CStr,
    st: EntryStat,
    owner: (u32, u32),
    done: &mut Restored,
) {
    if (st.uid, st.gid) != owner {
        match sys.chown(dir, name, owner.0, owner.1) {
            // The kernel cleared set-ID bits of a regular file itself.
            Ok(()) => done.reowned += 1,
            Err(_) => done.not_ours += 1,
        }
        return;
    }
    if st.set_id() {
        let mode = st.mode & 0o7777 & !(S_ISUID | S_ISGID);
        match sys.chmod_file(dir, name, st, mode) {
            Ok(()) => done.set_id_cleared += 1,
            Err(_) => done.not_ours += 1,
        }
    }
}

/// The real calls (rustix).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealOwnerSys;

impl OwnerSys for RealOwnerSys {
    fn stat(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<EntryStat> {
        use rustix::fs::{statx, AtFlags, StatxFlags};
        let st = statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
        )?;
        Ok(EntryStat {
            uid: st.stx_uid,
            gid: st.stx_gid,
            mode: u32::from(st.stx_mode),
            mount_id: st.stx_mnt_id,
        })
    }

    fn open_dir(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
        use rustix::fs::{openat, Mode, OFlags};
        Ok(openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    fn names(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<Vec<CString>> {
        let mut out = Vec::new();
        let mut it = rustix::fs::Dir::read_from(dir)?;
        while let Some(entry) = it.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            if out.len() >= max {
                break;
            }
            out.push(name.to_owned());
        }
        Ok(out)
    }

    fn chown(&self, dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
        use rustix::fs::{chownat, AtFlags, Gid, Uid};
        // IDs of this namespace; AT_SYMLINK_NOFOLLOW: never a link's target.
        Ok(chownat(
            dir,
            name,
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }

    fn chmod_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        expected: EntryStat,
        mode: u32,
    ) -> io::Result<()> {
        use rustix::fs::{chmod, fstat, openat, Mode, OFlags};
        let fd = openat(
            dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = fstat(&fd)?;
        if st.st_mode & S_IFMT != S_IFREG || (st.st_uid, st.st_gid) != (expected.uid, expected.gid)
        {
            return Err(io::Error::other(
                "the entry changed before its mode could be set",
            ));
        }
        // An O_PATH descriptor cannot be fchmod'ed; its /proc/self/fd link
        // names exactly this file, never a path that could be swapped.
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        Ok(chmod(link.as_str(), Mode::from_raw_mode(mode))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// An in-memory tree: a node per path, directories by path prefix; each
    /// open directory descriptor is a pipe end mapped to its path.
    #[derive(Default)]
    struct FakeTree {
        nodes: RefCell<BTreeMap<String, EntryStat>>,
        open: RefCell<BTreeMap<i32, String>>,
        /// (path, uid, gid) of every chown, in order.
        chowns: RefCell<Vec<(String, u32, u32)>>,
        chmods: RefCell<Vec<(String, u32)>>,
        /// Paths whose chown the kernel refuses.
        refuse: Vec<String>,
    }

    const DIR: u32 = S_IFDIR | 0o755;
    const FILE: u32 = S_IFREG | 0o644;
    const LINK: u32 = 0o120_000 | 0o777;

    impl FakeTree {
        fn add(&self, path: &str, uid: u32, mode: u32, mount_id: u64) {
            self.nodes.borrow_mut().insert(
                path.to_owned(),
                EntryStat {
                    uid,
                    gid: uid,
                    mode,
                    mount_id,
                },
            );
        }

        fn path_of(&self, dir: BorrowedFd<'_>, name: &CStr) -> String {
            use std::os::fd::AsRawFd;
            let base = self.open.borrow()[&dir.as_raw_fd()].clone();
            let name = name.to_str().unwrap();
            if name == "." {
                base
            } else {
                format!("{base}/{name}")
            }
        }
    }

    impl OwnerSys for FakeTree {
        fn stat(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<EntryStat> {
            let path = self.path_of(dir, name);
            self.nodes
                .borrow()
                .get(&path)
                .copied()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }

        fn open_dir(&self, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
            use std::os::fd::AsRawFd;
            let path = self.path_of(dir, name);
            let st = self.nodes.borrow()[&path];
            assert!(
                st.is_dir(),
                "opened a non-directory {path}: links are never followed"
            );
            // A descriptor of its own names the directory; only the walk
            // holds it (its number is reused once the walk closes it).
            let (r, _) = rustix::pipe::pipe()?;
            self.open.borrow_mut().insert(r.as_raw_fd(), path);
            Ok(r)
        }

        fn names(&self, dir: BorrowedFd<'_>, max: usize) -> io::Result<Vec<CString>> {
            use std::os::fd::AsRawFd;
            let base = self.open.borrow()[&dir.as_raw_fd()].clone();
            Ok(self
                .nodes
                .borrow()
                .keys()
                .filter_map(|p| p.strip_prefix(&format!("{base}/")))
                .filter(|rest| !rest.contains('/'))
                .take(max)
                .map(|n| CString::new(n).unwrap())
                .collect())
        }

        fn chown(&self, dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
            let path = self.path_of(dir, name);
            if self.refuse.contains(&path) {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            self.chowns.borrow_mut().push((path.clone(), uid, gid));
            if let Some(st) = self.nodes.borrow_mut().get_mut(&path) {
                st.uid = uid;
                st.gid = gid;
            }
            Ok(())
        }

        fn chmod_file(
            &self,
            dir: BorrowedFd<'_>,
            name: &CStr,
            _expected: EntryStat,
            mode: u32,
        ) -> io::Result<()> {
            self.chmods
                .borrow_mut()
                .push((self.path_of(dir, name), mode));
            Ok(())
        }
    }

    fn root_fd(tree: &FakeTree) -> OwnedFd {
        use std::os::fd::AsRawFd;
        let (r, _) = rustix::pipe::pipe().unwrap();
        tree.open
            .borrow_mut()
            .insert(r.as_raw_fd(), "/ws".to_owned());
        r
    }

    #[test]
    fn reowns_what_the_sandbox_chowned_and_leaves_other_mounts_and_links_alone() {
        let tree = FakeTree {
            refuse: vec!["/ws/hostfile".into()],
            ..FakeTree::default()
        };
        tree.add("/ws", 0, DIR, 1);
        tree.add("/ws/d", 1000, DIR, 1);
        tree.add("/ws/d/e", 1000, DIR | 0o700, 1);
        tree.add("/ws/d/e/f", 1000, FILE, 1);
        tree.add("/ws/mine", 0, FILE, 1);
        tree.add("/ws/setuid", 0, S_IFREG | S_ISUID | 0o755, 1);
        tree.add("/ws/setgid-noexec", 0, S_IFREG | S_ISGID | 0o644, 1);
        tree.add("/ws/link", 0, LINK, 1);
        tree.add("/ws/linkdir-target-is-a-dir", 1000, LINK, 1);
        tree.add("/ws/mnt", 0, DIR, 2);
        tree.add("/ws/mnt/inner", 1000, FILE, 2);
        tree.add("/ws/hostfile", 65534, FILE, 1);
        let root = root_fd(&tree);
        let done = restore_owner(&tree, root.as_fd(), (0, 0)).unwrap();
        let mut chowned: Vec<String> = tree.chowns.borrow().iter().map(|c| c.0.clone()).collect();
        chowned.sort();
        assert_eq!(
            chowned,
            [
                "/ws/d",
                "/ws/d/e",
                "/ws/d/e/f",
                "/ws/linkdir-target-is-a-dir"
            ]
        );
        assert!(tree.chowns.borrow().iter().all(|c| (c.1, c.2) == (0, 0)));
        // setuid cleared; setgid without group execute is not a set-ID program
        assert_eq!(*tree.chmods.borrow(), [("/ws/setuid".to_owned(), 0o755)]);
        assert_eq!(done.reowned, 4);
        assert_eq!(done.set_id_cleared, 1);
        assert_eq!(done.not_ours, 1);
        assert_eq!(done.other_mounts, 1);
        assert!(!done.truncated);
    }

    #[test]
    fn depth_is_bounded() {
        let tree = FakeTree::default();
        tree.add("/ws", 0, DIR, 1);
        let mut path = "/ws".to_owned();
        for _ in 0..(MAX_DEPTH + 10) {
            path.push_str("/d");
            tree.add(&path, 7, DIR, 1);
        }
        let root = root_fd(&tree);
        let done = restore_owner(&tree, root.as_fd(), (0, 0)).unwrap();
        assert_eq!(done.too_deep, 1);
        assert_eq!(done.reowned, u64::try_from(MAX_DEPTH).unwrap_or(u64::MAX));
    }
}
