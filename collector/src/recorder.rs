//! The hot path's only dependency: a bounded lock-free queue that hooks push events into, and the
//! counters that say what was dropped. Hooks never block, allocate little, and never do I/O; the
//! writer thread (`writer.rs`) drains the queue.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_queue::ArrayQueue;
use tpuscope_core::RawFrame;
use tpuscope_core::event::Record;

/// A blob (program, optimized HLO, compile options) the writer stores once per hash.
#[derive(Debug)]
pub struct BlobData {
    pub hash: u64,
    pub role: &'static str,
    pub format: String,
    pub data: Vec<u8>,
}

/// What a hook hands to the writer: a record plus the parts the writer interns or fills in.
#[derive(Debug)]
pub struct Event {
    pub record: Record,
    /// A static name the writer copies into the record's name field, so hooks allocate no
    /// `String` for it: the PJRT call of a `Transfer`, `ErrorEvent` or `Compile`, the reason of a
    /// `Sync`. Empty: the record's own field is kept.
    pub name: &'static str,
    /// Element type name the writer copies into `Transfer::dtype` (empty: kept).
    pub dtype: &'static str,
    /// Python stack (innermost first); the writer interns it into the record's `stack` field.
    pub stack: Option<Vec<RawFrame>>,
    /// Argument signature of an execute; interned into `Execute::arg_signature`.
    pub signature: Option<Arc<str>>,
    /// Blobs to store before the record (compiles and loads only: boxed, so the common event
    /// stays small; set with `set_blobs`).
    pub blobs: Option<Box<Vec<BlobData>>>,
}

impl Event {
    pub fn new(record: Record) -> Self {
        Event {
            record,
            name: "",
            dtype: "",
            stack: None,
            signature: None,
            blobs: None,
        }
    }

    pub fn set_blobs(&mut self, blobs: Vec<BlobData>) {
        self.blobs = (!blobs.is_empty()).then(|| Box::new(blobs));
    }

    /// An event whose record's name field (see `name`) the writer fills.
    pub fn named(record: Record, name: &'static str) -> Self {
        let mut ev = Event::new(record);
        ev.name = name;
        ev
    }
}

/// Shared state between hooks and the writer.
pub struct Recorder {
    /// Events by value: a push copies one `Event` (168 bytes) into a preallocated slot and
    /// allocates nothing (the big records are boxed inside `Record`).
    queue: ArrayQueue<Event>,
    dropped: AtomicU64,
    /// Whether hooks should record at all (false in a forked child, or when the trace is off).
    enabled: AtomicBool,
    /// Blob hashes already handed to the writer, so hooks copy each program once.
    seen_blobs: Mutex<HashSet<u64>>,
    /// Parks the writer between drains; the writer polls, hooks never wake it (no syscalls on the
    /// hot path).
    pub(crate) writer_wakeup: std::sync::Condvar,
    pub(crate) writer_lock: Mutex<()>,
}

impl Recorder {
    pub fn new(capacity: usize) -> Self {
        Recorder {
            queue: ArrayQueue::new(capacity.max(16)),
            dropped: AtomicU64::new(0),
            enabled: AtomicBool::new(true),
            seen_blobs: Mutex::new(HashSet::new()),
            writer_wakeup: std::sync::Condvar::new(),
            writer_lock: Mutex::new(()),
        }
    }

    /// Pushes an event; when the queue is full the event is dropped and counted.
    #[inline]
    pub fn push(&self, ev: Event) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        if let Err(lost) = self.queue.push(ev) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            // Its blobs were never written: let a later compile of the same program store them.
            for b in lost.blobs.iter().flat_map(|b| b.iter()) {
                self.unclaim_blob(b.hash);
            }
        }
    }

    pub fn pop(&self) -> Option<Event> {
        self.queue.pop()
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Total events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Returns true the first time a blob hash is offered: only then should the hook copy the bytes.
    pub fn claim_blob(&self, hash: u64) -> bool {
        match self.seen_blobs.lock() {
            Ok(mut seen) => seen.insert(hash),
            Err(_) => false,
        }
    }

    /// Forgets a claimed blob (its event was dropped), so a later compile can store it.
    pub fn unclaim_blob(&self, hash: u64) {
        if let Ok(mut seen) = self.seen_blobs.lock() {
            seen.remove(&hash);
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// The process-wide recorder, once the collector started one.
#[inline]
pub fn global() -> Option<&'static Recorder> {
    RECORDER.get()
}

/// Installs the process-wide recorder (first call wins).
pub fn install(capacity: usize) -> &'static Recorder {
    RECORDER.get_or_init(|| Recorder::new(capacity))
}

/// Records an event if a recorder is installed and enabled.
#[inline]
pub fn record(ev: Event) {
    if let Some(r) = global() {
        r.push(ev);
    }
}

/// Whether hooks should spend time building events.
#[inline]
pub fn enabled() -> bool {
    global().is_some_and(Recorder::is_enabled)
}

/// Monotonic nanoseconds (`CLOCK_MONOTONIC`, the clock every record uses).
#[inline]
pub fn now_ns() -> u64 {
    crate::ffi::os::monotonic_ns()
}

/// The calling thread's kernel thread id, cached per thread.
#[inline]
pub fn thread_id() -> u32 {
    thread_local! {
        static TID: u32 = crate::ffi::os::current_tid();
    }
    TID.with(|t| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every queue slot holds a whole `Event`: a large record kind added unboxed to `Record`
    /// would grow all of them (and the copy every hook makes).
    #[test]
    fn events_stay_small() {
        assert!(
            std::mem::size_of::<Record>() <= 104,
            "{}",
            std::mem::size_of::<Record>()
        );
        assert!(
            std::mem::size_of::<Event>() <= 176,
            "{}",
            std::mem::size_of::<Event>()
        );
    }
}
