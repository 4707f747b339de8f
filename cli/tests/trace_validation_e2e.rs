//! End-to-end: trace validation of observed state (docs/durable-state.md
//! "Trace validation"). Every step the Host Coordinator carries out records
//! what the Domain Store holds after its effect, and `lazaret trace replay`
//! checks the model's successor against it. A step whose effect writes
//! something else than the step says — injected here with the crash-point
//! build's fault `teardown-keeps-published` (`BeginTeardown` writes nothing,
//! so the store keeps `Published`) — runs to a clean end the product does
//! not notice, and fails replay at that step, naming both values. A fault
//! that refuses a session's Running record shows the refusal path of spec
//! 3.4's admission end to end. Needs the `crash-points` feature.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{default_image, replay_trace, text, Env, ONE_AT_A_TIME};

/// One run of `-- true` with the crash-point build's `fault`: it ends as
/// usual, nothing left running and the store clean, and its one trace
/// fails replay; returns what replay said.
fn faulted_run_fails_replay(env: &Env, fault: &str) -> String {
    let out = env
        .command_env(&["default", "--", "true"], &[("LAZARET_FAULT", fault)])
        .output()
        .unwrap();
    // Hidden: the session, the teardown and the store's end state are all
    // as usual.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    env.assert_store_clean();
    let traces = env.traces();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let replay = replay_trace(&traces[0]);
    let said = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(1),
        "{said}{}",
        text(&replay.stderr)
    );
    assert!(
        said.contains("what the product observed after the step differs"),
        "{said}"
    );
    said
}

/// The same Domain without the fault: the second trace replays,
/// observations included; returns its text.
fn clean_run_replays(env: &Env) -> String {
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    env.assert_store_clean();
    let traces = env.traces();
    assert_eq!(traces.len(), 2, "{traces:?}");
    let clean = std::fs::read_to_string(&traces[1]).unwrap();
    assert!(clean.contains("\"observed\":"), "{clean}");
    assert_replays(&traces[1]);
    clean
}

/// `lazaret trace replay` accepts the trace at `path`.
fn assert_replays(path: &std::path::Path) {
    let replay = replay_trace(path);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}{}",
        text(&replay.stdout),
        text(&replay.stderr)
    );
}

#[test]
fn a_step_whose_effect_wrote_something_else_fails_replay() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("hidden-divergence", &default_image());
    let said = faulted_run_fails_replay(&env, "teardown-keeps-published");
    assert!(said.contains("BeginTeardown("), "{said}");
    assert!(
        said.contains("decision: model \"TearingDown\" | observed \"Published\""),
        "{said}"
    );
    clean_run_replays(&env);
}

/// The Session Terminal rows are observed too (`termsLeft`): a piped
/// command that completed by itself has its release retained (its guest
/// group is not observed, docs/terminals.md), and the fault
/// `retained-release-cleaned` makes the effect record that terminal clean
/// while the step says `RetainSessionRelease` — the durable record of a
/// release that never proved its processes absent (spec 3.4 release step
/// 3). The run ends clean; replay fails at that step on `termsLeft`.
#[test]
fn a_retained_release_recorded_clean_fails_replay() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("hidden-terminal", &default_image());
    let said = faulted_run_fails_replay(&env, "retained-release-cleaned");
    assert!(said.contains("RetainSessionRelease("), "{said}");
    assert!(
        said.contains("termsLeft: model true | observed false"),
        "{said}"
    );
    // Without the fault the same release is retained, observed left, and
    // cleaned by the teardown's CleanSessionTerminals.
    let clean = clean_run_replays(&env);
    assert!(clean.contains("\"termsLeft\":true"), "{clean}");
    assert!(clean.contains("CleanSessionTerminals"), "{clean}");
}

/// Spec 3.4 "Failure before the running state never admits the terminal".
/// The fault `running-record-refused` makes the coordinator answer an
/// interactive session's guest identity as if its Running record could not
/// be made: Lazaret's guest leader is refused, so the command never runs
/// (its marker is never written), the CLI ends with 125 and says why, and
/// the trace takes `AbortSessionStart`, never `RegisterSession`, and
/// replays. Nothing is left.
#[test]
fn a_session_not_recorded_running_never_runs_its_command() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("refused-admission", &default_image());
    let out = env.run_on_terminal_env(
        &["default", "--", "sh", "-c", "touch /workspace/ran"],
        &[("LAZARET_FAULT", "running-record-refused")],
    );
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(125), "{shown}");
    assert!(shown.contains("this session was not admitted"), "{shown}");
    assert!(!env.workspace.join("ran").exists(), "the command ran");
    env.assert_nothing_running();
    env.assert_store_clean();
    let traces = env.traces();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let trace = std::fs::read_to_string(&traces[0]).unwrap();
    assert!(trace.contains("\"AbortSessionStart\""), "{trace}");
    assert!(!trace.contains("\"RegisterSession\""), "{trace}");
    assert_replays(&traces[0]);
}
