//! Everything in Lazaret that touches the operating system.
pub mod broker;
pub mod config_init;
mod config_objects;
pub mod config_resolve;
pub mod config_source;
pub mod confined;
pub mod coordinator;
pub mod doctor;
pub mod domain_lock;
pub mod domain_store;
pub mod git_sentry;
pub mod image;
pub mod prepare;
pub mod process_env;
pub mod process_identity;
pub mod userns;
