//! Editor configuration directories that can auto-run code (`.vscode`,
//! `.idea`; spec 3.5): each is a real directory while the sandbox runs, so
//! it can be hidden behind transient storage. A missing one is made for the
//! session and taken away afterwards when still empty — by the Runtime
//! Supervisor as it stops, or, when RS died first, by whoever removes the
//! generation directory, from the record kept there.
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::{inspect, GitSentryError, EDITOR_DIRS};

/// The record of the editor directories a launch created, kept in the
/// generation directory.
pub const EDITOR_RECORD: &str = "editor-dirs";

/// Longest record accepted: a few lines per editor directory.
const RECORD_MAX: u64 = 64 * 1024;

/// The workspace's editor configuration directories, ready to be hidden
/// behind transient storage (spec 3.5): every name of [`EDITOR_DIRS`] is a
/// real directory, so the sandbox can neither read the host's nor plant one
/// that host editors would run. A missing one is created empty (runsc would
/// otherwise create it 0777 itself, or — unmounted — let the sandbox write
/// one onto the host) and taken away again, when still empty, as the value
/// is dropped (after the sandbox has stopped: the Runtime Supervisor holds
/// it until it exits).
#[derive(Debug)]
pub struct EditorDirs {
    /// Relative to the workspace, every one a directory.
    pub names: Vec<PathBuf>,
    created: Vec<Created>,
    /// Where `created` is recorded.
    record: PathBuf,
}

/// A directory this launch made, with the identity it had then. The change
/// time is part of it: a directory made later in the same place can reuse
/// the inode number, but not (beyond the clock's tick) the change time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Created {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    path: PathBuf,
}

fn identity(m: &fs::Metadata) -> (u64, u64, (i64, i64)) {
    (m.dev(), m.ino(), (m.ctime(), m.ctime_nsec()))
}

impl Created {
    /// Removes the directory if it is still the one made and still empty (a
    /// host user who put something there keeps it).
    fn remove(&self) {
        let same = match fs::symlink_metadata(&self.path) {
            Ok(m) => m.is_dir() && identity(&m) == (self.dev, self.ino, self.ctime),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) => false,
        };
        if !same {
            tracing::info!(path = %self.path.display(), "an editor directory made for the sandbox was replaced; kept");
            return;
        }
        if let Err(e) = fs::remove_dir(&self.path) {
            tracing::info!(path = %self.path.display(), error = %e, "kept an editor directory");
        }
    }
}

impl Drop for EditorDirs {
    fn drop(&mut self) {
        for c in &self.created {
            c.remove();
        }
        // Done: a stale record could later match a reused inode number.
        if !self.created.is_empty() {
            let _ = fs::remove_file(&self.record);
        }
    }
}

/// One record line: `<dev> <ino> <ctime s> <ctime ns> <path as lowercase hex>`.
fn record_line(c: &Created) -> String {
    let hex: String = c
        .path
        .as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{} {} {} {} {hex}\n", c.dev, c.ino, c.ctime.0, c.ctime.1)
}

fn parse_line(line: &str) -> Option<Created> {
    let mut parts = line.split(' ');
    let dev = parts.next()?.parse().ok()?;
    let ino = parts.next()?.parse().ok()?;
    let ctime = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    let hex = parts.next()?;
    if parts.next().is_some() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let path = PathBuf::from(std::ffi::OsString::from_vec(bytes));
    path.is_absolute().then_some(Created {
        dev,
        ino,
        ctime,
        path,
    })
}

/// Replaces `record` with the list of `created`, atomically (a reader sees
/// the old or the new list, never half of one).
fn write_record(record: &Path, created: &[Created]) -> io::Result<()> {
    let tmp = record.with_extension("tmp");
    let mut f = fs::File::create(&tmp)?;
    for c in created {
        f.write_all(record_line(c).as_bytes())?;
    }
    f.sync_all()?;
    fs::rename(&tmp, record)
}

/// Prepares the editor directories of the canonical `workspace`; a symbolic
/// link or a non-directory at one of the names is refused (it could not be
/// hidden). Each directory made is written to `record` right after it is
/// made, so that [`remove_recorded_editor_dirs`] can take it away if this
/// process dies before it can.
pub fn editor_dirs(workspace: &Path, record: &Path) -> Result<EditorDirs, GitSentryError> {
    let mut out = EditorDirs {
        names: Vec::new(),
        created: Vec::new(),
        record: record.to_owned(),
    };
    for d in EDITOR_DIRS {
        let path = workspace.join(d);
        match inspect(&path)? {
            Some(m) if m.is_dir() => {}
            Some(m) => {
                return Err(GitSentryError::EditorDir {
                    path,
                    kind: if m.file_type().is_symlink() {
                        "symbolic link"
                    } else {
                        "file that is not a directory"
                    },
                })
            }
            None => match fs::create_dir(&path) {
                Ok(()) => {
                    let m = inspect(&path)?
                        .filter(fs::Metadata::is_dir)
                        .ok_or_else(|| GitSentryError::Inspect {
                            path: path.clone(),
                            source: io::Error::other("replaced right after it was made"),
                        })?;
                    let (dev, ino, ctime) = identity(&m);
                    out.created.push(Created {
                        dev,
                        ino,
                        ctime,
                        path: path.clone(),
                    });
                    // On failure `out` is dropped: what was made goes again.
                    write_record(record, &out.created).map_err(|source| {
                        GitSentryError::EditorRecord {
                            path: record.to_owned(),
                            source,
                        }
                    })?;
                }
                // Made by the host in the meantime: the host's.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                // The user cannot write the workspace root, and the sandbox
                // (which writes with the user's rights) cannot either:
                // nothing to hide.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                    ) =>
                {
                    continue
                }
                Err(source) => return Err(GitSentryError::Inspect { path, source }),
            },
        }
        out.names.push(PathBuf::from(d));
    }
    Ok(out)
}

/// Takes away the editor directories listed in `record` (a dead Runtime
/// Supervisor's) that are still the directories it made and still empty,
/// then the record. Called only once the generation's processes are gone.
/// A missing record means nothing was made.
pub fn remove_recorded_editor_dirs(record: &Path) {
    let text = match fs::File::open(record).and_then(|f| {
        let mut s = String::new();
        io::Read::read_to_string(&mut io::Read::take(f, RECORD_MAX), &mut s).map(|_| s)
    }) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(path = %record.display(), error = %e, "unreadable editor-directory record");
            return;
        }
    };
    for line in text.lines().take(EDITOR_DIRS.len()) {
        match parse_line(line) {
            Some(c) => c.remove(),
            None => {
                tracing::warn!(path = %record.display(), "malformed editor-directory record line")
            }
        }
    }
    let _ = fs::remove_file(record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_directories_go_with_the_session_and_the_hosts_stay() -> Result<(), String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ws = tmp.path().join("ws");
        let gen = tmp.path().join("gen");
        fs::create_dir(&ws).map_err(|e| e.to_string())?;
        fs::create_dir(&gen).map_err(|e| e.to_string())?;
        fs::create_dir(ws.join(".vscode")).map_err(|e| e.to_string())?;
        let record = gen.join(EDITOR_RECORD);
        let dirs = editor_dirs(&ws, &record).map_err(|e| e.to_string())?;
        assert_eq!(
            dirs.names,
            vec![PathBuf::from(".vscode"), PathBuf::from(".idea")]
        );
        // Only the one made is recorded.
        let text = fs::read_to_string(&record).map_err(|e| e.to_string())?;
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(
            parse_line(text.trim_end()).map(|c| c.path),
            Some(ws.join(".idea"))
        );
        assert!(ws.join(".idea").is_dir());
        drop(dirs);
        assert!(!ws.join(".idea").exists());
        assert!(!record.exists(), "the record goes with the directories");
        assert!(ws.join(".vscode").is_dir());
        std::os::unix::fs::symlink("/tmp", ws.join(".idea")).map_err(|e| e.to_string())?;
        assert!(matches!(
            editor_dirs(&ws, &record),
            Err(GitSentryError::EditorDir { .. })
        ));
        Ok(())
    }

    /// A Runtime Supervisor killed while its sandbox runs never drops its
    /// `EditorDirs`: the record lets its successor remove what it made,
    /// but never a directory replaced since, or one with content.
    #[test]
    fn a_dead_supervisors_directories_are_removed_from_its_record() -> Result<(), String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ws = tmp.path().join("ws");
        fs::create_dir(&ws).map_err(|e| e.to_string())?;
        let record = tmp.path().join(EDITOR_RECORD);
        let dirs = editor_dirs(&ws, &record).map_err(|e| e.to_string())?;
        std::mem::forget(dirs); // as if SIGKILLed
        assert!(ws.join(".vscode").is_dir() && ws.join(".idea").is_dir());
        // The host replaced .idea with its own directory meanwhile (made
        // first, so it cannot reuse the inode number).
        fs::create_dir(ws.join("other")).map_err(|e| e.to_string())?;
        fs::remove_dir(ws.join(".idea")).map_err(|e| e.to_string())?;
        fs::rename(ws.join("other"), ws.join(".idea")).map_err(|e| e.to_string())?;
        remove_recorded_editor_dirs(&record);
        assert!(!ws.join(".vscode").exists(), "made and empty: removed");
        assert!(ws.join(".idea").is_dir(), "replaced: kept");
        assert!(!record.exists());
        // Content is kept; a missing record is nothing to do.
        let dirs = editor_dirs(&ws, &record).map_err(|e| e.to_string())?;
        std::mem::forget(dirs);
        fs::write(ws.join(".vscode/settings.json"), b"{}").map_err(|e| e.to_string())?;
        remove_recorded_editor_dirs(&record);
        assert!(ws.join(".vscode/settings.json").is_file());
        remove_recorded_editor_dirs(&record);
        Ok(())
    }

    #[test]
    fn record_lines_round_trip_and_bad_ones_are_refused() {
        let c = Created {
            dev: 64769,
            ino: 42,
            ctime: (1_764_460_800, 123_456_789),
            path: PathBuf::from(std::ffi::OsString::from_vec(b"/w s/\n\xff/.idea".to_vec())),
        };
        assert_eq!(parse_line(record_line(&c).trim_end()), Some(c));
        for bad in [
            "",
            "1 2 3 4",
            "1 2 3 4 2f6",
            "x 2 3 4 2f61",
            "1 2 3 4 2f61 extra",
            "1 2 3 4 6162",
            "1 2 3 4 zz",
            "1 2 2f61",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }
}
