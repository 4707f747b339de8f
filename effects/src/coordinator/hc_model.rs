//! The Host Coordinator's model core and its trace file (ARCHITECTURE.md
//! "Traces"): every lifecycle step of this process is checked against the
//! generated Lazaret model before its effect and recorded after it, one
//! JSON line per step, in a file of the generation under the Domain runtime
//! directory; at exit the file moves under the Domain's storage root, which
//! keeps the newest [`KEPT_TRACES`].
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::crash_point::crash_point;
use crate::trace_log::{prune_oldest, TraceLog};
use lazaret_generated::lazaret::{Action, CoordinatorsId, State};
use lazaret_runtime::coordinator::host_model::{
    DurableView, HostModel, HostModelError, ProcessView, Routing,
};
use lazaret_runtime::core::CoreError;
use lazaret_runtime::records::ids::CoordinatorId;

/// Traces kept under a Domain's storage root.
pub const KEPT_TRACES: usize = 32;

/// Lock-race losers' traces kept beside them (`lost-*.jsonl`).
pub const KEPT_LOSER_TRACES: usize = 8;

/// Why a dead coordinator's trace cannot be continued.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Model(#[from] HostModelError),
}

/// The model core of this process and the trace it writes.
#[derive(Debug)]
pub struct HcModel {
    model: HostModel,
    log: TraceLog,
    /// Whether this core's steps are crash points (`hc`, docs/crash-points.md):
    /// a lock-race loser's are not, so a concurrent candidate never takes a
    /// crash meant for the coordinator under test.
    crash_points: bool,
}

impl HcModel {
    /// The core for generation `generation` of a Domain served with
    /// `routing`, its trace written to `path`.
    pub fn new(
        coordinator: String,
        generation: u64,
        routing: Routing,
        path: PathBuf,
    ) -> Result<Self, HostModelError> {
        let model = HostModel::new(coordinator, generation, routing)?;
        let log = TraceLog::create(path, &model.header());
        Ok(Self {
            model,
            log,
            crash_points: true,
        })
    }

    /// Continues the trace at `path` of a generation whose coordinator
    /// died (see [`HostModel::resume`]); a last line cut off by the crash is
    /// removed from the file first.
    pub fn resume(path: PathBuf) -> Result<Self, ResumeError> {
        let io = |source| ResumeError::Io {
            path: path.clone(),
            source,
        };
        let text = std::fs::read_to_string(&path).map_err(io)?;
        let (model, kept) = HostModel::resume(&path.display().to_string(), &text)?;
        let keep: String = text.lines().take(kept).map(|l| format!("{l}\n")).collect();
        if keep.len() != text.len() {
            std::fs::write(&path, keep).map_err(io)?;
        }
        let file = OpenOptions::new().append(true).open(&path).map_err(io)?;
        Ok(Self {
            model,
            log: TraceLog::continue_in(path, file),
            crash_points: true,
        })
    }

    /// The core of a recovery whose trace is gone, rebuilt from the
    /// durable record (see [`HostModel::recovered`]); its trace starts at
    /// `path` with that state in the header.
    pub fn recovered(
        path: PathBuf,
        dead: String,
        generation: u64,
        durable: &DurableView,
    ) -> Result<Self, HostModelError> {
        let model = HostModel::recovered(dead, generation, durable)?;
        let log = TraceLog::create(path, &model.header());
        Ok(Self {
            model,
            log,
            crash_points: true,
        })
    }

    /// The core of a coordinator that lost the Domain lock race (see
    /// [`HostModel::lock_race_loser`]). A loser holds no lock and has no
    /// generation, so its trace goes straight under `archive` as
    /// `lost-<nanoseconds>-<coordinator>.jsonl`; [`HcModel::keep_loser`]
    /// closes it.
    pub fn lock_race_loser(coordinator: String, archive: &Path) -> Result<Self, HostModelError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = archive.join(format!("lost-{nanos:020}-{coordinator}.jsonl"));
        let model = HostModel::lock_race_loser(coordinator)?;
        // Usually there already; if it cannot be made, creating the trace
        // file reports that and this run goes untraced.
        let _ = std::fs::DirBuilder::new().mode(0o700).create(archive);
        let log = TraceLog::create(path, &model.header());
        Ok(Self {
            model,
            log,
            crash_points: false,
        })
    }

    /// Closes a lock-race loser's trace and removes the oldest loser traces
    /// beyond [`KEPT_LOSER_TRACES`] (losers prune only losers' traces).
    pub fn keep_loser(self) {
        let own = self.log.path().to_owned();
        let Some(dir) = own.parent().map(Path::to_owned) else {
            return;
        };
        drop(self);
        if let Err(e) = prune_oldest(&dir, "lost-", KEPT_LOSER_TRACES, &own) {
            tracing::warn!(archive = %dir.display(), error = %e, "cannot prune the lock-race losers' traces");
        }
    }

    pub fn me(&self) -> CoordinatorsId {
        self.model.me()
    }

    pub fn state(&self) -> &State {
        self.model.state()
    }

    pub fn model(&self) -> &HostModel {
        &self.model
    }

    /// Whether `action` is enabled now.
    pub fn check(&self, action: &Action) -> Result<(), CoreError> {
        self.model.check(action)
    }

    /// Records the step `action`, whose effect is done, with what was read
    /// back after it (`observed`; `None` for a step this process does not
    /// carry out, such as a dead coordinator's loss, or before the
    /// generation's record exists).
    pub fn take(
        &mut self,
        action: Action,
        observed: Option<&DurableView>,
    ) -> Result<(), CoreError> {
        self.take_with_processes(action, observed, ProcessView::default())
    }

    /// [`HcModel::take`], with what the step established about the
    /// Runtime Supervisor and attached runsc (`processes`).
    pub fn take_with_processes(
        &mut self,
        action: Action,
        observed: Option<&DurableView>,
        processes: ProcessView,
    ) -> Result<(), CoreError> {
        let line = self.model.take_observed(action, observed, processes)?;
        if self.crash_points {
            crash_point!(
                Hc,
                line.step,
                "before-trace",
                crate::crash_point::StepLabel(&line)
            );
        }
        self.log.append(&line);
        if self.crash_points {
            crash_point!(
                Hc,
                line.step,
                "after-trace",
                crate::crash_point::StepLabel(&line)
            );
        }
        Ok(())
    }

    /// Closes the trace and moves it under `archive`, keeping the newest
    /// [`KEPT_TRACES`] there.
    pub fn archive(self, archive: &Path) {
        let path = self.log.close();
        if let Err(e) = move_and_prune(&path, archive) {
            tracing::warn!(path = %path.display(), archive = %archive.display(), error = %e, "cannot keep the trace");
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Copies `path` into `dir` (they may be on different filesystems), removes
/// it, and removes the oldest traces beyond [`KEPT_TRACES`]. A trace never
/// replaces one already kept: coordinators that exit before they start a
/// generation (a refused or vanished client) leave traces under the same
/// generation number as the coordinator that starts it later, and each is
/// kept as `gen-N.jsonl`, `gen-N.1.jsonl`, `gen-N.2.jsonl`, ...
fn move_and_prune(path: &Path, dir: &Path) -> io::Result<()> {
    let generation = path
        .file_name()
        .and_then(|n| archived_generation(&n.to_string_lossy()))
        .map(|(g, _)| g)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a trace name"))?;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let mut out = None;
    for k in 0..=KEPT_TRACES {
        let name = match k {
            0 => trace_name(generation),
            k => format!("gen-{generation}.{k}.jsonl"),
        };
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(name))
        {
            Ok(file) => {
                out = Some(file);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let mut out = out.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{KEPT_TRACES} traces of generation {generation} are kept already"),
        )
    })?;
    io::copy(&mut File::open(path)?, &mut out)?;
    out.sync_all()?;
    std::fs::remove_file(path)?;
    prune(dir, KEPT_TRACES)
}

/// Keeps the `keep` traces with the highest generation numbers.
fn prune(dir: &Path, keep: usize) -> io::Result<()> {
    let mut traces: Vec<((u64, u64), PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let order = archived_generation(&e.file_name().to_string_lossy())?;
            Some((order, e.path()))
        })
        .collect();
    traces.sort();
    let excess = traces.len().saturating_sub(keep);
    for (_, path) in traces.into_iter().take(excess) {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

/// The generation of a kept trace's name and its place among that
/// generation's traces: `gen-N.jsonl` is (N, 0), `gen-N.K.jsonl` is (N, K).
fn archived_generation(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_prefix("gen-")?.strip_suffix(".jsonl")?;
    match stem.split_once('.') {
        None => Some((stem.parse().ok()?, 0)),
        Some((g, k)) => Some((g.parse().ok()?, k.parse().ok()?)),
    }
}

/// How a coordinator is named in traces: `hc-` and the first four bytes of
/// its coordinator ID (recorded with its generation).
pub fn coordinator_name(id: &CoordinatorId) -> String {
    let hex: String = id.0[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("hc-{hex}")
}

/// The trace file name of generation `id`.
pub fn trace_name(id: u64) -> String {
    format!("gen-{id}.jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_keeps_the_newest_generations() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        for g in 1..=40u64 {
            std::fs::write(dir.path().join(trace_name(g)), "x")?;
        }
        std::fs::write(dir.path().join("notes.txt"), "kept")?;
        prune(dir.path(), KEPT_TRACES)?;
        let mut left: Vec<String> = std::fs::read_dir(dir.path())?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT_TRACES + 1);
        assert!(left.contains(&"notes.txt".to_owned()));
        assert!(!left.contains(&trace_name(8)));
        assert!(left.contains(&trace_name(9)));
        assert!(left.contains(&trace_name(40)));
        Ok(())
    }

    /// A second trace of one generation number is kept beside the first,
    /// never over it, and pruning orders them after it.
    #[test]
    fn traces_of_one_generation_number_are_all_kept() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let archive = dir.path().join("traces");
        for text in ["first", "second", "third"] {
            let path = dir.path().join(trace_name(5));
            std::fs::write(&path, text)?;
            move_and_prune(&path, &archive)?;
            assert!(!path.exists());
        }
        let read = |name: &str| std::fs::read_to_string(archive.join(name));
        assert_eq!(read("gen-5.jsonl")?, "first");
        assert_eq!(read("gen-5.1.jsonl")?, "second");
        assert_eq!(read("gen-5.2.jsonl")?, "third");
        for g in 6..(6 + KEPT_TRACES as u64 - 2) {
            std::fs::write(archive.join(trace_name(g)), "x")?;
        }
        prune(&archive, KEPT_TRACES)?;
        assert!(!archive.join("gen-5.jsonl").exists());
        assert!(archive.join("gen-5.1.jsonl").exists());
        assert_eq!(archived_generation("gen-5.1.jsonl"), Some((5, 1)));
        assert_eq!(archived_generation("gen-5.x.jsonl"), None);
        assert_eq!(archived_generation("notes.txt"), None);
        Ok(())
    }

    /// A lock-race loser's trace is kept under the archive at once, replays
    /// as its core wrote it, and losers keep only the newest of theirs,
    /// leaving the generations' traces alone.
    #[test]
    fn a_lock_race_losers_trace_is_kept_and_pruned() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let archive = dir.path().join("traces");
        std::fs::write(dir.path().join("gen-1.jsonl"), "x")?;
        for i in 0..(KEPT_LOSER_TRACES + 2) {
            let mut m = HcModel::lock_race_loser(format!("hc-{i:08x}"), &archive)?;
            for a in m.model().lock_race_lost() {
                m.take(a, None)?;
            }
            assert_eq!(
                m.state().hc[m.me().index()],
                lazaret_generated::lazaret::Hc::FailedClosed
            );
            m.keep_loser();
        }
        std::fs::write(archive.join(trace_name(1)), "x")?;
        let mut left: Vec<String> = std::fs::read_dir(&archive)?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT_LOSER_TRACES + 1, "{left:?}");
        assert!(left.contains(&trace_name(1)));
        assert!(
            !left.iter().any(|n| n.ends_with("hc-00000000.jsonl")),
            "{left:?}"
        );
        assert!(
            left.iter().any(|n| n.ends_with("hc-00000009.jsonl")),
            "{left:?}"
        );
        let newest = archive.join(left.last().ok_or("no trace")?);
        let text = std::fs::read_to_string(newest)?;
        let actions: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .map(|v| v["action"].as_str().unwrap_or_default().to_owned())
            })
            .collect::<Result<_, _>>()?;
        assert_eq!(&actions[1..], ["AcquireDomainLock", "LoseDomainLockRace"]);
        match lazaret_runtime::replay::replay_text("loser", &text)? {
            lazaret_runtime::replay::Outcome::Conforms { steps, .. } => assert_eq!(steps, 2),
            lazaret_runtime::replay::Outcome::Diverged(d) => return Err(format!("{d:?}").into()),
        }
        Ok(())
    }

    /// A loser's own trace survives its pruning even when a clock that
    /// stepped back makes it sort oldest.
    #[test]
    fn a_losers_own_trace_is_never_pruned() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let own = dir.path().join("lost-00000000000000000001-hc-own.jsonl");
        std::fs::write(&own, "x")?;
        for i in 0..KEPT_LOSER_TRACES {
            let name = format!("lost-{:020}-hc-{i:08x}.jsonl", 1_000 + i);
            std::fs::write(dir.path().join(name), "x")?;
        }
        prune_oldest(dir.path(), "lost-", KEPT_LOSER_TRACES, &own)?;
        assert!(own.exists());
        assert_eq!(std::fs::read_dir(dir.path())?.count(), KEPT_LOSER_TRACES);
        assert!(!dir
            .path()
            .join(format!("lost-{:020}-hc-{:08x}.jsonl", 1_000, 0))
            .exists());
        Ok(())
    }

    #[test]
    fn a_trace_moves_under_the_archive() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(trace_name(3));
        let mut m = HcModel::new("hc-t".into(), 3, Routing::Unrouted, path.clone())?;
        let c = m.me();
        m.take(Action::AcquireDomainLock { c }, None)?;
        assert!(m.take(Action::StartGeneration { c }, None).is_err());
        let archive = dir.path().join("traces");
        m.archive(&archive);
        assert!(!path.exists());
        let text = std::fs::read_to_string(archive.join(trace_name(3)))?;
        assert_eq!(text.lines().count(), 2, "{text}");
        match lazaret_runtime::replay::replay_text("t", &text)? {
            lazaret_runtime::replay::Outcome::Conforms { steps, .. } => assert_eq!(steps, 1),
            other => panic!("{other:?}"),
        }
        Ok(())
    }
}
