//! Trace files (ARCHITECTURE.md "Traces"): append-only `lazaret-trace-v1`
//! JSON lines, one per model step, written by the Host Coordinator for
//! the Lazaret model and by catalog operations for the PreparedLower model.
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::trace::TraceLine;

/// An append-only JSON-lines file. A failed write is reported once and
/// leaves the trace incomplete (replay then stops at the gap); the work
/// it traces goes on.
#[derive(Debug)]
pub struct TraceLog {
    path: PathBuf,
    file: Option<File>,
}

impl TraceLog {
    /// A new file (0600, never over an existing one) starting with `header`.
    pub fn create(path: PathBuf, header: &TraceLine) -> Self {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        let mut log = Self {
            file: match file {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot create the trace file; this run is not traced");
                    None
                }
            },
            path,
        };
        log.append(header);
        log
    }

    /// Continues the trace at `path`, opened for appending as `file`.
    pub fn continue_in(path: PathBuf, file: File) -> Self {
        Self {
            path,
            file: Some(file),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, line: &TraceLine) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut text = line.to_json();
        text.push('\n');
        if let Err(e) = file.write_all(text.as_bytes()) {
            tracing::warn!(path = %self.path.display(), error = %e, "trace write failed; the trace ends here");
            self.file = None;
        }
    }

    /// Closes the file; returns its path.
    pub fn close(self) -> PathBuf {
        self.path
    }
}

/// Keeps the `keep` newest traces in `dir` whose names start with
/// `prefix` (names sort by wall-clock time) and always `own`, the one just
/// written, even if a clock stepped back makes it sort oldest. Another
/// process may prune at the same moment: a trace already gone is not an
/// error.
pub fn prune_oldest(dir: &Path, prefix: &str, keep: usize, own: &Path) -> io::Result<()> {
    let mut traces: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(".jsonl")
        })
        .map(|e| e.path())
        .filter(|p| p != own)
        .collect();
    traces.sort();
    let excess = (traces.len() + 1).saturating_sub(keep);
    for path in traces.into_iter().take(excess) {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}
