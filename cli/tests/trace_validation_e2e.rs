//! End-to-end: trace validation of observed state (docs/durable-state.md
//! "Trace validation"). Every step the Host Coordinator carries out records
//! what the Domain Store holds after its effect, and `lazaret trace replay`
//! checks the model's successor against it. A step whose effect writes
//! something else than the step says — injected here with the crash-point
//! build's fault `teardown-keeps-published` (`BeginTeardown` writes nothing,
//! so the store keeps `Published`) — runs to a clean end the product does
//! not notice, and fails replay at that step, naming both values. Needs the
//! `crash-points` feature.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{default_image, replay_trace, text, Env, ONE_AT_A_TIME};

#[test]
fn a_step_whose_effect_wrote_something_else_fails_replay() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("hidden-divergence", &default_image());
    let out = env
        .command_env(
            &["default", "--", "true"],
            &[("LAZARET_FAULT", "teardown-keeps-published")],
        )
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
    assert!(said.contains("BeginTeardown("), "{said}");
    assert!(
        said.contains("what the product observed after the step differs"),
        "{said}"
    );
    assert!(
        said.contains("decision: model \"TearingDown\" | observed \"Published\""),
        "{said}"
    );
    // The same Domain without the fault: its trace replays, observations
    // included.
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_running();
    let traces = env.traces();
    assert_eq!(traces.len(), 2, "{traces:?}");
    let clean = std::fs::read_to_string(&traces[1]).unwrap();
    assert!(clean.contains("\"observed\":"), "{clean}");
    let replay = replay_trace(&traces[1]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}{}",
        text(&replay.stdout),
        text(&replay.stderr)
    );
}
