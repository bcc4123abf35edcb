//! The real terminal: raw mode and the alternate screen, restored on exit and on panic.

use std::io::{self, Stdout};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

/// Whether the terminal is in the TUI's mode: the panic hook restores only then, so a panic
/// elsewhere in the program prints no stray escape sequences.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Enters raw mode and the alternate screen, and installs (once) a panic hook that restores the
/// terminal before the previous hook prints the panic.
pub fn init() -> io::Result<Terminal<CrosstermBackend<Stdout>>> {
    install_panic_hook();
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    if let Err(e) = execute!(io::stdout(), EnterAlternateScreen, Hide) {
        restore();
        return Err(e);
    }
    match Terminal::new(CrosstermBackend::new(io::stdout())) {
        Ok(t) => Ok(t),
        Err(e) => {
            restore();
            Err(e)
        }
    }
}

/// Leaves the alternate screen and raw mode. Safe to call more than once, and when [`init`]
/// was never called (then it does nothing).
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        // Best effort: there is nowhere to report a terminal that cannot be written to.
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
    }
}

/// Whether the terminal is currently in the TUI's mode.
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::SeqCst)
}

/// Chains a hook that restores the terminal in front of the hook already installed.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
