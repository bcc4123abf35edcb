//! A real terminal for end-to-end tests: a private tmux server, killed when dropped.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server of its own (`tmux -L`), named after the test and this process.
    pub fn new(test: &str) -> Tmux {
        let socket = format!("tpuscope-{test}-{}", std::process::id());
        Tmux { socket }
    }

    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is required for this test (apt install tmux)")
    }

    /// Starts the session `t` (160×50) running `cmd` in window 0.
    pub fn start(&self, cmd: &str) {
        let o = self.cmd(&["new-session", "-d", "-s", "t", "-x", "160", "-y", "50", cmd]);
        assert!(o.status.success(), "tmux new-session failed: {o:?}");
    }

    pub fn capture(&self, target: &str) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", target]).stdout)
            .into_owned()
    }

    /// Waits until the pane shows text matching `pred`, returning the screen.
    pub fn wait_for(&self, target: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.capture(target);
            if pred(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "pane {target} never showed {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// `p` quoted for `sh`.
pub fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Waits (up to 90 s) for a gate file the workload writes, and returns its text.
pub fn wait_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(path).unwrap()
}
