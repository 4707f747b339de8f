//! Table tests for the per-session terminal state machine (spec 3.4, FR-15).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_runtime::records::ids::{GenerationId, SessionId};
use lazaret_runtime::terminal::machine::*;
use lazaret_runtime::terminal::protocol::*;
use lazaret_runtime::terminal::sessions::{SessionLimits, SessionTable, TableError};
use std::num::NonZeroU16;

const S: SessionId = SessionId([7; 16]);
const G: GenerationId = GenerationId(3);
const QUEUE: usize = 64;
const T: ReleaseTimings = ReleaseTimings {
    refusal_wait_ms: 50,
    hangup_grace_ms: 100,
    terminate_grace_ms: 200,
    drain_deadline_ms: 300,
};

/// An interactive terminal still waiting for its Running record.
fn admitting() -> Machine {
    Machine::new(S, G, T, QUEUE)
}

/// An interactive terminal recorded running, its guest leader told.
fn machine() -> Machine {
    let mut m = admitting();
    assert_eq!(ok(&mut m, Input::Admitted), vec![Command::AdmitGuestLeader]);
    m
}

fn chunk(b: &[u8]) -> Chunk {
    Chunk::new(b.to_vec()).unwrap()
}

fn nz(v: u16) -> NonZeroU16 {
    NonZeroU16::new(v).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Input,
    Resize,
    Interrupt,
    Quit,
    Suspend,
    Close,
}
const KINDS: [Kind; 6] = [
    Kind::Input,
    Kind::Resize,
    Kind::Interrupt,
    Kind::Quit,
    Kind::Suspend,
    Kind::Close,
];

fn event(kind: Kind, session: SessionId) -> SessionTerminalEvent {
    let signal = |signal| {
        SessionTerminalEvent::Signal(TerminalSignal {
            session_id: session,
            signal,
        })
    };
    match kind {
        Kind::Input => SessionTerminalEvent::Input(TerminalInput {
            session_id: session,
            bytes: chunk(b"x"),
        }),
        Kind::Resize => SessionTerminalEvent::Resize(TerminalResize {
            session_id: session,
            rows: nz(40),
            columns: nz(120),
            pixel_width: 0,
            pixel_height: 0,
        }),
        Kind::Interrupt => signal(TerminalSignalKind::Interrupt),
        Kind::Quit => signal(TerminalSignalKind::Quit),
        Kind::Suspend => signal(TerminalSignalKind::Suspend),
        Kind::Close => SessionTerminalEvent::Close(SessionClose {
            session_id: session,
        }),
    }
}

fn client(kind: Kind) -> Input {
    Input::Client {
        generation: G,
        event: event(kind, S),
    }
}

fn ok(m: &mut Machine, input: Input) -> Vec<Command> {
    m.handle(input.clone())
        .unwrap_or_else(|e| panic!("{input:?} refused in {}: {e}", m.phase()))
}

fn accepted_commands(kind: Kind) -> Vec<Command> {
    match kind {
        Kind::Input => vec![Command::WritePty(chunk(b"x"))],
        Kind::Resize => vec![
            Command::SetWindowSize {
                rows: nz(40),
                columns: nz(120),
                pixel_width: 0,
                pixel_height: 0,
            },
            Command::SignalForeground(GuestSignal::WindowChange),
        ],
        Kind::Interrupt => vec![Command::SignalForeground(GuestSignal::Interrupt)],
        Kind::Quit => vec![Command::SignalForeground(GuestSignal::Quit)],
        Kind::Suspend => vec![Command::SignalForeground(GuestSignal::Suspend)],
        Kind::Close => vec![
            Command::RecordReleaseIntent { awaited: true },
            Command::ObserveGroup,
        ],
    }
}

#[test]
fn events_by_route_table() {
    use TerminalRoute::*;
    for route in [Sandbox, Prompt, HostProcess] {
        for kind in KINDS {
            let mut m = machine();
            ok(&mut m, Input::Route(route));
            let got = m.handle(client(kind));
            let admitted = match kind {
                Kind::Close => true,
                _ => route == Sandbox,
            };
            if admitted {
                assert_eq!(got.unwrap(), accepted_commands(kind), "{route:?} {kind:?}");
            } else {
                assert_eq!(
                    got.unwrap_err(),
                    Refusal::InactiveRoute {
                        route,
                        event: match kind {
                            Kind::Input => "Input",
                            Kind::Resize => "Resize",
                            Kind::Close => "Close",
                            _ => "Signal",
                        }
                    },
                    "{route:?} {kind:?}"
                );
            }
        }
    }
}

#[test]
fn signal_numbers_are_linux_numbers() {
    let table = [
        (GuestSignal::Hangup, 1, "SIGHUP"),
        (GuestSignal::Interrupt, 2, "SIGINT"),
        (GuestSignal::Quit, 3, "SIGQUIT"),
        (GuestSignal::Kill, 9, "SIGKILL"),
        (GuestSignal::Terminate, 15, "SIGTERM"),
        (GuestSignal::Suspend, 20, "SIGTSTP"),
        (GuestSignal::WindowChange, 28, "SIGWINCH"),
    ];
    for (s, n, name) in table {
        assert_eq!((s.number(), s.name()), (n, name));
    }
}

#[test]
fn wrong_session_and_stale_generation_refuse() {
    let mut m = machine();
    for kind in KINDS {
        let other = SessionId([8; 16]);
        assert_eq!(
            m.handle(Input::Client {
                generation: G,
                event: event(kind, other)
            }),
            Err(Refusal::InvalidSession {
                expected: S,
                got: other
            })
        );
        assert_eq!(
            m.handle(Input::Client {
                generation: GenerationId(2),
                event: event(kind, S)
            }),
            Err(Refusal::StaleGeneration {
                expected: G,
                got: GenerationId(2)
            })
        );
    }
    assert_eq!(m.phase(), "Running");
}

/// Every release phase, reached by real inputs.
fn release_phases() -> Vec<(&'static str, Machine)> {
    let mut out = Vec::new();
    let mut m = machine();
    ok(&mut m, client(Kind::Close));
    out.push(("Observing", m));
    let mut m = machine();
    ok(&mut m, client(Kind::Close));
    ok(&mut m, Input::ReleaseIntentConfirmed);
    ok(&mut m, Input::Observed(GroupObservation::LeaderMatches));
    out.push(("Grace", m));
    let mut m = machine();
    ok(&mut m, client(Kind::Close));
    ok(&mut m, Input::Observed(GroupObservation::Empty));
    out.push(("AwaitExec", m));
    let mut m = machine();
    ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
    out.push(("Draining", m));
    let mut m = machine();
    ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
    ok(&mut m, Input::OutputEof);
    out.push(("FinalObserve", m));
    let mut m = machine();
    ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
    ok(&mut m, Input::OutputEof);
    ok(&mut m, Input::Observed(GroupObservation::Empty));
    out.push(("Clean", m));
    let mut m = machine();
    ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
    ok(&mut m, Input::OutputEof);
    ok(
        &mut m,
        Input::Observed(GroupObservation::LeaderAbsentGroupRemains),
    );
    out.push(("Retained", m));
    out
}

#[test]
fn every_event_is_refused_in_every_release_phase() {
    for (phase, mut m) in release_phases() {
        assert_eq!(m.phase(), phase);
        for kind in KINDS {
            assert!(
                matches!(
                    m.handle(client(kind)),
                    Err(Refusal::InRelease { session: S, .. })
                ),
                "{phase} {kind:?}"
            );
        }
        // Route changes belong to a running terminal only.
        assert!(
            m.handle(Input::Route(TerminalRoute::Sandbox)).is_err(),
            "{phase}"
        );
    }
}

#[test]
fn pty_read_budget_table() {
    use TerminalRoute::*;
    for route in [Sandbox, Prompt, HostProcess] {
        let mut m = machine();
        ok(&mut m, Input::Route(route));
        let expected = if route == Sandbox { QUEUE } else { 0 };
        assert_eq!(m.pty_read_budget(), expected, "{route:?}");
        if route != Sandbox {
            assert!(m.handle(Input::PtyData(chunk(b"a"))).is_err(), "{route:?}");
        }
    }
    for (phase, m) in release_phases() {
        let expected = if phase == "Draining" { QUEUE } else { 0 };
        assert_eq!(m.pty_read_budget(), expected, "{phase}");
    }
}

#[test]
fn prompt_route_pauses_and_sandbox_route_resumes_forwarding() {
    let mut m = machine();
    ok(&mut m, Input::PtyData(chunk(b"before")));
    ok(&mut m, Input::Route(TerminalRoute::Prompt));
    assert_eq!(m.pty_read_budget(), 0);
    assert!(m.handle(Input::PtyData(chunk(b"during"))).is_err());
    ok(&mut m, Input::Route(TerminalRoute::Sandbox));
    assert_eq!(m.pty_read_budget(), QUEUE - 6);
    ok(&mut m, Input::PtyData(chunk(b"after")));
    let mut seen = Vec::new();
    while let Some(SessionTerminalMessage::Output(o)) = m.poll_message() {
        seen.extend_from_slice(o.bytes.as_bytes());
    }
    assert_eq!(seen, b"beforeafter");
}

#[test]
fn full_client_queue_stops_pty_reads_until_drained() {
    let mut m = machine();
    ok(&mut m, Input::PtyData(chunk(&[b'a'; 40])));
    assert_eq!(m.pty_read_budget(), 24);
    assert!(m.handle(Input::PtyData(chunk(&[b'b'; 25]))).is_err());
    ok(&mut m, Input::PtyData(chunk(&[b'b'; 24])));
    assert_eq!(m.pty_read_budget(), 0);
    assert!(m.handle(Input::PtyData(chunk(b"c"))).is_err());
    assert!(matches!(
        m.poll_message(),
        Some(SessionTerminalMessage::Output(_))
    ));
    assert_eq!(m.pty_read_budget(), 40);
}

/// Runs `inputs`, returning every command in order.
fn run(m: &mut Machine, inputs: Vec<Input>) -> Vec<Command> {
    inputs.into_iter().flat_map(|i| ok(m, i)).collect()
}

fn messages(m: &mut Machine) -> Vec<SessionTerminalMessage> {
    std::iter::from_fn(|| m.poll_message()).take(1000).collect()
}

#[test]
fn close_with_live_leader_follows_the_full_release_order() {
    use Command::*;
    let mut m = machine();
    let leader = || Input::Observed(GroupObservation::LeaderMatches);
    let got = run(
        &mut m,
        vec![
            client(Kind::Close),
            Input::ReleaseIntentConfirmed,
            leader(),
            Input::Timer(TimerKind::HangupGrace),
            leader(),
            Input::Timer(TimerKind::TerminateGrace),
            leader(),
            Input::ExecClientExited(ExecStatus::Signalled(9)),
            Input::PtyData(chunk(b"tail")),
            Input::OutputEof,
            Input::Observed(GroupObservation::Empty),
        ],
    );
    let timer = |timer, after_ms| StartTimer { timer, after_ms };
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            SignalGroup(GuestSignal::Hangup),
            timer(TimerKind::HangupGrace, 100),
            ObserveGroup,
            SignalGroup(GuestSignal::Terminate),
            timer(TimerKind::TerminateGrace, 200),
            ObserveGroup,
            SignalGroup(GuestSignal::Kill),
            TerminateExecClient,
            ReapExecClient,
            timer(TimerKind::DrainDeadline, 300),
            CancelTimer(TimerKind::DrainDeadline),
            CloseOutput,
            ObserveGroup,
            RecordClean,
        ]
    );
    assert!(m.is_clean());
    assert_eq!(
        messages(&mut m),
        vec![
            SessionTerminalMessage::Output(TerminalOutput {
                session_id: S,
                bytes: chunk(b"tail")
            }),
            SessionTerminalMessage::Exit(SessionExit::terminated(S)),
        ]
    );
}

#[test]
fn guest_exiting_on_hangup_reports_the_exec_client_status() {
    use Command::*;
    let mut m = machine();
    let got = run(
        &mut m,
        vec![
            client(Kind::Close),
            Input::ReleaseIntentConfirmed,
            Input::Observed(GroupObservation::LeaderMatches),
            Input::ExecClientExited(ExecStatus::Exited(129)),
            Input::Timer(TimerKind::DrainDeadline),
            Input::Observed(GroupObservation::Empty),
        ],
    );
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            SignalGroup(GuestSignal::Hangup),
            StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: 100
            },
            CancelTimer(TimerKind::HangupGrace),
            ReapExecClient,
            StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: 300
            },
            CloseOutput,
            ObserveGroup,
            RecordClean,
        ]
    );
    assert_eq!(
        messages(&mut m),
        vec![SessionTerminalMessage::Exit(SessionExit::exited(S, 129))]
    );
}

#[test]
fn leader_observation_table_at_every_signal_stage() {
    // (observation, signal sent?, final state with an empty group at the end)
    let table = [
        (GroupObservation::LeaderMatches, true, None),
        (GroupObservation::Empty, false, None),
        (
            GroupObservation::LeaderAbsentGroupRemains,
            false,
            Some(RetainReason::GroupRemains),
        ),
        (
            GroupObservation::Mismatch,
            false,
            Some(RetainReason::LeaderMismatch),
        ),
    ];
    for stage in 0..3 {
        for (observation, signals, retained) in table {
            let mut m = machine();
            ok(&mut m, client(Kind::Close));
            ok(&mut m, Input::ReleaseIntentConfirmed);
            let signals_before = [
                Input::Timer(TimerKind::HangupGrace),
                Input::Timer(TimerKind::TerminateGrace),
            ];
            for timer in signals_before.iter().take(stage) {
                ok(&mut m, Input::Observed(GroupObservation::LeaderMatches));
                ok(&mut m, timer.clone());
            }
            let got = ok(&mut m, Input::Observed(observation));
            let signal = [
                GuestSignal::Hangup,
                GuestSignal::Terminate,
                GuestSignal::Kill,
            ][stage];
            assert_eq!(
                got.contains(&Command::SignalGroup(signal)),
                signals,
                "stage {stage} {observation:?}: {got:?}"
            );
            let signalled_any = got.iter().any(|c| matches!(c, Command::SignalGroup(_)));
            assert_eq!(signalled_any, signals, "no other signal may be sent");
            // Finish: exec client ends (by itself or by our termination).
            if stage < 2 && signals {
                ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
            } else {
                assert!(got.contains(&Command::TerminateExecClient), "{got:?}");
                ok(&mut m, Input::ExecClientExited(ExecStatus::Signalled(9)));
            }
            ok(&mut m, Input::OutputEof);
            let last = ok(&mut m, Input::Observed(GroupObservation::Empty));
            match retained {
                None => assert_eq!(last, vec![Command::RecordClean]),
                Some(r) => {
                    assert_eq!(last, vec![Command::RetainReleaseIntent(r)]);
                    assert_eq!(m.retained(), Some(r));
                }
            }
        }
    }
}

#[test]
fn final_observation_table() {
    for (observation, expected) in [
        (GroupObservation::Empty, Command::RecordClean),
        (
            GroupObservation::LeaderAbsentGroupRemains,
            Command::RetainReleaseIntent(RetainReason::GroupRemains),
        ),
        (
            GroupObservation::LeaderMatches,
            Command::RetainReleaseIntent(RetainReason::GroupRemains),
        ),
        (
            GroupObservation::Mismatch,
            Command::RetainReleaseIntent(RetainReason::LeaderMismatch),
        ),
    ] {
        let mut m = machine();
        ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
        ok(&mut m, Input::OutputEof);
        assert_eq!(ok(&mut m, Input::Observed(observation)), vec![expected]);
    }
}

#[test]
fn normal_completion_drains_then_sends_one_exit_after_the_last_byte() {
    use Command::*;
    let mut m = machine();
    ok(&mut m, Input::PtyData(chunk(b"one ")));
    let got = ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(3)));
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: false },
            ReapExecClient,
            StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: 300
            }
        ]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::GuestCompleted));
    ok(&mut m, Input::PtyData(chunk(b"two")));
    assert_eq!(
        ok(&mut m, Input::Timer(TimerKind::DrainDeadline)),
        vec![CloseOutput, ObserveGroup]
    );
    assert_eq!(m.pty_read_budget(), 0);
    assert!(m.handle(Input::PtyData(chunk(b"late"))).is_err());
    let msgs = messages(&mut m);
    let exits = msgs
        .iter()
        .filter(|m| matches!(m, SessionTerminalMessage::Exit(_)))
        .count();
    assert_eq!(exits, 1);
    assert_eq!(
        msgs.last(),
        Some(&SessionTerminalMessage::Exit(SessionExit::exited(S, 3)))
    );
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        ok(&mut m, Input::Observed(GroupObservation::Empty)),
        vec![RecordClean]
    );
    assert!(m.poll_message().is_none());
}

/// An observation that finds the leader matching sends the first rung,
/// SIGHUP, and arms its grace.
fn a_matching_leader_gets_sighup(m: &mut Machine) {
    use Command::*;
    assert_eq!(ok(m, Input::ReleaseIntentConfirmed), vec![]);
    assert_eq!(
        ok(m, Input::Observed(GroupObservation::LeaderMatches)),
        vec![
            SignalGroup(GuestSignal::Hangup),
            StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: T.hangup_grace_ms
            }
        ]
    );
}

/// The rest of a release whose client is gone: the group is found empty,
/// the exec client ends with `status`, the PTY is closed and observed once
/// more; the terminal is clean and nothing is sent.
fn ends_clean_and_silent(m: &mut Machine, status: ExecStatus) {
    use Command::*;
    ok(m, Input::Observed(GroupObservation::Empty));
    assert_eq!(
        ok(m, Input::ExecClientExited(status)),
        vec![ReapExecClient, CloseOutput, ObserveGroup]
    );
    ok(m, Input::Observed(GroupObservation::Empty));
    assert!(m.is_clean());
    assert!(m.poll_message().is_none());
}

#[test]
fn client_loss_discards_output_and_sends_nothing() {
    use Command::*;
    let mut m = machine();
    ok(&mut m, Input::PtyData(chunk(b"unsent")));
    assert_eq!(
        ok(&mut m, Input::ClientLost),
        vec![RecordReleaseIntent { awaited: true }, ObserveGroup]
    );
    assert_eq!(m.queued_bytes(), 0);
    ends_clean_and_silent(&mut m, ExecStatus::Signalled(9));
}

#[test]
fn pty_loss_skips_the_drain_but_reports_the_exit() {
    use Command::*;
    let mut m = machine();
    let got = run(
        &mut m,
        vec![
            Input::OutputLost,
            Input::Observed(GroupObservation::Empty),
            Input::ExecClientExited(ExecStatus::Signalled(9)),
        ],
    );
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            TerminateExecClient,
            ReapExecClient,
            CloseOutput,
            ObserveGroup
        ]
    );
    assert_eq!(
        messages(&mut m),
        vec![SessionTerminalMessage::Exit(SessionExit::terminated(S))]
    );
}

#[test]
fn exec_client_loss_still_signals_a_live_leader_and_reports_runtime_lost() {
    use Command::*;
    let mut m = machine();
    let got = run(
        &mut m,
        vec![
            Input::ExecClientLost,
            Input::ReleaseIntentConfirmed,
            Input::Observed(GroupObservation::LeaderMatches),
        ],
    );
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            SignalGroup(GuestSignal::Hangup),
            StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: 100
            }
        ]
    );
    let got = run(
        &mut m,
        vec![
            Input::Timer(TimerKind::HangupGrace),
            Input::Observed(GroupObservation::Empty),
        ],
    );
    assert_eq!(
        got,
        vec![ObserveGroup, ReapExecClient, CloseOutput, ObserveGroup]
    );
    assert_eq!(
        messages(&mut m),
        vec![SessionTerminalMessage::Exit(SessionExit::runtime_lost(S))]
    );
    // The group is empty, but the lost exec client's absence is not proved
    // (FR-7): the release intent is retained, not recorded clean.
    assert_eq!(
        ok(&mut m, Input::Observed(GroupObservation::Empty)),
        vec![RetainReleaseIntent(RetainReason::ExecClientLost)]
    );
    assert_eq!(m.retained(), Some(RetainReason::ExecClientLost));
}

/// An exec client killed by a signal Lazaret did not send says nothing of
/// its guest: the leader may still run, so it is observed and signalled
/// like a lost client's (spec 3.4 "exec-client loss"), and the client is
/// told the runtime lost the command.
#[test]
fn an_exec_client_killed_by_another_is_released_as_lost() {
    use Command::*;
    let mut m = machine();
    assert_eq!(
        ok(&mut m, Input::ExecClientExited(ExecStatus::Signalled(15))),
        vec![RecordReleaseIntent { awaited: true }, ObserveGroup]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::ExecClientLost));
    a_matching_leader_gets_sighup(&mut m);
    // No exit status of the guest ends the grace: it is waited out.
    assert_eq!(
        ok(&mut m, Input::Timer(TimerKind::HangupGrace)),
        vec![ObserveGroup]
    );
    run(
        &mut m,
        vec![
            Input::Observed(GroupObservation::Empty),
            Input::Observed(GroupObservation::Empty),
        ],
    );
    assert!(m.is_clean(), "{}", m.phase());
    assert_eq!(
        messages(&mut m),
        vec![SessionTerminalMessage::Exit(SessionExit::runtime_lost(S))]
    );
}

#[test]
fn unexpected_inputs_are_refused_without_effect() {
    let mut m = machine();
    for input in [
        Input::Observed(GroupObservation::Empty),
        Input::Timer(TimerKind::HangupGrace),
        Input::Timer(TimerKind::TerminateGrace),
        Input::Timer(TimerKind::DrainDeadline),
    ] {
        assert!(
            matches!(
                m.handle(input.clone()),
                Err(Refusal::Unexpected {
                    phase: "Running",
                    ..
                })
            ),
            "{input:?}"
        );
    }
    ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0)));
    assert!(m
        .handle(Input::ExecClientExited(ExecStatus::Exited(0)))
        .is_err());
    assert!(m.handle(Input::ExecClientLost).is_err());
    ok(&mut m, Input::ClientLost);
    assert!(m.handle(Input::ClientLost).is_err());
}

#[test]
fn one_sessions_flood_does_not_touch_another_sessions_control_capacity() {
    let a = SessionId([0xa; 16]);
    let b = SessionId([0xb; 16]);
    let limits = SessionLimits {
        inbound_events_max: 4,
        client_queue_bytes_max: 32,
    };
    let mut table = SessionTable::new(limits, T, 8);
    table.admit(a, G).unwrap();
    table.admit(b, G).unwrap();
    assert_eq!(table.admit(a, G), Err(TableError::Duplicate(a)));
    // A: output flood fills its client queue; its PTY reads stop.
    table
        .handle(a, Input::PtyData(chunk(&[b'z'; 32])))
        .unwrap()
        .unwrap();
    assert_eq!(table.machine(a).unwrap().pty_read_budget(), 0);
    // A: an input flood fills its inbound queue; its connection must pause.
    for _ in 0..4 {
        table.enqueue(a, G, event(Kind::Input, a)).unwrap();
    }
    assert!(!table.accepts_event(a));
    assert_eq!(
        table.enqueue(a, G, event(Kind::Input, a)),
        Err(TableError::InboundFull { session: a, max: 4 })
    );
    // B is untouched: full budgets, and its control events go through.
    assert_eq!(table.machine(b).unwrap().pty_read_budget(), 32);
    assert!(table.accepts_event(b));
    table.enqueue(b, G, event(Kind::Resize, b)).unwrap();
    table.enqueue(b, G, event(Kind::Interrupt, b)).unwrap();
    let resize = table.step(b).unwrap().unwrap().unwrap();
    assert_eq!(resize.len(), 2);
    assert_eq!(
        table.step(b).unwrap().unwrap().unwrap(),
        vec![Command::SignalForeground(GuestSignal::Interrupt)]
    );
    assert_eq!(table.inbound_len(a), 4);
    // A's events are still served in order afterwards.
    assert_eq!(
        table.step(a).unwrap().unwrap().unwrap(),
        vec![Command::WritePty(chunk(b"x"))]
    );
    assert!(table.accepts_event(a));
}

#[test]
fn table_bounds_sessions_and_forgets_only_finished_terminals() {
    let mut table = SessionTable::new(SessionLimits::default(), T, 1);
    table.admit(S, G).unwrap();
    assert_eq!(
        table.admit(SessionId([9; 16]), G),
        Err(TableError::TooMany { max: 1 })
    );
    table.remove_finished(S).unwrap();
    assert_eq!(table.len(), 1, "a running terminal is not forgotten");
    let m = table.machine_mut(S).unwrap();
    ok(m, Input::ExecClientExited(ExecStatus::Exited(0)));
    ok(m, Input::OutputEof);
    ok(m, Input::Observed(GroupObservation::Empty));
    table.remove_finished(S).unwrap();
    assert!(table.is_empty());
    assert_eq!(
        table.enqueue(S, G, event(Kind::Close, S)),
        Err(TableError::Unknown(S))
    );
}

/// The piped form: a command that completed by itself is reaped, drained
/// and answered with its exit, then left unobserved (no guest tool run per
/// command); a client that goes away gets the full release order.
#[test]
fn a_piped_session_observes_only_when_it_must_signal() {
    use Command::*;
    let mut m = Machine::new_piped(S, G, T);
    assert_eq!(
        m.pty_read_budget(),
        0,
        "piped output never passes the machine"
    );
    assert_eq!(
        run(
            &mut m,
            vec![
                Input::ExecClientExited(ExecStatus::Exited(0)),
                Input::OutputEof
            ]
        ),
        vec![
            RecordReleaseIntent { awaited: false },
            ReapExecClient,
            StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: T.drain_deadline_ms
            },
            CancelTimer(TimerKind::DrainDeadline),
            CloseOutput,
            RetainReleaseIntent(RetainReason::NotObserved),
        ]
    );
    assert_eq!(m.retained(), Some(RetainReason::NotObserved));
    assert_eq!(
        messages(&mut m),
        vec![SessionTerminalMessage::Exit(SessionExit::exited(S, 0))]
    );

    let mut m = Machine::new_piped(S, G, T);
    let got = run(
        &mut m,
        vec![
            Input::ClientLost,
            Input::ReleaseIntentConfirmed,
            Input::Observed(GroupObservation::LeaderMatches),
            Input::Timer(TimerKind::HangupGrace),
        ],
    );
    assert_eq!(
        got,
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            SignalGroup(GuestSignal::Hangup),
            StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: T.hangup_grace_ms
            },
            ObserveGroup,
        ]
    );
}

#[test]
fn only_release_removes_the_route() {
    let mut m = machine();
    assert!(matches!(
        m.handle(Input::Route(TerminalRoute::None)),
        Err(Refusal::Unexpected {
            input: "Route",
            phase: "Running"
        })
    ));
    assert_eq!(m.route(), TerminalRoute::Sandbox);
    ok(&mut m, Input::Route(TerminalRoute::Prompt));
    ok(&mut m, client(Kind::Close));
    assert_eq!(m.route(), TerminalRoute::None);
}

#[test]
fn an_exec_client_that_returns_during_a_grace_ends_the_ladder() {
    let mut m = machine();
    ok(&mut m, client(Kind::Close));
    ok(&mut m, Input::ReleaseIntentConfirmed);
    // The leader exits while the observation is outstanding; the answer,
    // racing it, still saw the leader.
    assert_eq!(
        ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(0))),
        vec![]
    );
    assert_eq!(
        ok(&mut m, Input::Observed(GroupObservation::LeaderMatches)),
        vec![
            Command::SignalGroup(GuestSignal::Hangup),
            Command::StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: T.hangup_grace_ms
            },
            Command::CancelTimer(TimerKind::HangupGrace),
            Command::ReapExecClient,
            Command::StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: T.drain_deadline_ms
            },
        ]
    );
    assert_eq!(m.phase(), "Draining");
    assert!(m.handle(Input::Timer(TimerKind::HangupGrace)).is_err());
}

/// A world that answers the machine's commands as a real one may: every
/// outstanding observation with any outcome, armed timers by expiring, the
/// exec client by exiting in any way (by our kill once it is asked for),
/// the client and the output by ending at any time. `script` picks among
/// the inputs possible at each point; once it runs out, the world answers
/// fairly (observations empty, timers fire, the client leaves).
struct World {
    observe: bool,
    timers: Vec<TimerKind>,
    exec_running: bool,
    /// The exec client returned the guest's status: the leader exited.
    leader_exited: bool,
    output_open: bool,
    connected: bool,
    last_observation: Option<GroupObservation>,
    exits: usize,
    /// The guest leader was told to run the command / not to run it.
    leader_admitted: bool,
    leader_refused: bool,
    /// A release intent awaits the coordinator's answer; the answer given.
    awaiting: bool,
    confirmed: Option<bool>,
}

impl World {
    fn inputs(&self, m: &Machine) -> Vec<Input> {
        let mut out = Vec::new();
        if self.observe {
            out.extend(
                [
                    GroupObservation::LeaderMatches,
                    GroupObservation::Empty,
                    GroupObservation::LeaderAbsentGroupRemains,
                    GroupObservation::Mismatch,
                ]
                .map(Input::Observed),
            );
        }
        out.extend(self.timers.iter().map(|t| Input::Timer(*t)));
        if self.awaiting {
            out.push(Input::ReleaseIntentConfirmed);
            out.push(Input::ReleaseIntentUnconfirmed);
        }
        if self.exec_running {
            out.push(Input::ExecClientExited(ExecStatus::Exited(3)));
            out.push(Input::ExecClientExited(ExecStatus::Signalled(9)));
            out.push(Input::ExecClientLost);
        }
        if self.output_open {
            out.push(Input::OutputEof);
            out.push(Input::OutputLost);
            if m.pty_read_budget() > 0 {
                out.push(Input::PtyData(chunk(b"x")));
            }
        }
        if m.phase() == "Admitting" && !self.leader_admitted && !self.leader_refused {
            out.push(Input::Admitted);
            out.push(Input::AdmissionRefused);
        }
        if self.connected {
            out.push(Input::ClientLost);
            if m.phase() == "Running" {
                out.push(client(Kind::Close));
                out.push(Input::Route(TerminalRoute::Prompt));
                out.push(Input::Route(TerminalRoute::Sandbox));
            }
        }
        out
    }

    /// The input a fair world gives once the script is spent.
    fn fair(&self) -> Option<Input> {
        if self.awaiting {
            return Some(Input::ReleaseIntentConfirmed);
        }
        if self.observe {
            return Some(Input::Observed(GroupObservation::Empty));
        }
        if let Some(t) = self.timers.first() {
            return Some(Input::Timer(*t));
        }
        if self.connected {
            return Some(Input::ClientLost);
        }
        if self.exec_running {
            return Some(Input::ExecClientExited(ExecStatus::Signalled(9)));
        }
        None
    }

    fn feed(&mut self, m: &mut Machine, input: Input) -> Result<(), String> {
        match &input {
            Input::Observed(o) => {
                self.observe = false;
                self.last_observation = Some(*o);
            }
            Input::Timer(t) => self.timers.retain(|x| x != t),
            Input::ExecClientExited(status) => {
                self.exec_running = false;
                self.leader_exited = matches!(status, ExecStatus::Exited(_));
            }
            Input::ExecClientLost => self.exec_running = false,
            Input::OutputEof | Input::OutputLost => self.output_open = false,
            Input::ClientLost => self.connected = false,
            Input::ReleaseIntentConfirmed | Input::ReleaseIntentUnconfirmed => {
                self.awaiting = false;
                self.confirmed = Some(input == Input::ReleaseIntentConfirmed);
            }
            _ => {}
        }
        let commands = m
            .handle(input.clone())
            .map_err(|e| format!("{input:?} refused in {}: {e}", m.phase()))?;
        for c in commands {
            match c {
                Command::ObserveGroup => self.observe = true,
                Command::RecordReleaseIntent { awaited } => self.awaiting = awaited,
                Command::StartTimer { timer, .. } => self.timers.push(timer),
                Command::CancelTimer(t) => self.timers.retain(|x| *x != t),
                Command::SignalGroup(s) => {
                    if self.last_observation != Some(GroupObservation::LeaderMatches) {
                        return Err(format!("{s:?} after {:?}", self.last_observation));
                    }
                    // Spec 3.4 step 1: only on a release intent the
                    // coordinator confirmed durable.
                    if self.confirmed != Some(true) {
                        return Err(format!("{s:?} on an unconfirmed intent"));
                    }
                    // The observation is used up by the signal.
                    self.last_observation = None;
                }
                Command::RecordClean
                    if self.last_observation != Some(GroupObservation::Empty)
                        || self.exec_running =>
                {
                    return Err(format!("Clean after {:?}", self.last_observation));
                }
                Command::RetainReleaseIntent(RetainReason::Unconfirmed)
                    if self.confirmed != Some(false) =>
                {
                    return Err("retained as unconfirmed after a confirmation".into());
                }
                Command::CloseOutput => self.output_open = false,
                // Told once, one way, and only while its client is there
                // (spec 3.4 step 5: a session not recorded running, or
                // whose client left, never runs its command).
                Command::AdmitGuestLeader => {
                    if self.leader_admitted || self.leader_refused || !self.connected {
                        return Err(format!(
                            "admitted: told before {}/{}, connected {}",
                            self.leader_admitted, self.leader_refused, self.connected
                        ));
                    }
                    self.leader_admitted = true;
                }
                Command::RefuseGuestLeader => {
                    if self.leader_admitted || self.leader_refused || self.leader_exited {
                        return Err("refused a leader told before or exited".into());
                    }
                    self.leader_refused = true;
                }
                _ => {}
            }
        }
        if m.phase() != "Admitting"
            && !self.leader_admitted
            && !self.leader_refused
            && !self.leader_exited
        {
            return Err(format!(
                "left admission in {} with its leader waiting",
                m.phase()
            ));
        }
        self.exits += std::iter::from_fn(|| m.poll_message())
            .take(1000)
            .filter(|msg| matches!(msg, SessionTerminalMessage::Exit(_)))
            .count();
        Ok(())
    }
}

fn release_in_world(piped: bool, script: Vec<u8>) -> Result<(), String> {
    let mut m = if piped {
        Machine::new_piped(S, G, T)
    } else {
        admitting()
    };
    let mut w = World {
        observe: false,
        timers: Vec::new(),
        exec_running: true,
        leader_exited: false,
        output_open: true,
        connected: true,
        last_observation: None,
        exits: 0,
        // A piped session's command runs when its exec client does.
        leader_admitted: piped,
        leader_refused: false,
        awaiting: false,
        confirmed: None,
    };
    for pick in script {
        let inputs = w.inputs(&m);
        if inputs.is_empty() {
            break;
        }
        let input = inputs[usize::from(pick) % inputs.len()].clone();
        w.feed(&mut m, input)?;
    }
    for _ in 0..64 {
        if m.is_finished() && w.fair().is_none() {
            break;
        }
        let Some(input) = w.fair() else {
            return Err(format!("stuck in {} with nothing outstanding", m.phase()));
        };
        w.feed(&mut m, input)?;
    }
    if !m.is_finished() {
        return Err(format!("release did not end: {}", m.phase()));
    }
    if w.exits > 1 {
        return Err(format!("{} SessionExit messages", w.exits));
    }
    Ok(())
}

#[test]
fn every_release_ends_in_a_world_that_answers() {
    fn prop(piped: bool, script: Vec<u8>) -> quickcheck::TestResult {
        match release_in_world(piped, script) {
            Ok(()) => quickcheck::TestResult::passed(),
            Err(e) => quickcheck::TestResult::error(e),
        }
    }
    quickcheck::QuickCheck::new()
        .tests(20_000)
        .quickcheck(prop as fn(bool, Vec<u8>) -> quickcheck::TestResult);
}

#[test]
fn a_terminal_takes_no_event_before_it_is_recorded_running() {
    let mut m = admitting();
    for kind in KINDS {
        assert!(
            matches!(m.handle(client(kind)), Err(Refusal::NotAdmitted { .. })),
            "{kind:?} taken while admitting"
        );
    }
    assert_eq!(m.pty_read_budget(), 0);
    assert!(m.handle(Input::Route(TerminalRoute::Prompt)).is_err());
    assert_eq!(m.phase(), "Admitting");
    assert_eq!(m.route(), TerminalRoute::None);
    assert_eq!(ok(&mut m, Input::Admitted), vec![Command::AdmitGuestLeader]);
    assert_eq!(m.route(), TerminalRoute::Sandbox);
    assert_eq!(
        ok(&mut m, client(Kind::Input)),
        accepted_commands(Kind::Input)
    );
    // The answer comes once.
    assert!(m.handle(Input::Admitted).is_err());
    assert!(m.handle(Input::AdmissionRefused).is_err());
}

#[test]
fn a_refused_admission_releases_without_running_the_command() {
    use Command::*;
    let mut m = admitting();
    assert_eq!(
        ok(&mut m, Input::AdmissionRefused),
        vec![
            RefuseGuestLeader,
            StartTimer {
                timer: TimerKind::RefusalWait,
                after_ms: T.refusal_wait_ms
            }
        ]
    );
    assert!(m.handle(Input::Admitted).is_err());
    assert!(matches!(
        m.handle(client(Kind::Input)),
        Err(Refusal::NotAdmitted { .. })
    ));
    // The guest leader says why and exits with 125 (cli/init/
    // lazaret_guest.rs): nothing to signal, and the connection waits for
    // those last bytes.
    assert_eq!(
        ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(125))),
        vec![
            CancelTimer(TimerKind::RefusalWait),
            RecordReleaseIntent { awaited: false },
            ReapExecClient,
            StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: T.drain_deadline_ms
            }
        ]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::NotAdmitted));
    assert_eq!(m.route(), TerminalRoute::None);
    ok(&mut m, Input::PtyData(chunk(b"not admitted")));
    assert_eq!(
        ok(&mut m, Input::OutputEof),
        vec![
            CancelTimer(TimerKind::DrainDeadline),
            CloseOutput,
            ObserveGroup
        ]
    );
    assert_eq!(
        messages(&mut m),
        vec![
            SessionTerminalMessage::Output(TerminalOutput {
                session_id: S,
                bytes: chunk(b"not admitted")
            }),
            SessionTerminalMessage::Exit(SessionExit::exited(S, 125)),
        ]
    );
    assert_eq!(
        ok(&mut m, Input::Observed(GroupObservation::Empty)),
        vec![RecordClean]
    );
}

#[test]
fn a_refused_guest_leader_that_stays_is_released_by_the_ladder() {
    use Command::*;
    let mut m = admitting();
    ok(&mut m, Input::AdmissionRefused);
    assert_eq!(
        ok(&mut m, Input::Timer(TimerKind::RefusalWait)),
        vec![RecordReleaseIntent { awaited: true }, ObserveGroup]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::NotAdmitted));
    a_matching_leader_gets_sighup(&mut m);
}

#[test]
fn a_client_lost_before_its_admission_is_never_admitted() {
    use Command::*;
    let mut m = admitting();
    assert_eq!(
        ok(&mut m, Input::ClientLost),
        vec![
            RefuseGuestLeader,
            RecordReleaseIntent { awaited: true },
            ObserveGroup
        ]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::ClientLost));
    // The record may still have been made; the answer comes too late.
    assert!(m.handle(Input::Admitted).is_err());
    ends_clean_and_silent(&mut m, ExecStatus::Exited(125));
}

#[test]
fn a_guest_leader_gone_before_its_admission_is_not_told() {
    use Command::*;
    let mut m = admitting();
    // Its exec client returned (the leader's own wait ran out): nothing
    // is left to refuse, and nothing to signal.
    assert_eq!(
        ok(&mut m, Input::ExecClientExited(ExecStatus::Exited(125))),
        vec![
            RecordReleaseIntent { awaited: false },
            ReapExecClient,
            StartTimer {
                timer: TimerKind::DrainDeadline,
                after_ms: T.drain_deadline_ms
            }
        ]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::GuestCompleted));
    assert!(m.handle(Input::Admitted).is_err());
}

#[test]
fn an_exec_client_lost_before_its_admission_still_refuses_its_leader() {
    use Command::*;
    let mut m = admitting();
    // The exec client vanished without a status: the guest leader may
    // still be waiting, so it is told not to run the command.
    assert_eq!(
        ok(&mut m, Input::ExecClientLost),
        vec![
            RefuseGuestLeader,
            RecordReleaseIntent { awaited: true },
            ObserveGroup
        ]
    );
    assert_eq!(m.release_reason(), Some(ReleaseReason::ExecClientLost));
}

/// Spec 3.4 release step 1: a release intent the coordinator did not
/// confirm (the gate's bound ran out, or its loop dropped the answer)
/// sends no release signal, however the leader is found: the exec client
/// is collected and the release intent retained for Domain teardown.
#[test]
fn an_unconfirmed_release_intent_sends_no_signal_and_is_retained() {
    use Command::*;
    let mut m = machine();
    assert_eq!(
        run(
            &mut m,
            vec![
                client(Kind::Close),
                Input::ReleaseIntentUnconfirmed,
                Input::Observed(GroupObservation::LeaderMatches),
            ]
        ),
        vec![
            RecordReleaseIntent { awaited: true },
            ObserveGroup,
            TerminateExecClient,
        ]
    );
    let got = run(
        &mut m,
        vec![
            Input::ExecClientExited(ExecStatus::Signalled(9)),
            Input::OutputEof,
            Input::Observed(GroupObservation::Empty),
        ],
    );
    assert!(!got.iter().any(|c| matches!(c, SignalGroup(_))), "{got:?}");
    assert_eq!(
        got.last(),
        Some(&RetainReleaseIntent(RetainReason::Unconfirmed))
    );
    assert_eq!(m.retained(), Some(RetainReason::Unconfirmed));
    // A confirmation is answered once: a second answer is refused.
    assert!(m.handle(Input::ReleaseIntentConfirmed).is_err());
}

/// A leader found gone or mismatched needs no release signal, so an
/// unconfirmed intent releases it exactly as a confirmed one would: clean
/// when the group is empty, otherwise retained for what was found.
#[test]
fn an_unconfirmed_release_of_a_leader_not_matching_ends_as_a_confirmed_one() {
    use Command::*;
    let rows = [
        (GroupObservation::Empty, None),
        (
            GroupObservation::Mismatch,
            Some(RetainReason::LeaderMismatch),
        ),
        (
            GroupObservation::LeaderAbsentGroupRemains,
            Some(RetainReason::GroupRemains),
        ),
    ];
    for (found, retained) in rows {
        let mut ends = Vec::new();
        for answer in [
            Input::ReleaseIntentUnconfirmed,
            Input::ReleaseIntentConfirmed,
        ] {
            let mut m = machine();
            let mut got = run(
                &mut m,
                vec![client(Kind::Close), answer.clone(), Input::Observed(found)],
            );
            got.extend(run(
                &mut m,
                vec![
                    Input::ExecClientExited(ExecStatus::Signalled(9)),
                    Input::OutputEof,
                    Input::Observed(found),
                ],
            ));
            assert!(
                !got.iter().any(|c| matches!(c, SignalGroup(_))),
                "{found:?} after {answer:?}: {got:?}"
            );
            assert!(m.is_finished(), "{found:?} after {answer:?}: {got:?}");
            assert_eq!(m.retained(), retained, "{found:?} after {answer:?}");
            ends.push(got);
        }
        assert_eq!(ends[0], ends[1], "{found:?}: unconfirmed vs confirmed");
    }
}

/// Until the coordinator answers, a matching leader is not signalled; the
/// confirmation then lets the ladder start.
#[test]
fn a_matching_leader_waits_for_the_confirmed_intent() {
    use Command::*;
    let mut m = machine();
    assert_eq!(
        run(
            &mut m,
            vec![
                client(Kind::Close),
                Input::Observed(GroupObservation::LeaderMatches),
            ]
        ),
        vec![RecordReleaseIntent { awaited: true }, ObserveGroup]
    );
    assert_eq!(m.phase(), "Observing");
    assert_eq!(
        ok(&mut m, Input::ReleaseIntentConfirmed),
        vec![
            SignalGroup(GuestSignal::Hangup),
            StartTimer {
                timer: TimerKind::HangupGrace,
                after_ms: T.hangup_grace_ms
            }
        ]
    );
}
