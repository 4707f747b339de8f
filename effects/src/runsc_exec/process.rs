//! The OCI process JSON for a session (`runsc exec --process`), in both
//! forms: a guest TTY (`"terminal": true`) or pipes.
use lazaret_runtime::bundle::SESSION_CAPABILITIES;
use serde_json::json;

/// A session's guest process: exact argv, the product's environment
/// entries, a guest TTY or not. The profile's environment values are not
/// held here (they are secret and this type is `Debug`); they are passed to
/// [`ExecProcess::to_json`] and exist only in its output, which goes to a
/// memfd and never to a file (spec 3.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecProcess {
    pub args: Vec<String>,
    /// `NAME=VALUE` entries Lazaret itself sets (`PATH`, `HOME`, `TERM`);
    /// the profile's `env` may replace them.
    pub env: Vec<String>,
    /// `NAME=VALUE` entries of this session that the profile's `env` never
    /// replaces: its Session Request Capability (spec 3.3, "HC delivers the
    /// signed Session Request Capability with guest execution").
    pub session_env: Vec<String>,
    pub terminal: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessSpecError {
    #[error("session argv is empty; expected a program and its arguments")]
    EmptyArgv,
    #[error("session argv element {index} contains a NUL byte")]
    NulInArgv { index: usize },
    #[error("environment entry {index} ({name:?}) is not NAME=VALUE without NUL")]
    BadEnv { index: usize, name: String },
    #[error("profile environment entry {name:?} has an empty name, '=' in its name or a NUL byte (value not shown)")]
    BadProfileEnv { name: String },
    #[error("cannot encode the process JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The working directory of every session (spec 3.2: the workspace is
/// mounted at `/workspace`).
pub const SESSION_CWD: &str = "/workspace";

impl ExecProcess {
    /// The process JSON: `terminal`, args, the environment, `cwd`
    /// `/workspace`, user 0:0 of the sandbox (no host authority: SR-1), the
    /// conventional container capability set in the bounding, effective
    /// and permitted sets (never network administration, raw sockets or
    /// SYS_ADMIN: SR-5 and the spec README decision "Sandbox capabilities"),
    /// and `noNewPrivileges` (SR-5).
    ///
    /// `profile_env` is the selected profile's resolved `env` table
    /// (sandbox name, value); an entry replaces a product entry of the same
    /// name. Values never appear in an error.
    pub fn to_json<'v>(
        &self,
        profile_env: impl IntoIterator<Item = (&'v str, &'v str)>,
    ) -> Result<Vec<u8>, ProcessSpecError> {
        if self.args.is_empty() {
            return Err(ProcessSpecError::EmptyArgv);
        }
        if let Some(index) = self.args.iter().position(|a| a.contains('\0')) {
            return Err(ProcessSpecError::NulInArgv { index });
        }
        let mut product = Vec::with_capacity(self.env.len() + self.session_env.len());
        for (index, entry) in self.env.iter().chain(&self.session_env).enumerate() {
            match entry.split_once('=') {
                Some((name, _)) if !name.is_empty() && !entry.contains('\0') => {
                    product.push((name, entry.as_str()));
                }
                _ => {
                    return Err(ProcessSpecError::BadEnv {
                        index,
                        name: entry
                            .split('=')
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .take(64)
                            .collect(),
                    })
                }
            }
        }
        let mut profile = Vec::new();
        for (name, value) in profile_env {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(ProcessSpecError::BadProfileEnv {
                    name: name.chars().filter(|c| *c != '\0').take(64).collect(),
                });
            }
            profile.push(format!("{name}={value}"));
        }
        let named = |entries: &[String], n: &str| {
            entries
                .iter()
                .any(|e| e.split_once('=').is_some_and(|(en, _)| en == n))
        };
        let (product, session) = product.split_at(self.env.len());
        let env: Vec<&str> = product
            .iter()
            .filter(|(name, _)| !named(&profile, name) && !named(&self.session_env, name))
            .map(|(_, entry)| *entry)
            .chain(
                profile
                    .iter()
                    .filter(|p| {
                        let name = p.split_once('=').map_or(p.as_str(), |(n, _)| n);
                        !named(&self.session_env, name)
                    })
                    .map(String::as_str),
            )
            .chain(session.iter().map(|(_, entry)| *entry))
            .collect();
        let caps: Vec<&str> = SESSION_CAPABILITIES.to_vec();
        let none: Vec<&str> = Vec::new();
        let value = json!({
            "terminal": self.terminal,
            "user": { "uid": 0, "gid": 0 },
            "args": self.args,
            "env": env,
            "cwd": SESSION_CWD,
            "capabilities": {
                "bounding": caps,
                "effective": caps,
                "inheritable": none,
                "permitted": caps,
                "ambient": none,
            },
            "noNewPrivileges": true,
        });
        Ok(serde_json::to_vec(&value)?)
    }
}
