//! The end-to-end harness shared by the suites that run Lazaret as the
//! unprivileged test user: who that user is, the default image, ownership
//! of a scenario's tree, and [`Env`], one scenario's private HOME, runtime
//! directory and configuration with its leak check. Each suite uses part of
//! it.
#![allow(dead_code)] // each test binary compiles this module and uses part of it

pub mod terminal;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub fn test_user() -> String {
    std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "lazaret-test".to_owned())
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, &test_user()])
        .output()
        .expect("id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a numeric id")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The default image (scripts/build-image caches it by content hash).
pub fn default_image() -> String {
    if let Ok(image) = std::env::var("LAZARET_TEST_IMAGE") {
        return image;
    }
    let out = Command::new(repo_root().join("scripts/build-image"))
        .output()
        .expect("scripts/build-image");
    assert!(
        out.status.success(),
        "scripts/build-image failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("the image reference is UTF-8")
        .trim()
        .to_owned()
}

/// A distroless image: one layer holding only the static
/// `support/guest_program.rs` at `/bin/probe` (no shell, no libraries).
/// Built with rustc and umoci under `dir` (world-readable); returns its
/// `oci:` reference.
pub fn distroless_image(dir: &Path) -> String {
    let _ = std::fs::remove_dir_all(dir);
    let layer = dir.join("layer/bin");
    std::fs::create_dir_all(&layer).unwrap();
    let status = Command::new("rustc")
        .args(["--edition", "2021", "-C", "opt-level=1"])
        .args([
            "-C",
            "target-feature=+crt-static",
            "-C",
            "relocation-model=static",
        ])
        .args(["--crate-type", "bin", "--crate-name", "probe", "-o"])
        .arg(layer.join("probe"))
        .arg(repo_root().join("cli/tests/support/guest_program.rs"))
        .status()
        .expect("rustc");
    assert!(
        status.success(),
        "building the distroless program: {status}"
    );
    let script = "tar --owner=0 --group=0 --numeric-owner -C layer -cf layer.tar . \
        && umoci init --layout layout && umoci new --image layout:distroless \
        && umoci raw add-layer --image layout:distroless layer.tar \
        && umoci gc --layout layout && rm -rf layer layer.tar && chmod -R a+rX .";
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "building the distroless layout: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("oci:{}/layout:distroless", dir.display())
}

/// Gives `path` and everything under it to the test user (when running as
/// root).
pub fn chown_tree(path: &Path) {
    if rustix::process::geteuid().is_root() {
        let status = Command::new("chown")
            .args(["-R", &format!("{}:{}", id_of("-u"), id_of("-g"))])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

/// The one persistent Domain root under the scenario's `home`.
pub fn domain_root(home: &Path) -> PathBuf {
    let domains = home.join(".local/share/lazaret/domains");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&domains)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

/// `lazaret trace replay PATH`, as the host user runs it.
pub fn replay_trace(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazaret"))
        .args(["trace", "replay"])
        .arg(path)
        .output()
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a Domain may leave under `root` (a runtime or storage root): every
/// file — sockets, logs, bundles, runsc state — and every `gen-*`
/// directory, even empty. The leak checks of every suite use it.
pub fn runtime_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    if path
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("gen-"))
                    {
                        out.push(path.clone());
                    }
                    stack.push(path);
                }
                _ => out.push(path),
            }
        }
    }
    out
}

/// Two cores, real sandboxes: scenarios take turns.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The coordinator's model steps for one auto-approved escalation request
/// whose host command prints (docs/escalation.md "The model").
pub const AUTO_APPROVED_STEPS: [&str; 11] = [
    "SubmitEscalation",
    "AcceptEscalation",
    "AutoApproveEscalation",
    "PauseTerminalForwarding",
    "StartHostProcess",
    "EmitResultChunk",
    "AckResultChunk",
    "HostProcessExits",
    "ResumeTerminalForwarding",
    "DeliverResult",
    "CollectResult",
];

/// A private HOME/XDG_RUNTIME_DIR/config for one scenario, owned by the
/// test user.
pub struct Env {
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// Whether the scenario launches a Domain (and so must keep a trace).
    pub traced: bool,
    /// The profile whose Domain the leak check inspects.
    pub profile: &'static str,
}

impl Env {
    pub fn new(name: &str, image: &str) -> Env {
        let home = PathBuf::from(format!("/tmp/lazaret-chain-e2e-{name}"));
        let _ = Command::new("rm").arg("-rf").arg(&home).status();
        let workspace = home.join("ws");
        std::fs::create_dir_all(home.join(".config/lazaret")).unwrap();
        std::fs::create_dir_all(home.join("run")).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::set_permissions(home.join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let env = Env {
            home,
            workspace,
            traced: true,
            profile: "default",
        };
        env.write_config("config.toml", image, "");
        chown_tree(&env.home);
        env
    }

    pub fn write_config(&self, name: &str, image: &str, extra: &str) -> PathBuf {
        let path = self.home.join(".config/lazaret").join(name);
        std::fs::write(
            &path,
            format!(
                "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.default]\nimage = \"{image}\"\n{extra}\n[profiles.broken]\nimage = \"oci:{}/no-such-layout:default\"\n",
                self.home.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        chown_tree(&path);
        path
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let lazaret = env!("CARGO_BIN_EXE_lazaret");
        let mut cmd = if rustix::process::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", &test_user(), "--", "env", "-i"]);
            c.arg("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
                .arg(format!("HOME={}", self.home.display()))
                .arg(format!(
                    "XDG_RUNTIME_DIR={}",
                    self.home.join("run").display()
                ))
                .arg(format!("USER={}", test_user()))
                .arg(lazaret);
            c
        } else {
            let mut c = Command::new(lazaret);
            c.env("HOME", &self.home)
                .env("XDG_RUNTIME_DIR", self.home.join("run"))
                .env_remove("XDG_CONFIG_HOME")
                .env_remove("XDG_DATA_HOME");
            c
        };
        cmd.args(args)
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        cmd
    }

    /// [`Env::command`] with extra environment variables for the CLI.
    pub fn command_env(&self, args: &[&str], vars: &[(&str, &str)]) -> Command {
        let mut cmd = self.command(&[]);
        if rustix::process::geteuid().is_root() {
            // `runuser -u USER -- env -i VAR=... lazaret`: the extra
            // variables go before the program, which is the last argument.
            let argv: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_owned()).collect();
            let (program, head) = argv.split_last().unwrap();
            let mut c = Command::new(cmd.get_program());
            c.args(head);
            for (k, v) in vars {
                c.arg(format!("{k}={v}"));
            }
            c.arg(program).args(args);
            c.current_dir(&self.workspace).stdin(Stdio::null());
            return c;
        }
        cmd.args(args).envs(vars.iter().copied());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// [`Env::run`] with stdin, stdout and stderr on a terminal: the
    /// command runs under util-linux `script` on an 80x24 pseudo-terminal,
    /// whose output (stdout and stderr together) is the returned stdout.
    pub fn run_on_terminal(&self, args: &[&str]) -> Output {
        self.run_on_terminal_env(args, &[])
    }

    /// [`Env::run_on_terminal`] with extra environment variables for the
    /// CLI ([`Env::command_env`]).
    pub fn run_on_terminal_env(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let cmd = self.command_env(args, vars);
        let argv: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // Under runuser the program is the last argument before `args`.
        let (prefix, line) = if rustix::process::geteuid().is_root() {
            let split = argv.len() - args.len() - 1;
            (argv[..split].to_vec(), argv[split..].to_vec())
        } else {
            let mut line = vec![cmd.get_program().to_string_lossy().into_owned()];
            line.extend(argv);
            (Vec::new(), line)
        };
        let quoted: Vec<String> = line
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let mut c = if prefix.is_empty() {
            Command::new("script")
        } else {
            let mut c = Command::new(cmd.get_program());
            c.args(&prefix).arg("script");
            c
        };
        if prefix.is_empty() {
            c.envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
        }
        let shell_line = format!("stty rows 24 cols 80 && exec {}", quoted.join(" "));
        c.args(["-qec", &shell_line, "/dev/null"])
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Every process whose environment or command line names this
    /// scenario's HOME (the CLI, HC, RS, runsc and its sandbox and gofer).
    pub fn processes(&self) -> Vec<String> {
        let needle = self.home.display().to_string();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) || name == std::process::id().to_string() {
                continue;
            }
            let read = |f: &str| std::fs::read(entry.path().join(f)).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ");
            let environ = String::from_utf8_lossy(&read("environ")).into_owned();
            if cmdline.contains(&needle) || environ.contains(&needle) {
                found.push(format!("{name}: {cmdline}"));
            }
        }
        found
    }

    /// The leak check: within 15 s nothing of this Domain remains, and
    /// every kept trace replays.
    pub fn assert_nothing_left(&self) {
        self.assert_nothing_running();
        self.assert_traces_replay();
    }

    /// Within 15 s no process, mount or runtime file of this Domain
    /// remains.
    pub fn assert_nothing_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let procs = self.processes();
            let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .filter(|l| l.contains(&*self.home.to_string_lossy()))
                .map(str::to_owned)
                .collect();
            let files = runtime_files(&self.home.join("run"));
            // Spec 3.6: an idle Domain holds no prepared-lower lease.
            let leases = self.catalog_leases();
            if procs.is_empty() && mounts.is_empty() && files.is_empty() && leases.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "left behind: processes {procs:?}, mounts {mounts:?}, runtime files {files:?}, catalog leases {leases:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Env {
    /// The Storage Catalog's leases under this scenario's storage root.
    pub fn catalog_leases(&self) -> Vec<lazaret_effects::storage_catalog::ArtifactLease> {
        lazaret_effects::storage_catalog::StorageCatalog::at(
            &self.home.join(".local/share/lazaret"),
        )
        .leases()
        .unwrap()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = Command::new("rm").arg("-rf").arg(&self.home).status();
        }
    }
}

impl Env {
    /// The kept generation traces of this scenario's Domains
    /// (`gen-*.jsonl`), each of which must replay clean against the model
    /// (ARCHITECTURE.md "Traces").
    pub fn traces(&self) -> Vec<PathBuf> {
        self.kept_traces("gen-")
    }

    /// The kept traces of coordinators that lost the Domain lock race
    /// (`lost-*.jsonl`), which must replay clean too.
    pub fn loser_traces(&self) -> Vec<PathBuf> {
        self.kept_traces("lost-")
    }

    /// The traces of Storage Catalog operations (PreparedLower model runs,
    /// `<storage root>/catalog/traces/`), oldest first.
    pub fn catalog_traces(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = runtime_files(&self.home)
            .into_iter()
            .filter(|p| {
                p.parent().is_some_and(|d| d.ends_with("catalog/traces"))
                    && p.extension().is_some_and(|e| e == "jsonl")
            })
            .collect();
        out.sort();
        out
    }

    fn kept_traces(&self, prefix: &str) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = runtime_files(&self.home)
            .into_iter()
            .filter(|p| !p.starts_with(&self.workspace))
            .filter(|p| {
                p.parent().is_some_and(|d| d.ends_with("traces"))
                    && p.extension().is_some_and(|e| e == "jsonl")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        out.sort();
        out
    }

    /// Every generation the Domain Store holds ended retired and clean
    /// (teardown and recovery write ReleaseIntent -> Clean).
    pub fn assert_store_clean(&self) {
        let out = self.run(&["state", self.profile, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(state["status"], "inactive", "{state}");
        let generations = state["generations"].as_array().unwrap();
        assert!(!generations.is_empty(), "{state}");
        for g in generations {
            assert_eq!(g["durable_decision"], "Vacant", "{g}");
            assert_eq!(g["clean"], true, "{g}");
        }
    }

    /// The model actions of this scenario's one kept trace, in order.
    pub fn trace_actions(&self) -> Vec<String> {
        self.trace_lines()
            .iter()
            .map(|l| l["action"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// `lazaret trace replay` of `trace` succeeds (every step conforms).
pub fn assert_replays(trace: &Path) {
    let out = replay_trace(trace);
    assert!(
        out.status.success(),
        "{} does not replay: {}{}",
        trace.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The `action` of every line of the trace `text`, the header's included.
pub fn actions_of(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["action"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

impl Env {
    /// The lines of this scenario's one kept trace.
    pub fn trace_lines(&self) -> Vec<serde_json::Value> {
        let traces = self.traces();
        assert_eq!(traces.len(), 1, "{traces:?}");
        std::fs::read_to_string(&traces[0])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn assert_traces_replay(&self) {
        let traces = self.traces();
        assert!(
            !self.traced || !traces.is_empty(),
            "no trace was kept under {}",
            self.home.display()
        );
        if self.traced {
            self.assert_store_clean();
        }
        for t in traces
            .into_iter()
            .chain(self.loser_traces())
            .chain(self.catalog_traces())
        {
            assert_replays(&t);
        }
    }
}

/// Crash injection: signals a process the test just found, through a pidfd
/// (the repository never signals a numeric PID; spec 3.3). The pidfd pins the
/// process between the lookup and the signal.
pub fn signal_through_pidfd(pid: &str, signal: rustix::process::Signal) {
    let raw: i32 = pid.trim().parse().unwrap();
    let pid = rustix::process::Pid::from_raw(raw).unwrap();
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    rustix::process::pidfd_send_signal(&pidfd, signal).unwrap();
}

/// `name=exit status` lines of a guest script.
pub fn guest_results(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub fn assert_failed(results: &std::collections::BTreeMap<String, String>, keys: &[&str]) {
    for k in keys {
        match results.get(*k).map(String::as_str) {
            Some("0") => panic!("{k} succeeded inside the sandbox: {results:?}"),
            None => panic!("{k} did not run: {results:?}"),
            Some(_) => {}
        }
    }
}

pub fn assert_succeeded(results: &std::collections::BTreeMap<String, String>, keys: &[&str]) {
    for k in keys {
        assert_eq!(
            results.get(*k).map(String::as_str),
            Some("0"),
            "{k} failed inside the sandbox: {results:?}"
        );
    }
}

/// A network namespace the test creates (as root) to stand in for "the
/// host" of a Domain: the CLI, and so the coordinator and slirp4netns, run
/// in it, and peers listen on addresses of its loopback. Traffic never
/// leaves it (the project's network-safety rule).
pub struct PeerNamespace {
    pub name: String,
}

impl PeerNamespace {
    /// `ip netns add NAME`, loopback up, and `addresses` (each a /32) on it.
    pub fn new(name: &str, addresses: &[&str]) -> PeerNamespace {
        assert!(
            rustix::process::geteuid().is_root(),
            "the network suite runs as root (CI does): it creates the peer network namespace"
        );
        let name = format!("lz-e2e-{name}");
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        };
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        for a in addresses {
            ip(&["-n", &name, "addr", "add", &format!("{a}/32"), "dev", "lo"]);
        }
        PeerNamespace { name }
    }

    /// Runs `f` on a new thread inside this namespace (sockets it opens
    /// stay there).
    pub fn spawn<F: FnOnce() + Send + 'static>(&self, f: F) {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap();
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&fd),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            f();
        });
    }

    /// A TCP listener at `addr` answering every connection with `banner`.
    pub fn serve_tcp(&self, addr: &'static str, banner: &'static str) {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        self.spawn(move || {
            let listener = std::net::TcpListener::bind(addr).unwrap();
            ready_tx.send(()).unwrap();
            for stream in listener.incoming().flatten() {
                let mut s = stream;
                let _ = std::io::Write::write_all(&mut s, banner.as_bytes());
            }
        });
        ready.recv().unwrap();
    }

    /// A UDP socket at `addr` answering each datagram with `reply`; the
    /// returned counter counts the datagrams that arrived.
    pub fn serve_udp(
        &self,
        addr: &'static str,
        reply: &'static str,
    ) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        self.spawn(move || {
            let socket = std::net::UdpSocket::bind(addr).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 512];
            while let Ok((_, from)) = socket.recv_from(&mut buf) {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = socket.send_to(reply.as_bytes(), from);
            }
        });
        ready.recv().unwrap();
        count
    }

    /// `cmd` run inside this namespace (`nsenter --net`).
    pub fn wrap(&self, cmd: Command) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.name))
            .arg("--")
            .arg(cmd.get_program())
            .args(cmd.get_args());
        if let Some(dir) = cmd.get_current_dir() {
            c.current_dir(dir);
        }
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.stdin(Stdio::null());
        c
    }
}

impl Drop for PeerNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// `git ARGS` in `dir` as the host developer runs it (no system
/// configuration, a fixed identity); a failure fails the test.
pub fn host_git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=host",
            "-c",
            "user.email=host@host",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "host git {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}
