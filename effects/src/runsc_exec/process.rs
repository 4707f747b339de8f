//! The OCI process JSON for a session (`runsc exec --process`).
use serde_json::{json, Value};

/// A session's guest process: exact argv, environment, a guest TTY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecProcess {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub terminal: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessSpecError {
    #[error("session argv is empty; expected a program and its arguments")]
    EmptyArgv,
    #[error("session argv element {index} contains a NUL byte")]
    NulInArgv { index: usize },
    #[error("environment entry {index} ({entry:?}) is not NAME=VALUE without NUL")]
    BadEnv { index: usize, entry: String },
    #[error("cannot encode the process JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The working directory of every session (spec 3.2: the workspace is
/// mounted at `/workspace`).
pub const SESSION_CWD: &str = "/workspace";

impl ExecProcess {
    /// The process JSON: `terminal`, args, env, `cwd` `/workspace`, user
    /// 0:0 of the sandbox (no host authority: SR-1), every capability set
    /// empty and `noNewPrivileges` (SR-5).
    pub fn to_json(&self) -> Result<Vec<u8>, ProcessSpecError> {
        if self.args.is_empty() {
            return Err(ProcessSpecError::EmptyArgv);
        }
        if let Some(index) = self.args.iter().position(|a| a.contains('\0')) {
            return Err(ProcessSpecError::NulInArgv { index });
        }
        for (index, entry) in self.env.iter().enumerate() {
            let ok = entry
                .split_once('=')
                .is_some_and(|(name, _)| !name.is_empty())
                && !entry.contains('\0');
            if !ok {
                return Err(ProcessSpecError::BadEnv {
                    index,
                    entry: entry.chars().take(64).collect(),
                });
            }
        }
        let empty: Vec<Value> = Vec::new();
        let value = json!({
            "terminal": self.terminal,
            "user": { "uid": 0, "gid": 0 },
            "args": self.args,
            "env": self.env,
            "cwd": SESSION_CWD,
            "capabilities": {
                "bounding": empty,
                "effective": empty,
                "inheritable": empty,
                "permitted": empty,
                "ambient": empty,
            },
            "noNewPrivileges": true,
        });
        Ok(serde_json::to_vec(&value)?)
    }
}
