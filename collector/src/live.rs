//! Live viewers: the process serves its trace, as it is written, on a Unix socket
//! (`tpuscope_core::live::socket_path`).
//!
//! A viewer receives a byte stream that is a `.tps` trace: the trace file's bytes up to the moment
//! it connected, an end-of-backlog mark (`tpuscope_core::live::BACKLOG_END_KIND`), then the rest of
//! the file as the writer flushes it, whole frames only. The workload never waits on a viewer and
//! holds nothing per viewer but one read buffer:
//!
//! - one accept thread checks the peer's uid (`SO_PEERCRED`) and starts a sender thread per
//!   viewer, at most [`MAX_VIEWERS`] at a time (more are told why and closed);
//! - the writer's output goes through [`Tee`], which counts the bytes and, after each flush,
//!   publishes the flushed length (always a frame boundary) to the [`Hub`] and wakes the senders;
//! - a sender asks the writer for a flush, takes the flushed length as the backlog, and sends the
//!   file from its start, reading it back through the writer's own descriptor: the backlog, the
//!   mark, then whatever has been flushed, blocking on the socket as long as the viewer makes it.
//!   A slow viewer falls behind and loses nothing; nothing is queued for it in memory. When the
//!   writer closes the trace, the sender sends the file to its end and closes the connection.
//!
//! All viewers together hold at most [`ALL_VIEWERS_BYTES`] of this process's memory. Without a
//! trace file there is no writer and no socket: a process whose trace cannot be created has no
//! live view (`tpuscope attach` says it is not instrumented).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, getsockopt, send, sockopt};
use tpuscope_core::live as paths;

/// Viewers served at once; more connections are told why and closed.
pub const MAX_VIEWERS: usize = 16;
/// Bytes a sender reads from the trace file per send.
const READ_BUF: usize = 64 << 10;
/// A sender thread's stack (it reads, sends and waits; nothing deep).
const SENDER_STACK: usize = 256 << 10;
/// The most memory live viewers take in this process, all together: per viewer one read buffer
/// and one sender stack (4.1 MiB for 16). Nothing else is held per viewer, whatever it does.
pub const ALL_VIEWERS_BYTES: usize = MAX_VIEWERS * (READ_BUF + SENDER_STACK);
/// At exit, how long the viewers' senders may take to send the rest of the file (a viewer that
/// keeps up gets the end record; one that does not cannot hold the process longer than this).
const EXIT_WAIT: Duration = Duration::from_millis(500);
/// The writer wakes the senders after each flush; a sender's wait is bounded anyway (a safety
/// net, not a poll: an idle viewer costs a few wakeups a second).
const SENDER_WAIT: Duration = Duration::from_millis(200);
/// How long a new viewer waits for the writer to flush what it has (the writer loops every few
/// milliseconds; past this, the last flush is the backlog).
const FLUSH_WAIT: Duration = Duration::from_millis(250);

/// What the accept thread, the writer and the senders share.
pub struct Hub {
    flushed: Mutex<Flushed>,
    /// Signalled after each flush and at close.
    progress: Condvar,
    /// A new viewer waits for a flush: the writer flushes at its next loop.
    flush_wanted: AtomicBool,
    /// Viewers served now (senders running).
    viewers: AtomicUsize,
    /// Where senders read the trace back; set when the writer opens it.
    history: OnceLock<History>,
}

/// What the writer has flushed to the trace file.
#[derive(Default)]
struct Flushed {
    /// Bytes of the file that are whole frames on disk.
    len: u64,
    /// Flushes so far.
    generation: u64,
    /// The trace is closed (or abandoned): `len` is final, new viewers are refused.
    closed: bool,
}

impl Hub {
    pub fn new() -> Arc<Hub> {
        Arc::new(Hub {
            flushed: Mutex::new(Flushed::default()),
            progress: Condvar::new(),
            flush_wanted: AtomicBool::new(false),
            viewers: AtomicUsize::new(0),
            history: OnceLock::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, Flushed> {
        // The lock guards plain numbers: a panic elsewhere cannot leave them half-written.
        self.flushed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves a checked connection on a sender thread of its own, or tells it why not.
    fn admit(self: &Arc<Self>, stream: UnixStream) {
        if self.state().closed {
            return refuse(&stream, "the process is exiting");
        }
        if self.viewers.fetch_add(1, Ordering::AcqRel) >= MAX_VIEWERS {
            self.viewers.fetch_sub(1, Ordering::AcqRel);
            return refuse(
                &stream,
                &format!("{MAX_VIEWERS} viewers are attached already, the most one process serves"),
            );
        }
        let hub = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("tpuscope-viewer".into())
            .stack_size(SENDER_STACK)
            .spawn(move || {
                // Ends when the viewer hangs up, or the trace is sent to its end (a file that
                // cannot be read back mid-stream just ends the stream: the viewer says so).
                let _ = serve_viewer(&hub, &stream);
                drop(stream);
                hub.viewers.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            self.viewers.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Asks the writer for a flush and waits (at most [`FLUSH_WAIT`]) for it; returns the flushed
    /// length then.
    fn flush_now(&self) -> u64 {
        let mut f = self.state();
        let asked = f.generation;
        self.flush_wanted.store(true, Ordering::Release);
        let deadline = Instant::now() + FLUSH_WAIT;
        while f.generation == asked && !f.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            f = self
                .progress
                .wait_timeout(f, left)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        f.len
    }

    /// Waits until more than `pos` bytes are flushed, the trace is closed, or [`SENDER_WAIT`]
    /// passed; returns (flushed length, closed).
    fn wait_beyond(&self, pos: u64) -> (u64, bool) {
        let mut f = self.state();
        if f.len <= pos && !f.closed {
            f = self
                .progress
                .wait_timeout(f, SENDER_WAIT)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        (f.len, f.closed)
    }

    /// The writer flushed `len` bytes (whole frames).
    fn publish(&self, len: u64) {
        self.flush_wanted.store(false, Ordering::Release);
        let mut f = self.state();
        f.len = len;
        f.generation += 1;
        drop(f);
        if self.viewers.load(Ordering::Acquire) > 0 {
            self.progress.notify_all();
        }
    }

    fn close(&self) {
        self.state().closed = true;
        self.progress.notify_all();
    }
}

/// Tells a connection why it is not served (a trace header and a refusal frame, which
/// `tpuscope attach` prints) and drops it. Never blocks: a fresh socket's buffer takes it.
fn refuse(stream: &UnixStream, reason: &str) {
    let bytes = paths::refusal(reason);
    let _ = send(
        stream.as_raw_fd(),
        &bytes,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    );
}

/// Where a sender reads the trace back: the writer's own file reopened through `/proc/self/fd`
/// (still right if the trace was renamed or deleted), else its path.
pub struct History {
    pub fd_path: PathBuf,
    pub path: PathBuf,
}

impl History {
    fn open(&self) -> io::Result<File> {
        File::open(&self.fd_path).or_else(|_| File::open(&self.path))
    }
}

/// The writer's output: writes through to `inner`, counting bytes; each successful flush
/// publishes the flushed length to the viewers. `TraceWriter` writes each frame with one
/// `write_all` and flushes between frames, so a published length is always a frame boundary.
pub struct Tee<W: Write> {
    inner: W,
    hub: Option<Arc<Hub>>,
    written: u64,
}

impl<W: Write> Tee<W> {
    /// Without a hub, a plain pass-through.
    pub fn new(inner: W, hub: Option<Arc<Hub>>, history: Option<History>) -> Self {
        if let (Some(hub), Some(history)) = (&hub, history) {
            let _ = hub.history.set(history);
        }
        Tee {
            inner,
            hub,
            written: 0,
        }
    }

    pub fn inner(&self) -> &W {
        &self.inner
    }

    /// Whether a new viewer waits for a flush (the writer then flushes: its backlog is then
    /// everything written so far).
    pub fn wants_flush(&self) -> bool {
        self.hub
            .as_ref()
            .is_some_and(|h| h.flush_wanted.load(Ordering::Acquire))
    }
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()?;
        if let Some(hub) = &self.hub {
            hub.publish(self.written);
        }
        Ok(())
    }
}

impl<W: Write> Drop for Tee<W> {
    /// The trace is closed (or abandoned): senders send the rest of what was flushed and close;
    /// new connections are refused.
    fn drop(&mut self) {
        if let Some(hub) = &self.hub {
            hub.close();
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
            Err(Errno::EPIPE | Errno::ECONNRESET) => return Err(io::ErrorKind::BrokenPipe.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A viewer's sender: the file up to the flushed length at connect time, the end-of-backlog
/// mark, then the file as it is flushed, until the trace is closed and all of it is sent.
fn serve_viewer(hub: &Hub, stream: &UnixStream) -> io::Result<()> {
    let opened = hub.history.get().map(History::open);
    let file = match opened {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            refuse(stream, &format!("cannot read its trace file back: {e}"));
            return Err(e);
        }
        None => {
            refuse(stream, "it has no trace file");
            return Ok(());
        }
    };
    let backlog = hub.flush_now();
    send_file(hub, stream, &file, backlog)
}

/// [`serve_viewer`] once the file is open and the backlog known.
fn send_file(hub: &Hub, stream: &UnixStream, file: &File, backlog: u64) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUF];
    let mut pos = 0u64;
    let mut marked = false;
    loop {
        let (flushed, closed) = if marked || pos < backlog {
            hub.wait_beyond(pos)
        } else {
            (pos, false)
        };
        // Before the mark, read no further than the backlog.
        let until = if marked { flushed } else { backlog };
        while pos < until {
            let want = usize::try_from(until - pos)
                .unwrap_or(usize::MAX)
                .min(READ_BUF);
            let chunk = buf.get_mut(..want).unwrap_or_default();
            let n = match file.read_at(chunk, pos) {
                Ok(0) => return Err(io::Error::other("the trace file is shorter than written")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            send_all(stream, chunk.get(..n).unwrap_or_default())?;
            pos += n as u64;
        }
        if !marked && pos >= backlog {
            send_all(stream, &paths::backlog_end_frame(backlog))?;
            marked = true;
            continue;
        }
        if closed && pos >= flushed {
            return Ok(());
        }
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

fn accept_loop(listener: &UnixListener, hub: &Arc<Hub>) {
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
    while s.hub.viewers.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_file(&s.path);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use tpuscope_core::event::{Execute, Manifest, Record};
    use tpuscope_core::live::{LiveDecoder, LiveError};
    use tpuscope_core::{TraceWriter, read_trace};

    /// A trace writer over a file behind a tee with a hub, and the file's path.
    fn setup() -> (tempfile::TempDir, TraceWriter<Tee<File>>, Arc<Hub>, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tps");
        let file = File::create(&path).unwrap();
        let hub = Hub::new();
        let history = History {
            fd_path: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
            path: path.clone(),
        };
        let mut w = TraceWriter::new(
            Tee::new(file, Some(hub.clone()), Some(history)),
            &Manifest::default(),
        )
        .unwrap();
        w.intern_string("before").unwrap();
        w.flush().unwrap();
        (dir, w, hub, path)
    }

    fn execute(i: u64) -> Record {
        Record::Execute(Execute {
            t_ns: i,
            ..Default::default()
        })
    }

    /// Connects a viewer; returns its far end.
    fn connect(hub: &Arc<Hub>) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().unwrap();
        hub.admit(ours);
        theirs
    }

    /// Plays the writer's part for a viewer that just connected: flushes when asked.
    fn answer_flush(w: &mut TraceWriter<Tee<File>>) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !w.get_ref().wants_flush() {
            assert!(Instant::now() < deadline, "no flush asked for");
            std::thread::sleep(Duration::from_millis(1));
        }
        w.flush().unwrap();
        w.get_ref().written
    }

    fn read_all(mut s: UnixStream) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        })
    }

    #[test]
    fn the_stream_is_the_file_with_the_backlog_marked() {
        let (_dir, mut w, hub, path) = setup();
        for i in 0..50 {
            w.write(&execute(i)).unwrap();
        }
        let reader = read_all(connect(&hub));
        let asked = answer_flush(&mut w);
        for i in 50..100 {
            w.write(&execute(i)).unwrap();
            w.flush().unwrap();
        }
        w.intern_string("after").unwrap();
        w.flush().unwrap();
        drop(w);
        let got = reader.join().unwrap();
        let file = std::fs::read(&path).unwrap();
        let mut d = LiveDecoder::new(1 << 30);
        let p = d.push(&got).unwrap();
        assert!(p.backlog_end);
        // The backlog is what was flushed when the sender woke: at least what the writer had
        // when asked (it may have flushed more meanwhile).
        let backlog = d.backlog_end().unwrap();
        assert!(backlog >= asked, "{backlog} < {asked}");
        assert!(d.trace().unwrap().events.len() >= 50);
        let mark = paths::backlog_end_frame(backlog);
        let b = usize::try_from(backlog).unwrap();
        assert_eq!(&got[..b], &file[..b]);
        assert_eq!(&got[b..b + mark.len()], &mark[..]);
        assert_eq!(&got[b + mark.len()..], &file[b..]);
        d.push(&got[p.consumed..]).unwrap();
        assert!(d.into_trace().unwrap().events == read_trace(&file).unwrap().events);
    }

    #[test]
    fn a_viewer_that_does_not_read_holds_nothing_and_loses_nothing() {
        let (_dir, mut w, hub, path) = setup();
        let stalled = connect(&hub);
        answer_flush(&mut w);
        // Far more than the socket buffers, while the viewer reads nothing: the writer goes on.
        let t0 = Instant::now();
        for i in 0..400_000 {
            w.write(&execute(i)).unwrap();
            if i % 1000 == 0 {
                w.flush().unwrap();
            }
        }
        w.flush().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(30));
        drop(w);
        let got = read_all(stalled).join().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert!(file.len() > 4 << 20, "{}", file.len());
        let mut d = LiveDecoder::new(1 << 30);
        let mut rest = &got[..];
        while !rest.is_empty() {
            rest = &rest[d.push(rest).unwrap().consumed..];
        }
        let t = d.into_trace().unwrap();
        assert!(t.events == read_trace(&file).unwrap().events);
        assert_eq!(got.len(), file.len() + paths::backlog_end_frame(0).len());
    }

    #[test]
    fn a_viewer_that_hangs_up_is_forgotten() {
        let (_dir, mut w, hub, _path) = setup();
        let theirs = connect(&hub);
        answer_flush(&mut w);
        drop(theirs);
        let deadline = Instant::now() + Duration::from_secs(10);
        while hub.viewers.load(Ordering::Acquire) > 0 {
            assert!(Instant::now() < deadline, "the viewer is still served");
            w.write(&execute(0)).unwrap();
            w.flush().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What a refused connection reads, as the decoder's error.
    fn refusal_of(s: UnixStream) -> String {
        let got = read_all(s).join().unwrap();
        match LiveDecoder::new(1 << 20).push(&got) {
            Err(e @ LiveError::Refused(_)) => e.to_string(),
            other => panic!("{other:?} from {got:?}"),
        }
    }

    #[test]
    fn connections_past_the_limit_and_after_close_are_told_why() {
        let (_dir, w, hub, _path) = setup();
        let served: Vec<UnixStream> = (0..MAX_VIEWERS).map(|_| connect(&hub)).collect();
        assert_eq!(
            refusal_of(connect(&hub)),
            "the process refused the viewer: 16 viewers are attached already, the most one process serves"
        );
        drop(w);
        let deadline = Instant::now() + Duration::from_secs(10);
        while hub.viewers.load(Ordering::Acquire) > 0 {
            assert!(Instant::now() < deadline, "senders did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            refusal_of(connect(&hub)),
            "the process refused the viewer: the process is exiting"
        );
        drop(served);
    }

    #[test]
    fn without_a_trace_file_a_viewer_is_told() {
        let hub = Hub::new();
        assert_eq!(
            refusal_of(connect(&hub)),
            "the process refused the viewer: it has no trace file"
        );
    }
}
