//! `PJRT_Error` objects this plugin creates for injected faults.
//!
//! Callers hand every error they get back through `PJRT_Error_Message` / `_GetCode` /
//! `_Destroy` / `_ForEachPayload` of the table, so those hooks must tell ours from the real
//! plugin's. The set of live injected errors answers that without reading foreign memory.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use tpuscope_pjrt::abi::PjrtError;

use crate::counts::{self, Counter};

/// What an injected `PJRT_Error*` points to.
pub struct FaultError {
    pub code: i32,
    pub message: String,
}

/// Addresses of live injected errors.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> MutexGuard<'static, Option<HashSet<usize>>> {
    // A panic while holding the lock leaves the set itself consistent (insert/remove only).
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new injected error, owned by the caller until `PJRT_Error_Destroy`.
pub fn new_error(code: i32, message: String) -> *mut PjrtError {
    let p = Box::into_raw(Box::new(FaultError { code, message }));
    live().get_or_insert_with(HashSet::new).insert(p as usize);
    counts::bump(Counter::InjectedErrors);
    p.cast()
}

/// Runs `f` on `err` if it is one of ours (under the lock, so it cannot be destroyed meanwhile).
pub fn with_ours<T>(err: *const PjrtError, f: impl FnOnce(&FaultError) -> T) -> Option<T> {
    if err.is_null() {
        return None;
    }
    let guard = live();
    if !guard.as_ref().is_some_and(|s| s.contains(&(err as usize))) {
        return None;
    }
    // SAFETY: the address is in the live set, so it came from `Box::into_raw` in `new_error`
    // and has not been freed (removal and free happen under this same lock).
    let e = unsafe { &*err.cast::<FaultError>() };
    Some(f(e))
}

/// Frees `err` if it is one of ours; false if it belongs to the real plugin.
pub fn destroy_if_ours(err: *mut PjrtError) -> bool {
    if err.is_null() {
        return false;
    }
    let mut guard = live();
    if !guard.as_mut().is_some_and(|s| s.remove(&(err as usize))) {
        return false;
    }
    // SAFETY: the address was in the live set (it came from `Box::into_raw` in `new_error`) and
    // was just removed under the lock, so this is the only free.
    drop(unsafe { Box::from_raw(err.cast::<FaultError>()) });
    drop(guard);
    counts::bump(Counter::InjectedErrorsDestroyed);
    true
}
