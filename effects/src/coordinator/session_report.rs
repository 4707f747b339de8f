//! What a session's own threads tell the coordinator's loop: its guest
//! identity (spec 3.4 acquisition step 4, the Running record), the start of
//! its release (release step 1, the durable ReleaseIntent) and its end
//! (release step 3, Clean or retained).
//!
//! Every report of one session travels on one queue, so the loop handles
//! them in the order they were sent: a release's intent is never handled
//! after that release's end. The loop also checks that the slot a report
//! names still serves the session that sent it, so a late report (a
//! guest identity read after its release ended, a release whose
//! acknowledgement timed out) never reaches the next session of that slot.
use std::sync::mpsc::SyncSender;

use super::session_release::ReleaseOutcome;
use super::terminal_session::TerminalEvidence;

/// One report of one session, in the order its threads sent them.
#[derive(Debug)]
pub enum SessionReport {
    /// The PTY and the guest leader identity are known (interactive
    /// sessions): answered `true` once the terminal's Running record is
    /// durable (the model's RegisterSession), `false` when the session
    /// will not run (its release came first).
    Running {
        evidence: TerminalEvidence,
        registered: SyncSender<bool>,
    },
    /// The release starts: its ReleaseIntent must be durable (answered on
    /// the sender) before any release signal.
    Releasing(SyncSender<()>),
    /// The session is over (exec client reaped, PTY closed), with how its
    /// release ended.
    Ended(ReleaseOutcome),
}
