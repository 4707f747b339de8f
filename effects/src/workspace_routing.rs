//! Reading a workspace's classification inputs (spec 3.5, "Ignored Workspace
//! State routing contract"): the repository's index, ignore files,
//! `core.ignoreCase`, global excludes and nested repositories, read from the
//! host and handed to the pure
//! [`ClassificationSnapshot`](lazaret_runtime::workspace_routing) whole.
//!
//! The walk is Git's: every directory that is not excluded is visited for its
//! `.gitignore` and for nested repositories; an excluded directory is not
//! entered. A `.gitignore` that is a symbolic link is not read (Git refuses to
//! follow one since 2.32). Configuration values come from the host's own
//! `git config` with the git directory named explicitly, so system, global
//! and include files mean what they mean to host Git; reading configuration
//! runs no hook and no filesystem monitor.

use crate::broker::transient::{self, Limits as RunLimits, TransientError};
use lazaret_runtime::display::escape_path;
use lazaret_runtime::git_sentry::{git_accepts_head, MAX_HEAD_BYTES};
use lazaret_runtime::workspace_routing::operations::{HostHeadGuards, NestedGitGuards};
use lazaret_runtime::workspace_routing::tracked::{
    IndexError, ObjectFormat, TrackedPaths, MAX_INDEX_BYTES,
};
use lazaret_runtime::workspace_routing::{
    ClassificationSnapshot, RepositoryRules, MAX_NESTED_DEPTH,
};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest ignore file read (bytes).
pub const MAX_IGNORE_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Most directory entries the walk looks at over all repositories.
pub const MAX_WALK_ENTRIES: usize = 2_000_000;
/// Time one `git config` query may take.
const GIT_CONFIG_LIMIT: Duration = Duration::from_secs(10);

/// Why the classification inputs could not be read; one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum RoutingInputError {
    /// A file or directory could not be inspected or read.
    #[error("cannot read {}: {source}", escape_path(.path))]
    Read { path: PathBuf, source: io::Error },
    /// An ignore file is larger than [`MAX_IGNORE_FILE_BYTES`].
    #[error("{} is larger than {MAX_IGNORE_FILE_BYTES} bytes", escape_path(.path))]
    IgnoreFileTooLarge { path: PathBuf },
    /// The index could not be decoded.
    #[error("cannot read the Git index {}", escape_path(.path))]
    Index {
        path: PathBuf,
        #[source]
        source: IndexError,
    },
    /// Host `git config` failed to run.
    #[error("cannot ask host git for {key} of {}", escape_path(.git_dir))]
    GitConfig {
        key: &'static str,
        git_dir: PathBuf,
        #[source]
        source: TransientError,
    },
    /// Host `git config` refused the value.
    #[error("host git rejects {key} of {}: {stderr}", escape_path(.git_dir))]
    GitConfigValue {
        key: &'static str,
        git_dir: PathBuf,
        stderr: String,
    },
    /// `extensions.objectFormat` names a format Git does not have.
    #[error("{} names object format {value:?}; Git knows sha1 and sha256", escape_path(.git_dir))]
    ObjectFormat { git_dir: PathBuf, value: String },
    /// The `.git` file of the workspace does not name a git directory.
    #[error("{} does not start with `gitdir: <path>`", escape_path(.path))]
    GitFile { path: PathBuf },
    /// More directory entries than [`MAX_WALK_ENTRIES`].
    #[error("the workspace has more than {MAX_WALK_ENTRIES} entries outside ignored directories")]
    TooManyEntries,
}

/// The git directory and common directory of a working tree's `.git`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitDirs {
    /// The per-worktree git directory (index, `HEAD`).
    pub git_dir: PathBuf,
    /// The common directory (`info/exclude`, objects, refs).
    pub common_dir: PathBuf,
}

/// The classification snapshot of the workspace `workspace` now.
pub fn read_snapshot(workspace: &Path) -> Result<ClassificationSnapshot, RoutingInputError> {
    read_snapshot_and_inputs(workspace).map(|(snapshot, _)| snapshot)
}

/// The files a snapshot was read from, to tell when it is out of date: each
/// repository's index and configuration, `info/exclude`, the global excludes
/// file and user configuration, and the `.gitignore` of every directory the
/// walk visited — present or not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInputs {
    paths: Vec<PathBuf>,
}

/// What [`SnapshotInputs::fingerprint`] records of one input: device,
/// inode, size and modification time, or nothing when it is absent.
pub type InputState = Option<(u64, u64, u64, i64, i64)>;

impl SnapshotInputs {
    /// How many files are watched.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether nothing is watched (a workspace without a repository).
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The state of every input now (`lstat`, never following a link).
    pub fn fingerprint(&self) -> Vec<InputState> {
        use std::os::unix::fs::MetadataExt as _;
        self.paths
            .iter()
            .map(|p| {
                fs::symlink_metadata(p)
                    .ok()
                    .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
            })
            .collect()
    }
}

/// [`read_snapshot`], with the inputs it was read from.
pub fn read_snapshot_and_inputs(
    workspace: &Path,
) -> Result<(ClassificationSnapshot, SnapshotInputs), RoutingInputError> {
    let mut inputs = SnapshotInputs::default();
    // A `.git` appearing at the root makes it a repository.
    inputs.paths.push(workspace.join(".git"));
    let mut budget = MAX_WALK_ENTRIES;
    let Some(dirs) = repository_dirs(workspace)? else {
        // No ignore file applies, but the repositories and `HEAD`s the host
        // has in the tree are found as in a repository (spec 3.5, SR-4: a
        // folder of projects).
        let mut rules = RepositoryRules::new(TrackedPaths::default(), false);
        walk(
            workspace,
            &mut rules,
            Ignores::Skipped,
            0,
            &mut budget,
            &mut inputs.paths,
        )?;
        return Ok((
            ClassificationSnapshot::of_tree_without_repository(rules),
            inputs,
        ));
    };
    for user_config in user_config_files() {
        inputs.paths.push(user_config);
    }
    let rules = read_repository(workspace, &dirs, 0, &mut budget, &mut inputs.paths)?;
    Ok((ClassificationSnapshot::of_repository(rules), inputs))
}

/// The user's Git configuration files host Git reads `core.excludesFile` and
/// `core.ignoreCase` from.
fn user_config_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(home) = std::env::var_os("HOME") {
        out.push(Path::new(&home).join(".gitconfig"));
        out.push(Path::new(&home).join(".config/git/config"));
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        out.push(Path::new(&xdg).join("git/config"));
    }
    out
}

/// The git directories of the working tree at `root`, if it is one as Git
/// sees it (`is_nonbare_repository_dir`): `.git` is a directory, or a file
/// `gitdir: <path>`, naming a git directory with `HEAD`, `objects/` and
/// `refs/`.
pub fn repository_dirs(root: &Path) -> Result<Option<GitDirs>, RoutingInputError> {
    let dot_git = root.join(".git");
    let Some(meta) = lstat(&dot_git)? else {
        return Ok(None);
    };
    let git_dir = if meta.is_dir() {
        dot_git
    } else if meta.is_file() {
        let text = read_bounded(&dot_git, 64 * 1024)?;
        let target = text
            .split(|b| *b == b'\n')
            .next()
            .and_then(|l| l.strip_prefix(b"gitdir:"))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RoutingInputError::GitFile {
                path: dot_git.clone(),
            })?;
        root.join(OsStr::from_bytes(target))
    } else {
        return Ok(None);
    };
    let common_dir = match read_optional(&git_dir.join("commondir"), 64 * 1024)? {
        Some(text) => git_dir.join(OsStr::from_bytes(text.trim_ascii_end())),
        None => git_dir.clone(),
    };
    let head = read_optional(&git_dir.join("HEAD"), 4096)?;
    // Exactly Git's rule: a HEAD Git accepts makes a repository, whatever
    // its form.
    let valid_head = head.is_some_and(|h| git_accepts_head(&h));
    let is_dir = |p: PathBuf| fs::metadata(p).is_ok_and(|m| m.is_dir());
    if valid_head && is_dir(common_dir.join("objects")) && is_dir(common_dir.join("refs")) {
        Ok(Some(GitDirs {
            git_dir,
            common_dir,
        }))
    } else {
        Ok(None)
    }
}

fn read_repository(
    root: &Path,
    dirs: &GitDirs,
    nesting: usize,
    budget: &mut usize,
    watched: &mut Vec<PathBuf>,
) -> Result<RepositoryRules, RoutingInputError> {
    watched.push(dirs.git_dir.join("index"));
    watched.push(dirs.git_dir.join("config"));
    watched.push(dirs.common_dir.join("config"));
    watched.push(dirs.common_dir.join("info").join("exclude"));
    let ignore_case =
        git_config(&dirs.git_dir, "core.ignorecase", "bool")?.is_some_and(|v| v == b"true");
    let format = match git_config(&dirs.git_dir, "extensions.objectformat", "")? {
        None => ObjectFormat::Sha1,
        Some(v) if v.eq_ignore_ascii_case(b"sha1") => ObjectFormat::Sha1,
        Some(v) if v.eq_ignore_ascii_case(b"sha256") => ObjectFormat::Sha256,
        Some(v) => {
            return Err(RoutingInputError::ObjectFormat {
                git_dir: dirs.git_dir.clone(),
                value: String::from_utf8_lossy(&v).into_owned(),
            })
        }
    };
    let index_path = dirs.git_dir.join("index");
    let index_limit = u64::try_from(MAX_INDEX_BYTES)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let tracked = match read_optional(&index_path, index_limit)? {
        None => TrackedPaths::from_paths(Vec::new(), ignore_case),
        Some(bytes) => {
            TrackedPaths::from_index_bytes(&bytes, format, ignore_case).map_err(|source| {
                RoutingInputError::Index {
                    path: index_path.clone(),
                    source,
                }
            })?
        }
    };
    let gitlinks = tracked.gitlinks().to_vec();
    let tracked_heads: Vec<Vec<u8>> = tracked.heads().into_iter().map(<[u8]>::to_vec).collect();
    let mut rules = RepositoryRules::new(tracked, ignore_case).with_object_format(format);
    if let Some(file) = global_excludes(&dirs.git_dir)? {
        watched.push(file.clone());
        if let Some(bytes) = read_ignore_file(&file)? {
            rules = rules.with_global_excludes(&bytes);
        }
    }
    if let Some(bytes) = read_ignore_file(&dirs.common_dir.join("info").join("exclude"))? {
        rules = rules.with_info_exclude(&bytes);
    }
    if nesting > 0 {
        rules.set_git_guards(nested_git_guards(root, dirs));
    }
    walk(root, &mut rules, Ignores::Read, nesting, budget, watched)?;
    // Tracked `HEAD`s the walk did not reach (inside an excluded directory):
    // a tracked bare repository there is as much the host's.
    for head in tracked_heads {
        if rules.has_host_head(&head) {
            continue;
        }
        let path = root.join(OsStr::from_bytes(&head));
        let Some(meta) = lstat(&path).or_else(|e| unread(e, &path))? else {
            continue;
        };
        let dir = head
            .iter()
            .rposition(|b| *b == b'/')
            .map_or(&head[..0], |at| &head[..at]);
        let guards = host_head_guards(path.parent().unwrap_or(root), &path, meta.file_type());
        rules.add_host_head(&head);
        rules.add_host_head_directory(dir, guards);
    }
    // Submodules the walk did not reach (inside an excluded directory).
    for link in gitlinks {
        let sub_root = root.join(OsStr::from_bytes(&link));
        if nesting < MAX_NESTED_DEPTH && !rules.has_nested(&link) {
            if let Some(sub) = repository_dirs(&sub_root)? {
                let inner = read_repository(&sub_root, &sub, nesting + 1, budget, watched)?;
                rules.add_nested(&link, inner);
            }
        }
    }
    Ok(rules)
}

/// How the router guards the git directory of the repository the host had
/// at `root`, inside the workspace (spec 3.5, SR-4): by the Git Sentry's
/// layout of its `.git` directory. A `.git` file names a git directory
/// elsewhere (a submodule's, under the workspace's own `.git`, which the
/// Git Sentry filter serves), and a layout that cannot be read leaves
/// nothing in it changeable.
fn nested_git_guards(root: &Path, dirs: &GitDirs) -> NestedGitGuards {
    let dot_git = root.join(".git");
    if dirs.git_dir != dot_git || dirs.common_dir != dot_git {
        return NestedGitGuards::ReadOnly;
    }
    match crate::git_sentry::filter::scan_layout(&dot_git) {
        Ok(layout) => NestedGitGuards::Layout(layout),
        Err(e) => {
            tracing::warn!(error = %e, "a nested repository's git directory is read-only to the sandbox");
            NestedGitGuards::ReadOnly
        }
    }
}

/// How the router guards `dir`, a directory of a working tree where the
/// host has the `HEAD` entry `head` of type `file_type` (spec 3.5, SR-4):
/// as a bare repository's git directory when Git would accept the `HEAD`
/// (a symbolic link is taken as one it accepts), else by keeping the `HEAD`
/// as it is.
fn host_head_guards(dir: &Path, head: &Path, file_type: fs::FileType) -> HostHeadGuards {
    let accepted = if file_type.is_symlink() {
        true
    } else if file_type.is_file() {
        let limit = u64::try_from(MAX_HEAD_BYTES).unwrap_or(u64::MAX);
        // One Git cannot read is one it does not accept.
        read_optional(head, limit)
            .ok()
            .flatten()
            .is_some_and(|content| git_accepts_head(&content))
    } else {
        false
    };
    if !accepted {
        return HostHeadGuards::FrozenHead;
    }
    HostHeadGuards::GitDirectory(match crate::git_sentry::filter::scan_layout(dir) {
        Ok(layout) => NestedGitGuards::Layout(layout),
        Err(e) => {
            tracing::warn!(error = %e, path = %dir.display(), "a directory the host's HEAD makes a git directory is read-only to the sandbox");
            NestedGitGuards::ReadOnly
        }
    })
}

/// How the walk takes `e`, met reading the repository at `root` below the
/// one walked: the walk's bound is an error, anything else leaves that
/// repository unread (logged).
fn unread<T: Default>(e: RoutingInputError, root: &Path) -> Result<T, RoutingInputError> {
    match e {
        RoutingInputError::TooManyEntries => Err(e),
        other => {
            tracing::warn!(error = %other, path = %root.display(), "a repository in the workspace could not be read; its git directory is hidden from the sandbox");
            Ok(T::default())
        }
    }
}

/// Whether a walk reads `.gitignore` files: in a repository's working
/// tree, not in a tree that is no repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ignores {
    Read,
    Skipped,
}

/// Visits every directory of the working tree at `root` that Git would,
/// breadth first (a directory's `.gitignore` is read before anything below
/// it is judged).
fn walk(
    root: &Path,
    rules: &mut RepositoryRules,
    ignores: Ignores,
    nesting: usize,
    budget: &mut usize,
    watched: &mut Vec<PathBuf>,
) -> Result<(), RoutingInputError> {
    let mut queue: VecDeque<Vec<u8>> = VecDeque::from([Vec::new()]);
    while let Some(relative) = queue.pop_front() {
        let dir = if relative.is_empty() {
            root.to_owned()
        } else {
            root.join(OsStr::from_bytes(&relative))
        };
        if ignores == Ignores::Read {
            let gitignore = dir.join(".gitignore");
            if let Some(bytes) = read_ignore_file(&gitignore)? {
                rules.add_gitignore(&relative, &bytes);
            }
            watched.push(gitignore);
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            // Git skips a directory it cannot read ("could not open
            // directory"); so does the router, which cannot serve it
            // either. One removed while the walk ran has nothing to find.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound
                ) =>
            {
                tracing::debug!(path = %dir.display(), error = %e, "a directory is not looked inside");
                continue;
            }
            Err(source) => {
                return Err(RoutingInputError::Read {
                    path: dir.clone(),
                    source,
                })
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| RoutingInputError::Read {
                path: dir.clone(),
                source,
            })?;
            *budget = budget
                .checked_sub(1)
                .ok_or(RoutingInputError::TooManyEntries)?;
            let file_type = entry
                .file_type()
                .map_err(|source| RoutingInputError::Read {
                    path: entry.path(),
                    source,
                })?;
            let name = entry.file_name();
            // Where Git folds case, `head` is the file system's `HEAD`.
            let is_head = name == "HEAD"
                || (rules.ignore_case() && name.as_bytes().eq_ignore_ascii_case(b"HEAD"));
            if !is_head && (!file_type.is_dir() || name == ".git") {
                continue;
            }
            let mut child = relative.clone();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(name.as_bytes());
            if is_head {
                rules.add_host_head(&child);
                rules.add_host_head_directory(
                    &relative,
                    host_head_guards(&dir, &entry.path(), file_type),
                );
            }
            if !file_type.is_dir() || name == ".git" {
                continue;
            }
            if rules.directory_is_excluded(&child) {
                continue;
            }
            let child_root = entry.path();
            // A repository below that cannot be read (its `.git` unreadable
            // or malformed, its configuration refused) is none to the
            // router: its `.git` is then hidden and never the sandbox's to
            // change, and the walk goes on through it as through any
            // directory. Only the walk's own bound ends the snapshot.
            let found = repository_dirs(&child_root).or_else(|e| unread(e, &child_root))?;
            match found {
                Some(dirs) if nesting < MAX_NESTED_DEPTH => {
                    match read_repository(&child_root, &dirs, nesting + 1, budget, watched) {
                        Ok(inner) => rules.add_nested(&child, inner),
                        Err(e) => {
                            unread::<()>(e, &child_root)?;
                            queue.push_back(child);
                        }
                    }
                }
                // Deeper than the bound: its contents follow the enclosing
                // repository's rules, which see an untracked directory.
                Some(_) => {}
                None => queue.push_back(child),
            }
        }
    }
    Ok(())
}

/// The global excludes file host Git uses with `git_dir`:
/// `core.excludesFile`, else `$XDG_CONFIG_HOME/git/ignore` (when set and not
/// empty), else `$HOME/.config/git/ignore`.
fn global_excludes(git_dir: &Path) -> Result<Option<PathBuf>, RoutingInputError> {
    if let Some(path) = git_config(git_dir, "core.excludesfile", "path")? {
        return Ok(Some(PathBuf::from(OsStr::from_bytes(&path))));
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty());
    Ok(match xdg {
        Some(xdg) => Some(Path::new(&xdg).join("git").join("ignore")),
        None => std::env::var_os("HOME").map(|h| Path::new(&h).join(".config/git/ignore")),
    })
}

/// The value of `key` as host Git reads it for `git_dir` (`--type` when
/// `kind` is not empty), or `None` when unset.
fn git_config(
    git_dir: &Path,
    key: &'static str,
    kind: &str,
) -> Result<Option<Vec<u8>>, RoutingInputError> {
    let mut command = std::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(git_dir)
        .args(["config", "--get"]);
    if !kind.is_empty() {
        command.arg(format!("--type={kind}"));
    }
    command.arg(key);
    let output = match transient::output(&mut command, b"", RunLimits::of(GIT_CONFIG_LIMIT)) {
        Ok(o) => o,
        // No Git on the host: nothing configured.
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(None),
        Err(source) => {
            return Err(RoutingInputError::GitConfig {
                key,
                git_dir: git_dir.to_owned(),
                source,
            })
        }
    };
    match output.status.code() {
        Some(0) => {
            let mut value = output.stdout;
            if value.last() == Some(&b'\n') {
                value.pop();
            }
            Ok(Some(value))
        }
        Some(1) => Ok(None),
        _ => Err(RoutingInputError::GitConfigValue {
            key,
            git_dir: git_dir.to_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        }),
    }
}

/// An ignore file's content: `None` when it is absent, not a regular file,
/// or a symbolic link (which Git does not follow).
fn read_ignore_file(path: &Path) -> Result<Option<Vec<u8>>, RoutingInputError> {
    match lstat(path)? {
        Some(meta) if meta.is_file() => {}
        _ => return Ok(None),
    }
    if let Some(bytes) = read_optional(path, MAX_IGNORE_FILE_BYTES + 1)? {
        if bytes.len() as u64 > MAX_IGNORE_FILE_BYTES {
            return Err(RoutingInputError::IgnoreFileTooLarge {
                path: path.to_owned(),
            });
        }
        return Ok(Some(bytes));
    }
    Ok(None)
}

fn lstat(path: &Path) -> Result<Option<fs::Metadata>, RoutingInputError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(RoutingInputError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Up to `limit` bytes of the file at `path` (not following a final
/// symbolic link), or `None` when there is none.
fn read_optional(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, RoutingInputError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None)
        }
        Err(source) => {
            return Err(RoutingInputError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|source| RoutingInputError::Read {
            path: path.to_owned(),
            source,
        })?;
    Ok(Some(bytes))
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, RoutingInputError> {
    read_optional(path, limit)?.ok_or_else(|| RoutingInputError::Read {
        path: path.to_owned(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })
}
