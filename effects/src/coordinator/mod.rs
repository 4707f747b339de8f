//! The Domain process chain (spec 3.1, 3.3, 3.4; FR-2, FR-6): the CLI's
//! client side, the Host Coordinator, the Runtime Supervisor, and the
//! namespace-entering helper exec clients run through.
//!
//! Every child is spawned through the causal acquisition broker
//! ([`crate::broker`]); every lifecycle decision is a step of the generated
//! Lazaret model (`lazaret_runtime::coordinator::host_model`), checked before
//! this module carries it out and traced after.
mod absence;
mod catalog_record;
pub mod channel;
pub mod client;
mod client_prompt;
pub mod control_tls;
mod election;
pub mod enforcement;
pub mod enter;
pub mod git_routing;
pub mod guest_runner;
pub mod hc_model;
pub mod host;
pub mod launch;
mod mailbox;
pub mod model_ledger;
pub mod nsys;
pub mod observed;
pub mod paths;
pub mod piped_session;
pub mod publication;
pub mod recovery;
pub mod release;
pub mod release_gate;
mod runtime_end;
pub mod session;
mod session_release;
pub mod session_report;
pub mod supervisor;
pub mod terminal_session;
mod tls_relay;

/// Hidden subcommand names of the `lazaret` binary.
pub const COORDINATOR_SUBCOMMAND: &str = "__coordinator";
pub const SUPERVISOR_SUBCOMMAND: &str = "__supervisor";
pub const ENTER_SUBCOMMAND: &str = "__enter";

/// Exit status of a Host Coordinator that lost the Domain lock race.
pub const LOST_LOCK_EXIT: u8 = 3;
