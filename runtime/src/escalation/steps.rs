//! The steps of the Lazaret model that serving one escalation request
//! takes (spec 3.8, 3.4 terminal routing; protocol/Lazaret.tla "Host
//! escalation" and "Terminal routing"), by the model's names.
//!
//! The mailbox service serves a request on a thread of its own; every
//! step it takes is a step of the Host Coordinator's model trace, taken by
//! the coordinator's event loop: the service asks, the loop checks the
//! step against the model for the request's session slot, takes it and
//! answers. A refused step means the model no longer lets the request go
//! on (its session closed, the runtime ended): the service takes no
//! further step for it and stops its host process.
//!
//! Sandbox-side steps (`SubmitEscalation`, `AckResultChunk`,
//! `RequestCancellation`, `CollectResult`) are taken when the service sees
//! them: a request when its serving starts, an acknowledgement once for
//! every chunk it settles, a cancellation when it is read. `CollectResult`
//! is taken as soon as the result is written: the coordinator never sees
//! the client read it, and the model's next request of the session may come
//! once the result is there.
use lazaret_generated::lazaret::{
    action_name, Action, CoordinatorsId, Esc, RuleMatches, SessionsId,
};

use super::results::MAX_UNACKED_CHUNKS;

/// One escalation step of one session, without its coordinator and slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EscalationStep {
    SubmitEscalation(RuleMatches),
    AcceptEscalation,
    PauseTerminalForwarding,
    ResumeTerminalForwarding,
    RouteToPrompt,
    ApproveEscalation,
    AutoApproveEscalation,
    DenyEscalation,
    PromptTimeout,
    RefuseEscalation,
    HostProcessStartFails,
    StartHostProcess,
    EmitResultChunk,
    AckResultChunk,
    HostProcessExits,
    HostProcessTimeout,
    AckTimeout,
    DeliverResult,
    CollectResult,
    RequestCancellation,
    ApplyCancellation,
}

impl EscalationStep {
    /// The model's action: this step of session slot `s`, taken by
    /// coordinator `c` (sandbox-side steps have no coordinator).
    pub fn action(self, c: CoordinatorsId, s: SessionsId) -> Action {
        match self {
            Self::SubmitEscalation(m) => Action::SubmitEscalation { s, m },
            Self::AcceptEscalation => Action::AcceptEscalation { c, s },
            Self::PauseTerminalForwarding => Action::PauseTerminalForwarding { c, s },
            Self::ResumeTerminalForwarding => Action::ResumeTerminalForwarding { c, s },
            Self::RouteToPrompt => Action::RouteToPrompt { c, s },
            Self::ApproveEscalation => Action::ApproveEscalation { c, s },
            Self::AutoApproveEscalation => Action::AutoApproveEscalation { c, s },
            Self::DenyEscalation => Action::DenyEscalation { c, s },
            Self::PromptTimeout => Action::PromptTimeout { c, s },
            Self::RefuseEscalation => Action::RefuseEscalation { c, s },
            Self::HostProcessStartFails => Action::HostProcessStartFails { c, s },
            Self::StartHostProcess => Action::StartHostProcess { c, s },
            Self::EmitResultChunk => Action::EmitResultChunk { c, s },
            Self::AckResultChunk => Action::AckResultChunk { s },
            Self::HostProcessExits => Action::HostProcessExits { c, s },
            Self::HostProcessTimeout => Action::HostProcessTimeout { c, s },
            Self::AckTimeout => Action::AckTimeout { c, s },
            Self::DeliverResult => Action::DeliverResult { c, s },
            Self::CollectResult => Action::CollectResult { s },
            Self::RequestCancellation => Action::RequestCancellation { s },
            Self::ApplyCancellation => Action::ApplyCancellation { c, s },
        }
    }

    /// The model's name of the step.
    pub fn name(self) -> &'static str {
        action_name(&self.action(CoordinatorsId(0), SessionsId(0)))
    }
}

impl std::fmt::Display for EscalationStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SubmitEscalation(m) => write!(f, "SubmitEscalation({})", m.name()),
            other => f.write_str(other.name()),
        }
    }
}

/// Where one request's own steps have moved its session in the model
/// (the session's `esc`, `ptyFwd` and `escUnacked`), so the service can
/// finish a request whose serving failed part way with the model's own
/// way to a delivered result ([`RequestPlace::next_to_result`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestPlace {
    pub esc: Esc,
    /// The terminal's PTY output is forwarded (`ptyFwd`).
    pub forwarding: bool,
    pub unacked: u64,
}

impl Default for RequestPlace {
    /// A registered session with no request.
    fn default() -> Self {
        Self {
            esc: Esc::None,
            forwarding: true,
            unacked: 0,
        }
    }
}

impl RequestPlace {
    /// The place after `step` was taken.
    pub fn after(self, step: EscalationStep) -> Self {
        use EscalationStep as S;
        let mut next = self;
        match step {
            S::SubmitEscalation(_) => next.esc = Esc::Submitted,
            S::AcceptEscalation => next.esc = Esc::Accepted,
            S::PauseTerminalForwarding => next.forwarding = false,
            S::ResumeTerminalForwarding => next.forwarding = true,
            S::RouteToPrompt => next.esc = Esc::Prompting,
            S::ApproveEscalation | S::AutoApproveEscalation => next.esc = Esc::Approved,
            S::DenyEscalation
            | S::PromptTimeout
            | S::RefuseEscalation
            | S::HostProcessStartFails
            | S::HostProcessExits
            | S::HostProcessTimeout => {
                next.esc = Esc::Resolved;
            }
            S::StartHostProcess => next.esc = Esc::Running,
            S::EmitResultChunk => next.unacked += 1,
            S::AckResultChunk => next.unacked = next.unacked.saturating_sub(1),
            S::AckTimeout => next.unacked = 0,
            S::DeliverResult => next.esc = Esc::Delivered,
            S::CollectResult => next.esc = Esc::None,
            // Its effect is the next step's: the place is unchanged.
            S::RequestCancellation => {}
            S::ApplyCancellation => {
                next.esc = Esc::Resolved;
                next.unacked = 0;
            }
        }
        debug_assert!(next.unacked <= MAX_UNACKED_CHUNKS);
        next
    }

    /// The next step on the shortest way from here to a collected result
    /// that runs nothing new: a request not yet shown is refused, a shown
    /// one denied, an approved request's host process never starts, a
    /// running one ends, what is unacknowledged is given up, and the
    /// terminal forwards again as soon as its route is the sandbox's.
    /// `None` when no request is open and the terminal forwards.
    pub fn next_to_result(self) -> Option<EscalationStep> {
        use EscalationStep as S;
        let routed_back = matches!(
            self.esc,
            Esc::None | Esc::Submitted | Esc::Resolved | Esc::Delivered
        );
        if routed_back && !self.forwarding {
            return Some(S::ResumeTerminalForwarding);
        }
        Some(match self.esc {
            Esc::None => return None,
            Esc::Submitted => S::AcceptEscalation,
            Esc::Accepted => S::RefuseEscalation,
            Esc::Prompting => S::DenyEscalation,
            Esc::Approved => S::HostProcessStartFails,
            Esc::Running => S::HostProcessExits,
            Esc::Resolved if self.unacked > 0 => S::AckTimeout,
            Esc::Resolved => S::DeliverResult,
            Esc::Delivered => S::CollectResult,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::EscalationStep::{self, *};
    use super::RequestPlace;
    use crate::coordinator::host_model::support::serving_one_session;
    use crate::coordinator::host_model::HostModel;
    use lazaret_generated::lazaret::{action_name, Esc, Route, RuleMatches, SessionsId};

    type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

    /// Takes `steps` of slot `s`; the first the model refuses is returned.
    fn take(
        m: &mut HostModel,
        s: SessionsId,
        steps: &[EscalationStep],
    ) -> Result<(), EscalationStep> {
        for step in steps {
            let action = step.action(m.me(), s);
            assert_eq!(step.name(), action_name(&action));
            m.take(action).map_err(|_| *step)?;
        }
        Ok(())
    }

    fn refuses(m: &HostModel, s: SessionsId, step: EscalationStep) -> bool {
        m.check(&step.action(m.me(), s)).is_err()
    }

    /// Each step is the model's action of that name, and the model alone
    /// says which may follow: an inexact request is never auto-approved,
    /// no host process starts while the terminal still forwards, at most
    /// eight chunks are unacknowledged, and a session's next request
    /// waits for the last one's result.
    #[test]
    fn serving_a_request_is_the_models_steps_for_its_session() -> TestResult {
        let (mut m, s) = serving_one_session()?;
        let inexact = [SubmitEscalation(RuleMatches::Inexact), AcceptEscalation];
        take(&mut m, s, &inexact).map_err(|e| e.to_string())?;
        assert!(refuses(&m, s, AutoApproveEscalation));
        assert!(refuses(&m, s, RouteToPrompt), "the terminal still forwards");
        take(
            &mut m,
            s,
            &[PauseTerminalForwarding, RouteToPrompt, ApproveEscalation],
        )
        .map_err(|e| e.to_string())?;
        assert_eq!(m.state().route[s.index()], Route::Prompt);
        take(&mut m, s, &[StartHostProcess]).map_err(|e| e.to_string())?;
        take(&mut m, s, &[EmitResultChunk; 8]).map_err(|e| e.to_string())?;
        assert!(refuses(&m, s, EmitResultChunk));
        assert!(refuses(&m, s, SubmitEscalation(RuleMatches::Exact)));
        take(
            &mut m,
            s,
            &[AckResultChunk, HostProcessExits, ResumeTerminalForwarding],
        )
        .map_err(|e| e.to_string())?;
        assert!(refuses(&m, s, DeliverResult), "a chunk is unacknowledged");
        take(&mut m, s, &[AckTimeout, DeliverResult, CollectResult]).map_err(|e| e.to_string())?;
        assert_eq!(m.state().esc[s.index()], Esc::None);
        assert_eq!(m.state().route[s.index()], Route::Sandbox);
        take(
            &mut m,
            s,
            &[
                SubmitEscalation(RuleMatches::Exact),
                AcceptEscalation,
                AutoApproveEscalation,
                PauseTerminalForwarding,
                StartHostProcess,
                RequestCancellation,
                ApplyCancellation,
            ],
        )
        .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A request nobody can be asked about is refused without its
    /// terminal leaving the sandbox, and an approved command that cannot
    /// start hands a prompt's route back without a host process: neither
    /// passes through a prompt or a start it did not have.
    #[test]
    fn a_request_can_end_without_a_prompt_or_a_start() -> TestResult {
        let (mut m, s) = serving_one_session()?;
        take(
            &mut m,
            s,
            &[SubmitEscalation(RuleMatches::Inexact), AcceptEscalation],
        )
        .map_err(|e| e.to_string())?;
        assert!(refuses(&m, s, HostProcessStartFails), "nothing is approved");
        take(&mut m, s, &[RefuseEscalation]).map_err(|e| e.to_string())?;
        assert_eq!(m.state().route[s.index()], Route::Sandbox);
        assert!(m.state().pty_fwd[s.index()], "the terminal never paused");
        take(&mut m, s, &[DeliverResult, CollectResult]).map_err(|e| e.to_string())?;
        take(
            &mut m,
            s,
            &[
                SubmitEscalation(RuleMatches::Inexact),
                AcceptEscalation,
                PauseTerminalForwarding,
                RouteToPrompt,
            ],
        )
        .map_err(|e| e.to_string())?;
        assert!(refuses(&m, s, RefuseEscalation), "a shown prompt is denied");
        take(&mut m, s, &[ApproveEscalation, HostProcessStartFails]).map_err(|e| e.to_string())?;
        assert_eq!(m.state().route[s.index()], Route::Sandbox);
        assert!(refuses(&m, s, HostProcessExits), "nothing ran");
        take(
            &mut m,
            s,
            &[ResumeTerminalForwarding, DeliverResult, CollectResult],
        )
        .map_err(|e| e.to_string())?;
        assert_eq!(place_in(&m, s), RequestPlace::default());
        Ok(())
    }

    const ALL: [EscalationStep; 22] = [
        SubmitEscalation(RuleMatches::Exact),
        SubmitEscalation(RuleMatches::Inexact),
        AcceptEscalation,
        PauseTerminalForwarding,
        ResumeTerminalForwarding,
        RouteToPrompt,
        ApproveEscalation,
        AutoApproveEscalation,
        DenyEscalation,
        PromptTimeout,
        RefuseEscalation,
        HostProcessStartFails,
        StartHostProcess,
        EmitResultChunk,
        AckResultChunk,
        HostProcessExits,
        HostProcessTimeout,
        AckTimeout,
        DeliverResult,
        CollectResult,
        RequestCancellation,
        ApplyCancellation,
    ];

    fn place_in(m: &HostModel, s: SessionsId) -> RequestPlace {
        let st = m.state();
        RequestPlace {
            esc: st.esc[s.index()],
            forwarding: st.pty_fwd[s.index()],
            unacked: u64::from(st.esc_unacked[s.index()]),
        }
    }

    /// Whatever steps a session's requests took (any the model enables,
    /// picked by `picks`), the place its own steps track is the model's,
    /// and following `next_to_result` from there is always enabled and
    /// ends with the session forwarding its terminal and no request open.
    #[test]
    fn the_way_to_a_result_is_the_models_from_anywhere() {
        fn prop(picks: Vec<u8>) -> bool {
            let Ok((mut m, s)) = serving_one_session() else {
                return false;
            };
            let mut place = RequestPlace::default();
            for pick in picks.into_iter().take(200) {
                let step = ALL[usize::from(pick) % ALL.len()];
                if take(&mut m, s, &[step]).is_ok() {
                    place = place.after(step);
                }
                if place != place_in(&m, s) {
                    return false;
                }
            }
            for _ in 0..12 {
                let Some(step) = place.next_to_result() else {
                    return place == RequestPlace::default() && place_in(&m, s) == place;
                };
                if take(&mut m, s, &[step]).is_err() {
                    return false;
                }
                place = place.after(step);
            }
            false
        }
        quickcheck::QuickCheck::new()
            .tests(2000)
            .max_tests(2000)
            .rng(quickcheck::Gen::new(200))
            .quickcheck(prop as fn(Vec<u8>) -> bool);
    }
}
