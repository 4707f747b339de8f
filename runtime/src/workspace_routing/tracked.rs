//! The tracked-index state of one repository (spec 3.5: classification uses
//! "tracked-index state"): which paths the index holds, and which directories
//! hold index entries. A tracked path is host-backed whatever the ignore
//! rules say, as Git never treats a tracked file as ignored.
//!
//! The index is decoded by gitoxide (`gix-index`: versions 2 to 4, SHA-1 and
//! SHA-256, sparse directory entries); this module keeps only the paths.

use thiserror::Error;

/// Largest index accepted (bytes). Git's own indexes of the largest public
/// monorepos are a few hundred MiB; beyond this the classification refuses.
pub const MAX_INDEX_BYTES: usize = 512 * 1024 * 1024;

/// The object format an index names its objects with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectFormat {
    /// SHA-1, Git's default.
    Sha1,
    /// SHA-256 (`extensions.objectFormat = sha256`).
    Sha256,
}

/// Why an index could not be read.
#[derive(Debug, Error)]
pub enum IndexError {
    /// Larger than [`MAX_INDEX_BYTES`].
    #[error("the index is {bytes} bytes, more than the {MAX_INDEX_BYTES} accepted")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not an index gitoxide can decode.
    #[error("the index cannot be decoded")]
    Decode(#[source] gix_error::Error),
    /// A split index (`core.splitIndex`): its entries live in a shared index
    /// file this decoder does not follow.
    #[error(
        "the index is split (core.splitIndex); run `git update-index --no-split-index` on the host"
    )]
    Split,
}

/// The paths of one index, sorted bytewise, with a case-folded copy when the
/// repository ignores case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackedPaths {
    /// Entry paths (a sparse directory entry without its trailing `/`).
    paths: Vec<Vec<u8>>,
    /// The same paths ASCII-lowercased and sorted (only with `core.ignoreCase`).
    folded: Option<Vec<Vec<u8>>>,
    /// Gitlink entries (submodules): nested repositories the index names.
    gitlinks: Vec<Vec<u8>>,
}

impl TrackedPaths {
    /// The paths of `paths` (any order, duplicates allowed: a conflicted path
    /// has one entry per stage).
    pub fn from_paths(paths: impl IntoIterator<Item = Vec<u8>>, ignore_case: bool) -> Self {
        let mut paths: Vec<Vec<u8>> = paths.into_iter().collect();
        paths.sort_unstable();
        paths.dedup();
        let folded = ignore_case.then(|| {
            let mut f: Vec<Vec<u8>> = paths.iter().map(|p| p.to_ascii_lowercase()).collect();
            f.sort_unstable();
            f.dedup();
            f
        });
        Self {
            paths,
            folded,
            gitlinks: Vec::new(),
        }
    }

    /// Decode the index file's bytes.
    pub fn from_index_bytes(
        bytes: &[u8],
        format: ObjectFormat,
        ignore_case: bool,
    ) -> Result<Self, IndexError> {
        let state = decode(bytes, format)?;
        let paths = state.entries().iter().map(|entry| {
            let path: &[u8] = entry.path(&state);
            path.strip_suffix(b"/").unwrap_or(path).to_vec()
        });
        let mut tracked = Self::from_paths(paths, ignore_case);
        tracked.gitlinks = state
            .entries()
            .iter()
            .filter(|entry| entry.mode == gix_index::entry::Mode::COMMIT)
            .map(|entry| entry.path(&state).to_vec())
            .collect();
        tracked.gitlinks.dedup();
        Ok(tracked)
    }

    /// How many distinct paths the index holds.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The gitlink entries (submodule roots), sorted.
    pub fn gitlinks(&self) -> &[Vec<u8>] {
        &self.gitlinks
    }

    /// The tracked paths named `HEAD` in any spelling — entries, and
    /// directories holding one — in bytewise order, each once: where a
    /// tracked bare repository (a test fixture) may be, also inside a
    /// directory the rules exclude, which no walk looks into.
    pub fn heads(&self) -> std::collections::BTreeSet<&[u8]> {
        let mut heads = std::collections::BTreeSet::new();
        for path in &self.paths {
            let mut end = 0;
            for (i, part) in path.split(|b| *b == b'/').enumerate() {
                end = if i == 0 {
                    part.len()
                } else {
                    end + 1 + part.len()
                };
                if part.eq_ignore_ascii_case(b"HEAD") {
                    heads.insert(&path[..end]);
                }
            }
        }
        heads
    }

    /// Whether `path` is an index entry, or a directory holding one.
    pub fn contains(&self, path: &[u8]) -> bool {
        match &self.folded {
            Some(folded) => holds(folded, &path.to_ascii_lowercase()),
            None => holds(&self.paths, path),
        }
    }
}

/// What kind of worktree object an index entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (mode 100644 or 100755).
    File,
    /// A symbolic link (mode 120000).
    Symlink,
    /// A gitlink (mode 160000): a submodule's working tree, a directory.
    Gitlink,
    /// A sparse directory entry: a directory.
    Directory,
}

/// One entry of an index: its path (a sparse directory without its
/// trailing `/`) and the kind of object it records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// The path from the repository's root.
    pub path: Vec<u8>,
    /// The kind of worktree object.
    pub kind: EntryKind,
}

/// The entries of the index file's bytes, in index order, each path once
/// (a conflicted path has one entry per stage; the first is kept).
pub fn index_entries(bytes: &[u8], format: ObjectFormat) -> Result<Vec<IndexEntry>, IndexError> {
    let state = decode(bytes, format)?;
    let mut out: Vec<IndexEntry> = Vec::with_capacity(state.entries().len());
    for entry in state.entries() {
        let path: &[u8] = entry.path(&state);
        let kind = if entry.mode == gix_index::entry::Mode::COMMIT {
            EntryKind::Gitlink
        } else if entry.mode == gix_index::entry::Mode::SYMLINK {
            EntryKind::Symlink
        } else if entry.mode == gix_index::entry::Mode::DIR {
            EntryKind::Directory
        } else {
            EntryKind::File
        };
        let path = path.strip_suffix(b"/").unwrap_or(path);
        // Stages of one path are adjacent in an index.
        if out.last().is_some_and(|last| last.path == path) {
            continue;
        }
        out.push(IndexEntry {
            path: path.to_vec(),
            kind,
        });
    }
    Ok(out)
}

/// The decoded index, bounded by [`MAX_INDEX_BYTES`]; a split index is
/// refused.
fn decode(bytes: &[u8], format: ObjectFormat) -> Result<gix_index::State, IndexError> {
    if bytes.len() > MAX_INDEX_BYTES {
        return Err(IndexError::TooLarge { bytes: bytes.len() });
    }
    let kind = match format {
        ObjectFormat::Sha1 => gix_index::hash::Kind::Sha1,
        ObjectFormat::Sha256 => gix_index::hash::Kind::Sha256,
    };
    let options = gix_index::decode::Options {
        // Pure: no threads of our own in the core.
        thread_limit: Some(1),
        alloc_limit_bytes: Some(MAX_INDEX_BYTES),
        ..Default::default()
    };
    let (state, _checksum) =
        gix_index::State::from_bytes(bytes, filetime::FileTime::zero(), kind, options)
            .map_err(IndexError::Decode)?;
    if state.link().is_some() {
        return Err(IndexError::Split);
    }
    Ok(state)
}

/// `path` is in the sorted `paths`, or some entry lies under `path/`.
fn holds(paths: &[Vec<u8>], path: &[u8]) -> bool {
    let at = paths.partition_point(|p| p.as_slice() < path);
    if paths.get(at).is_some_and(|p| p == path) {
        return true;
    }
    // Entries under `path/` sort together, from the first one ≥ `path/`.
    let mut dir = Vec::with_capacity(path.len() + 1);
    dir.extend_from_slice(path);
    dir.push(b'/');
    let at = paths.partition_point(|p| p.as_slice() < dir.as_slice());
    paths.get(at).is_some_and(|p| p.starts_with(&dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked(paths: &[&str], ignore_case: bool) -> TrackedPaths {
        TrackedPaths::from_paths(paths.iter().map(|p| p.as_bytes().to_vec()), ignore_case)
    }

    #[test]
    fn entries_and_the_directories_holding_them_are_tracked() {
        let t = tracked(&["a/b/c.txt", "a/b-c", "z"], false);
        for yes in ["a", "a/b", "a/b/c.txt", "a/b-c", "z"] {
            assert!(t.contains(yes.as_bytes()), "{yes}");
        }
        // `a/b.` sorts between `a/b-c` and `a/b/`: not a directory prefix.
        for no in ["a/b/c", "a/b.", "a/bc", "b", "a/b/c.txt/d", ""] {
            assert!(!t.contains(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn ignore_case_folds_ascii_only() {
        let t = tracked(&["Src/Main.rs", "\u{c9}t\u{e9}"], true);
        assert!(t.contains(b"src/main.rs"));
        assert!(t.contains(b"SRC"));
        assert!(t.contains("\u{c9}T\u{e9}".as_bytes()));
        assert!(!t.contains("\u{e9}t\u{e9}".as_bytes()));
        assert!(!tracked(&["Src/Main.rs"], false).contains(b"src"));
    }

    #[test]
    fn garbage_is_a_decode_error_not_a_panic() {
        let r = TrackedPaths::from_index_bytes(b"DIRC\0\0\0\x02garbage", ObjectFormat::Sha1, false);
        assert!(matches!(r, Err(IndexError::Decode(_))), "{r:?}");
        let r = TrackedPaths::from_index_bytes(b"", ObjectFormat::Sha1, false);
        assert!(matches!(r, Err(IndexError::Decode(_))), "{r:?}");
    }
}
