//! Live viewers: the process serves its trace, as it is written, on a Unix socket
//! (`tpuscope_core::live::socket_path`).
//!
//! A viewer receives a byte stream that is a `.tps` trace: the file's bytes up to the moment it
//! was registered (read back from the file), then every frame the writer writes after that,
//! whole and in order. The workload never waits on a viewer:
//!
//! - one accept thread checks the peer's uid (`SO_PEERCRED`) and hands the connection to the
//!   writer thread ([`Hub`]), at most [`MAX_VIEWERS`] at a time;
//! - the writer registers it between two frames ([`Tee::register_pending`]: flush, note the file
//!   length N), so history `[0, N)` and live frames join without a gap or an overlap;
//! - the writer's output goes through [`Tee`], which offers each frame to every viewer's queue
//!   without blocking: past the viewer's byte budget a frame is lost (counted), except
//!   definitions and the end record, which later records need;
//! - one sender thread per viewer writes the history, then the queued frames, blocking on the
//!   socket; before the first frame after a loss it sends a `viewer_lagged` note carrying the
//!   number of frames lost so far. When the writer closes the trace, the sender sends what is
//!   queued and closes the connection.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, getsockopt, send, sockopt};
use tpuscope_core::live as paths;

/// Viewers served at once; more connections are closed at once.
pub const MAX_VIEWERS: usize = 16;
/// At exit, how long the viewers' senders may take to send what is queued (a viewer that reads
/// gets the end record; one that does not cannot hold the process longer than this).
const EXIT_WAIT: Duration = Duration::from_millis(500);
/// The writer wakes a sender after queueing frames; the sender's wait is bounded anyway (a
/// safety net, not a poll: an idle viewer costs a few wakeups a second).
const SENDER_WAIT: Duration = Duration::from_millis(200);
/// Bytes of queued frames a sender takes per send (at least one frame, whatever its size).
const SEND_BATCH: usize = 256 << 10;

/// What the accept thread, the writer and the senders share.
pub struct Hub {
    /// Connections accepted and checked, waiting for the writer to register them.
    pending: Mutex<Vec<UnixStream>>,
    has_pending: AtomicBool,
    /// Connections admitted and not finished (pending or with a running sender).
    viewers: AtomicUsize,
    /// Sender threads running.
    senders: AtomicUsize,
    /// The trace is closed: new connections are refused.
    closed: AtomicBool,
    /// Bytes of frames a viewer's queue may hold before frames are lost.
    budget: usize,
}

impl Hub {
    pub fn new(budget: usize) -> Arc<Hub> {
        Arc::new(Hub {
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            viewers: AtomicUsize::new(0),
            senders: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            budget,
        })
    }

    /// Takes a checked connection for the writer to register, unless the trace is closed or
    /// [`MAX_VIEWERS`] are served (dropping the stream closes it).
    fn admit(&self, stream: UnixStream) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if self.viewers.fetch_add(1, Ordering::AcqRel) >= MAX_VIEWERS {
            self.viewers.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        if let Ok(mut p) = self.pending.lock() {
            p.push(stream);
            self.has_pending.store(true, Ordering::Release);
        }
    }

    fn take_pending(&self) -> Vec<UnixStream> {
        self.has_pending.store(false, Ordering::Release);
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let dropped = self.take_pending().len();
        self.viewers.fetch_sub(dropped, Ordering::AcqRel);
    }
}

/// One viewer's queue of frames, filled by the writer and emptied by the viewer's sender.
struct Viewer {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// The connection failed or closed: the writer stops offering frames.
    gone: AtomicBool,
}

#[derive(Default)]
struct Queue {
    /// Each frame with the number of frames lost before it was queued.
    frames: VecDeque<(u64, Arc<[u8]>)>,
    bytes: usize,
    lost: u64,
    /// The writer closed the trace: nothing more will be queued.
    closed: bool,
}

impl Viewer {
    fn offer(&self, frame: &Arc<[u8]>, keep: bool, budget: usize) {
        if self.gone.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut q) = self.queue.lock() else { return };
        if !keep && q.bytes.saturating_add(frame.len()) > budget {
            q.lost += 1;
            return;
        }
        q.bytes += frame.len();
        let lost = q.lost;
        q.frames.push_back((lost, Arc::clone(frame)));
    }

    fn close(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.closed = true;
        }
        self.ready.notify_one();
    }
}

/// The viewers the writer serves; only the writer thread touches it.
#[derive(Default)]
struct Viewers {
    list: Vec<Arc<Viewer>>,
    /// Frames were queued since the senders were last woken.
    pushed: bool,
}

/// Where a sender reads a viewer's history: the writer's own file reopened through
/// `/proc/self/fd` (still right if the trace was renamed), else its path.
pub struct History {
    pub fd_path: PathBuf,
    pub path: PathBuf,
}

impl History {
    fn open(&self) -> io::Result<File> {
        File::open(&self.fd_path).or_else(|_| File::open(&self.path))
    }
}

/// The writer's output: writes through to `inner` and offers every frame to the viewers.
/// `TraceWriter` writes each frame with one `write_all`, so each call here is one whole frame
/// (or the file header, written before any viewer exists).
pub struct Tee<W: Write> {
    inner: W,
    hub: Option<Arc<Hub>>,
    history: Option<History>,
    viewers: RefCell<Viewers>,
}

impl<W: Write> Tee<W> {
    /// Without a hub, a plain pass-through.
    pub fn new(inner: W, hub: Option<Arc<Hub>>, history: Option<History>) -> Self {
        Tee {
            inner,
            hub,
            history,
            viewers: RefCell::default(),
        }
    }

    pub fn inner(&self) -> &W {
        &self.inner
    }

    /// Whether connections wait to be registered (the writer then flushes and calls
    /// [`Tee::register_pending`]).
    pub fn wants_registration(&self) -> bool {
        self.hub
            .as_ref()
            .is_some_and(|h| h.has_pending.load(Ordering::Acquire))
    }

    /// Registers the waiting connections: each gets the file's bytes `[0, written)` (the writer
    /// flushed them) and every frame written from now on.
    pub fn register_pending(&self, written: u64) {
        let Some(hub) = &self.hub else { return };
        for stream in hub.take_pending() {
            let history = self.history.as_ref().map(History::open);
            let Some(Ok(file)) = history else {
                // No history, no stream that is a trace: close it.
                hub.viewers.fetch_sub(1, Ordering::AcqRel);
                continue;
            };
            let viewer = Arc::new(Viewer {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                gone: AtomicBool::new(false),
            });
            let hub2 = Arc::clone(hub);
            let viewer2 = Arc::clone(&viewer);
            hub.senders.fetch_add(1, Ordering::AcqRel);
            let spawned = std::thread::Builder::new()
                .name("tpuscope-viewer".into())
                .spawn(move || {
                    let _ = serve_viewer(&stream, file, written, &viewer2);
                    viewer2.gone.store(true, Ordering::Relaxed);
                    drop(stream);
                    hub2.viewers.fetch_sub(1, Ordering::AcqRel);
                    hub2.senders.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_ok() {
                self.viewers.borrow_mut().list.push(viewer);
            } else {
                hub.viewers.fetch_sub(1, Ordering::AcqRel);
                hub.senders.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Wakes the senders of viewers that got frames, and forgets viewers that are gone. Called
    /// once per writer loop, not per frame (a wakeup is a syscall).
    pub fn wake_viewers(&self) {
        let mut v = self.viewers.borrow_mut();
        if !v.pushed {
            return;
        }
        v.pushed = false;
        v.list.retain(|viewer| !viewer.gone.load(Ordering::Relaxed));
        for viewer in &v.list {
            viewer.ready.notify_one();
        }
    }
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Whole buffers only: a frame split across calls could be half lost.
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        let v = self.viewers.get_mut();
        if !v.list.is_empty() {
            let budget = self.hub.as_ref().map_or(0, |h| h.budget);
            let keep = paths::never_dropped(paths::frame_kind(buf));
            let frame: Arc<[u8]> = Arc::from(buf);
            for viewer in &v.list {
                viewer.offer(&frame, keep, budget);
            }
            v.pushed = true;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Tee<W> {
    /// The trace is closed (or abandoned): senders send what is queued and close; new
    /// connections are refused.
    fn drop(&mut self) {
        if let Some(hub) = &self.hub {
            hub.close();
        }
        for viewer in &self.viewers.get_mut().list {
            viewer.close();
        }
    }
}

/// Sends all of `buf`, without `SIGPIPE` (the host process may not ignore it).
fn send_all(stream: &UnixStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match send(stream.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A viewer's sender: the history, then queued frames until the trace is closed.
fn serve_viewer(stream: &UnixStream, file: File, history: u64, viewer: &Viewer) -> io::Result<()> {
    let mut file = file.take(history);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        send_all(stream, buf.get(..n).unwrap_or_default())?;
    }
    let mut reported = 0u64;
    let mut out: Vec<u8> = Vec::with_capacity(SEND_BATCH);
    loop {
        // Frames go out in batches of whole frames (one syscall for many small frames).
        let (batch, finished, lost_at_end) = {
            let poisoned = || io::Error::other("viewer queue poisoned");
            let mut q = viewer.queue.lock().map_err(|_| poisoned())?;
            while q.frames.is_empty() && !q.closed {
                q = viewer
                    .ready
                    .wait_timeout(q, SENDER_WAIT)
                    .map_err(|_| poisoned())?
                    .0;
            }
            let mut batch = Vec::new();
            let mut bytes = 0;
            while bytes < SEND_BATCH
                && let Some((lost, frame)) = q.frames.pop_front()
            {
                bytes += frame.len();
                batch.push((lost, frame));
            }
            q.bytes -= bytes;
            (batch, q.closed && q.frames.is_empty(), q.lost)
        };
        out.clear();
        for (lost, frame) in batch {
            push_lag_note(&mut out, &mut reported, lost);
            out.extend_from_slice(&frame);
        }
        if finished {
            // Frames lost after the last one queued (the end record is never lost, so this
            // happens only when a trace is abandoned).
            push_lag_note(&mut out, &mut reported, lost_at_end);
        }
        send_all(stream, &out)?;
        if finished {
            return Ok(());
        }
    }
}

/// Appends a `viewer_lagged` note when frames were lost since the last one.
fn push_lag_note(out: &mut Vec<u8>, reported: &mut u64, lost: u64) {
    if lost > *reported {
        *reported = lost;
        let note = paths::lag_note(crate::recorder::now_ns(), lost);
        out.extend_from_slice(&paths::encode_record_frame(&note));
    }
}

/// The bound socket, for the exit cleanup.
struct Server {
    path: PathBuf,
    pid: u32,
    hub: Arc<Hub>,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// Binds this process's socket and starts the accept thread. A failure is said once on stderr;
/// recording goes on without live viewers.
pub fn serve(hub: Arc<Hub>) {
    let pid = std::process::id();
    let result = paths::ensure_socket_dir().and_then(|dir| {
        let path = dir.join(format!("{pid}.sock"));
        // A socket of this pid can only be left by a dead process whose pid was reused.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok((path, listener))
    });
    let (path, listener) = match result {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tpuscope: no live view for this process: {e}");
            return;
        }
    };
    let hub2 = Arc::clone(&hub);
    let spawned = std::thread::Builder::new()
        .name("tpuscope-live".into())
        .spawn(move || accept_loop(&listener, &hub2));
    if let Err(e) = spawned {
        eprintln!("tpuscope: no live view for this process: {e}");
        let _ = std::fs::remove_file(&path);
        return;
    }
    let _ = SERVER.set(Server { path, pid, hub });
}

fn accept_loop(listener: &UnixListener, hub: &Hub) {
    let uid = nix::unistd::geteuid().as_raw();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // Another user's process is closed at once, before a byte is sent.
                let peer = getsockopt(&stream, sockopt::PeerCredentials).map(|c| c.uid());
                if peer == Ok(uid) {
                    hub.admit(stream);
                }
            }
            // Out of descriptors, say: try again later rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// At exit, after the writer closed the trace: lets the senders finish (at most [`EXIT_WAIT`])
/// and removes the socket. Nothing in a forked child (the socket is its parent's).
pub fn finish() {
    let Some(s) = SERVER.get() else { return };
    if std::process::id() != s.pid {
        return;
    }
    let deadline = Instant::now() + EXIT_WAIT;
    while s.hub.senders.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_file(&s.path);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::event::{Execute, Manifest, Record};
    use tpuscope_core::{TraceWriter, read_trace};

    /// A tee over a file with one registered viewer whose far end is returned.
    fn setup(budget: usize) -> (tempfile::TempDir, TraceWriter<Tee<File>>, UnixStream) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tps");
        let file = File::create(&path).unwrap();
        let hub = Hub::new(budget);
        let history = History {
            fd_path: path.clone(),
            path,
        };
        let mut w = TraceWriter::new(
            Tee::new(file, Some(hub.clone()), Some(history)),
            &Manifest::default(),
        )
        .unwrap();
        w.intern_string("before").unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        hub.admit(ours);
        assert!(w.get_ref().wants_registration());
        w.flush().unwrap();
        w.get_ref().register_pending(w.bytes_written());
        (dir, w, theirs)
    }

    fn execute(i: u64) -> Record {
        Record::Execute(Execute {
            t_ns: i,
            ..Default::default()
        })
    }

    #[test]
    fn the_stream_is_the_file_history_and_live() {
        let (dir, mut w, mut theirs) = setup(1 << 20);
        for i in 0..100 {
            w.write(&execute(i)).unwrap();
            w.get_ref().wake_viewers();
        }
        w.intern_string("after").unwrap();
        drop(w);
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).unwrap();
        let file = std::fs::read(dir.path().join("t.tps")).unwrap();
        assert_eq!(got, file);
    }

    #[test]
    fn past_the_budget_frames_are_lost_definitions_kept_and_the_loss_noted() {
        // A viewer whose sender starts only after the writer is done (one blocked on a full
        // socket, as far as the queue can tell), with room for three executes.
        let frame_len = paths::encode_record_frame(&execute(1)).len();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tps");
        let hub = Hub::new(3 * frame_len);
        let tee = Tee::new(File::create(&path).unwrap(), Some(hub), None);
        let mut w = TraceWriter::new(tee, &Manifest::default()).unwrap();
        w.intern_string("before").unwrap();
        let history = w.bytes_written();
        let viewer = Arc::new(Viewer {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            gone: AtomicBool::new(false),
        });
        w.get_ref()
            .viewers
            .borrow_mut()
            .list
            .push(Arc::clone(&viewer));
        for i in 1..=10 {
            w.write(&execute(i)).unwrap();
        }
        w.intern_string("kept").unwrap();
        w.write(&execute(11)).unwrap();
        drop(w);
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            theirs.read_to_end(&mut got).unwrap();
            got
        });
        serve_viewer(&ours, File::open(&path).unwrap(), history, &viewer).unwrap();
        drop(ours);
        let got = reader.join().unwrap();
        let t = read_trace(&got).unwrap();
        let seen: Vec<String> = t
            .events
            .iter()
            .map(|r| match r {
                Record::Execute(e) => format!("e{}", e.t_ns),
                Record::Note(n) => format!("{}={}", n.topic, n.message),
                other => format!("{other:?}"),
            })
            .collect();
        // e4..e10 lost (7), then the definition (kept regardless), then e11 is lost too: the
        // note before the end of the stream counts all 8.
        assert_eq!(
            seen,
            ["e1", "e2", "e3", "viewer_lagged=7", "viewer_lagged=8"]
        );
        assert_eq!(t.string(1), "before");
        assert_eq!(t.string(2), "kept");
    }

    #[test]
    fn a_viewer_that_hangs_up_is_forgotten() {
        let (_dir, mut w, theirs) = setup(1 << 20);
        drop(theirs);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !w.get_ref().viewers.borrow().list.is_empty() {
            assert!(Instant::now() < deadline, "the viewer is still served");
            w.write(&execute(0)).unwrap();
            w.get_ref().wake_viewers();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn connections_past_the_limit_and_after_close_are_refused() {
        let hub = Hub::new(0);
        let mut far = Vec::new();
        for _ in 0..MAX_VIEWERS + 2 {
            let (a, b) = UnixStream::pair().unwrap();
            hub.admit(a);
            far.push(b);
        }
        assert_eq!(hub.take_pending().len(), MAX_VIEWERS);
        hub.close();
        let (a, mut b) = UnixStream::pair().unwrap();
        hub.admit(a);
        let mut buf = [0u8; 1];
        // Closed at once: EOF.
        assert_eq!(b.read(&mut buf).unwrap(), 0);
    }
}
