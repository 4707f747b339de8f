//! `lazaret doctor`: checks the host and prints each problem with its fix
//! (issue 6 item 2). Exits non-zero when something is missing.

use lazaret_effects::doctor::{run_checks, Check, DoctorHost};
use std::io::Write;
use std::process::ExitCode;

/// Writes the report for `checks`; returns whether all passed.
pub fn report(checks: &[Check], out: &mut dyn Write) -> std::io::Result<bool> {
    for c in checks {
        match &c.fix {
            None => writeln!(out, "ok       {:<17} {}", c.name, c.found)?,
            Some(fix) => {
                writeln!(out, "PROBLEM  {:<17} {}", c.name, c.found)?;
                writeln!(out, "         fix: {fix}")?;
            }
        }
    }
    let failed = checks.iter().filter(|c| !c.passed()).count();
    if failed == 0 {
        writeln!(out, "lazaret doctor: all {} checks passed", checks.len())?;
    } else {
        writeln!(
            out,
            "lazaret doctor: {failed} of {} checks found a problem",
            checks.len()
        )?;
    }
    Ok(failed == 0)
}

/// Runs the doctor against `host`.
pub fn run(host: &dyn DoctorHost) -> ExitCode {
    let checks = run_checks(host);
    match report(&checks, &mut std::io::stdout().lock()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lazaret doctor: cannot write the report: {e}");
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
        let mut out = Vec::new();
        let ok = report(&checks, &mut out).map_err(|e| e.to_string())?;
        assert!(!ok);
        let text = String::from_utf8(out).map_err(|e| e.to_string())?;
        assert_eq!(
            text,
            "ok       kernel            6.18 (>= 6.9)\n\
             PROBLEM  slirp4netns       not found in PATH\n         fix: as root: apt-get install slirp4netns\n\
             lazaret doctor: 1 of 2 checks found a problem\n"
        );
        Ok(())
    }
}
