//! Where the mailbox service finds a session's terminal for a developer
//! prompt (spec 3.8, DX-4, FR-5: a prompt appears only on the requesting
//! session's own terminal). Each interactive session's terminal loop
//! registers one line for its Session ID while it runs; the service asks
//! on the line of the request's session and waits for the answer. A
//! session without a line (a piped session, or one already closing) has
//! no prompt: its request is denied.
//!
//! One prompt per session at a time: the service serves a session's
//! requests one after another, and the line holds one ask.
use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lazaret_runtime::escalation::prompt::{DecisionRefusal, PromptExpectation};
use lazaret_runtime::protocol::mailbox::DeveloperDecision;
use lazaret_runtime::records::ids::SessionId;
use lazaret_runtime::terminal::protocol::{EscalationPrompt, PromptClosing};

/// Wakes a terminal loop so it looks at its line (or at a withdrawal).
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// The answer a terminal loop gives the service.
#[derive(Debug)]
pub enum PromptAnswer {
    /// A decision that verified (`check_decision`).
    Decided(Box<DeveloperDecision>),
    /// What the client sent is not a valid decision: denied.
    Refused(DecisionRefusal),
    /// The terminal closed (its session's release began) before an answer.
    Closed,
}

/// One prompt as the terminal loop holds it.
#[derive(Debug)]
pub struct PromptAsk {
    pub prompt: EscalationPrompt,
    pub expect: PromptExpectation,
    reply: SyncSender<PromptAnswer>,
    withdrawn: Arc<Mutex<Option<PromptClosing>>>,
}

impl PromptAsk {
    /// Answers the service (once; a later answer is dropped).
    pub fn answer(&self, answer: PromptAnswer) {
        let _ = self.reply.try_send(answer);
    }

    /// Whether the service withdrew the prompt, and how it closed.
    pub fn withdrawn(&self) -> Option<PromptClosing> {
        self.withdrawn.lock().map(|w| *w).unwrap_or(None)
    }
}

/// The service's side of an open prompt.
pub struct PendingPrompt {
    reply: Receiver<PromptAnswer>,
    withdrawn: Arc<Mutex<Option<PromptClosing>>>,
    wake: Wake,
}

impl std::fmt::Debug for PendingPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingPrompt").finish_non_exhaustive()
    }
}

/// A prompt its service no longer waits for (it returned, failed or
/// panicked) is withdrawn, so the terminal never stays on the prompt.
impl Drop for PendingPrompt {
    fn drop(&mut self) {
        if let Ok(mut w) = self.withdrawn.lock() {
            w.get_or_insert(PromptClosing::Withdrawn);
        }
        (self.wake)();
    }
}

impl PendingPrompt {
    /// The answer, if one came within `limit`; a terminal loop that ended
    /// without answering is [`PromptAnswer::Closed`].
    pub fn wait(&self, limit: Duration) -> Option<PromptAnswer> {
        match self.reply.recv_timeout(limit) {
            Ok(answer) => Some(answer),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(PromptAnswer::Closed),
        }
    }

    /// Withdraws the prompt (`closing` says why); the terminal loop closes
    /// it and gives the terminal back to the sandbox.
    pub fn withdraw(&self, closing: PromptClosing) {
        if let Ok(mut w) = self.withdrawn.lock() {
            *w = Some(closing);
        }
        (self.wake)();
    }
}

struct Line {
    asks: SyncSender<PromptAsk>,
    wake: Wake,
}

/// The prompt lines of one generation's sessions.
pub struct PromptDesk {
    profile: String,
    lines: Mutex<HashMap<SessionId, Line>>,
}

impl std::fmt::Debug for PromptDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptDesk")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

/// A session's registered line; dropping it removes the line.
pub struct Registration {
    desk: Arc<PromptDesk>,
    session: SessionId,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration({})", self.session)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut lines) = self.desk.lines.lock() {
            lines.remove(&self.session);
        }
    }
}

impl PromptDesk {
    /// The desk of a generation of `profile` (named on every prompt).
    pub fn new(profile: String) -> Self {
        Self {
            profile,
            lines: Mutex::new(HashMap::new()),
        }
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// Registers `session`'s terminal: its asks arrive on the returned
    /// receiver, each followed by `wake`.
    pub fn register(
        self: &Arc<Self>,
        session: SessionId,
        wake: Wake,
    ) -> (Registration, Receiver<PromptAsk>) {
        let (asks, rx) = mpsc::sync_channel(1);
        if let Ok(mut lines) = self.lines.lock() {
            lines.insert(session, Line { asks, wake });
        }
        (
            Registration {
                desk: Arc::clone(self),
                session,
            },
            rx,
        )
    }

    /// Routes `prompt` to its session's terminal. `None` when the session
    /// has no terminal line, or its line is gone or already holds a prompt.
    pub fn ask(
        &self,
        prompt: EscalationPrompt,
        expect: PromptExpectation,
    ) -> Option<PendingPrompt> {
        let lines = self.lines.lock().ok()?;
        let line = lines.get(&prompt.session_id)?;
        let (reply, answers) = mpsc::sync_channel(1);
        let withdrawn = Arc::new(Mutex::new(None));
        line.asks
            .try_send(PromptAsk {
                prompt,
                expect,
                reply,
                withdrawn: Arc::clone(&withdrawn),
            })
            .ok()?;
        (line.wake)();
        Some(PendingPrompt {
            reply: answers,
            withdrawn,
            wake: Arc::clone(&line.wake),
        })
    }
}
