//! Mounting the Git Sentry filter ([`super::filesystem::SentryFs`]) of the
//! host repository's common git directory inside the Runtime Supervisor's
//! private mount namespace (spec 3.5, SR-4).
//!
//! The filter is mounted on an empty directory of the generation's 0700
//! runtime directory, never over the repository itself: runsc's gofer
//! bind-mounts the workspace non-recursively from a new namespace, where a
//! mount under the workspace would be a locked child and the bind would fail.
//! The bundle binds the filter where the git directory belongs. The mount is
//! private to the generation's mount namespace: the host never sees it, and
//! it vanishes with the namespace when the Runtime Supervisor exits.

use super::filesystem::{IndexAdmission, JudgedIndex, Limits, SentryFs};
use crate::broker::transient::{self, Limits as RunLimits};
use lazaret_runtime::display::escape_path;
use lazaret_runtime::git_sentry::{HostGitDir, LayoutError, SentryLayout};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How deep the scan for submodule git directories goes under `modules/`.
/// How long the `git config` listing of include paths may take.
const GIT_CONFIG_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_SCAN_DEPTH: usize = 8;
/// The most directory entries the launch-time scan visits.
const MAX_SCAN_ENTRIES: usize = 20_000;
/// Request threads serving the filter.
const THREADS: usize = 2;
/// How deep includes of includes are followed.
const MAX_INCLUDE_DEPTH: usize = 4;

/// Errors of mounting the filter; one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// Scanning the host git directory failed.
    #[error("scanning {} for the Git Sentry: {source}", escape_path(.path))]
    Scan { path: PathBuf, source: io::Error },
    /// The git directory has more entries than the scan visits.
    #[error("{} has more than {MAX_SCAN_ENTRIES} entries under worktrees/ and modules/; the Git Sentry does not scan repositories this large", escape_path(.path))]
    TooLarge { path: PathBuf },
    /// `git config` could not list a configuration file's includes.
    #[error("reading the includes of {} with `git config`: {detail}", escape_path(.path))]
    Includes { path: PathBuf, detail: String },
    /// An included configuration file is reached through a symbolic link
    /// inside the git directory.
    #[error("{} includes a file through the symbolic link {}; host Git would read configuration the Git Sentry cannot guard (SR-4). Replace the link with the file or move the include outside the repository", escape_path(.config), escape_path(.link))]
    IncludeThroughSymlink { config: PathBuf, link: PathBuf },
    /// The layout was refused.
    #[error("Git Sentry layout of {}: {source}", escape_path(.path))]
    Layout { path: PathBuf, source: LayoutError },
    /// Opening the common directory failed.
    #[error("opening {} for the Git Sentry: {source}", escape_path(.path))]
    Open {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    /// The FUSE mount failed.
    #[error("mounting the Git Sentry filter on {}: {source} (is /dev/fuse mode 0666? `lazaret doctor` checks)", escape_path(.path))]
    Mount { path: PathBuf, source: io::Error },
}

/// A mounted filter; [`MountedFilter::unmount`] (or dropping it) unmounts.
#[derive(Debug)]
pub struct MountedFilter {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl MountedFilter {
    /// Where the filter is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the FUSE session still serves the mount: `false` once its
    /// request loop ended (the mount was taken away or the kernel ended
    /// the connection).
    pub fn serving(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !s.guard.is_finished())
    }

    /// Unmounts and joins the request threads.
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            // Requests still queued when the unmount lands (the `release`s
            // of a process that just exited) make the kernel end the
            // connection as aborted: the filter is unmounted all the same.
            Some(s) => match s.umount_and_join() {
                Err(e)
                    if e.raw_os_error() == Some(rustix::io::Errno::CONNABORTED.raw_os_error()) =>
                {
                    Ok(())
                }
                other => other,
            },
            None => Ok(()),
        }
    }
}

struct Scan {
    visited: usize,
    root: PathBuf,
    out: Vec<HostGitDir>,
}

impl Scan {
    /// Plain subdirectories (never symbolic links) of `dir`, sorted.
    fn subdirs(&mut self, dir: &Path) -> Result<Vec<OsString>, FilterError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(FilterError::Scan {
                    path: dir.to_owned(),
                    source,
                })
            }
        };
        let mut out = Vec::new();
        for entry in entries {
            self.visited += 1;
            if self.visited > MAX_SCAN_ENTRIES {
                return Err(FilterError::TooLarge {
                    path: self.root.clone(),
                });
            }
            let entry = entry.map_err(|source| FilterError::Scan {
                path: dir.to_owned(),
                source,
            })?;
            let kind = entry.file_type().map_err(|source| FilterError::Scan {
                path: entry.path(),
                source,
            })?;
            if kind.is_dir() {
                out.push(entry.file_name());
            }
        }
        out.sort();
        Ok(out)
    }

    fn is_git_dir(dir: &Path) -> bool {
        fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| m.is_file())
            && fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
    }

    /// Records the git directory at `rel` and everything under its
    /// `modules/`.
    fn git_dir(&mut self, rel: &Path, depth: usize) -> Result<(), FilterError> {
        let abs = self.root.join(rel);
        let worktrees = self.subdirs(&abs.join("worktrees"))?;
        let mut includes = Vec::new();
        self.includes(&abs.join("config"), 0, &mut includes)?;
        // Per-worktree configuration (`extensions.worktreeConfig`) is read
        // like `config`, includes and all (spec 3.5, SR-4).
        self.includes(&abs.join("config.worktree"), 0, &mut includes)?;
        for w in &worktrees {
            let admin = abs.join("worktrees").join(w);
            self.includes(&admin.join("config.worktree"), 0, &mut includes)?;
        }
        self.out.push(HostGitDir {
            path: rel.to_owned(),
            worktrees,
            includes,
        });
        self.modules(&rel.join("modules"), depth + 1)
    }

    /// The files `config` includes that lie inside the common directory
    /// (relative to it), following includes of includes up to
    /// [`MAX_INCLUDE_DEPTH`]. Git itself reads the values: its quoting and
    /// path rules are the ones host Git will apply.
    fn includes(
        &mut self,
        config: &Path,
        depth: usize,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), FilterError> {
        if depth > MAX_INCLUDE_DEPTH || !config.is_file() {
            return Ok(());
        }
        for value in include_paths(config)? {
            // `~/…` and `%(prefix)/…` name files outside the repository.
            if value.starts_with("~") || value.starts_with("%(prefix)") {
                continue;
            }
            let base = config.parent().unwrap_or(Path::new("/"));
            let Some(target) = normalize(&base.join(&value)) else {
                continue;
            };
            if let Ok(rel) = target.strip_prefix(&self.root) {
                // A symbolic link on the way would make host Git read a file
                // the filter cannot guard.
                let mut walk = self.root.clone();
                for c in rel.components() {
                    walk.push(c);
                    if fs::symlink_metadata(&walk).is_ok_and(|m| m.file_type().is_symlink()) {
                        return Err(FilterError::IncludeThroughSymlink {
                            config: config.to_owned(),
                            link: walk,
                        });
                    }
                }
                if !rel.as_os_str().is_empty() && !out.iter().any(|p| p == rel) {
                    out.push(rel.to_owned());
                    self.includes(&target, depth + 1, out)?;
                }
            }
        }
        Ok(())
    }

    /// Submodule git directories under `rel` (names may contain `/`).
    fn modules(&mut self, rel: &Path, depth: usize) -> Result<(), FilterError> {
        if depth > MAX_SCAN_DEPTH {
            return Ok(());
        }
        for name in self.subdirs(&self.root.join(rel))? {
            let child = rel.join(&name);
            if Self::is_git_dir(&self.root.join(&child)) {
                self.git_dir(&child, depth)?;
            } else {
                self.modules(&child, depth + 1)?;
            }
        }
        Ok(())
    }
}

/// The `include.path` and `includeIf.*.path` values of the configuration
/// file `config`, as host Git reads them. No Git on the host means no host
/// Git to mislead: no includes.
fn include_paths(config: &Path) -> Result<Vec<PathBuf>, FilterError> {
    use std::os::unix::ffi::OsStrExt as _;
    let failed = |detail: String| FilterError::Includes {
        path: config.to_owned(),
        detail,
    };
    let output = transient::output(
        std::process::Command::new("git")
            .args(["config", "--null", "--file"])
            .arg(config)
            .args(["--get-regexp", r"^include(if\..*)?\.path$"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null"),
        b"",
        RunLimits::of(GIT_CONFIG_LIMIT),
    );
    let output = match output {
        Ok(o) => o,
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(Vec::new()),
        Err(e) => return Err(failed(e.to_string())),
    };
    match output.status.code() {
        Some(0) => {}
        // No matching key.
        Some(1) => return Ok(Vec::new()),
        _ => {
            return Err(failed(
                String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            ))
        }
    }
    // `--null`: each entry is `key\nvalue\0`.
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let nl = entry.iter().position(|b| *b == b'\n')?;
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(&entry[nl + 1..])))
        })
        .filter(|p| !p.as_os_str().is_empty())
        .collect())
}

/// `path` with `.` and `..` resolved lexically (`None` above the root).
fn normalize(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The guards of the host repository whose common directory is `common`:
/// its own, each linked worktree's admin directory's and each submodule's
/// (spec 3.5, SR-4).
pub fn scan_layout(common: &Path) -> Result<SentryLayout, FilterError> {
    let mut scan = Scan {
        visited: 0,
        root: common.to_owned(),
        out: Vec::new(),
    };
    scan.git_dir(Path::new(""), 0)?;
    SentryLayout::new(&scan.out).map_err(|source| FilterError::Layout {
        path: common.to_owned(),
        source,
    })
}

/// The workspace's index and its judge ([`IndexAdmission`]).
#[derive(Debug)]
pub struct IndexJudge {
    /// The git directory holding the index: `common`, or a linked
    /// worktree's directory inside it.
    pub git_dir: PathBuf,
    /// Who judges.
    pub admission: Arc<dyn IndexAdmission>,
}

/// Mounts the filter of `common` (the canonical common git directory) on the
/// empty directory `mountpoint`, in the caller's mount namespace, which must
/// be private; with `index`, a rename onto the workspace's index is judged
/// first.
pub fn mount(
    common: &Path,
    mountpoint: &Path,
    index: Option<IndexJudge>,
) -> Result<MountedFilter, FilterError> {
    let _span = tracing::info_span!("MountGitSentry", path = %common.display()).entered();
    let layout = scan_layout(common)?;
    let index = match index {
        None => None,
        Some(IndexJudge { git_dir, admission }) => {
            let open_err = |source| FilterError::Open {
                path: git_dir.clone(),
                source,
            };
            let dir = rustix::fs::openat(
                rustix::fs::CWD,
                &git_dir,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(open_err)?;
            let st = rustix::fs::fstat(&dir).map_err(open_err)?;
            Some(JudgedIndex {
                dir: (st.st_dev, st.st_ino),
                dir_fd: Arc::new(dir),
                admission,
            })
        }
    };
    let root = rustix::fs::openat(
        rustix::fs::CWD,
        common,
        rustix::fs::OFlags::PATH
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|source| FilterError::Open {
        path: common.to_owned(),
        source,
    })?;
    let limits = Limits::for_descriptors(crate::fuse_passthrough::raise_nofile());
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("lazaret-git-sentry".to_owned()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        fuser::MountOption::NoExec,
    ];
    config.n_threads = Some(THREADS);
    config.clone_fd = true;
    let mount_err = |source| FilterError::Mount {
        path: mountpoint.to_owned(),
        source,
    };
    let session = fuser::Session::new(
        SentryFs::new(root, layout, limits, index),
        mountpoint,
        &config,
    )
    .map_err(mount_err)?;
    let session = session.spawn().map_err(mount_err)?;
    Ok(MountedFilter {
        session: Some(session),
        mountpoint: mountpoint.to_owned(),
    })
}
