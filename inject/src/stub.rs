//! What the seized thread runs, and the data it runs on: `dlopen`, `dlsym` and the entry called
//! in a row by a few instructions of ours, then the thread's own state given back to it by the
//! kernel (`rt_sigreturn` on a signal frame that holds that state).
//!
//! Why this shape: the thread must never depend on the tracer to get home. A tracer that drives
//! each call itself (each returning to address 0, the fault caught by the tracer) leaves, if it
//! dies mid-call, a thread that faults with nobody to catch it, and the process dies. Here, once
//! started, the thread needs the tracer for nothing: it calls, stores the results on its stack,
//! and returns to its interrupted system call by itself. A live tracer takes it over at the
//! hand-off (a signal the thread sends itself, one the process ignores: reported to a tracer,
//! discarded without one) and restores it exactly as the kernel would have; a dead one is never
//! missed. The code lives in a page of its own in the target (anonymous, read and execute), found
//! again and reused by later injections.
//!
//! The machine code is `tests/fixtures/stub.S`, assembled; a test assembles that file and
//! compares.

use libc::user_regs_struct;

/// The stub's code (x86_64). On entry `rbx` points to the control block and `rsp` is 16-byte
/// aligned below it; it calls `dlopen(library, RTLD_NOW)`, `dlsym(handle, entry)`,
/// `entry(request, reply, reply_cap)` (or `dlerror()` after a failure), stores the status and
/// the value, unblocks the hand-off signal and sends it to its own thread, then `rt_sigreturn`s
/// on the frame at `uc`.
pub const CODE: [u8; 141] = [
    0x48, 0x8b, 0x7b, 0x18, 0xbe, 0x02, 0x00, 0x00, 0x00, 0xff, 0x13, 0x48, 0x89, 0x43, 0x58, 0x48,
    0x85, 0xc0, 0x74, 0x2b, 0x48, 0x89, 0xc7, 0x48, 0x8b, 0x73, 0x20, 0xff, 0x53, 0x08, 0x48, 0x85,
    0xc0, 0x74, 0x26, 0x48, 0x8b, 0x7b, 0x28, 0x48, 0x8b, 0x73, 0x30, 0x48, 0x8b, 0x53, 0x38, 0xff,
    0xd0, 0x48, 0x89, 0x43, 0x58, 0x48, 0xc7, 0x43, 0x50, 0x03, 0x00, 0x00, 0x00, 0xeb, 0x19, 0x48,
    0xc7, 0x43, 0x50, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x08, 0x48, 0xc7, 0x43, 0x50, 0x02, 0x00, 0x00,
    0x00, 0xff, 0x53, 0x10, 0x48, 0x89, 0x43, 0x58, 0xb8, 0x0e, 0x00, 0x00, 0x00, 0xbf, 0x01, 0x00,
    0x00, 0x00, 0x48, 0x8d, 0x73, 0x68, 0x31, 0xd2, 0x41, 0xba, 0x08, 0x00, 0x00, 0x00, 0x0f, 0x05,
    0xb8, 0xea, 0x00, 0x00, 0x00, 0x8b, 0x7b, 0x40, 0x8b, 0x73, 0x44, 0x8b, 0x53, 0x48, 0x0f, 0x05,
    0x48, 0x8b, 0x63, 0x60, 0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x0f, 0x0b,
];

/// Offset in [`CODE`] of the instruction after the hand-off signal's `tgkill`: where the thread
/// stops for a live tracer.
pub const HANDOFF: u64 = 0x80;

/// Follows the code in its page: how a later injection recognises the page as ours.
const MAGIC: &[u8] = b"\0tpuscope inject stub 1\0";

/// The size of the page the stub lives in.
pub const PAGE: u64 = 4096;

/// What the stub page holds: the code, then the mark, padded to whole words (it is written a
/// word at a time).
pub fn page_image() -> Vec<u8> {
    let mut v = CODE.to_vec();
    v.extend_from_slice(MAGIC);
    v.resize(v.len().next_multiple_of(8), 0);
    v
}

/// Whether `bytes`, read from the start of an anonymous executable page, are the stub.
pub fn is_stub_page(bytes: &[u8]) -> bool {
    let image = page_image();
    bytes.get(..image.len()) == Some(image.as_slice())
}

/// The control block: what the stub reads (`rbx`-relative offsets in [`CODE`]) and writes.
mod block {
    pub const DLOPEN: usize = 0;
    pub const DLSYM: usize = 8;
    pub const DLERROR: usize = 16;
    pub const LIBRARY: usize = 24;
    pub const ENTRY: usize = 32;
    pub const REQUEST: usize = 40;
    pub const REPLY: usize = 48;
    pub const REPLY_CAP: usize = 56;
    /// The pid, then the tid (two 32-bit words).
    pub const PID: usize = 64;
    pub const SIGNAL: usize = 72;
    pub const STATUS: usize = 80;
    pub const VALUE: usize = 88;
    pub const UC: usize = 96;
    pub const SIGSET: usize = 104;
    pub const SIZE: usize = 128;
}

/// Below the stack pointer, the System V x86_64 ABI lets a function keep data unannounced.
const RED_ZONE: u64 = 128;
/// The kernel's `struct ucontext` on x86_64: flags, link, `stack_t` (24 bytes), `struct
/// sigcontext` (256 bytes), the 8-byte signal mask.
const UC_SIZE: usize = 304;
const UC_MCONTEXT: usize = 40;
const UC_SIGMASK: usize = 296;
/// `uc_flags`: `UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS` (asm/ucontext.h).
const UC_FLAGS_XSTATE: u64 = 0x7;
const UC_FLAGS_FX: u64 = 0x6;
/// An `ss_flags` mode that is none of 0, `SS_ONSTACK`, `SS_DISABLE`: `rt_sigreturn` then leaves
/// the thread's alternate signal stack as it is (the frame cannot know it).
const SS_FLAGS_UNCHANGED: u64 = 3;
/// `struct _fpx_sw_bytes` in the XSAVE image's software-reserved bytes (asm/sigcontext.h).
const SW_BYTES: usize = 464;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// The legacy FXSAVE area and the XSAVE header: the smallest XSAVE image.
const FXSAVE_SIZE: usize = 512;
const XSAVE_MIN: usize = 576;

/// Kernel-internal return values of an interrupted system call (include/linux/errno.h).
pub const ERESTARTSYS: i64 = 512;
pub const ERESTARTNOINTR: i64 = 513;
pub const ERESTARTNOHAND: i64 = 514;
pub const ERESTART_RESTARTBLOCK: i64 = 516;
const EINTR: i64 = libc::EINTR as i64;

/// The registers with which the thread goes on by itself, as the kernel resumes a thread
/// interrupted in a system call with no handler to run: the call made again (`rip` back over
/// the 2-byte `syscall`), or, for a call the kernel would restart from its restart block —
/// which `rt_sigreturn` always clears — `EINTR`, as after a signal handler.
pub fn resume_by_itself(saved: &user_regs_struct) -> user_regs_struct {
    let mut r = *saved;
    match -(saved.rax as i64) {
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
            r.rax = saved.orig_rax;
            r.rip = saved.rip.wrapping_sub(2);
        }
        ERESTART_RESTARTBLOCK => r.rax = (-EINTR) as u64,
        _ => {}
    }
    r.orig_rax = u64::MAX;
    r
}

/// The XSAVE feature whose state is enabled per process on request (AMX tile data): the
/// kernel counts it in a thread's signal-frame size only when the process asked for it.
const DYNAMIC_FEATURES: u64 = 1 << 18;

/// The floating-point state as a signal frame holds it, and whether it is a full XSAVE image
/// (else the legacy FXSAVE area, from which the kernel restores x87 and SSE only).
///
/// `saved` is ptrace's `NT_X86_XSTATE` image: the XSAVE standard format, its software bytes
/// holding the user XCR0 (as gdb reads it). A frame's software bytes instead say what the
/// image holds (`struct _fpx_sw_bytes`), and a second mark follows the image. `feature` gives
/// the standard-format offset and size of XSAVE feature `i` (CPUID leaf 0xD).
pub fn fpstate_image(saved: &[u8], feature: impl Fn(u32) -> Option<(u32, u32)>) -> (Vec<u8>, bool) {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(saved.get(at..at + 8)?.try_into().ok()?))
    };
    if let (Some(xcr0), Some(in_use)) = (word(SW_BYTES), word(FXSAVE_SIZE))
        && saved.len() >= XSAVE_MIN
        && xcr0 & 0x3 == 0x3
    {
        let features = if in_use & DYNAMIC_FEATURES == 0 {
            xcr0 & !DYNAMIC_FEATURES
        } else {
            xcr0
        };
        let end = (2..64)
            .filter(|i| features & (1 << i) != 0)
            .filter_map(|i| feature(i).map(|(offset, size)| (offset + size) as usize))
            .fold(XSAVE_MIN, usize::max);
        if let Some(image) = saved.get(..end) {
            let mut v = image.to_vec();
            let mut sw = Vec::with_capacity(48);
            sw.extend_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
            sw.extend_from_slice(&(end as u32 + 4).to_le_bytes());
            sw.extend_from_slice(&features.to_le_bytes());
            sw.extend_from_slice(&(end as u32).to_le_bytes());
            sw.resize(48, 0);
            if let Some(slot) = v.get_mut(SW_BYTES..SW_BYTES + 48) {
                slot.copy_from_slice(&sw);
            }
            v.extend_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
            return (v, true);
        }
    }
    let mut v = saved.get(..FXSAVE_SIZE).unwrap_or(saved).to_vec();
    v.resize(FXSAVE_SIZE, 0);
    // No first mark: the kernel reads the area as FXSAVE only.
    if let Some(m) = v.get_mut(SW_BYTES..SW_BYTES + 48) {
        m.fill(0);
    }
    (v, false)
}

/// The offset and size of XSAVE feature `i` in the standard format on this CPU (CPUID leaf 0xD,
/// sub-leaf `i`); `None` for a feature it lacks. The tracer runs on the target's CPU.
pub fn xsave_feature(i: u32) -> Option<(u32, u32)> {
    let r = std::arch::x86_64::__cpuid_count(0xd, i);
    (r.eax != 0).then_some((r.ebx, r.eax))
}

/// The `struct ucontext` that `rt_sigreturn` reads: `regs` (with `rsp`, `rip`, flags and
/// segments), the signal mask, the floating-point state at `fpstate`.
fn ucontext(regs: &user_regs_struct, sigmask: u64, fpstate: u64, xstate: bool) -> Vec<u8> {
    let mut uc = vec![0u8; UC_SIZE];
    let mut put = |at: usize, v: u64| {
        if let Some(s) = uc.get_mut(at..at + 8) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    };
    put(0, if xstate { UC_FLAGS_XSTATE } else { UC_FLAGS_FX });
    put(24, SS_FLAGS_UNCHANGED);
    let sc = UC_MCONTEXT;
    let gprs = [
        regs.r8,
        regs.r9,
        regs.r10,
        regs.r11,
        regs.r12,
        regs.r13,
        regs.r14,
        regs.r15,
        regs.rdi,
        regs.rsi,
        regs.rbp,
        regs.rbx,
        regs.rdx,
        regs.rax,
        regs.rcx,
        regs.rsp,
        regs.rip,
        regs.eflags,
    ];
    for (i, v) in gprs.into_iter().enumerate() {
        put(sc + 8 * i, v);
    }
    // cs, gs, fs, ss: four 16-bit selectors in one word.
    let selectors = (regs.cs & 0xffff)
        | (regs.gs & 0xffff) << 16
        | (regs.fs & 0xffff) << 32
        | (regs.ss & 0xffff) << 48;
    put(sc + 144, selectors);
    put(sc + 184, fpstate);
    put(UC_SIGMASK, sigmask);
    uc
}

/// Where everything goes on the thread's stack, below its red zone (high to low): the
/// floating-point state, the `ucontext` (the return-address slot just below it, as in a signal
/// frame), the control block with the strings and the reply buffer, then the stack the calls
/// run on.
#[derive(Debug, Clone)]
pub struct Layout {
    pub fpstate: u64,
    pub uc: u64,
    /// `uc - 8`: a call made with `rsp` here returns into the word it holds.
    pub return_slot: u64,
    pub block: u64,
    /// The stack pointer the stub starts with (16-byte aligned).
    pub stub_sp: u64,
    library: u64,
    entry: u64,
    request: u64,
    pub reply: u64,
}

/// What the stub is asked to do.
pub struct Calls<'a> {
    pub dlopen: u64,
    pub dlsym: u64,
    pub dlerror: u64,
    pub library: &'a [u8],
    pub entry: &'a [u8],
    pub request: &'a [u8],
    pub reply_cap: usize,
    pub pid: u32,
    pub tid: u32,
    /// The hand-off signal.
    pub signal: i32,
}

impl Layout {
    pub fn new(rsp: u64, fpstate_len: usize, calls: &Calls) -> Self {
        let fpstate = (rsp - RED_ZONE - fpstate_len as u64) & !63;
        let uc = (fpstate - UC_SIZE as u64) & !15;
        let return_slot = uc - 8;
        let data_len = block::SIZE
            + calls.library.len()
            + calls.entry.len()
            + calls.request.len()
            + 3
            + calls.reply_cap;
        let block = (return_slot - data_len as u64) & !15;
        let library = block + block::SIZE as u64;
        let entry = library + calls.library.len() as u64 + 1;
        let request = entry + calls.entry.len() as u64 + 1;
        let reply = request + calls.request.len() as u64 + 1;
        Self {
            fpstate,
            uc,
            return_slot,
            block,
            stub_sp: block,
            library,
            entry,
            request,
            reply,
        }
    }

    /// The signal frame's part: the `ucontext` at [`Layout::uc`] followed, at
    /// [`Layout::fpstate`], by the floating-point image (one write from `uc` on).
    pub fn frame(&self, resume: &user_regs_struct, sigmask: u64, fp: &(Vec<u8>, bool)) -> Vec<u8> {
        let mut bytes = ucontext(resume, sigmask, self.fpstate, fp.1);
        bytes.resize((self.fpstate - self.uc) as usize, 0);
        bytes.extend_from_slice(&fp.0);
        bytes
    }

    /// The control block, strings and a zeroed reply buffer, written at [`Layout::block`].
    pub fn block(&self, calls: &Calls) -> Vec<u8> {
        let mut b = vec![0u8; block::SIZE];
        let mut put = |at: usize, v: u64| {
            if let Some(s) = b.get_mut(at..at + 8) {
                s.copy_from_slice(&v.to_le_bytes());
            }
        };
        put(block::DLOPEN, calls.dlopen);
        put(block::DLSYM, calls.dlsym);
        put(block::DLERROR, calls.dlerror);
        put(block::LIBRARY, self.library);
        put(block::ENTRY, self.entry);
        put(block::REQUEST, self.request);
        put(block::REPLY, self.reply);
        put(block::REPLY_CAP, calls.reply_cap as u64);
        put(
            block::PID,
            u64::from(calls.pid) | u64::from(calls.tid) << 32,
        );
        put(block::SIGNAL, calls.signal as u64);
        put(block::UC, self.uc);
        put(block::SIGSET, 1u64 << (calls.signal - 1));
        for s in [calls.library, calls.entry, calls.request] {
            b.extend_from_slice(s);
            b.push(0);
        }
        b.resize(b.len() + calls.reply_cap, 0);
        b
    }

    /// Where the stub stores its outcome, read back at the hand-off: status, then value.
    pub fn outcome_addr(&self) -> u64 {
        self.block + block::STATUS as u64
    }

    /// The value word alone: the handle after `dlopen`, then the entry's result.
    pub fn value_addr(&self) -> u64 {
        self.block + block::VALUE as u64
    }
}

/// How far the stub got, from the status word it stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `dlopen` failed; the value is `dlerror()`'s text.
    DlopenFailed,
    /// `dlsym` found no entry; the value is `dlerror()`'s text.
    EntryMissing,
    /// The entry returned; the value is its return value.
    Returned,
}

impl Outcome {
    pub fn from_status(status: u64) -> Option<Self> {
        Some(match status {
            1 => Self::DlopenFailed,
            2 => Self::EntryMissing,
            3 => Self::Returned,
            _ => return None,
        })
    }
}

/// Signals whose default action is to be ignored, best first for the hand-off: the process is
/// unlikely to have a handler for them.
const DEFAULT_IGNORED: [i32; 3] = [libc::SIGURG, libc::SIGWINCH, libc::SIGCHLD];

/// A signal the process discards when no tracer is there (no handler: ignored by default or set
/// to `SIG_IGN`), for the hand-off; `None` when it handles all of them.
pub fn handoff_signal(caught: u64, ignored: u64) -> Option<i32> {
    let bit = |s: i32| 1u64 << (s - 1);
    DEFAULT_IGNORED
        .into_iter()
        .find(|&s| caught & bit(s) == 0)
        .or_else(|| {
            (1..=31)
                .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
                .find(|&s| ignored & bit(s) != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> user_regs_struct {
        let mut r = zeroed();
        r.rip = 0x7f00_0000_1002;
        r.orig_rax = 202;
        r.rax = (-ERESTARTSYS) as u64;
        r.rsp = 0x7ffd_0000_1008;
        r.cs = 0x33;
        r.ss = 0x2b;
        r
    }

    fn zeroed() -> user_regs_struct {
        user_regs_struct {
            r15: 0,
            r14: 0,
            r13: 0,
            r12: 0,
            rbp: 0,
            rbx: 0,
            r11: 0,
            r10: 0,
            r9: 0,
            r8: 0,
            rax: 0,
            rcx: 0,
            rdx: 0,
            rsi: 0,
            rdi: 0,
            orig_rax: 0,
            rip: 0,
            cs: 0,
            eflags: 0,
            rsp: 0,
            ss: 0,
            fs_base: 0,
            gs_base: 0,
            ds: 0,
            es: 0,
            fs: 0,
            gs: 0,
        }
    }

    #[test]
    fn a_restartable_call_is_made_again_and_a_restart_block_becomes_eintr() {
        let r = resume_by_itself(&regs());
        assert_eq!(
            (r.rip, r.rax, r.orig_rax),
            (0x7f00_0000_1000, 202, u64::MAX)
        );
        let mut sleeping = regs();
        sleeping.rax = (-ERESTART_RESTARTBLOCK) as u64;
        let r = resume_by_itself(&sleeping);
        assert_eq!((r.rip, r.rax as i64), (0x7f00_0000_1002, -4));
        let mut eintr = regs();
        eintr.rax = (-4i64) as u64;
        assert_eq!(resume_by_itself(&eintr).rax as i64, -4);
    }

    #[test]
    fn the_layout_is_aligned_below_the_red_zone_and_nothing_overlaps() {
        let calls = Calls {
            dlopen: 1,
            dlsym: 2,
            dlerror: 3,
            library: b"/x/libc.so",
            entry: b"e",
            request: b"abc",
            reply_cap: 100,
            pid: 10,
            tid: 11,
            signal: libc::SIGURG,
        };
        let l = Layout::new(0x7ffd_0000_1008, 1028, &calls);
        assert_eq!(l.fpstate % 64, 0);
        assert!(l.fpstate + 1028 <= 0x7ffd_0000_1008 - RED_ZONE);
        assert_eq!(l.uc % 16, 0);
        assert!(l.uc + UC_SIZE as u64 <= l.fpstate);
        assert_eq!(l.return_slot % 16, 8, "a function sees rsp ≡ 8 (mod 16)");
        assert_eq!(l.stub_sp % 16, 0);
        let block = l.block(&calls);
        assert!(l.block + block.len() as u64 <= l.return_slot);
        assert_eq!(
            &block[l.library as usize - l.block as usize..][..11],
            b"/x/libc.so\0"
        );
        assert_eq!(l.reply + 100, l.block + block.len() as u64);
        assert_eq!(block[block::SIGSET..][..8], (1u64 << 22).to_le_bytes());
    }

    #[test]
    fn the_frame_holds_the_registers_where_the_kernel_reads_them() {
        let calls = Calls {
            dlopen: 0,
            dlsym: 0,
            dlerror: 0,
            library: b"",
            entry: b"",
            request: b"",
            reply_cap: 1,
            pid: 1,
            tid: 1,
            signal: libc::SIGURG,
        };
        // x87, SSE, AVX (576 + 256) and PKRU (at 2688, 8 bytes) enabled; AVX in use.
        let mut xsave = vec![0u8; 2696];
        xsave[SW_BYTES..SW_BYTES + 8].copy_from_slice(&0x207u64.to_le_bytes());
        xsave[FXSAVE_SIZE..FXSAVE_SIZE + 8].copy_from_slice(&0x6u64.to_le_bytes());
        let table = |i: u32| match i {
            2 => Some((576, 256)),
            9 => Some((2688, 8)),
            _ => None,
        };
        let fp = fpstate_image(&xsave, table);
        assert!(fp.1);
        assert_eq!(fp.0.len(), 2700);
        let word = |v: &[u8], at: usize| u32::from_le_bytes(v[at..at + 4].try_into().unwrap());
        assert_eq!(word(&fp.0, SW_BYTES), FP_XSTATE_MAGIC1);
        assert_eq!(word(&fp.0, SW_BYTES + 4), 2700, "extended size");
        assert_eq!(word(&fp.0, SW_BYTES + 8), 0x207, "features");
        assert_eq!(word(&fp.0, SW_BYTES + 16), 2696, "state size");
        assert_eq!(fp.0[2696..], FP_XSTATE_MAGIC2.to_le_bytes());
        // AMX tile data enabled but not in use: left out, as the kernel sizes such a frame.
        xsave[SW_BYTES..SW_BYTES + 8].copy_from_slice(&(0x207u64 | 3 << 17).to_le_bytes());
        xsave.resize(11008, 0);
        let amx = |i: u32| match i {
            17 => Some((2752, 64)),
            18 => Some((2816, 8192)),
            other => table(other),
        };
        let fp = fpstate_image(&xsave, amx);
        assert_eq!(word(&fp.0, SW_BYTES + 16), 2816);
        let l = Layout::new(0x7ffd_0000_1008, fp.0.len(), &calls);
        let resume = resume_by_itself(&regs());
        let frame = l.frame(&resume, 0x4000, &fp);
        let word = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().unwrap());
        assert_eq!(word(0), UC_FLAGS_XSTATE);
        assert_eq!(word(UC_MCONTEXT + 8 * 13), 202, "rax");
        assert_eq!(word(UC_MCONTEXT + 8 * 16), 0x7f00_0000_1000, "rip");
        assert_eq!(word(UC_MCONTEXT + 8 * 15), 0x7ffd_0000_1008, "rsp");
        assert_eq!(word(UC_MCONTEXT + 144) & 0xffff, 0x33, "cs");
        assert_eq!(word(UC_MCONTEXT + 144) >> 48, 0x2b, "ss");
        assert_eq!(word(UC_MCONTEXT + 184), l.fpstate);
        assert_eq!(word(UC_SIGMASK), 0x4000);
        assert_eq!(frame.len() as u64, l.fpstate - l.uc + fp.0.len() as u64);
        // Without the first mark, the legacy area only, its software bytes cleared.
        let fx = fpstate_image(&[0xaa; 512], table);
        assert!(!fx.1);
        assert_eq!(fx.0.len(), FXSAVE_SIZE);
        assert_eq!(fx.0[SW_BYTES..SW_BYTES + 4], [0; 4]);
    }

    #[test]
    fn the_handoff_signal_is_one_the_process_does_not_handle() {
        let bit = |s: i32| 1u64 << (s - 1);
        assert_eq!(handoff_signal(0, 0), Some(libc::SIGURG));
        assert_eq!(handoff_signal(bit(libc::SIGURG), 0), Some(libc::SIGWINCH));
        let all = bit(libc::SIGURG) | bit(libc::SIGWINCH) | bit(libc::SIGCHLD);
        assert_eq!(handoff_signal(all, bit(libc::SIGPIPE)), Some(libc::SIGPIPE));
        assert_eq!(handoff_signal(all, 0), None);
    }

    #[test]
    fn the_page_image_is_recognised() {
        let mut page = page_image();
        page.resize(PAGE as usize, 0);
        assert!(is_stub_page(&page));
        page[3] ^= 1;
        assert!(!is_stub_page(&page));
        assert_eq!(CODE[HANDOFF as usize..][..4], [0x48, 0x8b, 0x63, 0x60]);
    }

    /// The bytes above are `tests/fixtures/stub.S` assembled (needs `cc`).
    #[test]
    fn the_code_is_the_assembled_source() {
        use object::{Object, ObjectSection};
        let dir = tempfile::tempdir().unwrap();
        let obj = dir.path().join("stub.o");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stub.S");
        let status = std::process::Command::new("cc")
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .expect("cc did not run");
        assert!(status.success());
        let bytes = std::fs::read(&obj).unwrap();
        let file = object::File::parse(bytes.as_slice()).unwrap();
        let text = file.section_by_name(".text").unwrap().data().unwrap();
        assert_eq!(text, CODE.as_slice());
    }
}
