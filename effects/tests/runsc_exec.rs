//! `runsc exec` invocations, the session process JSON, guest stat parsing,
//! the leader/group classification and guest control with a recording
//! runner (spec 3.4, FR-14, SR-5).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::runsc_exec::*;
use lazaret_runtime::records::terminal::GuestProcessIdentity;
use lazaret_runtime::terminal::machine::{GroupObservation, GuestSignal};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Output};

fn runsc() -> Runsc {
    Runsc {
        prefix: vec![
            "nsenter".into(),
            "-U".into(),
            "-t".into(),
            "42".into(),
            "--".into(),
        ],
        runsc: "/usr/bin/runsc".into(),
        global: vec!["--root".into(), "/run/x".into(), "--network=none".into()],
    }
}

fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn session_invocation_is_exec_with_process_json_and_internal_pid_file() {
    let inv = runsc().exec_session(Path::new("/rt/s1.json"), Path::new("/rt/s1.pid"), "cid-1");
    assert_eq!(
        strings(&inv.argv),
        [
            "nsenter",
            "-U",
            "-t",
            "42",
            "--",
            "/usr/bin/runsc",
            "--root",
            "/run/x",
            "--network=none",
            "exec",
            "--process",
            "/rt/s1.json",
            "--internal-pid-file",
            "/rt/s1.pid",
            "cid-1"
        ]
    );
    assert!(!strings(&inv.argv)
        .iter()
        .any(|a| a.contains("console-socket")));
}

#[test]
fn process_json_has_a_terminal_workspace_cwd_and_the_container_capabilities() {
    let p = ExecProcess {
        args: vec!["/bin/bash".into()],
        env: vec!["TERM=xterm-256color".into(), "HOME=/root".into()],
        session_env: vec!["LAZARET_SESSION_CAPABILITY=0a0b".into()],
        terminal: true,
    };
    let got: serde_json::Value = serde_json::from_slice(
        &p.to_json([
            ("API_KEY", "s3cret"),
            ("HOME", "/home/agent"),
            ("LAZARET_SESSION_CAPABILITY", "forged"),
        ])
        .unwrap(),
    )
    .unwrap();
    let caps = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETPCAP",
        "CAP_SETFCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_AUDIT_WRITE",
    ];
    let expected = serde_json::json!({
        "terminal": true,
        "user": {"uid": 0, "gid": 0},
        "args": ["/bin/bash"],
        // A profile entry replaces the product's entry of the same name,
        // never the session's.
        "env": ["TERM=xterm-256color", "API_KEY=s3cret", "HOME=/home/agent", "LAZARET_SESSION_CAPABILITY=0a0b"],
        "cwd": "/workspace",
        "capabilities": {"bounding": caps, "effective": caps, "inheritable": [], "permitted": caps, "ambient": []},
        "noNewPrivileges": true
    });
    assert_eq!(got, expected);
    // SR-5 and the spec README decision: never network administration, raw
    // sockets or SYS_ADMIN, in any set.
    let text = String::from_utf8(p.to_json([]).unwrap()).unwrap();
    for never in lazaret_runtime::bundle::NEVER_GRANTED {
        assert!(!text.contains(never), "{never} granted: {text}");
    }
}

#[test]
fn process_json_refuses_bad_argv_and_env_without_printing_values() {
    let mk = |args: Vec<&str>, env: Vec<&str>| ExecProcess {
        args: args.into_iter().map(String::from).collect(),
        env: env.into_iter().map(String::from).collect(),
        session_env: Vec::new(),
        terminal: true,
    };
    assert!(matches!(
        mk(vec![], vec![]).to_json([]),
        Err(ProcessSpecError::EmptyArgv)
    ));
    assert!(matches!(
        mk(vec!["a", "b\0c"], vec![]).to_json([]),
        Err(ProcessSpecError::NulInArgv { index: 1 })
    ));
    for bad in ["NOEQUALS", "=value", "A=b\0"] {
        let err = mk(vec!["a"], vec!["OK=1", bad]).to_json([]).unwrap_err();
        assert!(
            matches!(err, ProcessSpecError::BadEnv { index: 1, .. }),
            "{bad}: {err}"
        );
    }
    for (name, value) in [("", "v"), ("A=B", "v"), ("N", "secret\0value")] {
        let err = mk(vec!["a"], vec![]).to_json([(name, value)]).unwrap_err();
        assert!(
            matches!(err, ProcessSpecError::BadProfileEnv { .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}

fn stat_line(pid: u32, comm: &str, pgrp: u32, start: u64) -> String {
    // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
    // majflt cmajflt utime stime cutime cstime priority nice threads
    // itrealvalue starttime ...
    format!("{pid} ({comm}) S 1 {pgrp} {pgrp} 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 10813440 1034")
}

#[test]
fn stat_lines_parse_fields_after_the_last_parenthesis() {
    let text = format!(
        "{}\n{}\n",
        stat_line(2, "bash", 2, 1635),
        stat_line(7, "a (b) c", 2, u64::MAX)
    );
    let stats = parse_stat_lines(&text).unwrap();
    assert_eq!(
        stats,
        [
            GuestStat {
                pid: 2,
                pgrp: 2,
                session: 2,
                start_time: 1635
            },
            GuestStat {
                pid: 7,
                pgrp: 2,
                session: 2,
                start_time: u64::MAX
            },
        ]
    );
    for bad in ["2 bash S 1", "x (bash) S 1 2 2 0 0", "2 (bash) S 1 2"] {
        let err = parse_stat_lines(bad).unwrap_err().to_string();
        assert!(err.contains("guest /proc/<pid>/stat"), "{err}");
    }
}

#[test]
fn classification_table() {
    let recorded = GuestProcessIdentity {
        leader_pid: 2,
        leader_start_time: 100,
        process_group_id: 2,
    };
    let s = |pid, pgrp, start| GuestStat {
        pid,
        pgrp,
        session: pgrp,
        start_time: start,
    };
    let table = [
        (
            vec![s(1, 1, 1), s(2, 2, 100)],
            GroupObservation::LeaderMatches,
        ),
        (vec![s(1, 1, 1), s(2, 2, 101)], GroupObservation::Mismatch),
        (vec![s(2, 9, 100)], GroupObservation::Mismatch),
        (
            vec![s(1, 1, 1), s(5, 2, 300)],
            GroupObservation::LeaderAbsentGroupRemains,
        ),
        (vec![s(1, 1, 1), s(5, 5, 300)], GroupObservation::Empty),
        (vec![], GroupObservation::Empty),
    ];
    for (stats, expected) in table {
        assert_eq!(classify(&recorded, &stats), expected, "{stats:?}");
    }
}

#[derive(Default)]
struct Recording {
    calls: RefCell<Vec<Vec<String>>>,
    results: RefCell<VecDeque<io::Result<Output>>>,
}

impl RunscRunner for Recording {
    fn run(&self, inv: &Invocation) -> io::Result<Output> {
        self.calls.borrow_mut().push(strings(&inv.argv));
        self.results.borrow_mut().pop_front().unwrap()
    }
}

fn ok(stdout: &str) -> io::Result<Output> {
    Ok(Output {
        status: ExitStatus::from_raw(0),
        stdout: stdout.as_bytes().to_vec(),
        stderr: vec![],
    })
}

fn failed(stderr: &str) -> io::Result<Output> {
    Ok(Output {
        status: ExitStatus::from_raw(1 << 8),
        stdout: vec![],
        stderr: stderr.as_bytes().to_vec(),
    })
}

#[test]
fn guest_control_reads_identity_observes_and_signals_the_recorded_group() {
    let r = Recording::default();
    let control = GuestControl::new(&r, runsc(), GuestTools::default(), "cid".into());
    r.results
        .borrow_mut()
        .push_back(ok(&stat_line(2, "bash", 2, 77)));
    let id = control.leader_identity(2).unwrap();
    assert_eq!(
        id,
        GuestProcessIdentity {
            leader_pid: 2,
            leader_start_time: 77,
            process_group_id: 2
        }
    );
    let call = r.calls.borrow()[0].clone();
    // Guest tools hold CAP_KILL only (a release signal reaches members
    // that switched users).
    assert_eq!(
        call[5..13],
        [
            "/usr/bin/runsc",
            "--root",
            "/run/x",
            "--network=none",
            "exec",
            "--cap",
            "CAP_KILL",
            "cid"
        ]
    );
    // Lazaret's own static tool, never the image's shell.
    assert_eq!(call[13..], ["/.lazaret/sbin/lazaret-guest", "stat", "2"]);

    // One tool run reads every process's stat (no `runsc ps`).
    r.results.borrow_mut().push_back(ok(&format!(
        "{}\n{}\n{}",
        stat_line(1, "lazaret-init", 1, 5),
        stat_line(2, "bash", 2, 77),
        stat_line(6, "sleep", 2, 90)
    )));
    assert_eq!(control.observe(&id), GroupObservation::LeaderMatches);
    assert_eq!(r.calls.borrow().len(), 2);
    assert_eq!(
        r.calls.borrow()[1][13..],
        ["/.lazaret/sbin/lazaret-guest", "stat"]
    );

    r.results.borrow_mut().push_back(ok(""));
    control.signal(&id, GuestSignal::Hangup).unwrap();
    let call = r.calls.borrow()[2].clone();
    assert_eq!(
        call[13..],
        ["/.lazaret/sbin/lazaret-guest", "signal", "1", "2"]
    );
    r.results.borrow_mut().push_back(ok(""));
    control.signal(&id, GuestSignal::Kill).unwrap();
    assert_eq!(
        r.calls.borrow()[3][13..],
        ["/.lazaret/sbin/lazaret-guest", "signal", "9", "2"]
    );
}

#[test]
fn guest_control_fails_closed() {
    let r = Recording::default();
    let control = GuestControl::new(&r, runsc(), GuestTools::default(), "cid".into());
    let id = GuestProcessIdentity {
        leader_pid: 2,
        leader_start_time: 77,
        process_group_id: 2,
    };
    // A failed observation is a mismatch, never "empty".
    r.results
        .borrow_mut()
        .push_back(failed("container not running"));
    assert_eq!(control.observe(&id), GroupObservation::Mismatch);
    r.results
        .borrow_mut()
        .push_back(Err(io::ErrorKind::NotFound.into()));
    assert_eq!(control.observe(&id), GroupObservation::Mismatch);
    // A process that does not lead its own group is not admitted.
    r.results
        .borrow_mut()
        .push_back(ok(&stat_line(3, "sh", 2, 5)));
    assert!(matches!(
        control.leader_identity(3),
        Err(GuestControlError::NotGroupLeader {
            pid: 3,
            pgrp: 2,
            ..
        })
    ));
    r.results.borrow_mut().push_back(ok(""));
    assert!(matches!(
        control.leader_identity(3),
        Err(GuestControlError::Absent { pid: 3, .. })
    ));
    r.results
        .borrow_mut()
        .push_back(failed("kill: No such process"));
    let err = control
        .signal(&id, GuestSignal::Kill)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("guest group signal failed") && err.contains("No such process"),
        "{err}"
    );
}

/// A piped session's first observation takes the leader's identity: the PID
/// must hold a session and group leader; a free PID leaves the group it led.
#[test]
fn the_first_observation_identifies_a_piped_sessions_leader() {
    let stat = |pid, pgrp, session, start_time| GuestStat {
        pid,
        pgrp,
        session,
        start_time,
    };
    let (identity, seen) =
        identify_and_classify(5, &[stat(1, 1, 1, 1), stat(5, 5, 5, 40), stat(6, 5, 5, 41)]);
    assert_eq!(seen, GroupObservation::LeaderMatches);
    assert_eq!(
        identity,
        Some(GuestProcessIdentity {
            leader_pid: 5,
            leader_start_time: 40,
            process_group_id: 5
        })
    );
    // Another process holds the PID (not a group and session leader).
    assert_eq!(
        identify_and_classify(5, &[stat(5, 2, 2, 90)]),
        (None, GroupObservation::Mismatch)
    );
    // The leader is gone: members of its group remain, or none.
    assert_eq!(
        identify_and_classify(5, &[stat(6, 5, 5, 41)]),
        (None, GroupObservation::LeaderAbsentGroupRemains)
    );
    assert_eq!(
        identify_and_classify(5, &[stat(1, 1, 1, 1), stat(9, 9, 9, 3)]),
        (None, GroupObservation::Empty)
    );
}
