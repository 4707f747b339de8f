//! The Git Sentry's filter over the host repository's git directory
//! (spec 3.5, SR-4), as pure decisions.
//!
//! Bind mounts alone cannot stop the sandbox from *creating* a file Git reads
//! configuration from: `.git` must stay writable (lock files, objects, refs),
//! and a new `commondir` or `config.worktree` would point host Git at a
//! configuration — and hooks — the sandbox controls. So the Runtime Supervisor
//! serves the host's common git directory through a small FUSE filter, and
//! this module decides, per entry, what the filter lets through.
//!
//! The [`SentryLayout`] is computed once at launch from the host repository:
//! every git directory in it (the common directory, and each submodule's git
//! directory under `modules/`) and each of their linked worktrees' admin
//! directories. It maps relative paths to a [`Guard`]; it is closed under
//! ancestors (every ancestor of a guarded entry is [`Guard::Pinned`]), so an
//! [`Guard::Open`] directory never has a guarded child and a path's guard is
//! found from its parent's guard and its own name ([`SentryLayout::child`]).
//! Pinned and sealed entries can never be renamed or removed, which keeps that
//! path-based decision sound for the filesystem's lifetime.

use crate::display::{escape_os_str, escape_path};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// Files of a git directory that Git reads configuration or the location of
/// the common directory from (spec 3.5: "host `.git/config` is exposed
/// read-only"; the others would replace it by another means, SR-4).
pub const SEALED_IN_GIT_DIR: [&str; 3] = ["config", "config.worktree", "commondir"];
/// Files of a linked worktree's admin directory (`worktrees/<name>/`) that
/// name its common directory, its working tree or its own configuration.
pub const SEALED_IN_WORKTREE_ADMIN: [&str; 3] = ["commondir", "gitdir", "config.worktree"];

/// How the Git Sentry treats one entry of the git directory tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Guard {
    /// Ordinary repository data (objects, refs, index, `HEAD`, logs, lock
    /// files): every operation passes through.
    Open,
    /// What the sandbox made under `modules/` (through the filter, in this
    /// session): its own, open to it — but a directory the host makes inside
    /// it later (a host submodule named `<that>/<name>`) is the host's
    /// ([`Guard::HostModule`]), so pre-making a parent directory cannot
    /// capture a host submodule.
    OwnModule,
    /// `HEAD.lock` beside a [`Guard::Head`]: Git's own way to replace
    /// `HEAD` (created exclusively, written through that descriptor,
    /// renamed). The sandbox may create one where none is and do as it likes
    /// with its own (the filter tells them by identity); the host's is never
    /// written, re-moded, replaced, removed or hard-linked: a sandbox that
    /// could, between host Git's write and its rename, would choose the
    /// host's next `HEAD` (spec 3.5, SR-4).
    HeadLock,
    /// A directory on the way to a guarded entry: its children follow their
    /// own guards, but the directory itself is never renamed, removed,
    /// replaced, re-owned or re-permissioned.
    Pinned,
    /// A git directory's `worktrees/` or `modules/`: may be created (so Git
    /// inside can add worktrees and submodules) but otherwise pinned. Its
    /// children are guarded by who made them (see [`Origin`]): directories
    /// the host made — at launch or later in the session — are guarded as
    /// [`Guard::HostWorktree`] / [`Guard::HostModule`]; the sandbox's own
    /// are open.
    AdminRoot(Admin),
    /// A host-made linked worktree admin directory (`worktrees/<name>`):
    /// pinned; its `commondir`, `gitdir` and `config.worktree` are sealed.
    HostWorktree,
    /// A host-made directory under `modules/` (a submodule's git directory,
    /// or a directory of a submodule name with `/`): pinned; its `config`,
    /// `config.worktree` and `commondir` are sealed, its `hooks` read-only,
    /// its `worktrees/` and `modules/` admin roots, and host-made
    /// directories below are guarded the same way.
    HostModule,
    /// `HEAD` of the common directory and of each host linked worktree's
    /// admin directory: what makes the directory a git directory to host
    /// Git. Never removed, renamed away, written in place, re-permissioned
    /// or hard-linked; it is replaced only by renaming a file onto it whose
    /// content [`valid_head`] accepts (how Git itself updates it, through
    /// `HEAD.lock`). An invalid `HEAD` would make host Git treat the
    /// workspace root as an implicit bare repository the sandbox can plant
    /// (spec 3.5, SR-4).
    Head,
    /// A file Git reads configuration or the common-directory location from:
    /// readable when present; never created, written, truncated,
    /// re-permissioned, renamed, removed or hard-linked.
    Sealed,
    /// A submodule's `hooks` directory and everything below it: read-only.
    SealedTree,
    /// The repository's default `hooks` directory: a synthetic, empty,
    /// read-only directory. The host's hooks are never visible through the
    /// filter; Lazaret mounts sandbox-local transient storage over it.
    HiddenHooks,
}

/// Which admin root a [`Guard::AdminRoot`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Admin {
    /// `<git dir>/worktrees`.
    Worktrees,
    /// `<git dir>/modules`.
    Modules,
}

/// What the filter knows about the object a name refers to when the guard
/// depends on it (children of [`Guard::AdminRoot`] and [`Guard::HostModule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A directory the sandbox did not make through the filter in this
    /// session: the host's.
    HostDirectory,
    /// Absent, not a directory, or a directory made through the filter.
    Other,
}

/// A change to an existing entry's content or metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Writing, truncating or allocating file data (including opening for
    /// writing).
    Data,
    /// `chmod`.
    Mode,
    /// `chown`.
    Owner,
    /// Access and modification times.
    Times,
    /// Setting or removing extended attributes.
    Xattr,
}

impl Guard {
    /// Whether a name with this guard may be bound or unbound: created (any
    /// file type), removed, renamed from or to, or made a hard link's new
    /// name. Only [`Guard::Open`] names.
    pub fn may_rebind(self) -> bool {
        matches!(self, Self::Open | Self::OwnModule | Self::HeadLock)
    }

    /// Whether a directory may be made at a name with this guard: open
    /// names, and an admin root that does not exist yet.
    pub fn may_make_directory(self) -> bool {
        matches!(self, Self::Open | Self::OwnModule | Self::AdminRoot(_))
    }

    /// Whether the entry's content or metadata may change in `change`.
    pub fn may_change(self, change: Change) -> bool {
        match self {
            Self::Open | Self::OwnModule => true,
            // The sandbox's own lock files are told by identity (the filter).
            Self::HeadLock => change == Change::Times,
            // A pinned directory keeps its place and its permissions; only
            // its times move (as its children change).
            Self::Pinned
            | Self::AdminRoot(_)
            | Self::HostWorktree
            | Self::HostModule
            | Self::Head => change == Change::Times,
            Self::Sealed | Self::SealedTree | Self::HiddenHooks => false,
        }
    }

    /// Whether a child's guard depends on its [`Origin`]: the filter then
    /// looks the child up before deciding.
    pub fn guards_by_origin(self) -> bool {
        matches!(
            self,
            Self::AdminRoot(_) | Self::HostModule | Self::OwnModule
        )
    }

    /// Whether the filter keeps this entry's path (for the layout's table).
    pub fn keeps_path(self) -> bool {
        matches!(
            self,
            Self::Pinned | Self::AdminRoot(_) | Self::HostWorktree | Self::HostModule
        )
    }

    /// Whether an existing entry with this guard may be the source of a new
    /// hard link (a second name would escape the guard).
    pub fn may_link_from(self) -> bool {
        // Not a HEAD.lock: the host's becomes HEAD by a rename, and a second
        // name made before would write it (Git never links lock files).
        matches!(self, Self::Open | Self::OwnModule)
    }
}

/// Largest `HEAD` the filter reads to validate it: Git reads 255 bytes of
/// it (`validate_headref`), and a canonical one is far shorter.
pub const MAX_HEAD_BYTES: usize = 255;

/// Whether host Git accepts `content` as a `HEAD` when it decides whether a
/// directory is a git directory, exactly as `validate_headref` does: of the
/// first 255 bytes (up to a NUL), `ref:`, Git's blanks (space, tab, CR,
/// LF), then `refs/`; or an object name, whose first 40 hexadecimal digits
/// are enough (SHA-256's start passes as SHA-1).
pub fn git_accepts_head(content: &[u8]) -> bool {
    let window = &content[..content.len().min(MAX_HEAD_BYTES)];
    let window = window
        .iter()
        .position(|b| *b == 0)
        .map_or(window, |nul| &window[..nul]);
    if let Some(rest) = window.strip_prefix(b"ref:") {
        let start = rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(rest.len());
        if rest[start..].starts_with(b"refs/") {
            return true;
        }
    }
    window
        .get(..40)
        .is_some_and(|digits| digits.iter().all(u8::is_ascii_hexdigit))
}

/// Whether `content` is a `HEAD` the filter lets replace the host's: only
/// the forms Git itself writes — `ref: refs/<name>\n` (a name of visible
/// characters) or a lowercase SHA-1 or SHA-256 object name and `\n` — all of
/// which [`git_accepts_head`] accepts.
pub fn valid_head(content: &[u8]) -> bool {
    if content.len() > MAX_HEAD_BYTES {
        return false;
    }
    let Some(line) = content.strip_suffix(b"\n") else {
        return false;
    };
    let canonical = match line.strip_prefix(b"ref: refs/") {
        Some(name) => !name.is_empty() && name.iter().all(|b| b.is_ascii_graphic()),
        None => {
            (line.len() == 40 || line.len() == 64)
                && line
                    .iter()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        }
    };
    canonical && git_accepts_head(content)
}

/// One git directory found in the host repository.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostGitDir {
    /// Relative to the common directory: empty for the common directory
    /// itself, `modules/<name>` (possibly nested) for a submodule's.
    pub path: PathBuf,
    /// The names of its linked worktrees' admin directories
    /// (`<path>/worktrees/<name>`).
    pub worktrees: Vec<OsString>,
    /// Files its `config` includes (`include.path`, `includeIf.*.path`) that
    /// lie inside the common directory, relative to it: they are as much the
    /// repository's configuration as `config` itself.
    pub includes: Vec<PathBuf>,
}

/// Errors of building a [`SentryLayout`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// A git directory path that is not plain and relative.
    #[error("git directory {} is not a plain relative path under the common directory", escape_path(.0))]
    BadGitDir(PathBuf),
    /// A worktree name that is not one plain component.
    #[error("worktree name `{}` is not one plain path component", escape_os_str(.0))]
    BadWorktree(OsString),
    /// Too many entries for the filter's table.
    #[error("the repository has more than {MAX_GUARDED} guarded git-directory entries")]
    TooLarge,
}

/// The most guarded entries a layout holds (bounds the launch-time scan).
pub const MAX_GUARDED: usize = 4096;

/// The guards of one host repository's git-directory tree (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentryLayout {
    entries: BTreeMap<PathBuf, Guard>,
}

fn plain(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_)))
}

impl SentryLayout {
    /// The layout for the git directories `dirs` (which must include the
    /// common directory, path empty).
    pub fn new(dirs: &[HostGitDir]) -> Result<Self, LayoutError> {
        let mut layout = Self {
            entries: BTreeMap::new(),
        };
        let root = Path::new("");
        layout.guard_git_dir(root, &HostGitDir::default(), Guard::HiddenHooks)?;
        for dir in dirs {
            if !plain(&dir.path) {
                return Err(LayoutError::BadGitDir(dir.path.clone()));
            }
            let hooks = if dir.path.as_os_str().is_empty() {
                Guard::HiddenHooks
            } else {
                Guard::SealedTree
            };
            layout.guard_git_dir(&dir.path, dir, hooks)?;
        }
        // Below an admin root `modules/`, every pinned directory is a host
        // submodule directory: host-made directories that appear under it
        // later are guarded too.
        for (path, guard) in &mut layout.entries {
            let below_modules = path
                .parent()
                .is_some_and(|p| p.iter().any(|c| c == "modules"));
            if *guard == Guard::Pinned && below_modules {
                *guard = Guard::HostModule;
            }
        }
        Ok(layout)
    }

    fn insert(&mut self, path: PathBuf, guard: Guard) -> Result<(), LayoutError> {
        // Every ancestor is pinned (the root itself has no entry).
        let mut ancestor = path.parent();
        while let Some(a) = ancestor.filter(|a| !a.as_os_str().is_empty()) {
            self.entries.entry(a.to_owned()).or_insert(Guard::Pinned);
            ancestor = a.parent();
        }
        let slot = self.entries.entry(path).or_insert(guard);
        // A stricter guard wins over a pin recorded as an ancestor.
        if *slot == Guard::Pinned {
            *slot = guard;
        }
        if self.entries.len() > MAX_GUARDED {
            return Err(LayoutError::TooLarge);
        }
        Ok(())
    }

    /// Seals `path` and its lock file `path.lock`. Host Git rewrites a
    /// configuration file by writing `<name>.lock` and renaming it over the
    /// file; a sandbox that could open that lock file (or create it first)
    /// would keep a writable descriptor of what becomes the host's
    /// configuration after the rename, or write into it before (spec 3.5,
    /// SR-4). Git inside the sandbox cannot commit such a lock anyway.
    fn seal(&mut self, path: PathBuf) -> Result<(), LayoutError> {
        let mut lock = path.clone().into_os_string();
        lock.push(".lock");
        self.insert(path, Guard::Sealed)?;
        self.insert(PathBuf::from(lock), Guard::Sealed)
    }

    fn guard_git_dir(
        &mut self,
        path: &Path,
        dir: &HostGitDir,
        hooks: Guard,
    ) -> Result<(), LayoutError> {
        if path.as_os_str().is_empty() {
            // What host Git checks to accept the common directory as a git
            // directory (`is_git_directory`): a valid `HEAD`, `objects/` and
            // `refs/`.
            self.insert(PathBuf::from("HEAD"), Guard::Head)?;
            self.insert(PathBuf::from("HEAD.lock"), Guard::HeadLock)?;
            self.insert(PathBuf::from("objects"), Guard::Pinned)?;
            self.insert(PathBuf::from("refs"), Guard::Pinned)?;
        } else {
            self.insert(path.to_owned(), Guard::Pinned)?;
        }
        for name in SEALED_IN_GIT_DIR {
            self.seal(path.join(name))?;
        }
        self.insert(path.join("worktrees"), Guard::AdminRoot(Admin::Worktrees))?;
        self.insert(path.join("modules"), Guard::AdminRoot(Admin::Modules))?;
        self.insert(path.join("hooks"), hooks)?;
        for include in &dir.includes {
            if !plain(include) || include.as_os_str().is_empty() {
                return Err(LayoutError::BadGitDir(include.clone()));
            }
            self.seal(include.clone())?;
        }
        for w in &dir.worktrees {
            let one = Path::new(w);
            if one.components().count() != 1 || !plain(one) {
                return Err(LayoutError::BadWorktree(w.clone()));
            }
            let admin = path.join("worktrees").join(one);
            self.insert(admin.clone(), Guard::HostWorktree)?;
            for name in SEALED_IN_WORKTREE_ADMIN {
                self.seal(admin.join(name))?;
            }
            self.insert(admin.join("HEAD"), Guard::Head)?;
            self.insert(admin.join("HEAD.lock"), Guard::HeadLock)?;
        }
        Ok(())
    }

    /// The guard of the common directory itself (the filter's root): pinned.
    pub fn root(&self) -> Guard {
        Guard::Pinned
    }

    /// The guard of `name` inside the directory at `parent` (relative to the
    /// root; `None` when the directory's path is not kept) whose own guard
    /// is `parent_guard`; `origin` is what the name refers to (consulted
    /// only when [`Guard::guards_by_origin`] holds for the parent).
    pub fn child(
        &self,
        parent_guard: Guard,
        parent: Option<&Path>,
        name: &OsStr,
        origin: Origin,
    ) -> Guard {
        let table = || parent.and_then(|p| self.entries.get(&p.join(name)).copied());
        let lock_of = |names: &[&str]| {
            names.iter().any(|n| {
                let mut lock = OsString::from(n);
                lock.push(".lock");
                name == *n || name == lock
            })
        };
        match parent_guard {
            Guard::Open => Guard::Open,
            Guard::OwnModule => match origin {
                Origin::HostDirectory => Guard::HostModule,
                Origin::Other => Guard::OwnModule,
            },
            Guard::HeadLock
            | Guard::Head
            | Guard::Sealed
            | Guard::SealedTree
            | Guard::HiddenHooks => Guard::SealedTree,
            Guard::Pinned => table().unwrap_or(Guard::Open),
            Guard::AdminRoot(admin) => table().unwrap_or(match (admin, origin) {
                (Admin::Worktrees, Origin::Other) => Guard::Open,
                (Admin::Modules, Origin::Other) => Guard::OwnModule,
                (Admin::Worktrees, Origin::HostDirectory) => Guard::HostWorktree,
                (Admin::Modules, Origin::HostDirectory) => Guard::HostModule,
            }),
            Guard::HostWorktree => table().unwrap_or(if lock_of(&SEALED_IN_WORKTREE_ADMIN) {
                Guard::Sealed
            } else if name == "HEAD" {
                Guard::Head
            } else if name == "HEAD.lock" {
                Guard::HeadLock
            } else {
                Guard::Open
            }),
            Guard::HostModule => table().unwrap_or_else(|| {
                if lock_of(&SEALED_IN_GIT_DIR) {
                    Guard::Sealed
                } else if name == "hooks" {
                    Guard::SealedTree
                } else if name == "worktrees" {
                    Guard::AdminRoot(Admin::Worktrees)
                } else if name == "modules" {
                    Guard::AdminRoot(Admin::Modules)
                } else if origin == Origin::HostDirectory {
                    Guard::HostModule
                } else {
                    Guard::Open
                }
            }),
        }
    }

    /// Every guarded path with its guard, in path order.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, Guard)> {
        self.entries.iter().map(|(p, g)| (p.as_path(), *g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Arbitrary, Gen, QuickCheck};

    fn layout() -> Result<SentryLayout, LayoutError> {
        SentryLayout::new(&[
            HostGitDir {
                path: PathBuf::new(),
                worktrees: vec!["wt".into()],
                includes: vec!["conf/local.gitconfig".into()],
            },
            HostGitDir {
                path: "modules/lib/sub".into(),
                worktrees: Vec::new(),
                includes: Vec::new(),
            },
        ])
    }

    /// Walks `path` from the root the way the filter does, one lookup at a
    /// time, every directory on the way made by the host.
    fn guard_of(layout: &SentryLayout, path: &str) -> Guard {
        walk(layout, path, Origin::HostDirectory)
    }

    /// The same walk with every name made by the sandbox (or absent).
    fn sandbox_guard_of(layout: &SentryLayout, path: &str) -> Guard {
        walk(layout, path, Origin::Other)
    }

    /// The guard of a host-made *file* at `path` (directories on the way
    /// made by the host).
    fn file_guard_of(layout: &SentryLayout, path: &str) -> Guard {
        let mut guard = layout.root();
        let mut rel = PathBuf::new();
        let names: Vec<&OsStr> = Path::new(path).iter().collect();
        for (i, name) in names.iter().enumerate() {
            let kept = guard.keeps_path().then_some(rel.as_path());
            let origin = if i + 1 == names.len() {
                Origin::Other
            } else {
                Origin::HostDirectory
            };
            guard = layout.child(guard, kept, name, origin);
            rel.push(name);
        }
        guard
    }

    fn walk(layout: &SentryLayout, path: &str, origin: Origin) -> Guard {
        let mut guard = layout.root();
        let mut rel = PathBuf::new();
        for name in Path::new(path).iter() {
            let kept = guard.keeps_path().then_some(rel.as_path());
            guard = layout.child(guard, kept, name, origin);
            rel.push(name);
        }
        guard
    }

    #[test]
    fn the_common_directory_seals_config_and_commondir_and_hides_hooks() -> Result<(), LayoutError>
    {
        let l = layout()?;
        for sealed in [
            "config",
            "config.worktree",
            "commondir",
            "worktrees/wt/commondir",
            "worktrees/wt/gitdir",
            "worktrees/wt/config.worktree",
            "modules/lib/sub/config",
            "modules/lib/sub/commondir",
            "conf/local.gitconfig",
            "config.lock",
            "commondir.lock",
            "config.worktree.lock",
            "worktrees/wt/gitdir.lock",
            "worktrees/wt/commondir.lock",
            "modules/lib/sub/config.lock",
            "conf/local.gitconfig.lock",
        ] {
            assert_eq!(guard_of(&l, sealed), Guard::Sealed, "{sealed}");
        }
        assert_eq!(guard_of(&l, "hooks"), Guard::HiddenHooks);
        assert_eq!(guard_of(&l, "hooks/pre-commit"), Guard::SealedTree);
        assert_eq!(
            guard_of(&l, "modules/lib/sub/hooks/post-checkout"),
            Guard::SealedTree
        );
        for (path, guard) in [
            ("conf", Guard::Pinned),
            ("worktrees", Guard::AdminRoot(Admin::Worktrees)),
            ("modules", Guard::AdminRoot(Admin::Modules)),
            ("worktrees/wt", Guard::HostWorktree),
            ("modules/lib", Guard::HostModule),
            ("modules/lib/sub", Guard::HostModule),
            (
                "modules/lib/sub/worktrees",
                Guard::AdminRoot(Admin::Worktrees),
            ),
            ("modules/lib/sub/modules", Guard::AdminRoot(Admin::Modules)),
        ] {
            assert_eq!(guard_of(&l, path), guard, "{path}");
        }
        // Worktrees and submodules the host adds during the session are
        // guarded like the ones found at launch.
        for sealed in [
            "worktrees/new/commondir",
            "worktrees/new/gitdir.lock",
            "modules/other/config",
            "modules/a/b/commondir",
            "modules/lib/sub/modules/nested/config",
        ] {
            assert_eq!(guard_of(&l, sealed), Guard::Sealed, "{sealed}");
        }
        assert_eq!(guard_of(&l, "worktrees/new"), Guard::HostWorktree);
        assert_eq!(
            guard_of(&l, "modules/other/hooks/post-checkout"),
            Guard::SealedTree
        );
        // The sandbox's own worktrees and submodules stay its own.
        for open in ["worktrees/new", "worktrees/new/commondir"] {
            assert_eq!(sandbox_guard_of(&l, open), Guard::Open, "{open}");
        }
        for own in [
            "modules/other",
            "modules/other/config",
            "modules/other/hooks/x",
        ] {
            let g = sandbox_guard_of(&l, own);
            assert_eq!(g, Guard::OwnModule, "{own}");
            assert!(g.may_rebind() && g.may_change(Change::Data), "{own}");
        }
        // ... and a directory the host makes inside one of the sandbox's
        // (a host submodule `other/lib`) is the host's.
        let own = Guard::OwnModule;
        let host_inside = l.child(own, None, OsStr::new("lib"), Origin::HostDirectory);
        assert_eq!(host_inside, Guard::HostModule);
        assert_eq!(
            l.child(host_inside, None, OsStr::new("config"), Origin::Other),
            Guard::Sealed
        );
        // ... but a host directory's admin files are sealed whoever asks.
        assert_eq!(sandbox_guard_of(&l, "worktrees/wt/gitdir"), Guard::Sealed);
        for open in [
            "index",
            "index.lock",
            "config.lock.lock",
            "objects/ab/cdef",
            "refs/heads/config",
            "refs/heads/hooks/x",
            "worktrees/wt/index",
            "modules/lib/sub/objects/pack/x.pack",
            "modules/lib/sub/HEAD",
        ] {
            assert_eq!(file_guard_of(&l, open), Guard::Open, "{open}");
        }
        // What makes the common directory and a host worktree's admin
        // directory git directories to host Git keeps its shape.
        for head in ["HEAD", "worktrees/wt/HEAD", "worktrees/new/HEAD"] {
            assert_eq!(file_guard_of(&l, head), Guard::Head, "{head}");
            let lock = format!("{head}.lock");
            let g = file_guard_of(&l, &lock);
            assert_eq!(g, Guard::HeadLock, "{lock}");
            assert!(
                g.may_rebind() && !g.may_change(Change::Data) && !g.may_link_from(),
                "{lock}"
            );
        }
        assert_eq!(guard_of(&l, "objects"), Guard::Pinned);
        assert_eq!(guard_of(&l, "refs"), Guard::Pinned);
        assert_eq!(guard_of(&l, "refs/heads"), Guard::Open);
        // A worktree the sandbox made is its own, HEAD and all.
        assert_eq!(sandbox_guard_of(&l, "worktrees/mine/HEAD"), Guard::Open);
        Ok(())
    }

    #[test]
    fn heads_host_git_accepts_and_the_ones_the_filter_installs() {
        // What Git's validate_headref accepts, lenient forms included.
        for ok in [
            &b"ref: refs/heads/main\n"[..],
            b"ref:refs/heads/x",
            b"ref: \t\r\n refs/heads/x\n",
            b"0123456789ABCDEF0123456789abcdef01234567 trailing",
        ] {
            assert!(git_accepts_head(ok), "{:?}", String::from_utf8_lossy(ok));
        }
        let mut far = b"ref:".to_vec();
        far.extend(std::iter::repeat_n(b' ', 260));
        far.extend_from_slice(b"refs/heads/x\n");
        for bad in [
            &b""[..],
            b"garbage\n",
            b"ref: heads/main\n",
            b"ref:\x0crefs/heads/main\n",
            b"ref:\x0brefs/heads/main\n",
            b"ref:\0refs/heads/main\n",
            b"0123456789abcdef0123456789abcdef0123456\n",
            &far[..],
        ] {
            assert!(!git_accepts_head(bad), "{:?}", String::from_utf8_lossy(bad));
            assert!(!valid_head(bad), "{:?}", String::from_utf8_lossy(bad));
        }
        // The filter installs only the canonical forms Git writes.
        for ok in [
            &b"ref: refs/heads/main\n"[..],
            b"ref: refs/heads/feature/x-1\n",
            b"0123456789abcdef0123456789abcdef01234567\n",
            b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
        ] {
            assert!(valid_head(ok), "{:?}", String::from_utf8_lossy(ok));
            assert!(git_accepts_head(ok));
        }
        for lenient in [
            &b"ref:refs/heads/x\n"[..],
            b"ref: refs/heads/main",
            b"ref: refs/\n",
            b"ref: refs/heads/a b\n",
            b"0123456789ABCDEF0123456789abcdef01234567\n",
            b"0123456789abcdef0123456789abcdef01234567 trailing\n",
        ] {
            assert!(
                !valid_head(lenient),
                "{:?}",
                String::from_utf8_lossy(lenient)
            );
        }
    }

    #[test]
    fn only_open_names_rebind_and_only_open_entries_change() {
        for g in [
            Guard::Pinned,
            Guard::AdminRoot(Admin::Worktrees),
            Guard::HostWorktree,
            Guard::HostModule,
            Guard::Head,
            Guard::Sealed,
            Guard::SealedTree,
            Guard::HiddenHooks,
        ] {
            assert!(!g.may_rebind(), "{g:?}");
            assert!(!g.may_link_from(), "{g:?}");
            for c in [Change::Data, Change::Mode, Change::Owner, Change::Xattr] {
                assert!(!g.may_change(c), "{g:?} {c:?}");
            }
        }
        assert!(Guard::Pinned.may_change(Change::Times));
        assert!(Guard::Head.may_change(Change::Times));
        assert!(!Guard::Head.may_make_directory());
        // An admin root may be made (Git adds `worktrees/` on demand); no
        // other guarded name may.
        assert!(Guard::AdminRoot(Admin::Modules).may_make_directory());
        assert!(!Guard::HostWorktree.may_make_directory());
        assert!(!Guard::Sealed.may_make_directory());
        assert!(!Guard::Sealed.may_change(Change::Times));
        assert!(Guard::Open.may_rebind() && Guard::Open.may_link_from());
    }

    #[test]
    fn bad_paths_are_refused() {
        assert_eq!(
            SentryLayout::new(&[HostGitDir {
                path: "../x".into(),
                ..HostGitDir::default()
            }]),
            Err(LayoutError::BadGitDir("../x".into()))
        );
        assert_eq!(
            SentryLayout::new(&[HostGitDir {
                worktrees: vec!["a/b".into()],
                ..HostGitDir::default()
            }]),
            Err(LayoutError::BadWorktree("a/b".into()))
        );
    }

    #[derive(Clone, Debug)]
    struct Name(String);

    impl Arbitrary for Name {
        fn arbitrary(g: &mut Gen) -> Self {
            let pool = [
                "config",
                "commondir",
                "hooks",
                "worktrees",
                "wt",
                "modules",
                "lib",
                "sub",
                "conf",
                "objects",
                "HEAD",
                "HEAD.lock",
                "refs",
                "x",
            ];
            let n = usize::arbitrary(g) % 5 + 1;
            let parts: Vec<&str> = (0..n).map(|_| *g.choose(&pool).unwrap_or(&"x")).collect();
            Self(parts.join("/"))
        }
    }

    /// The layout is closed under ancestors: walking to a path in the table
    /// yields the table's guard, under a sealed entry everything is sealed,
    /// and below a directory outside the table (an open one) nothing is
    /// guarded.
    #[test]
    fn walking_agrees_with_the_table() {
        fn prop(name: Name) -> bool {
            let Ok(l) = layout() else { return false };
            let walked = guard_of(&l, &name.0);
            let path = Path::new(&name.0);
            let table = l.entries.get(path).copied();
            let under_sealed = path.ancestors().skip(1).any(|a| {
                matches!(
                    l.entries.get(a),
                    Some(
                        Guard::HeadLock
                            | Guard::Head
                            | Guard::Sealed
                            | Guard::SealedTree
                            | Guard::HiddenHooks
                    )
                )
            });
            let under_open = path
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .any(|a| !l.entries.contains_key(a));
            let dynamic_parent = path
                .parent()
                .and_then(|p| l.entries.get(p))
                .is_some_and(|g| g.guards_by_origin() || *g == Guard::HostWorktree);
            if under_sealed {
                walked == Guard::SealedTree
            } else if let Some(t) = table {
                walked == t
            } else if under_open && !path.iter().any(|c| c == "modules" || c == "worktrees") {
                walked == Guard::Open
            } else {
                // Guarded by origin below an admin root: checked by the
                // examples above.
                dynamic_parent || under_open || walked == Guard::Open
            }
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(Name) -> bool);
    }
}
