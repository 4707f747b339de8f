//! `lazaret doctor`: checks the host and prints each problem with its fix
//! (DX-5). Exits non-zero when something is missing.

use crate::report::{self, errln};
use lazaret_effects::doctor::{run_checks, Check, DoctorHost};
use lazaret_runtime::display::escape_line;
use std::fmt::Write as _;
use std::process::ExitCode;

/// The report for `checks`, and whether all passed. What a check found
/// (paths, tool versions) is escaped to one line.
pub fn report(checks: &[Check]) -> (String, bool) {
    let mut text = String::new();
    for c in checks {
        let found = escape_line(&c.found);
        match &c.fix {
            None => {
                let _ = writeln!(text, "ok       {:<17} {found}", c.name);
            }
            Some(fix) => {
                let _ = writeln!(text, "PROBLEM  {:<17} {found}", c.name);
                let _ = writeln!(text, "         fix: {}", escape_line(fix));
            }
        }
    }
    let failed = checks.iter().filter(|c| !c.passed()).count();
    let _ = if failed == 0 {
        writeln!(text, "lazaret doctor: all {} checks passed", checks.len())
    } else {
        writeln!(
            text,
            "lazaret doctor: {failed} of {} checks found a problem",
            checks.len()
        )
    };
    (text, failed == 0)
}

/// Runs the doctor against `host`.
pub fn run(host: &dyn DoctorHost) -> ExitCode {
    let checks = run_checks(host);
    let (text, passed) = report(&checks);
    match report::print_text(&text) {
        Ok(()) if passed => ExitCode::SUCCESS,
        Ok(()) => ExitCode::FAILURE,
        Err(e) => {
            errln!("lazaret doctor: cannot write the report: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_prints_fixes_and_fails() -> Result<(), String> {
        let checks = vec![
            Check {
                name: "kernel",
                found: "6.18 (>= 6.9)".into(),
                fix: None,
            },
            Check {
                name: "slirp4netns",
                found: "not found in PATH".into(),
                fix: Some("as root: apt-get install slirp4netns".into()),
            },
        ];
        let (text, ok) = report(&checks);
        assert!(!ok);
        assert_eq!(
            text,
            "ok       kernel            6.18 (>= 6.9)\n\
             PROBLEM  slirp4netns       not found in PATH\n         fix: as root: apt-get install slirp4netns\n\
             lazaret doctor: 1 of 2 checks found a problem\n"
        );
        Ok(())
    }

    /// Spec README 'Terminal output hygiene': what a check found (a path on
    /// PATH, a tool's version line) is shown escaped, on its line.
    #[test]
    fn what_a_check_found_is_escaped_to_its_line() {
        let checks = vec![Check {
            name: "runsc",
            found: "/opt/evil\x1b]0;x\x07\nPROBLEM forged".into(),
            fix: Some("see \u{9b}2J".into()),
        }];
        let (text, _) = report(&checks);
        assert_eq!(
            text,
            "PROBLEM  runsc             /opt/evil\\x1b]0;x\\x07\\nPROBLEM forged\n         \
             fix: see \\u{9b}2J\nlazaret doctor: 1 of 1 checks found a problem\n"
        );
    }
}
