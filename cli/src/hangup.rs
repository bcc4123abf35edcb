//! Losing the terminal (its window closed, the ssh connection dropped, the tmux session killed)
//! while the live view runs: the view must end, and tpuscope must go on quietly — reaping the
//! workload and passing its exit code (`run`), or leaving so that the target is restored
//! (`attach`) — never spin, never die of a write to a terminal that is gone.
//!
//! A watch thread waits, without a timeout and without using the CPU, for the terminal's
//! hang-up (poll's `POLLHUP` on standard input) or a `SIGHUP`. Then it marks the terminal lost
//! and puts an empty non-blocking pipe on standard input and `/dev/null` on the outputs that
//! were the terminal: crossterm, which reads standard input in a loop that never ends on a
//! hung-up terminal (every read returns 0 bytes), then sees "nothing to read" and returns, and
//! every later print goes nowhere instead of failing.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::stat::{SFlag, fstat};

/// Whether the terminal was lost; shared with the watch thread.
#[derive(Clone)]
pub struct Hangup {
    lost: Arc<AtomicBool>,
}

impl Hangup {
    /// Starts the watch on standard input, which must be the terminal the view runs in.
    pub fn watch() -> Result<Hangup> {
        let stdin = io::stdin();
        if !stdin.is_terminal() {
            anyhow::bail!("the live view needs a terminal on standard input");
        }
        let terminal = fstat(stdin.as_fd())
            .context("reading standard input's terminal")?
            .st_rdev;
        // Empty for ever: its writer is kept, so reads say "would block", never "end".
        let (empty_reader, empty_writer) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)
            .context("cannot create the live view's pipe")?;
        let (sighup_reader, sighup_writer) =
            nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)
                .context("cannot create the live view's pipe")?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, sighup_writer)
            .context("cannot install the SIGHUP handler")?;
        let devnull = File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .context("opening /dev/null")?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&lost);
        std::thread::Builder::new()
            .name("tpuscope-hangup".into())
            .spawn(move || {
                wait_for_hangup(&sighup_reader);
                flag.store(true, Ordering::SeqCst);
                silence(terminal, &empty_reader, &devnull);
                // Kept open for the process's life: a closed writer would make reads say "end".
                std::mem::forget(empty_writer);
                std::mem::forget(empty_reader);
            })
            .context("cannot start the hang-up watch")?;
        Ok(Hangup { lost })
    }

    /// Whether the terminal is gone (or a SIGHUP said so).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Marks the terminal lost from the outside (a draw or a read of it failed).
    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }
}

/// Blocks until standard input hangs up or a SIGHUP arrives.
fn wait_for_hangup(sighup: &OwnedFd) {
    let stdin = io::stdin();
    loop {
        // Events 0 on the terminal: only its hang-up (or an error) is reported, not input.
        let mut fds = [
            PollFd::new(stdin.as_fd(), PollFlags::empty()),
            PollFd::new(sighup.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let gone = PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
                let hung_up = fds[0].revents().is_some_and(|r| r.intersects(gone));
                let signalled = fds[1].revents().is_some_and(|r| !r.is_empty());
                if hung_up || signalled {
                    return;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            // Nothing to watch with: a lost terminal still shows as failed draws.
            Err(_) => std::thread::park(),
        }
    }
}

/// Standard input becomes `empty`; standard output and error, where they are the terminal,
/// `/dev/null`.
fn silence(terminal: u64, empty: &OwnedFd, devnull: &File) {
    // Best effort each: nothing can be reported to a terminal that is gone.
    let _ = nix::unistd::dup2_stdin(empty);
    let is_terminal = |fd: std::os::fd::BorrowedFd| {
        fstat(fd).is_ok_and(|s| {
            s.st_rdev == terminal
                && SFlag::from_bits_truncate(s.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR
        })
    };
    if is_terminal(io::stdout().as_fd()) {
        let _ = nix::unistd::dup2_stdout(devnull);
    }
    if is_terminal(io::stderr().as_fd()) {
        let _ = nix::unistd::dup2_stderr(devnull);
    }
}
