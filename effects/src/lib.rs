//! Everything in Lazaret that touches the operating system.
pub mod doctor;
pub mod git_sentry;
pub mod image;
pub mod prepare;
pub mod userns;
