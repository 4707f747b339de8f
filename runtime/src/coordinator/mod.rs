//! The Host Coordinator's wire records and its pure session bookkeeping
//! (spec 3.1, 3.3, 3.4; FR-2, FR-6). Sans-IO: framing, message types and the
//! model core (`host_model`) whose steps the effects interpreter in `lazaret_effects::coordinator` carries
//! out.
pub mod control;
pub mod frame;
pub mod host_model;
pub mod launch;
pub mod messages;
pub mod recovery;
pub mod serve;
#[cfg(test)]
mod simulated_crashes;
