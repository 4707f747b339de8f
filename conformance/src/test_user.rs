//! Running a real test as the unprivileged test user.
//!
//! Lazaret refuses root (SR-1) and its rootless paths (newuidmap, runsc in a
//! user namespace) only work unprivileged. CI and developers run the suite as
//! root, so a test that needs the unprivileged user calls [`delegate`] first:
//! as root it re-runs exactly that test, in the same test binary, as
//! `lazaret-test` (or `$LAZARET_TEST_USER`) with its own HOME and a 0700
//! XDG_RUNTIME_DIR, and reports whether it passed there; as any other user it
//! says "run the body here".

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// Where a test body should run.
#[derive(Debug, PartialEq, Eq)]
pub enum Delegation {
    /// Not root: run the body in this process.
    RunHere,
    /// Root: the body ran as the test user and passed.
    PassedAsTestUser,
}

/// Errors of delegating a test to the test user.
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    /// The test user does not exist.
    #[error("test user {user} does not exist (run scripts/setup as root): {detail}")]
    NoUser { user: String, detail: String },
    /// Preparing its runtime directory failed.
    #[error("cannot prepare {path} for the test user: {source}")]
    RuntimeDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// runuser could not be started.
    #[error("cannot run runuser: {0}")]
    Spawn(std::io::Error),
    /// The delegated test failed.
    #[error(
        "test {test} failed as {user} ({status}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    )]
    Failed {
        test: String,
        user: String,
        status: String,
        stdout: String,
        stderr: String,
    },
}

/// The unprivileged user tests run as.
pub fn test_user() -> String {
    std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "lazaret-test".to_owned())
}

fn id_of(user: &str, flag: &str) -> Result<u32, DelegateError> {
    let out = Command::new("id")
        .args([flag, user])
        .output()
        .map_err(DelegateError::Spawn)?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| DelegateError::NoUser {
            user: user.to_owned(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
}

/// Runs test `name` (its full path inside this test binary) as the test user
/// when called as root, with `env` added to its otherwise empty environment.
pub fn delegate(name: &str, env: &[(&str, &str)]) -> Result<Delegation, DelegateError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(Delegation::RunHere);
    }
    let user = test_user();
    let uid = id_of(&user, "-u")?;
    let gid = id_of(&user, "-g")?;
    let runtime = PathBuf::from(format!("/tmp/lazaret-test-runtime-{uid}"));
    let prep = || -> std::io::Result<()> {
        std::fs::create_dir_all(&runtime)?;
        std::os::unix::fs::chown(&runtime, Some(uid), Some(gid))?;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700))
    };
    prep().map_err(|source| DelegateError::RuntimeDir {
        path: runtime.clone(),
        source,
    })?;
    let exe = std::env::current_exe().map_err(DelegateError::Spawn)?;
    let out = Command::new("runuser")
        .args(["-u", &user, "--", "env", "-i"])
        .arg("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(format!("HOME=/home/{user}"))
        .arg(format!("XDG_RUNTIME_DIR={}", runtime.display()))
        .arg(format!("USER={user}"))
        .args(env.iter().map(|(k, v)| format!("{k}={v}")))
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .current_dir("/")
        .output()
        .map_err(DelegateError::Spawn)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // Exactly one test must have run and passed: a filter that matched nothing
    // is a failure, not a pass.
    if out.status.success() && stdout.contains("test result: ok. 1 passed") {
        print!("{stdout}");
        Ok(Delegation::PassedAsTestUser)
    } else {
        Err(DelegateError::Failed {
            test: name.to_owned(),
            user,
            status: out.status.to_string(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}
