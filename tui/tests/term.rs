#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The panic hook: installed once, chained in front of the hook that was there.

use std::sync::atomic::{AtomicUsize, Ordering};

use tpuscope_tui::term;

static CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn panic_hook_is_installed_once_and_chains_the_previous_one() {
    std::panic::set_hook(Box::new(|_| {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    term::install_panic_hook();
    term::install_panic_hook();
    let r = std::panic::catch_unwind(|| panic!("boom"));
    assert!(r.is_err());
    // The previous hook ran once: the second install added nothing.
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    // Restoring a terminal that was never set up does nothing (and does not fail).
    assert!(!term::is_active());
    term::restore();
    assert!(!term::is_active());
    let _ = std::panic::take_hook();
}
