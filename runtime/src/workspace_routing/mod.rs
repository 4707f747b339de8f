//! Which backing each workspace path routes to (spec 3.5, "Ignored Workspace
//! State routing contract"; SR-13): the canonical Agent Workspace for tracked
//! and ordinary non-ignored paths, the Domain's Ignored Workspace State for
//! ignored untracked ones.
//!
//! A [`ClassificationSnapshot`] is immutable: it is built whole from the
//! repository's inputs (ignore files, index, `core.ignoreCase`, nested
//! repositories) read by the effects layer, and a changed input publishes a
//! new snapshot, never an edit of this one (spec 3.5: "There is no partially
//! updated matcher").
//!
//! Classification of a path follows Git's own walk (`dir.c`), component by
//! component from the repository root:
//! - a directory is excluded when the patterns that apply at its level match
//!   it; nothing below an excluded directory can be re-included (Git reads no
//!   `.gitignore` there and never looks at a negation below it);
//! - at each level the deepest `.gitignore` with a matching line decides,
//!   then `info/exclude`, then the global excludes file; within one source
//!   the last matching line decides, and a negation decides "not ignored";
//! - a tracked path (an index entry, or a directory holding one) is never
//!   ignored, whatever the patterns say, but an excluded directory still
//!   excludes its untracked children;
//! - a nested repository (a directory below the root with its own `.git`,
//!   including a submodule) is classified by its own rules below its root;
//!   its root directory is classified by the enclosing repository, and an
//!   untracked one inside an excluded directory is excluded whole.
//!
//! A `.git` entry is never matched against ignore rules (Git never does): at
//! a repository's root it is that repository's git directory, host-backed;
//! anywhere else the host had no repository at load, so it is the
//! sandbox's and isolated, with everything below it.
//!
//! Paths are bytes (non-UTF-8 names are opaque); components are non-empty and
//! hold neither NUL nor `/`.

pub mod index_admission;
pub mod operations;
pub mod patterns;
pub mod tracked;

use gix_glob::pattern::Case;
use patterns::{MatchedRule, PatternList, PatternSource};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;
use tracked::{ObjectFormat, TrackedPaths};

/// Deepest path accepted, in components (Linux `PATH_MAX` is 4096 bytes, so
/// no real path is deeper than 2048).
pub const MAX_DEPTH: usize = 2048;
/// Deepest nesting of repositories inside repositories.
pub const MAX_NESTED_DEPTH: usize = 16;

/// One of the two backings of the workspace tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// The canonical Agent Workspace on the host.
    Host,
    /// The Domain's Ignored Workspace State.
    Isolated,
}

/// Why a path routes where it does (what `lazaret` shows when asked, like
/// `git check-ignore -v`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// An index entry, or a directory holding one: host-backed.
    Tracked,
    /// Matched by an ignore line: isolated.
    Ignored(MatchedRule),
    /// Below a directory (repository-relative `directory`) that a line
    /// excludes: isolated, whatever the lines below say.
    InExcludedDirectory {
        /// The excluded directory, as a path from the workspace root.
        directory: Vec<u8>,
        /// The line that excluded it.
        rule: MatchedRule,
    },
    /// A negation line matched last: host-backed.
    Negated(MatchedRule),
    /// No line matches: host-backed.
    Unmatched,
    /// The `.git` of the workspace's repository or of a repository the host
    /// had at load (a nested one, a submodule), or a path inside it:
    /// host-backed, under the Git Sentry. Git never matches `.git` against
    /// ignore rules.
    GitDirectory,
    /// A `.git` (directory or file) where the host had no repository at
    /// load — one the sandbox made (`git init`, `git clone`, a planted
    /// `gitdir:` file) — or a path inside it: isolated, so host Git never
    /// sees a repository the sandbox chose (spec 3.5, SR-4).
    SandboxGitDirectory {
        /// The `.git` entry, as a path from the workspace root.
        entry: Vec<u8>,
    },
    /// An untracked `HEAD` the host did not have when the snapshot was read
    /// (one the sandbox made: `git init --bare`, or by hand), its
    /// `HEAD.lock`, or a path below either: isolated. A `HEAD` beside `objects/` and `refs/` makes its
    /// directory a bare repository to host Git started there, which then
    /// reads that directory's `config` — a `core.fsmonitor`, a
    /// `core.worktree` — as the repository's; the host never sees the
    /// `HEAD`, so never the repository (spec 3.5, SR-4).
    SandboxRepositoryHead {
        /// The `HEAD` entry, as a path from the workspace root.
        entry: Vec<u8>,
    },
}

/// A classified path: its backing, why, and which repository decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Where the path's operations go.
    pub backing: Backing,
    /// What decided it.
    pub decision: Decision,
    /// The root of the repository whose rules decided, as a path from the
    /// workspace root (empty for the workspace's own repository).
    pub repository: Vec<u8>,
}

/// A path the classification refuses.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PathError {
    /// An empty component (`a//b`, a leading or trailing `/`) or the empty
    /// path.
    #[error("the path has an empty component")]
    EmptyComponent,
    /// A NUL byte.
    #[error("the path holds a NUL byte")]
    Nul,
    /// `.` or `..`: routing is on canonical paths only.
    #[error("the path has a `.` or `..` component")]
    DotComponent,
    /// Deeper than [`MAX_DEPTH`].
    #[error("the path is deeper than {MAX_DEPTH} components")]
    TooDeep,
}

/// The classification inputs of one repository: everything Git consults to
/// tell an ignored path, already read.
#[derive(Clone, Debug)]
pub struct RepositoryRules {
    case: Case,
    global: Option<PatternList>,
    info_exclude: Option<PatternList>,
    /// `.gitignore` lists by the repository-relative directory they sit in.
    per_directory: BTreeMap<Vec<u8>, PatternList>,
    tracked: TrackedPaths,
    /// The object format the index names objects with.
    format: ObjectFormat,
    /// Repositories below this one, by their repository-relative root.
    nested: BTreeMap<Vec<u8>, RepositoryRules>,
    /// Repository-relative paths of the `HEAD` entries the host had.
    host_heads: BTreeSet<Vec<u8>>,
    /// The directories (outside any git directory) those `HEAD`s sit in,
    /// by repository-relative path, and how each is guarded.
    host_head_dirs: BTreeMap<Vec<u8>, operations::HostHeadGuards>,
    /// How its git directory is guarded, when it is a nested one.
    git_guards: Option<operations::NestedGitGuards>,
}

/// The name that makes a directory a (bare) git directory to Git, with
/// `objects/` and `refs/` beside it.
const HEAD: &[u8] = b"HEAD";

impl RepositoryRules {
    /// A repository with `tracked` paths and `core.ignoreCase = ignore_case`,
    /// no ignore files yet.
    pub fn new(tracked: TrackedPaths, ignore_case: bool) -> Self {
        Self {
            case: if ignore_case {
                Case::Fold
            } else {
                Case::Sensitive
            },
            global: None,
            info_exclude: None,
            per_directory: BTreeMap::new(),
            tracked,
            format: ObjectFormat::Sha1,
            nested: BTreeMap::new(),
            host_heads: BTreeSet::new(),
            host_head_dirs: BTreeMap::new(),
            git_guards: None,
        }
    }

    /// How the git directory of this (nested) repository is guarded
    /// ([`operations::may_change`]).
    pub fn set_git_guards(&mut self, guards: operations::NestedGitGuards) {
        self.git_guards = Some(guards);
    }

    /// A `HEAD` entry (any type) the host has at the repository-relative
    /// `path`: host-backed by the usual rules, where one the sandbox makes
    /// is isolated ([`Decision::SandboxRepositoryHead`]).
    pub fn add_host_head(&mut self, path: &[u8]) {
        self.host_heads.insert(path.to_vec());
    }

    /// Whether the host's `HEAD` at the repository-relative `path` is
    /// recorded ([`Self::add_host_head`]).
    pub fn has_host_head(&self, path: &[u8]) -> bool {
        self.host_heads.contains(path)
    }

    /// How the directory at the repository-relative `dir` (the root: empty),
    /// where the host had a `HEAD`, is guarded
    /// ([`operations::may_change`]).
    pub fn add_host_head_directory(&mut self, dir: &[u8], guards: operations::HostHeadGuards) {
        self.host_head_dirs.insert(dir.to_vec(), guards);
    }

    /// The repository's object format (`extensions.objectFormat`; SHA-1
    /// unless set).
    pub fn with_object_format(mut self, format: ObjectFormat) -> Self {
        self.format = format;
        self
    }

    /// The global excludes file's content.
    pub fn with_global_excludes(mut self, bytes: &[u8]) -> Self {
        self.global = Some(PatternList::parse(PatternSource::GlobalExcludes, bytes));
        self
    }

    /// The common directory's `info/exclude` content.
    pub fn with_info_exclude(mut self, bytes: &[u8]) -> Self {
        self.info_exclude = Some(PatternList::parse(PatternSource::InfoExclude, bytes));
        self
    }

    /// The `.gitignore` of the repository-relative `directory` (empty for
    /// the root).
    pub fn add_gitignore(&mut self, directory: &[u8], bytes: &[u8]) {
        let list = PatternList::parse(PatternSource::GitIgnore(directory.to_vec()), bytes);
        self.per_directory.insert(directory.to_vec(), list);
    }

    /// A nested repository whose root is the repository-relative `root`.
    pub fn add_nested(&mut self, root: &[u8], rules: RepositoryRules) {
        self.nested.insert(root.to_vec(), rules);
    }

    /// Whether a nested repository was added at `root`.
    pub fn has_nested(&self, root: &[u8]) -> bool {
        self.nested.contains_key(root)
    }

    /// Whether `core.ignoreCase` is on.
    pub fn ignore_case(&self) -> bool {
        self.case == Case::Fold
    }

    /// Whether the repository-relative directory `directory` is excluded, or
    /// lies below an excluded directory: the effects layer reads no
    /// `.gitignore` and looks for no nested repository there, as Git does not.
    pub fn directory_is_excluded(&self, directory: &[u8]) -> bool {
        let Ok(components) = components(directory) else {
            return false;
        };
        let mut end = 0;
        for (i, c) in components.iter().enumerate() {
            end = if i == 0 { c.len() } else { end + 1 + c.len() };
            let prefix = &directory[..end];
            if self
                .matching(prefix, true)
                .is_some_and(|rule| !rule.negated)
            {
                return true;
            }
        }
        false
    }

    /// The rule deciding `relative` (repository-relative) at its own level:
    /// the deepest `.gitignore` of an ancestor directory with a matching
    /// line, then `info/exclude`, then the global excludes.
    fn matching(&self, relative: &[u8], is_dir: bool) -> Option<MatchedRule> {
        // Ancestor directories of `relative`, deepest first: each `/` ends
        // one, and the repository root comes last.
        let slashes = relative
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| (&relative[..i], &relative[i + 1..]));
        for (directory, rest) in slashes.chain(std::iter::once((&relative[..0], relative))) {
            if let Some(list) = self.per_directory.get(directory) {
                if let Some(rule) = list.last_match(rest, is_dir, self.case) {
                    return Some(rule);
                }
            }
        }
        [&self.info_exclude, &self.global]
            .into_iter()
            .flatten()
            .find_map(|list| list.last_match(relative, is_dir, self.case))
    }
}

/// The complete, immutable classification of one workspace at one moment.
#[derive(Clone, Debug)]
pub struct ClassificationSnapshot {
    /// The workspace's rules: its repository's, or (`repository` false)
    /// those of a tree that is no repository, which hold no ignore file and
    /// no index, only the repositories and `HEAD`s the host had in it.
    root: RepositoryRules,
    /// Whether the workspace is a Git repository.
    repository: bool,
}

impl ClassificationSnapshot {
    /// The snapshot of a workspace whose repository has `rules`.
    pub fn of_repository(rules: RepositoryRules) -> Self {
        Self {
            root: rules,
            repository: true,
        }
    }

    /// The snapshot of a workspace that is no Git repository, with the
    /// repositories and `HEAD`s the host had in it (`rules`, holding no
    /// ignore file and no index): nothing is ignored (Git reads no ignore
    /// file outside a repository), so every path is host-backed, except a
    /// `.git` the sandbox makes (the root's too) and a `HEAD` the host did
    /// not have, and what is below them; inside a repository the host had,
    /// that repository's rules.
    pub fn of_tree_without_repository(rules: RepositoryRules) -> Self {
        Self {
            root: rules,
            repository: false,
        }
    }

    /// [`Self::of_tree_without_repository`] of a tree where the host had
    /// nothing.
    pub fn without_repository() -> Self {
        Self::of_tree_without_repository(RepositoryRules::new(TrackedPaths::default(), false))
    }

    /// Whether the workspace was a Git repository when this was read.
    pub fn has_repository(&self) -> bool {
        self.repository
    }

    /// The rules of the repository whose root is the workspace path
    /// `repository` (empty: the workspace's own, or the tree's), if there
    /// is one.
    fn rules_of(&self, repository: &[u8]) -> Option<&RepositoryRules> {
        let mut rules = &self.root;
        let mut rest = repository;
        // Bounded: each turn descends one nesting level.
        for _ in 0..=MAX_NESTED_DEPTH {
            if rest.is_empty() {
                return Some(rules);
            }
            let (below, inner) = rules.nested.iter().find_map(|(root, inner)| {
                match rest.strip_prefix(root.as_slice())? {
                    [] => Some((&rest[rest.len()..], inner)),
                    [b'/', more @ ..] => Some((more, inner)),
                    _ => None,
                }
            })?;
            rest = below;
            rules = inner;
        }
        None
    }

    /// The object format of the repository at workspace path `repository`
    /// (empty: the workspace's own), if there is one.
    pub fn object_format(&self, repository: &[u8]) -> Option<ObjectFormat> {
        self.rules_of(repository).map(|r| r.format)
    }

    /// Whether the index of the repository at workspace path `repository`
    /// holds `path` (relative to that repository: an entry, or a directory
    /// holding one), by this snapshot.
    pub fn tracks(&self, repository: &[u8], path: &[u8]) -> bool {
        self.rules_of(repository)
            .is_some_and(|r| r.tracked.contains(path))
    }

    /// How the git directory of the nested repository at workspace path
    /// `repository` is guarded (`None`: no such repository, or not known).
    pub fn nested_git_guards(&self, repository: &[u8]) -> Option<&operations::NestedGitGuards> {
        self.rules_of(repository)?.git_guards.as_ref()
    }

    /// Every directory above workspace path `path` (a proper ancestor)
    /// where the host had a `HEAD`, in whichever repository's rules (or the
    /// tree's) recorded it: its workspace path and guards, outermost first.
    pub fn host_head_directories(
        &self,
        path: &[u8],
    ) -> Vec<(Vec<u8>, &operations::HostHeadGuards)> {
        let mut found = Vec::new();
        let mut rules = &self.root;
        // The workspace path of `rules`' repository, and `path` relative to it.
        let mut base: Vec<u8> = Vec::new();
        let mut relative = path;
        // Bounded: each turn descends one nesting level.
        for _ in 0..=MAX_NESTED_DEPTH {
            if relative.is_empty() {
                break;
            }
            let mut ancestors: Vec<&[u8]> = vec![&b""[..]];
            ancestors.extend(
                relative
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'/')
                    .map(|(at, _)| &relative[..at]),
            );
            for dir in ancestors {
                if let Some(g) = rules.host_head_dirs.get(dir) {
                    found.push((joined(&base, dir), g));
                }
            }
            let inner = rules.nested.iter().find_map(|(root, inner)| {
                let rest = relative.strip_prefix(root.as_slice())?.strip_prefix(b"/")?;
                Some((root, inner, rest))
            });
            let Some((root, inner, rest)) = inner else {
                break;
            };
            base = joined(&base, root);
            rules = inner;
            relative = rest;
        }
        found
    }

    /// Whether a directory where the host had a `HEAD` Git accepts lies at
    /// or below workspace path `path` (in any repository).
    pub fn holds_host_git_directory(&self, path: &[u8]) -> bool {
        // (rules, the workspace path of their repository), bounded by
        // MAX_NESTED_DEPTH levels.
        let mut level = vec![(&self.root, Vec::new())];
        for _ in 0..=MAX_NESTED_DEPTH {
            let mut next = Vec::new();
            for (rules, at) in level {
                for (dir, guards) in &rules.host_head_dirs {
                    if matches!(guards, operations::HostHeadGuards::GitDirectory(_))
                        && at_or_below(&joined(&at, dir), path)
                    {
                        return true;
                    }
                }
                for (root, inner) in &rules.nested {
                    next.push((inner, joined(&at, root)));
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
        false
    }

    /// The route of `path` (from the workspace root, `/`-separated bytes);
    /// `is_dir` says whether the path names a directory.
    pub fn classify(&self, path: &[u8], is_dir: bool) -> Result<Route, PathError> {
        let parts = components(path)?;
        let mut rules = &self.root;
        // Offset of the current repository's root in `path` (0, or just
        // after a nested repository's root and its `/`).
        let mut base = 0;
        let mut repository: &[u8] = &path[..0];
        let mut excluded: Option<(usize, MatchedRule)> = None;
        let mut end = 0;
        for (i, part) in parts.iter().enumerate() {
            end = if i == 0 {
                part.len()
            } else {
                end + 1 + part.len()
            };
            let last = i + 1 == parts.len();
            let dir = !last || is_dir;
            let relative = &path[base..end];
            // Any spelling: on a file system that folds case, `.GIT` is the
            // host's `.git`, beside the Git Sentry's mount of it.
            if part.eq_ignore_ascii_case(b".git") {
                // At a repository's root (the workspace's, or a nested one
                // found on the host) it is that repository's git directory,
                // by its own name only. Anywhere else the host had no
                // repository: the sandbox's.
                let at_root = relative == b".git" && (self.repository || base > 0);
                return Ok(if at_root && excluded.is_none() {
                    host(Decision::GitDirectory, repository.to_vec())
                } else {
                    isolated(
                        Decision::SandboxGitDirectory {
                            entry: path[..end].to_vec(),
                        },
                        repository.to_vec(),
                    )
                });
            }
            let tracked = rules.tracked.contains(relative);
            // `HEAD.lock` goes where its `HEAD` goes: Git writes `HEAD` by
            // renaming it.
            let head = if names_head(part, rules.case) {
                Some(relative)
            } else {
                match part
                    .len()
                    .checked_sub(LOCK.len())
                    .map(|at| part.split_at(at))
                {
                    Some((stem, lock))
                        if names_head(stem, rules.case) && same_name(lock, LOCK, rules.case) =>
                    {
                        Some(&relative[..relative.len() - LOCK.len()])
                    }
                    _ => None,
                }
            };
            // A lock goes where its `HEAD` goes: tracked when the `HEAD` is.
            // A tracked `HEAD` the host does not have is the sandbox's too: made
            // on the host, it would complete a repository host Git uses.
            if head.is_some_and(|head| !rules.host_heads.contains(head)) {
                return Ok(isolated(
                    Decision::SandboxRepositoryHead {
                        entry: path[..end].to_vec(),
                    },
                    repository.to_vec(),
                ));
            }
            let rule = match excluded {
                Some(_) => None,
                None => rules.matching(relative, dir),
            };
            if last {
                return Ok(if tracked {
                    host(Decision::Tracked, repository.to_vec())
                } else if let Some((at, rule)) = excluded {
                    isolated(
                        Decision::InExcludedDirectory {
                            directory: path[..at].to_vec(),
                            rule,
                        },
                        repository.to_vec(),
                    )
                } else {
                    match rule {
                        Some(rule) if rule.negated => {
                            host(Decision::Negated(rule), repository.to_vec())
                        }
                        Some(rule) => isolated(Decision::Ignored(rule), repository.to_vec()),
                        None => host(Decision::Unmatched, repository.to_vec()),
                    }
                });
            }
            match rule {
                Some(rule) if !rule.negated => excluded = Some((end, rule)),
                _ => {}
            }
            // A nested repository's own rules apply below its root, unless
            // the enclosing repository excludes it (Git never looks inside an
            // excluded untracked directory); a submodule (tracked gitlink) is
            // the submodule's even inside an excluded directory.
            if excluded.is_none() || tracked {
                if let Some(inner) = rules.nested.get(relative) {
                    rules = inner;
                    repository = &path[..end];
                    base = end + 1;
                    excluded = None;
                }
            }
        }
        // `components` never returns an empty list.
        Err(PathError::EmptyComponent)
    }
}

/// The suffix of Git's lock files.
const LOCK: &[u8] = b".lock";

/// Whether `name` and `other` name the same entry in a repository whose
/// `core.ignoreCase` says `case` (Git sets it where the file system folds
/// ASCII case).
fn same_name(name: &[u8], other: &[u8], case: Case) -> bool {
    match case {
        Case::Fold => name.eq_ignore_ascii_case(other),
        Case::Sensitive => name == other,
    }
}

/// Whether `name` is `HEAD` to such a repository.
fn names_head(name: &[u8], case: Case) -> bool {
    same_name(name, HEAD, case)
}

/// Workspace path `base` joined with the path `rest` relative to it.
pub(crate) fn joined(base: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut full = base.to_vec();
    if !full.is_empty() && !rest.is_empty() {
        full.push(b'/');
    }
    full.extend_from_slice(rest);
    full
}

/// Whether workspace path `candidate` is `path` or lies below it.
fn at_or_below(candidate: &[u8], path: &[u8]) -> bool {
    path.is_empty()
        || candidate
            .strip_prefix(path)
            .is_some_and(|rest| rest.is_empty() || rest.first() == Some(&b'/'))
}

fn host(decision: Decision, repository: Vec<u8>) -> Route {
    Route {
        backing: Backing::Host,
        decision,
        repository,
    }
}

fn isolated(decision: Decision, repository: Vec<u8>) -> Route {
    Route {
        backing: Backing::Isolated,
        decision,
        repository,
    }
}

/// The components of a workspace-relative path, checked.
fn components(path: &[u8]) -> Result<Vec<&[u8]>, PathError> {
    if path.contains(&0) {
        return Err(PathError::Nul);
    }
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    if parts.len() > MAX_DEPTH {
        return Err(PathError::TooDeep);
    }
    for part in &parts {
        match *part {
            b"" => return Err(PathError::EmptyComponent),
            b"." | b".." => return Err(PathError::DotComponent),
            _ => {}
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests;
