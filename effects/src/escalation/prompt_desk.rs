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
//!
//! A request also holds its session's terminal through a
//! [`TerminalLease`] (spec 3.4: "During `Prompt` or `HostProcess` routing
//! the Host Coordinator stops reading the PTY master"): the terminal loop
//! stops reading the PTY master while the lease asks [`TerminalUse::Held`]
//! (the model's `PauseTerminalForwarding`), routes the terminal to the
//! host process for [`TerminalUse::HostProcess`] (`StartHostProcess`:
//! the client's input, resizes and signals are refused) and forwards again
//! for [`TerminalUse::Forwarding`] (`ResumeTerminalForwarding`). A lease
//! that is dropped while it holds the terminal gives it back.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

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

/// How a prompt stands between its service and its terminal loop. An
/// answer and a withdrawal exclude each other: whichever comes first is
/// the prompt's ending, so the `PromptClosed` the client hears and the
/// outcome the service records always agree.
#[derive(Debug)]
enum Ending {
    Open,
    /// The terminal loop answered; the service has not taken it yet.
    Answered(PromptAnswer),
    /// The service took the answer.
    Taken,
    /// The service withdrew the prompt first.
    Withdrawn(PromptClosing),
}

/// One prompt's ending, shared by its ask and its pending side.
#[derive(Debug)]
struct Exchange {
    ending: Mutex<Ending>,
    changed: Condvar,
}

impl Exchange {
    fn new() -> Self {
        Self {
            ending: Mutex::new(Ending::Open),
            changed: Condvar::new(),
        }
    }

    /// The ending; no code that can panic runs while it is being changed,
    /// so a holder that panicked left it whole.
    fn ending(&self) -> MutexGuard<'_, Ending> {
        self.ending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The terminal loop's answer; `Err` with the withdrawal that came
    /// first. A second answer is dropped.
    fn answer(&self, answer: PromptAnswer) -> Result<(), PromptClosing> {
        let mut ending = self.ending();
        match *ending {
            Ending::Open => {
                *ending = Ending::Answered(answer);
                drop(ending);
                self.changed.notify_all();
                Ok(())
            }
            Ending::Withdrawn(closing) => Err(closing),
            Ending::Answered(_) | Ending::Taken => Ok(()),
        }
    }

    fn withdrawn(&self) -> Option<PromptClosing> {
        match *self.ending() {
            Ending::Withdrawn(closing) => Some(closing),
            Ending::Open | Ending::Answered(_) | Ending::Taken => None,
        }
    }

    /// Takes the answer once one came, waiting at most `limit`.
    fn wait(&self, limit: Duration) -> Option<PromptAnswer> {
        let deadline = Instant::now() + limit;
        let mut ending = self.ending();
        // Bounded by the deadline: every wait ends by it.
        loop {
            match std::mem::replace(&mut *ending, Ending::Taken) {
                Ending::Answered(answer) => return Some(answer),
                Ending::Open => *ending = Ending::Open,
                done @ (Ending::Taken | Ending::Withdrawn(_)) => {
                    *ending = done;
                    return None;
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            ending = self
                .changed
                .wait_timeout(ending, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Withdraws an open prompt; an answer that came first is taken and
    /// returned instead.
    fn withdraw(&self, closing: PromptClosing) -> Option<PromptAnswer> {
        let mut ending = self.ending();
        match std::mem::replace(&mut *ending, Ending::Taken) {
            Ending::Open => {
                *ending = Ending::Withdrawn(closing);
                None
            }
            Ending::Answered(answer) => Some(answer),
            done @ (Ending::Taken | Ending::Withdrawn(_)) => {
                *ending = done;
                None
            }
        }
    }
}

/// One prompt as the terminal loop holds it.
#[derive(Debug)]
pub struct PromptAsk {
    pub prompt: EscalationPrompt,
    pub expect: PromptExpectation,
    exchange: Arc<Exchange>,
}

impl PromptAsk {
    /// Answers the service, unless it withdrew the prompt first: then
    /// the withdrawal is how the prompt closed, and the answer is dropped.
    /// A second answer is dropped too.
    pub fn answer(&self, answer: PromptAnswer) -> Result<(), PromptClosing> {
        self.exchange.answer(answer)
    }

    /// Whether the service withdrew the prompt, and how it closed.
    pub fn withdrawn(&self) -> Option<PromptClosing> {
        self.exchange.withdrawn()
    }
}

/// A prompt whose terminal loop let go of it without answering (the loop
/// ended, or the ask never reached it) is [`PromptAnswer::Closed`].
impl Drop for PromptAsk {
    fn drop(&mut self) {
        let _ = self.answer(PromptAnswer::Closed);
    }
}

/// The service's side of an open prompt.
pub struct PendingPrompt {
    exchange: Arc<Exchange>,
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
        let _ = self.withdraw(PromptClosing::Withdrawn);
    }
}

impl PendingPrompt {
    /// The answer, if one came within `limit`; a terminal loop that ended
    /// without answering is [`PromptAnswer::Closed`].
    pub fn wait(&self, limit: Duration) -> Option<PromptAnswer> {
        self.exchange.wait(limit)
    }

    /// Withdraws the prompt (`closing` says why); the terminal loop closes
    /// it and gives the terminal back to the sandbox. When the terminal
    /// loop answered first, nothing is withdrawn: the answer is returned,
    /// and it is how the prompt closed for the client.
    #[must_use = "an answer that came first is how the prompt closed"]
    pub fn withdraw(&self, closing: PromptClosing) -> Option<PromptAnswer> {
        let taken = self.exchange.withdraw(closing);
        (self.wake)();
        taken
    }
}

struct Line {
    asks: SyncSender<PromptAsk>,
    wake: Wake,
    hold: Arc<TerminalHold>,
}

/// What a request wants of its session's terminal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TerminalUse {
    /// The PTY master is read and forwarded (the model's `ptyFwd`).
    #[default]
    Forwarding,
    /// The PTY master is not read; the route is the sandbox's (a prompt or
    /// host process route goes back to it once no prompt is open or
    /// closing).
    Held,
    /// The `HostProcess` route: held, and the client's terminal events
    /// refused.
    HostProcess,
}

/// What a request's lease wants and what its terminal loop applied.
#[derive(Debug, Default)]
struct HoldState {
    wanted: TerminalUse,
    /// Bumped by every change the lease asks.
    serial: u64,
    /// The last serial the terminal loop applied.
    applied: u64,
    /// The terminal loop has ended.
    gone: bool,
}

/// Shared by a session's terminal loop and the lease of the request
/// that holds it.
#[derive(Debug, Default)]
pub struct TerminalHold {
    state: Mutex<HoldState>,
    changed: Condvar,
}

impl TerminalHold {
    /// For the terminal loop: what the lease wants, with its serial, when
    /// it changed since the loop last applied it.
    pub fn pending(&self) -> Option<(TerminalUse, u64)> {
        let state = self.state.lock().ok()?;
        (state.applied != state.serial).then_some((state.wanted, state.serial))
    }

    /// For the terminal loop: `serial` is applied.
    pub fn applied(&self, serial: u64) {
        if let Ok(mut state) = self.state.lock() {
            state.applied = state.applied.max(serial);
        }
        self.changed.notify_all();
    }

    fn end(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.gone = true;
        }
        self.changed.notify_all();
    }

    fn ask(&self, wanted: TerminalUse) -> Option<u64> {
        let mut state = self.state.lock().ok()?;
        state.wanted = wanted;
        state.serial += 1;
        Some(state.serial)
    }

    /// Waits until `serial` is applied. A terminal loop may be busy for a
    /// while (a guest observation, a signal through runsc): it is waited
    /// for while `still` holds (the session is served), at most `limit`.
    /// False when the loop ended, `still` stopped holding or `limit`
    /// passed first.
    fn wait(&self, serial: u64, still: &dyn Fn() -> bool, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        // Bounded by the deadline: every wait ends by it.
        loop {
            if state.applied >= serial {
                return true;
            }
            if state.gone {
                return false;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            match self.changed.wait_timeout(state, left.min(STILL_POLL)) {
                Ok((next, _)) => state = next,
                Err(_) => return false,
            }
            if state.applied < serial && !still() {
                return false;
            }
        }
    }
}

/// A request's hold on its session's terminal (see the module comment).
pub struct TerminalLease {
    hold: Arc<TerminalHold>,
    wake: Wake,
    /// The last use this lease asked is not forwarding: dropped, it must
    /// give the terminal back.
    taken: AtomicBool,
}

impl std::fmt::Debug for TerminalLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalLease")
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

/// How often a wait for the terminal loop asks whether its session is
/// still served.
const STILL_POLL: Duration = Duration::from_millis(50);

impl TerminalLease {
    /// Asks for `wanted` and waits until the terminal loop applied it,
    /// while `still` holds and at most `limit`; false when the terminal
    /// ended, `still` stopped holding, or it did not apply it in time.
    pub fn set(&self, wanted: TerminalUse, still: &dyn Fn() -> bool, limit: Duration) -> bool {
        let Some(serial) = self.hold.ask(wanted) else {
            return false;
        };
        self.taken
            .store(wanted != TerminalUse::Forwarding, Ordering::SeqCst);
        (self.wake)();
        self.hold.wait(serial, still, limit)
    }
}

/// A lease its request no longer holds (it ended, failed or panicked)
/// gives the terminal back, so it never stays held. A lease that never
/// took the terminal, or already gave it back, asks nothing: the terminal
/// loop sees no change it did not make.
impl Drop for TerminalLease {
    fn drop(&mut self) {
        if self.taken.load(Ordering::SeqCst) && self.hold.ask(TerminalUse::Forwarding).is_some() {
            (self.wake)();
        }
    }
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
    hold: Arc<TerminalHold>,
}

impl Registration {
    /// What a request holding this terminal wants of it.
    pub fn hold(&self) -> &Arc<TerminalHold> {
        &self.hold
    }
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
        self.hold.end();
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
        let hold = Arc::new(TerminalHold::default());
        if let Ok(mut lines) = self.lines.lock() {
            lines.insert(
                session,
                Line {
                    asks,
                    wake,
                    hold: Arc::clone(&hold),
                },
            );
        }
        (
            Registration {
                desk: Arc::clone(self),
                session,
                hold,
            },
            rx,
        )
    }

    /// `session`'s terminal for one request; `None` when it has none (a
    /// piped session, or one already closing): there is no PTY to hold.
    pub fn lease(&self, session: SessionId) -> Option<TerminalLease> {
        let lines = self.lines.lock().ok()?;
        let line = lines.get(&session)?;
        Some(TerminalLease {
            hold: Arc::clone(&line.hold),
            wake: Arc::clone(&line.wake),
            taken: AtomicBool::new(false),
        })
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
        let exchange = Arc::new(Exchange::new());
        line.asks
            .try_send(PromptAsk {
                prompt,
                expect,
                exchange: Arc::clone(&exchange),
            })
            .ok()?;
        (line.wake)();
        Some(PendingPrompt {
            exchange,
            wake: Arc::clone(&line.wake),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const LONG: Duration = Duration::from_secs(10);

    /// An answer and a withdrawal exclude each other: the terminal loop
    /// learns a withdrawal that came first (and tells the client that),
    /// the service takes an answer that came first instead of withdrawing.
    #[test]
    fn a_prompt_ends_by_its_answer_or_its_withdrawal_never_both() {
        let refused = || PromptAnswer::Refused(DecisionRefusal::OtherSession);
        // Withdrawn first: the answer is dropped and the service waits
        // for nothing.
        let x = Exchange::new();
        assert!(x.withdraw(PromptClosing::TimedOut).is_none());
        assert_eq!(x.withdrawn(), Some(PromptClosing::TimedOut));
        assert_eq!(x.answer(refused()), Err(PromptClosing::TimedOut));
        assert!(x.wait(Duration::ZERO).is_none());
        // Answered first: the withdrawal takes the answer, and the loop
        // never sees a withdrawal.
        let x = Exchange::new();
        assert_eq!(x.answer(refused()), Ok(()));
        assert!(matches!(
            x.withdraw(PromptClosing::TimedOut),
            Some(PromptAnswer::Refused(DecisionRefusal::OtherSession))
        ));
        assert_eq!(x.withdrawn(), None);
        assert!(x.wait(Duration::ZERO).is_none(), "taken once");
        assert!(x.withdraw(PromptClosing::Withdrawn).is_none());
        assert_eq!(x.withdrawn(), None);
        // A second answer is dropped; the first is the one taken.
        let x = Exchange::new();
        assert_eq!(x.answer(PromptAnswer::Closed), Ok(()));
        assert_eq!(x.answer(refused()), Ok(()));
        assert!(matches!(x.wait(Duration::ZERO), Some(PromptAnswer::Closed)));
        // The service waits for an answer from another thread, within its
        // limit, and not past it.
        let x = Arc::new(Exchange::new());
        let t = Instant::now();
        assert!(x.wait(Duration::from_millis(50)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
        let loop_side = Arc::clone(&x);
        let answering = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            loop_side.answer(refused())
        });
        assert!(matches!(x.wait(LONG), Some(PromptAnswer::Refused(_))));
        assert_eq!(answering.join().expect("the loop"), Ok(()));
    }

    /// A lease waits for its terminal loop to apply what it asks, gives
    /// up at once when its session is no longer served or its terminal
    /// ended, and asks for forwarding again when dropped.
    #[test]
    fn a_lease_waits_for_its_terminal_and_gives_it_back_when_dropped() {
        let desk = Arc::new(PromptDesk::new("agent".into()));
        let session = SessionId([1; 16]);
        assert!(
            desk.lease(session).is_none(),
            "no terminal, nothing to hold"
        );
        let (line, _asks) = desk.register(session, Arc::new(|| {}));
        let lease = desk.lease(session).expect("a lease");
        let hold = Arc::clone(line.hold());
        let busy = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let (wanted, serial) = hold.pending().expect("asked");
            hold.applied(serial);
            wanted
        });
        let t = Instant::now();
        assert!(lease.set(TerminalUse::Held, &|| true, LONG));
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(busy.join().expect("the loop"), TerminalUse::Held);
        assert_eq!(line.hold().pending(), None, "applied");
        // A session no longer served: no wait for a loop that never
        // applies.
        let t = Instant::now();
        assert!(!lease.set(TerminalUse::HostProcess, &|| false, LONG));
        assert!(t.elapsed() < LONG);
        drop(lease);
        assert_eq!(
            line.hold().pending().map(|(wanted, _)| wanted),
            Some(TerminalUse::Forwarding)
        );
        // A lease that never took the terminal, or gave it back, asks
        // nothing when dropped.
        if let Some((_, serial)) = line.hold().pending() {
            line.hold().applied(serial);
        }
        drop(desk.lease(session).expect("a lease"));
        assert_eq!(line.hold().pending(), None, "never taken");
        let lease = desk.lease(session).expect("a lease");
        let hold = Arc::clone(line.hold());
        let applier = std::thread::spawn(move || {
            for _ in 0..2 {
                let deadline = Instant::now() + LONG;
                while hold.pending().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if let Some((_, serial)) = hold.pending() {
                    hold.applied(serial);
                }
            }
        });
        assert!(lease.set(TerminalUse::Held, &|| true, LONG));
        assert!(lease.set(TerminalUse::Forwarding, &|| true, LONG));
        applier.join().expect("the loop");
        drop(lease);
        assert_eq!(line.hold().pending(), None, "given back already");
        // A terminal that ended.
        let lease = desk.lease(session).expect("a lease");
        drop(line);
        assert!(desk.lease(session).is_none());
        let t = Instant::now();
        assert!(!lease.set(TerminalUse::Held, &|| true, LONG));
        assert!(t.elapsed() < LONG);
    }
}
