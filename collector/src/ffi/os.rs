//! Thin wrappers over the few libc calls the collector needs.

use std::sync::atomic::{AtomicU32, Ordering};

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the time base of every record.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall clock (`CLOCK_REALTIME`), nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The calling thread's kernel thread id.
pub fn current_tid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

pub fn pid() -> u32 {
    std::process::id()
}

/// The host name, or "unknown".
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(buf.get(..end).unwrap_or(&[])).into_owned()
}

static FORK_CHILD_HANDLER: AtomicU32 = AtomicU32::new(0);

/// Registers `child` to run in the child after `fork()`. The child must not touch the writer
/// thread (it does not exist there) nor any lock the parent may have held.
pub fn on_fork_child(child: extern "C" fn()) {
    if FORK_CHILD_HANDLER.swap(1, Ordering::SeqCst) == 1 {
        return;
    }
    // SAFETY: registering a plain `extern "C" fn()` handler; NULL prepare/parent handlers are allowed.
    unsafe {
        libc::pthread_atfork(None, None, Some(child));
    }
}

/// Registers `f` to run at normal process exit (`exit()` / return from main).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: atexit stores the function pointer; `f` is a 'static function.
    unsafe {
        libc::atexit(f);
    }
}
