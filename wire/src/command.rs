//! The structured v1 command language of a host escalation (schemas.md
//! `MailboxRequest.command_argv`): an argument vector whose element zero is
//! an absolute executable path. There is no command string, no `PATH`
//! lookup and no shell expansion: a vector whose element zero is not an
//! absolute path would need one and is [`CommandError::RequiresShell`].
//! Checked by the Escalation Client before it signs, and by the Host
//! Coordinator before it matches rules or launches.

/// Why a command vector is not one the host launcher can run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("the command vector is empty; expected an absolute executable path and its arguments")]
    Empty,
    #[error("argument {index} contains a NUL byte")]
    Nul { index: usize },
    #[error("{executable:?} is not an absolute path: finding it would need PATH or a shell (CommandRequiresShell); give the executable's absolute path")]
    RequiresShell { executable: String },
}

/// Checks `argv` against the v1 command language.
pub fn check_argv(argv: &[String]) -> Result<(), CommandError> {
    let executable = argv.first().ok_or(CommandError::Empty)?;
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(CommandError::Nul { index });
    }
    if !executable.starts_with('/') {
        return Err(CommandError::RequiresShell {
            executable: executable.clone(),
        });
    }
    Ok(())
}
