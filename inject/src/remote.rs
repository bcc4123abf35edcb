//! Function calls made by one seized thread of another process: choosing a thread parked in a
//! system call, saving its state, mapping the stub page when the process has none, starting the
//! stub (`stub.rs`) on the thread's stack, taking the thread back at the hand-off and restoring
//! it as the kernel would have resumed it.
//!
//! At every instant the thread's registers are either its own or lead it back to its own state
//! without the tracer (the stub and the `mmap` call both end in `rt_sigreturn` on a frame that
//! holds it): a tracer killed at any point leaves the target running.

use std::io::{IoSlice, IoSliceMut};
use std::time::{Duration, Instant};

use libc::user_regs_struct;
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::stub::{self, Calls, Layout, Outcome};
use crate::{InjectError, InjectRequest, Injected, procfs, sys};

/// How long to look for a thread parked in a system call before giving up.
const PARK_WINDOW: Duration = Duration::from_secs(2);
/// Pause between two scans of the threads.
const RESCAN_PAUSE: Duration = Duration::from_millis(10);
/// Bound on the stop that ends a timed-out call (the thread runs the injected code).
const STOP_AFTER_TIMEOUT: Duration = Duration::from_secs(1);
const EINTR: i64 = libc::EINTR as i64;
const ENOSYS: i64 = libc::ENOSYS as i64;
/// The longest `dlerror()` text read back.
const MAX_DLERROR: usize = 1024;
/// The most of libc's code read to find its signal-return sequence.
const MAX_TEXT_SCAN: u64 = 64 << 20;
/// glibc's `__restore_rt` (`mov $15, %rax; syscall`) and the shorter encoding (`mov $15, %eax;
/// syscall`): a function returning into either gives the thread the state of the frame above.
const RESTORERS: [&[u8]; 2] = [
    &[0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05],
    &[0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05],
];

/// x86_64 system calls a thread may be interrupted in for the injection: blocking waits, where a
/// thread holds no user-space lock of malloc or the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Park {
    /// Restarted transparently after the interrupt (futex: the usual idle worker thread).
    Futex,
    /// Restarted transparently too.
    Restartable,
    /// Never restarted by the kernel: the program sees EINTR, which it must handle anyway
    /// (a debugger or a stop/continue does the same). Chosen last.
    ReturnsEintr,
}

fn park_kind(nr: u64) -> Option<Park> {
    Some(match nr {
        202 => Park::Futex,
        // read poll select nanosleep accept recvfrom recvmsg wait4 clock_nanosleep pselect6 ppoll accept4
        0 | 7 | 23 | 35 | 43 | 45 | 47 | 61 | 230 | 270 | 271 | 288 => Park::Restartable,
        // rt_sigtimedwait epoll_wait epoll_pwait epoll_pwait2
        128 | 232 | 281 | 441 => Park::ReturnsEintr,
        _ => return None,
    })
}

/// Whether the registers of an interrupt stop show the thread was blocked in an allowed system
/// call (and not stopped in user code, or right after a call had returned).
fn parked(regs: &user_regs_struct) -> bool {
    // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK: the kernel restarts the
    // call when the thread resumes; EINTR for those it never restarts.
    let ret = regs.rax as i64;
    match park_kind(regs.orig_rax) {
        Some(Park::ReturnsEintr) => matches!(ret, -4 | -512 | -513 | -514 | -516),
        Some(_) => matches!(ret, -512 | -513 | -514 | -516),
        None => false,
    }
}

/// Whether the kernel would restart the thread's call from its restart block (a timed sleep or
/// wait): only a live tracer can resume it exactly, so such threads are chosen last.
fn needs_restart_block(regs: &user_regs_struct) -> bool {
    regs.rax as i64 == -stub::ERESTART_RESTARTBLOCK
}

/// SIGINT, SIGTERM and SIGHUP blocked in the calling thread until dropped.
pub struct BlockedSignals(Option<SigSet>);

impl BlockedSignals {
    pub fn block() -> Self {
        let mut set = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(s);
        }
        let mut old = SigSet::empty();
        // Best effort: without it a Ctrl-C may kill us mid-call, as without this guard.
        Self(
            pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old))
                .ok()
                .map(|()| old),
        )
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        }
    }
}

/// What the injection uses in the target: the loader's functions, `mmap`, the signal-return
/// sequence, and the stub page of an earlier injection.
#[derive(Debug, Clone, Copy)]
pub struct Loader {
    dlopen: u64,
    dlsym: u64,
    dlerror: u64,
    mmap: u64,
    /// A `rt_sigreturn` sequence in libc's code (its `__restore_rt`).
    restorer: u64,
    /// The address right after that sequence's `syscall`: where its entry stop is seen.
    restorer_end: u64,
    /// The stub page an earlier injection left in the process.
    stub_page: Option<u64>,
}

impl Loader {
    /// Looks in the target's libc (glibc >= 2.34 defines the loader's functions there), then its
    /// libdl; reads libc's code for the signal-return sequence and the process's anonymous
    /// pages for a stub.
    pub fn find(pid: u32) -> Result<Self, InjectError> {
        let regions = procfs::regions(pid).map_err(|e| InjectError::from_proc(pid, e))?;
        let maps: Vec<procfs::Mapping> = procfs::file_mappings(pid)
            .map_err(|e| InjectError::from_proc(pid, e))?
            .into_iter()
            .filter(|m| m.offset == 0)
            .collect();
        let named = |prefixes: &[&str]| {
            maps.iter()
                .filter(|m| {
                    m.path
                        .file_name()
                        .and_then(|f| f.to_str())
                        .is_some_and(|f| prefixes.iter().any(|p| f.starts_with(p)))
                })
                .cloned()
                .collect::<Vec<_>>()
        };
        let mut seen = std::collections::HashSet::new();
        let mut dl = None;
        let mut mmap = None;
        let mut restorer = None;
        for m in named(&["libc.so", "libc-"])
            .into_iter()
            .chain(named(&["libdl.so", "libdl-"]))
        {
            if !seen.insert((m.dev, m.inode)) {
                continue;
            }
            let file = procfs::target_file(pid, &m.path);
            let Ok(Some(s)) =
                crate::elf::lookup(&file, &["dlopen", "dlsym", "dlerror", "mmap", "mmap64"])
            else {
                continue;
            };
            let base = m.start.wrapping_sub(s.first_load_vaddr & !0xfff);
            let at = |i: usize| {
                s.values
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|v| base.wrapping_add(v))
            };
            if dl.is_none()
                && let (Some(o), Some(y), Some(e)) = (at(0), at(1), at(2))
            {
                dl = Some((o, y, e));
            }
            if mmap.is_none() {
                mmap = at(3).or_else(|| at(4));
            }
            if restorer.is_none() {
                restorer = find_restorer(pid, &regions, m.dev, m.inode)?;
            }
        }
        let (Some((dlopen, dlsym, dlerror)), Some(mmap), Some((restorer, restorer_end))) =
            (dl, mmap, restorer)
        else {
            return Err(InjectError::NoLoader { pid });
        };
        Ok(Self {
            dlopen,
            dlsym,
            dlerror,
            mmap,
            restorer,
            restorer_end,
            stub_page: find_stub_page(pid, &regions),
        })
    }
}

/// The signal-return sequence in the executable mappings of the file `(dev, inode)`: its address
/// and the address after its `syscall`.
fn find_restorer(
    pid: u32,
    regions: &[procfs::Region],
    dev: u64,
    inode: u64,
) -> Result<Option<(u64, u64)>, InjectError> {
    let mut budget = MAX_TEXT_SCAN;
    for r in regions
        .iter()
        .filter(|r| r.executable() && r.dev == dev && r.inode == inode)
    {
        let len = (r.end - r.start).min(budget);
        budget -= len;
        let code = read_mem(pid, r.start, len as usize)?;
        for pattern in RESTORERS {
            if let Some(i) = code.windows(pattern.len()).position(|w| w == pattern) {
                let at = r.start + i as u64;
                return Ok(Some((at, at + pattern.len() as u64)));
            }
        }
    }
    Ok(None)
}

/// The stub page an earlier injection mapped (anonymous, read and execute, one page, holding the
/// stub).
fn find_stub_page(pid: u32, regions: &[procfs::Region]) -> Option<u64> {
    regions
        .iter()
        .filter(|r| r.anonymous() && r.perms == "r-xp" && r.end - r.start == stub::PAGE)
        .find(|r| read_mem(pid, r.start, stub::PAGE as usize).is_ok_and(|b| stub::is_stub_page(&b)))
        .map(|r| r.start)
}

/// Seizes a parked thread, runs the stub on it, takes it back and detaches it.
pub fn run(pid: u32, loader: &Loader, req: &InjectRequest) -> Result<Injected, InjectError> {
    let mut session = attach_parked(pid, req.timeout)?;
    let result = inject_on(&mut session, loader, req);
    let released = session.release();
    let (ret, reply) = result?;
    let stall = released?;
    Ok(Injected {
        ret,
        reply,
        thread: session.tid.as_raw() as u32,
        stall,
    })
}

fn inject_on(
    s: &mut Session,
    loader: &Loader,
    req: &InjectRequest,
) -> Result<(i32, String), InjectError> {
    use std::os::unix::ffi::OsStrExt;
    let tid = s.tid.as_raw() as u32;
    let signals =
        procfs::thread_signals(s.pid, tid).map_err(|e| InjectError::from_proc(s.pid, e))?;
    if signals.shadow_stack {
        return Err(InjectError::Unsupported {
            what: format!(
                "thread {tid} of process {} runs with a shadow stack (x86 CET)",
                s.pid
            ),
        });
    }
    let signal = stub::handoff_signal(signals.caught, signals.ignored)
        .ok_or(InjectError::NoHandoffSignal { pid: s.pid })?;
    let saved = s.saved_regs()?;
    let fp = stub::fpstate_image(s.saved_fp()?, stub::xsave_feature);
    let calls = Calls {
        dlopen: loader.dlopen,
        dlsym: loader.dlsym,
        dlerror: loader.dlerror,
        library: req.library.as_os_str().as_bytes(),
        entry: req.entry.as_bytes(),
        request: req.request,
        reply_cap: req.reply_cap,
        pid: s.pid,
        tid,
        signal,
    };
    let layout = Layout::new(saved.rsp, fp.0.len(), &calls);
    // The way home first: every state the thread is put in from here on ends in this frame.
    let home = stub::resume_by_itself(&saved);
    write_mem(s.pid, layout.uc, &layout.frame(&home, signals.blocked, &fp))?;
    let page = match loader.stub_page {
        Some(page) => page,
        None => s.map_stub_page(loader, &layout)?,
    };
    write_mem(s.pid, layout.block, &layout.block(&calls))?;
    s.run_stub(page, &layout, signal, signals.blocked)?;
    let outcome = read_mem(s.pid, layout.outcome_addr(), 16)?;
    let word = |at: usize| {
        outcome
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let (status, value) = (word(0), word(8));
    match Outcome::from_status(status) {
        Some(Outcome::Returned) => {
            let reply = read_mem(s.pid, layout.reply, req.reply_cap)?;
            let end = reply.iter().position(|&b| b == 0).unwrap_or(reply.len());
            let reply = String::from_utf8_lossy(reply.get(..end).unwrap_or_default()).into_owned();
            // The entry's `int` is the low half of rax.
            Ok((value as u32 as i32, reply))
        }
        Some(Outcome::DlopenFailed) => Err(InjectError::DlopenFailed {
            pid: s.pid,
            library: req.library.to_path_buf(),
            message: dlerror_text(s.pid, value)?,
        }),
        Some(Outcome::EntryMissing) => Err(InjectError::EntryMissing {
            library: req.library.to_path_buf(),
            entry: req.entry.to_string(),
            message: dlerror_text(s.pid, value)?,
        }),
        None => Err(InjectError::InvalidRequest(format!(
            "the stub stopped at its hand-off with status {status} (internal error)"
        ))),
    }
}

fn dlerror_text(pid: u32, text: u64) -> Result<String, InjectError> {
    if text == 0 {
        return Ok("no error text (dlerror returned NULL)".into());
    }
    read_c_string(pid, text, MAX_DLERROR)
}

fn write_mem(pid: u32, addr: u64, bytes: &[u8]) -> Result<(), InjectError> {
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: bytes.len(),
    }];
    match process_vm_writev(Pid::from_raw(pid as i32), &[IoSlice::new(bytes)], &remote) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(mem_error(pid, "writing the target's stack", Errno::EFAULT)),
        Err(e) => Err(mem_error(pid, "writing the target's stack", e)),
    }
}

fn read_mem(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, InjectError> {
    let mut buf = vec![0u8; len];
    let remote = [RemoteIoVec {
        base: addr as usize,
        len,
    }];
    let n = process_vm_readv(
        Pid::from_raw(pid as i32),
        &mut [IoSliceMut::new(&mut buf)],
        &remote,
    )
    .map_err(|e| mem_error(pid, "reading the target's memory", e))?;
    buf.truncate(n);
    Ok(buf)
}

/// A NUL-terminated string of the target, read a page at most at a time (the next page may be
/// unmapped).
fn read_c_string(pid: u32, mut addr: u64, max: usize) -> Result<String, InjectError> {
    let mut out = Vec::new();
    while out.len() < max {
        let to_page_end = 0x1000 - (addr & 0xfff) as usize;
        let chunk = read_mem(pid, addr, to_page_end.min(max - out.len()))?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(chunk.get(..end).unwrap_or_default());
            break;
        }
        if chunk.is_empty() {
            break;
        }
        addr += chunk.len() as u64;
        out.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn mem_error(pid: u32, what: &'static str, errno: Errno) -> InjectError {
    if errno == Errno::ESRCH {
        InjectError::TargetExited { pid }
    } else {
        InjectError::Ptrace { pid, what, errno }
    }
}

/// The error for a refused `PTRACE_SEIZE`: which policy refused it.
fn permission_error(pid: u32) -> InjectError {
    let cap = procfs::have_cap_sys_ptrace();
    match procfs::yama_ptrace_scope() {
        Some(3) => InjectError::YamaDisabled,
        Some(2) if !cap => InjectError::YamaAdminOnly,
        Some(1) if !cap => InjectError::YamaRestricted,
        _ if !cap => InjectError::NoCapSysPtrace { pid },
        _ => InjectError::PtraceBlocked { pid },
    }
}

fn process_state(pid: u32) -> Option<char> {
    procfs::stat(&format!("/proc/{pid}/stat"))
        .ok()
        .map(|s| s.state)
}

fn alive(pid: u32) -> bool {
    process_state(pid).is_some_and(|s| !matches!(s, 'Z' | 'X' | 'x'))
}

/// The threads parked in an allowed system call, best first: futex before other restartable
/// waits before those that return EINTR; workers before the main thread.
fn candidates(pid: u32) -> Vec<u32> {
    let mut found: Vec<(Park, bool, u32)> = procfs::threads(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|tid| {
            let st = procfs::stat(&format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            if st.state != 'S' {
                return None;
            }
            let kind = park_kind(procfs::blocked_syscall(pid, tid)?)?;
            Some((kind, tid == pid, tid))
        })
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, _, tid)| tid).collect()
}

/// Seizes a thread parked in a system call, rescanning for [`PARK_WINDOW`]. A thread whose call
/// the kernel restarts from its restart block is taken only when no other is parked.
fn attach_parked(pid: u32, timeout: Duration) -> Result<Session, InjectError> {
    let started = Instant::now();
    loop {
        match process_state(pid) {
            None | Some('Z' | 'X' | 'x') => return Err(InjectError::TargetExited { pid }),
            // Stopped by job control: no thread runs to be taken.
            Some('T') => return Err(InjectError::ProcessStopped { pid }),
            Some(_) => {}
        }
        let found = candidates(pid);
        for any in [false, true] {
            for &tid in &found {
                if let Some(s) = Session::seize_parked(pid, tid, timeout, any)? {
                    return Ok(s);
                }
            }
        }
        if started.elapsed() >= PARK_WINDOW {
            return Err(InjectError::NoParkedThread {
                pid,
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(RESCAN_PAUSE);
    }
}

/// What a wait on the seized thread saw.
enum Event {
    /// The interrupt stop (`PTRACE_EVENT_STOP` with SIGTRAP).
    Interrupt,
    /// A group stop (SIGSTOP, SIGTSTP ...).
    GroupStop,
    /// A system call's entry or exit (`PTRACE_SYSCALL`).
    Syscall,
    /// A signal about to be delivered.
    Signal(Signal),
    /// The thread or the process is gone.
    Exited,
}

/// Where the stopped thread is: inside the kernel's signal delivery (the interrupt stop, a
/// signal's stop), where restoring its saved registers lets the kernel restart its call as it
/// would have; or at a system call's entry, where the restart is done by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    InSignalDelivery,
    AtSyscallEntry,
}

/// The floating-point and vector state of the thread, as the kernel's regset gives it.
enum FpState {
    /// `NT_X86_XSTATE`: the whole XSAVE image.
    Xsave(Vec<u8>),
    /// `NT_PRFPREG`: the legacy FXSAVE area (no XSAVE on this machine).
    Fx(Box<libc::user_fpregs_struct>, Vec<u8>),
}

/// One seized thread. Dropping it restores the thread and detaches it.
struct Session {
    pid: u32,
    tid: Pid,
    /// The registers at the interrupt stop, once the thread proved parked (restored at the end).
    saved: Option<(user_regs_struct, FpState)>,
    /// Continued (into the stub or a call) and not stopped since.
    running: bool,
    /// Where it is stopped, when it is.
    stop: Stop,
    /// A signal was delivered to the thread while it ran our calls: a blocking system call of
    /// theirs may have replaced the kernel's restart block of the thread's own.
    interrupted_call: bool,
    stopped_at: Instant,
    timeout: Duration,
    released: bool,
    /// The thread's signal mask, put back at the release once the stub ran (it unblocks the
    /// hand-off signal).
    mask: Option<u64>,
}

impl Session {
    /// Seizes and stops `tid`; `None` (and detached again) when it turned out not to be parked
    /// in an allowed system call (or, unless `any`, parked in one that needs its restart block),
    /// or is gone.
    fn seize_parked(
        pid: u32,
        tid: u32,
        timeout: Duration,
        any: bool,
    ) -> Result<Option<Self>, InjectError> {
        let t = Pid::from_raw(tid as i32);
        match ptrace::seize(t, Options::PTRACE_O_TRACESYSGOOD) {
            Ok(()) => {}
            Err(Errno::ESRCH) => return Ok(None),
            Err(Errno::EPERM) => {
                return Err(match procfs::tracer(pid, tid) {
                    Some(tracer) => InjectError::AlreadyTraced { pid, tracer },
                    None => permission_error(pid),
                });
            }
            Err(errno) => {
                return Err(InjectError::Ptrace {
                    pid,
                    what: "PTRACE_SEIZE",
                    errno,
                });
            }
        }
        // Detaches on every early return below.
        let mut s = Self {
            pid,
            tid: t,
            saved: None,
            running: true,
            stop: Stop::InSignalDelivery,
            interrupted_call: false,
            stopped_at: Instant::now(),
            timeout,
            released: false,
            mask: None,
        };
        if let Err(errno) = ptrace::interrupt(t) {
            return Err(s.gone_or(errno, "PTRACE_INTERRUPT"));
        }
        s.stop(Instant::now() + timeout, false)?;
        s.stopped_at = Instant::now();
        let regs = ptrace::getregs(t).map_err(|e| s.gone_or(e, "PTRACE_GETREGS"))?;
        if !parked(&regs) || (!any && needs_restart_block(&regs)) {
            // In user code (or its call had just returned), or a better thread may be parked:
            // leave it untouched.
            s.released = true;
            let _ = ptrace::detach(t, None);
            return Ok(None);
        }
        let fp = match sys::get_xstate(tid as i32) {
            Ok(x) => FpState::Xsave(x),
            Err(_) => {
                let fx = ptrace::getregset::<ptrace::regset::NT_PRFPREG>(t)
                    .map_err(|e| s.gone_or(e, "PTRACE_GETREGSET"))?;
                let bytes = sys::fpregs_bytes(&fx);
                FpState::Fx(Box::new(fx), bytes)
            }
        };
        s.saved = Some((regs, fp));
        Ok(Some(s))
    }

    /// The general registers saved at the interrupt stop.
    fn saved_regs(&self) -> Result<user_regs_struct, InjectError> {
        self.saved
            .as_ref()
            .map(|(r, _)| *r)
            .ok_or_else(Self::not_seized)
    }

    /// The floating-point state saved at the interrupt stop, as bytes.
    fn saved_fp(&self) -> Result<&[u8], InjectError> {
        match &self.saved {
            Some((_, FpState::Xsave(x))) => Ok(x),
            Some((_, FpState::Fx(_, b))) => Ok(b),
            None => Err(Self::not_seized()),
        }
    }

    fn not_seized() -> InjectError {
        InjectError::InvalidRequest("no thread is seized (internal error)".into())
    }

    fn gone_or(&self, errno: Errno, what: &'static str) -> InjectError {
        if errno == Errno::ESRCH && !alive(self.pid) {
            InjectError::TargetExited { pid: self.pid }
        } else {
            InjectError::Ptrace {
                pid: self.pid,
                what,
                errno,
            }
        }
    }

    /// Waits for the next event of the thread, polling until `deadline` (`None` past it).
    fn wait(&self, deadline: Instant) -> Result<Option<Event>, InjectError> {
        let mut pause = Duration::from_micros(20);
        loop {
            let status = waitpid(self.tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG));
            return Ok(Some(match status {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(pause.min(deadline - now));
                    pause = (pause * 2).min(Duration::from_millis(1));
                    continue;
                }
                Ok(WaitStatus::PtraceEvent(_, Signal::SIGTRAP, _)) => Event::Interrupt,
                Ok(WaitStatus::PtraceEvent(..)) => Event::GroupStop,
                Ok(WaitStatus::PtraceSyscall(_)) => Event::Syscall,
                Ok(WaitStatus::Stopped(_, sig)) => Event::Signal(sig),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::ECHILD) => {
                    Event::Exited
                }
                Ok(_) => continue,
                Err(errno) => {
                    return Err(InjectError::Ptrace {
                        pid: self.pid,
                        what: "waitpid",
                        errno,
                    });
                }
            }));
        }
    }

    /// Waits for the interrupt stop asked for. Signals met on the way are delivered. A group
    /// stop ends the wait too (`in_call`: the thread runs our code, which it may then be
    /// restored from; else the process is stopped and nothing was changed).
    fn stop(&mut self, deadline: Instant, in_call: bool) -> Result<(), InjectError> {
        loop {
            match self.wait(deadline)? {
                Some(Event::Interrupt) => {
                    self.halted(Stop::InSignalDelivery);
                    return Ok(());
                }
                Some(Event::GroupStop) if in_call => {
                    self.halted(Stop::InSignalDelivery);
                    return Ok(());
                }
                Some(Event::GroupStop) => {
                    self.halted(Stop::InSignalDelivery);
                    return Err(InjectError::ProcessStopped { pid: self.pid });
                }
                Some(Event::Syscall) => {
                    // Asked for while it ran under PTRACE_SYSCALL: stopped at a call's entry or
                    // exit — good enough to be restored from.
                    self.halted(Stop::AtSyscallEntry);
                    return Ok(());
                }
                Some(Event::Signal(sig)) => {
                    self.interrupted_call |= in_call;
                    ptrace::cont(self.tid, sig).map_err(|e| self.gone_or(e, "PTRACE_CONT"))?;
                }
                Some(Event::Exited) => {
                    self.released = true;
                    return Err(InjectError::TargetExited { pid: self.pid });
                }
                None => {
                    return Err(InjectError::StopTimedOut {
                        pid: self.pid,
                        tid: self.tid.as_raw() as u32,
                        timeout: self.timeout,
                    });
                }
            }
        }
    }

    fn halted(&mut self, stop: Stop) {
        self.running = false;
        self.stop = stop;
    }

    fn resume(&mut self, regs: user_regs_struct, trace_syscalls: bool) -> Result<(), InjectError> {
        ptrace::setregs(self.tid, regs).map_err(|e| self.gone_or(e, "PTRACE_SETREGS"))?;
        if trace_syscalls {
            ptrace::syscall(self.tid, None).map_err(|e| self.gone_or(e, "PTRACE_SYSCALL"))?;
        } else {
            ptrace::cont(self.tid, None).map_err(|e| self.gone_or(e, "PTRACE_CONT"))?;
        }
        self.running = true;
        Ok(())
    }

    /// A signal stop while our code runs: a fault of that code (`Err`), or a signal for the
    /// thread, delivered at once.
    fn deliver_or_crash(
        &mut self,
        sig: Signal,
        call: &str,
        syscalls: bool,
    ) -> Result<(), InjectError> {
        let faults = [
            Signal::SIGSEGV,
            Signal::SIGBUS,
            Signal::SIGILL,
            Signal::SIGFPE,
            Signal::SIGTRAP,
        ];
        // Sent by the kernel for an instruction of this thread (si_code > 0), not by kill.
        if faults.contains(&sig) && ptrace::getsiginfo(self.tid).is_ok_and(|i| i.si_code > 0) {
            self.halted(Stop::InSignalDelivery);
            let rip = ptrace::getregs(self.tid).map_or(0, |r| r.rip);
            return Err(InjectError::CallCrashed {
                pid: self.pid,
                tid: self.tid.as_raw() as u32,
                call: call.to_string(),
                rip,
                signal: sig.as_str(),
            });
        }
        self.interrupted_call = true;
        let r = if syscalls {
            ptrace::syscall(self.tid, sig)
        } else {
            ptrace::cont(self.tid, sig)
        };
        r.map_err(|e| self.gone_or(e, "PTRACE_CONT"))
    }

    /// The bound ran out while our code ran: stop the thread, to be restored from wherever it is.
    fn timed_out(&mut self, call: &str) -> InjectError {
        self.interrupted_call = true;
        if ptrace::interrupt(self.tid).is_ok()
            && let Err(e) = self.stop(Instant::now() + STOP_AFTER_TIMEOUT, true)
        {
            return e;
        }
        InjectError::TimedOut {
            pid: self.pid,
            tid: self.tid.as_raw() as u32,
            call: call.to_string(),
            timeout: self.timeout,
        }
    }

    /// Maps the stub page: calls the target's `mmap`, returning into libc's signal-return
    /// sequence with the thread's frame above it, and takes the thread at that `rt_sigreturn`'s
    /// entry (left to run, it would give the thread back its own state). Writes the stub in.
    fn map_stub_page(&mut self, loader: &Loader, layout: &Layout) -> Result<u64, InjectError> {
        const SYS_MMAP: u64 = libc::SYS_mmap as u64;
        const SYS_RT_SIGRETURN: u64 = libc::SYS_rt_sigreturn as u64;
        write_mem(self.pid, layout.return_slot, &loader.restorer.to_le_bytes())?;
        let mut regs = self.saved_regs()?;
        regs.rip = loader.mmap;
        regs.rsp = layout.return_slot;
        regs.rdi = 0;
        regs.rsi = stub::PAGE;
        regs.rdx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        regs.rcx = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        regs.r8 = u64::MAX;
        regs.r9 = 0;
        regs.rax = 0;
        // No system call to restart: else the kernel would rewind rip into the call.
        regs.orig_rax = u64::MAX;
        self.resume(regs, true)?;
        let deadline = Instant::now() + self.timeout;
        let mut mapped: Option<u64> = None;
        loop {
            match self.wait(deadline)? {
                Some(Event::Syscall) => {
                    let r =
                        ptrace::getregs(self.tid).map_err(|e| self.gone_or(e, "PTRACE_GETREGS"))?;
                    if r.orig_rax == SYS_RT_SIGRETURN && r.rip == loader.restorer_end {
                        self.halted(Stop::AtSyscallEntry);
                        break;
                    }
                    // The exit of mmap's system call (its entry stop shows -ENOSYS).
                    if r.orig_rax == SYS_MMAP && r.rax as i64 != -ENOSYS {
                        mapped = Some(r.rax);
                    }
                    ptrace::syscall(self.tid, None)
                        .map_err(|e| self.gone_or(e, "PTRACE_SYSCALL"))?;
                }
                Some(Event::Signal(sig)) => self.deliver_or_crash(sig, "mmap", true)?,
                Some(Event::Interrupt | Event::GroupStop) => {
                    ptrace::syscall(self.tid, None)
                        .map_err(|e| self.gone_or(e, "PTRACE_SYSCALL"))?;
                }
                Some(Event::Exited) => {
                    self.released = true;
                    return Err(InjectError::TargetExited { pid: self.pid });
                }
                None => return Err(self.timed_out("mmap")),
            }
        }
        let page = match mapped {
            Some(a) if (a as i64) > 0 && a % stub::PAGE == 0 => a,
            other => {
                return Err(InjectError::StubPage {
                    pid: self.pid,
                    errno: Errno::from_raw(other.map_or(0, |a| -(a as i64)) as i32),
                });
            }
        };
        // The page is read and execute for the thread; the tracer writes through that (as a
        // debugger sets a breakpoint).
        for (i, word) in stub::page_image().chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
            ptrace::write(
                self.tid,
                (page + 8 * i as u64) as ptrace::AddressType,
                w as libc::c_long,
            )
            .map_err(|e| self.gone_or(e, "PTRACE_POKEDATA"))?;
        }
        if !read_mem(self.pid, page, stub::PAGE as usize).is_ok_and(|b| stub::is_stub_page(&b)) {
            return Err(InjectError::StubPage {
                pid: self.pid,
                errno: Errno::EFAULT,
            });
        }
        Ok(page)
    }

    /// Starts the stub and waits for its hand-off, delivering the thread's signals meanwhile.
    fn run_stub(
        &mut self,
        page: u64,
        layout: &Layout,
        signal: i32,
        mask: u64,
    ) -> Result<(), InjectError> {
        self.mask = Some(mask);
        let mut regs = self.saved_regs()?;
        regs.rip = page;
        regs.rsp = layout.stub_sp;
        regs.rbx = layout.block;
        regs.rax = 0;
        regs.orig_rax = u64::MAX;
        self.resume(regs, false)?;
        let deadline = Instant::now() + self.timeout;
        let handoff = page + stub::HANDOFF;
        loop {
            match self.wait(deadline)? {
                Some(Event::Signal(sig)) => {
                    if sig as i32 == signal
                        && ptrace::getregs(self.tid).is_ok_and(|r| r.rip == handoff)
                    {
                        self.halted(Stop::InSignalDelivery);
                        return Ok(());
                    }
                    let call = self.current_call(layout);
                    self.deliver_or_crash(sig, &call, false)?;
                }
                // A group stop or a stray interrupt: the calls go on.
                Some(Event::Interrupt | Event::GroupStop | Event::Syscall) => {
                    ptrace::cont(self.tid, None).map_err(|e| self.gone_or(e, "PTRACE_CONT"))?;
                }
                Some(Event::Exited) => {
                    self.released = true;
                    return Err(InjectError::TargetExited { pid: self.pid });
                }
                None => {
                    let call = self.current_call(layout);
                    return Err(self.timed_out(&call));
                }
            }
        }
    }

    /// Which call the stub is in, for messages: `dlopen` until it stored a handle.
    fn current_call(&self, layout: &Layout) -> String {
        let handle = read_mem(self.pid, layout.value_addr(), 8)
            .ok()
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        if handle == 0 {
            "dlopen"
        } else {
            "dlsym or the entry"
        }
        .to_string()
    }

    /// Restores the thread's state and detaches; returns how long it was stopped. Runs once
    /// (also from `drop`). The signal mask and the floating-point state go back first: until the
    /// general registers follow, the thread would still find its way home through the stub's
    /// frame.
    fn release(&mut self) -> Result<Duration, InjectError> {
        if self.released {
            return Ok(self.stopped_at.elapsed());
        }
        self.released = true;
        if self.running {
            ptrace::interrupt(self.tid).map_err(|e| self.gone_or(e, "PTRACE_INTERRUPT"))?;
            self.stop(Instant::now() + STOP_AFTER_TIMEOUT, true)?;
        }
        let tid = self.tid;
        if let Some(mask) = self.mask {
            sys::set_sigmask(tid.as_raw(), mask)
                .map_err(|e| self.gone_or(e, "PTRACE_SETSIGMASK"))?;
        }
        if let Some((saved, fp)) = &self.saved {
            match fp {
                FpState::Xsave(x) => sys::set_xstate(tid.as_raw(), x)
                    .map_err(|e| self.gone_or(e, "PTRACE_SETREGSET"))?,
                FpState::Fx(f, _) => ptrace::setregset::<ptrace::regset::NT_PRFPREG>(tid, **f)
                    .map_err(|e| self.gone_or(e, "PTRACE_SETREGSET"))?,
            }
            let regs = match self.stop {
                Stop::InSignalDelivery => {
                    let mut r = *saved;
                    // A sleep or timed wait restarts from the thread's restart block, which a
                    // blocking call of ours interrupted by a signal may have replaced: EINTR
                    // instead, as after a signal handler, which callers of those calls handle.
                    if self.interrupted_call && needs_restart_block(saved) {
                        r.rax = (-EINTR) as u64;
                    }
                    r
                }
                Stop::AtSyscallEntry => resume_by_tracer(saved, !self.interrupted_call),
            };
            ptrace::setregs(tid, regs).map_err(|e| self.gone_or(e, "PTRACE_SETREGS"))?;
        }
        ptrace::detach(tid, None).map_err(|e| self.gone_or(e, "PTRACE_DETACH"))?;
        Ok(self.stopped_at.elapsed())
    }
}

/// The registers with which the thread resumes its call when it is restored outside signal
/// delivery (where the kernel would do the restart): the call made again, a restart-block call
/// through `restart_syscall` when that block is still the thread's own, else `EINTR`; the
/// system call the thread stopped at is skipped.
fn resume_by_tracer(saved: &user_regs_struct, restart_block_intact: bool) -> user_regs_struct {
    let mut r = stub::resume_by_itself(saved);
    if restart_block_intact && needs_restart_block(saved) {
        r.rax = libc::SYS_restart_syscall as u64;
        r.rip = saved.rip.wrapping_sub(2);
    }
    r
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.release();
        }
    }
}
