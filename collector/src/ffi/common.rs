//! What the hook modules (`hooks`, `transfers`, `memory`) share: the real slot of a hook, the
//! usual timed hook body, error records, stack capture, and recording an event.

use tpuscope_core::RawStackEntry;
use tpuscope_core::event::{ErrorEvent, ErrorInfo, Record};
use tpuscope_pjrt::abi::{PjrtError, PjrtFn};

use super::{guard, python, read_error, recording};
use crate::recorder::{self, Event, now_ns};
use crate::session;

/// The real slot of a hooked call, or `return NULL` from the hook if there is none (cannot
/// happen: hooks are only installed over non-NULL slots of the real table).
macro_rules! real_slot {
    ($slot:ident) => {
        match $crate::ffi::real().and_then(|a| a.$slot) {
            Some(f) => f,
            None => return ::std::ptr::null_mut(),
        }
    };
}
pub(super) use real_slot;

/// The usual hook body. With recording off: the real call alone. Else `before` (under
/// `guard`), the real call between two clock reads, and `record(args, err, t0, t1)` under
/// `guard` (a panic there loses the record, never the call). Returns the real call's result
/// unchanged.
///
/// # Safety
/// `args` must be the caller's valid args for `f`; they stay valid while `record` runs.
#[inline(always)]
pub(super) unsafe fn timed<A>(
    f: PjrtFn<A>,
    args: *mut A,
    before: impl FnOnce(),
    record: impl FnOnce(&A, *mut PjrtError, u64, u64),
) -> *mut PjrtError {
    if !recording() {
        // SAFETY: forwarding the caller's args unchanged.
        return unsafe { f(args) };
    }
    guard(before);
    let t0 = now_ns();
    // SAFETY: forwarding the caller's args unchanged.
    let err = unsafe { f(args) };
    let t1 = now_ns();
    // SAFETY: caller guarantee; the plugin has returned, so nothing else writes them now.
    let a = unsafe { &*args };
    guard(|| record(a, err, t0, t1));
    err
}

/// Records an `ErrorEvent` for a non-NULL error the real plugin returned and gives its code and
/// message for the call's own record. The error object itself is left to the caller. `stack` is
/// copied only when there is an error.
pub(super) fn record_error(
    api: &'static str,
    err: *mut PjrtError,
    stack: Option<&[RawStackEntry]>,
) -> Option<ErrorInfo> {
    if err.is_null() {
        return None;
    }
    // SAFETY: `err` was just returned by the real plugin and the caller has not seen it yet.
    let st = unsafe { read_error(err) }?;
    let mut ev = Event::named(
        Record::Error(ErrorEvent {
            t_ns: now_ns(),
            thread: recorder::thread_id(),
            api: String::new(),
            code: st.code,
            message: st.message.clone(),
            stack: 0,
        }),
        api,
    );
    ev.stack = stack.map(<[RawStackEntry]>::to_vec);
    recorder::record(ev);
    Some(ErrorInfo {
        code: st.code,
        message: st.message,
    })
}

/// Records an `ErrorEvent` for a call whose result is otherwise only passed through.
#[inline]
pub(super) fn pass_error(api: &'static str, err: *mut PjrtError) -> *mut PjrtError {
    if !err.is_null() && recording() {
        guard(|| record_error(api, err, None));
    }
    err
}

/// The calling thread's Python stack, when stacks are on and there is one.
pub(super) fn stack() -> Option<Vec<RawStackEntry>> {
    if !session::config().stacks {
        return None;
    }
    python::capture_stack().ok().filter(|s| !s.is_empty())
}

/// Records `record` with its stack; the writer fills its name field from `name` (see
/// `Event::name`).
pub(super) fn push(record: Record, name: &'static str, stack: Option<Vec<RawStackEntry>>) {
    let mut ev = Event::named(record, name);
    ev.stack = stack;
    recorder::record(ev);
}
