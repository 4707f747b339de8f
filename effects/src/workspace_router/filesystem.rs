//! The ignored-path router (spec 3.5, "Ignored Workspace State routing
//! contract"; SR-13): a FUSE filesystem presenting one workspace tree, each
//! pathname operation routed by the [`ClassificationSnapshot`] to exactly
//! one backing — the canonical Agent Workspace (host) or the Domain's
//! Ignored Workspace State (isolated).
//!
//! - **Lookup** finds the entry the snapshot selects: a host entry is
//!   visible only where its path (and kind) route to the host, an isolated
//!   one only where they route to isolated state. An ignored host entry is
//!   hidden even when no isolated one exists; a stale isolated entry is
//!   kept, hidden, while its path routes to the host.
//! - **Creation** happens in the backing the new path routes to; isolated
//!   state gets the directories on the way made on demand.
//! - **Rename and hard link** stay in one backing, or fail with `EXDEV`
//!   before either changes; `RENAME_WHITEOUT` is `EOPNOTSUPP`; device nodes
//!   are `EPERM` ([`operations`]).
//! - **Allocation, hole queries, copy range, `user.*` extended
//!   attributes** act on the object in its own backing (`extended.rs`).
//! - **Modes**: no object made or changed through the router keeps
//!   set-user-ID, set-group-ID or write-for-others bits
//!   ([`operations::hygienic_mode`]).
//!
//! It is a passthrough over `O_PATH` descriptors opened without following
//! any symbolic link and never above a backing's root. An inode holds no
//! descriptor (an open handle, of a file or a directory, holds one): each
//! operation opens its object again by path and checks that it is still
//! the same (device, inode), else `ESTALE`; an object unlinked while open
//! is reached through its open handle. The kernel
//! caches entries and attributes for [`CACHE_TTL`] only where the router
//! hears of every change, and drops them when one happens
//! ([`super::invalidation`]); elsewhere timeouts are zero. Bounded: at most [`MAX_INODES`] inodes, [`MAX_HANDLES`] open
//! handles and [`MAX_DIR_ENTRIES`] entries per listing.

mod extended;

use super::invalidation::{HostEvent, HostWatches, Invalidation};
use crate::fuse_passthrough::{
    attr, component, dirent_kind, errno, io_errno, kind_of, lock, open_path, proc_path, read_at,
    reply_entries, reply_statfs, set_times, stat_fd, sync,
};
use extended::Xattr;
use fuser::{
    CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use lazaret_runtime::git_sentry::{Change, Origin};
use lazaret_runtime::workspace_routing::index_admission::ObjectKind;
use lazaret_runtime::workspace_routing::operations::{
    hygienic_mode, joining, may_change, may_make, NodeKind, Operation, Refusal,
};
use lazaret_runtime::workspace_routing::{Backing, ClassificationSnapshot, Decision};
use rustix::fs::inotify::ReadFlags;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat, CWD};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, SystemTime};

/// The most inodes the router tracks at once. A record is memory only (a
/// path and an identity, no descriptor), and the kernel keeps an inode as
/// long as its unused-dentry cache does: until memory pressure.
pub const MAX_INODES: usize = 1_000_000;
/// The most open file and directory handles at once.
pub const MAX_HANDLES: usize = 65_536;
/// The most entries one directory listing holds.
pub const MAX_DIR_ENTRIES: usize = 1_000_000;
/// How long the kernel may keep an entry or attributes the router hears
/// every change of ([`super::invalidation`]).
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// The timeout of everything else: the host may change it at any time.
const UNCACHED: Duration = Duration::ZERO;
/// The most entries a directory rename looks at below the directory.
pub const MAX_CHECKED_ENTRIES: usize = 100_000;
/// Node ids from here on are the router's own (below, the host's inode
/// numbers).
const SYNTHETIC_INOS: u64 = 1 << 62;

/// One object the kernel knows by a node id. No descriptor: the kernel
/// keeps inodes it no longer uses (zero-timeout dentries stay in its
/// unused-dentry cache until memory pressure), and runsc pins the ones it
/// retains, so a descriptor per inode would exhaust the router's budget on
/// a large tree. Each operation opens the object again by its path
/// ([`reopen`]) and checks its identity.
#[derive(Debug)]
struct Inode {
    /// The backing's (device, inode).
    id: (u64, u64),
    backing: Backing,
    /// The path from the workspace root (bytes; empty for the root): the
    /// routes of its children depend on it.
    path: Vec<u8>,
    lookups: u64,
    dir: bool,
    /// Whether the kernel may cache its entry and attributes.
    cached: bool,
    /// A host directory whose changes are watched: its entries may be
    /// cached.
    watched: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Inodes {
    by_ino: HashMap<u64, Inode>,
    by_id: HashMap<(u64, u64), u64>,
    next: u64,
}

#[derive(Debug)]
enum Handle {
    /// An open file, its node id, and whether closing it may have changed
    /// an ignore file (opened for writing at a `.gitignore` name).
    File(Arc<std::fs::File>, u64, bool),
    Dir(Arc<Listing>),
}

/// An open directory: the entries taken when it was opened, and the
/// directory itself (a listing with attributes finds it again through
/// this descriptor where the host has moved it since).
#[derive(Debug)]
struct Listing {
    dir: Node,
    entries: Vec<(OsString, u64, FileType)>,
}

/// The classification snapshot in force (spec 3.5: "Publication of a changed
/// index or ignore input ... either installs one complete new snapshot or
/// leaves the prior snapshot active"). Each pathname operation takes the
/// current one once and uses it throughout.
///
/// An operation whose answer the kernel may cache holds the snapshot
/// ([`PublishedSnapshot::pinned`]) until the answer is sent, and
/// publication waits for it: every entry answered under the prior
/// snapshot is then known to the router before it drops, after
/// publication, the ones whose route changed
/// (`KernelCache::after_publication`).
#[derive(Debug)]
pub struct PublishedSnapshot {
    current: RwLock<Arc<ClassificationSnapshot>>,
    gate: RwLock<()>,
}

impl PublishedSnapshot {
    /// `snapshot` in force.
    pub fn new(snapshot: ClassificationSnapshot) -> Self {
        Self {
            current: RwLock::new(Arc::new(snapshot)),
            gate: RwLock::new(()),
        }
    }

    /// The snapshot in force, kept in force until the guard is dropped
    /// (take it once per operation: a second read could wait behind a
    /// waiting publication that waits for the first).
    pub fn pinned(&self) -> (RwLockReadGuard<'_, ()>, Arc<ClassificationSnapshot>) {
        let gate = self
            .gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (gate, self.current())
    }

    /// The snapshot in force now.
    pub fn current(&self) -> Arc<ClassificationSnapshot> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Puts `snapshot` in force for every operation that starts from now on.
    pub fn publish(&self, snapshot: ClassificationSnapshot) {
        let _gate = self
            .gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
    }
}

/// Whether `name` is an ignore file whose change the snapshot must follow.
fn is_ignore_file(name: &[u8]) -> bool {
    name == b".gitignore" || name.ends_with(b"/.gitignore")
}

#[derive(Debug, Default)]
struct Handles {
    open: HashMap<u64, Handle>,
    next: u64,
}

/// The changes of one `setattr` request.
#[derive(Clone, Copy, Debug)]
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<FileHandle>,
}

/// What an operation needs of one inode, copied out of the table.
#[derive(Clone, Debug)]
struct Node {
    fd: Arc<OwnedFd>,
    backing: Backing,
    path: Vec<u8>,
}

/// The router over one workspace and its Ignored Workspace State.
#[derive(Debug)]
pub struct RouterFs {
    snapshot: Arc<PublishedSnapshot>,
    /// Asks the snapshot's watcher to look now (after an ignore file
    /// changed through the router); never blocks.
    nudge: SyncSender<()>,
    host_root: Arc<OwnedFd>,
    isolated_root: Arc<OwnedFd>,
    inodes: Arc<Mutex<Inodes>>,
    handles: Mutex<Handles>,
    cache: KernelCache,
}

/// What the router needs to keep the kernel's caches true
/// ([`super::invalidation`]): the inodes the kernel knows and the watches of
/// host directories. Lock order: inodes, then watches.
#[derive(Clone, Debug)]
pub(crate) struct KernelCache {
    inodes: Arc<Mutex<Inodes>>,
    watches: Arc<Mutex<HostWatches>>,
    host_root: Arc<OwnedFd>,
    /// The workspace root's (device, inode) and whether it is watched.
    root: ((u64, u64), bool),
    /// False once host changes can no longer be followed: nothing more is
    /// cached.
    caching: Arc<AtomicBool>,
}

fn refused(r: Refusal) -> Errno {
    match r {
        Refusal::CrossBacking => Errno::EXDEV,
        Refusal::Whiteout | Refusal::UnsupportedAttribute => Errno::EOPNOTSUPP,
        Refusal::DeviceNode | Refusal::NestedHostGitEntry | Refusal::HostHeadDirectory => {
            Errno::EPERM
        }
    }
}

/// The attributes the sandbox sees of `st` as node `ino`. A directory's
/// link count is 1 ("not counted", as on btrfs): the backing's counts its
/// subdirectories, hidden ones too, which would tell the sandbox how many
/// ignored host directories it does not see; tools that read subdirectory
/// counts from it (`find`) take 1 to mean unknown.
fn shown(ino: u64, st: &Stat) -> FileAttr {
    let mut a = attr(ino, st);
    if is_dir(st) {
        a.nlink = 1;
    }
    a
}

fn is_dir(st: &Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
}

/// `parent/name` as a workspace path.
fn child_path(parent: &[u8], name: &OsStr) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    p.extend_from_slice(parent);
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name.as_bytes());
    p
}

/// A directory descriptor (`O_PATH`) for `path` beneath `root`, opened one
/// component at a time without following links; `None` when a component is
/// missing. With `make`, missing directories are made (mode 0755).
fn beneath(root: &OwnedFd, path: &[u8], make: bool) -> Result<Option<OwnedFd>, Errno> {
    let mut dir = rustix::io::dup(root).map_err(errno)?;
    if path.is_empty() {
        return Ok(Some(dir));
    }
    for part in path.split(|b| *b == b'/') {
        let name = component(OsStr::from_bytes(part))?;
        let next = match open_dir(&dir, name) {
            Ok(fd) => fd,
            Err(e) if e == Errno::ENOENT && make => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(errno(e)),
                }
                open_dir(&dir, name)?
            }
            Err(e) if e == Errno::ENOENT || e == Errno::ENOTDIR => return Ok(None),
            Err(e) => return Err(e),
        };
        dir = next;
    }
    Ok(Some(dir))
}

/// The object at the workspace path `path` beneath `root` (`O_PATH`, no
/// symbolic link followed on the way or at the end, never above `root`),
/// provided it is still the object `id` (device, inode); `ESTALE` when
/// another object took its place or none is there any more. The object may
/// live on at another path (the host moved it or a directory above it, and
/// the kernel, whose entries only expire, still holds it below the new
/// name): on `ESTALE` the kernel looks the path up again, and that lookup
/// records the object's new path.
fn reopen(root: &OwnedFd, path: &[u8], id: (u64, u64)) -> Result<OwnedFd, Errno> {
    let fd = if path.is_empty() {
        rustix::io::dup(root).map_err(errno)?
    } else {
        match rustix::fs::openat2(
            root,
            OsStr::from_bytes(path),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Err(Errno::ESTALE),
            Err(e) => return Err(errno(e)),
        }
    };
    let st = stat_fd(&fd)?;
    if (st.st_dev, st.st_ino) != id {
        return Err(Errno::ESTALE);
    }
    Ok(fd)
}

fn open_dir(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Opens the directory behind `dir` (possibly an `O_PATH` handle) for
/// reading its entries.
fn open_listing(dir: &OwnedFd) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Sets exactly `mode` (hygienic) on the object behind `fd`, whatever the
/// router's umask; symbolic links have no mode to set.
fn set_mode(fd: &OwnedFd, mode: u32) -> Result<(), Errno> {
    let st = stat_fd(fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
        return Ok(());
    }
    rustix::fs::chmodat(
        CWD,
        proc_path(fd),
        Mode::from_raw_mode(hygienic_mode(mode)),
        AtFlags::empty(),
    )
    .map_err(errno)
}

impl RouterFs {
    /// A router over the workspace directory `host_root` and the Domain's
    /// Ignored Workspace State directory `isolated_root` (both descriptors
    /// the caller opened and verified), routing by the snapshot in force in
    /// `snapshot`; `nudge` tells its watcher an ignore file changed;
    /// `watches` follows host directories.
    pub fn new(
        host_root: OwnedFd,
        isolated_root: OwnedFd,
        snapshot: Arc<PublishedSnapshot>,
        nudge: SyncSender<()>,
        mut watches: HostWatches,
    ) -> Result<Self, rustix::io::Errno> {
        let st = rustix::fs::fstat(&host_root)?;
        let root_id = (st.st_dev, st.st_ino);
        let root_watched = watches.watch(&host_root, root_id);
        let host_root = Arc::new(host_root);
        let inodes = Arc::new(Mutex::new(Inodes {
            next: SYNTHETIC_INOS,
            ..Inodes::default()
        }));
        Ok(Self {
            snapshot,
            nudge,
            host_root: Arc::clone(&host_root),
            isolated_root: Arc::new(isolated_root),
            inodes: Arc::clone(&inodes),
            handles: Mutex::new(Handles::default()),
            cache: KernelCache {
                inodes,
                watches: Arc::new(Mutex::new(watches)),
                host_root,
                root: (root_id, root_watched),
                caching: Arc::new(AtomicBool::new(true)),
            },
        })
    }

    /// What keeps the kernel's caches of this router true.
    pub(crate) fn kernel_cache(&self) -> KernelCache {
        self.cache.clone()
    }

    /// The entry and attribute timeout of node `ino`.
    fn ttl(&self, ino: u64) -> Duration {
        let cached = if ino == INodeNo::ROOT.0 {
            self.cache.root.1
        } else {
            lock(&self.inodes)
                .by_ino
                .get(&ino)
                .is_some_and(|i| i.cached)
        };
        if cached && self.cache.caching.load(Ordering::SeqCst) {
            CACHE_TTL
        } else {
            UNCACHED
        }
    }

    fn node(&self, ino: INodeNo) -> Result<Node, Errno> {
        if ino.0 == INodeNo::ROOT.0 {
            return Ok(Node {
                fd: Arc::clone(&self.host_root),
                backing: Backing::Host,
                path: Vec::new(),
            });
        }
        let (id, backing, path) = {
            let t = lock(&self.inodes);
            let i = t.by_ino.get(&ino.0).ok_or(Errno::ESTALE)?;
            (i.id, i.backing, i.path.clone())
        };
        let root = match backing {
            Backing::Host => &self.host_root,
            Backing::Isolated => &self.isolated_root,
        };
        let fd = match reopen(root, &path, id) {
            Ok(fd) => fd,
            // Gone from its path (unlinked, or moved by the host) but still
            // open through the router: the open file is the object.
            Err(e) => self.open_file_of(ino.0).ok_or(e)?,
        };
        Ok(Node {
            fd: Arc::new(fd),
            backing,
            path,
        })
    }

    /// Directory node `ino` of an open listing (`opened`) as it is now: by
    /// its recorded path (the sandbox's renames keep it current), else,
    /// where the host moved it, by where its descriptor is now, which
    /// becomes its recorded path. `None` when it is no longer in the
    /// workspace (removed, or moved out).
    fn listed_dir(&self, ino: INodeNo, opened: &Node) -> Option<Node> {
        if let Ok(node) = self.node(ino) {
            return Some(node);
        }
        if opened.backing != Backing::Host {
            // Only the router changes isolated state: its record is current.
            return None;
        }
        let now = std::fs::read_link(proc_path(&opened.fd)).ok()?;
        let root = std::fs::read_link(proc_path(&self.host_root)).ok()?;
        let path = now
            .strip_prefix(&root)
            .ok()?
            .as_os_str()
            .as_bytes()
            .to_vec();
        let mut t = lock(&self.inodes);
        let i = t.by_ino.get_mut(&ino.0)?;
        let fd = reopen(&self.host_root, &path, i.id).ok()?;
        i.path.clone_from(&path);
        Some(Node {
            fd: Arc::new(fd),
            backing: Backing::Host,
            path,
        })
    }

    /// A descriptor of an open file handle of node `ino`, if any.
    fn open_file_of(&self, ino: u64) -> Option<OwnedFd> {
        let h = lock(&self.handles);
        // Bounded by MAX_HANDLES; only when the path no longer leads to it.
        h.open.values().find_map(|handle| match handle {
            Handle::File(f, of, _) if *of == ino => f.try_clone().ok().map(OwnedFd::from),
            _ => None,
        })
    }

    fn route(snap: &ClassificationSnapshot, path: &[u8], dir: bool) -> Result<Backing, Errno> {
        snap.classify(path, dir)
            .map(|r| r.backing)
            .map_err(|_| Errno::EINVAL)
    }

    /// `EPERM` when `op` would change what a nested host repository's Git
    /// runs or trusts ([`may_change`]).
    fn may_change(
        &self,
        snap: &ClassificationSnapshot,
        path: &[u8],
        dir: bool,
        op: Operation,
    ) -> Result<(), Errno> {
        if path.is_empty() {
            // The workspace root.
            return Ok(());
        }
        let route = snap.classify(path, dir).map_err(|_| Errno::EINVAL)?;
        may_change(snap, &route, path, op, |at| self.host_origin(at)).map_err(|r| {
            tracing::info!(path = %String::from_utf8_lossy(path), ?op, refusal = ?r, "refused a change to a host repository's git directory");
            refused(r)
        })
    }

    /// Before a rename of `object` (`st`) onto `to`: when `to` is the index
    /// of a nested host repository, the judgement of the object as its next
    /// index (spec 3.5, index publication: `EBUSY` for one that would track
    /// an isolated-only path). The workspace's own index is the Git Sentry
    /// filter's to judge.
    fn judge_nested_index(
        &self,
        snap: &ClassificationSnapshot,
        object: &OwnedFd,
        st: &Stat,
        to: &[u8],
    ) -> Result<(), Errno> {
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Ok(());
        }
        let route = snap.classify(to, false).map_err(|_| Errno::EINVAL)?;
        let repository = route.repository;
        let is_its_index = route.decision == Decision::GitDirectory
            && !repository.is_empty()
            && to.strip_prefix(repository.as_slice()) == Some(b"/.git/index".as_slice());
        if !is_its_index {
            return Ok(());
        }
        if st.st_nlink != 1 {
            // A second name would write the index after the judgement.
            return Err(Errno::EBUSY);
        }
        // Through the descriptor (a regular file, checked above).
        let proposed = rustix::fs::openat(
            CWD,
            proc_path(object),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(errno)?;
        super::index_admission::judge(
            snap,
            &repository,
            &proposed,
            (&self.host_root, &self.isolated_root),
        )
    }

    /// Whether the host has a directory at the workspace path `path`.
    fn host_origin(&self, path: &[u8]) -> Origin {
        match super::index_admission::object_kind(&self.host_root, path) {
            Some(ObjectKind::Directory) => Origin::HostDirectory,
            _ => Origin::Other,
        }
    }

    /// After `name` changed through the router: if it is an ignore file,
    /// the watcher looks at once (a full nudge queue already asks).
    fn changed(&self, name: &[u8]) {
        if is_ignore_file(name) {
            let _ = self.nudge.try_send(());
        }
    }

    /// The directory holding `node`'s children in `backing`: the node itself
    /// when it lives there, else its counterpart in isolated state (made on
    /// demand with `make`). Below an isolated directory everything routes to
    /// isolated state, so a host child of one is never asked for.
    fn dir_in(
        &self,
        node: &Node,
        backing: Backing,
        make: bool,
    ) -> Result<Option<Arc<OwnedFd>>, Errno> {
        if node.backing == backing {
            return Ok(Some(Arc::clone(&node.fd)));
        }
        match backing {
            Backing::Isolated => Ok(beneath(&self.isolated_root, &node.path, make)?.map(Arc::new)),
            Backing::Host => Ok(None),
        }
    }

    /// The entry `name` of `parent` the snapshot selects: the host entry if
    /// its path and kind route to the host, else the isolated one if they
    /// route there.
    fn resolve(
        &self,
        snap: &ClassificationSnapshot,
        parent: &Node,
        name: &OsStr,
    ) -> Result<(Backing, OwnedFd, Stat), Errno> {
        let name = component(name)?;
        let path = child_path(&parent.path, name);
        // Kinds of the objects found but not selected, by backing.
        let mut hidden: [Option<bool>; 2] = [None, None];
        for (i, backing) in [Backing::Host, Backing::Isolated].into_iter().enumerate() {
            let Some(dir) = self.dir_in(parent, backing, false)? else {
                continue;
            };
            match open_path(&dir, name) {
                Ok(fd) => {
                    let st = stat_fd(&fd)?;
                    if Self::route(snap, &path, is_dir(&st))? == backing {
                        return Ok((backing, fd, st));
                    }
                    hidden[i] = Some(is_dir(&st));
                }
                Err(e) if e == Errno::ENOENT => {}
                Err(e) => return Err(e),
            }
        }
        // spec 3.5: a tracked path whose only object is isolated (the host
        // changed its index, unmediated) fails with EIO until the host makes
        // index and worktree agree; the isolated object stays.
        if let [None, Some(dir)] = hidden {
            let route = snap.classify(&path, dir).map_err(|_| Errno::EINVAL)?;
            if route.decision == Decision::Tracked {
                tracing::info!(path = %String::from_utf8_lossy(&path), "a tracked path exists only in the Ignored Workspace State (EIO)");
                return Err(Errno::EIO);
            }
        }
        Err(Errno::ENOENT)
    }

    /// Records the object `st` (opened as `fd`) in `backing` at `path`,
    /// reached from directory node `parent`: its node id. A host directory
    /// is watched (through `fd`: a directory always comes with one); the
    /// kernel may cache the object where every change to it is heard of
    /// ([`super::invalidation`]).
    fn remember(
        &self,
        parent: u64,
        fd: Option<&OwnedFd>,
        st: &Stat,
        backing: Backing,
        path: Vec<u8>,
    ) -> Result<u64, Errno> {
        let id = (st.st_dev, st.st_ino);
        let dir = is_dir(st);
        debug_assert!(fd.is_some() || !dir, "a directory is remembered opened");
        let mut t = lock(&self.inodes);
        let parent_watched = if parent == INodeNo::ROOT.0 {
            self.cache.root.1
        } else {
            t.by_ino.get(&parent).is_some_and(|p| p.watched)
        };
        let cached = match backing {
            // Only the router changes isolated state.
            Backing::Isolated => true,
            // A second name of a file is not watched.
            Backing::Host => parent_watched && (dir || st.st_nlink <= 1),
        };
        // Under the inodes lock (the lock order), so that a concurrent
        // forget cannot end the watch of a directory recorded as watched.
        let watched = backing == Backing::Host
            && dir
            && fd.is_some_and(|fd| lock(&self.cache.watches).watch(fd, id));
        if let Some(&ino) = t.by_id.get(&id) {
            if let Some(i) = t.by_ino.get_mut(&ino) {
                i.lookups = i.lookups.saturating_add(1);
                // The name it was reached by last decides its children.
                i.path = path;
                i.backing = backing;
                i.dir = dir;
                i.cached = cached;
                i.watched = watched;
                return Ok(ino);
            }
        }
        if t.by_ino.len() >= MAX_INODES {
            return Err(Errno::ENFILE);
        }
        // The node id is what `stat` shows as the inode number: the host's
        // own where it is free, so Git's index keeps matching what it
        // recorded (a differing inode number makes Git read every file
        // again). Otherwise (another backing's object took it) one of a range
        // no file system of these hosts hands out.
        let ino =
            if st.st_ino > 1 && st.st_ino < SYNTHETIC_INOS && !t.by_ino.contains_key(&st.st_ino) {
                st.st_ino
            } else {
                let ino = t.next;
                t.next = t.next.checked_add(1).ok_or(Errno::ENFILE)?;
                ino
            };
        t.by_ino.insert(
            ino,
            Inode {
                id,
                backing,
                path,
                lookups: 1,
                dir,
                cached,
                watched,
            },
        );
        t.by_id.insert(id, ino);
        Ok(ino)
    }

    /// The kernel dropped `nlookup` of its lookups of `ino`; a node it no
    /// longer knows is gone (and its directory no longer watched).
    fn forget_lookups(&self, ino: INodeNo, nlookup: u64) {
        let mut t = lock(&self.inodes);
        let gone = match t.by_ino.get_mut(&ino.0) {
            Some(i) => {
                i.lookups = i.lookups.saturating_sub(nlookup);
                i.lookups == 0
            }
            None => false,
        };
        if gone {
            if let Some(i) = t.by_ino.remove(&ino.0) {
                t.by_id.remove(&i.id);
                if i.watched {
                    lock(&self.cache.watches).unwatch(i.id);
                }
            }
        }
    }

    fn entry_of(
        &self,
        snap: &ClassificationSnapshot,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<FileAttr, Errno> {
        let p = self.node(parent)?;
        self.entry_in(snap, (parent, &p), name)
    }

    /// [`Self::entry_of`] with the parent's node already opened.
    fn entry_in(
        &self,
        snap: &ClassificationSnapshot,
        (parent, p): (INodeNo, &Node),
        name: &OsStr,
    ) -> Result<FileAttr, Errno> {
        let (backing, fd, st) = self.resolve(snap, p, name)?;
        let ino = self.remember(parent.0, Some(&fd), &st, backing, child_path(&p.path, name))?;
        Ok(shown(ino, &st))
    }

    /// A listed entry of `parent`, as [`Self::entry_in`] finds it: a host
    /// object that is not a directory and routes to the host is taken by
    /// its `stat` alone (only a directory is opened, for its watch), the
    /// rest by a full lookup. `host` is `parent`'s host directory.
    fn listed(
        &self,
        snap: &ClassificationSnapshot,
        (parent, p): (INodeNo, &Node),
        host: Option<&OwnedFd>,
        name: &OsStr,
    ) -> Result<FileAttr, Errno> {
        if let Some(host) = host {
            let name = component(name)?;
            match rustix::fs::statat(host, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if !is_dir(&st) => {
                    let path = child_path(&p.path, name);
                    if Self::route(snap, &path, false)? == Backing::Host {
                        let ino = self.remember(parent.0, None, &st, Backing::Host, path)?;
                        return Ok(shown(ino, &st));
                    }
                }
                Ok(_) => {}
                Err(e) if e == rustix::io::Errno::NOENT => {}
                Err(e) => return Err(errno(e)),
            }
        }
        self.entry_in(snap, (parent, p), name)
    }

    /// Where a new object `name` of `parent` goes: the backing its path
    /// routes to (as a directory when `dir`) and that backing's directory;
    /// `EPERM` where [`may_change`] refuses.
    fn placement(
        &self,
        snap: &ClassificationSnapshot,
        parent: &Node,
        name: &OsStr,
        dir: bool,
    ) -> Result<(Backing, Arc<OwnedFd>), Errno> {
        let name = component(name)?;
        let path = child_path(&parent.path, name);
        let op = if dir {
            Operation::MakeDirectory
        } else {
            Operation::Rebind
        };
        self.may_change(snap, &path, dir, op)?;
        let backing = Self::route(snap, &path, dir)?;
        let at = self.dir_in(parent, backing, true)?.ok_or(Errno::EXDEV)?;
        Ok((backing, at))
    }

    fn made(
        &self,
        (parent_ino, parent): (INodeNo, &Node),
        at: &OwnedFd,
        name: &OsStr,
        backing: Backing,
        mode: Option<u32>,
    ) -> Result<(FileAttr, u64), Errno> {
        let fd = open_path(at, name)?;
        if let Some(m) = mode {
            set_mode(&fd, m)?;
        }
        let st = stat_fd(&fd)?;
        self.changed(name.as_bytes());
        let ino = self.remember(
            parent_ino.0,
            Some(&fd),
            &st,
            backing,
            child_path(&parent.path, name),
        )?;
        Ok((shown(ino, &st), ino))
    }

    fn add_handle(&self, handle: Handle) -> Result<u64, Errno> {
        let mut h = lock(&self.handles);
        if h.open.len() >= MAX_HANDLES {
            return Err(Errno::EMFILE);
        }
        h.next = h.next.wrapping_add(1);
        let fh = h.next;
        h.open.insert(fh, handle);
        Ok(fh)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<std::fs::File>, Errno> {
        match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::File(f, _, _)) => Ok(Arc::clone(f)),
            _ => Err(Errno::EBADF),
        }
    }

    /// After a rename of `from` to `to`: every known path at or below
    /// `from` now lies below `to`.
    fn moved(&self, from: &[u8], to: &[u8]) {
        let mut t = lock(&self.inodes);
        for i in t.by_ino.values_mut() {
            let below = i.path.len() > from.len()
                && i.path.starts_with(from)
                && i.path.get(from.len()) == Some(&b'/');
            if i.path == from || below {
                let mut p = to.to_vec();
                p.extend_from_slice(&i.path[from.len()..]);
                i.path = p;
            }
        }
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let snap = self.snapshot.current();
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(refused(Refusal::Whiteout));
        }
        let from = self.node(parent)?;
        let to = self.node(newparent)?;
        let (name, newname) = (component(name)?, component(newname)?);
        let (backing, src_fd, st) = self.resolve(&snap, &from, name)?;
        let from_path = child_path(&from.path, name);
        let to_path = child_path(&to.path, newname);
        self.may_change(&snap, &from_path, is_dir(&st), Operation::Rebind)?;
        self.may_change(&snap, &to_path, is_dir(&st), Operation::Rebind)?;
        joining(backing, Self::route(&snap, &to_path, is_dir(&st))?).map_err(refused)?;
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        if exchange {
            // Each object lands at the other's path: both must route to the
            // backing they are in, and neither may be a directory (whose
            // descendants would change route).
            let (other, _, other_st) = self.resolve(&snap, &to, newname)?;
            joining(backing, other).map_err(refused)?;
            joining(other, Self::route(&snap, &from_path, is_dir(&other_st))?).map_err(refused)?;
            if is_dir(&st) || is_dir(&other_st) {
                return Err(refused(Refusal::CrossBacking));
            }
        }
        if is_dir(&st) {
            self.subtree_keeps_its_routes(&snap, backing, &src_fd, &from_path, &to_path)?;
        }
        self.judge_nested_index(&snap, &src_fd, &st, &to_path)?;
        let src_dir = self.dir_in(&from, backing, false)?.ok_or(Errno::ENOENT)?;
        let dst_dir = self.dir_in(&to, backing, true)?.ok_or(Errno::EXDEV)?;
        let mut f = rustix::fs::RenameFlags::empty();
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            f |= rustix::fs::RenameFlags::NOREPLACE;
        }
        if exchange {
            f |= rustix::fs::RenameFlags::EXCHANGE;
        }
        rustix::fs::renameat_with(&*src_dir, name, &*dst_dir, newname, f).map_err(errno)?;
        self.changed(name.as_bytes());
        self.changed(newname.as_bytes());
        if exchange {
            // Through a placeholder that no real path has (a NUL byte).
            let parked = b"\0".to_vec();
            self.moved(&from_path, &parked);
            self.moved(&to_path, &from_path);
            self.moved(&parked, &to_path);
        } else {
            self.moved(&from_path, &to_path);
        }
        Ok(())
    }

    /// A directory moves only when nothing below it changes backing with
    /// its path: every entry (hidden ones included) routes to `backing` at
    /// the old and at the new path, and no isolated content lies below a
    /// host directory (it would be left behind). Otherwise `EXDEV`, before
    /// anything changes; applications then copy. At most
    /// [`MAX_CHECKED_ENTRIES`] entries are looked at (beyond: `EXDEV`).
    fn subtree_keeps_its_routes(
        &self,
        snap: &ClassificationSnapshot,
        backing: Backing,
        dir: &OwnedFd,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), Errno> {
        if backing == Backing::Host {
            if let Some(iso) = beneath(&self.isolated_root, from, false)? {
                let listing = open_listing(&iso)?;
                let any = rustix::fs::Dir::read_from(&listing)
                    .map_err(errno)?
                    .filter_map(Result::ok)
                    .any(|e| !matches!(e.file_name().to_bytes(), b"." | b".."));
                if any {
                    return Err(refused(Refusal::CrossBacking));
                }
            }
        }
        let mut budget = MAX_CHECKED_ENTRIES;
        let mut pending: Vec<(OwnedFd, Vec<u8>)> =
            vec![(rustix::io::dup(dir).map_err(errno)?, Vec::new())];
        while let Some((at, suffix)) = pending.pop() {
            let listing = open_listing(&at)?;
            for entry in rustix::fs::Dir::read_from(&listing).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                budget = budget
                    .checked_sub(1)
                    .ok_or(refused(Refusal::CrossBacking))?;
                let name = OsStr::from_bytes(name);
                let kind = match entry.file_type() {
                    rustix::fs::FileType::Unknown => kind_of(
                        rustix::fs::statat(&listing, name, AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(errno)?
                            .st_mode,
                    ),
                    t => dirent_kind(t),
                };
                let dir = kind == FileType::Directory;
                let rel = child_path(&suffix, name);
                for base in [from, to] {
                    let path = child_path(base, OsStr::from_bytes(&rel));
                    if Self::route(snap, &path, dir)? != backing {
                        return Err(refused(Refusal::CrossBacking));
                    }
                }
                if dir {
                    pending.push((open_dir(&listing, name)?, rel));
                }
            }
        }
        Ok(())
    }

    fn do_link(
        &self,
        snap: &ClassificationSnapshot,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<FileAttr, Errno> {
        let node = self.node(ino)?;
        let to = self.node(newparent)?;
        let newname = component(newname)?;
        let st = stat_fd(&node.fd)?;
        let new_path = child_path(&to.path, newname);
        self.may_change(snap, &node.path, is_dir(&st), Operation::LinkFrom)?;
        self.may_change(snap, &new_path, is_dir(&st), Operation::Rebind)?;
        joining(node.backing, Self::route(snap, &new_path, is_dir(&st))?).map_err(refused)?;
        let at = self.dir_in(&to, node.backing, true)?.ok_or(Errno::EXDEV)?;
        rustix::fs::linkat(
            CWD,
            proc_path(&node.fd),
            &*at,
            newname,
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(errno)?;
        self.made((newparent, &to), &at, newname, node.backing, None)
            .map(|(a, _)| a)
    }

    fn do_remove(&self, parent: INodeNo, name: &OsStr, flags: AtFlags) -> Result<(), Errno> {
        let snap = self.snapshot.current();
        let p = self.node(parent)?;
        let name = component(name)?;
        let (backing, _, st) = self.resolve(&snap, &p, name)?;
        self.may_change(
            &snap,
            &child_path(&p.path, name),
            is_dir(&st),
            Operation::Rebind,
        )?;
        let at = self.dir_in(&p, backing, false)?.ok_or(Errno::ENOENT)?;
        rustix::fs::unlinkat(&*at, name, flags).map_err(errno)?;
        self.changed(name.as_bytes());
        Ok(())
    }

    fn do_setattr(&self, ino: INodeNo, change: SetAttr) -> Result<FileAttr, Errno> {
        let SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        } = change;
        let node = self.node(ino)?;
        let snap = self.snapshot.current();
        let dir = is_dir(&stat_fd(&node.fd)?);
        let changes = [
            (size.is_some(), Change::Data),
            (uid.is_some() || gid.is_some(), Change::Owner),
            (mode.is_some(), Change::Mode),
            (atime.is_some() || mtime.is_some(), Change::Times),
        ];
        for (_, c) in changes.iter().filter(|(asked, _)| *asked) {
            self.may_change(&snap, &node.path, dir, Operation::Change(*c))?;
        }
        if let Some(len) = size {
            match fh.map(|fh| self.file(fh)) {
                Some(Ok(file)) => file.set_len(len).map_err(|e| io_errno(&e))?,
                _ => std::fs::OpenOptions::new()
                    .write(true)
                    .open(proc_path(&node.fd))
                    .and_then(|f| f.set_len(len))
                    .map_err(|e| io_errno(&e))?,
            }
        }
        if uid.is_some() || gid.is_some() {
            rustix::fs::chownat(
                &*node.fd,
                "",
                uid.map(rustix::fs::Uid::from_raw),
                gid.map(rustix::fs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(errno)?;
        }
        // After a change of owner, which may have cleared set-ID bits.
        if let Some(m) = mode {
            set_mode(&node.fd, m)?;
        }
        if atime.is_some() || mtime.is_some() {
            set_times(&node.fd, atime, mtime)?;
        }
        Ok(shown(ino.0, &stat_fd(&node.fd)?))
    }

    fn open_file(&self, ino: INodeNo, flags: i32) -> Result<u64, Errno> {
        let node = self.node(ino)?;
        let raw = OFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes()));
        let keep = OFlags::RWMODE | OFlags::APPEND | OFlags::TRUNC | OFlags::SYNC | OFlags::DSYNC;
        let writes = raw.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC);
        if writes {
            self.may_change(
                &self.snapshot.current(),
                &node.path,
                false,
                Operation::Change(Change::Data),
            )?;
        }
        let fd = rustix::fs::openat(
            CWD,
            proc_path(&node.fd),
            (raw & keep) | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let watched = writes && is_ignore_file(&node.path);
        self.add_handle(Handle::File(
            Arc::new(std::fs::File::from(fd)),
            ino.0,
            watched,
        ))
    }

    fn do_create(
        &self,
        snap: &ClassificationSnapshot,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Errno> {
        let p = self.node(parent)?;
        let name = component(name)?;
        let (backing, at) = self.placement(snap, &p, name, false)?;
        let raw = OFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes()));
        let keep = OFlags::RWMODE | OFlags::APPEND | OFlags::TRUNC;
        // Exclusive: the kernel creates only what its lookup found missing,
        // and the backing's own entry there (if any) was hidden for a reason.
        let fd = rustix::fs::openat(
            &*at,
            name,
            (raw & keep) | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(hygienic_mode(mode & !umask)),
        )
        .map_err(errno)?;
        let (a, ino) = self.made((parent, &p), &at, name, backing, Some(mode & !umask))?;
        self.changed(name.as_bytes());
        let watched = is_ignore_file(name.as_bytes());
        let fh = self.add_handle(Handle::File(
            Arc::new(std::fs::File::from(fd)),
            ino,
            watched,
        ))?;
        Ok((a, fh))
    }

    fn do_mknod(
        &self,
        snap: &ClassificationSnapshot,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr, Errno> {
        use rustix::fs::FileType as T;
        let kind = match T::from_raw_mode(mode) {
            T::RegularFile => NodeKind::Regular,
            T::Fifo => NodeKind::Fifo,
            T::Socket => NodeKind::Socket,
            T::CharacterDevice => NodeKind::CharDevice,
            T::BlockDevice => NodeKind::BlockDevice,
            _ => return Err(Errno::EINVAL),
        };
        may_make(kind).map_err(refused)?;
        let p = self.node(parent)?;
        let name = component(name)?;
        let (backing, at) = self.placement(snap, &p, name, false)?;
        rustix::fs::mknodat(
            &*at,
            name,
            T::from_raw_mode(mode),
            Mode::from_raw_mode(hygienic_mode(mode & !umask)),
            u64::from(rdev),
        )
        .map_err(errno)?;
        self.made((parent, &p), &at, name, backing, Some(mode & !umask))
            .map(|(a, _)| a)
    }

    fn do_mkdir(
        &self,
        snap: &ClassificationSnapshot,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let p = self.node(parent)?;
        let name = component(name)?;
        let (backing, at) = self.placement(snap, &p, name, true)?;
        rustix::fs::mkdirat(
            &*at,
            name,
            Mode::from_raw_mode(hygienic_mode(mode & !umask)),
        )
        .map_err(errno)?;
        self.made((parent, &p), &at, name, backing, Some(mode & !umask))
            .map(|(a, _)| a)
    }

    fn do_symlink(
        &self,
        snap: &ClassificationSnapshot,
        parent: INodeNo,
        name: &OsStr,
        target: &std::path::Path,
    ) -> Result<FileAttr, Errno> {
        let p = self.node(parent)?;
        let name = component(name)?;
        let (backing, at) = self.placement(snap, &p, name, false)?;
        rustix::fs::symlinkat(target, &*at, name).map_err(errno)?;
        self.made((parent, &p), &at, name, backing, None)
            .map(|(a, _)| a)
    }

    /// The entries of directory `ino` the snapshot selects, host first.
    fn listing(&self, ino: INodeNo) -> Result<Listing, Errno> {
        let snap = self.snapshot.current();
        let node = self.node(ino)?;
        let mut out: Vec<(OsString, u64, FileType)> = vec![
            (".".into(), ino.0, FileType::Directory),
            ("..".into(), ino.0, FileType::Directory),
        ];
        let mut seen: HashMap<OsString, ()> = HashMap::new();
        for backing in [Backing::Host, Backing::Isolated] {
            let Some(dir) = self.dir_in(&node, backing, false)? else {
                continue;
            };
            let listing = open_listing(&dir)?;
            for entry in rustix::fs::Dir::read_from(&listing).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." || seen.contains_key(name) {
                    continue;
                }
                let kind = match entry.file_type() {
                    rustix::fs::FileType::Unknown => {
                        let st = rustix::fs::statat(&listing, name, AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(errno)?;
                        kind_of(st.st_mode)
                    }
                    t => dirent_kind(t),
                };
                let path = child_path(&node.path, name);
                if Self::route(&snap, &path, kind == FileType::Directory)? != backing {
                    continue;
                }
                seen.insert(name.to_owned(), ());
                out.push((name.to_owned(), entry.ino(), kind));
                if out.len() > MAX_DIR_ENTRIES {
                    return Err(Errno::EFBIG);
                }
            }
        }
        Ok(Listing {
            dir: node,
            entries: out,
        })
    }
}

impl KernelCache {
    /// The node id of the object `id` the kernel knows, if any.
    fn node_of(&self, t: &Inodes, id: (u64, u64)) -> Option<u64> {
        if id == self.root.0 {
            Some(INodeNo::ROOT.0)
        } else {
            t.by_id.get(&id).copied()
        }
    }

    /// What the kernel must drop after the host changed watched
    /// directories (`events`): each changed entry, the directory's
    /// attributes, and a changed file's attributes and content.
    pub(crate) fn after_host_events(&self, events: &[HostEvent]) -> Vec<Invalidation> {
        let mut drops: std::collections::HashSet<Invalidation> = std::collections::HashSet::new();
        // Whose content or attributes changed: (directory node's path and
        // identity, entry name), looked at after the lock is released.
        let mut changed: Vec<(Vec<u8>, (u64, u64), OsString)> = Vec::new();
        {
            let mut t = lock(&self.inodes);
            for e in events {
                if e.what.contains(ReadFlags::IGNORED) {
                    // The directory is gone and its watch with it.
                    let ended = lock(&self.watches).ended(e.wd);
                    if let Some(ino) = ended.and_then(|id| self.node_of(&t, id)) {
                        if let Some(i) = t.by_ino.get_mut(&ino) {
                            i.watched = false;
                        }
                    }
                    continue;
                }
                let dir = lock(&self.watches).dir_of(e.wd);
                let Some((dir_id, node)) = dir.and_then(|id| Some((id, self.node_of(&t, id)?)))
                else {
                    // The kernel forgot the directory: it caches nothing below.
                    continue;
                };
                drops.insert(Invalidation::Attributes(node));
                let Some(name) = &e.name else {
                    continue;
                };
                drops.insert(Invalidation::Entry {
                    parent: node,
                    name: name.clone(),
                });
                let content = ReadFlags::MODIFY | ReadFlags::ATTRIB | ReadFlags::CLOSE_WRITE;
                if e.what.intersects(content) {
                    let path = if node == INodeNo::ROOT.0 {
                        Vec::new()
                    } else {
                        t.by_ino
                            .get(&node)
                            .map(|i| i.path.clone())
                            .unwrap_or_default()
                    };
                    changed.push((path, dir_id, name.clone()));
                }
            }
        }
        for (path, dir_id, name) in changed {
            let Ok(dir) = reopen(&self.host_root, &path, dir_id) else {
                continue;
            };
            let Ok(st) = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            if let Some(ino) = self.node_of(&lock(&self.inodes), (st.st_dev, st.st_ino)) {
                drops.insert(Invalidation::Inode(ino));
            }
        }
        drops.into_iter().collect()
    }

    /// The entry of every known object: (its parent's node id, its name).
    fn entries(t: &Inodes) -> HashMap<u64, (u64, OsString)> {
        let mut dirs: HashMap<&[u8], u64> = t
            .by_ino
            .iter()
            .filter(|(_, i)| i.dir)
            .map(|(ino, i)| (i.path.as_slice(), *ino))
            .collect();
        dirs.insert(b"", INodeNo::ROOT.0);
        t.by_ino
            .iter()
            .filter_map(|(ino, i)| {
                let cut = i.path.iter().rposition(|b| *b == b'/');
                let (parent, name) = match cut {
                    Some(at) => (&i.path[..at], &i.path[at + 1..]),
                    None => (&b""[..], i.path.as_slice()),
                };
                if name.is_empty() {
                    return None;
                }
                let parent = dirs.get(parent)?;
                Some((*ino, (*parent, OsStr::from_bytes(name).to_owned())))
            })
            .collect()
    }

    /// What the kernel must drop once `snapshot` is published: the entry of
    /// every object it knows whose path now routes to the other backing
    /// (spec 3.5: a subsequent lookup uses the current snapshot).
    pub(crate) fn after_publication(&self, snapshot: &ClassificationSnapshot) -> Vec<Invalidation> {
        // Copied out: classifying every known path must not hold up
        // requests.
        let (known, entries) = {
            let t = lock(&self.inodes);
            let known: Vec<(u64, Vec<u8>, bool, Backing)> = t
                .by_ino
                .iter()
                .map(|(ino, i)| (*ino, i.path.clone(), i.dir, i.backing))
                .collect();
            (known, Self::entries(&t))
        };
        known
            .into_iter()
            .filter(|(_, path, dir, backing)| {
                snapshot
                    .classify(path, *dir)
                    .map_or(true, |r| r.backing != *backing)
            })
            .filter_map(|(ino, ..)| entries.get(&ino).cloned())
            .map(|(parent, name)| Invalidation::Entry { parent, name })
            .collect()
    }

    /// Everything the kernel holds of the host: every host object's entry,
    /// attributes and content.
    pub(crate) fn everything_of_the_host(&self) -> Vec<Invalidation> {
        let t = lock(&self.inodes);
        let entries = Self::entries(&t);
        let mut drops = vec![Invalidation::Attributes(INodeNo::ROOT.0)];
        for (ino, i) in &t.by_ino {
            if i.backing != Backing::Host {
                continue;
            }
            if let Some((parent, name)) = entries.get(ino) {
                drops.push(Invalidation::Entry {
                    parent: *parent,
                    name: name.clone(),
                });
            }
            drops.push(Invalidation::Inode(*ino));
        }
        drops
    }

    /// From now on nothing is cached (host changes can no longer be
    /// followed).
    pub(crate) fn stop_caching(&self) {
        self.caching.store(false, Ordering::SeqCst);
    }
}

macro_rules! reply {
    ($reply:expr, $result:expr, $ok:expr) => {
        match $result {
            Ok(v) => $ok(v),
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for RouterFs {
    /// Listings answer with each entry's attributes where the kernel
    /// finds that useful (`READDIRPLUS_AUTO`: every listing from a
    /// directory's start, and continuations after a lookup): a directory walk (`find`,
    /// Git's untracked scan, runsc numbering what it lists) then costs a
    /// round trip per listing, not one per entry. A kernel without it gets
    /// plain listings.
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(missing) = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO)
        {
            tracing::info!(?missing, "the kernel lists without attributes");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.entry_of(&snap, parent, name);
        reply!(reply, r, |a: FileAttr| reply.entry(
            &self.ttl(a.ino.0),
            &a,
            Generation(0)
        ));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_lookups(ino, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = match fh.map(|fh| self.file(fh)) {
            Some(Ok(f)) => rustix::fs::fstat(&*f).map_err(errno),
            _ => self.node(ino).and_then(|n| stat_fd(&n.fd)),
        }
        .map(|st| shown(ino.0, &st));
        reply!(reply, r, |a: FileAttr| reply.attr(&self.ttl(a.ino.0), &a));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        let r = self.do_setattr(ino, change);
        reply!(reply, r, |a: FileAttr| reply.attr(&self.ttl(a.ino.0), &a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self
            .node(ino)
            .and_then(|n| rustix::fs::readlinkat(&*n.fd, "", Vec::new()).map_err(errno));
        reply!(reply, r, |t: std::ffi::CString| reply.data(t.as_bytes()));
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.do_mknod(&snap, parent, name, mode, umask, rdev);
        reply!(reply, r, |a: FileAttr| reply.entry(
            &self.ttl(a.ino.0),
            &a,
            Generation(0)
        ));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.do_mkdir(&snap, parent, name, mode, umask);
        reply!(reply, r, |a: FileAttr| reply.entry(
            &self.ttl(a.ino.0),
            &a,
            Generation(0)
        ));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.do_remove(parent, name, AtFlags::empty());
        reply!(reply, r, |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.do_remove(parent, name, AtFlags::REMOVEDIR);
        reply!(reply, r, |()| reply.ok());
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.do_symlink(&snap, parent, link_name, target);
        reply!(reply, r, |a: FileAttr| reply.entry(
            &self.ttl(a.ino.0),
            &a,
            Generation(0)
        ));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.do_rename(parent, name, newparent, newname, flags);
        reply!(reply, r, |()| reply.ok());
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.do_link(&snap, ino, newparent, newname);
        reply!(reply, r, |a: FileAttr| reply.entry(
            &self.ttl(a.ino.0),
            &a,
            Generation(0)
        ));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.open_file(ino, flags.0);
        reply!(reply, r, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.file(fh).and_then(|f| read_at(&f, offset, size));
        reply!(reply, r, |b: Vec<u8>| reply.data(&b));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.file(fh).and_then(|f| {
            let n = rustix::io::pwrite(&*f, data, offset).map_err(errno)?;
            u32::try_from(n).map_err(|_| Errno::EIO)
        });
        reply!(reply, r, |n| reply.written(n));
    }

    /// Nothing to do on close (writes reach the backing at once, record
    /// locks are the kernel's): `ENOSYS` makes the kernel stop sending
    /// flushes, one round trip less per close.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let closed = lock(&self.handles).open.remove(&fh.0);
        if let Some(Handle::File(_, _, true)) = closed {
            self.changed(b".gitignore");
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.file(fh).and_then(|f| sync(&f, datasync));
        reply!(reply, r, |()| reply.ok());
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.do_fallocate(fh, offset, length, mode);
        reply!(reply, r, |()| reply.ok());
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let r = self.do_lseek(fh, offset, whence);
        reply!(reply, r, |at| reply.offset(at));
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let r = self.do_copy_range((fh_in, offset_in), (fh_out, offset_out), len, flags.bits());
        reply!(reply, r, |n| reply.written(n));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.do_getxattr(ino, name, size);
        reply!(reply, r, |x| match x {
            Xattr::Size(n) => reply.size(n),
            Xattr::Data(d) => reply.data(&d),
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.do_listxattr(ino, size);
        reply!(reply, r, |x| match x {
            Xattr::Size(n) => reply.size(n),
            Xattr::Data(d) => reply.data(&d),
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = self.do_change_xattr(ino, name, Some((value, flags)));
        reply!(reply, r, |()| reply.ok());
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.do_change_xattr(ino, name, None);
        reply!(reply, r, |()| reply.ok());
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self
            .listing(ino)
            .and_then(|listing| self.add_handle(Handle::Dir(Arc::new(listing))));
        reply!(reply, r, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let listing = match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::Dir(listing)) => Arc::clone(listing),
            _ => {
                reply.error(Errno::EBADF);
                return;
            }
        };
        reply_entries(&listing.entries, offset, reply);
    }

    /// Each entry as [`Self::lookup`] would answer it, and counted as a
    /// lookup (the kernel forgets it like one); `.` and `..` are only
    /// listed (the kernel takes no lookup of them). Entries are looked up
    /// in the directory where it is now ([`Self::listed_dir`]). An entry
    /// gone since the listing was taken is left out, and so is one that
    /// cannot be looked up now (the rest of the listing still comes; a
    /// lookup of it by name reports its error); running out of inodes,
    /// descriptors or memory ends the reply instead.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let listing = match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::Dir(listing)) => Arc::clone(listing),
            _ => {
                reply.error(Errno::EBADF);
                return;
            }
        };
        // Held until the reply is sent, as a lookup's (see
        // `PublishedSnapshot::pinned`).
        let (_pin, snap) = self.snapshot.pinned();
        let Some(dir) = self.listed_dir(ino, &listing.dir) else {
            // Gone from the workspace: nothing more to list.
            reply.ok();
            return;
        };
        let dir = &dir;
        let host = match self.dir_in(dir, Backing::Host, false) {
            Ok(host) => host,
            Err(e) => {
                reply.error(e);
                return;
            }
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut left_out: Option<(usize, Errno)> = None;
        let mut added = false;
        // Bounded by the listing (at most MAX_DIR_ENTRIES) and the
        // kernel's buffer.
        for (i, (name, _, _)) in listing.entries.iter().enumerate().skip(start) {
            let next = u64::try_from(i).unwrap_or(u64::MAX).saturating_add(1);
            let dots = name == "." || name == "..";
            let found = if dots {
                stat_fd(&dir.fd).map(|st| shown(ino.0, &st))
            } else {
                self.listed(&snap, (ino, dir), host.as_deref(), name)
            };
            let a = match found {
                Ok(a) => a,
                Err(e) if e == Errno::ENOENT => continue,
                // Out of a resource, not a fault of the entry: the reply
                // ends before it (the kernel asks again from there), or,
                // first, is the error.
                Err(e) if [Errno::ENFILE, Errno::EMFILE, Errno::ENOMEM].contains(&e) => {
                    if !added {
                        reply.error(e);
                        return;
                    }
                    break;
                }
                Err(e) => {
                    let (n, _) = left_out.get_or_insert((0, e));
                    *n += 1;
                    continue;
                }
            };
            let ttl = if dots { UNCACHED } else { self.ttl(a.ino.0) };
            if reply.add(a.ino, next, name, &ttl, &a, Generation(0)) {
                // Not sent: the lookup it counted is given back.
                if !dots {
                    self.forget_lookups(a.ino, 1);
                }
                break;
            }
            added = true;
        }
        if let Some((entries, first)) = left_out {
            tracing::warn!(
                path = %String::from_utf8_lossy(&dir.path),
                entries,
                error = ?first,
                "entries left out of a listing: they cannot be looked up"
            );
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.handles).open.remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply_statfs(&self.host_root, reply);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (_pin, snap) = self.snapshot.pinned();
        let r = self.do_create(&snap, parent, name, mode, umask, flags);
        reply!(reply, r, |(a, fh): (FileAttr, u64)| reply.created(
            &self.ttl(a.ino.0),
            &a,
            Generation(0),
            FileHandle(fh),
            FopenFlags::empty()
        ));
    }
}
