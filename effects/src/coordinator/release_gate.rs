//! Spec 3.4 session release, step 1 before step 2: no release signal
//! reaches a session's guest group before the terminal's durable
//! ReleaseIntent (the model's `CloseSession`) is committed. The session's
//! own thread decides that the release starts; the coordinator's loop owns
//! the Domain Store and the model. The gate asks the loop through the
//! session's report queue and, when the terminal machine says a signal may
//! follow, waits for the answer, which becomes the machine's next input.
//!
//! The wait ends without a bound of its own: the loop answers every
//! Releasing report it takes (`host.rs::session_report`, and `heard` for a
//! session that is over) or drops the answer when its step fails; it never
//! waits on a session thread, so it takes each report in turn; and it owns
//! its event queue, so when it returns (before the Domain's teardown) every
//! answer still queued goes with it. [`RECORD_BACKSTOP`] only bounds a
//! coordinator that is stuck.
use std::sync::mpsc::{sync_channel, Sender};
use std::time::Duration;

use lazaret_runtime::terminal::machine::Input;

use super::session_report::SessionReport;

/// How long a release waits for the coordinator's record at most: above
/// the longest step of the coordinator's loop, each of which is bounded
/// (a lost Runtime Supervisor's, which waits for the supervisor's exit and
/// then proves the runtime absent, about 50 s at worst). A release not
/// confirmed by then sends no release signal (the machine's
/// `ReleaseIntentUnconfirmed`): a leader still matching is left, with the
/// intent, to Domain teardown.
const RECORD_BACKSTOP: Duration = Duration::from_secs(90);

/// Where a session's gate stands.
#[derive(Debug)]
enum Asked {
    /// Nothing asked yet: the sender of the session's report queue.
    Not(Sender<SessionReport>),
    /// Asked without waiting (a release that sends no signal).
    InBackground,
    /// Asked and waited for: whether the coordinator confirmed it.
    Answered(bool),
}

/// One session's gate: the release intent is asked for once.
#[derive(Debug)]
pub struct ReleaseGate {
    asked: Asked,
    backstop: Duration,
}

impl ReleaseGate {
    /// A gate that asks through the session's report queue; the
    /// coordinator answers each [`SessionReport::Releasing`] on the sender
    /// it carries once ReleaseIntent is durable.
    pub fn new(ask: Sender<SessionReport>) -> Self {
        Self {
            asked: Asked::Not(ask),
            backstop: RECORD_BACKSTOP,
        }
    }

    /// The effect of the terminal machine's `RecordReleaseIntent {
    /// awaited }` (spec 3.4 release step 1): awaited, the coordinator's
    /// answer, which is the machine's next input (`ReleaseIntentConfirmed`
    /// only when the loop said the intent is durable); not awaited (the
    /// release collects at once and sends no signal, so step 1 has nothing
    /// to precede), the intent is asked for without waiting, and the loop
    /// records it before it handles the session's end, which comes later
    /// on the same queue.
    pub fn record_release_intent(&mut self, awaited: bool) -> Option<Input> {
        if !awaited {
            self.record_in_background();
            return None;
        }
        Some(if self.record() {
            Input::ReleaseIntentConfirmed
        } else {
            Input::ReleaseIntentUnconfirmed
        })
    }

    fn record_in_background(&mut self) {
        let Asked::Not(ask) = &self.asked else {
            return;
        };
        let (tx, _answer_not_awaited) = sync_channel(1);
        if ask.send(SessionReport::Releasing(tx)).is_err() {
            tracing::warn!("the session's ReleaseIntent could not be asked for");
        }
        self.asked = Asked::InBackground;
    }

    /// Whether the coordinator confirmed the durable ReleaseIntent. Asks
    /// once; later calls return the first answer, and an intent asked for
    /// only in the background was never confirmed.
    fn record(&mut self) -> bool {
        let ask = match &self.asked {
            Asked::Answered(confirmed) => return *confirmed,
            Asked::InBackground => return false,
            Asked::Not(ask) => ask,
        };
        let (tx, rx) = sync_channel(1);
        let confirmed = ask.send(SessionReport::Releasing(tx)).is_ok()
            && rx.recv_timeout(self.backstop).is_ok();
        self.asked = Asked::Answered(confirmed);
        if !confirmed {
            tracing::warn!(
                "the session's ReleaseIntent was not confirmed; no release signal will be sent"
            );
        }
        confirmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Receiver};
    use std::time::Instant;

    /// A coordinator loop that answers each Releasing report after `delay`
    /// and counts them.
    fn coordinator(
        requests: Receiver<SessionReport>,
        delay: Duration,
    ) -> std::thread::JoinHandle<usize> {
        std::thread::spawn(move || {
            let mut n = 0;
            while let Ok(SessionReport::Releasing(ack)) = requests.recv() {
                n += 1;
                std::thread::sleep(delay);
                ack.send(()).ok();
            }
            n
        })
    }

    /// A gate waiting at most `backstop`, asked twice for an awaited
    /// intent by a coordinator that answers after `delay`: both answers,
    /// and how many times the coordinator was asked.
    fn asked_twice(delay: Duration, backstop: Duration) -> ([Option<Input>; 2], Option<usize>) {
        let (ask, requests) = channel::<SessionReport>();
        let answered = coordinator(requests, delay);
        let mut gate = ReleaseGate::new(ask);
        gate.backstop = backstop;
        let answers = [
            gate.record_release_intent(true),
            gate.record_release_intent(true),
        ];
        drop(gate);
        (answers, answered.join().ok())
    }

    #[test]
    fn an_awaited_intent_is_confirmed_once_and_asked_once() {
        let confirmed = Some(Input::ReleaseIntentConfirmed);
        assert_eq!(
            asked_twice(Duration::ZERO, RECORD_BACKSTOP),
            ([confirmed.clone(), confirmed], Some(1))
        );
    }

    /// A coordinator busy longer than a short bound (the gate once gave up
    /// after 5 s) is waited for.
    #[test]
    fn a_busy_coordinator_is_waited_for() {
        let confirmed = Some(Input::ReleaseIntentConfirmed);
        assert_eq!(
            asked_twice(Duration::from_millis(5_500), RECORD_BACKSTOP),
            ([confirmed.clone(), confirmed], Some(1))
        );
    }

    /// Past the backstop the intent is unconfirmed, and asked again the
    /// first answer stands: nothing is asked twice.
    #[test]
    fn an_answer_after_the_backstop_is_unconfirmed_and_stays_so() {
        let unconfirmed = Some(Input::ReleaseIntentUnconfirmed);
        assert_eq!(
            asked_twice(Duration::from_millis(400), Duration::from_millis(50)),
            ([unconfirmed.clone(), unconfirmed], Some(1))
        );
    }

    #[test]
    fn a_release_without_signals_asks_once_and_does_not_wait() {
        let (ask, requests) = channel::<SessionReport>();
        let mut gate = ReleaseGate::new(ask);
        assert_eq!(gate.record_release_intent(false), None);
        // Asked exactly once; nobody answered, and nothing waited.
        assert!(matches!(
            requests.try_recv(),
            Ok(SessionReport::Releasing(_))
        ));
        // An intent only asked for in the background was never confirmed.
        assert_eq!(
            gate.record_release_intent(true),
            Some(Input::ReleaseIntentUnconfirmed)
        );
        assert!(requests.try_recv().is_err());
    }

    #[test]
    fn a_coordinator_that_is_gone_or_drops_the_answer_does_not_hold_the_release() {
        let (ask, requests) = channel::<SessionReport>();
        drop(requests);
        let started = Instant::now();
        assert_eq!(
            ReleaseGate::new(ask).record_release_intent(true),
            Some(Input::ReleaseIntentUnconfirmed)
        );
        // Asked but never answered: the loop's step failed and dropped it.
        let (ask, requests) = channel::<SessionReport>();
        let dropper = std::thread::spawn(move || drop(requests.recv()));
        assert_eq!(
            ReleaseGate::new(ask).record_release_intent(true),
            Some(Input::ReleaseIntentUnconfirmed)
        );
        dropper.join().ok();
        // Neither waited: both answers are known at once.
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
