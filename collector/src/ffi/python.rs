//! The Python stack of the calling thread, from inside a PJRT hook, without ever taking the GIL.
//!
//! `PyGILState_Ensure` inside a hook can deadlock (the frontend holds its own locks while another
//! Python thread holds the GIL), so there are two readers:
//! - the thread holds the GIL: the public C API (`PyEval_GetFrame`, `PyFrame_GetBack`, …);
//! - it released the GIL and is blocked in our hook, so its frame chain cannot change: read the
//!   interpreter frames straight from its thread state, with per-version layouts (3.11–3.13).
//!
//! Both readers take a code object's file and function names (and the line of an instruction
//! offset seen before) from a per-thread cache keyed on the code object's identity (`CodeCache`),
//! so a capture mostly copies shared `Arc<str>` names.
//!
//! CPython is found at run time with `dlsym(RTLD_DEFAULT)`: the collector never links libpython.
//! The direct reader is checked against the C-API walker (`selfcheck`, called by the agent with
//! the GIL held, and once automatically the first time a hook runs with the GIL held); a mismatch
//! turns it off for the rest of the process.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use tpuscope_core::RawStackEntry;

/// Frames kept per stack (innermost first).
pub const MAX_FRAMES: usize = 32;

/// Upper bound on frames visited (kept + skipped shim/incomplete frames): a corrupt chain with a
/// cycle must not spin forever.
const MAX_VISITED: usize = 4096;
/// Longest name read directly; longer (or corrupt) lengths give "?".
const MAX_NAME_CHARS: isize = 4096;

pub const ERR_NOT_PYTHON: &str = "not a Python process";
pub const ERR_NO_THREAD_STATE: &str = "thread has no Python state";
pub const ERR_NO_FRAMES: &str = "thread has no Python frames";
pub const ERR_NOT_VERIFIED: &str = "python frame layout not verified";
pub const ERR_FINALIZING: &str = "Python is shutting down";

/// Which reader produced a stack (tests and benchmarks want to know).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The public C API, GIL held by this thread.
    CApi,
    /// Direct reads of the interpreter frames, GIL not held.
    Direct,
}

type PyObj = *mut c_void;

/// Where the fields the direct reader needs live, for one CPython minor version (x86_64 / LP64).
/// Offsets were taken from each version's `Include/internal/pycore_frame.h`,
/// `Include/cpython/pystate.h`, `Include/cpython/code.h` and `Include/cpython/unicodeobject.h`
/// (measured with `offsetof` against the 3.11.7, 3.12.1 and 3.13.0 headers; `co_firstlineno`
/// and `co_linetable` checked against those interpreters' code objects with ctypes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    minor: u32,
    /// 3.11/3.12: `PyThreadState.cframe` (a `_PyCFrame*`); the current frame is read through it.
    tstate_cframe: Option<usize>,
    /// `_PyCFrame.current_frame` (3.11/3.12) or `PyThreadState.current_frame` (3.13).
    current_frame: usize,
    /// `_PyInterpreterFrame.f_code` (3.11/3.12) / `f_executable` (3.13).
    f_code: usize,
    f_previous: usize,
    /// `prev_instr` (3.11/3.12) / `instr_ptr` (3.13); either way `(ptr - code units)` is LASTI.
    f_instr: usize,
    f_owner: usize,
    co_filename: usize,
    co_qualname: usize,
    /// `co_firstlineno` (an int) and `co_linetable` (a bytes object): only part of the name
    /// cache's key (`CodeKey`), never reported.
    co_firstlineno: usize,
    co_linetable: usize,
    co_firsttraceable: usize,
    /// `offsetof(PyCodeObject, co_code_adaptive)`, which is also `PyCode_Type.tp_basicsize`.
    co_units: usize,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    str_ascii_size: usize,
    /// `sizeof(PyCompactUnicodeObject)`: where a compact non-ASCII string's characters start.
    str_compact_size: usize,
    /// 3.12+: frames owned by the C stack (entry shims) are not Python frames.
    has_cstack_owner: bool,
}

// Same in 3.11–3.13: PyObject header, `PyASCIIObject.length` and `.state`, `tp_basicsize`.
const OB_TYPE: usize = 8;
const STR_LENGTH: usize = 16;
const STR_STATE: usize = 32;
const TP_BASICSIZE: usize = 32;
const OWNED_BY_GENERATOR: u8 = 1;
const OWNED_BY_CSTACK: u8 = 3;
const CODE_UNIT: usize = 2;

const LAYOUT_311: Layout = Layout {
    minor: 11,
    tstate_cframe: Some(56),
    current_frame: 8,
    f_code: 32,
    f_previous: 48,
    f_instr: 56,
    f_owner: 69,
    co_filename: 112,
    co_qualname: 128,
    co_firstlineno: 72,
    co_linetable: 136,
    co_firsttraceable: 168,
    co_units: 184,
    str_ascii_size: 48,
    str_compact_size: 72,
    has_cstack_owner: false,
};

const LAYOUT_312: Layout = Layout {
    minor: 12,
    tstate_cframe: Some(56),
    current_frame: 0,
    f_code: 0,
    f_previous: 8,
    f_instr: 56,
    f_owner: 70,
    co_filename: 112,
    co_qualname: 128,
    co_firstlineno: 68,
    co_linetable: 136,
    co_firsttraceable: 176,
    co_units: 192,
    str_ascii_size: 40,
    str_compact_size: 56,
    has_cstack_owner: true,
};

const LAYOUT_313: Layout = Layout {
    minor: 13,
    tstate_cframe: None,
    current_frame: 72,
    f_code: 0,
    f_previous: 8,
    f_instr: 56,
    f_owner: 70,
    co_filename: 112,
    co_qualname: 128,
    co_firstlineno: 68,
    co_linetable: 136,
    co_firsttraceable: 184,
    co_units: 200,
    str_ascii_size: 40,
    str_compact_size: 56,
    has_cstack_owner: true,
};

/// The CPython entry points we use, resolved once.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    /// `Py_IsFinalizing` (3.13) / `_Py_IsFinalizing` (3.11/3.12): once finalization starts, other
    /// threads' states are freed, so their frames must not be read.
    is_finalizing: unsafe extern "C" fn() -> c_int,
    gilstate_this: unsafe extern "C" fn() -> PyObj,
    gilstate_check: unsafe extern "C" fn() -> c_int,
    /// `_PyThreadState_UncheckedGet` (3.11/3.12) or `PyThreadState_GetUnchecked` (3.13): the
    /// thread state holding the GIL (3.11: process-wide; 3.12+: this thread's attached one).
    tstate_unchecked: unsafe extern "C" fn() -> PyObj,
    eval_get_frame: unsafe extern "C" fn() -> PyObj,
    frame_get_code: unsafe extern "C" fn(PyObj) -> PyObj,
    frame_get_back: unsafe extern "C" fn(PyObj) -> PyObj,
    frame_get_line: unsafe extern "C" fn(PyObj) -> c_int,
    /// `PyFrame_GetLasti` (3.11+): the frame's instruction offset in bytes, -1 when none.
    frame_get_lasti: Option<unsafe extern "C" fn(PyObj) -> c_int>,
    addr2line: unsafe extern "C" fn(PyObj, c_int) -> c_int,
    as_utf8: unsafe extern "C" fn(PyObj, *mut isize) -> *const c_char,
    dec_ref: unsafe extern "C" fn(PyObj),
    err_occurred: unsafe extern "C" fn() -> PyObj,
    err_clear: unsafe extern "C" fn(),
    get_attr: unsafe extern "C" fn(PyObj, *const c_char) -> PyObj,
    code_type: usize,
    unicode_type: usize,
    /// (major, minor, micro).
    version: (u32, u32, u32),
    /// The direct reader's layout; None for an unsupported version or a build whose object
    /// header does not match (debug / free-threaded builds).
    layout: Option<Layout>,
    /// Whether the direct reader may run before a self-check agreed (see `direct_allowed`).
    trusted: bool,
}

static API: OnceLock<Option<Api>> = OnceLock::new();

const STATE_UNVERIFIED: u8 = 0;
const STATE_VERIFIED: u8 = 1;
const STATE_FAILED: u8 = 2;
const STATE_CHECKING: u8 = 3;
/// The direct reader's standing: unverified → verified / failed (failed is final).
static DIRECT_STATE: AtomicU8 = AtomicU8::new(STATE_UNVERIFIED);
/// A failure found before the recorder existed still owes its note.
static NOTE_OWED: AtomicBool = AtomicBool::new(false);
static FAILURE: OnceLock<String> = OnceLock::new();

fn sym(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

macro_rules! func {
    ($name:literal, $ty:ty) => {{
        match sym($name) {
            // SAFETY: the symbol is the CPython function of that name, whose C signature `$ty`
            // matches (stable across 3.11–3.13).
            Some(p) => unsafe { std::mem::transmute::<*mut c_void, $ty>(p) },
            None => return None,
        }
    }};
}

fn resolve() -> Option<Api> {
    let is_initialized = func!(c"Py_IsInitialized", unsafe extern "C" fn() -> c_int);
    let tstate_unchecked = match sym(c"PyThreadState_GetUnchecked") {
        // SAFETY: `PyThreadState *PyThreadState_GetUnchecked(void)`.
        Some(p) => unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> PyObj>(p)
        },
        None => func!(
            c"_PyThreadState_UncheckedGet",
            unsafe extern "C" fn() -> PyObj
        ),
    };
    let is_finalizing = match sym(c"Py_IsFinalizing") {
        // SAFETY: `int Py_IsFinalizing(void)`.
        Some(p) => unsafe {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(p)
        },
        None => func!(c"_Py_IsFinalizing", unsafe extern "C" fn() -> c_int),
    };
    let code_type = sym(c"PyCode_Type")? as usize;
    let unicode_type = sym(c"PyUnicode_Type")? as usize;
    let type_type = sym(c"PyType_Type")? as usize;
    let version = python_version()?;
    let mut api = Api {
        is_initialized,
        is_finalizing,
        gilstate_this: func!(
            c"PyGILState_GetThisThreadState",
            unsafe extern "C" fn() -> PyObj
        ),
        gilstate_check: func!(c"PyGILState_Check", unsafe extern "C" fn() -> c_int),
        tstate_unchecked,
        eval_get_frame: func!(c"PyEval_GetFrame", unsafe extern "C" fn() -> PyObj),
        frame_get_code: func!(c"PyFrame_GetCode", unsafe extern "C" fn(PyObj) -> PyObj),
        frame_get_back: func!(c"PyFrame_GetBack", unsafe extern "C" fn(PyObj) -> PyObj),
        frame_get_line: func!(
            c"PyFrame_GetLineNumber",
            unsafe extern "C" fn(PyObj) -> c_int
        ),
        frame_get_lasti: sym(c"PyFrame_GetLasti").map(|p| {
            // SAFETY: `int PyFrame_GetLasti(PyFrameObject *frame)`.
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(PyObj) -> c_int>(p) }
        }),
        addr2line: func!(
            c"PyCode_Addr2Line",
            unsafe extern "C" fn(PyObj, c_int) -> c_int
        ),
        as_utf8: func!(
            c"PyUnicode_AsUTF8AndSize",
            unsafe extern "C" fn(PyObj, *mut isize) -> *const c_char
        ),
        dec_ref: func!(c"Py_DecRef", unsafe extern "C" fn(PyObj)),
        err_occurred: func!(c"PyErr_Occurred", unsafe extern "C" fn() -> PyObj),
        err_clear: func!(c"PyErr_Clear", unsafe extern "C" fn()),
        get_attr: func!(
            c"PyObject_GetAttrString",
            unsafe extern "C" fn(PyObj, *const c_char) -> PyObj
        ),
        code_type,
        unicode_type,
        version,
        layout: None,
        trusted: false,
    };
    let layout = match (version.0, version.1) {
        (3, 11) => Some(LAYOUT_311),
        (3, 12) => Some(LAYOUT_312),
        (3, 13) => debug_offsets_313().or(Some(LAYOUT_313)),
        _ => None,
    };
    // Cheap guards against a build whose object layout differs (Py_TRACE_REFS debug builds and
    // free-threaded builds move `ob_type`; a patch release could move `co_code_adaptive`).
    let layout = layout.filter(|l| {
        // SAFETY: PyCode_Type is a static PyTypeObject; its header and tp_basicsize are readable.
        let (meta, basic) = unsafe {
            (
                rd_usize(code_type, OB_TYPE),
                rd_usize(code_type, TP_BASICSIZE),
            )
        };
        meta == type_type && basic == l.co_units
    });
    api.layout = layout;
    // Trusted without a self-check only where the offsets were measured (x86_64) — so stacks
    // work even when no agent runs (a plain `python train.py` with the plugin set by env) — and
    // the per-object type checks in the reader stay on. Elsewhere only after a self-check.
    api.trusted = layout.is_some() && cfg!(target_arch = "x86_64");
    Some(api)
}

/// The running CPython's (major, minor, micro).
fn python_version() -> Option<(u32, u32, u32)> {
    if let Some(p) = sym(c"Py_Version") {
        // SAFETY: `const unsigned long Py_Version` (3.11+): PY_VERSION_HEX; `unsigned long` is
        // 64-bit on the LP64 Linux targets the collector supports.
        let hex = unsafe { *(p as *const u64) };
        return Some((
            ((hex >> 24) & 0xff) as u32,
            ((hex >> 16) & 0xff) as u32,
            ((hex >> 8) & 0xff) as u32,
        ));
    }
    let get = func!(c"Py_GetVersion", unsafe extern "C" fn() -> *const c_char);
    // SAFETY: Py_GetVersion returns a static NUL-terminated string ("3.10.13 (main, ...").
    let s = unsafe { CStr::from_ptr(get()) }.to_string_lossy();
    let v = s.split_whitespace().next()?;
    let mut it = v.split('.').map(|x| {
        x.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .unwrap_or(0)
    });
    Some((it.next()?, it.next()?, it.next().unwrap_or(0)))
}

/// 3.13 publishes its own offsets at the start of `_PyRuntime` (`_Py_DebugOffsets`, for
/// out-of-process debuggers): when present and sane, they win over our constants.
fn debug_offsets_313() -> Option<Layout> {
    let rt = sym(c"_PyRuntime")? as usize;
    // _Py_DebugOffsets (3.13): cookie[8], version, free_threaded, runtime_state{3},
    // interpreter_state{13}, thread_state{9}, interpreter_frame{6}, code_object{10}, …,
    // unicode_object{size, state, length, asciiobject_size} after pyobject{2}, type_object{4},
    // tuple{3}, list{3}, dict{3}, float{2}, long{3}, bytes{3}. All fields u64.
    let field = |i: usize| -> usize {
        // SAFETY: `_PyRuntime` starts with the `_Py_DebugOffsets` struct (3.13), at least
        // 8 + 8 * 80 bytes long; `i` stays inside it.
        unsafe { rd_usize(rt, 8 + 8 * i) }
    };
    // SAFETY: the first 8 bytes are the cookie.
    let cookie = unsafe { std::ptr::read(rt as *const [u8; 8]) };
    if &cookie != b"xdebugpy" {
        return None;
    }
    let version = field(0) as u64;
    let free_threaded = field(1);
    if (version >> 16) != 0x030d || free_threaded != 0 {
        return None;
    }
    // Indices (in u64 after the cookie): version 0, free_threaded 1, runtime_state 2..5,
    // interpreter_state 5..18, thread_state 18..27, interpreter_frame 27..33,
    // code_object 33..43, pyobject 43..45, type_object 45..49, tuple 49..52, list 52..55,
    // dict 55..58, float 58..60, long 60..63, bytes 63..66, unicode 66..70.
    let ts_current_frame = field(18 + 4);
    let fr_previous = field(27 + 1);
    let fr_executable = field(27 + 2);
    let fr_instr = field(27 + 3);
    let fr_owner = field(27 + 5);
    let co_filename = field(33 + 1);
    let co_qualname = field(33 + 3);
    let co_linetable = field(33 + 4);
    let co_firstlineno = field(33 + 5);
    let co_units = field(33 + 9);
    let ob_type = field(43 + 1);
    let str_state = field(66 + 1);
    let str_length = field(66 + 2);
    let ascii_size = field(66 + 3);
    if ob_type != OB_TYPE || str_state != STR_STATE || str_length != STR_LENGTH {
        return None;
    }
    // Fields read from every code object must lie in its fixed part.
    if co_linetable + 8 > co_units || co_firstlineno + 4 > co_units {
        return None;
    }
    let ours = LAYOUT_313;
    // `_co_firsttraceable` is not published; it sits 16 bytes before `co_code_adaptive` (an
    // int padded to 8, then the `co_extra` pointer).
    Some(Layout {
        current_frame: ts_current_frame,
        f_code: fr_executable,
        f_previous: fr_previous,
        f_instr: fr_instr,
        f_owner: fr_owner,
        co_filename,
        co_qualname,
        co_firstlineno,
        co_linetable,
        co_firsttraceable: co_units.wrapping_sub(ours.co_units - ours.co_firsttraceable),
        co_units,
        str_ascii_size: ascii_size,
        // PyCompactUnicodeObject adds utf8_length and utf8 (3.12+).
        str_compact_size: ascii_size + 16,
        ..ours
    })
}

fn api() -> Option<&'static Api> {
    API.get_or_init(resolve).as_ref()
}

/// Resolves the CPython symbols now (call it from `GetPjrtApi`, so no hook pays `dlsym`).
pub fn init() {
    let _ = api();
}

/// The running CPython version, if this is a Python process.
pub fn version() -> Option<(u32, u32, u32)> {
    api().map(|a| a.version)
}

/// # Safety
/// `base + off` must be a readable, aligned `usize`.
#[inline]
unsafe fn rd_usize(base: usize, off: usize) -> usize {
    // SAFETY: guaranteed by the caller.
    unsafe { std::ptr::read((base + off) as *const usize) }
}

/// The Python stack of the calling thread, innermost first, at most `MAX_FRAMES` frames.
pub fn capture_stack() -> Result<Vec<RawStackEntry>, &'static str> {
    capture_stack_with(MAX_FRAMES).map(|(s, _)| s)
}

/// Like `capture_stack` with a frame limit, also saying which reader ran.
pub fn capture_stack_with(max: usize) -> Result<(Vec<RawStackEntry>, Path), &'static str> {
    let api = api().ok_or(ERR_NOT_PYTHON)?;
    // A self-check that failed before the recorder existed still owes its note (one load).
    owe_note();
    // SAFETY: plain reads of runtime flags, callable from any thread at any time.
    if unsafe { (api.is_initialized)() } == 0 {
        return Err(ERR_NOT_PYTHON);
    }
    // SAFETY: as above.
    if unsafe { (api.is_finalizing)() } != 0 {
        return Err(ERR_FINALIZING);
    }
    // SAFETY: reads this thread's TLS slot; no GIL needed.
    let tstate = unsafe { (api.gilstate_this)() };
    if tstate.is_null() {
        return Err(ERR_NO_THREAD_STATE);
    }
    let stack = if holds_gil(api, tstate) {
        // SAFETY: this thread holds the GIL.
        let pending_error = unsafe { !(api.err_occurred)().is_null() };
        if pending_error && direct_allowed(api) {
            // An exception is set: C-API calls that fail would overwrite it; the frames cannot
            // change while we hold the GIL, so read them directly.
            // SAFETY: the layout is allowed and this thread's frames are stable.
            let walk = with_code_cache(|c| unsafe { direct_walk(api, tstate, max, c) });
            (walk, Path::Direct)
        } else {
            if DIRECT_STATE.load(Ordering::Relaxed) == STATE_UNVERIFIED {
                auto_check(api, tstate);
            }
            // SAFETY: this thread holds the GIL.
            let walk = with_code_cache(|c| unsafe { api_walk(api, max, false, c) });
            (walk?, Path::CApi)
        }
    } else {
        if !direct_allowed(api) {
            return Err(ERR_NOT_VERIFIED);
        }
        // SAFETY: the GIL is released by this thread, which is blocked in our hook: its frame
        // chain and the code objects it references stay alive and unchanged until we return.
        let walk = with_code_cache(|c| unsafe { direct_walk(api, tstate, max, c) });
        (walk, Path::Direct)
    };
    if stack.0.is_empty() {
        return Err(ERR_NO_FRAMES);
    }
    Ok(stack)
}

fn holds_gil(api: &Api, tstate: PyObj) -> bool {
    // SAFETY: both are plain reads of interpreter state (the GIL holder's thread state is an
    // atomic in 3.11 and a thread-local in 3.12+); PyGILState_Check needs no GIL.
    unsafe { (api.gilstate_check)() == 1 && (api.tstate_unchecked)() == tstate }
}

fn direct_allowed(api: &Api) -> bool {
    if api.layout.is_none() {
        return false;
    }
    match DIRECT_STATE.load(Ordering::Relaxed) {
        STATE_VERIFIED => true,
        STATE_FAILED => false,
        _ => api.trusted,
    }
}

/// Walks with the C API. `check_offsets` also confirms (self-check only) that the code-object
/// offsets give the same objects as attribute lookups. Names come from `cache` when given.
///
/// # Safety
/// The calling thread must hold the GIL.
unsafe fn api_walk(
    api: &Api,
    max: usize,
    check_offsets: bool,
    mut cache: Option<&mut CodeCache>,
) -> Result<Vec<RawStackEntry>, &'static str> {
    let mut out = Vec::with_capacity(max.min(MAX_FRAMES));
    // SAFETY: (whole body) GIL held; the C API is used per its reference rules: PyEval_GetFrame
    // is borrowed, PyFrame_GetCode / PyFrame_GetBack / PyObject_GetAttrString return new refs.
    unsafe {
        let mut frame = (api.eval_get_frame)();
        let mut owned = false;
        let mut mismatch = false;
        while !frame.is_null() && out.len() < max {
            let code = (api.frame_get_code)(frame);
            if !code.is_null() {
                let line_of = || (api.frame_get_line)(frame).max(0) as u32;
                let known = match (cache.as_deref_mut(), api.layout, api.frame_get_lasti) {
                    (Some(c), Some(l), Some(get_lasti))
                        if !check_offsets && rd_usize(code as usize, OB_TYPE) == api.code_type =>
                    {
                        let key = CodeKey::read(&l, code as usize);
                        let e = c.entry(key, || {
                            (
                                utf8_api(api, key.filename as PyObj).into(),
                                utf8_api(api, key.qualname as PyObj).into(),
                            )
                        });
                        let offset = get_lasti(frame) as isize;
                        if offset < 0 || e.offset != offset {
                            e.line = line_of();
                            e.offset = offset;
                        }
                        Some(RawStackEntry {
                            file: e.file.clone(),
                            function: e.function.clone(),
                            line: e.line,
                        })
                    }
                    _ => None,
                };
                out.push(match known {
                    Some(f) => f,
                    None => {
                        let (file, function) =
                            code_names_api(api, code, check_offsets, &mut mismatch);
                        RawStackEntry {
                            file,
                            function,
                            line: line_of(),
                        }
                    }
                });
                (api.dec_ref)(code);
            }
            let back = (api.frame_get_back)(frame);
            if owned {
                (api.dec_ref)(frame);
            }
            frame = back;
            owned = true;
        }
        if owned && !frame.is_null() {
            (api.dec_ref)(frame);
        }
        if !(api.err_occurred)().is_null() {
            (api.err_clear)();
        }
        if mismatch {
            return Err("code object offsets disagree with attribute lookups");
        }
    }
    Ok(out)
}

/// File and qualified name of a code object, GIL held.
///
/// # Safety
/// GIL held; `code` is a live code object.
unsafe fn code_names_api(
    api: &Api,
    code: PyObj,
    check_offsets: bool,
    mismatch: &mut bool,
) -> (Arc<str>, Arc<str>) {
    // SAFETY: see the function's contract; attribute results are new references, released here.
    unsafe {
        let by_attr = |name: &CStr| -> PyObj { (api.get_attr)(code, name.as_ptr()) };
        match api.layout {
            Some(l) if rd_usize(code as usize, OB_TYPE) == api.code_type => {
                let file = rd_usize(code as usize, l.co_filename) as PyObj;
                let qual = rd_usize(code as usize, l.co_qualname) as PyObj;
                if check_offsets {
                    for (obj, name) in [(file, c"co_filename"), (qual, c"co_qualname")] {
                        let a = by_attr(name);
                        if a != obj {
                            *mismatch = true;
                        }
                        if !a.is_null() {
                            (api.dec_ref)(a);
                        }
                    }
                }
                (utf8_api(api, file).into(), utf8_api(api, qual).into())
            }
            _ => {
                // Unknown layout: attribute lookups work on any version (slower). Before 3.11
                // there is no co_qualname: fall back to co_name.
                let attr = |names: &[&CStr]| -> String {
                    for name in names {
                        let a = by_attr(name);
                        if a.is_null() {
                            (api.err_clear)();
                            continue;
                        }
                        let s = utf8_api(api, a);
                        (api.dec_ref)(a);
                        return s;
                    }
                    "?".into()
                };
                (
                    attr(&[c"co_filename"]).into(),
                    attr(&[c"co_qualname", c"co_name"]).into(),
                )
            }
        }
    }
}

/// # Safety
/// GIL held; `s` is NULL or a live object.
unsafe fn utf8_api(api: &Api, s: PyObj) -> String {
    if s.is_null() {
        return "?".into();
    }
    // SAFETY: GIL held; the type is checked before PyUnicode_AsUTF8AndSize.
    unsafe {
        if rd_usize(s as usize, OB_TYPE) != api.unicode_type {
            return "?".into();
        }
        let mut n: isize = 0;
        let p = (api.as_utf8)(s, &mut n);
        if p.is_null() || n < 0 {
            (api.err_clear)();
            return "?".into();
        }
        utf8_owned(std::slice::from_raw_parts(p.cast::<u8>(), n as usize))
    }
}

/// Names are valid UTF-8 (ASCII or CPython's own encoding): the strict check is the fast one.
fn utf8_owned(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Reads the thread's interpreter frames directly. Names and line lookups come from `cache` when
/// given.
///
/// # Safety
/// `api.layout` matches the running interpreter, and `tstate`'s frames cannot change during the
/// call (this thread either holds the GIL or released it and is blocked in our hook).
unsafe fn direct_walk(
    api: &Api,
    tstate: PyObj,
    max: usize,
    mut cache: Option<&mut CodeCache>,
) -> Vec<RawStackEntry> {
    let Some(l) = api.layout else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(max.min(MAX_FRAMES));
    // SAFETY: (whole body) every pointer read comes from the thread state and its live frames,
    // at offsets of the verified layout; objects are type-checked before their fields are read.
    unsafe {
        let ts = tstate as usize;
        let mut frame = match l.tstate_cframe {
            Some(cf) => {
                let cframe = rd_usize(ts, cf);
                if cframe == 0 {
                    return out;
                }
                rd_usize(cframe, l.current_frame)
            }
            None => rd_usize(ts, l.current_frame),
        };
        let mut visited = 0;
        while frame != 0 && out.len() < max && visited < MAX_VISITED {
            visited += 1;
            let owner = std::ptr::read((frame + l.f_owner) as *const u8);
            let code = rd_usize(frame, l.f_code);
            let previous = rd_usize(frame, l.f_previous);
            let skip = (l.has_cstack_owner && owner == OWNED_BY_CSTACK)
                || code == 0
                || rd_usize(code, OB_TYPE) != api.code_type;
            if !skip {
                let units = code + l.co_units;
                let instr = rd_usize(frame, l.f_instr);
                let first = std::ptr::read((code + l.co_firsttraceable) as *const c_int);
                // Frames still setting up (before their first traceable instruction) are
                // skipped, as PyFrame_GetBack does.
                let incomplete = owner != OWNED_BY_GENERATOR
                    && (instr as isize) < (units as isize) + (first as isize) * CODE_UNIT as isize;
                if !incomplete {
                    let lasti = ((instr as isize) - (units as isize)) / CODE_UNIT as isize;
                    let offset = lasti * CODE_UNIT as isize;
                    // PyCode_Addr2Line only reads the code object's line table.
                    let line_of = || (api.addr2line)(code as PyObj, offset as c_int).max(0) as u32;
                    let key = CodeKey::read(&l, code);
                    let names = || {
                        (
                            read_str(api, &l, key.filename).into(),
                            read_str(api, &l, key.qualname).into(),
                        )
                    };
                    out.push(match cache.as_deref_mut() {
                        Some(c) => {
                            let e = c.entry(key, names);
                            if e.offset != offset {
                                e.line = line_of();
                                e.offset = offset;
                            }
                            RawStackEntry {
                                file: e.file.clone(),
                                function: e.function.clone(),
                                line: e.line,
                            }
                        }
                        None => {
                            let (file, function) = names();
                            RawStackEntry {
                                file,
                                function,
                                line: line_of(),
                            }
                        }
                    });
                }
            }
            frame = previous;
        }
    }
    out
}

/// Identity of a code object for the name cache: its address, the addresses of its
/// `co_filename` and `co_qualname` str objects and of its `co_linetable`, and its
/// `co_firstlineno`. A code object freed and another allocated at the same address matches an
/// old entry only if it also refers to objects at the same three addresses and starts on the
/// same line; when those are the same objects (strs and bytes are immutable), the names and the
/// remembered line are right anyway.
#[derive(Clone, Copy, PartialEq, Eq)]
struct CodeKey {
    code: usize,
    filename: usize,
    qualname: usize,
    linetable: usize,
    first_line: i32,
}

impl CodeKey {
    /// # Safety
    /// `code` is a live code object of the layout's interpreter.
    unsafe fn read(l: &Layout, code: usize) -> CodeKey {
        // SAFETY: fields of a live code object at the layout's offsets.
        unsafe {
            CodeKey {
                code,
                filename: rd_usize(code, l.co_filename),
                qualname: rd_usize(code, l.co_qualname),
                linetable: rd_usize(code, l.co_linetable),
                first_line: std::ptr::read((code + l.co_firstlineno) as *const c_int),
            }
        }
    }
}

struct CodeNames {
    key: CodeKey,
    file: Arc<str>,
    function: Arc<str>,
    /// The last line lookup for this code object: instruction offset in bytes (as
    /// `PyFrame_GetLasti` gives it; -1: none) and its line.
    offset: isize,
    line: u32,
}

/// Code objects a thread's captures met: direct-mapped by code address, so a capture copies two
/// `Arc<str>` per frame instead of decoding and allocating two strings, and a frame stopped at
/// the same instruction as last time skips the line-table walk. Both readers share it (they
/// agree on names and on line per instruction offset).
#[derive(Default)]
struct CodeCache {
    slots: Vec<Option<CodeNames>>,
}

const CODE_CACHE_SLOTS: usize = 512;

impl CodeCache {
    /// The entry of `key`, (re)filled with `names()` unless it is already there.
    fn entry(
        &mut self,
        key: CodeKey,
        names: impl FnOnce() -> (Arc<str>, Arc<str>),
    ) -> &mut CodeNames {
        if self.slots.is_empty() {
            self.slots.resize_with(CODE_CACHE_SLOTS, || None);
        }
        let i = ((key.code >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % self.slots.len();
        let slot = &mut self.slots[i];
        if !matches!(slot, Some(e) if e.key == key) {
            *slot = None;
        }
        slot.get_or_insert_with(|| {
            let (file, function) = names();
            CodeNames {
                key,
                file,
                function,
                offset: -1,
                line: 0,
            }
        })
    }
}

thread_local! {
    static CODE_CACHE: Cell<CodeCache> = const { Cell::new(CodeCache { slots: Vec::new() }) };
}

/// Runs a walk with this thread's name cache (taken out of its slot meanwhile, so a nested
/// capture just runs uncached; a thread whose locals are gone runs with a fresh one).
fn with_code_cache<R>(walk: impl FnOnce(Option<&mut CodeCache>) -> R) -> R {
    let mut cache = CODE_CACHE.try_with(Cell::take).unwrap_or_default();
    let r = walk(Some(&mut cache));
    let _ = CODE_CACHE.try_with(|c| c.set(cache));
    r
}

/// Reads a compact `str` without the C API; anything else gives "?".
///
/// # Safety
/// `s` is 0 or points to a live object of the running interpreter.
unsafe fn read_str(api: &Api, l: &Layout, s: usize) -> String {
    // SAFETY: the type is checked before any str field is read; a compact string's characters
    // follow its header and number `length` units of `kind` bytes.
    unsafe {
        if s == 0 || rd_usize(s, OB_TYPE) != api.unicode_type {
            return "?".into();
        }
        let len = std::ptr::read((s + STR_LENGTH) as *const isize);
        let state = std::ptr::read((s + STR_STATE) as *const u32);
        let kind = (state >> 2) & 7;
        let compact = (state >> 5) & 1 == 1;
        let ascii = (state >> 6) & 1 == 1;
        if !compact || !(0..=MAX_NAME_CHARS).contains(&len) {
            return "?".into();
        }
        let n = len as usize;
        if ascii {
            return utf8_owned(std::slice::from_raw_parts(
                (s + l.str_ascii_size) as *const u8,
                n,
            ));
        }
        let data = s + l.str_compact_size;
        match kind {
            1 => std::slice::from_raw_parts(data as *const u8, n)
                .iter()
                .map(|&b| char::from(b))
                .collect(),
            2 => std::slice::from_raw_parts(data as *const u16, n)
                .iter()
                .map(|&c| char::from_u32(u32::from(c)).unwrap_or('\u{fffd}'))
                .collect(),
            4 => std::slice::from_raw_parts(data as *const u32, n)
                .iter()
                .map(|&c| char::from_u32(c).unwrap_or('\u{fffd}'))
                .collect(),
            _ => "?".into(),
        }
    }
}

/// The first time a hook runs with the GIL held and no agent has checked yet: compare both
/// readers once (both are cheap; this costs one extra walk, once per process).
fn auto_check(api: &Api, tstate: PyObj) {
    if api.layout.is_none()
        || DIRECT_STATE
            .compare_exchange(
                STATE_UNVERIFIED,
                STATE_CHECKING,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    let _ = compare_readers(api, tstate);
}

/// Walks the current stack both ways and records the verdict. GIL must be held.
fn compare_readers(api: &Api, tstate: PyObj) -> Result<usize, String> {
    // SAFETY: the callers hold the GIL.
    // Both uncached: the check is of the offsets, not of what earlier captures remembered.
    let by_api = unsafe { api_walk(api, MAX_FRAMES, true, None) };
    // SAFETY: GIL held, so the frames are stable; the layout passed the resolve-time guards.
    let direct = unsafe { direct_walk(api, tstate, MAX_FRAMES, None) };
    let verdict = match by_api {
        Err(e) => Err(e.to_string()),
        Ok(a) if a.is_empty() => Err("no Python frames to compare".into()),
        Ok(a) if a == direct => Ok(a.len()),
        Ok(a) => {
            let i = a.iter().zip(&direct).take_while(|(x, y)| x == y).count();
            Err(format!(
                "direct reader disagrees with the C API at frame {i}: {:?} vs {:?} ({} vs {} frames)",
                direct.get(i),
                a.get(i),
                direct.len(),
                a.len()
            ))
        }
    };
    match &verdict {
        Ok(_) => {
            // A failure is final: a later agreement does not re-enable the reader.
            let _ = DIRECT_STATE.compare_exchange(
                STATE_CHECKING,
                STATE_VERIFIED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            let _ = DIRECT_STATE.compare_exchange(
                STATE_UNVERIFIED,
                STATE_VERIFIED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        Err(msg) => {
            DIRECT_STATE.store(STATE_FAILED, Ordering::Release);
            let _ = FAILURE.set(format!(
                "Python {}.{}.{}: {msg}; stacks are recorded only where the GIL is held",
                api.version.0, api.version.1, api.version.2
            ));
            NOTE_OWED.store(true, Ordering::Release);
            owe_note();
        }
    }
    verdict
}

/// Records the failure note once a recorder exists to take it.
fn owe_note() {
    if !NOTE_OWED.load(Ordering::Relaxed) || crate::recorder::global().is_none() {
        return;
    }
    if NOTE_OWED.swap(false, Ordering::AcqRel) {
        let msg = FAILURE.get().cloned().unwrap_or_default();
        crate::session::note("stack_unavailable", msg);
    }
}

/// Outcome of `selfcheck`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelfCheck {
    /// Both readers agreed on this many frames; the direct reader is on.
    Agreed(usize),
    /// They disagreed; the direct reader is off for the rest of the process.
    Disagreed(String),
    /// Nothing to compare: not Python, no direct layout for this version, or GIL not held.
    Unavailable(&'static str),
}

/// Compares the direct reader with the C-API walker on the current stack. Call with the GIL held
/// (the agent calls it through `ctypes.PyDLL`).
pub fn selfcheck() -> SelfCheck {
    let Some(api) = api() else {
        return SelfCheck::Unavailable(ERR_NOT_PYTHON);
    };
    // SAFETY: plain queries, no GIL needed.
    if unsafe { (api.is_initialized)() } == 0 {
        return SelfCheck::Unavailable(ERR_NOT_PYTHON);
    }
    // SAFETY: TLS read.
    let tstate = unsafe { (api.gilstate_this)() };
    if tstate.is_null() {
        return SelfCheck::Unavailable(ERR_NO_THREAD_STATE);
    }
    if !holds_gil(api, tstate) {
        return SelfCheck::Unavailable("the GIL is not held");
    }
    if api.layout.is_none() {
        return SelfCheck::Unavailable("no frame layout for this Python version");
    }
    if DIRECT_STATE.load(Ordering::Acquire) == STATE_FAILED {
        return SelfCheck::Disagreed(FAILURE.get().cloned().unwrap_or_default());
    }
    match compare_readers(api, tstate) {
        Ok(n) => SelfCheck::Agreed(n),
        Err(m) => SelfCheck::Disagreed(m),
    }
}

/// Whether the direct reader is currently allowed (for diagnostics).
pub fn direct_reader_enabled() -> bool {
    api().is_some_and(direct_allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_python_here() {
        // The Rust test binary has no libpython.
        assert_eq!(capture_stack(), Err(ERR_NOT_PYTHON));
        assert_eq!(selfcheck(), SelfCheck::Unavailable(ERR_NOT_PYTHON));
    }
}
