//! Everything in Lazaret that touches the operating system.
pub mod broker;
pub mod domain_lock;
pub mod domain_root;
pub mod domain_store;
pub mod process_identity;
pub mod pty;
pub mod runsc_exec;
pub mod terminal_mode;
