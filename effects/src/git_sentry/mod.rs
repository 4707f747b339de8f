//! Resolving the workspace's repository layout for the Git Sentry mounts
//! (spec 3.5, SR-4): a plain `.git` directory, or a linked worktree's `.git`
//! file followed to its git directory and common directory. The mounts
//! themselves are built purely in `lazaret_runtime::bundle`.

mod editor_dirs;
pub mod filesystem;
pub mod filter;

pub use editor_dirs::{editor_dirs, remove_recorded_editor_dirs, EditorDirs, EDITOR_RECORD};

use lazaret_runtime::bundle::GitSentry;
use lazaret_runtime::display::escape_path;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Editor configuration directories that can auto-run code (spec 3.5).
pub const EDITOR_DIRS: [&str; 2] = [".vscode", ".idea"];

/// Errors of resolving the repository layout; one variant per step.
#[derive(Debug, thiserror::Error)]
pub enum GitSentryError {
    /// A path could not be inspected.
    #[error("cannot inspect {}: {source}", escape_path(.path))]
    Inspect { path: PathBuf, source: io::Error },
    /// `.git` is something Lazaret does not protect.
    #[error("{} is a {kind}; Lazaret protects a `.git` directory or a linked worktree's `.git` file only", escape_path(.path))]
    Unsupported { path: PathBuf, kind: &'static str },
    /// The `.git` file has no `gitdir:` line.
    #[error("{} does not start with `gitdir: <path>` (a linked worktree's .git file)", escape_path(.path))]
    BadGitFile { path: PathBuf },
    /// The repository has no config file.
    #[error("{} is missing; the repository looks damaged (run `git status` on the host)", escape_path(.path))]
    NoConfig { path: PathBuf },
    /// An editor configuration directory's name is taken by something that
    /// cannot be hidden.
    #[error("{} is a {kind}; Lazaret hides editor configuration directories behind transient storage (spec 3.5) and cannot hide this one. Replace it with a directory", escape_path(.path))]
    EditorDir { path: PathBuf, kind: &'static str },
    /// The record of the editor directories made for the session could not
    /// be written (what was made is removed again).
    #[error("cannot record the editor directories made for the sandbox in {}: {source}", escape_path(.path))]
    EditorRecord { path: PathBuf, source: io::Error },
    /// The worktree's git directory is not inside its common directory.
    #[error("worktree git directory {} is not inside its common directory {}; this layout is not supported", escape_path(.gitdir), escape_path(.common))]
    Layout { gitdir: PathBuf, common: PathBuf },
}

fn inspect(path: &Path) -> Result<Option<fs::Metadata>, GitSentryError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GitSentryError::Inspect {
            path: path.to_owned(),
            source,
        }),
    }
}

fn canonical(path: &Path) -> Result<PathBuf, GitSentryError> {
    fs::canonicalize(path).map_err(|source| GitSentryError::Inspect {
        path: path.to_owned(),
        source,
    })
}

fn read(path: &Path) -> Result<String, GitSentryError> {
    fs::read_to_string(path).map_err(|source| GitSentryError::Inspect {
        path: path.to_owned(),
        source,
    })
}

/// Pushes `dir/name` when it exists as a regular file.
fn if_file(out: &mut Vec<PathBuf>, dir: &Path, name: &str) -> Result<(), GitSentryError> {
    let p = dir.join(name);
    if inspect(&p)?.is_some_and(|m| m.is_file()) {
        out.push(p);
    }
    Ok(())
}

/// The Git Sentry plan for the canonical `workspace`.
pub fn resolve(workspace: &Path) -> Result<GitSentry, GitSentryError> {
    let dot_git = workspace.join(".git");
    let Some(meta) = inspect(&dot_git)? else {
        return Ok(GitSentry::NoRepository);
    };
    if meta.is_dir() {
        let config = dot_git.join("config");
        if !inspect(&config)?.is_some_and(|m| m.is_file()) {
            return Err(GitSentryError::NoConfig { path: config });
        }
        let mut read_only = vec![config];
        if_file(&mut read_only, &dot_git, "commondir")?;
        if_file(&mut read_only, &dot_git, "config.worktree")?;
        return Ok(GitSentry::Repository { read_only });
    }
    if !meta.is_file() {
        let kind = if meta.file_type().is_symlink() {
            "symbolic link"
        } else {
            "special file"
        };
        return Err(GitSentryError::Unsupported {
            path: dot_git,
            kind,
        });
    }
    let text = read(&dot_git)?;
    let target = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("gitdir:"))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| GitSentryError::BadGitFile {
            path: dot_git.clone(),
        })?;
    let gitdir = canonical(&workspace.join(target))?;
    let common = match inspect(&gitdir.join("commondir"))? {
        Some(_) => canonical(&gitdir.join(read(&gitdir.join("commondir"))?.trim()))?,
        None => gitdir.clone(),
    };
    if !gitdir.starts_with(&common) {
        return Err(GitSentryError::Layout { gitdir, common });
    }
    let config = common.join("config");
    if !inspect(&config)?.is_some_and(|m| m.is_file()) {
        return Err(GitSentryError::NoConfig { path: config });
    }
    let mut read_only = vec![config];
    if_file(&mut read_only, &common, "config.worktree")?;
    if gitdir != common {
        for name in ["commondir", "gitdir", "config.worktree"] {
            if_file(&mut read_only, &gitdir, name)?;
        }
    }
    // Empty for a `--separate-git-dir` repository (the .git file names the
    // common directory itself).
    let worktree_dir = gitdir
        .strip_prefix(&common)
        .map(Path::to_owned)
        .unwrap_or_default();
    Ok(GitSentry::LinkedWorktree {
        common_dir: common,
        worktree_dir,
        read_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn plain_worktree_and_none() -> Result<(), String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = canonical(tmp.path()).map_err(|e| e.to_string())?;
        let main = root.join("main");
        fs::create_dir(&main).map_err(|e| e.to_string())?;
        assert_eq!(
            resolve(&main).map_err(|e| e.to_string())?,
            GitSentry::NoRepository
        );
        git(&main, &["init", "-q"])?;
        git(&main, &["commit", "-q", "--allow-empty", "-m", "x"])?;
        fs::create_dir(main.join(".vscode")).map_err(|e| e.to_string())?;
        assert_eq!(
            resolve(&main).map_err(|e| e.to_string())?,
            GitSentry::Repository {
                read_only: vec![main.join(".git/config")]
            }
        );
        git(&main, &["worktree", "add", "-q", "../wt"])?;
        let wt = root.join("wt");
        assert_eq!(
            resolve(&wt).map_err(|e| e.to_string())?,
            GitSentry::LinkedWorktree {
                common_dir: main.join(".git"),
                worktree_dir: "worktrees/wt".into(),
                read_only: vec![
                    main.join(".git/config"),
                    main.join(".git/worktrees/wt/commondir"),
                    main.join(".git/worktrees/wt/gitdir"),
                ],
            }
        );
        fs::write(wt.join(".git"), "nonsense\n").map_err(|e| e.to_string())?;
        assert!(matches!(
            resolve(&wt),
            Err(GitSentryError::BadGitFile { .. })
        ));
        fs::remove_file(wt.join(".git")).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(main.join(".git"), wt.join(".git"))
            .map_err(|e| e.to_string())?;
        assert!(matches!(
            resolve(&wt),
            Err(GitSentryError::Unsupported {
                kind: "symbolic link",
                ..
            })
        ));
        Ok(())
    }
}
