//! Session processes in the running sandbox through non-detached
//! `runsc exec` (spec 3.4, FR-14, FR-15), and guest process-group control.
//!
//! The session client is `runsc [global] exec --process proc.json
//! --internal-pid-file FILE CID` with the PTY slave as its stdin, stdout and
//! stderr (never a regular file: HOST-NOTES.md). `proc.json` has
//! `"terminal": true`, the exact argv, `cwd` `/workspace`, empty capability
//! sets and `noNewPrivileges`. `--console-socket` is not used (FR-14).
//!
//! Guest identity (spec 3.4 acquisition step 3), as measured with runsc
//! 0.0~20240729:
//! - leader PID: the exec client writes the container-internal PID to
//!   `--internal-pid-file` once the process has started;
//! - group and start time: `/proc/<leader>/stat` read inside the exact
//!   container (fields 5 `pgrp`, 6 `session`, 22 `starttime`). gVisor makes
//!   every exec'd process the leader of a new session and process group, so
//!   `pgrp == session == pid`; anything else refuses admission.
//!
//! The guest tool is Lazaret's own static `lazaret-guest`
//! (`cli/init/lazaret_guest.rs`), bound read-only with the init at
//! `/.lazaret/sbin`: nothing of the image (no `/bin/sh`) takes part, so a
//! distroless image works and a replaced `/bin/sh` changes nothing recorded.
//! Observation is one tool run that reads every `/proc/<pid>/stat` (one
//! runsc client: under a fork bomb every runsc client is slow, and one
//! that meets the guest task ceiling fails fast).
//!
//! Group signals: `runsc kill` has no process-group mode (`--pid` signals
//! one process; a negative PID is refused with "PID (-1) must be
//! positive"; `--all` signals the whole container). So the group signal is
//! the tool's `kill(-PGID, SIG)` run through `runsc exec`, which resolves
//! the group inside the container's own PID namespace. Before each release
//! signal the leader is observed again and the signal is sent only while
//! its PID still holds the recorded start time.
//!
//! Not available: the terminal's foreground group. gVisor's `/proc/<pid>/stat`
//! reports `tty_nr` and `tpgid` as 0, so it cannot be read from the guest.
//! The one mechanism that reaches it is runsc's own forwarding: a signal
//! sent to a `runsc exec` client whose stdio is a PTY is delivered to the
//! foreground process group of that guest terminal (measured: SIGINT and
//! SIGWINCH to the exec client reached a `bash -c` job). With job control
//! (interactive bash) a foreground job runs in its own group, so only that
//! path makes Ctrl-C interrupt `sleep`; see docs/terminals.md.
mod guest;
mod process;

pub use guest::{
    classify, identify_and_classify, parse_stat_lines, GuestControl, GuestControlError, GuestStat,
    GuestTools, RealRunner, RunscRunner, GUEST_TOOL_NAME,
};
pub use process::{ExecProcess, ProcessSpecError};

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// How runsc is invoked for one Domain: an optional launcher prefix (for
/// example entering the Domain user namespace), the runsc binary, and the
/// global flags the sandbox was started with (`--root`, `--ignore-cgroups`,
/// `--network=...`). Built by the launch code; exec must match them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runsc {
    pub prefix: Vec<OsString>,
    pub runsc: PathBuf,
    pub global: Vec<OsString>,
}

/// A program and its arguments, ready for `Command` or the broker's
/// `TargetCommand`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    pub argv: Vec<OsString>,
    /// How long a short run may take before the runner kills it (`None`:
    /// a session client, which runs as long as its command).
    pub limit: Option<std::time::Duration>,
}

impl Runsc {
    fn base(&self) -> Vec<OsString> {
        let mut argv = self.prefix.clone();
        argv.push(self.runsc.clone().into_os_string());
        argv.extend(self.global.iter().cloned());
        argv
    }

    /// The non-detached session client (the PTY slave is its stdio).
    pub fn exec_session(
        &self,
        process_json: &Path,
        internal_pid_file: &Path,
        container: &str,
    ) -> Invocation {
        let mut argv = self.base();
        argv.extend([
            "exec".into(),
            "--process".into(),
            process_json.as_os_str().to_owned(),
            "--internal-pid-file".into(),
            internal_pid_file.as_os_str().to_owned(),
            container.into(),
        ]);
        Invocation { argv, limit: None }
    }

    /// A short guest tool run (pipes for stdio). It holds `CAP_KILL` (in
    /// every set; measured with runsc 0.0~20240729), so a release signal
    /// reaches group members that switched to another guest user; nothing
    /// else (PID 1's sets are empty, and exec processes start from them).
    pub fn exec_tool(
        &self,
        container: &str,
        tool_argv: &[String],
        limit: std::time::Duration,
    ) -> Invocation {
        let mut argv = self.base();
        argv.extend([
            "exec".into(),
            "--cap".into(),
            "CAP_KILL".into(),
            container.into(),
        ]);
        argv.extend(tool_argv.iter().map(OsString::from));
        Invocation {
            argv,
            limit: Some(limit),
        }
    }
}
