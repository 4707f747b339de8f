//! The Git Sentry filter (spec 3.5, SR-4): a FUSE filesystem that serves the
//! host repository's common git directory and refuses, by the pure
//! [`SentryLayout`] guards, every operation that would create, replace,
//! write or unlink a file Git reads configuration or hooks from.
//!
//! It is a passthrough over descriptors: every inode holds an `O_PATH`
//! descriptor of its host object, opened beneath its parent's with
//! `O_NOFOLLOW` one name at a time, so the sandbox's symbolic links are never
//! followed on the host. Data operations reopen that descriptor through
//! `/proc/self/fd`. Entry and attribute timeouts are zero: the host's own Git
//! shares the directory in real time (spec 3.5) and must never be shadowed by
//! a stale cache. Bounded: at most [`MAX_INODES`] inodes, [`MAX_HANDLES`] open
//! handles, [`MAX_DIR_ENTRIES`] entries per directory listing and
//! [`MAX_LISTED_ENTRIES`] entries over all open listings.

use crate::fuse_passthrough::{
    attr, component, dirent_kind, errno, io_errno, is_symlink, lock, open_path, proc_path, read_at,
    reply_entries, reply_statfs, set_times, stat_fd, sync,
};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use lazaret_runtime::git_sentry::{
    valid_head, Change, Guard, Origin, SentryLayout, MAX_HEAD_BYTES,
};
use rustix::fs::{AtFlags, Mode, OFlags, Stat, CWD};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

/// The most inodes the filter tracks at once (each holds a descriptor).
pub const MAX_INODES: usize = 200_000;
/// The most open file and directory handles at once.
pub const MAX_HANDLES: usize = 65_536;

/// How many inodes and handles the filter keeps at once. Each inode and each
/// open file holds a descriptor of the Runtime Supervisor, whose other work
/// shares the same table: a sandbox looking up more files than the
/// descriptor limit would otherwise leave the supervisor unable to open
/// anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most inodes.
    pub inodes: usize,
    /// The most open file and directory handles.
    pub handles: usize,
}

impl Limits {
    /// The filter's share of a descriptor limit of `nofile`: half for
    /// inodes, a quarter for handles, a quarter left to the supervisor
    /// (never more than [`MAX_INODES`] and [`MAX_HANDLES`]).
    pub fn for_descriptors(nofile: u64) -> Self {
        let n = usize::try_from(nofile).unwrap_or(usize::MAX);
        Self {
            inodes: (n / 2).min(MAX_INODES),
            handles: (n / 4).min(MAX_HANDLES),
        }
    }
}
/// The most entries one directory listing holds.
pub const MAX_DIR_ENTRIES: usize = 1_000_000;
/// The most entries all open directory listings hold together (about 150 MB
/// of the Runtime Supervisor's memory): each open directory handle keeps
/// its listing, so without a total the sandbox could open one large
/// directory [`MAX_HANDLES`] times.
pub const MAX_LISTED_ENTRIES: usize = 2_000_000;
/// The most directories made through the filter whose identities are kept
/// (beyond it a directory the sandbox made counts as the host's: stricter).
/// Each holds a descriptor, counted in the inode share of [`Limits`], of
/// which they take at most a quarter.
const MAX_MADE_HERE: usize = 100_000;
/// The most `HEAD.lock` files of the sandbox kept (one per guarded `HEAD`
/// at a time in practice; unlinked ones are let go when it is reached).
const MAX_OWN_LOCKS: usize = 1024;
/// The synthetic `hooks` directory's inode number (the root is 1).
const HOOKS_INO: u64 = 2;
/// Inode numbers handed out start here and are never reused.
const FIRST_INO: u64 = 3;
/// Zero: the host shares the directory in real time.
const TTL: Duration = Duration::ZERO;

/// One host object the kernel knows by a node id.
#[derive(Debug)]
struct Inode {
    fd: Arc<OwnedFd>,
    /// Host (device, inode).
    id: (u64, u64),
    guard: Guard,
    /// The path relative to the root, kept for pinned-like directories only
    /// (the layout's guards below them are found by path).
    rel: Option<PathBuf>,
    lookups: u64,
}

#[derive(Debug, Default)]
struct Inodes {
    by_ino: HashMap<u64, Inode>,
    by_id: HashMap<(u64, u64), u64>,
    /// Every object seen under a sealed guard: a second (hard) link to one
    /// of them is as sealed as the first.
    sealed: SealedIds,
    /// Directories the sandbox made through the filter in this session: under
    /// `worktrees/` and `modules/` only the others (the host's) are guarded.
    made_here: MadeHere,
    /// `HEAD.lock` files the sandbox created through the filter in this
    /// session (by identity, held open): only these may it write, re-mode,
    /// replace or remove — never the host's, mid-update.
    own_locks: MadeHere,
    next: u64,
}

/// Host objects seen under a sealed guard, by identity. Each is held open:
/// an identity is only meaningful while its object lives, and a host object
/// that host Git replaced (`config.lock` renamed over `config`) would
/// otherwise free its inode number for the sandbox's next `index.lock`,
/// which would then be refused as sealed. An object with no name left on
/// the host can no longer be reached and is let go.
#[derive(Debug, Default)]
struct SealedIds {
    held: HashMap<(u64, u64), Arc<OwnedFd>>,
}

impl SealedIds {
    fn contains(&self, id: &(u64, u64)) -> bool {
        self.held.contains_key(id)
    }

    /// Lets `id` go again (a `HEAD` replacement that was refused).
    fn remove(&mut self, id: &(u64, u64)) {
        self.held.remove(id);
    }

    fn insert(&mut self, id: (u64, u64), fd: Arc<OwnedFd>) {
        if self.held.contains_key(&id) {
            return;
        }
        // Bounded by the live host objects under sealed names (the sandbox
        // cannot create any).
        self.held
            .retain(|_, fd| stat_fd(fd).is_ok_and(|st| st.st_nlink > 0));
        self.held.insert(id, fd);
    }
}

/// Directories the sandbox made through the filter in this session where
/// that matters (an admin root, a child of an admin root or of a host
/// submodule directory), by identity. Each is held open: ext4 hands a freed
/// inode number to the next directory made, and a directory the sandbox
/// made and removed (or host Git pruned) would otherwise lend its identity to
/// the worktree or submodule the host adds next, whose admin files would
/// then be the sandbox's to rewrite (spec 3.5, SR-4). A held directory keeps
/// its number even when removed; removed ones are let go when the set is
/// full.
#[derive(Debug, Default)]
struct MadeHere {
    held: HashMap<(u64, u64), Arc<OwnedFd>>,
}

impl MadeHere {
    fn contains(&self, id: &(u64, u64)) -> bool {
        self.held.contains_key(id)
    }

    fn len(&self) -> usize {
        self.held.len()
    }

    /// Records `id`, held by `fd`, unless `max` are held (and still linked).
    fn insert(&mut self, id: (u64, u64), fd: Arc<OwnedFd>, max: usize) {
        if self.held.len() >= max {
            self.held
                .retain(|_, fd| stat_fd(fd).is_ok_and(|st| st.st_nlink > 0));
        }
        if self.held.len() < max {
            self.held.insert(id, fd);
        }
    }
}

#[derive(Debug)]
enum Handle {
    File {
        file: Arc<std::fs::File>,
        /// Host (device, inode) of the open file: a file renamed onto `HEAD`
        /// after it was opened is sealed, and its handles write no more.
        id: (u64, u64),
    },
    Dir {
        entries: Arc<Vec<(OsString, u64, FileType)>>,
    },
}

#[derive(Debug, Default)]
struct Handles {
    open: HashMap<u64, Handle>,
    next: u64,
    /// Entries held by the open directory listings together.
    listed: usize,
}

impl Handles {
    fn remove(&mut self, fh: u64) {
        if let Some(Handle::Dir { entries }) = self.open.remove(&fh) {
            self.listed = self.listed.saturating_sub(entries.len());
        }
    }
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

/// What an operation needs to know about one inode, copied out of the table.
#[derive(Clone, Debug)]
struct Node {
    fd: Arc<OwnedFd>,
    guard: Guard,
    rel: Option<PathBuf>,
    sealed: bool,
    /// A directory the sandbox made through the filter in this session.
    made_here: bool,
    /// A `HEAD.lock` the sandbox created through the filter in this session.
    own_lock: bool,
}

/// The Git Sentry filesystem over one common git directory.
#[derive(Debug)]
pub struct SentryFs {
    layout: SentryLayout,
    root: Arc<OwnedFd>,
    inodes: Mutex<Inodes>,
    handles: Mutex<Handles>,
    limits: Limits,
    /// Held shared by every data write and every change of a name, and
    /// exclusively while a file is validated and renamed onto `HEAD` or
    /// judged and renamed onto the workspace's index: the file validated is
    /// the file renamed, and nothing writes to it in between (spec 3.5,
    /// SR-4).
    head_swap: RwLock<()>,
    /// The workspace repository's index, judged before a rename replaces it.
    index: Option<JudgedIndex>,
}

/// The synthetic, empty, read-only default `hooks` directory.
fn hooks_attr(root: &Stat) -> FileAttr {
    let mut a = attr(HOOKS_INO, root);
    a.kind = FileType::Directory;
    a.perm = 0o555;
    a.nlink = 2;
    a.size = 0;
    a.blocks = 0;
    a
}

/// Up to [`MAX_HEAD_BYTES`] + 1 bytes of the regular file behind `fd`.
fn read_head(fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let file = rustix::fs::openat(
        CWD,
        proc_path(fd),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let mut out = vec![0u8; MAX_HEAD_BYTES + 1];
    let mut filled = 0;
    // Bounded: at most MAX_HEAD_BYTES + 1 bytes, each read makes progress or
    // ends.
    while filled < out.len() {
        match rustix::io::read(&file, &mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    out.truncate(filled);
    Ok(out)
}

/// The most entries of one hidden or sealed hooks directory whose host
/// identities are recorded at start.
const MAX_SEEDED_HOOKS: usize = 4096;

/// The host identities of every existing sealed file of `layout` and of the
/// files in its hooks directories, found before the sandbox can issue a
/// single request. The filter seals an object under every name it has, but
/// it learns an object's identity only when a sealed name is looked up: a
/// pre-existing hard link (`cfg-backup` → `config`, a linked hook) looked up
/// first would otherwise pass as an ordinary file and be writable (spec 3.5,
/// SR-4).
fn seed_sealed(root: &OwnedFd, layout: &SentryLayout) -> SealedIds {
    let mut out = SealedIds::default();
    for (path, guard) in layout.entries() {
        if !matches!(
            guard,
            Guard::Sealed | Guard::SealedTree | Guard::HiddenHooks | Guard::Head
        ) {
            continue;
        }
        let mut fd: Option<OwnedFd> = None;
        for name in path.iter() {
            match open_path(fd.as_ref().unwrap_or(root), name) {
                Ok(next) => fd = Some(next),
                Err(_) => {
                    fd = None;
                    break;
                }
            }
        }
        let Some(fd) = fd else { continue };
        let Ok(st) = stat_fd(&fd) else { continue };
        if matches!(guard, Guard::Sealed | Guard::Head) {
            out.insert((st.st_dev, st.st_ino), Arc::new(fd));
            continue;
        }
        // A hooks directory: its files (Git reads hooks one level deep).
        let Ok(dir) = rustix::fs::openat(
            &fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&dir) else {
            continue;
        };
        for entry in entries.take(MAX_SEEDED_HOOKS).flatten() {
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if component(name).is_err() {
                continue;
            }
            let Ok(file) = open_path(&dir, name) else {
                continue;
            };
            if let Ok(st) = stat_fd(&file) {
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    != rustix::fs::FileType::Directory
                {
                    out.insert((st.st_dev, st.st_ino), Arc::new(file));
                }
            }
        }
    }
    out
}

/// Judges an index before it replaces the workspace repository's own (spec
/// 3.5): "A guest index-lock rename that would instead create a tracked path
/// with only an isolated object returns `EBUSY` before replacing the
/// index." The ignored-path router, which knows both backings, judges.
pub trait IndexAdmission: Send + Sync + std::fmt::Debug {
    /// `Ok` when `proposed` (open for reading) may become the index; the
    /// error the rename fails with otherwise.
    fn admit(&self, proposed: &OwnedFd) -> Result<(), Errno>;
}

/// The index the filter has judged before a rename replaces it: the one in
/// the git directory whose host identity is `dir`.
#[derive(Clone, Debug)]
pub struct JudgedIndex {
    /// The (device, inode) of the workspace's git directory (the common
    /// directory, or a linked worktree's directory inside it).
    pub dir: (u64, u64),
    /// That directory (`O_PATH`): the index in force is looked up in it.
    pub dir_fd: Arc<OwnedFd>,
    /// Who judges.
    pub admission: Arc<dyn IndexAdmission>,
}

/// The name Git gives the index in a git directory.
const INDEX: &str = "index";
/// Largest proposed index read for judging: larger ones are not Git's.
const MAX_JUDGED_INDEX_BYTES: u64 = 512 * 1024 * 1024;

impl SentryFs {
    /// A filter over the common directory `root` (a directory descriptor the
    /// caller opened and verified) with the guards of `layout`, holding at
    /// most `limits` inodes and handles; `index`, when given, is judged
    /// before a rename replaces it.
    pub fn new(
        root: OwnedFd,
        layout: SentryLayout,
        limits: Limits,
        index: Option<JudgedIndex>,
    ) -> Self {
        let sealed = seed_sealed(&root, &layout);
        Self {
            index,
            layout,
            root: Arc::new(root),
            inodes: Mutex::new(Inodes {
                next: FIRST_INO,
                sealed,
                ..Inodes::default()
            }),
            handles: Mutex::new(Handles::default()),
            limits,
            head_swap: RwLock::new(()),
        }
    }

    /// Shared hold of [`SentryFs::head_swap`] for a write or a name change.
    fn writing(&self) -> RwLockReadGuard<'_, ()> {
        self.head_swap
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn swapping_head(&self) -> RwLockWriteGuard<'_, ()> {
        self.head_swap
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn node(&self, ino: INodeNo) -> Result<Node, Errno> {
        if ino.0 == INodeNo::ROOT.0 {
            return Ok(Node {
                fd: Arc::clone(&self.root),
                guard: self.layout.root(),
                rel: Some(PathBuf::new()),
                sealed: false,
                made_here: false,
                own_lock: false,
            });
        }
        let t = lock(&self.inodes);
        let i = t.by_ino.get(&ino.0).ok_or(Errno::ESTALE)?;
        Ok(Node {
            fd: Arc::clone(&i.fd),
            guard: i.guard,
            rel: i.rel.clone(),
            sealed: t.sealed.contains(&i.id),
            made_here: t.made_here.contains(&i.id),
            own_lock: t.own_locks.contains(&i.id),
        })
    }

    /// The parent's node for a change of one of its names, refusing the
    /// synthetic hooks directory (it has no host object and takes nothing).
    fn parent(&self, ino: INodeNo) -> Result<Node, Errno> {
        if ino.0 == HOOKS_INO {
            return Err(Errno::EPERM);
        }
        self.node(ino)
    }

    fn child_guard(&self, parent: &Node, name: &OsStr, origin: Origin) -> Guard {
        self.layout
            .child(parent.guard, parent.rel.as_deref(), name, origin)
    }

    /// Whether `st` is a directory the host made (not the sandbox through
    /// this filter).
    fn origin_of(&self, st: &Stat) -> Origin {
        let dir =
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
        if dir
            && !lock(&self.inodes)
                .made_here
                .contains(&(st.st_dev, st.st_ino))
        {
            Origin::HostDirectory
        } else {
            Origin::Other
        }
    }

    /// The guard of the existing (or absent) `name` under `parent`, looking
    /// it up only when the guard depends on who made it.
    fn existing_guard(&self, parent: &Node, name: &OsStr) -> Result<Guard, Errno> {
        self.looked_up_guard(parent, name).map(|(guard, _)| guard)
    }

    /// [`Self::existing_guard`], and whether the guard was decided by
    /// finding the name absent (only where it depends on who made the
    /// object): an object that appears there afterwards was not judged.
    fn looked_up_guard(&self, parent: &Node, name: &OsStr) -> Result<(Guard, bool), Errno> {
        if !parent.guard.guards_by_origin() {
            return Ok((self.child_guard(parent, name, Origin::Other), false));
        }
        match open_path(&parent.fd, name) {
            Ok(fd) => {
                let origin = self.origin_of(&stat_fd(&fd)?);
                Ok((self.child_guard(parent, name, origin), false))
            }
            Err(e) if e == Errno::ENOENT => {
                Ok((self.child_guard(parent, name, Origin::Other), true))
            }
            Err(e) => Err(e),
        }
    }

    /// Records a looked-up (or created) object and returns its node id.
    fn remember(
        &self,
        fd: OwnedFd,
        st: &Stat,
        guard: Guard,
        rel: Option<PathBuf>,
    ) -> Result<u64, Errno> {
        let id = (st.st_dev, st.st_ino);
        let fd = Arc::new(fd);
        let mut t = lock(&self.inodes);
        if matches!(guard, Guard::Sealed | Guard::SealedTree | Guard::Head) {
            t.sealed.insert(id, Arc::clone(&fd));
        }
        if let Some(&ino) = t.by_id.get(&id) {
            if let Some(i) = t.by_ino.get_mut(&ino) {
                i.lookups = i.lookups.saturating_add(1);
                // One host object reached by two names keeps the stricter
                // guard of the two.
                if guard > i.guard {
                    i.guard = guard;
                    i.rel = rel;
                }
                return Ok(ino);
            }
        }
        if t.by_ino.len().saturating_add(t.made_here.len()) >= self.limits.inodes {
            return Err(Errno::ENFILE);
        }
        let ino = t.next;
        t.next = t.next.checked_add(1).ok_or(Errno::ENFILE)?;
        t.by_ino.insert(
            ino,
            Inode {
                fd,
                id,
                guard,
                rel,
                lookups: 1,
            },
        );
        t.by_id.insert(id, ino);
        Ok(ino)
    }

    fn entry_of(&self, parent: &Node, name: &OsStr) -> Result<FileAttr, Errno> {
        let name = component(name)?;
        let guard = self.child_guard(parent, name, Origin::Other);
        if guard == Guard::HiddenHooks {
            return Ok(hooks_attr(&stat_fd(&self.root)?));
        }
        let fd = open_path(&parent.fd, name)?;
        let st = stat_fd(&fd)?;
        let guard = if parent.guard.guards_by_origin() {
            self.child_guard(parent, name, self.origin_of(&st))
        } else {
            guard
        };
        let rel = match &parent.rel {
            Some(p) if guard.keeps_path() => Some(p.join(name)),
            _ => None,
        };
        let ino = self.remember(fd, &st, guard, rel)?;
        Ok(attr(ino, &st))
    }

    /// Refuses binding or unbinding `name` under `parent` unless its guard
    /// allows it (SR-4).
    fn may_rebind(&self, parent: &Node, name: &OsStr) -> Result<(), Errno> {
        let guard = self.existing_guard(parent, name)?;
        if guard == Guard::HeadLock {
            return self.may_rebind_lock(parent, name);
        }
        if guard.may_rebind() {
            Ok(())
        } else {
            tracing::warn!(name = ?name, "Git Sentry refused a rebinding of a guarded name");
            Err(Errno::EPERM)
        }
    }

    /// A `HEAD.lock` name may be bound while free, and unbound only while
    /// it holds the sandbox's own lock file (spec 3.5, SR-4: the host's,
    /// between host Git's write and its rename, is never replaced).
    fn may_rebind_lock(&self, parent: &Node, name: &OsStr) -> Result<(), Errno> {
        match open_path(&parent.fd, name) {
            Err(e) if e == Errno::ENOENT => Ok(()),
            Err(e) => Err(e),
            Ok(fd) => {
                let st = stat_fd(&fd)?;
                if lock(&self.inodes)
                    .own_locks
                    .contains(&(st.st_dev, st.st_ino))
                {
                    Ok(())
                } else {
                    tracing::warn!(name = ?name, "Git Sentry refused touching a HEAD.lock the sandbox did not make");
                    Err(Errno::EPERM)
                }
            }
        }
    }

    fn may_change(node: &Node, change: Change) -> Result<(), Errno> {
        // gVisor's gofer sets the owner and mode of what it just created: a
        // directory the sandbox made (an admin root Git made on demand) is
        // its own to re-own and re-permission.
        let own_directory = node.made_here && change != Change::Data && change != Change::Xattr;
        // The sandbox's own HEAD.lock is its own to write and re-mode (the
        // host's never is).
        let own_lock = node.guard == Guard::HeadLock && node.own_lock && change != Change::Xattr;
        let own_directory = own_directory || own_lock;
        if (node.guard.may_change(change) || own_directory)
            && (change == Change::Times || !node.sealed)
        {
            Ok(())
        } else {
            tracing::warn!(?change, guard = ?node.guard, "Git Sentry refused a change");
            Err(Errno::EPERM)
        }
    }

    fn add_handle(&self, handle: Handle) -> Result<u64, Errno> {
        let mut h = lock(&self.handles);
        if h.open.len() >= self.limits.handles {
            return Err(Errno::EMFILE);
        }
        if let Handle::Dir { entries } = &handle {
            let listed = h.listed.saturating_add(entries.len());
            if listed > MAX_LISTED_ENTRIES {
                tracing::warn!(
                    listed,
                    "Git Sentry refused a directory listing over its memory bound"
                );
                return Err(Errno::ENOMEM);
            }
            h.listed = listed;
        }
        h.next = h.next.wrapping_add(1);
        let fh = h.next;
        h.open.insert(fh, handle);
        Ok(fh)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<std::fs::File>, Errno> {
        match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::File { file, .. }) => Ok(Arc::clone(file)),
            _ => Err(Errno::EBADF),
        }
    }

    /// The open file of `fh` for a data change: refused once its object is
    /// sealed (it became `HEAD` after it was opened). The caller holds
    /// [`SentryFs::writing`] across the change.
    fn writable_file(&self, fh: FileHandle) -> Result<Arc<std::fs::File>, Errno> {
        let (file, id) = match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::File { file, id }) => (Arc::clone(file), *id),
            _ => return Err(Errno::EBADF),
        };
        if lock(&self.inodes).sealed.contains(&id) {
            tracing::warn!("Git Sentry refused a write to a file that became HEAD");
            return Err(Errno::EPERM);
        }
        self.not_the_judged_index(id)?;
        Ok(file)
    }

    /// `EBUSY` when `id` is the workspace's index in force: it changes only
    /// by a judged rename ([`Self::judge_index`]), never in place, through
    /// a descriptor kept from before the rename, or through a second name.
    fn not_the_judged_index(&self, id: (u64, u64)) -> Result<(), Errno> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        let current = open_path(&index.dir_fd, OsStr::new(INDEX))
            .and_then(|fd| stat_fd(&fd))
            .map(|st| (st.st_dev, st.st_ino));
        if current == Ok(id) {
            tracing::warn!("Git Sentry refused changing the index other than by a judged rename");
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    fn created_entry(
        &self,
        parent: &Node,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        // The filter's own umask must not change the mode the sandbox asked
        // for: set it exactly.
        let fd = open_path(&parent.fd, name)?;
        let st = stat_fd(&fd)?;
        // Another request may have renamed something over the new name since
        // it was created: never re-permission a sealed object (SR-4).
        if lock(&self.inodes).sealed.contains(&(st.st_dev, st.st_ino)) {
            tracing::warn!(name = ?name, "Git Sentry refused re-permissioning a sealed file");
            return Err(Errno::EPERM);
        }
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Symlink {
            rustix::fs::chmodat(
                CWD,
                proc_path(&fd),
                Mode::from_raw_mode(mode & !umask & 0o7777),
                AtFlags::empty(),
            )
            .map_err(errno)?;
        }
        let st = stat_fd(&fd)?;
        // A new name is open, or an admin root (`worktrees/`, `modules/`)
        // Git made on demand, whose children stay guarded by origin.
        let guard = self.child_guard(parent, name, Origin::Other);
        let rel = match &parent.rel {
            Some(p) if guard.keeps_path() => Some(p.join(name)),
            _ => None,
        };
        let ino = self.remember(fd, &st, guard, rel)?;
        Ok(attr(ino, &st))
    }

    fn do_setattr(&self, ino: INodeNo, change: &SetAttr) -> Result<FileAttr, Errno> {
        let SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        } = *change;
        if ino.0 == HOOKS_INO {
            return Err(Errno::EPERM);
        }
        // Held before the node is read: an object renamed onto HEAD is
        // sealed by the time its node says whether it may change.
        let _writing = self.writing();
        let node = self.node(ino)?;
        if size.is_some() {
            Self::may_change(&node, Change::Data)?;
            let st = stat_fd(&node.fd)?;
            self.not_the_judged_index((st.st_dev, st.st_ino))?;
        }
        if mode.is_some() {
            Self::may_change(&node, Change::Mode)?;
        }
        if uid.is_some() || gid.is_some() {
            Self::may_change(&node, Change::Owner)?;
        }
        if atime.is_some() || mtime.is_some() {
            Self::may_change(&node, Change::Times)?;
        }
        if let Some(len) = size {
            match fh.map(|fh| self.writable_file(fh)) {
                Some(Ok(file)) => file.set_len(len).map_err(|e| io_errno(&e))?,
                // A refused handle is refused: never a reopen by name.
                Some(Err(e)) => return Err(e),
                None => std::fs::OpenOptions::new()
                    .write(true)
                    .open(proc_path(&node.fd))
                    .and_then(|f| f.set_len(len))
                    .map_err(|e| io_errno(&e))?,
            }
        }
        if let Some(m) = mode {
            rustix::fs::chmodat(
                CWD,
                proc_path(&node.fd),
                Mode::from_raw_mode(m & 0o7777),
                AtFlags::empty(),
            )
            .map_err(errno)?;
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
        if atime.is_some() || mtime.is_some() {
            set_times(&node.fd, atime, mtime)?;
        }
        Ok(attr(ino.0, &stat_fd(&node.fd)?))
    }

    fn open_file(&self, ino: INodeNo, flags: i32) -> Result<u64, Errno> {
        if ino.0 == HOOKS_INO {
            return Err(Errno::EISDIR);
        }
        // Held before the node is read (an open may truncate).
        let _writing = self.writing();
        let node = self.node(ino)?;
        let raw = OFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes()));
        let writes = raw.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC);
        if writes {
            Self::may_change(&node, Change::Data)?;
            let st = stat_fd(&node.fd)?;
            self.not_the_judged_index((st.st_dev, st.st_ino))?;
        }
        let keep = OFlags::RWMODE | OFlags::APPEND | OFlags::TRUNC | OFlags::SYNC | OFlags::DSYNC;
        let fd = rustix::fs::openat(
            CWD,
            proc_path(&node.fd),
            (raw & keep) | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let st = stat_fd(&fd)?;
        self.add_handle(Handle::File {
            file: Arc::new(std::fs::File::from(fd)),
            id: (st.st_dev, st.st_ino),
        })
    }

    fn do_create(
        &self,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64), Errno> {
        let p = self.parent(parent)?;
        let name = component(name)?;
        let _naming = self.writing();
        self.may_rebind(&p, name)?;
        // A new index is made by a judged rename, never in place.
        if name == INDEX && self.holds_judged_index(&p)? {
            return Err(Errno::EBUSY);
        }
        let raw = OFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes()));
        let keep = OFlags::RWMODE | OFlags::APPEND | OFlags::TRUNC;
        // Always exclusive: the kernel sends `create` only for a name its
        // lookup found missing, and an object renamed there since (a hard
        // link of a sealed file) must not be opened for writing without the
        // checks of `open` (SR-4). Git creates its files exclusively anyway.
        let fd = rustix::fs::openat(
            &*p.fd,
            name,
            (raw & keep) | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & !umask & 0o7777),
        )
        .map_err(errno)?;
        if self.child_guard(&p, name, Origin::Other) == Guard::HeadLock {
            let st = stat_fd(&fd)?;
            let own = rustix::io::dup(&fd).map_err(errno)?;
            lock(&self.inodes).own_locks.insert(
                (st.st_dev, st.st_ino),
                Arc::new(own),
                MAX_OWN_LOCKS,
            );
        }
        let a = self.created_entry(&p, name, mode, umask)?;
        let st = stat_fd(&fd)?;
        let fh = self.add_handle(Handle::File {
            file: Arc::new(std::fs::File::from(fd)),
            id: (st.st_dev, st.st_ino),
        })?;
        Ok((a, fh))
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let from = self.parent(parent)?;
        let to = self.parent(newparent)?;
        let (name, newname) = (component(name)?, component(newname)?);
        self.may_rebind(&from, name)?;
        let (target, absent) = self.looked_up_guard(&to, newname)?;
        if target == Guard::Head {
            return self.replace_head(&from, name, &to, newname, flags);
        }
        // Onto the workspace's index: judged with every write held off, so
        // the file judged is the file renamed.
        let judged = newname == INDEX && self.holds_judged_index(&to)?;
        let (_naming, _judging) = if judged {
            (None, Some(self.swapping_head()))
        } else {
            (Some(self.writing()), None)
        };
        // Onto a HEAD.lock: only while free (then never replacing one the
        // host makes meanwhile) or the sandbox's own.
        let onto_free_lock = target == Guard::HeadLock && {
            self.may_rebind_lock(&to, newname)?;
            open_path(&to.fd, newname).is_err()
        };
        if !target.may_rebind() {
            tracing::warn!(name = ?newname, "Git Sentry refused a rebinding of a guarded name");
            return Err(Errno::EPERM);
        }
        // A symbolic link already in the git directory stays where it is
        // (see `symlink`): moving it could plant it where host Git follows
        // it.
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        if is_symlink(&from.fd, name)? || (exchange && is_symlink(&to.fd, newname)?) {
            tracing::warn!(name = ?name, "Git Sentry refused moving a symbolic link");
            return Err(Errno::EPERM);
        }
        let mut f = rustix::fs::RenameFlags::empty();
        // A target found absent under `worktrees/` or `modules/` may have
        // been made by the host since (a new worktree, still empty): a
        // directory renamed over it would become that worktree, the
        // sandbox's to rewrite (SR-4). Only the absence was judged.
        if flags.contains(RenameFlags::RENAME_NOREPLACE)
            || ((absent || onto_free_lock) && !exchange)
        {
            f |= rustix::fs::RenameFlags::NOREPLACE;
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            f |= rustix::fs::RenameFlags::EXCHANGE;
        }
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EOPNOTSUPP);
        }
        if judged {
            self.judge_index(&from, name)?;
        }
        rustix::fs::renameat_with(&*from.fd, name, &*to.fd, newname, f).map_err(errno)
    }

    /// Whether `dir` is the git directory holding the judged index.
    fn holds_judged_index(&self, dir: &Node) -> Result<bool, Errno> {
        let Some(index) = &self.index else {
            return Ok(false);
        };
        let st = stat_fd(&dir.fd)?;
        Ok((st.st_dev, st.st_ino) == index.dir)
    }

    /// The judgement of `name` in `dir` as the workspace's next index (spec
    /// 3.5): `EBUSY` (or the judge's error) refuses the rename. Called with
    /// [`Self::swapping_head`] held.
    fn judge_index(&self, dir: &Node, name: &OsStr) -> Result<(), Errno> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        // Looked at before it is opened for reading: a FIFO would block.
        let at = open_path(&dir.fd, name)?;
        let st = stat_fd(&at)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            || u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_JUDGED_INDEX_BYTES
            || st.st_nlink != 1
        {
            // Git renames a regular file of one name; a second name would
            // write the index after the judgement.
            tracing::warn!("Git Sentry refused an index that is not a regular file of one name");
            return Err(Errno::EBUSY);
        }
        let proposed = rustix::fs::openat(
            CWD,
            proc_path(&at),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(errno)?;
        // Writes wait while it is judged (the caller holds `head_swap`), and
        // once it is the index a descriptor kept from before writes no more
        // (`not_the_judged_index`).
        index.admission.admit(&proposed)
    }

    fn do_link(
        &self,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<FileAttr, Errno> {
        if ino.0 == HOOKS_INO {
            return Err(Errno::EPERM);
        }
        let src = self.node(ino)?;
        let to = self.parent(newparent)?;
        let newname = component(newname)?;
        if !src.guard.may_link_from() || src.sealed {
            tracing::warn!("Git Sentry refused a hard link of a guarded file");
            return Err(Errno::EPERM);
        }
        // A second name for a symbolic link already in the git directory
        // would plant it where host Git follows it (see `symlink`).
        let st = stat_fd(&src.fd)?;
        self.not_the_judged_index((st.st_dev, st.st_ino))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
            tracing::warn!("Git Sentry refused a hard link of a symbolic link");
            return Err(Errno::EPERM);
        }
        let _naming = self.writing();
        self.may_rebind(&to, newname)?;
        rustix::fs::linkat(
            CWD,
            proc_path(&src.fd),
            &*to.fd,
            newname,
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(errno)?;
        self.entry_of(&to, newname)
    }

    /// Renames `name` onto a `HEAD` (spec 3.5, SR-4): only a regular file
    /// with no other name whose content host Git accepts as `HEAD`
    /// ([`valid_head`]), which is sealed before it is read, so no handle
    /// opened before can change it afterwards. Git updates `HEAD` exactly
    /// this way (`HEAD.lock`, written, closed, renamed).
    fn replace_head(
        &self,
        from: &Node,
        name: &OsStr,
        to: &Node,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EOPNOTSUPP);
        }
        let refuse = |why: &str| {
            tracing::warn!(name = ?name, why, "Git Sentry refused replacing HEAD");
            Err(Errno::EPERM)
        };
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return refuse("an exchange would move HEAD away");
        }
        // No write and no name change through the filter until the rename is
        // done: what is validated is what lands at HEAD.
        let _swap = self.swapping_head();
        let fd = Arc::new(open_path(&from.fd, name)?);
        let st = stat_fd(&fd)?;
        let id = (st.st_dev, st.st_ino);
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return refuse("not a regular file");
        }
        if st.st_nlink != 1 {
            return refuse("the file has another name to write it through");
        }
        if st.st_mode & 0o400 == 0 {
            return refuse("host Git could not read it");
        }
        {
            let mut t = lock(&self.inodes);
            if t.sealed.contains(&id) {
                return refuse("a sealed file");
            }
            t.sealed.insert(id, Arc::clone(&fd));
        }
        let unseal = || lock(&self.inodes).sealed.remove(&id);
        let content = match read_head(&fd) {
            Ok(c) => c,
            Err(e) => {
                unseal();
                return Err(e);
            }
        };
        if !valid_head(&content) {
            unseal();
            return refuse("not a valid HEAD");
        }
        let mut f = rustix::fs::RenameFlags::empty();
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            f |= rustix::fs::RenameFlags::NOREPLACE;
        }
        rustix::fs::renameat_with(&*from.fd, name, &*to.fd, newname, f).map_err(|e| {
            unseal();
            errno(e)
        })
    }

    fn listing(&self, ino: INodeNo) -> Result<Vec<(OsString, u64, FileType)>, Errno> {
        if ino.0 == HOOKS_INO {
            return Ok(vec![
                (".".into(), HOOKS_INO, FileType::Directory),
                ("..".into(), INodeNo::ROOT.0, FileType::Directory),
            ]);
        }
        let node = self.node(ino)?;
        let dir = rustix::fs::openat(
            &*node.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let mut out = Vec::new();
        let mut saw_hooks = false;
        for entry in rustix::fs::Dir::read_from(&dir).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            let mut kind = dirent_kind(entry.file_type());
            if ino.0 == INodeNo::ROOT.0
                && self.child_guard(&node, &name, Origin::Other) == Guard::HiddenHooks
            {
                saw_hooks = true;
                kind = FileType::Directory;
            }
            out.push((name, entry.ino(), kind));
            if out.len() > MAX_DIR_ENTRIES {
                return Err(Errno::EFBIG);
            }
        }
        if ino.0 == INodeNo::ROOT.0 && !saw_hooks {
            out.push(("hooks".into(), HOOKS_INO, FileType::Directory));
        }
        Ok(out)
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

impl Filesystem for SentryFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        // The synthetic hooks directory holds nothing.
        let r = if parent.0 == HOOKS_INO {
            Err(Errno::ENOENT)
        } else {
            self.node(parent).and_then(|p| self.entry_of(&p, name))
        };
        reply!(reply, r, |a: FileAttr| reply.entry(&TTL, &a, Generation(0)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
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
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = if ino.0 == HOOKS_INO {
            stat_fd(&self.root).map(|st| hooks_attr(&st))
        } else {
            self.node(ino)
                .and_then(|n| stat_fd(&n.fd).map(|st| attr(ino.0, &st)))
        };
        reply!(reply, r, |a: FileAttr| reply.attr(&TTL, &a));
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
        let r = self.do_setattr(ino, &change);
        reply!(reply, r, |a: FileAttr| reply.attr(&TTL, &a));
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
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let p = self.parent(parent)?;
            let name = component(name)?;
            let _naming = self.writing();
            self.may_rebind(&p, name)?;
            let perm = Mode::from_raw_mode(mode & !umask & 0o7777);
            // Regular files only. Device nodes are never created (spec 3.5:
            // EPERM); nor FIFOs: Git never makes one in its git directory,
            // and one planted at `index` or `HEAD` would hang every host Git
            // command that opens it.
            if rustix::fs::FileType::from_raw_mode(mode) != rustix::fs::FileType::RegularFile {
                tracing::warn!(name = ?name, "Git Sentry refused a special file in the git directory");
                return Err(Errno::EPERM);
            }
            rustix::fs::openat(
                &*p.fd,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                perm,
            )
            .map_err(errno)?;
            self.created_entry(&p, name, mode, umask)
        })();
        reply!(reply, r, |a: FileAttr| reply.entry(&TTL, &a, Generation(0)));
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
        let r = (|| {
            let p = self.parent(parent)?;
            let name = component(name)?;
            let _naming = self.writing();
            let guard = self.existing_guard(&p, name)?;
            if !guard.may_make_directory() {
                tracing::warn!(name = ?name, "Git Sentry refused a directory at a guarded name");
                return Err(Errno::EPERM);
            }
            rustix::fs::mkdirat(&*p.fd, name, Mode::from_raw_mode(mode & !umask & 0o7777))
                .map_err(errno)?;
            // Record it before anything can look it up: under `worktrees/`
            // and `modules/` the sandbox's own directories stay open, and an
            // admin root it made is its own to re-own (see `may_change`).
            // Elsewhere who made a directory decides nothing.
            if guard != Guard::Open || p.guard.guards_by_origin() {
                if let Ok(fd) = open_path(&p.fd, name) {
                    if let Ok(st) = stat_fd(&fd) {
                        let mut t = lock(&self.inodes);
                        let max = MAX_MADE_HERE.min(self.limits.inodes / 4);
                        t.made_here
                            .insert((st.st_dev, st.st_ino), Arc::new(fd), max);
                    }
                }
            }
            self.created_entry(&p, name, mode, umask)
        })();
        reply!(reply, r, |a: FileAttr| reply.entry(&TTL, &a, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let p = self.parent(parent)?;
            let name = component(name)?;
            let _naming = self.writing();
            self.may_rebind(&p, name)?;
            rustix::fs::unlinkat(&*p.fd, name, AtFlags::empty()).map_err(errno)
        })();
        reply!(reply, r, |()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let p = self.parent(parent)?;
            let name = component(name)?;
            let _naming = self.writing();
            self.may_rebind(&p, name)?;
            rustix::fs::unlinkat(&*p.fd, name, AtFlags::REMOVEDIR).map_err(errno)
        })();
        reply!(reply, r, |()| reply.ok());
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        // Git never creates symbolic links in its git directory, but host
        // Git follows them there: a planted `logs/HEAD` makes host Git append
        // reflog lines (branch names the sandbox chose) to a file outside the
        // repository such as `~/.bashrc`, and a planted `index` or
        // `packed-refs` makes its lock file replace the link's target. The
        // filter never follows a link itself, but SR-4 is about what host
        // Git then does (spec 3.5): the git directory takes no new links.
        tracing::warn!(name = ?link_name, "Git Sentry refused a symbolic link in the git directory");
        reply.error(Errno::EPERM);
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
        let r = self.do_link(ino, newparent, newname);
        reply!(reply, r, |a: FileAttr| reply.entry(&TTL, &a, Generation(0)));
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
        // Writable handles exist only where open() allowed data changes, and
        // write no more once their file became HEAD.
        let _writing = self.writing();
        let r = self.writable_file(fh).and_then(|f| {
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
        lock(&self.handles).remove(fh.0);
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

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.listing(ino).and_then(|entries| {
            self.add_handle(Handle::Dir {
                entries: Arc::new(entries),
            })
        });
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
        let entries = match lock(&self.handles).open.get(&fh.0) {
            Some(Handle::Dir { entries }) => Arc::clone(entries),
            _ => return reply.error(Errno::EBADF),
        };
        reply_entries(&entries, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.handles).remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.node(ino).and_then(|n| {
            let d = rustix::fs::openat(
                &*n.fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno)?;
            rustix::fs::fsync(&d).map_err(errno)
        });
        reply!(reply, r, |()| reply.ok());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply_statfs(&self.root, reply);
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
        let r = self.do_create(parent, name, mode, umask, flags);
        reply!(reply, r, |(a, fh): (FileAttr, u64)| reply.created(
            &TTL,
            &a,
            Generation(0),
            FileHandle(fh),
            FopenFlags::empty()
        ));
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
        let _writing = self.writing();
        let r = self.writable_file(fh).and_then(|f| {
            let flags = rustix::fs::FallocateFlags::from_bits_retain(u32::from_ne_bytes(
                mode.to_ne_bytes(),
            ));
            rustix::fs::fallocate(&*f, flags, offset, length).map_err(errno)
        });
        reply!(reply, r, |()| reply.ok());
    }
}
