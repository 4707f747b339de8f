//! `lazaret __wrapper`: the repository-owned launch-barrier wrapper (spec 3.3
//! steps 3 and 8). The argument grammar lives in
//! `lazaret_effects::broker::wrapper::WrapperArgs` so the broker and the
//! wrapper cannot drift apart.
use crate::report::errln;
use lazaret_effects::broker::sys::WrapperSys;
use lazaret_effects::broker::wrapper::{await_release, WrapperArgs, WrapperFailure};
use lazaret_effects::coordinator::git_routing::GIT_ROUTING_SUBCOMMAND;
use lazaret_effects::coordinator::ENTER_SUBCOMMAND;
use lazaret_effects::process_identity::real::RealProcessSys;
use std::ffi::OsString;
use std::process::ExitCode;

/// Exit status when the wrapper's own arguments are unusable.
const BAD_ARGUMENTS: u8 = 120;

/// Runs `lazaret __wrapper ARGS` (`args` after the subcommand:
/// `--barrier-fd N --parent-boot UUID --parent-dev N --parent-ino N --
/// TARGET...`).
pub fn run(args: &[OsString]) -> ExitCode {
    let args = match WrapperArgs::parse(args) {
        Ok(args) => args,
        Err(e) => {
            errln!("lazaret __wrapper: {e}");
            return ExitCode::from(BAD_ARGUMENTS);
        }
    };
    if let Err(failure) = await_release(&RealProcessSys, &args) {
        errln!("lazaret __wrapper: not executing the target: {failure}");
        return ExitCode::from(failure.exit_code());
    }
    // An exec client's target is this binary's `__enter`: its checks run
    // here, in the released wrapper, instead of in a second exec of the
    // binary (one exec fewer on every session start; docs/benchmarks.md).
    // The routing daemon, this binary's `__git-routing`, likewise.
    match own_role(&args.target) {
        Some((ENTER_SUBCOMMAND, enter)) => return crate::cmd_internal_roles::enter_with(enter),
        Some((GIT_ROUTING_SUBCOMMAND, routing)) => {
            return crate::cmd_internal_roles::git_routing_with(routing)
        }
        _ => {}
    }
    let failure = WrapperFailure::Exec(RealProcessSys.exec(&args.target));
    errln!("lazaret __wrapper: not executing the target: {failure}");
    ExitCode::from(failure.exit_code())
}

/// The role and its arguments when `target` is exactly this binary's
/// `__enter` or `__git-routing` (the same executable file as the running
/// wrapper).
fn own_role(target: &[OsString]) -> Option<(&'static str, &[OsString])> {
    let (program, rest) = target.split_first()?;
    let (subcommand, arguments) = rest.split_first()?;
    let own = std::env::current_exe().ok()?;
    if std::path::Path::new(program) != own {
        return None;
    }
    [ENTER_SUBCOMMAND, GIT_ROUTING_SUBCOMMAND]
        .into_iter()
        .find(|role| subcommand == role)
        .map(|role| (role, arguments))
}

#[cfg(test)]
mod tests {
    use super::own_role;
    use std::ffi::OsString;

    /// Only this very binary's `__enter` and `__git-routing` run in place;
    /// any other target (another program, or this binary's other roles) is
    /// exec'd.
    #[test]
    fn only_this_binarys_enter_and_routing_run_in_place() {
        let own = std::env::current_exe()
            .map(OsString::from)
            .unwrap_or_default();
        let target: Vec<OsString> = vec![own.clone(), "__enter".into(), "--pid".into(), "7".into()];
        assert_eq!(
            own_role(&target),
            Some((
                "__enter",
                &[OsString::from("--pid"), OsString::from("7")][..]
            ))
        );
        let routing: Vec<OsString> = vec![own.clone(), "__git-routing".into(), "--exit-fd".into()];
        assert_eq!(
            own_role(&routing),
            Some(("__git-routing", &[OsString::from("--exit-fd")][..]))
        );
        let elsewhere: Vec<OsString> = vec!["/usr/bin/lazaret".into(), "__enter".into()];
        assert_eq!(own_role(&elsewhere), None);
        let other_role: Vec<OsString> = vec![own, "__supervisor".into()];
        assert_eq!(own_role(&other_role), None);
        assert_eq!(own_role(&[]), None);
    }
}
