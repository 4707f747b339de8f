//! The launch of a generation, decided by the core (spec 3.3 causal
//! acquisition, 3.7 readiness; FR-12, FR-18): the next launch step from the
//! model state alone, and whether this coordinator takes it now or after
//! the Runtime Supervisor's report of it. Sans-IO: the effects side spawns,
//! writes and reads the reports; nothing here touches a process or the
//! store.

use lazaret_generated::lazaret::{Action, CoordinatorsId, Decision, ProcSlots, Roles};

use super::host_model::HostModel;

/// The roles in the model's acquisition order (`AcquireRank`): every role
/// but Sandbox is acquired under the committed RS, the prepared lower
/// before the State Anchor, the helper before the network; attached runsc
/// after them all; publication last.
const ACQUIRE_ORDER: [Roles; 7] = [
    Roles::PreparedLower,
    Roles::StateAnchor,
    Roles::GitRouting,
    Roles::Helper,
    Roles::Network,
    Roles::Sandbox,
    Roles::Publication,
];

/// What the launching coordinator does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchNext {
    /// Take this step now (with its effect).
    Take(Action),
    /// Take this step when the Runtime Supervisor reports it: RS launches
    /// the connectivity helper and attached runsc (their intent, staging
    /// and commit), installs the network and reports the running sandbox.
    /// A report of anything else is refused.
    OnReport(Action),
    /// The generation is published: the launch is over.
    Published,
    /// No launch step is enabled and nothing is published: the launch
    /// cannot go on (the runtime ended under it, or this coordinator does
    /// not lead a starting generation).
    Stuck,
}

/// The next launch step of this coordinator, in the model's order: the
/// first enabled step of the launch vocabulary in acquisition order
/// ([`ACQUIRE_ORDER`]). The model's guards leave at most one of them
/// enabled in every launch state (pinned by this module's tests), so the
/// order is the model's, not this list's.
pub fn next_launch(model: &HostModel) -> LaunchNext {
    let st = model.state();
    if st.decision == Decision::Published {
        return LaunchNext::Published;
    }
    let c = model.me();
    launch_vocabulary(c)
        .into_iter()
        .find(|a| model.check(a).is_ok())
        .map_or(LaunchNext::Stuck, |a| {
            if reported_by_supervisor(&a) {
                LaunchNext::OnReport(a)
            } else {
                LaunchNext::Take(a)
            }
        })
}

/// Every launch step of coordinator `c`, in acquisition order.
fn launch_vocabulary(c: CoordinatorsId) -> Vec<Action> {
    let mut steps = vec![
        Action::StartGeneration { c },
        Action::RecordIntent {
            c,
            r: Roles::Sandbox,
        },
        Action::StageProcess {
            c,
            ps: ProcSlots::SandboxRuntimeSupervisor,
        },
        Action::CommitProcess {
            c,
            ps: ProcSlots::SandboxRuntimeSupervisor,
        },
    ];
    for r in ACQUIRE_ORDER {
        if r != Roles::Sandbox {
            steps.push(Action::RecordIntent { c, r });
            steps.push(Action::AcquireSnapshot { c, r });
        }
        for ps in ProcSlots::ALL {
            if slot_role(ps) == r && ps != ProcSlots::SandboxRuntimeSupervisor {
                steps.push(Action::StageProcess { c, ps });
                steps.push(Action::CommitProcess { c, ps });
            }
        }
        match r {
            Roles::Network => steps.push(Action::MarkNetworkReady { c }),
            Roles::Publication => steps.push(Action::Publish { c }),
            _ => steps.push(Action::CommitParticipant { c, r }),
        }
    }
    steps
}

/// The model's `SlotRole`: the participant whose snapshot owns a slot.
fn slot_role(ps: ProcSlots) -> Roles {
    match ps {
        ProcSlots::SandboxRuntimeSupervisor | ProcSlots::SandboxAttachedRunsc => Roles::Sandbox,
        ProcSlots::GitRoutingDaemon => Roles::GitRouting,
        ProcSlots::HelperConnectivityHelper => Roles::Helper,
    }
}

/// A launch step's name for timings, spans and errors: the model action
/// with its role or process slot (`RecordIntent(Helper)`,
/// `CommitProcess(SandboxRuntimeSupervisor)`), without the coordinator.
pub fn step_name(a: &Action) -> String {
    let name = lazaret_generated::lazaret::action_name(a);
    match *a {
        Action::RecordIntent { r, .. }
        | Action::AcquireSnapshot { r, .. }
        | Action::CommitParticipant { r, .. } => format!("{name}({})", r.name()),
        Action::StageProcess { ps, .. } | Action::CommitProcess { ps, .. } => {
            format!("{name}({})", ps.name())
        }
        _ => name.to_owned(),
    }
}

/// Whether the step follows a report of the Runtime Supervisor (spec 3.3:
/// RS is the causal parent of the routing daemon, the helper and attached
/// runsc, whose roles record their intent when RS's broker confirms it;
/// spec 3.5: the router's mount precedes `CommitParticipant(GitRouting)`;
/// spec 3.7: RS installs the policy before the Network role records its
/// intent; the running sandbox precedes `CommitParticipant(Sandbox)`).
fn reported_by_supervisor(a: &Action) -> bool {
    match *a {
        Action::StageProcess { ps, .. } | Action::CommitProcess { ps, .. } => {
            ps != ProcSlots::SandboxRuntimeSupervisor
        }
        Action::RecordIntent { r, .. } => {
            matches!(r, Roles::GitRouting | Roles::Helper | Roles::Network)
        }
        // Spec 3.6 step 4: RS mounts the anchors in its mount namespace.
        Action::AcquireSnapshot { r, .. } => r == Roles::StateAnchor,
        Action::CommitParticipant { r, .. } => matches!(r, Roles::GitRouting | Roles::Sandbox),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::host_model::tests::{launch_steps, routed_launch_steps};
    use crate::coordinator::host_model::Routing;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A coordinator that leads a Vacant Domain served with `routing`.
    fn leading(routing: Routing) -> Result<HostModel, Box<dyn std::error::Error>> {
        let mut m = HostModel::new("hc-launch".into(), 3, routing)?;
        let c = m.me();
        m.take(Action::AcquireDomainLock { c })?;
        m.take(Action::BootstrapVacantDomain { c })?;
        Ok(m)
    }

    /// The core's launch is this build's acquisition path, step for step,
    /// and at every launch state exactly one step of the vocabulary is
    /// enabled: the list's order decides nothing the guards do not.
    #[test]
    fn the_launch_is_the_models_one_enabled_path() -> TestResult {
        for routing in [Routing::Unrouted, Routing::Routed] {
            one_enabled_path(routing)?;
        }
        Ok(())
    }

    fn one_enabled_path(routing: Routing) -> TestResult {
        let mut m = leading(routing)?;
        let c = m.me();
        let mut taken = Vec::new();
        for _ in 0..64 {
            let enabled: Vec<Action> = launch_vocabulary(c)
                .into_iter()
                .filter(|a| m.check(a).is_ok())
                .collect();
            let next = next_launch(&m);
            let a = match next {
                LaunchNext::Published => break,
                LaunchNext::Take(a) | LaunchNext::OnReport(a) => a,
                LaunchNext::Stuck => return Err(format!("stuck after {taken:?}").into()),
            };
            assert_eq!(enabled, [a], "after {taken:?}");
            m.take(a)?;
            taken.push(a);
        }
        let path = match routing {
            Routing::Unrouted => launch_steps(c),
            Routing::Routed => routed_launch_steps(c),
        };
        assert_eq!(taken, path[2..]);
        Ok(())
    }

    /// The steps RS reports are the helper's and runsc's, the network's
    /// intent and the sandbox's commit; the coordinator takes the rest
    /// itself.
    #[test]
    fn the_supervisor_reports_what_it_launches() -> TestResult {
        let unrouted = reported(Routing::Unrouted)?;
        assert_eq!(
            unrouted,
            [
                "AcquireSnapshot(StateAnchor)",
                "RecordIntent(Helper)",
                "StageProcess(HelperConnectivityHelper)",
                "CommitProcess(HelperConnectivityHelper)",
                "RecordIntent(Network)",
                "StageProcess(SandboxAttachedRunsc)",
                "CommitProcess(SandboxAttachedRunsc)",
                "CommitParticipant(Sandbox)",
            ]
        );
        // A routed Domain's RS also launches the routing daemon and
        // reports its mount, between the anchors and the helper.
        let mut routed = unrouted.clone();
        routed.splice(
            1..1,
            [
                "RecordIntent(GitRouting)",
                "StageProcess(GitRoutingDaemon)",
                "CommitProcess(GitRoutingDaemon)",
                "CommitParticipant(GitRouting)",
            ]
            .map(String::from),
        );
        assert_eq!(reported(Routing::Routed)?, routed);
        Ok(())
    }

    /// The launch steps RS reports, by name, in a Domain served with
    /// `routing`.
    fn reported(routing: Routing) -> Result<Vec<String>, Box<dyn std::error::Error>> {
        let mut m = leading(routing)?;
        let mut reported = Vec::new();
        for _ in 0..64 {
            match next_launch(&m) {
                LaunchNext::Take(a) => m.take(a).map(drop)?,
                LaunchNext::OnReport(a) => {
                    reported.push(step_name(&a));
                    m.take(a)?;
                }
                LaunchNext::Published => break,
                LaunchNext::Stuck => return Err("stuck".into()),
            }
        }
        Ok(reported)
    }

    /// A launch whose runtime ended under it never publishes: the core
    /// runs out of steps (the product then fails the launch and aborts the
    /// generation). A coordinator that does not lead has nothing to launch.
    #[test]
    fn a_launch_whose_runtime_ended_is_stuck() -> TestResult {
        let idle = HostModel::new("hc-idle".into(), 3, Routing::Unrouted)?;
        assert_eq!(next_launch(&idle), LaunchNext::Stuck);
        let mut m = leading(Routing::Routed)?;
        for _ in 0..7 {
            match next_launch(&m) {
                LaunchNext::Take(a) | LaunchNext::OnReport(a) => m.take(a).map(drop)?,
                other => return Err(format!("{other:?} before the helper").into()),
            }
        }
        m.take(Action::RuntimeSupervisorEnds)?;
        for _ in 0..64 {
            match next_launch(&m) {
                LaunchNext::Take(a) | LaunchNext::OnReport(a) => m.take(a).map(drop)?,
                LaunchNext::Stuck => return Ok(()),
                LaunchNext::Published => return Err("published without a runtime".into()),
            }
        }
        Err("the launch does not end".into())
    }
}
