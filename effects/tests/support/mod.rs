//! Shared by the effects test binaries that need a private user and mount
//! namespace: a test re-runs itself under `unshare --user --map-root-user
//! --mount` (so it works as root and as an ordinary user), and the outer half
//! checks the inner half's exit status with a deadline.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the inner half.
pub const INNER: &str = "LAZARET_TEST_NAMESPACE_INNER";

/// Runs `name` again inside a new user and mount namespace.
pub fn outer(name: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
        ])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("unshare: {e}"))?;
    // Signals go through a pidfd, never a numeric PID (spec 3.3, FR-7);
    // opened while the child cannot have been reaped.
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .map_err(|e| format!("pidfd_open: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return if status.success() {
                Ok(())
            } else {
                Err(format!("inner test {name} failed: {status}"))
            };
        }
        if Instant::now() > deadline {
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            let _ = child.wait();
            return Err(format!("inner test {name} did not finish in 180 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
