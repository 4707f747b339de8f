//! Simulated runs of the Host Coordinator's decisions without runsc or a
//! kernel (spec 3.3 recovery; FR-6, FR-7, OR-1): one coordinator's whole
//! life — bootstrap, the launch its first client asks for, a second
//! session, both sessions' ends, the teardown and its exit — as the core
//! decides it ([`super::serve`], [`next_launch`],
//! [`HostModel::next_release`]), cut by a crash after every step. The successor continues the dead coordinator's
//! trace as the product does ([`HostModel::resume`]) and takes the
//! recovery the core decides ([`next_recovery`], the function the
//! product's recovery runs); it is itself cut by a crash after every one
//! of its steps, and a third coordinator finishes. Every run must end with
//! the generation Vacant, every participant and session terminal clean, no
//! session left, and a trace that replays against the model.

use lazaret_generated::lazaret::{Action, Decision, Hc, Part, Rs, Runsc, Sess, SessionsId};

use super::host_model::{HostModel, Routing};
use super::launch::{next_launch, LaunchNext};
use super::recovery::{next_recovery, Recovering, RecoveryNext};
use super::serve::{self, Admission};
use crate::replay::{replay_text, Outcome};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A trace under construction: the model, its lines and its steps so far.
struct Run {
    model: HostModel,
    text: String,
    steps: Vec<Action>,
}

impl Run {
    fn new(routing: Routing) -> TestResult<Self> {
        let model = HostModel::new("hc-first".into(), 9, routing)?;
        let text = model.header().to_json() + "\n";
        Ok(Self {
            model,
            text,
            steps: Vec::new(),
        })
    }

    fn take(&mut self, action: Action) -> TestResult {
        let line = self.model.take(action)?;
        self.text += &(line.to_json() + "\n");
        self.steps.push(action);
        Ok(())
    }

    /// A client joins the published generation after its `ConnectClient`.
    fn join(&mut self, s: SessionsId) -> TestResult {
        let c = self.model.me();
        self.take(Action::EnrollClient { c, s })?;
        self.take(Action::RecordTerminalIntent { c, s })?;
        self.take(Action::RegisterSession { c, s })
    }

    /// The steps of one whole coordinator life, as the core decides them
    /// (the launch: [`next_launch`], each RS report arriving as asked).
    fn whole_life(mut self) -> TestResult<Vec<Action>> {
        let c = self.model.me();
        self.take(Action::AcquireDomainLock { c })?;
        self.take(Action::BootstrapVacantDomain { c })?;
        let first = serve::on_client(&self.model, true)?.ok_or("no slot")?;
        assert_eq!(first.admission, Admission::Launch);
        self.take(first.connect())?;
        for _ in 0..64 {
            match next_launch(&self.model) {
                LaunchNext::Take(a) | LaunchNext::OnReport(a) => self.take(a)?,
                LaunchNext::Published => break,
                LaunchNext::Stuck => return Err("the launch is stuck".into()),
            }
        }
        self.join(first.s)?;
        let second = serve::on_client(&self.model, true)?.ok_or("no slot")?;
        assert_eq!(second.admission, Admission::Join);
        self.take(second.connect())?;
        self.join(second.s)?;
        // The first session asks to release, then ends clean; the second
        // ends without asking, and its release is retained (spec 3.4
        // release step 3): its terminal is cleaned in the teardown.
        let close = serve::on_session_releasing(&self.model, first.s).ok_or("not registered")?;
        self.take(close.action)?;
        for (s, retained) in [(first.s, false), (second.s, true)] {
            let end = serve::on_session_ended(&self.model, s, retained);
            if let Some(close) = end.close {
                self.take(close.action)?;
            }
            self.take(end.finish)?;
        }
        assert!(serve::serving_done(&self.model));
        self.take(Action::BeginTeardown { c })?;
        for _ in 0..32 {
            let Some(a) = self.model.next_release() else {
                break;
            };
            self.take(a)?;
        }
        self.take(Action::ExitCoordinator { c })?;
        assert_eq!(self.model.state().decision, Decision::Vacant);
        Ok(self.steps)
    }
}

/// The first coordinator's trace after its first `k` steps of `life`.
fn cut(routing: Routing, life: &[Action], k: usize) -> TestResult<String> {
    let mut run = Run::new(routing)?;
    for a in &life[..k] {
        run.take(*a)?;
    }
    Ok(run.text)
}

/// The successor's next step on a dead coordinator's trace, as the
/// product takes them: a retired generation's trace is kept as it is; a
/// generation that never started is continued by the successor's own life
/// (`own_trace`: the dead holder's loss, then the Vacant bootstrap and,
/// with no client, `ExitCoordinator`); any other is recovered as the core
/// decides ([`next_recovery`]), the runtime proved absent when asked
/// (`runsc_outlived`: runsc was still present when RS was gone).
fn next_recovery_step(model: &HostModel, runsc_outlived: bool) -> Option<Action> {
    let me = model.me();
    let st = model.state();
    if st.gen_ != 0 && st.decision == Decision::Vacant {
        return None;
    }
    if st.gen_ == 0 {
        if let Some(dead) = model.holders().into_iter().find(|c| *c != me) {
            return Some(Action::HostCoordinatorLost { c: dead });
        }
        return match st.hc[me.index()] {
            Hc::Idle => Some(Action::AcquireDomainLock { c: me }),
            Hc::Bootstrapping => Some(Action::BootstrapVacantDomain { c: me }),
            Hc::Leading | Hc::Serving => Some(Action::ExitCoordinator { c: me }),
            _ => None,
        };
    }
    let seen = Recovering {
        store_differs: false,
        runtime_absent: Some(runsc_outlived),
    };
    match next_recovery(model, seen) {
        RecoveryNext::Step(a) => Some(a),
        RecoveryNext::ProveRuntimeAbsent | RecoveryNext::Done => None,
    }
}

/// Continues the trace `text` as a successor, for at most `limit` steps.
fn continue_recovery(
    text: &str,
    runsc_outlived: bool,
    limit: usize,
) -> TestResult<(String, HostModel)> {
    let (mut model, _) = HostModel::resume("gen-9.jsonl", text)?;
    let mut out = text.to_owned();
    for _ in 0..limit {
        let Some(a) = next_recovery_step(&model, runsc_outlived) else {
            break;
        };
        out += &(model.take(a)?.to_json() + "\n");
    }
    Ok((out, model))
}

/// The end every run must reach: a trace that replays, the generation
/// Vacant with every participant clean (or never acquired), no runtime
/// process and no registered session.
fn assert_recovered(text: &str, model: &HostModel, what: &str) -> TestResult {
    if let Outcome::Diverged(d) = replay_text("gen-9.jsonl", text)? {
        return Err(format!("{what}: diverged: {d:?}").into());
    }
    let st = model.state();
    assert_eq!(next_recovery_step(model, false), None, "{what}: not done");
    assert_eq!(st.decision, Decision::Vacant, "{what}");
    assert!(
        st.part
            .iter()
            .all(|p| matches!(p, Part::None | Part::Clean)),
        "{what}: {:?}",
        st.part
    );
    assert_eq!((st.rs, st.runsc), (Rs::Absent, Runsc::Absent), "{what}");
    assert!(!st.terms_left, "{what}: session terminals left");
    assert!(
        st.sess
            .iter()
            .all(|s| !matches!(s, Sess::Registered | Sess::Closing)),
        "{what}: {:?}",
        st.sess
    );
    Ok(())
}

/// A crash after every step of a whole coordinator life, and of the
/// successor's recovery after each of those, ends recovered: the core's
/// decisions reach a clean Domain from every point, both when RS and
/// runsc went together and when runsc outlived RS. Returns how many runs
/// that took.
fn every_crash_is_recovered(routing: Routing, life_steps: usize) -> TestResult<usize> {
    let life = Run::new(routing)?.whole_life()?;
    assert_eq!(life.len(), life_steps, "{life:?}");
    let mut runs = 0;
    // The last step is ExitCoordinator: a crash after it is no crash.
    for k in 0..life.len() {
        let dead = cut(routing, &life, k)?;
        for runsc_outlived in [false, true] {
            let (whole, model) = continue_recovery(&dead, runsc_outlived, 64)?;
            let what = format!("crash after {k} steps (runsc outlived: {runsc_outlived})");
            assert_recovered(&whole, &model, &what)?;
            runs += 1;
            let steps = whole.lines().count() - dead.lines().count();
            // The successor dies after each of its own steps; a third
            // coordinator finishes.
            for j in 0..steps {
                let (cut_again, _) = continue_recovery(&dead, runsc_outlived, j)?;
                let (done, model) = continue_recovery(&cut_again, runsc_outlived, 64)?;
                assert_recovered(
                    &done,
                    &model,
                    &format!("{what}, successor crash after {j} steps"),
                )?;
                runs += 1;
            }
        }
    }
    Ok(runs)
}

/// Every crash of an unrouted Domain's coordinator life: 51 crash points,
/// two ways the runtime ended, and each successor's recovery cut after
/// every one of its steps.
#[test]
fn a_crash_at_every_step_and_in_every_recovery_step_is_recovered() -> TestResult {
    assert_eq!(every_crash_is_recovered(Routing::Unrouted, 53)?, 1337);
    Ok(())
}

/// The same for a routed Domain, whose life has the ignored-path router's
/// four launch steps and its two release steps more: 57 crash points.
#[test]
fn a_routed_domain_recovers_from_a_crash_at_every_step() -> TestResult {
    assert_eq!(every_crash_is_recovered(Routing::Routed, 59)?, 1614);
    Ok(())
}
