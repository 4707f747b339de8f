//! The router's operation contract as pure decisions (spec 3.5, "Ignored
//! Workspace State routing contract"): which operations may join two
//! backings, which file types may be made, and which permission bits an
//! object of the workspace may carry.

use super::{Backing, ClassificationSnapshot, Decision, Route};
use crate::git_sentry::{Change, Guard, Origin, SentryLayout};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Permission bits no object made or changed through the router carries:
/// set-user-ID, set-group-ID and write-for-others. A set-ID executable the
/// sandbox leaves in the workspace, owned by the developer, would let any
/// local user run code as the developer; a world-writable file would let any
/// local user change what the developer runs. The bits are cleared silently:
/// tools that copy modes (`cp -p`, `tar`, `install -m`) keep working.
pub const CLEARED_MODE_BITS: u32 = 0o4000 | 0o2000 | 0o0002;

/// `mode`'s permission bits with [`CLEARED_MODE_BITS`] cleared.
pub fn hygienic_mode(mode: u32) -> u32 {
    mode & 0o7777 & !CLEARED_MODE_BITS
}

/// An operation the router refuses, with the errno spec 3.5 names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A rename, exchange or hard link between the two backings: `EXDEV`,
    /// before either backing changes (never a copy and unlink).
    CrossBacking,
    /// `RENAME_WHITEOUT`: `EOPNOTSUPP`, without mutation.
    Whiteout,
    /// A character or block device: `EPERM`.
    DeviceNode,
    /// A change to what a nested host repository's Git runs or trusts
    /// ([`may_change`]): `EPERM`.
    NestedHostGitEntry,
    /// A change that would let a directory where the host had a `HEAD`
    /// become, or stop being guarded as, a bare repository host Git uses
    /// ([`may_change`]): `EPERM`.
    HostHeadDirectory,
    /// Setting or removing an extended attribute outside `user.*`
    /// ([`may_set_attribute`]): `EOPNOTSUPP`, as from a file system without
    /// that namespace.
    UnsupportedAttribute,
}

/// Whether the extended attribute `name` is shown (read or listed) through
/// the router: `user.*` only. Others (`security.*`, `trusted.*`) are the
/// host's business and read as absent; POSIX ACLs never reach the router
/// (the kernel serves them only to a FUSE file system that asks it to
/// enforce them, and the router does not ask, see [`may_set_attribute`]).
pub fn shows_attribute(name: &[u8]) -> bool {
    name.starts_with(b"user.")
}

/// Whether the extended attribute `name` may be set or removed through the
/// router (spec 3.5: "`user.*` extended attributes"). Not a POSIX ACL: an
/// ACL can give users other than the developer write access to a host
/// file, which mode hygiene exists to prevent; nor `security.*` (a file
/// capability on a host executable) or `trusted.*`.
pub fn may_set_attribute(name: &[u8]) -> Result<(), Refusal> {
    if name.starts_with(b"user.") {
        Ok(())
    } else {
        Err(Refusal::UnsupportedAttribute)
    }
}

/// What an operation does to the object at a path, told apart as the Git
/// Sentry's guards tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Created (anything but a directory), removed, renamed from or to, or
    /// made a hard link's new name.
    Rebind,
    /// A directory made at the path.
    MakeDirectory,
    /// Its content or metadata changed.
    Change(Change),
    /// A hard link made from it.
    LinkFrom,
}

/// How the router guards the git directory of a repository the host had
/// inside the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NestedGitGuards {
    /// By the Git Sentry's layout of it, read from the host: its
    /// configuration files and what they include, its hooks, and the admin
    /// files of its linked worktrees and submodules.
    Layout(SentryLayout),
    /// Its layout could not be read (a `.git` that is a file, an include
    /// through a symbolic link, too many entries): nothing in it changes.
    ReadOnly,
}

/// How the router guards a directory outside any git directory where the
/// host had an entry named `HEAD` when the snapshot was read. Host Git
/// started in such a directory (or below it) takes it for a bare repository
/// once its `HEAD` is one Git accepts and `objects/` and `refs/` are beside
/// it, and then obeys its `config` and hooks (spec 3.5, SR-4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostHeadGuards {
    /// Its `HEAD` is one Git accepts: the directory is (or becomes, with
    /// `objects/` and `refs/`) a bare repository, guarded as a nested
    /// repository's git directory is; neither it nor a directory above it
    /// moves or goes away, so the guards stay on its path.
    GitDirectory(NestedGitGuards),
    /// Its `HEAD` is not one Git accepts (or not a file): it stays as the
    /// host had it, so the directory never becomes a repository.
    FrozenHead,
}

/// Whether `op` may happen to the object at workspace `path`, classified as
/// `route` in `snapshot`. A repository the host had inside the workspace
/// (a vendored clone) is host Git's as much as the workspace's own, whose
/// git directory the Git Sentry guards (spec 3.5, SR-4): its `.git` entry
/// never changes, and inside it the Git Sentry's own guards
/// ([`SentryLayout`]) decide — configuration, included files and hooks
/// are read-only, the admin files of host worktrees and submodules too,
/// while objects, refs and the index stay writable so Git keeps working in
/// it. `origin` tells whether the host has a directory at a workspace path
/// (asked only below `worktrees/` and `modules/`, where the guard depends
/// on it). Its `HEAD` is not guarded: one made invalid makes host Git look
/// further up, where a `HEAD` the sandbox made is isolated state
/// ([`super::Decision::SandboxRepositoryHead`]).
pub fn may_change(
    snapshot: &ClassificationSnapshot,
    route: &Route,
    path: &[u8],
    op: Operation,
    mut origin: impl FnMut(&[u8]) -> Origin,
) -> Result<(), Refusal> {
    may_change_host_head_directory(snapshot, route, path, op, &mut origin)?;
    if route.decision != Decision::GitDirectory || route.repository.is_empty() {
        return Ok(());
    }
    let git_dir_len = route.repository.len() + b"/.git".len();
    let Some(rest) = path
        .strip_prefix(route.repository.as_slice())
        .and_then(|r| r.strip_prefix(b"/.git"))
    else {
        return Ok(());
    };
    let allowed = match rest.strip_prefix(b"/") {
        // The `.git` entry itself keeps its place and permissions (its
        // times move as its children change).
        None => !rest.is_empty() || op == Operation::Change(Change::Times),
        Some(inner) => match snapshot.nested_git_guards(&route.repository) {
            Some(NestedGitGuards::Layout(layout)) => {
                let guard = guard_in(layout, &path[..git_dir_len], inner, &mut origin);
                match guard {
                    // Not validated here (see above).
                    Guard::Head | Guard::HeadLock => true,
                    _ => match op {
                        Operation::Rebind => guard.may_rebind(),
                        Operation::MakeDirectory => guard.may_make_directory(),
                        Operation::Change(change) => guard.may_change(change),
                        Operation::LinkFrom => guard.may_link_from(),
                    },
                }
            }
            Some(NestedGitGuards::ReadOnly) | None => false,
        },
    };
    if allowed {
        Ok(())
    } else {
        Err(Refusal::NestedHostGitEntry)
    }
}

/// The part of [`may_change`] for directories where the host had a `HEAD`
/// ([`HostHeadGuards`]). Inside one whose `HEAD` Git accepts, the Git
/// Sentry's layout of it decides as for a nested repository's git
/// directory (its `HEAD` is not guarded: made invalid, host Git looks
/// further up); a `HEAD` Git does not accept never changes; a directory
/// holding one of the first kind is neither moved nor removed.
fn may_change_host_head_directory(
    snapshot: &ClassificationSnapshot,
    route: &Route,
    path: &[u8],
    op: Operation,
    origin: &mut impl FnMut(&[u8]) -> Origin,
) -> Result<(), Refusal> {
    if op == Operation::Rebind && snapshot.holds_host_git_directory(path) {
        return Err(Refusal::HostHeadDirectory);
    }
    if route.backing != Backing::Host {
        // Host Git never sees it.
        return Ok(());
    }
    // Every such directory above the path has its say: a bare repository's
    // worktree admin directory has a `HEAD` of its own.
    for (dir, guards) in snapshot.host_head_directories(path) {
        // `dir` is a proper ancestor of `path` (the root: empty).
        let inner = if dir.is_empty() {
            path
        } else {
            &path[dir.len() + 1..]
        };
        // The `HEAD` decides what the directory is: it stays as the host
        // had it (any spelling: a file system may fold case).
        let names_head = inner.eq_ignore_ascii_case(super::HEAD);
        let allowed = match guards {
            _ if names_head => op == Operation::Change(Change::Times),
            HostHeadGuards::FrozenHead => true,
            HostHeadGuards::GitDirectory(NestedGitGuards::Layout(layout)) => {
                match guard_in(layout, &dir, inner, origin) {
                    Guard::HeadLock => true,
                    guard => match op {
                        Operation::Rebind => guard.may_rebind(),
                        Operation::MakeDirectory => guard.may_make_directory(),
                        Operation::Change(change) => guard.may_change(change),
                        Operation::LinkFrom => guard.may_link_from(),
                    },
                }
            }
            HostHeadGuards::GitDirectory(NestedGitGuards::ReadOnly) => false,
        };
        if !allowed {
            return Err(Refusal::HostHeadDirectory);
        }
    }
    Ok(())
}

/// The guard of `inner` (a path inside the git directory at workspace path
/// `git_dir`) by `layout`, found from the root one component at a time, as
/// the Git Sentry finds it.
fn guard_in(
    layout: &SentryLayout,
    git_dir: &[u8],
    inner: &[u8],
    origin: &mut impl FnMut(&[u8]) -> Origin,
) -> Guard {
    let mut guard = layout.root();
    let mut rel: Option<PathBuf> = Some(PathBuf::new());
    let mut end = 0;
    for (i, part) in inner.split(|b| *b == b'/').enumerate() {
        end = if i == 0 {
            part.len()
        } else {
            end + 1 + part.len()
        };
        let name = OsStr::from_bytes(part);
        let from = if guard.guards_by_origin() {
            origin(&super::joined(git_dir, &inner[..end]))
        } else {
            Origin::Other
        };
        let next = layout.child(guard, rel.as_deref(), name, from);
        rel = match rel {
            Some(p) if next.keeps_path() => Some(p.join(name)),
            _ => None,
        };
        guard = next;
    }
    guard
}

/// The kinds of object `mknod` can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A regular file.
    Regular,
    /// A FIFO.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

/// Whether `mknod` may make an object of `kind`.
pub fn may_make(kind: NodeKind) -> Result<(), Refusal> {
    match kind {
        NodeKind::Regular | NodeKind::Fifo | NodeKind::Socket => Ok(()),
        NodeKind::CharDevice | NodeKind::BlockDevice => Err(Refusal::DeviceNode),
    }
}

/// The backing a rename or hard link of an object in `source` to a name that
/// routes to `destination` happens in: the same one, or a refusal.
pub fn joining(source: Backing, destination: Backing) -> Result<Backing, Refusal> {
    if source == destination {
        Ok(source)
    } else {
        Err(Refusal::CrossBacking)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git_sentry::HostGitDir;
    use crate::workspace_routing::tracked::TrackedPaths;
    use crate::workspace_routing::RepositoryRules;

    #[test]
    fn set_id_and_world_write_bits_are_cleared_and_nothing_else() {
        assert_eq!(hygienic_mode(0o4755), 0o755);
        assert_eq!(hygienic_mode(0o2775), 0o775);
        assert_eq!(hygienic_mode(0o6777), 0o775);
        assert_eq!(hygienic_mode(0o1777), 0o1775);
        assert_eq!(hygienic_mode(0o100644), 0o644);
        for mode in 0..=0o7777u32 {
            let m = hygienic_mode(mode);
            assert_eq!(m & CLEARED_MODE_BITS, 0, "{mode:o}");
            assert_eq!(m | (mode & CLEARED_MODE_BITS), mode, "{mode:o}");
        }
    }

    #[test]
    fn only_user_attributes_are_shown_and_set() {
        assert_eq!(may_set_attribute(b"user.mime_type"), Ok(()));
        for name in [
            &b"system.posix_acl_access"[..],
            b"system.posix_acl_default",
            b"security.capability",
            b"security.selinux",
            b"trusted.overlay.opaque",
            b"user",
            b"users.x",
        ] {
            assert_eq!(
                may_set_attribute(name),
                Err(Refusal::UnsupportedAttribute),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert!(shows_attribute(b"user.x"));
        assert!(!shows_attribute(b"system.posix_acl_access"));
        assert!(!shows_attribute(b"security.capability"));
    }

    #[test]
    fn devices_are_refused_and_fifos_and_sockets_made() {
        assert_eq!(may_make(NodeKind::CharDevice), Err(Refusal::DeviceNode));
        assert_eq!(may_make(NodeKind::BlockDevice), Err(Refusal::DeviceNode));
        for k in [NodeKind::Regular, NodeKind::Fifo, NodeKind::Socket] {
            assert_eq!(may_make(k), Ok(()));
        }
    }

    fn git_directory(repository: &[u8]) -> Route {
        Route {
            backing: Backing::Host,
            decision: Decision::GitDirectory,
            repository: repository.to_vec(),
        }
    }

    /// A workspace with a nested repository at `vendor/lib` guarded by
    /// `guards`.
    fn with_nested(guards: Option<NestedGitGuards>) -> ClassificationSnapshot {
        let mut nested = RepositoryRules::new(TrackedPaths::default(), false);
        if let Some(g) = guards {
            nested.set_git_guards(g);
        }
        let mut outer = RepositoryRules::new(TrackedPaths::default(), false);
        outer.add_nested(b"vendor/lib", nested);
        ClassificationSnapshot::of_repository(outer)
    }

    fn layout() -> SentryLayout {
        let dirs = [
            HostGitDir {
                path: PathBuf::new(),
                worktrees: vec!["wt".into()],
                includes: vec![PathBuf::from("extra.cfg")],
            },
            HostGitDir {
                path: PathBuf::from("modules/sub"),
                ..HostGitDir::default()
            },
        ];
        match SentryLayout::new(&dirs) {
            Ok(l) => l,
            Err(e) => panic!("layout: {e}"),
        }
    }

    /// The host has directories at these workspace paths.
    fn host_dirs(dirs: &'static [&'static str]) -> impl FnMut(&[u8]) -> Origin {
        move |p| {
            if dirs.iter().any(|d| d.as_bytes() == p) {
                Origin::HostDirectory
            } else {
                Origin::Other
            }
        }
    }

    #[test]
    fn a_nested_host_repository_is_guarded_as_the_git_sentry_guards_the_workspaces() {
        let s = with_nested(Some(NestedGitGuards::Layout(layout())));
        let nested = git_directory(b"vendor/lib");
        let origin = || host_dirs(&["vendor/lib/.git/worktrees/host-made"]);
        let check = |path: &str, op| may_change(&s, &nested, path.as_bytes(), op, origin());
        let data = Operation::Change(Change::Data);
        for (path, op) in [
            ("vendor/lib/.git", Operation::Rebind),
            ("vendor/lib/.git", Operation::Change(Change::Mode)),
            ("vendor/lib/.git/config", data),
            ("vendor/lib/.git/config", Operation::Rebind),
            ("vendor/lib/.git/config.lock", Operation::Rebind),
            ("vendor/lib/.git/config.worktree", Operation::Rebind),
            ("vendor/lib/.git/commondir", Operation::Rebind),
            ("vendor/lib/.git/config", Operation::LinkFrom),
            ("vendor/lib/.git/extra.cfg", data),
            ("vendor/lib/.git/hooks", Operation::Rebind),
            ("vendor/lib/.git/hooks/pre-commit", Operation::Rebind),
            ("vendor/lib/.git/hooks/pre-commit", data),
            ("vendor/lib/.git/worktrees/wt/gitdir", data),
            ("vendor/lib/.git/worktrees/wt/commondir", Operation::Rebind),
            ("vendor/lib/.git/worktrees/wt", Operation::Rebind),
            (
                "vendor/lib/.git/worktrees/host-made/gitdir",
                Operation::Rebind,
            ),
            ("vendor/lib/.git/modules/sub/config", data),
            (
                "vendor/lib/.git/modules/sub/hooks/post-checkout",
                Operation::Rebind,
            ),
            ("vendor/lib/.git/objects", Operation::Rebind),
            ("vendor/lib/.git/refs", Operation::Change(Change::Mode)),
        ] {
            assert_eq!(
                check(path, op),
                Err(Refusal::NestedHostGitEntry),
                "{path} {op:?}"
            );
        }
        for (path, op) in [
            ("vendor/lib/.git", Operation::Change(Change::Times)),
            ("vendor/lib/.git/index", data),
            ("vendor/lib/.git/index.lock", Operation::Rebind),
            ("vendor/lib/.git/HEAD", Operation::Rebind),
            ("vendor/lib/.git/HEAD.lock", Operation::Rebind),
            ("vendor/lib/.git/objects/ab", Operation::MakeDirectory),
            ("vendor/lib/.git/objects/ab/cdef", Operation::Rebind),
            ("vendor/lib/.git/refs/heads/config", Operation::Rebind),
            ("vendor/lib/.git/configx", data),
            ("vendor/lib/.git/worktrees/new", Operation::MakeDirectory),
            ("vendor/lib/.git/worktrees/wt/index", data),
            (
                "vendor/lib/.git/modules/sub/objects/ab",
                Operation::MakeDirectory,
            ),
            ("vendor/lib/.gitx", Operation::Rebind),
        ] {
            assert_eq!(check(path, op), Ok(()), "{path} {op:?}");
        }
    }

    #[test]
    fn a_nested_repository_without_a_layout_is_read_only() {
        let nested = git_directory(b"vendor/lib");
        for guards in [Some(NestedGitGuards::ReadOnly), None] {
            let s = with_nested(guards);
            for path in ["vendor/lib/.git/index", "vendor/lib/.git/objects/ab"] {
                assert_eq!(
                    may_change(
                        &s,
                        &nested,
                        path.as_bytes(),
                        Operation::Rebind,
                        host_dirs(&[])
                    ),
                    Err(Refusal::NestedHostGitEntry),
                    "{path}"
                );
            }
        }
    }

    #[test]
    fn only_nested_host_git_directories_are_guarded() {
        let s = with_nested(None);
        // The workspace's own git directory is the Git Sentry's, and other
        // decisions are not git directories.
        let op = Operation::Change(Change::Data);
        assert_eq!(
            may_change(&s, &git_directory(b""), b".git/config", op, host_dirs(&[])),
            Ok(())
        );
        let ordinary = Route {
            decision: Decision::Unmatched,
            ..git_directory(b"vendor/lib")
        };
        assert_eq!(
            may_change(&s, &ordinary, b"vendor/lib/.git/config", op, host_dirs(&[])),
            Ok(())
        );
    }

    #[test]
    fn only_same_backing_operations_join() {
        assert_eq!(joining(Backing::Host, Backing::Host), Ok(Backing::Host));
        assert_eq!(
            joining(Backing::Isolated, Backing::Isolated),
            Ok(Backing::Isolated)
        );
        assert_eq!(
            joining(Backing::Host, Backing::Isolated),
            Err(Refusal::CrossBacking)
        );
        assert_eq!(
            joining(Backing::Isolated, Backing::Host),
            Err(Refusal::CrossBacking)
        );
    }

    fn worktree_path(backing: Backing, repository: &[u8]) -> Route {
        Route {
            backing,
            decision: Decision::Unmatched,
            repository: repository.to_vec(),
        }
    }

    /// A workspace where the host had a `HEAD` Git accepts in
    /// `tools/cache.git` (guarded by the test layout), one it does not accept
    /// in `docs`, and a nested repository at `vendor/lib` with a bare
    /// repository of its own at `fixtures/r.git`.
    fn with_host_heads() -> ClassificationSnapshot {
        let mut nested = RepositoryRules::new(TrackedPaths::default(), false);
        nested.add_host_head_directory(
            b"fixtures/r.git",
            HostHeadGuards::GitDirectory(NestedGitGuards::ReadOnly),
        );
        let mut outer = RepositoryRules::new(TrackedPaths::default(), false);
        outer.add_host_head_directory(
            b"tools/cache.git",
            HostHeadGuards::GitDirectory(NestedGitGuards::Layout(layout())),
        );
        outer.add_host_head_directory(b"docs", HostHeadGuards::FrozenHead);
        outer.add_nested(b"vendor/lib", nested);
        ClassificationSnapshot::of_repository(outer)
    }

    #[test]
    fn a_bare_repository_the_host_had_is_guarded_like_a_git_directory() {
        let s = with_host_heads();
        let host = worktree_path(Backing::Host, b"");
        let check = |path: &str, op| may_change(&s, &host, path.as_bytes(), op, host_dirs(&[]));
        let data = Operation::Change(Change::Data);
        for (path, op) in [
            ("tools/cache.git/config", data),
            ("tools/cache.git/config", Operation::Rebind),
            ("tools/cache.git/commondir", Operation::Rebind),
            ("tools/cache.git/config.worktree", Operation::Rebind),
            ("tools/cache.git/extra.cfg", data),
            ("tools/cache.git/hooks", Operation::MakeDirectory),
            ("tools/cache.git/hooks/post-update", Operation::Rebind),
            ("tools/cache.git/objects", Operation::Rebind),
            // Its `HEAD` stays: it decides what the directory is.
            ("tools/cache.git/HEAD", data),
            ("tools/cache.git/HEAD", Operation::Rebind),
            ("tools/cache.git/HEAD", Operation::LinkFrom),
            ("tools/cache.git/head", data),
            // Neither it nor a directory above it moves or goes away.
            ("tools/cache.git", Operation::Rebind),
            ("tools", Operation::Rebind),
        ] {
            assert_eq!(
                check(path, op),
                Err(Refusal::HostHeadDirectory),
                "{path} {op:?}"
            );
        }
        for (path, op) in [
            ("tools/cache.git/HEAD", Operation::Change(Change::Times)),
            ("tools/cache.git/HEAD.lock", Operation::Rebind),
            ("tools/cache.git/objects/ab", Operation::MakeDirectory),
            ("tools/cache.git/refs/heads/main", Operation::Rebind),
            ("tools/cache.git", Operation::Change(Change::Times)),
            ("tools/cache.gitx/config", data),
            ("tools/other", Operation::Rebind),
            ("tools/cache.git.d", Operation::Rebind),
        ] {
            assert_eq!(check(path, op), Ok(()), "{path} {op:?}");
        }
        // What isolated state holds there host Git never sees.
        let isolated = worktree_path(Backing::Isolated, b"");
        assert_eq!(
            may_change(
                &s,
                &isolated,
                b"tools/cache.git/hooks/x",
                Operation::Rebind,
                host_dirs(&[])
            ),
            Ok(())
        );
    }

    #[test]
    fn a_head_git_does_not_accept_stays_as_the_host_had_it() {
        let s = with_host_heads();
        let host = worktree_path(Backing::Host, b"");
        let check = |path: &str, op| may_change(&s, &host, path.as_bytes(), op, host_dirs(&[]));
        for op in [
            Operation::Change(Change::Data),
            Operation::Change(Change::Mode),
            Operation::Rebind,
            // A second name would write it.
            Operation::LinkFrom,
        ] {
            for path in ["docs/HEAD", "docs/Head"] {
                assert_eq!(
                    check(path, op),
                    Err(Refusal::HostHeadDirectory),
                    "{path} {op:?}"
                );
            }
        }
        for (path, op) in [
            ("docs/HEAD", Operation::Change(Change::Times)),
            ("docs/config", Operation::Rebind),
            ("docs/hooks", Operation::MakeDirectory),
            // Moved, its `HEAD` is one the host did not have at the new
            // path: isolated, never made valid on the host.
            ("docs", Operation::Rebind),
        ] {
            assert_eq!(check(path, op), Ok(()), "{path} {op:?}");
        }
    }

    #[test]
    fn a_nested_repositorys_bare_repository_is_guarded_by_its_rules() {
        let s = with_host_heads();
        let nested = worktree_path(Backing::Host, b"vendor/lib");
        assert_eq!(
            may_change(
                &s,
                &nested,
                b"vendor/lib/fixtures/r.git/objects/ab",
                Operation::MakeDirectory,
                host_dirs(&[])
            ),
            Err(Refusal::HostHeadDirectory)
        );
        let outer = worktree_path(Backing::Host, b"");
        for path in ["vendor", "vendor/lib", "vendor/lib/fixtures"] {
            assert_eq!(
                may_change(
                    &s,
                    &outer,
                    path.as_bytes(),
                    Operation::Rebind,
                    host_dirs(&[])
                ),
                Err(Refusal::HostHeadDirectory),
                "{path}"
            );
        }
        let dirs = |path: &[u8]| -> Vec<Vec<u8>> {
            s.host_head_directories(path)
                .into_iter()
                .map(|(dir, _)| dir)
                .collect()
        };
        assert_eq!(
            dirs(b"vendor/lib/fixtures/r.git/x"),
            [b"vendor/lib/fixtures/r.git".to_vec()]
        );
        assert!(dirs(b"vendor/lib/fixtures/r.git").is_empty());
        assert!(dirs(b"vendor/lib/fixtures/r.gitx/config").is_empty());
    }

    /// The workspace root itself where the host had a `HEAD` (a tree that
    /// is no repository but a bare one), and a directory with a `HEAD` of
    /// its own inside a guarded one (a worktree's admin directory): every
    /// such directory above a path has its say, across repositories.
    #[test]
    fn every_host_head_directory_above_a_path_has_its_say() {
        let mut tree = RepositoryRules::new(TrackedPaths::default(), false);
        tree.add_host_head_directory(
            b"",
            HostHeadGuards::GitDirectory(NestedGitGuards::Layout(layout())),
        );
        tree.add_host_head_directory(
            b"worktrees/wt",
            HostHeadGuards::GitDirectory(NestedGitGuards::Layout(layout())),
        );
        let mut nested = RepositoryRules::new(TrackedPaths::default(), false);
        nested.add_host_head_directory(b"", HostHeadGuards::FrozenHead);
        tree.add_nested(b"sub", nested);
        let s = ClassificationSnapshot::of_tree_without_repository(tree);
        let host = worktree_path(Backing::Host, b"");
        let check = |path: &str, op| may_change(&s, &host, path.as_bytes(), op, host_dirs(&[]));
        let data = Operation::Change(Change::Data);
        for (path, op) in [
            ("config", data),
            ("HEAD", data),
            ("hooks/pre-commit", Operation::Rebind),
            // Sealed by the outer layout though its own would let it be.
            ("worktrees/wt/gitdir", data),
            // The nested repository's frozen `HEAD`.
            ("sub/HEAD", data),
        ] {
            assert_eq!(
                check(path, op),
                Err(Refusal::HostHeadDirectory),
                "{path} {op:?}"
            );
        }
        for (path, op) in [
            ("objects/ab", Operation::MakeDirectory),
            ("src/main.rs", data),
            ("sub/config", data),
        ] {
            assert_eq!(check(path, op), Ok(()), "{path} {op:?}");
        }
    }
}
