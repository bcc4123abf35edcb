//! Python stacks of compile requests in flight, for compiles PJRT runs on a worker thread.
//!
//! JAX hands a compile to a worker thread that has no Python frames while the Python thread that
//! asked waits. The agent wraps the frontend's Python-level compile entry: on entry it captures the
//! stack (GIL held) with `begin`, on exit it calls `end`. A compile hook that finds no Python
//! frames on its own thread takes the stack of a request in flight. Compiles are rare, so a lock
//! is fine here (it is never held across anything but a few vector operations).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tpuscope_core::RawStackEntry;

/// Requests kept at most; a request whose `end` never came is dropped oldest-first beyond this.
const MAX_PENDING: usize = 64;

struct Request {
    token: u64,
    stack: Vec<RawStackEntry>,
    claimed: bool,
}

static TABLE: Mutex<Vec<Request>> = Mutex::new(Vec::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// Registers a compile request with the requesting thread's stack; returns its token (never 0).
pub fn begin(stack: Vec<RawStackEntry>) -> u64 {
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut t) = TABLE.lock() {
        if t.len() >= MAX_PENDING {
            t.remove(0);
        }
        t.push(Request {
            token,
            stack,
            claimed: false,
        });
    }
    token
}

/// Ends a request (claimed or not). Unknown tokens (0, or already dropped) are ignored.
pub fn end(token: u64) {
    if token == 0 {
        return;
    }
    if let Ok(mut t) = TABLE.lock() {
        t.retain(|r| r.token != token);
    }
}

/// The stack of the oldest active request no compile has claimed yet, marking it claimed.
///
/// With one request in flight (the usual case) this is exact. With several (compiles requested
/// from several Python threads at once) the worker thread cannot tell which one it serves; the
/// oldest is the best guess, since backends tend to start compiles in request order, but it can
/// be wrong. Once claimed, a request is not handed out again, so two concurrent compiles never
/// both get the same stack.
pub fn take_pending_compile_stack() -> Option<Vec<RawStackEntry>> {
    let mut t = TABLE.lock().ok()?;
    let r = t.iter_mut().find(|r| !r.claimed)?;
    r.claimed = true;
    Some(r.stack.clone())
}

/// Requests in flight (for tests).
pub fn active() -> usize {
    TABLE.lock().map(|t| t.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(f: &str) -> Vec<RawStackEntry> {
        vec![RawStackEntry {
            file: f.into(),
            function: "f".into(),
            line: 1,
        }]
    }

    #[test]
    fn oldest_unclaimed_first_then_none() {
        let a = begin(frame("a.py"));
        let b = begin(frame("b.py"));
        assert_eq!(take_pending_compile_stack(), Some(frame("a.py")));
        assert_eq!(take_pending_compile_stack(), Some(frame("b.py")));
        assert_eq!(take_pending_compile_stack(), None);
        end(a);
        end(b);
        end(0);
        assert_eq!(take_pending_compile_stack(), None);
        let c = begin(frame("c.py"));
        end(c);
        assert_eq!(take_pending_compile_stack(), None);
    }
}
