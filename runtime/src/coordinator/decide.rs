//! The Host Coordinator's session bookkeeping: which decision follows from
//! each event (FR-2, FR-6). The effects interpreter carries the decisions
//! out; this table is where the generated model core takes over once it is
//! usable.
use super::messages::Refusal;

/// The coordinator's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No sandbox yet; the first session launches it.
    Idle,
    /// The sandbox runs with this many sessions.
    Serving { sessions: u32 },
    /// The last session left (or the launch failed); nothing joins any more.
    Stopping,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A CLI with a matching Domain and fingerprint asks for a session.
    SessionRequested,
    /// The launch finished.
    Launched { ok: bool },
    /// The session's exec client runs.
    SessionStarted,
    /// The session's exec client could not be started.
    SessionStartFailed,
    /// A session's command ended.
    SessionEnded,
    /// The Runtime Supervisor (or the attached runsc) is gone.
    SupervisorLost,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create the user namespace, start RS and the sandbox (LaunchGeneration).
    Launch,
    /// Exec the session's command into the running sandbox (StartSession).
    StartSession,
    /// Answer the requester with a refusal.
    Refuse(Refusal),
    /// Nothing beyond bookkeeping.
    Continue,
    /// Stop the sandbox, wait for RS, remove the socket and exit (Teardown).
    Teardown,
}

/// A transition refused because the event cannot happen in this phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event {event:?} cannot happen in phase {phase:?}")]
pub struct Impossible {
    pub phase: Phase,
    pub event: Event,
}

/// One step of the coordinator.
pub fn step(phase: Phase, event: Event) -> Result<(Phase, Decision), Impossible> {
    use Decision as D;
    use Event as E;
    use Phase as P;
    Ok(match (phase, event) {
        (P::Idle, E::SessionRequested) => (P::Idle, D::Launch),
        (P::Idle, E::Launched { ok: true }) => (P::Serving { sessions: 0 }, D::StartSession),
        (P::Idle, E::Launched { ok: false }) => (P::Stopping, D::Teardown),
        (P::Serving { sessions }, E::SessionRequested) => {
            (P::Serving { sessions }, D::StartSession)
        }
        (P::Serving { sessions }, E::SessionStarted) => (
            P::Serving {
                sessions: sessions.saturating_add(1),
            },
            D::Continue,
        ),
        (P::Serving { sessions: 0 }, E::SessionStartFailed)
        | (P::Serving { sessions: 0 | 1 }, E::SessionEnded) => (P::Stopping, D::Teardown),
        (P::Serving { sessions }, E::SessionStartFailed) => (P::Serving { sessions }, D::Continue),
        (P::Serving { sessions }, E::SessionEnded) => (
            P::Serving {
                sessions: sessions - 1,
            },
            D::Continue,
        ),
        (P::Idle | P::Serving { .. }, E::SupervisorLost) => (P::Stopping, D::Teardown),
        (P::Stopping, E::SessionRequested) => (P::Stopping, D::Refuse(Refusal::Stopping)),
        (P::Stopping, E::SessionEnded | E::SupervisorLost | E::SessionStartFailed) => {
            (P::Stopping, D::Continue)
        }
        _ => return Err(Impossible { phase, event }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FR-2/FR-6: sessions join one sandbox; only the last leaving tears down.
    #[test]
    fn last_session_leaving_tears_down() -> Result<(), Impossible> {
        let (p, d) = step(Phase::Idle, Event::SessionRequested)?;
        assert_eq!(d, Decision::Launch);
        let (p, d) = step(p, Event::Launched { ok: true })?;
        assert_eq!(d, Decision::StartSession);
        let (p, _) = step(p, Event::SessionStarted)?;
        let (p, d) = step(p, Event::SessionRequested)?;
        assert_eq!(d, Decision::StartSession);
        let (p, _) = step(p, Event::SessionStarted)?;
        assert_eq!(p, Phase::Serving { sessions: 2 });
        let (p, d) = step(p, Event::SessionEnded)?;
        assert_eq!((p, d), (Phase::Serving { sessions: 1 }, Decision::Continue));
        let (p, d) = step(p, Event::SessionEnded)?;
        assert_eq!((p, d), (Phase::Stopping, Decision::Teardown));
        let (_, d) = step(p, Event::SessionRequested)?;
        assert_eq!(d, Decision::Refuse(Refusal::Stopping));
        Ok(())
    }

    #[test]
    fn failures_tear_down_only_an_empty_domain() -> Result<(), Impossible> {
        assert_eq!(
            step(Phase::Idle, Event::Launched { ok: false })?,
            (Phase::Stopping, Decision::Teardown)
        );
        assert_eq!(
            step(Phase::Serving { sessions: 0 }, Event::SessionStartFailed)?,
            (Phase::Stopping, Decision::Teardown)
        );
        assert_eq!(
            step(Phase::Serving { sessions: 2 }, Event::SessionStartFailed)?,
            (Phase::Serving { sessions: 2 }, Decision::Continue)
        );
        assert_eq!(
            step(Phase::Serving { sessions: 3 }, Event::SupervisorLost)?,
            (Phase::Stopping, Decision::Teardown)
        );
        assert!(step(Phase::Stopping, Event::Launched { ok: true }).is_err());
        assert!(step(Phase::Idle, Event::SessionEnded).is_err());
        Ok(())
    }
}
