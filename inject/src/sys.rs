//! The ptrace requests nix has no safe wrapper for: the XSAVE register set and the signal mask of
//! a stopped tracee, and the bytes of its FXSAVE area. All `unsafe` of the crate is here.

use nix::errno::Errno;

/// `NT_X86_XSTATE` (linux/elf.h): the whole XSAVE area (x87, SSE, AVX, AVX-512, AMX state).
const NT_X86_XSTATE: usize = 0x202;
/// Larger than any XSAVE area the kernel exposes today (AMX tile data brings it to ~11 KiB); the
/// kernel reports the real size back in `iov_len`.
const XSTATE_MAX: usize = 32 << 10;

/// The XSAVE area of a ptrace-stopped thread, as many bytes as the kernel filled.
pub fn get_xstate(tid: i32) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; XSTATE_MAX];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: PTRACE_GETREGSET writes at most `iov.iov_len` bytes into `iov.iov_base`, which
    // points into `buf` (alive and exclusively borrowed for the call), and updates `iov_len`.
    let ret = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            NT_X86_XSTATE as *mut libc::c_void,
            &mut iov as *mut libc::iovec,
        )
    };
    Errno::result(ret)?;
    buf.truncate(iov.iov_len.min(XSTATE_MAX));
    Ok(buf)
}

/// Writes back an XSAVE area read by [`get_xstate`].
pub fn set_xstate(tid: i32, state: &[u8]) -> Result<(), Errno> {
    let mut copy = state.to_vec();
    let mut iov = libc::iovec {
        iov_base: copy.as_mut_ptr().cast(),
        iov_len: copy.len(),
    };
    // SAFETY: PTRACE_SETREGSET only reads `iov.iov_len` bytes from `iov.iov_base`, which points
    // into `copy`, alive for the call.
    let ret = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGSET,
            tid,
            NT_X86_XSTATE as *mut libc::c_void,
            &mut iov as *mut libc::iovec,
        )
    };
    Errno::result(ret).map(drop)
}

/// The bytes of the legacy FXSAVE area as ptrace's `NT_PRFPREG` gives it (for a signal frame).
pub fn fpregs_bytes(fx: &libc::user_fpregs_struct) -> Vec<u8> {
    let len = std::mem::size_of::<libc::user_fpregs_struct>();
    let mut out = vec![0u8; len];
    // SAFETY: `user_fpregs_struct` is plain data (integers and integer arrays, no padding that
    // matters: every byte is copied as the kernel wrote it); `fx` is a valid reference for `len`
    // bytes and `out` is a distinct buffer of `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (fx as *const libc::user_fpregs_struct).cast::<u8>(),
            out.as_mut_ptr(),
            len,
        );
    }
    out
}

/// `PTRACE_SETSIGMASK` (linux/ptrace.h): the blocked mask of a ptrace-stopped thread.
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;

/// Sets the blocked signal mask of a ptrace-stopped thread (bit `n - 1` for signal `n`).
pub fn set_sigmask(tid: i32, mask: u64) -> Result<(), Errno> {
    let mut m = mask;
    // SAFETY: PTRACE_SETSIGMASK reads `addr` (= 8, the kernel's sigset size) bytes from `data`,
    // which points to `m`, alive for the call.
    let ret = unsafe {
        libc::ptrace(
            PTRACE_SETSIGMASK,
            tid,
            std::mem::size_of::<u64>() as *mut libc::c_void,
            &mut m as *mut u64,
        )
    };
    Errno::result(ret).map(drop)
}
