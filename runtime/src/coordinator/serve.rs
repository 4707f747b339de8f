//! The Host Coordinator's serving decisions (spec 3.3 "Sessions", 3.4;
//! FR-2, FR-6, SR-9): what its event loop does with each event, decided
//! from the model state alone, as the steps of the generated model to take
//! in order. Sans-IO: the effects loop asks, performs each step's effect
//! (a reply, a launch, a terminal record) and takes the step; nothing here
//! reads a socket or the clock.
//!
//! Every client decision is a model step, refusals included: a client is a
//! model session from `ConnectClient` on, whether it then launches the
//! generation, joins it, is refused for another configuration, or leaves
//! because the runtime has ended. Only a client for which no session slot
//! is free never becomes a model session (the model's sessions are the
//! slots).

use std::time::Duration;

use lazaret_generated::lazaret::{Action, Decision, FingerprintResults, Sess, SessionsId};

use super::host_model::HostModel;

/// Why the coordinator cannot decide for an event: it arrived in a state
/// the event loop never serves in (an invariant of the loop, not of the
/// client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServeError {
    /// The serving loop runs only while the Domain is Vacant (before the
    /// launch) or the generation is Published; a teardown or a recovery
    /// serves no client.
    #[error("a client arrived while the generation is {0:?}, which serves no client")]
    NotServing(Decision),
}

/// How a client that is a model session goes on after its
/// `ConnectClient`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// `RefuseConfigurationMismatch`: a client of another configuration of
    /// this Domain (SR-9), in a Vacant Domain as in a published one.
    Refuse,
    /// The client matches a Vacant Domain: it stays Connecting while the
    /// launch runs (`StartGeneration` .. `Publish`), then joins as
    /// [`Admission::Join`]; a failed launch ends with `ClientExits`.
    Launch,
    /// `EnrollClient` in the published generation, `RecordTerminalIntent`,
    /// then `RegisterSession` once its terminal runs ([`on_session_running`]
    /// for an interactive session); a session that cannot start is released
    /// ([`on_session_ended`]: `AbortSessionStart`, then
    /// `FinishSessionRelease` or `RetainSessionRelease`).
    Join,
    /// `ClientExits`: this coordinator saw the runtime end, and no session
    /// joins an ended sandbox (FR-2; `RegisterSession` needs it running).
    Ended,
}

/// A client that is a model session: its slot and how it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientPlan {
    pub s: SessionsId,
    pub admission: Admission,
}

impl ClientPlan {
    /// The plan's first step: `ConnectClient` with the fingerprint
    /// comparison the admission follows from.
    pub fn connect(self) -> Action {
        let f = match self.admission {
            Admission::Refuse => FingerprintResults::Mismatch,
            Admission::Launch | Admission::Join | Admission::Ended => FingerprintResults::Match,
        };
        Action::ConnectClient { s: self.s, f }
    }
}

/// The decision for a client whose configuration fingerprint `matches`
/// (or not) the Domain's; `None` when every session slot is taken (the
/// client is refused before it is a model session).
pub fn on_client(model: &HostModel, matches: bool) -> Result<Option<ClientPlan>, ServeError> {
    let st = model.state();
    if !matches!(st.decision, Decision::Vacant | Decision::Published) {
        return Err(ServeError::NotServing(st.decision));
    }
    let Some(s) = model.free_session() else {
        return Ok(None);
    };
    let admission = if !matches {
        Admission::Refuse
    } else if st.decision == Decision::Vacant {
        Admission::Launch
    } else if st.runtime_ended {
        Admission::Ended
    } else {
        Admission::Join
    };
    Ok(Some(ClientPlan { s, admission }))
}

/// The step that records a session terminal's release intent (spec 3.4
/// release step 1): `CloseSession` or `AbortSessionStart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    pub s: SessionsId,
    pub action: Action,
}

/// The steps of a session's end: its release intent if nothing recorded it
/// yet, then `FinishSessionRelease` or `RetainSessionRelease`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionEnd {
    pub close: Option<Close>,
    pub finish: Action,
}

/// An interactive session's guest leader identity is known (spec 3.4
/// acquisition step 3): `RegisterSession`, whose effect is the terminal's
/// Running record (step 4), while the session is still starting and the
/// runtime runs. `None` when the session is already closing (the runtime's
/// end or the session's own release came first): it never reaches Running.
pub fn on_session_running(model: &HostModel, s: SessionsId) -> Option<Action> {
    let register = Action::RegisterSession { c: model.me(), s };
    (model.state().sess.get(s.index()) == Some(&Sess::Starting) && model.check(&register).is_ok())
        .then_some(register)
}

/// A session asks to release (spec 3.4 release step 1): `CloseSession`
/// while it is registered, `AbortSessionStart` while its terminal is only
/// intended ("Failure before the running state never admits the
/// terminal"); nothing when its release intent is recorded already (the
/// runtime's end closed it first).
pub fn on_session_releasing(model: &HostModel, s: SessionsId) -> Option<Close> {
    let c = model.me();
    let action = match model.state().sess.get(s.index())? {
        Sess::Registered => Action::CloseSession { c, s },
        Sess::Starting => Action::AbortSessionStart { c, s },
        _ => return None,
    };
    Some(Close { s, action })
}

/// A session ended (its exec client reaped, its PTY closed): its release
/// finishes clean, or, when its processes could not be proved absent
/// (`retained`, spec 3.4 release step 3), keeps its release intent for
/// Domain teardown.
pub fn on_session_ended(model: &HostModel, s: SessionsId, retained: bool) -> SessionEnd {
    let c = model.me();
    SessionEnd {
        close: on_session_releasing(model, s),
        finish: if retained {
            Action::RetainSessionRelease { c, s }
        } else {
            Action::FinishSessionRelease { c, s }
        },
    }
}

/// The runtime ended under this coordinator: every registered or starting
/// session records its release intent (each one's release finishes when
/// its exec client is reaped, [`on_session_ended`]). The runtime's own end steps are
/// [`HostModel::runtime_ended`]'s.
pub fn on_runtime_lost(model: &HostModel) -> Vec<Close> {
    SessionsId::all(model.state().sess.len())
        .filter_map(|s| on_session_releasing(model, s))
        .collect()
}

/// Whether serving ends: the published generation has no registered or
/// closing session, so the teardown's `BeginTeardown` is enabled (FR-6).
pub fn serving_done(model: &HostModel) -> bool {
    model.state().decision == Decision::Published
        && model
            .check(&Action::BeginTeardown { c: model.me() })
            .is_ok()
}

/// How long a coordinator of a Vacant Domain waits for a client: the CLI
/// that started it connects within milliseconds, so a coordinator that
/// waited this long without one (that CLI was interrupted, or its only
/// client was refused) exits instead of holding the Domain lock for a
/// launch nobody asks for (FR-6).
pub const VACANT_LINGER: Duration = Duration::from_secs(5);

/// How long the event loop may wait for its next event before
/// [`linger_over`] is asked: [`VACANT_LINGER`] while the Domain is
/// Vacant; `None` (no limit) while a generation runs, which ends through
/// its sessions.
pub fn wait_limit(model: &HostModel) -> Option<Duration> {
    (model.state().decision == Decision::Vacant).then_some(VACANT_LINGER)
}

/// Time in: whether a coordinator that has had no event for `idle` ends
/// serving so that it takes `ExitCoordinator`: only in a Vacant Domain
/// with no client connected, after [`VACANT_LINGER`].
pub fn linger_over(model: &HostModel, idle: Duration) -> bool {
    let st = model.state();
    idle >= VACANT_LINGER
        && st.decision == Decision::Vacant
        && st.sess.iter().all(|s| *s == Sess::Absent)
        && model
            .check(&Action::ExitCoordinator { c: model.me() })
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::host_model::tests::launch_steps;
    use crate::coordinator::host_model::Routing;
    use crate::coordinator::host_model::SESSION_SLOTS;
    use crate::replay::{replay_text, Outcome};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A coordinator that bootstrapped a Vacant Domain, with its trace.
    fn vacant() -> Result<(HostModel, String), Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-test".into(), 3, Routing::Unrouted)?;
        let c = m.me();
        let mut text = m.header().to_json() + "\n";
        for a in [
            Action::AcquireDomainLock { c },
            Action::BootstrapVacantDomain { c },
        ] {
            text += &(m.take(a)?.to_json() + "\n");
        }
        Ok((m, text))
    }

    fn take_all(m: &mut HostModel, text: &mut String, steps: &[Action]) -> TestResult {
        for a in steps {
            *text += &(m.take(*a)?.to_json() + "\n");
        }
        Ok(())
    }

    fn conforms(text: &str) -> Result<u64, Box<dyn std::error::Error>> {
        match replay_text("serve.jsonl", text)? {
            Outcome::Conforms { steps, .. } => Ok(steps),
            Outcome::Diverged(d) => Err(format!("diverged: {d:?}").into()),
        }
    }

    /// The launch skipped the first two steps, taken by [`vacant`].
    fn generation_steps(m: &HostModel) -> Vec<Action> {
        launch_steps(m.me()).into_iter().skip(2).collect()
    }

    fn plan(m: &HostModel, matches: bool) -> Result<ClientPlan, Box<dyn std::error::Error>> {
        on_client(m, matches)?.ok_or_else(|| "no free slot".into())
    }

    /// A published generation launched for its first client, which joined.
    fn serving_one() -> Result<(HostModel, String, SessionsId), Box<dyn std::error::Error>> {
        let (mut m, mut text) = vacant()?;
        let c = m.me();
        let first = plan(&m, true)?;
        assert_eq!(first.admission, Admission::Launch);
        take_all(&mut m, &mut text, &[first.connect()])?;
        let launch = generation_steps(&m);
        take_all(&mut m, &mut text, &launch)?;
        let s = first.s;
        take_all(
            &mut m,
            &mut text,
            &[
                Action::EnrollClient { c, s },
                Action::RecordTerminalIntent { c, s },
                Action::RegisterSession { c, s },
            ],
        )?;
        Ok((m, text, s))
    }

    /// A Vacant Domain's mismatching client is a model session refused by
    /// the model's step, not by the loop (SR-9); the Domain stays Vacant
    /// and the coordinator may still launch for a matching one.
    #[test]
    fn a_vacant_domains_mismatching_client_is_refused_by_the_model() -> TestResult {
        let (mut m, mut text) = vacant()?;
        let c = m.me();
        let refused = plan(&m, false)?;
        assert_eq!(refused.admission, Admission::Refuse);
        let s = refused.s;
        assert_eq!(
            refused.connect(),
            Action::ConnectClient {
                s,
                f: FingerprintResults::Mismatch
            }
        );
        take_all(
            &mut m,
            &mut text,
            &[
                refused.connect(),
                Action::RefuseConfigurationMismatch { c, s },
            ],
        )?;
        assert_eq!(m.state().decision, Decision::Vacant);
        assert_eq!(m.state().sess[s.index()], Sess::Absent);
        assert!(m.check(&Action::EnrollClient { c, s }).is_err());
        assert_eq!(
            plan(&m, true)?,
            ClientPlan {
                s,
                admission: Admission::Launch
            }
        );
        assert_eq!(conforms(&text)?, 4);
        // Nobody else comes: the coordinator's wait ends in its exit.
        assert_eq!(wait_limit(&m), Some(VACANT_LINGER));
        assert!(!linger_over(&m, VACANT_LINGER - Duration::from_millis(1)));
        assert!(linger_over(&m, VACANT_LINGER));
        take_all(&mut m, &mut text, &[Action::ExitCoordinator { c }])?;
        assert_eq!(conforms(&text)?, 5);
        Ok(())
    }

    /// The first matching client connects before the launch, stays
    /// Connecting through it, and joins the published generation; a second
    /// one joins directly. Neither is enrolled before `Publish`.
    #[test]
    fn the_launching_client_connects_first_and_is_enrolled_after_publish() -> TestResult {
        let (mut m, mut text) = vacant()?;
        let c = m.me();
        let first = plan(&m, true)?;
        assert_eq!(first.admission, Admission::Launch);
        let s = first.s;
        take_all(&mut m, &mut text, &[first.connect()])?;
        // A connected client keeps the coordinator: its launch follows.
        assert!(!linger_over(&m, VACANT_LINGER * 2));
        let launch = generation_steps(&m);
        for a in &launch {
            assert!(
                m.check(&Action::EnrollClient { c, s }).is_err(),
                "enrollment enabled before {a:?}"
            );
            take_all(&mut m, &mut text, &[*a])?;
        }
        assert_eq!(m.state().decision, Decision::Published);
        assert_eq!(m.state().sess[s.index()], Sess::Connecting);
        // A running generation ends through its sessions, never by waiting.
        assert_eq!(wait_limit(&m), None);
        assert!(!linger_over(&m, VACANT_LINGER * 2));
        take_all(
            &mut m,
            &mut text,
            &[
                Action::EnrollClient { c, s },
                Action::RecordTerminalIntent { c, s },
                Action::RegisterSession { c, s },
            ],
        )?;
        let second = plan(&m, true)?;
        assert_eq!(second.admission, Admission::Join);
        assert_ne!(second.s, s);
        take_all(
            &mut m,
            &mut text,
            &[
                second.connect(),
                Action::EnrollClient { c, s: second.s },
                Action::RecordTerminalIntent { c, s: second.s },
                Action::RegisterSession { c, s: second.s },
            ],
        )?;
        assert!(!serving_done(&m));
        let steps = 2 + 1 + u64::try_from(launch.len())? + 3 + 4;
        assert_eq!(conforms(&text)?, steps);
        Ok(())
    }

    /// A launch that fails leaves its client to `ClientExits`, which the
    /// model allows from Connecting at any point of the launch.
    #[test]
    fn a_failed_launchs_client_exits_at_every_launch_step() -> TestResult {
        let (base, _) = vacant()?;
        let launch = generation_steps(&base);
        for failed_after in 0..launch.len() {
            let (mut m, mut text) = vacant()?;
            let first = plan(&m, true)?;
            take_all(&mut m, &mut text, &[first.connect()])?;
            take_all(&mut m, &mut text, &launch[..failed_after])?;
            take_all(&mut m, &mut text, &[Action::ClientExits { s: first.s }])?;
            assert_eq!(m.state().sess[first.s.index()], Sess::Absent);
            conforms(&text)?;
        }
        Ok(())
    }

    /// A joining client up to its terminal intent (`ConnectClient`,
    /// `EnrollClient`, `RecordTerminalIntent`): a session still starting.
    fn start_one(
        m: &mut HostModel,
        text: &mut String,
    ) -> Result<SessionsId, Box<dyn std::error::Error>> {
        let c = m.me();
        let next = plan(m, true)?;
        take_all(
            m,
            text,
            &[
                next.connect(),
                Action::EnrollClient { c, s: next.s },
                Action::RecordTerminalIntent { c, s: next.s },
            ],
        )?;
        Ok(next.s)
    }

    /// An interactive session registers (its Running record) only while it
    /// is starting in a running sandbox: a release or the runtime's end that
    /// came first leaves its late guest identity without a step.
    #[test]
    fn an_interactive_session_registers_only_while_it_starts() -> TestResult {
        let (mut m, mut text, first) = serving_one()?;
        let c = m.me();
        assert_eq!(on_session_running(&m, first), None, "registered already");
        let mut starting = Vec::new();
        for _ in 0..2 {
            starting.push(start_one(&mut m, &mut text)?);
        }
        let (released, registered) = (starting[0], starting[1]);
        // The first one's release comes before its identity.
        let abort = on_session_releasing(&m, released).ok_or("no release step")?;
        assert_eq!(abort.action, Action::AbortSessionStart { c, s: released });
        take_all(&mut m, &mut text, &[abort.action])?;
        assert_eq!(on_session_running(&m, released), None);
        // The second one's identity: RegisterSession.
        let register = on_session_running(&m, registered).ok_or("no registration")?;
        assert_eq!(register, Action::RegisterSession { c, s: registered });
        take_all(&mut m, &mut text, &[register])?;
        assert_eq!(m.state().sess[registered.index()], Sess::Registered);
        // A third starts, then the runtime ends: it is aborted, never
        // registered.
        let late = start_one(&mut m, &mut text)?;
        let seen = crate::coordinator::host_model::RuntimeSeen::Ended {
            supervisor_signalled: true,
            runsc_outlived: false,
        };
        let ended = m.runtime_ended(seen);
        take_all(&mut m, &mut text, &ended)?;
        assert_eq!(on_session_running(&m, late), None, "the runtime is gone");
        let closes: Vec<Action> = on_runtime_lost(&m).into_iter().map(|x| x.action).collect();
        assert!(closes.contains(&Action::AbortSessionStart { c, s: late }));
        take_all(&mut m, &mut text, &closes)?;
        assert_eq!(on_session_running(&m, late), None);
        conforms(&text)?;
        Ok(())
    }

    /// After the runtime ended under this coordinator, a matching client
    /// leaves without enrollment; a session's release request closes it
    /// only once, and its end finishes the release.
    #[test]
    fn an_ended_runtime_closes_sessions_and_admits_none() -> TestResult {
        let (mut m, mut text, s) = serving_one()?;
        let c = m.me();
        let seen = crate::coordinator::host_model::RuntimeSeen::Ended {
            supervisor_signalled: true,
            runsc_outlived: false,
        };
        let ended = m.runtime_ended(seen);
        take_all(&mut m, &mut text, &ended)?;
        let closes = on_runtime_lost(&m);
        let close = Close {
            s,
            action: Action::CloseSession { c, s },
        };
        assert_eq!(closes, vec![close]);
        take_all(&mut m, &mut text, &[close.action])?;
        // The session's own release request finds it closed already.
        assert_eq!(on_session_releasing(&m, s), None);
        let late = plan(&m, true)?;
        assert_eq!(late.admission, Admission::Ended);
        take_all(
            &mut m,
            &mut text,
            &[late.connect(), Action::ClientExits { s: late.s }],
        )?;
        assert!(m.check(&Action::RegisterSession { c, s: late.s }).is_err());
        let end = on_session_ended(&m, s, false);
        assert_eq!(
            end,
            SessionEnd {
                close: None,
                finish: Action::FinishSessionRelease { c, s }
            }
        );
        take_all(&mut m, &mut text, &[end.finish])?;
        assert!(serving_done(&m));
        conforms(&text)?;
        Ok(())
    }

    /// A session whose exec client cannot be started never registers: its
    /// recorded terminal intent becomes release intent (`AbortSessionStart`,
    /// spec 3.4 "Failure before the running state never admits the
    /// terminal") and its release finishes clean or is retained; only a
    /// retained one is left for the generation's release (`termsLeft`).
    #[test]
    fn a_session_that_cannot_start_is_released_and_only_a_retained_one_is_left() -> TestResult {
        for retained in [false, true] {
            let (mut m, mut text, _) = serving_one()?;
            let c = m.me();
            let next = plan(&m, true)?;
            let s = next.s;
            take_all(
                &mut m,
                &mut text,
                &[
                    next.connect(),
                    Action::EnrollClient { c, s },
                    Action::RecordTerminalIntent { c, s },
                ],
            )?;
            assert_eq!(m.state().sess[s.index()], Sess::Starting);
            // A recorded terminal is released by the HC, never dropped by
            // the client's exit.
            assert!(m.check(&Action::ClientExits { s }).is_err());
            let end = on_session_ended(&m, s, retained);
            let abort = Close {
                s,
                action: Action::AbortSessionStart { c, s },
            };
            assert_eq!(end.close, Some(abort));
            take_all(&mut m, &mut text, &[abort.action, end.finish])?;
            assert_eq!(m.state().sess[s.index()], Sess::Absent);
            assert_eq!(m.state().terms_left, retained);
            assert_eq!(m.durable().terms_left, Some(retained));
            conforms(&text)?;
        }
        Ok(())
    }

    /// A session that ends without asking to release first is closed and
    /// finished by its end event alone; with every slot taken the next
    /// client is refused before it is a session; the teardown serves no
    /// client.
    #[test]
    fn a_session_end_closes_and_finishes_and_a_full_domain_refuses() -> TestResult {
        let (mut m, mut text, first) = serving_one()?;
        let c = m.me();
        let mut joined = vec![first];
        while let Some(next) = on_client(&m, true)? {
            assert_eq!(next.admission, Admission::Join);
            take_all(
                &mut m,
                &mut text,
                &[
                    next.connect(),
                    Action::EnrollClient { c, s: next.s },
                    Action::RecordTerminalIntent { c, s: next.s },
                    Action::RegisterSession { c, s: next.s },
                ],
            )?;
            joined.push(next.s);
            assert!(joined.len() <= usize::from(SESSION_SLOTS));
        }
        assert_eq!(joined.len(), usize::from(SESSION_SLOTS));
        assert_eq!(on_client(&m, false)?, None);
        for (i, s) in joined.iter().enumerate() {
            assert!(!serving_done(&m), "serving ended with {i} sessions closed");
            let end = on_session_ended(&m, *s, false);
            let close = end.close.ok_or("a registered session ended unclosed")?;
            assert_eq!(close.action, Action::CloseSession { c, s: *s });
            take_all(&mut m, &mut text, &[close.action, end.finish])?;
        }
        assert!(serving_done(&m));
        take_all(&mut m, &mut text, &[Action::BeginTeardown { c }])?;
        assert!(!serving_done(&m));
        assert_eq!(
            on_client(&m, true),
            Err(ServeError::NotServing(Decision::TearingDown))
        );
        conforms(&text)?;
        Ok(())
    }
}
