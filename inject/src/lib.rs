//! tpuscope's injector: loads a library into a running process of the same user and calls one
//! function of it, without gdb, and finds the PJRT plugins a process has mapped.
//!
//! How [`inject`] works (x86_64 Linux, glibc):
//! 1. [`check_target`]: the process exists, is a process (not one of its threads), is no zombie,
//!    runs as our uid, is x86_64.
//! 2. `dlopen`, `dlsym`, `dlerror` and `mmap` are found in the target's libc (glibc >= 2.34) or
//!    libdl (the library read through /proc/PID/root, its load base from /proc/PID/maps), and
//!    libc's signal-return sequence (`__restore_rt`) in its code.
//! 3. ONE thread is seized (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`; the others keep running): one
//!    parked in a blocking system call (futex, epoll, poll, sleep, read ...), so it holds no
//!    user-space lock of malloc or the loader. Its registers tell whether it really was. One
//!    whose call the kernel restarts from its restart block (a timed sleep) is taken last.
//! 4. Its state (general registers, XSAVE area, signal mask) is saved, and written on its stack
//!    below the red zone as a signal frame that resumes its system call. The stub (`stub.rs`: a
//!    few instructions in a page of their own, mapped by calling `mmap` in the thread the first
//!    time, found again later) calls `dlopen`, `dlsym` and the entry, then `rt_sigreturn`s on
//!    that frame. So from its first injected instruction the thread needs the tracer for
//!    nothing: a tracer killed at any instant leaves it running its own code again.
//! 5. A live tracer takes the thread at the stub's hand-off (a signal the process ignores, sent
//!    to itself: reported to a tracer, discarded otherwise), reads the results, restores every
//!    register and the mask exactly as saved (so the kernel restarts the interrupted call as it
//!    would have, e.g. a sleep continues), and detaches — on every path (a guard), also after a
//!    timeout, when the calls are abandoned where they are. Signals for the thread are delivered
//!    at once while it runs the calls.
//!
//! All `unsafe` lives in `sys`.

mod elf;
mod plugins;
mod procfs;
mod remote;
mod stub;
#[allow(unsafe_code)]
mod sys;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;

pub use plugins::PluginScan;

/// The largest reply buffer an entry point may fill (it lives on the target thread's stack).
pub const MAX_REPLY: usize = 4096;

/// A process that [`check_target`] found fit to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInfo {
    pub pid: u32,
    pub uid: u32,
    /// Its command line (arguments joined by spaces).
    pub command: String,
    /// Field 22 of /proc/PID/stat: with the pid, names the process even if the pid is reused.
    pub start_time_ticks: u64,
}

/// A PJRT plugin mapped in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedPlugin {
    /// As the process sees it (inside its mount namespace).
    pub path: PathBuf,
    /// It also defines `tpuscope_attach`: it is tpuscope's collector.
    pub is_tpuscope: bool,
}

/// What to load and call.
#[derive(Debug, Clone)]
pub struct InjectRequest<'a> {
    /// The library to `dlopen` (a path the TARGET can open).
    pub library: &'a Path,
    /// The function to call: `int entry(const char* request, char* reply, size_t reply_cap)`.
    pub entry: &'a str,
    /// Passed NUL-terminated as `request` (so it must hold no NUL).
    pub request: &'a [u8],
    /// Size of the reply buffer, at most [`MAX_REPLY`].
    pub reply_cap: usize,
    /// The bound on each wait for the target (the stop, each call).
    pub timeout: Duration,
}

/// What the injected entry point returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The entry point's return value.
    pub ret: i32,
    /// The NUL-terminated string it wrote into the reply buffer.
    pub reply: String,
    /// The thread that ran the calls.
    pub thread: u32,
    /// How long that thread was stopped (from the interrupt stop to its detach).
    pub stall: Duration,
}

/// Why an attach or injection failed; each message says what the user can do.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("process {pid} does not exist")]
    NoSuchProcess { pid: u32 },
    #[error("{tid} is a thread of process {pid}, not a process: attach to {pid}")]
    ThreadOfProcess { tid: u32, pid: u32 },
    #[error("process {pid} is a zombie: it has exited and waits for its parent to reap it")]
    Zombie { pid: u32 },
    #[error("process {pid} exited during the attach")]
    TargetExited { pid: u32 },
    #[error(
        "process {pid} runs as uid {target_uid}, tpuscope as uid {our_uid}: tpuscope attaches only to \
         processes of its own user; run it as uid {target_uid}"
    )]
    OtherUser {
        pid: u32,
        target_uid: u32,
        our_uid: u32,
    },
    #[error("attaching is supported for x86_64 processes only ({what})")]
    Unsupported { what: String },
    #[error(
        "ptrace is not permitted: kernel.yama.ptrace_scope is 1; run as root / with CAP_SYS_PTRACE, or \
         `echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`, or start the job under `tpuscope run`"
    )]
    YamaRestricted,
    #[error(
        "ptrace is not permitted: kernel.yama.ptrace_scope is 2 (admin-only attach); run tpuscope as root \
         or with CAP_SYS_PTRACE, or start the job under `tpuscope run`"
    )]
    YamaAdminOnly,
    #[error(
        "ptrace is disabled: kernel.yama.ptrace_scope is 3 (no attach until reboot); start the job under \
         `tpuscope run` instead"
    )]
    YamaDisabled,
    #[error(
        "ptrace of process {pid} was refused and tpuscope lacks CAP_SYS_PTRACE (the process may be \
         non-dumpable, e.g. setuid); run as root / with CAP_SYS_PTRACE, or start the job under `tpuscope run`"
    )]
    NoCapSysPtrace { pid: u32 },
    #[error(
        "ptrace of process {pid} was refused although tpuscope may trace it: blocked by the container's \
         seccomp profile or a security module (docker: --cap-add SYS_PTRACE --security-opt \
         seccomp=unconfined; Kubernetes: securityContext.capabilities.add [SYS_PTRACE]), or start the job \
         under `tpuscope run`"
    )]
    PtraceBlocked { pid: u32 },
    #[error(
        "process {pid} is already traced by process {tracer} (a debugger or profiler); detach it and retry"
    )]
    AlreadyTraced { pid: u32, tracer: u32 },
    #[error(
        "process {pid} is stopped (job control: Ctrl-Z or SIGSTOP); resume it with `kill -CONT {pid}` and retry"
    )]
    ProcessStopped { pid: u32 },
    #[error(
        "no thread of process {pid} was parked in a system call for {waited:?} (all busy in user code); \
         nothing was changed, retry in a moment (a busy single-threaded process can be attached only while \
         it waits: sleep, I/O, a lock)"
    )]
    NoParkedThread { pid: u32, waited: Duration },
    #[error(
        "process {pid} has no dlopen/dlsym/dlerror in a mapped libc.so.6 or libdl.so.2 (not a dynamically \
         linked glibc program?)"
    )]
    NoLoader { pid: u32 },
    #[error("process {pid} could not load {library}: {message}")]
    DlopenFailed {
        pid: u32,
        library: PathBuf,
        message: String,
    },
    #[error("{library} has no function `{entry}`: {message}")]
    EntryMissing {
        library: PathBuf,
        entry: String,
        message: String,
    },
    #[error(
        "the injected call to {call} crashed in thread {tid} of process {pid} ({signal} at {rip:#x}); the \
         thread's registers were restored and it was detached, but the process may be damaged"
    )]
    CallCrashed {
        pid: u32,
        tid: u32,
        call: String,
        rip: u64,
        signal: &'static str,
    },
    #[error(
        "process {pid} handles every signal tpuscope could use to take its thread back (SIGURG, \
         SIGWINCH, SIGCHLD, and none is ignored); nothing was changed; start the job under `tpuscope run`"
    )]
    NoHandoffSignal { pid: u32 },
    #[error(
        "could not map tpuscope's code page in process {pid} (mmap: {errno}); the thread was restored \
         and detached; a policy may forbid executable memory (SELinux execmem): start the job under \
         `tpuscope run`"
    )]
    StubPage { pid: u32, errno: Errno },
    #[error(
        "the injected call to {call} in thread {tid} of process {pid} did not return within {timeout:?}; \
         the thread was interrupted, its registers restored and it was detached"
    )]
    TimedOut {
        pid: u32,
        tid: u32,
        call: String,
        timeout: Duration,
    },
    #[error(
        "thread {tid} of process {pid} did not stop within {timeout:?}; it was detached untouched"
    )]
    StopTimedOut {
        pid: u32,
        tid: u32,
        timeout: Duration,
    },
    #[error("invalid injection request: {0}")]
    InvalidRequest(String),
    #[error("{what} (process {pid}): {errno}")]
    Ptrace {
        pid: u32,
        what: &'static str,
        errno: Errno,
    },
    #[error("reading /proc for process {pid}: {source}")]
    Proc { pid: u32, source: std::io::Error },
}

impl InjectError {
    /// A failed read of /proc/PID/...: the process is gone, or something else went wrong.
    fn from_proc(pid: u32, e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) {
            Self::NoSuchProcess { pid }
        } else {
            Self::Proc { pid, source: e }
        }
    }
}

/// Checks a target before anything intrusive: it exists, is no zombie, has the same real and
/// effective uid as we have (else [`InjectError::OtherUser`], even for root), and is x86_64
/// (else [`InjectError::Unsupported`]).
pub fn check_target(pid: u32) -> Result<TargetInfo, InjectError> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Err(InjectError::Unsupported {
            what: format!("tpuscope was built for {}", std::env::consts::ARCH),
        });
    }
    if pid == 0 || i32::try_from(pid).is_err() {
        return Err(InjectError::NoSuchProcess { pid });
    }
    let stat =
        procfs::stat(&format!("/proc/{pid}/stat")).map_err(|e| InjectError::from_proc(pid, e))?;
    // /proc/TID exists for every thread too (unlisted): a thread id names part of a process.
    let tgid = procfs::tgid(pid).map_err(|e| InjectError::from_proc(pid, e))?;
    if tgid != pid {
        return Err(InjectError::ThreadOfProcess {
            tid: pid,
            pid: tgid,
        });
    }
    if matches!(stat.state, 'Z' | 'X' | 'x') {
        return Err(InjectError::Zombie { pid });
    }
    let (ruid, euid) = procfs::uids(pid).map_err(|e| InjectError::from_proc(pid, e))?;
    let (our_ruid, our_euid) = procfs::own_uids().map_err(|source| InjectError::Proc {
        pid: std::process::id(),
        source,
    })?;
    if ruid != our_ruid || euid != our_euid || ruid != euid {
        return Err(InjectError::OtherUser {
            pid,
            target_uid: if ruid == our_ruid { euid } else { ruid },
            our_uid: our_euid,
        });
    }
    let (is_64, machine) = procfs::exe_machine(pid).map_err(|e| InjectError::from_proc(pid, e))?;
    if !is_64 || machine != object::elf::EM_X86_64 {
        return Err(InjectError::Unsupported {
            what: format!("process {pid} is an ELF of machine {machine}, 64-bit: {is_64}"),
        });
    }
    Ok(TargetInfo {
        pid,
        uid: ruid,
        command: procfs::command(pid, &stat.comm),
        start_time_ticks: stat.start_time_ticks,
    })
}

/// The PJRT plugins mapped in the process (from /proc/PID/maps): every mapped ELF shared object
/// whose dynamic symbol table defines `GetPjrtApi`; `is_tpuscope` when it also defines
/// `tpuscope_attach` (tpuscope's collector). To scan many processes, keep one [`PluginScan`]:
/// it reads each file once.
pub fn pjrt_plugins(pid: u32) -> Result<Vec<MappedPlugin>, InjectError> {
    PluginScan::new().plugins(pid)
}

/// Loads `req.library` into the process with `dlopen(RTLD_NOW)`, looks up `req.entry` with
/// `dlsym` and calls `int entry(const char* request, char* reply, size_t reply_cap)` on one of
/// the target's threads parked in a system call. Returns the entry's int, the NUL-terminated
/// reply it wrote, the thread used and how long that thread was stopped.
///
/// The library stays loaded. The thread is never left stopped: every wait is bounded by
/// `req.timeout` and every path restores its registers and detaches it.
///
/// SIGINT, SIGTERM and SIGHUP are blocked in the calling thread meanwhile (so Ctrl-C cannot
/// kill tpuscope with the target mid-call), and delivered after. The mask is per thread: call
/// this before starting other threads, or accept that they may take such a signal meanwhile.
/// The calling thread becomes the tracer; do not call it concurrently for the same pid.
pub fn inject(pid: u32, req: &InjectRequest) -> Result<Injected, InjectError> {
    if req.request.contains(&0) {
        return Err(InjectError::InvalidRequest(
            "the request holds a NUL byte".into(),
        ));
    }
    if req.reply_cap == 0 || req.reply_cap > MAX_REPLY {
        return Err(InjectError::InvalidRequest(format!(
            "reply_cap {} is not within 1..={MAX_REPLY}",
            req.reply_cap
        )));
    }
    if req.entry.is_empty() || req.entry.contains('\0') {
        return Err(InjectError::InvalidRequest(
            "the entry name is empty or holds a NUL".into(),
        ));
    }
    use std::os::unix::ffi::OsStrExt;
    if req.library.as_os_str().as_bytes().contains(&0) {
        return Err(InjectError::InvalidRequest(
            "the library path holds a NUL byte".into(),
        ));
    }
    check_target(pid)?;
    let _mask = remote::BlockedSignals::block();
    let loader = remote::Loader::find(pid)?;
    remote::run(pid, &loader, req)
}
