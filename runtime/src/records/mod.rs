//! Durable and protocol record shapes (schemas.md "Domain Store", "Host process
//! identity and staged ownership", "Participant ownership", "Storage Catalog", "Session terminal
//! ownership") and their postcard codecs.
pub mod catalog;
pub mod codec;
pub mod domain;
pub mod ids;
pub mod participant;
pub mod process;
pub mod readiness;
pub mod terminal;
