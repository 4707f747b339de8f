//! The router's operation contract as pure decisions (spec 3.5, "Ignored
//! Workspace State routing contract"): which operations may join two
//! backings, which file types may be made, and which permission bits an
//! object of the workspace may carry.

use super::{Backing, Decision, Route};
use crate::git_sentry::SEALED_IN_GIT_DIR;

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
}

/// Whether the object at workspace `path`, classified as `route`, may be
/// created, written, truncated, re-permissioned, renamed (from or to),
/// removed or hard-linked through the router. A repository the host had
/// inside the workspace (a vendored clone, a submodule's `.git` file) is
/// host Git's as much as the workspace's own, whose git directory the Git
/// Sentry guards (spec 3.5, SR-4): its `.git` entry, `config`,
/// `config.worktree`, `commondir` (and their `.lock`) and everything under
/// `hooks/` are refused; the rest of it (objects, refs, index) passes, so
/// Git keeps working in it.
pub fn may_change(route: &Route, path: &[u8]) -> Result<(), Refusal> {
    if route.decision != Decision::GitDirectory || route.repository.is_empty() {
        return Ok(());
    }
    let Some(rest) = path
        .strip_prefix(route.repository.as_slice())
        .and_then(|r| r.strip_prefix(b"/.git"))
    else {
        return Ok(());
    };
    let sealed = match rest.strip_prefix(b"/") {
        None => rest.is_empty(),
        Some(inner) => {
            // The files the Git Sentry seals in every git directory, the
            // lock file host Git renames over each, and the hooks.
            let name = inner.strip_suffix(b".lock").unwrap_or(inner);
            SEALED_IN_GIT_DIR.iter().any(|s| s.as_bytes() == name)
                || inner == b"hooks"
                || inner.starts_with(b"hooks/")
        }
    };
    if sealed {
        Err(Refusal::NestedHostGitEntry)
    } else {
        Ok(())
    }
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

    #[test]
    fn a_nested_host_repository_keeps_its_configuration_and_hooks() {
        let nested = git_directory(b"vendor/lib");
        for sealed in [
            &b"vendor/lib/.git"[..],
            b"vendor/lib/.git/config",
            b"vendor/lib/.git/config.lock",
            b"vendor/lib/.git/config.worktree",
            b"vendor/lib/.git/commondir",
            b"vendor/lib/.git/hooks",
            b"vendor/lib/.git/hooks/pre-commit",
            b"vendor/lib/.git/hooks/sub/x",
        ] {
            assert_eq!(
                may_change(&nested, sealed),
                Err(Refusal::NestedHostGitEntry),
                "{}",
                String::from_utf8_lossy(sealed)
            );
        }
        for open in [
            &b"vendor/lib/.git/index"[..],
            b"vendor/lib/.git/index.lock",
            b"vendor/lib/.git/HEAD",
            b"vendor/lib/.git/objects/ab/cdef",
            b"vendor/lib/.git/refs/heads/main",
            b"vendor/lib/.git/configx",
            b"vendor/lib/.git/hooksx",
            b"vendor/lib/.gitx",
        ] {
            assert_eq!(
                may_change(&nested, open),
                Ok(()),
                "{}",
                String::from_utf8_lossy(open)
            );
        }
        // The workspace's own git directory is the Git Sentry's, and other
        // decisions are not git directories.
        assert_eq!(may_change(&git_directory(b""), b".git/config"), Ok(()));
        let ordinary = Route {
            decision: Decision::Unmatched,
            ..git_directory(b"vendor/lib")
        };
        assert_eq!(may_change(&ordinary, b"vendor/lib/.git/config"), Ok(()));
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
}
