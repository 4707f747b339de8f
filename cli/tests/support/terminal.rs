//! The user's terminal for the suites that drive an interactive session: a
//! tmux pane runs the CLI as the unprivileged test user ([`Domain::pane`]),
//! and the test reads the screen and types keys ([`Tmux`]).
use super::{default_image, test_user, Env};

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One tmux server (its own socket) whose only pane runs the CLI.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "s"]).stdout).into_owned()
    }

    /// Waits until `done` holds for the visible screen; returns the time
    /// it took.
    pub fn wait_for(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> Duration {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "s"];
        args.extend_from_slice(keys);
        self.run(&args);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// One Domain of the test user (the shared harness's [`Env`]: home,
/// workspace, config, leak check) and the command that runs the CLI as that
/// user in a tmux pane.
pub struct Domain {
    pub env: Env,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub as_user: String,
}

impl Domain {
    pub fn new(name: &str) -> Domain {
        let env = Env::new(name, &default_image());
        let home = env.home.clone();
        let workspace = env.workspace.clone();
        let h = home.display().to_string();
        let lazaret = format!(
            "env -i PATH=/usr/bin:/bin HOME={h} XDG_RUNTIME_DIR={h}/run USER={} TERM=xterm {}",
            test_user(),
            env!("CARGO_BIN_EXE_lazaret")
        );
        let as_user = if rustix::process::geteuid().is_root() {
            format!("runuser -u {} -- {lazaret}", test_user())
        } else {
            lazaret
        };
        Domain {
            env,
            home,
            workspace,
            as_user,
        }
    }

    /// A pane command: records the terminal mode before and after the CLI
    /// (`TAG.before`, `TAG.after`) and its exit status (`TAG.status`), then
    /// stays open for the capture.
    pub fn pane(&self, tag: &str, cli_args: &str) -> String {
        self.pane_with_stdin(tag, "", cli_args)
    }

    /// [`Domain::pane`] with `stdin` (`cmd | `, or nothing) before the CLI.
    pub fn pane_with_stdin(&self, tag: &str, stdin: &str, cli_args: &str) -> String {
        let h = self.home.display();
        format!(
            "cd {ws} && stty -g > {h}/{tag}.before && {stdin}{as_user} {cli_args}; echo $? > {h}/{tag}.status; stty -g > {h}/{tag}.after; sleep 100",
            ws = shell_quote(&self.workspace.display().to_string()),
            as_user = self.as_user,
        )
    }

    /// A tmux server of its own whose one pane runs `pane`.
    pub fn tmux(&self, tag: &str, pane: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("lazaret-e2e-{tag}-{}", std::process::id()),
        };
        tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "s",
            "-x",
            "100",
            "-y",
            "30",
            pane,
        ]);
        tmux
    }

    /// Waits for `TAG.status` and returns it; checks the terminal mode was
    /// restored.
    pub fn status(&self, tag: &str, tmux: &Tmux) -> String {
        let status_file = self.home.join(format!("{tag}.status"));
        let start = Instant::now();
        while !status_file.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the CLI {tag} did not exit: {}",
                tmux.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        let before = std::fs::read_to_string(self.home.join(format!("{tag}.before"))).unwrap();
        let after = std::fs::read_to_string(self.home.join(format!("{tag}.after"))).unwrap();
        assert!(!before.trim().is_empty());
        assert_eq!(before, after, "the terminal mode of {tag} was not restored");
        std::fs::read_to_string(&status_file)
            .unwrap()
            .trim()
            .to_owned()
    }

    pub fn finish(self) {
        self.env.assert_nothing_left();
    }
}
