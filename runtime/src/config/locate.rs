//! Where the configuration source and the Storage and Runtime Roots are
//! (spec 3.2). The host environment is an input; nothing is opened here.
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::error::{ConfigError, KeyPath};
use super::grammar::HostPathDecl;

/// Read access to the host environment, passed in explicitly.
pub trait HostEnvironment {
    fn var_os(&self, name: &str) -> Option<OsString>;
}

impl HostEnvironment for std::collections::BTreeMap<String, OsString> {
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.get(name).cloned()
    }
}

/// Normalizes an absolute host path from the environment: separators are
/// collapsed, `.` and `..` components refused. `None` when not absolute.
fn absolute_env_path(
    variable: &'static str,
    value: &OsString,
) -> Result<Option<PathBuf>, ConfigError> {
    let bytes = value.as_bytes();
    if bytes.contains(&0) {
        return Err(ConfigError::HostInput {
            variable,
            problem: "contains NUL".to_owned(),
            expected: "a NUL-free absolute path",
        });
    }
    if !bytes.starts_with(b"/") {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(bytes.len());
    for component in bytes.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        if component == b"." || component == b".." {
            return Err(ConfigError::HostInput {
                variable,
                problem: format!("{:?} has a . or .. component", Path::new(value)),
                expected: "an absolute path without . or .. components",
            });
        }
        out.push(b'/');
        out.extend_from_slice(component);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Ok(Some(PathBuf::from(OsString::from_vec(out))))
}

/// `$HOME`: required, absolute.
pub fn home_dir(env: &dyn HostEnvironment) -> Result<PathBuf, ConfigError> {
    let missing = |problem: &str| ConfigError::HostInput {
        variable: "HOME",
        problem: problem.to_owned(),
        expected: "an absolute home directory path",
    };
    let value = env.var_os("HOME").ok_or_else(|| missing("is not set"))?;
    absolute_env_path("HOME", &value)?.ok_or_else(|| missing("is empty or relative"))
}

/// An XDG base directory: unset, empty or relative values count as unset.
fn xdg(env: &dyn HostEnvironment, variable: &'static str) -> Result<Option<PathBuf>, ConfigError> {
    match env.var_os(variable) {
        Some(value) => absolute_env_path(variable, &value),
        None => Ok(None),
    }
}

/// Expands a declared host path against the home directory and, for volume
/// hosts, the profile directory.
pub fn expand_host_path(decl: &HostPathDecl, home: &Path, profile_dir: &Path) -> PathBuf {
    match decl {
        HostPathDecl::Absolute(p) => PathBuf::from(p),
        HostPathDecl::Home(rest) => home.join(rest),
        HostPathDecl::ProfileDir(rest) => profile_dir.join(rest),
    }
}

/// The configuration source: `--config FILE` (strict host-path grammar),
/// else `$XDG_CONFIG_HOME/lazaret/config.toml`, else
/// `$HOME/.config/lazaret/config.toml`.
pub fn config_source_path(
    explicit: Option<&str>,
    env: &dyn HostEnvironment,
) -> Result<PathBuf, ConfigError> {
    if let Some(arg) = explicit {
        let key = KeyPath::label("--config".to_owned());
        let decl = HostPathDecl::parse(&key, arg)?;
        return Ok(match decl {
            HostPathDecl::Absolute(p) => PathBuf::from(p),
            other => expand_host_path(&other, &home_dir(env)?, Path::new("/")),
        });
    }
    Ok(match xdg(env, "XDG_CONFIG_HOME")? {
        Some(base) => base.join("lazaret/config.toml"),
        None => home_dir(env)?.join(".config/lazaret/config.toml"),
    })
}

/// The Storage Root: `storage.data_root`, else `$XDG_DATA_HOME/lazaret`, else
/// `$HOME/.local/share/lazaret`.
pub fn storage_root_path(
    data_root: Option<&HostPathDecl>,
    env: &dyn HostEnvironment,
) -> Result<PathBuf, ConfigError> {
    if let Some(decl) = data_root {
        return Ok(match decl {
            HostPathDecl::Absolute(p) => PathBuf::from(p),
            other => expand_host_path(other, &home_dir(env)?, Path::new("/")),
        });
    }
    Ok(match xdg(env, "XDG_DATA_HOME")? {
        Some(base) => base.join("lazaret"),
        None => home_dir(env)?.join(".local/share/lazaret"),
    })
}

/// The Runtime Root: `$XDG_RUNTIME_DIR/lazaret`; the variable is required.
pub fn runtime_root_path(env: &dyn HostEnvironment) -> Result<PathBuf, ConfigError> {
    let missing = |problem: &str| ConfigError::HostInput {
        variable: "XDG_RUNTIME_DIR",
        problem: problem.to_owned(),
        expected: "an absolute runtime directory path",
    };
    let value = env
        .var_os("XDG_RUNTIME_DIR")
        .ok_or_else(|| missing("is not set"))?;
    let base = absolute_env_path("XDG_RUNTIME_DIR", &value)?
        .ok_or_else(|| missing("is empty or relative"))?;
    Ok(base.join("lazaret"))
}
