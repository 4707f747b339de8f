//! Resolution of `env:NAME` references for the selected profile only
//! (spec 3.2). Values are redacted from every diagnostic and have no
//! serialized or hashed form.
use std::fmt;

use super::error::ConfigError;
use super::grammar::EnvName;
use super::locate::HostEnvironment;
use super::profile::SelectedProfileV1;

/// A resolved host environment value. Debug prints `<redacted>`; there is no
/// Display, Clone or serde implementation.
pub struct SecretValue(String);

impl SecretValue {
    /// The value, for the single consumer that places it in the sandbox
    /// process environment.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The selected profile's sandbox environment.
#[derive(Debug)]
pub struct ResolvedEnvironment {
    entries: Vec<(EnvName, EnvName, SecretValue)>,
}

impl ResolvedEnvironment {
    /// `(sandbox name, host reference name, value)` in sandbox-name order.
    pub fn entries(&self) -> impl Iterator<Item = (&EnvName, &EnvName, &SecretValue)> {
        self.entries.iter().map(|(s, h, v)| (s, h, v))
    }
}

/// Resolves every reference of the selected profile. A missing, non-UTF-8 or
/// NUL-containing host value refuses the profile.
pub fn resolve_environment(
    selected: &SelectedProfileV1,
    env: &dyn HostEnvironment,
) -> Result<ResolvedEnvironment, ConfigError> {
    let mut entries = Vec::with_capacity(selected.env_references().len());
    for (key, sandbox, host) in selected.env_references() {
        let refuse = |problem| ConfigError::Environment {
            key: key.clone(),
            variable: host.as_str().to_owned(),
            problem,
        };
        let value = env
            .var_os(host.as_str())
            .ok_or_else(|| refuse("it is not set"))?;
        let value = value
            .into_string()
            .map_err(|_| refuse("its value is not UTF-8"))?;
        if value.contains('\0') {
            return Err(refuse("its value contains NUL"));
        }
        entries.push((sandbox.clone(), host.clone(), SecretValue(value)));
    }
    Ok(ResolvedEnvironment { entries })
}
