//! The core takes model steps through the generated `step` and refuses
//! disabled ones without changing state.

use lazaret_generated::fixtures::two_phase::{self, Action, RMId};
use lazaret_generated::support::{Cfg, Protocol};
use lazaret_runtime::core::{Command, Core, CoreError, Event};
use lazaret_runtime::replay::{replay, Outcome};

fn core() -> Result<Core<two_phase::Model>, Box<dyn std::error::Error>> {
    let entry = lazaret_generated::MODELS
        .iter()
        .find(|m| m.name == "TwoPhase")
        .ok_or("no TwoPhase")?;
    let cx = two_phase::Model::constants(&Cfg::parse(entry.cfg_file, entry.cfg_text)?)?;
    Ok(Core::new(cx, 4)?)
}

#[test]
fn disabled_action_is_an_error_and_changes_nothing() -> Result<(), Box<dyn std::error::Error>> {
    let mut c = core()?;
    let before = c.state().clone();
    let err = c
        .handle(Event::TimerExpired {
            timer: 1,
            action: Action::RMRcvCommitMsg { r: RMId(0) },
        })
        .err()
        .ok_or("a disabled step was taken")?;
    match &err {
        CoreError::Disabled {
            event,
            action,
            guard,
            ..
        } => {
            assert_eq!(*event, "timer expiry");
            assert_eq!(*action, "RMRcvCommitMsg");
            assert_eq!(guard.text, "msgCommit");
        }
        other => return Err(format!("unexpected {other:?}").into()),
    }
    assert!(
        err.to_string()
            .contains("guard 1 (line 55) is false: msgCommit"),
        "{err}"
    );
    assert_eq!(c.state(), &before);
    assert_eq!(c.steps(), 0);
    Ok(())
}

#[test]
fn requests_yield_trace_effect_and_reply_and_the_trace_replays(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = core()?;
    let mut trace = Vec::new();
    let cmds = c.handle(Event::Request {
        request: 9,
        action: Action::RMPrepare { r: RMId(1) },
    })?;
    assert_eq!(cmds.len(), 3);
    match (&cmds[0], &cmds[1], &cmds[2]) {
        (
            Command::Trace(t),
            Command::Perform {
                effect,
                action,
                params,
            },
            Command::Reply { request },
        ) => {
            assert_eq!(
                (t.step, t.generation, t.action.as_str()),
                (1, 4, "RMPrepare")
            );
            assert_eq!((*effect, *action), (1, "RMPrepare"));
            assert_eq!(params, &vec![("r", "r2".to_string())]);
            assert_eq!(*request, 9);
            trace.push(t.to_json());
        }
        other => return Err(format!("unexpected commands {other:?}").into()),
    }
    for action in [
        Action::TMRcvPrepared { r: RMId(1) },
        Action::TMAbort,
        Action::RMRcvAbortMsg { r: RMId(0) },
    ] {
        let cmds = c.handle(Event::EffectCompleted { effect: 1, action })?;
        assert_eq!(cmds.len(), 1, "an observation yields only its trace line");
        if let Command::Trace(t) = &cmds[0] {
            trace.push(t.to_json());
        }
    }
    let lines: Vec<&str> = trace.iter().map(String::as_str).collect();
    let entry = lazaret_generated::MODELS
        .iter()
        .find(|m| m.name == "TwoPhase")
        .ok_or("no TwoPhase")?;
    let cx = two_phase::Model::constants(&Cfg::parse(entry.cfg_file, entry.cfg_text)?)?;
    assert_eq!(
        replay::<two_phase::Model>("core.jsonl", &cx, &lines, 0)?,
        Outcome::Conforms {
            model: "TwoPhase".into(),
            steps: 4,
            recorded_start: false,
        }
    );
    Ok(())
}
