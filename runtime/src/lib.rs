//! The sans-IO core of Lazaret. No syscalls, clocks or randomness.
pub mod bundle;
pub mod catalog_model;
pub mod config;
pub mod coordinator;
pub mod core;
pub mod display;
pub mod gc_policy;
pub mod git_sentry;
pub mod image_ref;
pub mod network;
pub mod ownership;
pub mod records;
pub mod replay;
pub mod simulate;
pub mod terminal;
pub mod trace;
pub mod workspace_routing;
