//! `lazaret __wrapper`: the repository-owned launch-barrier wrapper (spec 3.3
//! steps 3 and 8). The argument grammar lives in
//! `lazaret_effects::broker::wrapper::WrapperArgs` so the broker and the
//! wrapper cannot drift apart.
use crate::report::errln;
use clap::Args;
use lazaret_effects::broker::sys::WrapperSys;
use lazaret_effects::broker::wrapper::{await_release, WrapperArgs, WrapperFailure};
use lazaret_effects::coordinator::ENTER_SUBCOMMAND;
use lazaret_effects::process_identity::real::RealProcessSys;
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct WrapperCommand {
    /// --barrier-fd N --parent-boot UUID --parent-dev N --parent-ino N -- TARGET...
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Exit status when the wrapper's own arguments are unusable.
const BAD_ARGUMENTS: u8 = 120;

pub fn run(command: WrapperCommand) -> ExitCode {
    let args = match WrapperArgs::parse(&command.args) {
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
    if let Some(enter) = own_enter_arguments(&args.target) {
        return crate::cmd_internal_roles::enter_with(enter);
    }
    let failure = WrapperFailure::Exec(RealProcessSys.exec(&args.target));
    errln!("lazaret __wrapper: not executing the target: {failure}");
    ExitCode::from(failure.exit_code())
}

/// The `__enter` arguments when `target` is exactly this binary's `__enter`
/// (the same executable file as the running wrapper).
fn own_enter_arguments(target: &[OsString]) -> Option<&[OsString]> {
    let (program, rest) = target.split_first()?;
    let (subcommand, arguments) = rest.split_first()?;
    let own = std::env::current_exe().ok()?;
    (subcommand == ENTER_SUBCOMMAND && std::path::Path::new(program) == own).then_some(arguments)
}

#[cfg(test)]
mod tests {
    use super::own_enter_arguments;
    use std::ffi::OsString;

    /// Only this very binary's `__enter` runs in place; any other target
    /// (another program, or this binary's other roles) is exec'd.
    #[test]
    fn only_this_binarys_enter_runs_in_place() {
        let own = std::env::current_exe()
            .map(OsString::from)
            .unwrap_or_default();
        let target: Vec<OsString> = vec![own.clone(), "__enter".into(), "--pid".into(), "7".into()];
        assert_eq!(
            own_enter_arguments(&target),
            Some(&[OsString::from("--pid"), OsString::from("7")][..])
        );
        let elsewhere: Vec<OsString> = vec!["/usr/bin/lazaret".into(), "__enter".into()];
        assert_eq!(own_enter_arguments(&elsewhere), None);
        let other_role: Vec<OsString> = vec![own, "__supervisor".into()];
        assert_eq!(own_enter_arguments(&other_role), None);
        assert_eq!(own_enter_arguments(&[]), None);
    }
}
