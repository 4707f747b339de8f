//! The real process environment as a [`HostEnvironment`].
use std::ffi::OsString;

use lazaret_runtime::config::HostEnvironment;

/// Reads variables from this process's environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl HostEnvironment for ProcessEnvironment {
    fn var_os(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}
