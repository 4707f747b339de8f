//! Crash-point injection for the crash-point suite (docs/crash-points.md;
//! spec 3.3 recovery, 3.6): the [`crash_point!`] hook marks each durable step
//! of the Host Coordinator, the Runtime Supervisor, the broker wrapper and
//! the CLI. The hook exists only with the `crash-points` cargo feature;
//! without it the macro expands to nothing and nothing of this module is in
//! the binary (docs/crash-points.md).
//!
//! With the feature, a process that reaches the point named by
//! `LAZARET_CRASH_POINT=<role>:<step>:<when>` kills itself with SIGKILL
//! through its own pidfd; when `LAZARET_CRASH_LOG=<file>` is set every point
//! reached is appended to that file (`passed <point> <label>`, or `fired
//! <point> <label>` just before the kill), which is how the suite enumerates
//! the points of a real run.
//!
//! The same builds can inject a named fault where [`fault!`] asks for one:
//! `LAZARET_FAULT=<name>` (docs/crash-points.md, "Faults"). Without the
//! feature the macro is `false`.
//!
//! And they can tell a test the private key seeds this process made, so it
//! can prove them absent from the sandbox's view (spec 3.3):
//! [`disclose_secret!`] appends `<label> <hex>` to `LAZARET_SECRETS_LOG`.
//! Without the feature the macro expands to nothing.

/// Marks a crash point: `crash_point!(Role, step, "when", label)` where
/// `step` and `label` are `Display`. Expands to nothing without the
/// `crash-points` feature.
macro_rules! crash_point {
    ($role:ident, $step:expr, $when:expr, $label:expr) => {
        #[cfg(feature = "crash-points")]
        $crate::crash_point::reached($crate::crash_point::Role::$role, &$step, $when, &$label);
    };
}
pub(crate) use crash_point;

/// Whether the test asked for the fault `name` (`LAZARET_FAULT=<name>`);
/// always `false` without the `crash-points` feature.
macro_rules! fault {
    ($name:expr) => {{
        #[cfg(feature = "crash-points")]
        let requested = $crate::crash_point::fault_requested($name);
        #[cfg(not(feature = "crash-points"))]
        let requested = false;
        requested
    }};
}
pub(crate) use fault;

/// `disclose_secret!(label, seed)`: appends the seed's hex under `label`
/// to the file `LAZARET_SECRETS_LOG` names; nothing without the
/// `crash-points` feature.
macro_rules! disclose_secret {
    ($label:expr, $seed:expr) => {
        #[cfg(feature = "crash-points")]
        $crate::crash_point::disclose($label, $seed);
    };
}
pub(crate) use disclose_secret;

#[cfg(feature = "crash-points")]
pub use hook::{
    disclose, fault_requested, reached, target_label, Role, StepLabel, FAULT_VAR, LOG_VAR,
    POINT_VAR, SECRETS_VAR,
};

#[cfg(feature = "crash-points")]
mod hook {
    use crate::process_identity::real::RealProcessSys;
    use crate::process_identity::{identity_of, ProcessHandle, ProcessSys, Signal};
    use lazaret_runtime::trace::TraceLine;
    use std::ffi::OsString;
    use std::fmt::Display;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::Path;

    /// The point at which this process kills itself.
    pub const POINT_VAR: &str = "LAZARET_CRASH_POINT";
    /// The file every reached point is appended to.
    pub const LOG_VAR: &str = "LAZARET_CRASH_LOG";
    /// The fault to inject (docs/crash-points.md, "Faults").
    pub const FAULT_VAR: &str = "LAZARET_FAULT";

    /// Whether `LAZARET_FAULT` names `name`.
    pub fn fault_requested(name: &str) -> bool {
        std::env::var_os(FAULT_VAR).is_some_and(|f| f == name)
    }

    /// The file private key seeds are disclosed to.
    pub const SECRETS_VAR: &str = "LAZARET_SECRETS_LOG";

    /// Appends `<label> <hex>` to `LAZARET_SECRETS_LOG`'s file, when set.
    pub fn disclose(label: &str, seed: &[u8]) {
        append(SECRETS_VAR, &format!("{label} {}\n", hex::encode(seed)));
    }

    /// The process a crash point belongs to.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Role {
        /// Host Coordinator: each model step, before and after its trace line.
        Hc,
        /// Runtime Supervisor: its acquisition of the attached runsc.
        Rs,
        /// Broker wrapper: released, before exec of its target.
        Wrapper,
        /// The CLI: its session.
        Cli,
        /// `lazaret state` maintenance: a reset and its removal worker.
        State,
        /// A preparation of the prepared lower (run by the Host
        /// Coordinator before its first model step).
        Prepare,
    }

    impl Role {
        fn name(self) -> &'static str {
            match self {
                Self::Hc => "hc",
                Self::Rs => "rs",
                Self::Wrapper => "wrapper",
                Self::Cli => "cli",
                Self::State => "state",
                Self::Prepare => "prepare",
            }
        }
    }

    /// A model step as the log names it: `Action(param=value,...)`.
    #[derive(Debug)]
    pub struct StepLabel<'a>(pub &'a TraceLine);

    impl Display for StepLabel<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let params: Vec<String> = self
                .0
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "{}({})", self.0.action, params.join(","))
        }
    }

    /// A wrapper's step: the hidden subcommand its target runs
    /// (`supervisor`, `enter`), else the target program's file name
    /// (`runsc`).
    pub fn target_label(target: &[OsString]) -> String {
        let name = |arg: &OsString| {
            Path::new(arg)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        match target {
            [_, sub, ..] if sub.to_string_lossy().starts_with("__") => {
                sub.to_string_lossy().trim_start_matches('_').to_owned()
            }
            [program, ..] => name(program),
            [] => "empty".to_owned(),
        }
    }

    /// The hook: logs the point and, when it is the configured one, kills
    /// this process with SIGKILL.
    pub fn reached(role: Role, step: &dyn Display, when: &str, label: &dyn Display) {
        let point = format!("{}:{step}:{when}", role.name());
        let fire = std::env::var_os(POINT_VAR).is_some_and(|p| p == point.as_str()) && first_fire();
        let verb = if fire { "fired" } else { "passed" };
        append(LOG_VAR, &format!("{verb} {point} {label}\n"));
        if fire {
            die(&point);
        }
    }

    /// With a crash log, the point fires once for all processes that share
    /// the log: the first claims `<log>.fired` (O_EXCL). A coordinator the
    /// CLI starts again after the crash inherits the same variable and must
    /// run past the point.
    fn first_fire() -> bool {
        let Some(path) = std::env::var_os(LOG_VAR) else {
            return true;
        };
        let mut marker = path;
        marker.push(".fired");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&marker)
            .is_ok()
    }

    /// Appends `line` to the file the variable `var` names, when set. One
    /// `write` per line on an O_APPEND file: lines of concurrent processes
    /// do not interleave.
    fn append(var: &str, line: &str) {
        let Some(path) = std::env::var_os(var) else {
            return;
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            tracing::warn!(var, path = ?path, error = %e, "cannot append to the test log");
        }
    }

    /// SIGKILL through this process's own pidfd (the repository never
    /// signals a numeric PID); aborts if that is impossible, so the point
    /// still ends the process without running any further step.
    fn die(point: &str) -> ! {
        let sys = RealProcessSys;
        let signalled = sys
            .pidfd_open(sys.own_pid())
            .map_err(|e| e.to_string())
            .and_then(|pidfd| {
                let identity = identity_of(&sys, &pidfd).map_err(|e| e.to_string())?;
                ProcessHandle::new(pidfd, identity)
                    .signal(&sys, Signal::Kill)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = signalled {
            tracing::error!(point, error = %e, "crash point: SIGKILL through the own pidfd failed");
        }
        // SIGKILL is delivered before the signal call returns to user space;
        // reaching this line means it could not be sent.
        std::process::abort()
    }
}
