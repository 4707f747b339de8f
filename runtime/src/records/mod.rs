//! Durable and protocol record shapes (schemas.md "Domain Store", "Host process
//! identity and staged ownership", "Participant ownership", "Storage Catalog", "Session terminal
//! ownership") and their postcard codecs.
pub mod catalog;
pub use lazaret_wire::codec;
pub mod domain;
pub use lazaret_wire::ids;
pub mod participant;
pub mod process;
pub mod readiness;
pub mod terminal;
