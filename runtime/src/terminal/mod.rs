//! Session terminals (spec 3.4, FR-14, FR-15): the v1 protocol records and
//! codec (schemas.md "Session terminal protocol") and the pure per-session
//! terminal state machine. Sans-IO: inputs (client events, PTY data, timers,
//! observations) go in as data and effects come out as [`machine::Command`]s.
//! `escape_filter` removes clipboard sequences from session output (spec
//! README 'Terminal output hygiene').
pub mod escape_filter;
pub mod keys;
pub mod machine;
pub mod protocol;
pub mod queue;
pub mod sessions;
