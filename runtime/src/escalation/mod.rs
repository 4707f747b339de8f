//! Host escalation's pure decisions (spec 3.8; schemas.md mailbox records
//! and auto-approval rules): which mailbox records the Host Coordinator
//! accepts and from whom ([`authenticate`]), whether a request ID was seen
//! before ([`RequestLedger`]), what a command vector may be and which rule
//! it matches ([`command`]), and the bounded window of result chunks
//! ([`ResultWindow`]), and the sandbox side's signing and checking of
//! the same records ([`EscalationClient`], [`ResultReader`]), and the
//! developer prompt: its text and the signed decision the Host
//! Coordinator accepts ([`prompt`]; `RouteToPrompt`, `ApproveEscalation`,
//! `DenyEscalation`) and the answer as typed ([`answer`]: approve, deny,
//! or edit on the [`edit_line`] and then approve). Model names: a request that passes
//! [`authenticate`] is the model's `SubmitEscalation(s, m)` with `m` from
//! [`command::classify`]; [`ResultWindow`] performs `EmitResultChunk`,
//! `AckResultChunk`, `AckTimeout` and `DeliverResult`; [`steps`] names
//! every model step serving a request takes, as the Host Coordinator's
//! event loop takes it.
//!
//! Sans-IO: records arrive as bytes the effects layer read through its
//! confined mailbox handles; nothing here opens a file.
pub mod answer;
pub mod command;
pub mod edit_line;
pub mod prompt;
mod request;
mod results;
pub mod steps;

pub use lazaret_wire::client::{ClientError, EscalationClient, ResultReader};
pub use request::{
    authenticate, correlate_ack, correlate_cancellation, MailboxAuthority, MailboxRefusal,
    OpenRequest, RequestLedger, SandboxSigned, MAX_JUSTIFICATION, MAX_REQUESTS_PER_GENERATION,
};
pub use results::{ResultError, ResultWindow, MAX_UNACKED_CHUNKS};
