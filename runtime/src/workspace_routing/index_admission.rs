//! Which index the workspace's repository may take (spec 3.5): "An index
//! publication that would make an isolated object tracked is accepted only
//! when a type-compatible host worktree object already exists
//! independently. [...] A guest index-lock rename that would instead create
//! a tracked path with only an isolated object returns `EBUSY` before
//! replacing the index."
//!
//! A tracked path is host-backed, so tracking a path that routes to the
//! Ignored Workspace State today (`git add -f node_modules/x`) would either
//! hide the sandbox's object behind nothing, a silent disappearance, or
//! need its bytes copied to the host, a copy-back. Neither happens: the
//! effects layer asks [`admit`] before an index replaces the current one,
//! and answers `EBUSY` when it refuses.

use super::tracked::{EntryKind, IndexEntry};
use super::{Backing, ClassificationSnapshot};

/// What kind of object a backing holds at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A directory.
    Directory,
    /// A FIFO or a socket.
    Other,
}

impl EntryKind {
    /// Whether a worktree object of `kind` is what this entry records.
    pub fn matches(self, kind: ObjectKind) -> bool {
        matches!(
            (self, kind),
            (EntryKind::File, ObjectKind::File)
                | (EntryKind::Symlink, ObjectKind::Symlink)
                | (
                    EntryKind::Gitlink | EntryKind::Directory,
                    ObjectKind::Directory
                )
        )
    }
}

/// The refusal of an index: it tracks `path`, whose only object is the
/// sandbox's isolated one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the index would track {}, which exists only in the Ignored Workspace State", String::from_utf8_lossy(.path))]
pub struct IsolatedOnly {
    /// The path, from the workspace root.
    pub path: Vec<u8>,
}

/// An entry of a proposed index, at its workspace path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MadeTracked {
    /// The path from the workspace root.
    pub path: Vec<u8>,
    /// The kind of object the entry records.
    pub kind: EntryKind,
}

/// The entries of `proposed` (the next index of the repository at workspace
/// path `repository`, empty for the workspace's own) that `current` neither
/// tracks nor routes to the host: each would move from isolated state to
/// the host when the index is published.
pub fn made_tracked(
    current: &ClassificationSnapshot,
    repository: &[u8],
    proposed: &[IndexEntry],
) -> Vec<MadeTracked> {
    proposed
        .iter()
        .filter(|e| !current.tracks(repository, &e.path))
        .filter_map(|e| {
            let mut path = repository.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.path);
            let dir = matches!(e.kind, EntryKind::Gitlink | EntryKind::Directory);
            // A path the classification refuses is never served by either
            // backing: nothing of it can move.
            current
                .classify(&path, dir)
                .is_ok_and(|route| route.backing == Backing::Isolated)
                .then_some(MadeTracked { path, kind: e.kind })
        })
        .collect()
}

/// Whether `proposed` may replace the current index of the repository at
/// workspace path `repository` (empty: the workspace's own), classified by
/// `current`. `object` tells what a backing holds at a workspace path
/// (`None`: nothing). An entry made tracked whose isolated object exists
/// needs a host object of the kind the entry records; an entry with no
/// object in either backing is a tracked path deleted from the worktree, as
/// Git allows.
pub fn admit(
    current: &ClassificationSnapshot,
    repository: &[u8],
    proposed: &[IndexEntry],
    mut object: impl FnMut(Backing, &[u8]) -> Option<ObjectKind>,
) -> Result<(), IsolatedOnly> {
    // Directories already looked at (bounded by the entries' ancestors).
    let mut seen: std::collections::BTreeSet<Vec<u8>> = std::collections::BTreeSet::new();
    for entry in made_tracked(current, repository, proposed) {
        // A directory on the way that becomes tracked (it will hold an
        // entry) is host-backed from then on: an isolated one there needs a
        // host directory too, or everything in it would be hidden.
        let below = repository.len() + usize::from(!repository.is_empty());
        let slashes = entry.path[below..]
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| below + i);
        for end in slashes {
            let dir = &entry.path[..end];
            if !seen.insert(dir.to_vec()) || current.tracks(repository, &dir[below..]) {
                continue;
            }
            let isolated_now = current
                .classify(dir, true)
                .is_ok_and(|route| route.backing == Backing::Isolated);
            if isolated_now
                && object(Backing::Isolated, dir).is_some()
                && object(Backing::Host, dir) != Some(ObjectKind::Directory)
            {
                return Err(IsolatedOnly { path: dir.to_vec() });
            }
        }
        if object(Backing::Isolated, &entry.path).is_none() {
            continue;
        }
        if object(Backing::Host, &entry.path).is_some_and(|kind| entry.kind.matches(kind)) {
            continue;
        }
        return Err(IsolatedOnly { path: entry.path });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace_routing::tracked::TrackedPaths;
    use crate::workspace_routing::RepositoryRules;
    use std::collections::HashMap;

    fn snapshot(tracked: &[&str]) -> ClassificationSnapshot {
        let mut rules = RepositoryRules::new(
            TrackedPaths::from_paths(tracked.iter().map(|p| p.as_bytes().to_vec()), false),
            false,
        );
        rules.add_gitignore(b"", b"node_modules/\n*.log\n!keep.log\n");
        ClassificationSnapshot::of_repository(rules)
    }

    fn entry(path: &str, kind: EntryKind) -> IndexEntry {
        IndexEntry {
            path: path.as_bytes().to_vec(),
            kind,
        }
    }

    /// The objects of both backings, by (backing, path).
    fn objects(list: &[(Backing, &str, ObjectKind)]) -> HashMap<(Backing, Vec<u8>), ObjectKind> {
        list.iter()
            .map(|(b, p, k)| ((*b, p.as_bytes().to_vec()), *k))
            .collect()
    }

    fn check(
        current: &ClassificationSnapshot,
        proposed: &[IndexEntry],
        world: &HashMap<(Backing, Vec<u8>), ObjectKind>,
    ) -> Result<(), IsolatedOnly> {
        admit(current, b"", proposed, |b, p| {
            world.get(&(b, p.to_vec())).copied()
        })
    }

    #[test]
    fn only_untracked_isolated_entries_are_made_tracked() {
        let current = snapshot(&["src/a.rs", "debug.log"]);
        let proposed = [
            entry("src/a.rs", EntryKind::File),
            entry("src/new.rs", EntryKind::File),
            entry("debug.log", EntryKind::File),
            entry("keep.log", EntryKind::File),
            entry("x.log", EntryKind::File),
            entry("node_modules/m/index.js", EntryKind::File),
            entry("node_modules", EntryKind::Gitlink),
        ];
        let made: Vec<Vec<u8>> = made_tracked(&current, b"", &proposed)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            made,
            vec![
                b"x.log".to_vec(),
                b"node_modules/m/index.js".to_vec(),
                b"node_modules".to_vec()
            ]
        );
    }

    #[test]
    fn an_isolated_only_object_is_never_made_tracked() {
        let current = snapshot(&["src/a.rs"]);
        let proposed = [
            entry("src/a.rs", EntryKind::File),
            entry("node_modules/m/index.js", EntryKind::File),
        ];
        let world = objects(&[(
            Backing::Isolated,
            "node_modules/m/index.js",
            ObjectKind::File,
        )]);
        assert_eq!(
            check(&current, &proposed, &world),
            Err(IsolatedOnly {
                path: b"node_modules/m/index.js".to_vec()
            })
        );
    }

    #[test]
    fn a_host_object_of_the_entrys_kind_makes_it_trackable() {
        let current = snapshot(&[]);
        let proposed = [entry("node_modules/m/index.js", EntryKind::File)];
        let both = |host: ObjectKind| {
            objects(&[
                (
                    Backing::Isolated,
                    "node_modules/m/index.js",
                    ObjectKind::File,
                ),
                (Backing::Host, "node_modules/m/index.js", host),
            ])
        };
        assert_eq!(check(&current, &proposed, &both(ObjectKind::File)), Ok(()));
        // Another kind on the host is no independent object of this entry.
        for other in [
            ObjectKind::Symlink,
            ObjectKind::Directory,
            ObjectKind::Other,
        ] {
            assert!(
                check(&current, &proposed, &both(other)).is_err(),
                "{other:?}"
            );
        }
        let link = [entry("x.log", EntryKind::Symlink)];
        let world = objects(&[
            (Backing::Isolated, "x.log", ObjectKind::File),
            (Backing::Host, "x.log", ObjectKind::Symlink),
        ]);
        assert_eq!(check(&current, &link, &world), Ok(()));
        let gitlink = [entry("node_modules", EntryKind::Gitlink)];
        let world = objects(&[
            (Backing::Isolated, "node_modules", ObjectKind::Directory),
            (Backing::Host, "node_modules", ObjectKind::Directory),
        ]);
        assert_eq!(check(&current, &gitlink, &world), Ok(()));
    }

    #[test]
    fn an_entry_with_no_object_in_either_backing_is_admitted() {
        // `git update-index --add --cacheinfo` of a path nobody has: a
        // tracked, deleted file, nothing to hide or copy.
        let current = snapshot(&[]);
        let proposed = [entry("node_modules/gone.js", EntryKind::File)];
        assert_eq!(check(&current, &proposed, &objects(&[])), Ok(()));
    }

    #[test]
    fn a_nested_repositorys_index_is_judged_by_its_own_paths() {
        let mut inner =
            RepositoryRules::new(TrackedPaths::from_paths([b"lib.c".to_vec()], false), false);
        inner.add_gitignore(b"", b"out/\n");
        let mut outer = RepositoryRules::new(TrackedPaths::default(), false);
        outer.add_nested(b"vendor/lib", inner);
        let current = ClassificationSnapshot::of_repository(outer);
        let proposed = [
            entry("lib.c", EntryKind::File),
            entry("out/gen.c", EntryKind::File),
            entry("new.c", EntryKind::File),
        ];
        let made: Vec<Vec<u8>> = made_tracked(&current, b"vendor/lib", &proposed)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(made, vec![b"vendor/lib/out/gen.c".to_vec()]);
        let world = objects(&[(Backing::Isolated, "vendor/lib/out/gen.c", ObjectKind::File)]);
        let r = admit(&current, b"vendor/lib", &proposed, |b, p| {
            world.get(&(b, p.to_vec())).copied()
        });
        assert_eq!(
            r,
            Err(IsolatedOnly {
                path: b"vendor/lib/out/gen.c".to_vec()
            })
        );
    }

    #[test]
    fn an_isolated_directory_is_never_made_tracked_by_an_entry_below_it() {
        // `git update-index --add --cacheinfo ... node_modules/zz`: no
        // object of the entry anywhere, but `node_modules` would become
        // host-backed and hide the isolated tree.
        let current = snapshot(&[]);
        let proposed = [entry("node_modules/zz", EntryKind::File)];
        let world = objects(&[(Backing::Isolated, "node_modules", ObjectKind::Directory)]);
        assert_eq!(
            check(&current, &proposed, &world),
            Err(IsolatedOnly {
                path: b"node_modules".to_vec()
            })
        );
        let both = objects(&[
            (Backing::Isolated, "node_modules", ObjectKind::Directory),
            (Backing::Host, "node_modules", ObjectKind::Directory),
        ]);
        assert_eq!(check(&current, &proposed, &both), Ok(()));
    }

    #[test]
    fn ordinary_commits_look_at_no_object() {
        let current = snapshot(&["src/a.rs"]);
        let proposed = [
            entry("src/a.rs", EntryKind::File),
            entry("src/b.rs", EntryKind::File),
            entry("keep.log", EntryKind::File),
        ];
        let r = admit(&current, b"", &proposed, |b, p| {
            panic!("looked at {b:?} {}", String::from_utf8_lossy(p))
        });
        assert_eq!(r, Ok(()));
    }
}
