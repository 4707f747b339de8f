//! Lazaret's v1 wire: the protocol records of schemas.md ("Protocol
//! cryptography" and the mailbox records) with their identifiers, Postcard
//! codecs, signature inputs and signatures, and the Escalation Client's side
//! of the mailbox exchange. It is the part of Lazaret both ends of the
//! Escalation Mailbox need: the Host Coordinator (through
//! `lazaret-runtime`, which re-exports these modules where they always
//! lived) and `lazaret-escalate` inside the Agent Sandbox, a static binary
//! that carries nothing else of Lazaret.
//!
//! Pure like the runtime: no syscalls, clocks, environment or randomness;
//! every key comes from bytes the caller holds.
pub mod client;
pub mod codec;
pub mod command;
pub mod ids;
pub mod mailbox;
pub mod open_request;
pub mod records;
pub mod signing;

/// The protocol version every v1 record carries.
pub const PROTOCOL_VERSION: u16 = 1;
