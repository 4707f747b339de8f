//! `lazaret doctor`: checks the host and prints each problem with its fix
//! (DX-5). Exits non-zero when something is missing.
//!
//! `lazaret doctor --network PROFILE` probes the profile's optional
//! `readiness` targets from the sandbox's own view (spec 3.7; spec README
//! decision: never a publication gate): one session of the profile's Domain
//! runs the static `lazaret-probe`, and each target is reported against
//! what the policy says.

use crate::report::{self, errln};
use clap::Args;
use lazaret_effects::config_resolve::{load_configuration, LoadRequest};
use lazaret_effects::confined::ConfinedSys;
use lazaret_effects::doctor::{run_checks, Check, DoctorHost};
use lazaret_runtime::bundle::INIT_DIR;
use lazaret_runtime::config::{HostEnvironment, ReadinessV1, SandboxLayoutV1};
use lazaret_runtime::display::escape_line;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

/// `lazaret doctor [--network PROFILE [host options]]`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Probe PROFILE's `readiness` targets from inside its sandbox instead
    /// of checking the host (starts or joins the profile's Domain).
    #[arg(long, value_name = "PROFILE")]
    pub network: Option<String>,
    /// With --network: the Agent Workspace directory (default: the
    /// current directory).
    #[arg(long, value_name = "DIR", requires = "network")]
    pub workspace: Option<PathBuf>,
    /// With --network: the configuration file.
    #[arg(long, value_name = "FILE", requires = "network")]
    pub config: Option<String>,
}

/// The report for `checks`, and whether all passed. What a check found
/// (paths, tool versions) is escaped to one line.
pub fn report(checks: &[Check]) -> (String, bool) {
    let mut text = String::new();
    for c in checks {
        let found = escape_line(&c.found);
        match (&c.fix, &c.advice) {
            (None, None) => {
                let _ = writeln!(text, "ok       {:<17} {found}", c.name);
            }
            (None, Some(advice)) => {
                let _ = writeln!(text, "advice   {:<17} {found}", c.name);
                let _ = writeln!(text, "         run: {}", escape_line(advice));
            }
            (Some(fix), _) => {
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

/// What a readiness target should do under the profile's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Connects,
    DoesNotConnect,
    Answers,
}

/// One probe: its `lazaret-probe` arguments, the `target=` it reports
/// under, how it is named in the report, and what it should do.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Probe {
    args: Vec<String>,
    target: String,
    label: String,
    expect: Expect,
}

fn probes(readiness: &ReadinessV1) -> Vec<Probe> {
    let tcp = |kind: &str, t: &lazaret_runtime::config::SocketTarget, expect| {
        let target = format!("{}:{}", t.address, t.port);
        Probe {
            args: vec!["tcp".to_owned(), target.clone()],
            label: format!("{kind} {target}"),
            target,
            expect,
        }
    };
    let mut out: Vec<Probe> = readiness
        .permitted
        .iter()
        .map(|t| tcp("permitted", t, Expect::Connects))
        .chain(
            readiness
                .denied
                .iter()
                .map(|t| tcp("denied", t, Expect::DoesNotConnect)),
        )
        .collect();
    out.extend(readiness.dns.iter().map(|d| Probe {
        args: vec!["dns".to_owned(), d.resolver.to_string(), d.query.clone()],
        target: format!("{}/{}", d.resolver, d.query),
        label: format!("dns {} {}", d.resolver, d.query),
        expect: Expect::Answers,
    }));
    out
}

/// The `key=value` fields of the probe's report line for each target.
fn parse_report(stdout: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with("probe="))
        .filter_map(|l| {
            let fields: BTreeMap<String, String> = l
                .split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            Some((fields.get("target")?.clone(), fields))
        })
        .collect()
}

/// The report of `probes` from the probe's `stdout`, and whether every
/// target did what the policy says.
fn network_report(probes: &[Probe], stdout: &str) -> (String, bool) {
    let seen = parse_report(stdout);
    let mut text = String::new();
    let mut unexpected = 0;
    for p in probes {
        let (fine, what) = match seen.get(&p.target) {
            None => (false, "no result from the probe".to_owned()),
            Some(f) => {
                let get = |k: &str| f.get(k).map(String::as_str).unwrap_or("?");
                let result = get("result");
                let detail = match result {
                    "connected" => format!("connected in {} ms", get("ms")),
                    "answered" => format!(
                        "answered in {} ms (rcode {}, {} answers)",
                        get("ms"),
                        get("rcode"),
                        get("answers")
                    ),
                    _ => format!("failed after {} ms: {}", get("ms"), get("error")),
                };
                let fine = matches!(
                    (p.expect, result),
                    (Expect::Connects, "connected")
                        | (Expect::DoesNotConnect, "failed")
                        | (Expect::Answers, "answered")
                );
                (fine, detail)
            }
        };
        let expected = match p.expect {
            Expect::Connects => "the policy allows it",
            Expect::DoesNotConnect => "the policy denies it",
            Expect::Answers => "an answer",
        };
        if fine {
            let _ = writeln!(
                text,
                "ok       {:<40} {}",
                escape_line(&p.label),
                escape_line(&what)
            );
        } else {
            unexpected += 1;
            let _ = writeln!(
                text,
                "PROBLEM  {:<40} {} (expected: {expected})",
                escape_line(&p.label),
                escape_line(&what)
            );
        }
    }
    let _ = writeln!(
        text,
        "lazaret doctor --network: {} of {} targets as expected",
        probes.len() - unexpected,
        probes.len()
    );
    (text, unexpected == 0)
}

/// Runs `lazaret doctor --network PROFILE`: 0 when every target behaved as
/// the policy says, 1 when one did not, 125 when the probe could not run.
pub fn network(
    profile: &str,
    host: &DoctorArgs,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
) -> ExitCode {
    let fail = |what: String| {
        errln!("lazaret doctor --network: {what}");
        ExitCode::from(125)
    };
    let layout = match SandboxLayoutV1::production() {
        Ok(l) => l,
        Err(e) => return fail(e.to_string()),
    };
    let workspace = host.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    let request = LoadRequest {
        profile,
        config: host.config.as_deref(),
        workspace: &workspace,
        env,
        layout: &layout,
    };
    let config = match load_configuration(sys, &request) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let Some(readiness) = config.selected().readiness() else {
        let text = format!(
            "lazaret doctor --network: profile {} has no `readiness` table; nothing to probe \
             (docs/user-guide.md, profiles.NAME.readiness)\n",
            escape_line(profile)
        );
        return match report::print_text(&text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("cannot write the report: {e}")),
        };
    };
    let probes = probes(readiness);
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(format!("locating the lazaret binary: {e}")),
    };
    // One ordinary session of the profile's Domain (started or joined),
    // running the product's static probe from the sandbox's view.
    let mut cmd = Command::new(program);
    cmd.args(["run", "--profile", profile]);
    if let Some(w) = &host.workspace {
        cmd.arg("--workspace").arg(w);
    }
    if let Some(c) = &host.config {
        cmd.args(["--config", c]);
    }
    cmd.arg("--")
        .arg(format!("{INIT_DIR}/{PROBE}"))
        .args(probes.iter().flat_map(|p| p.args.iter()));
    let out = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(o) => o,
        Err(e) => return fail(format!("starting the probe session: {e}")),
    };
    if !out.status.success() {
        return fail(format!("the probe session ended with {}", out.status));
    }
    let (text, as_expected) = network_report(&probes, &String::from_utf8_lossy(&out.stdout));
    match report::print_text(&text) {
        Ok(()) if as_expected => ExitCode::SUCCESS,
        Ok(()) => ExitCode::FAILURE,
        Err(e) => fail(format!("cannot write the report: {e}")),
    }
}

/// The probe's file name in the sandbox's init directory.
const PROBE: &str = lazaret_effects::coordinator::supervisor::PROBE_NAME;

#[cfg(test)]
mod tests {
    use super::*;

    fn readiness() -> ReadinessV1 {
        use lazaret_runtime::config::{DnsTarget, SocketTarget};
        ReadinessV1 {
            denied: vec![SocketTarget {
                address: [10, 99, 0, 6].into(),
                port: 8080,
            }],
            permitted: vec![SocketTarget {
                address: [10, 99, 0, 5].into(),
                port: 8080,
            }],
            dns: vec![DnsTarget {
                resolver: [10, 99, 0, 5].into(),
                query: "example.com".into(),
            }],
        }
    }

    #[test]
    fn every_target_becomes_one_probe_with_its_expectation() {
        let p = probes(&readiness());
        let args: Vec<Vec<String>> = p.iter().map(|p| p.args.clone()).collect();
        assert_eq!(
            args,
            vec![
                vec!["tcp".to_owned(), "10.99.0.5:8080".to_owned()],
                vec!["tcp".to_owned(), "10.99.0.6:8080".to_owned()],
                vec![
                    "dns".to_owned(),
                    "10.99.0.5".to_owned(),
                    "example.com".to_owned()
                ],
            ]
        );
        let expects: Vec<Expect> = p.iter().map(|p| p.expect).collect();
        assert_eq!(
            expects,
            vec![Expect::Connects, Expect::DoesNotConnect, Expect::Answers]
        );
    }

    /// A denied target that connects, and a target the probe never
    /// reported, are problems; the rest is ok; the count says so.
    #[test]
    fn the_report_compares_each_result_with_the_policy() {
        let p = probes(&readiness());
        let as_said = "probe=tcp target=10.99.0.5:8080 result=connected ms=2\n\
                       probe=tcp target=10.99.0.6:8080 result=failed ms=3001 error=No_route_to_host\n\
                       probe=dns target=10.99.0.5/example.com result=answered ms=4 rcode=0 answers=1\n";
        let (text, ok) = network_report(&p, as_said);
        assert!(ok, "{text}");
        assert!(text.contains("ok       denied 10.99.0.6:8080"), "{text}");
        assert!(text.ends_with("3 of 3 targets as expected\n"), "{text}");
        let leaked = "probe=tcp target=10.99.0.5:8080 result=connected ms=2\n\
                      probe=tcp target=10.99.0.6:8080 result=connected ms=2\n";
        let (text, ok) = network_report(&p, leaked);
        assert!(!ok);
        assert!(
            text.contains("PROBLEM  denied 10.99.0.6:8080")
                && text.contains("the policy denies it"),
            "{text}"
        );
        assert!(
            text.contains("PROBLEM  dns 10.99.0.5 example.com") && text.contains("no result"),
            "{text}"
        );
        assert!(text.ends_with("1 of 3 targets as expected\n"), "{text}");
    }

    #[test]
    fn report_prints_fixes_and_fails() -> Result<(), String> {
        let checks = vec![
            Check {
                name: "kernel",
                found: "6.18 (>= 6.9)".into(),
                fix: None,
                advice: None,
            },
            Check {
                name: "slirp4netns",
                found: "not found in PATH".into(),
                fix: Some("as root: apt-get install slirp4netns".into()),
                advice: None,
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

    #[test]
    fn advice_is_printed_but_does_not_fail() {
        let checks = vec![Check {
            name: "git bare repos",
            found: "safe.bareRepository not set".into(),
            fix: None,
            advice: Some("git config --global safe.bareRepository explicit".into()),
        }];
        let (text, ok) = report(&checks);
        assert!(ok);
        assert_eq!(
            text,
            "advice   git bare repos    safe.bareRepository not set\n         \
             run: git config --global safe.bareRepository explicit\n\
             lazaret doctor: all 1 checks passed\n"
        );
    }

    /// Spec README 'Terminal output hygiene': what a check found (a path on
    /// PATH, a tool's version line) is shown escaped, on its line.
    #[test]
    fn what_a_check_found_is_escaped_to_its_line() {
        let checks = vec![Check {
            name: "runsc",
            found: "/opt/evil\x1b]0;x\x07\nPROBLEM forged".into(),
            fix: Some("see \u{9b}2J".into()),
            advice: None,
        }];
        let (text, _) = report(&checks);
        assert_eq!(
            text,
            "PROBLEM  runsc             /opt/evil\\x1b]0;x\\x07\\nPROBLEM forged\n         \
             fix: see \\u{9b}2J\nlazaret doctor: 1 of 1 checks found a problem\n"
        );
    }
}
