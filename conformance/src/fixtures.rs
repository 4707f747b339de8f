//! Test images and services built from real tools.
//!
//! [`layered_layout`] builds a two-layer OCI layout with umoci whose second
//! layer exercises what an OCI-aware preparer must get right: a whiteout
//! (`.wh.gone.txt`), an opaque directory (`olddir/.wh..wh..opq`), a hard link
//! (`data/two` -> `data/one`) and files owned by uid/gid 1000.
//! [`Registry`] runs Debian's `docker-registry` on a free loopback port.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of building fixtures.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A tool could not be started.
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        source: std::io::Error,
    },
    /// A tool failed.
    #[error("{tool} failed ({status}): {stderr}")]
    Failed {
        tool: String,
        status: String,
        stderr: String,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The registry did not come up.
    #[error("docker-registry on {addr} did not answer /v2/ within {secs} s")]
    RegistryTimeout { addr: String, secs: u64 },
}

/// Runs `bash -c script` with `dir` as working directory.
pub fn sh(dir: &Path, script: &str) -> Result<String, FixtureError> {
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .map_err(|source| FixtureError::Spawn {
            tool: "bash".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(FixtureError::Failed {
            tool: format!("bash -c {script:?}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds the layered test layout under `dir` and returns its `oci:` reference.
pub fn layered_layout(dir: &Path) -> Result<String, FixtureError> {
    sh(
        dir,
        r#"
        rm -rf l1 l2 layout
        mkdir -p l1/etc l1/olddir l1/keepdir l1/data
        echo base > l1/etc/base.txt
        echo gone > l1/gone.txt
        echo a > l1/olddir/a; echo b > l1/olddir/b
        echo keep > l1/keepdir/x
        mkdir -p l2/olddir l2/data l2/home/user
        : > l2/.wh.gone.txt
        : > l2/olddir/.wh..wh..opq
        echo new > l2/olddir/new
        echo shared > l2/data/one
        ln l2/data/one l2/data/two
        echo mine > l2/home/user/owned
        chmod 0640 l2/home/user/owned
        tar --sort=name --owner=0 --group=0 --numeric-owner -C l1 -cf l1.tar .
        tar --sort=name --owner=1000 --group=1000 --numeric-owner -C l2 -cf l2.tar .
        umoci init --layout layout
        umoci new --image layout:test
        umoci raw add-layer --image layout:test l1.tar
        umoci raw add-layer --image layout:test l2.tar
        umoci config --image layout:test --config.cmd=/bin/true
        umoci gc --layout layout
        rm -rf l1 l2 l1.tar l2.tar
        "#,
    )?;
    Ok(format!("oci:{}/layout:test", dir.display()))
}

/// A `docker-registry` on a free loopback port, stopped on drop.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Registry {
    /// Starts a registry storing under `dir`.
    pub fn start(dir: &Path) -> Result<Registry, FixtureError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|source| FixtureError::Spawn {
                tool: "bind 127.0.0.1:0".into(),
                source,
            })?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        let text = format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\nlog:\n  level: error\n",
            dir.join("data").display()
        );
        std::fs::write(&config, text).map_err(|source| FixtureError::Write {
            path: config.clone(),
            source,
        })?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| FixtureError::Spawn {
                tool: "docker-registry".into(),
                source,
            })?;
        let registry = Registry { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&registry.addr).is_ok() {
                return Ok(registry);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(FixtureError::RegistryTimeout {
            addr: registry.addr.clone(),
            secs: 20,
        })
    }

    /// Copies an `oci:` image into this registry as `repo:tag` with skopeo.
    pub fn push(&self, oci_ref: &str, repo_tag: &str) -> Result<(), FixtureError> {
        let out = Command::new("skopeo")
            .args(["copy", "--quiet", "--dest-tls-verify=false", oci_ref])
            .arg(format!("docker://{}/{repo_tag}", self.addr))
            .output()
            .map_err(|source| FixtureError::Spawn {
                tool: "skopeo".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(FixtureError::Failed {
                tool: "skopeo copy".into(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(())
    }

    /// Stops the registry and waits for it.
    pub fn stop(&mut self) {
        // Signal through a pidfd of our own unreaped child (the repository
        // never signals a numeric PID; spec 3.3).
        if let Ok(pid) = i32::try_from(self.child.id()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                if let Ok(pidfd) =
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                {
                    let _ =
                        rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
                }
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
