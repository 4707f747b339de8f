//! Observing and signalling the session's guest process group inside the
//! exact runsc container (spec 3.4 acquisition step 3, release step 2).
use super::{Invocation, Runsc};
use crate::broker::transient::{self, Limits};
use lazaret_runtime::records::terminal::GuestProcessIdentity;
use lazaret_runtime::terminal::machine::{GroupObservation, GuestSignal};
use std::io;
use std::process::{Command, Output};
use std::time::Duration;

/// Runs one short runsc client and collects its output (pipes only).
pub trait RunscRunner {
    fn run(&self, invocation: &Invocation) -> io::Result<Output>;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct RealRunner;

impl RunscRunner for RealRunner {
    /// A transient child of the broker (`crate::broker::transient`), killed
    /// past the invocation's limit.
    fn run(&self, invocation: &Invocation) -> io::Result<Output> {
        let (program, args) = invocation
            .argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty invocation"))?;
        let limit = invocation.limit.unwrap_or(RELEASE_LIMIT);
        transient::output(Command::new(program).args(args), b"", Limits::of(limit))
            .map_err(io::Error::other)
    }
}

/// The file name of the Lazaret-owned static guest tool (`cli/init/
/// lazaret_guest.rs`), written next to `lazaret-init` and bound read-only at
/// [`lazaret_runtime::bundle::INIT_DIR`].
pub const GUEST_TOOL_NAME: &str = "lazaret-guest";

/// The guest program the observation and signal steps run: Lazaret's own
/// static tool, never anything from the image (no shell: a distroless image
/// works, and a replaced `/bin/sh` changes nothing Lazaret observes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestTools {
    /// Its path inside the container.
    pub tool: String,
}

impl Default for GuestTools {
    fn default() -> Self {
        Self {
            tool: format!("{}/{GUEST_TOOL_NAME}", lazaret_runtime::bundle::INIT_DIR),
        }
    }
}

/// Fields of one guest `/proc/<pid>/stat` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestStat {
    pub pid: u32,
    pub pgrp: u32,
    pub session: u32,
    pub start_time: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum GuestControlError {
    #[error("cannot run {what} ({argv}): {source}")]
    Spawn {
        what: &'static str,
        argv: String,
        source: io::Error,
    },
    #[error("{what} failed with {status}: {stderr}")]
    Failed {
        what: &'static str,
        status: String,
        stderr: String,
    },
    #[error("cannot parse {what} output {line:?}: expected {expected}")]
    Parse {
        what: &'static str,
        line: String,
        expected: &'static str,
    },
    #[error("guest process {pid} is absent from container {container}")]
    Absent { pid: u32, container: String },
    #[error("guest process {pid} is not the leader of its own session and process group (pgrp {pgrp}, session {session})")]
    NotGroupLeader { pid: u32, pgrp: u32, session: u32 },
}

/// Parses `/proc/<pid>/stat` lines. The command name may contain spaces and
/// parentheses, so fields are taken after the last `)`.
pub fn parse_stat_lines(text: &str) -> Result<Vec<GuestStat>, GuestControlError> {
    let bad = |line: &str| GuestControlError::Parse {
        what: "guest /proc/<pid>/stat",
        line: line.chars().take(200).collect(),
        expected: "pid (comm) state ppid pgrp session tty_nr tpgid ... starttime",
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (head, tail) = line.rsplit_once(')').ok_or_else(|| bad(line))?;
        let pid = head
            .split_once(" (")
            .and_then(|(p, _)| p.trim().parse().ok())
            .ok_or_else(|| bad(line))?;
        // After ')': state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8)
        // ... starttime(22), so index = field - 3.
        let fields: Vec<&str> = tail.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).copied().ok_or_else(|| bad(line));
        out.push(GuestStat {
            pid,
            pgrp: field(5)?.parse().map_err(|_| bad(line))?,
            session: field(6)?.parse().map_err(|_| bad(line))?,
            start_time: field(22)?.parse().map_err(|_| bad(line))?,
        });
    }
    Ok(out)
}

/// Classifies the recorded leader and group from one snapshot of stats.
pub fn classify(recorded: &GuestProcessIdentity, stats: &[GuestStat]) -> GroupObservation {
    match stats.iter().find(|s| s.pid == recorded.leader_pid) {
        Some(s)
            if s.start_time == recorded.leader_start_time
                && s.pgrp == recorded.process_group_id =>
        {
            GroupObservation::LeaderMatches
        }
        Some(_) => GroupObservation::Mismatch,
        None if stats.iter().any(|s| s.pgrp == recorded.process_group_id) => {
            GroupObservation::LeaderAbsentGroupRemains
        }
        None => GroupObservation::Empty,
    }
}

/// A piped session knows its leader's PID from the start (runsc's
/// `--internal-pid-file`) but takes the rest of its identity at its first
/// observation (no guest tool run on the session's start). While the exec
/// client runs, the process with that PID is the leader (it cannot have been
/// reused); gVisor makes it the leader of its own session and group. From
/// one observation: the identity, when the leader is alive and leads its
/// group, and what the observation found.
///
/// - the PID holds a session and group leader: that is the leader
///   (`LeaderMatches`);
/// - the PID holds anything else: another process reused it (`Mismatch`);
/// - the PID is free: members of the group it led remain
///   (`LeaderAbsentGroupRemains`) or none (`Empty`).
pub fn identify_and_classify(
    leader_pid: u32,
    stats: &[GuestStat],
) -> (Option<GuestProcessIdentity>, GroupObservation) {
    match stats.iter().find(|s| s.pid == leader_pid) {
        Some(s) if s.pgrp == s.pid && s.session == s.pid => (
            Some(GuestProcessIdentity {
                leader_pid,
                leader_start_time: s.start_time,
                process_group_id: s.pgrp,
            }),
            GroupObservation::LeaderMatches,
        ),
        Some(_) => (None, GroupObservation::Mismatch),
        None if stats.iter().any(|s| s.pgrp == leader_pid) => {
            (None, GroupObservation::LeaderAbsentGroupRemains)
        }
        None => (None, GroupObservation::Empty),
    }
}

/// How long the leader identity read may take (acquisition step 3).
const IDENTITY_LIMIT: Duration = Duration::from_secs(10);
/// How long one release observation or signal may take. Normally 30-60 ms;
/// a guest that saturates the host (a fork bomb) makes every runsc client
/// slow, and a release step that times out fails closed (a mismatch or an
/// unsent signal leaves the group to Domain teardown), which then comes
/// sooner.
const RELEASE_LIMIT: Duration = Duration::from_secs(3);

/// Guest process-group control for one exact container.
#[derive(Debug)]
pub struct GuestControl<'r, R: RunscRunner> {
    runner: &'r R,
    runsc: Runsc,
    tools: GuestTools,
    container: String,
}

impl<'r, R: RunscRunner> GuestControl<'r, R> {
    pub fn new(runner: &'r R, runsc: Runsc, tools: GuestTools, container: String) -> Self {
        Self {
            runner,
            runsc,
            tools,
            container,
        }
    }

    fn run(&self, what: &'static str, inv: &Invocation) -> Result<Output, GuestControlError> {
        let output = self
            .runner
            .run(inv)
            .map_err(|source| GuestControlError::Spawn {
                what,
                argv: format!("{:?}", inv.argv),
                source,
            })?;
        if !output.status.success() {
            return Err(GuestControlError::Failed {
                what,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr)
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        Ok(output)
    }

    fn tool(&self, limit: Duration, args: impl IntoIterator<Item = String>) -> Invocation {
        let argv: Vec<String> = std::iter::once(self.tools.tool.clone())
            .chain(args)
            .collect();
        self.runsc.exec_tool(&self.container, &argv, limit)
    }

    /// Guest stats of `pids` (absent PIDs are skipped).
    pub fn stats(&self, pids: &[u32]) -> Result<Vec<GuestStat>, GuestControlError> {
        let inv = self.tool(
            IDENTITY_LIMIT,
            std::iter::once("stat".to_owned()).chain(pids.iter().map(u32::to_string)),
        );
        let out = self.run("guest stat", &inv)?;
        parse_stat_lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// Guest stats of every process in the container, in one tool run.
    pub fn all_stats(&self) -> Result<Vec<GuestStat>, GuestControlError> {
        let inv = self.tool(RELEASE_LIMIT, ["stat".to_owned()]);
        let out = self.run("guest stat", &inv)?;
        parse_stat_lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// Acquisition step 3: the leader's identity. It must lead its own
    /// session and group.
    pub fn leader_identity(
        &self,
        leader_pid: u32,
    ) -> Result<GuestProcessIdentity, GuestControlError> {
        let stat = self
            .stats(&[leader_pid])?
            .into_iter()
            .find(|s| s.pid == leader_pid)
            .ok_or_else(|| GuestControlError::Absent {
                pid: leader_pid,
                container: self.container.clone(),
            })?;
        if stat.pgrp != stat.pid || stat.session != stat.pid {
            return Err(GuestControlError::NotGroupLeader {
                pid: stat.pid,
                pgrp: stat.pgrp,
                session: stat.session,
            });
        }
        Ok(GuestProcessIdentity {
            leader_pid,
            leader_start_time: stat.start_time,
            process_group_id: stat.pgrp,
        })
    }

    /// The observation the terminal machine asks for with `ObserveGroup`.
    /// A failed observation is a mismatch (fail closed).
    pub fn observe(&self, recorded: &GuestProcessIdentity) -> GroupObservation {
        let observed = self.all_stats();
        match observed {
            Ok(stats) => classify(recorded, &stats),
            Err(e) => {
                tracing::warn!(error = %e, "guest group observation failed; treating as mismatch");
                GroupObservation::Mismatch
            }
        }
    }

    /// The first observation of a piped session, which knows only its
    /// leader's PID ([`identify_and_classify`]). A failed observation is a
    /// mismatch.
    pub fn observe_by_pid(
        &self,
        leader_pid: u32,
    ) -> (Option<GuestProcessIdentity>, GroupObservation) {
        match self.all_stats() {
            Ok(stats) => identify_and_classify(leader_pid, &stats),
            Err(e) => {
                tracing::warn!(error = %e, "guest group observation failed; treating as mismatch");
                (None, GroupObservation::Mismatch)
            }
        }
    }

    /// Sends `signal` to the recorded guest process group. The release
    /// order calls this only after an observation found the leader matching.
    pub fn signal(
        &self,
        recorded: &GuestProcessIdentity,
        signal: GuestSignal,
    ) -> Result<(), GuestControlError> {
        let pgid = recorded.process_group_id;
        let inv = self.tool(
            RELEASE_LIMIT,
            [
                "signal".to_owned(),
                signal.number().to_string(),
                pgid.to_string(),
            ],
        );
        self.run("guest group signal", &inv).map(|_| ())
    }
}
