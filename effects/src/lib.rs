//! Everything in Lazaret that touches the operating system.
pub mod config_init;
mod config_objects;
pub mod config_resolve;
pub mod config_source;
pub mod confined;
pub mod process_env;
