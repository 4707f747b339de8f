//! `lazaret __wrapper`: the repository-owned launch-barrier wrapper (spec 3.3
//! steps 3 and 8). The argument grammar lives in
//! `lazaret_effects::broker::wrapper::WrapperArgs` so the broker and the
//! wrapper cannot drift apart.
use crate::report::errln;
use clap::Args;
use lazaret_effects::broker::wrapper::{run_wrapper, WrapperArgs};
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
    // Returns only when the target must not run.
    let failure = run_wrapper(&RealProcessSys, &args);
    errln!("lazaret __wrapper: not executing the target: {failure}");
    ExitCode::from(failure.exit_code())
}
