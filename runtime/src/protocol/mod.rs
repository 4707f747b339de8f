//! Protocol cryptography (spec 3.3 "Protocol cryptography refinement";
//! schemas.md "Protocol cryptography"; SR-9, SR-16, SR-17): the signed
//! records that bind a Client Session to one generation, their exact
//! signature inputs and IDs, and the generation's ephemeral Trust Anchor.
//!
//! Sans-IO like the rest of this crate: every key comes from seed bytes the
//! caller drew, every time is an input, and nothing here touches a file or
//! a socket. The Host Coordinator holds the [`TrustAnchor`] in memory for
//! its generation only (spec 3.3: "All Trust Anchor and session
//! cryptographic material is ephemeral").
pub use lazaret_wire::{mailbox, records, signing};
pub mod tls;
pub mod trust_anchor;
mod verify;

pub use trust_anchor::{ResultSigner, TrustAnchor, TrustAnchorSeeds};
pub use verify::{verify_registration, ExpectedRegistration, VerifyError};

/// The protocol version every v1 record carries.
pub use lazaret_wire::PROTOCOL_VERSION;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
