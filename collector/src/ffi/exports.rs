//! C entry points for the Python agent (`collector/python/tpuscope_agent`), called through ctypes.
//! None may unwind: each body runs under `catch_unwind` and falls back to a neutral answer.
//! The `tpuscope_test_*` entries exist for the collector's own tests and benchmarks.

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use tpuscope_core::RawStackEntry;
use tpuscope_core::event::{Record, Step};

use super::python::{self, Path, SelfCheck};
use crate::recorder::{self, Event};

/// Frames kept for a compile request: JAX's own frames between the user's call and the compile
/// entry are many, and this path is rare, so keep more than a hook's usual `MAX_FRAMES`.
const COMPILE_REQUEST_FRAMES: usize = 96;

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Compares the direct frame reader with the C-API walker on the caller's stack; call with the
/// GIL held (`ctypes.PyDLL`). Returns 1 = agreed (direct reader on), 0 = disagreed (direct
/// reader off, a `stack_unavailable` note recorded), -1 = could not check (not Python, GIL not
/// held, unsupported version, or an internal error).
#[unsafe(no_mangle)]
pub extern "C" fn tpuscope_python_selfcheck() -> i32 {
    guard(-1, || match python::selfcheck() {
        SelfCheck::Agreed(_) => 1,
        SelfCheck::Disagreed(_) => 0,
        SelfCheck::Unavailable(_) => -1,
    })
}

/// Records a `Step` event: `marker` says what marked it (`torch_xla.sync`, `mark_step`,
/// `optimizer.step`, `user`), `number` is the agent's count for that marker.
///
/// # Safety
/// `marker` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tpuscope_mark_step(marker: *const c_char, number: u64) {
    guard((), || {
        if !recorder::enabled() {
            return;
        }
        // SAFETY: per this function's contract.
        let marker = unsafe { c_str(marker) }.unwrap_or_else(|| "user".into());
        recorder::record(Event::new(Record::Step(Step {
            t_ns: recorder::now_ns(),
            thread: recorder::thread_id(),
            marker,
            number,
        })));
    })
}

/// Tells the collector which frontend the agent detected (`jax`, `torch_xla`, `torch_tpu`).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tpuscope_set_frontend(name: *const c_char) {
    guard((), || {
        // SAFETY: per this function's contract.
        if let Some(n) = unsafe { c_str(name) } {
            crate::agent::set_frontend(&n);
        }
    })
}

/// The agent calls this on entry to the frontend's compile function (GIL held): captures the
/// requesting thread's stack so a compile hook on a worker thread can use it. Returns a token
/// for `tpuscope_compile_request_end`, or 0 when no stack could be taken.
#[unsafe(no_mangle)]
pub extern "C" fn tpuscope_compile_request_begin() -> u64 {
    guard(0, || {
        // Compile requests are rare (a compile takes milliseconds): no need to check whether
        // anything records before capturing a few microseconds' worth of stack.
        if !crate::session::config().stacks {
            return 0;
        }
        match python::capture_stack_with(COMPILE_REQUEST_FRAMES) {
            Ok((stack, _)) => crate::pending::begin(strip_agent_frames(stack)),
            Err(_) => 0,
        }
    })
}

/// Ends the request `tpuscope_compile_request_begin` started.
#[unsafe(no_mangle)]
pub extern "C" fn tpuscope_compile_request_end(token: u64) {
    guard((), || crate::pending::end(token))
}

/// Drops the innermost frames that belong to the agent itself (its wrapper around the frontend's
/// compile function): the stack should start in the frontend.
fn strip_agent_frames(mut stack: Vec<RawStackEntry>) -> Vec<RawStackEntry> {
    let n = stack
        .iter()
        .take_while(|f| f.file.contains("tpuscope_agent"))
        .count();
    if n < stack.len() {
        stack.drain(..n);
    }
    stack
}

/// Writes `text` into `out[..len]` (truncated); returns the bytes written.
///
/// # Safety
/// `out` is NULL or valid for `len` writable bytes.
unsafe fn write_out(text: &str, out: *mut u8, len: usize) -> usize {
    if out.is_null() {
        return 0;
    }
    let n = text.len().min(len);
    // SAFETY: `out` is valid for `len >= n` bytes per the caller; the source is a live &str.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, n) };
    n
}

fn render(result: Result<(Vec<RawStackEntry>, Path), &'static str>) -> (String, bool) {
    match result {
        Ok((stack, path)) => {
            let mut s = String::from(match path {
                Path::CApi => "#capi\n",
                Path::Direct => "#direct\n",
            });
            for f in stack {
                s.push_str(&format!("{}:{}:{}\n", f.file, f.line, f.function));
            }
            (s, true)
        }
        Err(e) => (e.to_string(), false),
    }
}

/// Test entry: writes `(text, ok)` into the buffer as this module's tests expect.
///
/// # Safety
/// `out` is NULL or valid for `len` writable bytes.
unsafe fn answer(text: &str, ok: bool, out: *mut u8, len: usize) -> i64 {
    // SAFETY: per the caller.
    let n = unsafe { write_out(text, out, len) } as i64;
    if ok { n } else { -n.max(1) }
}

/// Test entry: captures the calling thread's stack and writes it into `out_buf` as a first line
/// `#capi` or `#direct` (the reader that ran), then `file:line:function` lines, innermost first.
/// Returns the bytes written, or minus the length of an error message written instead.
///
/// # Safety
/// `out_buf` is NULL or valid for `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tpuscope_test_capture_stack(out_buf: *mut u8, len: usize) -> i64 {
    guard(i64::MIN, || {
        let (text, ok) = render(python::capture_stack_with(python::MAX_FRAMES));
        // SAFETY: per this function's contract.
        unsafe { answer(&text, ok, out_buf, len) }
    })
}

/// Test entry: like `tpuscope_test_capture_stack`, but captures on a new native thread that has
/// no Python state (as JAX's compile workers), which must give an error.
///
/// # Safety
/// `out_buf` is NULL or valid for `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tpuscope_test_capture_stack_new_thread(
    out_buf: *mut u8,
    len: usize,
) -> i64 {
    guard(i64::MIN, || {
        let r =
            std::thread::spawn(|| render(python::capture_stack_with(python::MAX_FRAMES))).join();
        let (text, ok) = r.unwrap_or_else(|_| ("capture thread panicked".into(), false));
        // SAFETY: per this function's contract.
        unsafe { answer(&text, ok, out_buf, len) }
    })
}

/// Test entry: on a new native thread (a compile worker stand-in), takes the stack of the oldest
/// compile request in flight; writes it as `file:line:function` lines, or returns -1 if none.
///
/// # Safety
/// `out_buf` is NULL or valid for `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tpuscope_test_take_pending_compile_stack(
    out_buf: *mut u8,
    len: usize,
) -> i64 {
    guard(i64::MIN, || {
        let r = std::thread::spawn(|| {
            python::capture_stack()
                .ok()
                .or_else(crate::pending::take_pending_compile_stack)
        })
        .join();
        match r {
            Ok(Some(stack)) => {
                let (text, _) = render(Ok((stack, Path::Direct)));
                let text = text.strip_prefix("#direct\n").unwrap_or(&text);
                // SAFETY: per this function's contract.
                unsafe { write_out(text, out_buf, len) as i64 }
            }
            _ => -1,
        }
    })
}

/// Test entry: mean nanoseconds per `capture_stack` over `iters` captures on the calling thread
/// (0 if capture fails). Through `ctypes.PyDLL` it measures the C-API reader, through
/// `ctypes.CDLL` the direct reader.
#[unsafe(no_mangle)]
pub extern "C" fn tpuscope_test_bench_capture(iters: u64) -> u64 {
    guard(0, || {
        let iters = iters.max(1);
        let t0 = crate::ffi::os::monotonic_ns();
        for _ in 0..iters {
            if python::capture_stack().is_err() {
                return 0;
            }
        }
        (crate::ffi::os::monotonic_ns() - t0) / iters
    })
}

/// Test entry: 1 if the direct reader is currently allowed.
#[unsafe(no_mangle)]
pub extern "C" fn tpuscope_test_direct_reader_enabled() -> i32 {
    guard(0, || i32::from(python::direct_reader_enabled()))
}
