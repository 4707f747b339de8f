//! Grammars of names and paths (schemas.md "Trusted host configuration").
use std::fmt;

use super::error::{ConfigError, KeyPath};
use crate::image_ref::ImageRef;

/// A profile name: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`, never `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProfileName(String);

impl ProfileName {
    pub const EXPECTED: &'static str = "a profile name matching [A-Za-z0-9][A-Za-z0-9._-]{0,63}";

    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        const LEN_MAX: usize = 64;
        let mut bytes = s.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
        let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if first_ok && rest_ok && s.len() <= LEN_MAX && s != "." && s != ".." {
            Ok(Self(s.to_owned()))
        } else {
            Err(ConfigError::invalid(key, s, Self::EXPECTED))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An environment name: `[A-Za-z_][A-Za-z0-9_]*`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvName(String);

impl EnvName {
    pub const EXPECTED: &'static str = "an environment name matching [A-Za-z_][A-Za-z0-9_]*";

    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        let mut bytes = s.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            Ok(Self(s.to_owned()))
        } else {
            Err(ConfigError::invalid(key, s, Self::EXPECTED))
        }
    }

    /// Parses an `env:NAME` reference; literal values and other schemes are
    /// invalid.
    pub fn parse_reference(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        const EXPECTED: &str = "an environment reference env:NAME with NAME matching [A-Za-z_][A-Za-z0-9_]* (literal values are not allowed)";
        match s.strip_prefix("env:") {
            Some(name) => {
                Self::parse(key, name).map_err(|_| ConfigError::invalid(key, s, EXPECTED))
            }
            None => Err(ConfigError::Invalid {
                key: key.clone(),
                found: "a value that is not an env: reference".to_owned(),
                expected: EXPECTED,
            }),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EnvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks the components of a path suffix: nonempty, no empty component (so
/// no repeated or trailing separator), no `.` or `..`, and no expansion,
/// variable, glob, quoting or shell form.
fn components_ok(suffix: &str) -> bool {
    !suffix.is_empty()
        && suffix.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && !c.starts_with('~')
                && !c.chars().any(|ch| {
                    ch.is_control()
                        || matches!(
                            ch,
                            '$' | '*' | '?' | '[' | ']' | '{' | '}' | '`' | '\\' | '\'' | '"'
                        )
                })
        })
}

/// A declared host path: `/abs`, `~/rel`, or (volume hosts only)
/// `{profile_dir}/rel`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostPathDecl {
    Absolute(String),
    Home(String),
    ProfileDir(String),
}

impl HostPathDecl {
    pub const EXPECTED: &'static str = "an absolute host path or one starting with ~/ (no empty, . or .. components, no trailing /, no variables or globs)";
    pub const EXPECTED_VOLUME: &'static str = "an absolute host path or one starting with ~/ or {profile_dir}/ (no empty, . or .. components, no trailing /, no variables or globs)";

    /// Parses a host path that may not use `{profile_dir}`.
    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        match Self::parse_any(s) {
            Some(Self::ProfileDir(_)) | None => Err(ConfigError::invalid(key, s, Self::EXPECTED)),
            Some(p) => Ok(p),
        }
    }

    /// Parses a volume host path.
    pub fn parse_volume(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        Self::parse_any(s).ok_or_else(|| ConfigError::invalid(key, s, Self::EXPECTED_VOLUME))
    }

    fn parse_any(s: &str) -> Option<Self> {
        if let Some(rest) = s.strip_prefix("{profile_dir}/") {
            components_ok(rest).then(|| Self::ProfileDir(rest.to_owned()))
        } else if let Some(rest) = s.strip_prefix("~/") {
            components_ok(rest).then(|| Self::Home(rest.to_owned()))
        } else if let Some(rest) = s.strip_prefix('/') {
            components_ok(rest).then(|| Self::Absolute(s.to_owned()))
        } else {
            None
        }
    }

    /// Whether this path is anchored beneath `{profile_dir}`.
    pub fn is_profile_dir(&self) -> bool {
        matches!(self, Self::ProfileDir(_))
    }
}

impl fmt::Display for HostPathDecl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absolute(p) => f.write_str(p),
            Self::Home(p) => write!(f, "~/{p}"),
            Self::ProfileDir(p) => write!(f, "{{profile_dir}}/{p}"),
        }
    }
}

/// A normalized absolute sandbox path other than `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SandboxPath(String);

impl SandboxPath {
    pub const EXPECTED: &'static str = "a normalized absolute sandbox path other than / (no empty, . or .. components, no trailing /, no variables or globs)";

    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        match s.strip_prefix('/') {
            Some(rest) if components_ok(rest) => Ok(Self(s.to_owned())),
            _ => Err(ConfigError::invalid(key, s, Self::EXPECTED)),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` equals `other` or is an ancestor or descendant of it.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.contains(other) || other.contains(self)
    }

    /// Whether `self` equals or is an ancestor of `other`.
    pub fn contains(&self, other: &Self) -> bool {
        other.0 == self.0
            || other
                .0
                .strip_prefix(&self.0)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Whether `other` is a strict descendant of `self`.
    pub fn strictly_contains(&self, other: &Self) -> bool {
        self.contains(other) && self != other
    }
}

impl fmt::Display for SandboxPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An image reference, parsed and normalised as docker and podman normalise
/// short names (see [`crate::image_ref`]); `as_str` is the normalised text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    parsed: ImageRef,
    normalised: String,
}

impl ImageReference {
    pub fn parse(key: &KeyPath, s: &str) -> Result<Self, ConfigError> {
        let parsed = ImageRef::parse(s).map_err(|source| ConfigError::ImageReference {
            key: key.clone(),
            source,
        })?;
        Ok(Self {
            normalised: parsed.to_string(),
            parsed,
        })
    }

    /// The normalised reference text.
    pub fn as_str(&self) -> &str {
        &self.normalised
    }

    /// The parsed reference.
    pub fn image_ref(&self) -> &ImageRef {
        &self.parsed
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.normalised)
    }
}

/// Refuses NUL in any configuration string (schemas.md: all configuration
/// strings are UTF-8 and NUL-free).
pub(crate) fn nul_free(key: &KeyPath, s: &str) -> Result<(), ConfigError> {
    if s.contains('\0') {
        Err(ConfigError::Invalid {
            key: key.clone(),
            found: "a string containing NUL".to_owned(),
            expected: "a NUL-free UTF-8 string",
        })
    } else {
        Ok(())
    }
}
