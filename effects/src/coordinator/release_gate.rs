//! Spec 3.4 session release, step 1 before step 2: the session terminal's
//! durable ReleaseIntent (the model's `CloseSession`) is committed before any
//! release signal reaches the session's guest or exec client. The session's
//! own thread decides that the release starts; the coordinator's loop owns
//! the Domain Store and the model. The gate asks the loop and waits.
use std::sync::mpsc::{sync_channel, Sender};
use std::time::Duration;

use super::session_report::SessionReport;

/// How long a release waits for the coordinator's record. The loop answers
/// at once unless the coordinator is stuck or gone; the release then goes
/// on without any release signal (the terminal machine's
/// `IntentUnconfirmed`) and keeps its release intent for Domain teardown.
const RECORD_TIMEOUT: Duration = Duration::from_secs(5);

/// One session's gate: the first [`ReleaseGate::record`] asks, later ones
/// return at once.
#[derive(Debug)]
pub struct ReleaseGate {
    ask: Option<Sender<SessionReport>>,
}

impl ReleaseGate {
    /// A gate that asks through the session's report queue; the
    /// coordinator answers each [`SessionReport::Releasing`] on the sender
    /// it carries once ReleaseIntent is durable.
    pub fn new(ask: Sender<SessionReport>) -> Self {
        Self { ask: Some(ask) }
    }

    /// Asks for the durable ReleaseIntent without waiting: for a release
    /// that sends no signal (the guest completed by itself), where step 1
    /// has nothing to precede. The coordinator's loop records it before it
    /// handles the session's end, which comes later on the same queue.
    pub fn record_in_background(&mut self) {
        if let Some(ask) = self.ask.take() {
            let (tx, _answer_not_awaited) = sync_channel(1);
            if ask.send(SessionReport::Releasing(tx)).is_err() {
                tracing::warn!("the session's ReleaseIntent could not be asked for");
            }
        }
    }

    /// Asks for the durable ReleaseIntent and waits for it (bounded).
    /// Whether it was confirmed.
    pub fn record(&mut self) -> bool {
        let Some(ask) = self.ask.take() else {
            return true;
        };
        let (tx, rx) = sync_channel(1);
        let confirmed = ask.send(SessionReport::Releasing(tx)).is_ok()
            && rx.recv_timeout(RECORD_TIMEOUT).is_ok();
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
    use std::sync::mpsc::channel;

    #[test]
    fn the_first_record_waits_for_the_answer_and_later_ones_do_not_ask() {
        let (ask, requests) = channel::<SessionReport>();
        let answered = std::thread::spawn(move || {
            let mut n = 0;
            while let Ok(SessionReport::Releasing(ack)) = requests.recv() {
                n += 1;
                ack.send(()).ok();
            }
            n
        });
        let mut gate = ReleaseGate::new(ask);
        assert!(gate.record());
        assert!(gate.record());
        drop(gate);
        assert_eq!(answered.join().ok(), Some(1));
    }

    #[test]
    fn a_release_without_signals_asks_once_and_does_not_wait() {
        let (ask, requests) = channel::<SessionReport>();
        let mut gate = ReleaseGate::new(ask);
        gate.record_in_background();
        // Asked exactly once; nobody answered, and nothing waited.
        assert!(matches!(
            requests.try_recv(),
            Ok(SessionReport::Releasing(_))
        ));
        assert!(gate.record());
        assert!(requests.try_recv().is_err());
    }

    #[test]
    fn a_coordinator_that_is_gone_does_not_hold_the_release() {
        let (ask, requests) = channel::<SessionReport>();
        drop(requests);
        assert!(!ReleaseGate::new(ask).record());
        // Asked but never answered: the request is dropped unanswered.
        let (ask, requests) = channel::<SessionReport>();
        let dropper = std::thread::spawn(move || drop(requests.recv()));
        assert!(!ReleaseGate::new(ask).record());
        dropper.join().ok();
    }
}
