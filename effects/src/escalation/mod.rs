//! Host escalation's effects (spec 3.8): the Host Coordinator's confined
//! mailbox directory handles ([`MailboxDir`]), the shell-free host
//! launcher ([`launcher`]), the pidfd-held host process and the service
//! that answers the sandbox's requests ([`service`]), the process a host
//! command runs under so nothing it starts outlives it ([`subreaper`]),
//! the desk where it finds a session's terminal for a developer prompt
//! and holds its output while a request has it ([`prompt_desk`]), and the
//! model steps serving takes ([`model_steps`]), and the host processes
//! running for the sessions, which a session's close stops ([`running`]).
//! What is accepted, approved and streamed is
//! decided by `lazaret_runtime::escalation`.
mod host_process;
pub mod launcher;
mod mailbox_dir;
pub mod model_steps;
pub mod prompt_desk;
pub mod running;
pub mod service;
pub mod subreaper;

pub use mailbox_dir::{Listing, MailboxDir, MailboxReadError, MailboxWriteError, MAX_ENTRIES};

#[cfg(test)]
mod tests;
