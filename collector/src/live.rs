//! Live viewers: the process serves its trace, as it is written, on a Unix socket
//! (`tpuscope_core::live::socket_path`).
//!
//! A viewer receives a byte stream that is a `.tps` trace: the trace file's bytes up to the moment
//! it connected, an end-of-backlog mark (`tpuscope_core::live::BACKLOG_END_KIND`), then the rest of
//! the file as the writer flushes it, whole frames only. The workload never waits on a viewer,
//! and holds nothing per viewer but its socket and a few numbers:
//!
//! - one thread serves every viewer: it polls the listening socket, the viewers' sockets and a
//!   wake-up socket, checks a new peer's uid (`SO_PEERCRED`), serves at most [`MAX_VIEWERS`]
//!   (more are told why and closed);
//! - the writer's output goes through [`Tee`], which counts the bytes and, after each flush,
//!   publishes the flushed length (always a frame boundary) to the [`Hub`] and wakes the thread;
//! - for a new viewer the thread asks the writer for a flush and takes the flushed length as the
//!   backlog; then, whenever the viewer's socket has room, it reads the next piece of the trace
//!   file at the viewer's position (through the writer's own descriptor, into one buffer shared
//!   by all viewers) and sends what the socket takes: the backlog, the mark, then whatever has
//!   been flushed. A slow viewer falls behind and loses nothing; nothing is queued for it.
//!   Once the trace is closed, a viewer that has been sent the whole file is closed.
//!
//! All viewers together hold at most [`ALL_VIEWERS_BYTES`] of this process's memory (the
//! thread's stack and its buffer; the kernel's socket buffers are not the process's). Without a
//! trace file there is no writer and no socket: a process whose trace cannot be created has no
//! live view (`tpuscope attach` says it is not instrumented).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::socket::{MsgFlags, getsockopt, recv, send, sockopt};
use tpuscope_core::live as paths;

/// Viewers served at once; more connections are told why and closed.
pub const MAX_VIEWERS: usize = 16;
/// Bytes read from the trace file and offered to a viewer's socket at once.
const READ_BUF: usize = 64 << 10;
/// Pieces a viewer may be sent per round before the next viewer's turn.
const PIECES_PER_TURN: usize = 4;
/// The serving thread's stack.
const THREAD_STACK: usize = 256 << 10;
/// The most memory live viewers take in this process, all together, whatever they do: the
/// serving thread's stack and read buffer, and a few hundred bytes per viewer (320.6 KiB).
pub const ALL_VIEWERS_BYTES: usize = THREAD_STACK + READ_BUF + MAX_VIEWERS * 64;
/// At exit, how long the viewers may take to be sent the rest of the file (a viewer that keeps
/// up gets the end record; one that does not cannot hold the process longer than this).
const EXIT_WAIT: Duration = Duration::from_millis(500);
/// The thread's poll timeout: the writer wakes it after each flush, this is a safety net.
const POLL_WAIT: u16 = 200;
/// How long a new viewer waits for the writer to flush what it has (the writer loops every few
/// milliseconds; past this, the last flush is the backlog).
const FLUSH_WAIT: Duration = Duration::from_millis(250);

/// What the serving thread and the writer share.
pub struct Hub {
    flushed: Mutex<Flushed>,
    /// A new viewer waits for a flush: the writer flushes at its next loop.
    flush_wanted: AtomicBool,
    /// Viewers served now (their backlog known or not).
    viewers: AtomicUsize,
    /// Where viewers' bytes are read from; set when the writer opens the trace.
    history: OnceLock<History>,
    /// Both ends of the serving thread's wake-up socket (absent if it could not be made: the
    /// thread then wakes every [`POLL_WAIT`]).
    wake: Option<(UnixStream, UnixStream)>,
    /// The session ended (`tpuscope attach` detached): the serving thread exits, closing the
    /// socket and its viewers.
    retired: AtomicBool,
}

/// What the writer has flushed to the trace file.
#[derive(Clone, Copy, Default)]
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
        let wake = UnixStream::pair()
            .ok()
            .filter(|(a, b)| a.set_nonblocking(true).is_ok() && b.set_nonblocking(true).is_ok());
        Arc::new(Hub {
            flushed: Mutex::new(Flushed::default()),
            flush_wanted: AtomicBool::new(false),
            viewers: AtomicUsize::new(0),
            history: OnceLock::new(),
            wake,
            retired: AtomicBool::new(false),
        })
    }

    fn state(&self) -> MutexGuard<'_, Flushed> {
        // The lock guards plain numbers: a panic elsewhere cannot leave them half-written.
        self.flushed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the serving thread (never blocks: a full wake-up socket has a wake-up pending).
    fn wake(&self) {
        if let Some((tx, _)) = &self.wake {
            let _ = send(
                tx.as_raw_fd(),
                &[1],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            );
        }
    }

    /// The writer flushed `len` bytes (whole frames).
    fn publish(&self, len: u64) {
        self.flush_wanted.store(false, Ordering::Release);
        let mut f = self.state();
        f.len = len;
        f.generation += 1;
        drop(f);
        if self.viewers.load(Ordering::Acquire) > 0 {
            self.wake();
        }
    }

    fn close(&self) {
        self.state().closed = true;
        self.wake();
    }
}

/// Where viewers' bytes are read: the writer's own file reopened through `/proc/self/fd` (still
/// right if the trace was renamed or deleted), else its path.
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
    /// The trace is closed (or abandoned): viewers are sent the rest of what was flushed and
    /// closed; new connections are refused.
    fn drop(&mut self) {
        if let Some(hub) = &self.hub {
            hub.close();
        }
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

/// Sends what the socket takes now, without blocking or `SIGPIPE` (the host process may not
/// ignore it). `Ok(0)`: no room.
fn send_some(stream: &UnixStream, buf: &[u8]) -> io::Result<usize> {
    loop {
        match send(
            stream.as_raw_fd(),
            buf,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(n) => return Ok(n),
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Ok(0),
            Err(e) => return Err(e.into()),
        }
    }
}

/// One viewer.
struct Viewer {
    stream: UnixStream,
    /// Bytes of the trace file sent.
    pos: u64,
    /// The file's length at connect time, once the writer flushed (or [`FLUSH_WAIT`] passed).
    backlog: Option<u64>,
    /// Until the backlog is known: the flush generation asked after, and how long to wait.
    asked: u64,
    deadline: Instant,
    /// Bytes of the end-of-backlog mark sent (it is built when due; no allocation).
    mark_sent: usize,
    marked: bool,
    /// The file ended before the flushed length (recording stopped and the writer's buffer was
    /// dropped): nothing to send until the next flush (its generation is kept here).
    eof_at: Option<u64>,
    /// Its socket took less than offered: nothing is offered again until poll says it has
    /// room (a viewer that does not read costs nothing per flush).
    blocked: bool,
    /// Hung up, failed, or sent everything of a closed trace.
    done: bool,
}

impl Viewer {
    /// Whether there is something to send now.
    fn has_bytes(&self, f: Flushed) -> bool {
        if self.eof_at == Some(f.generation) {
            return false;
        }
        match self.backlog {
            None => false,
            // The rest of the backlog, or the mark.
            Some(_) if !self.marked => true,
            Some(_) => self.pos < f.len,
        }
    }

    /// Sends what the socket takes, at most [`PIECES_PER_TURN`] pieces of the file.
    fn pump(&mut self, file: &File, buf: &mut [u8], f: Flushed) -> io::Result<()> {
        let Some(backlog) = self.backlog else {
            return Ok(());
        };
        for _ in 0..PIECES_PER_TURN {
            if !self.marked && self.pos == backlog {
                let mark = paths::backlog_end_frame(backlog);
                let rest = mark.get(self.mark_sent..).unwrap_or_default();
                self.mark_sent += send_some(&self.stream, rest)?;
                if self.mark_sent < mark.len() {
                    self.blocked = true;
                    return Ok(());
                }
                self.marked = true;
                continue;
            }
            // Before the mark, no further than the backlog.
            let until = if self.marked { f.len } else { backlog };
            if self.pos >= until {
                self.done = f.closed && self.marked;
                return Ok(());
            }
            let want = usize::try_from(until - self.pos)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let piece = buf.get_mut(..want).unwrap_or_default();
            let n = match file.read_at(piece, self.pos) {
                Ok(0) => {
                    // What the file holds is all there is (see `eof_at`).
                    self.eof_at = Some(f.generation);
                    self.done = f.closed && self.marked;
                    return Ok(());
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let sent = send_some(&self.stream, piece.get(..n).unwrap_or_default())?;
            self.pos += sent as u64;
            if sent < n {
                self.blocked = true;
                return Ok(());
            }
        }
        Ok(())
    }

    /// The viewer's side said something: only its end (or an error) matters.
    fn read_end(&mut self) {
        let mut scratch = [0u8; 256];
        loop {
            match recv(
                self.stream.as_raw_fd(),
                &mut scratch,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => {
                    self.done = true;
                    return;
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// The serving thread's state.
struct Server {
    hub: Arc<Hub>,
    listener: UnixListener,
    uid: u32,
    viewers: Vec<Viewer>,
    /// The trace file, opened for the first viewer.
    file: Option<File>,
    buf: Vec<u8>,
}

impl Server {
    fn run(mut self) {
        while !self.hub.retired.load(Ordering::Acquire) {
            self.round();
        }
    }

    /// Waits for something to do (at most [`POLL_WAIT`] ms), then does it.
    fn round(&mut self) {
        let f = *self.hub.state();
        {
            // Always the same size: no new allocation size appears when viewers come (with
            // mimalloc's huge-page arenas, a new size class can fault in 2 MiB at once).
            let mut fds = Vec::with_capacity(MAX_VIEWERS + 2);
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
            if let Some((_, rx)) = &self.hub.wake {
                fds.push(PollFd::new(rx.as_fd(), PollFlags::POLLIN));
            }
            for v in &self.viewers {
                let events = if v.has_bytes(f) {
                    PollFlags::POLLOUT | PollFlags::POLLIN
                } else {
                    PollFlags::POLLIN
                };
                fds.push(PollFd::new(v.stream.as_fd(), events));
            }
            let waiting = self.viewers.iter().any(|v| v.backlog.is_none());
            let timeout: u16 = if waiting { 10 } else { POLL_WAIT };
            if let Err(e) = poll(&mut fds, timeout)
                && e != Errno::EINTR
            {
                // Out of resources, say: try again later rather than spin.
                std::thread::sleep(Duration::from_millis(100));
            }
            let skip = 1 + usize::from(self.hub.wake.is_some());
            // (Fixed arrays: the loop allocates nothing per round.)
            let mut readable = [false; MAX_VIEWERS];
            let mut writable = [false; MAX_VIEWERS];
            for ((r, w), p) in readable
                .iter_mut()
                .zip(writable.iter_mut())
                .zip(fds.iter().skip(skip))
            {
                let revents = p.revents().unwrap_or(PollFlags::empty());
                *r =
                    revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR);
                *w = revents.contains(PollFlags::POLLOUT);
            }
            drop(fds);
            for ((v, r), w) in self.viewers.iter_mut().zip(readable).zip(writable) {
                if r {
                    v.read_end();
                }
                if w {
                    v.blocked = false;
                }
            }
        }
        if let Some((_, rx)) = &self.hub.wake {
            let mut scratch = [0u8; 64];
            while matches!(recv(rx.as_raw_fd(), &mut scratch, MsgFlags::MSG_DONTWAIT), Ok(n) if n > 0)
            {
            }
        }
        self.accept_all();
        let f = *self.hub.state();
        let now = Instant::now();
        if let Some(file) = &self.file {
            for v in &mut self.viewers {
                if v.done || v.blocked {
                    continue;
                }
                if v.backlog.is_none() && (f.generation != v.asked || f.closed || now >= v.deadline)
                {
                    v.backlog = Some(f.len);
                }
                if v.pump(file, &mut self.buf, f).is_err() {
                    v.done = true;
                }
            }
        }
        self.viewers.retain(|v| !v.done);
        self.hub
            .viewers
            .store(self.viewers.len(), Ordering::Release);
    }

    /// Takes every waiting connection: serves it, or tells it why not.
    fn accept_all(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Nothing waiting, or out of descriptors (the next round tries again).
                Err(_) => return,
            };
            // Another user's process is closed at once, before a byte is sent.
            let peer = getsockopt(&stream, sockopt::PeerCredentials).map(|c| c.uid());
            if peer != Ok(self.uid) {
                continue;
            }
            let f = *self.hub.state();
            if f.closed {
                refuse(&stream, "the process is exiting");
                continue;
            }
            if self.viewers.len() >= MAX_VIEWERS {
                refuse(
                    &stream,
                    &format!(
                        "{MAX_VIEWERS} viewers are attached already, the most one process serves"
                    ),
                );
                continue;
            }
            if self.file.is_none() {
                match self.hub.history.get().map(History::open) {
                    Some(Ok(file)) => self.file = Some(file),
                    Some(Err(e)) => {
                        refuse(&stream, &format!("cannot read its trace file back: {e}"));
                        continue;
                    }
                    None => {
                        refuse(&stream, "it has no trace file");
                        continue;
                    }
                }
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.hub.flush_wanted.store(true, Ordering::Release);
            self.viewers.push(Viewer {
                stream,
                pos: 0,
                backlog: None,
                asked: f.generation,
                deadline: Instant::now() + FLUSH_WAIT,
                mark_sent: 0,
                marked: false,
                eof_at: None,
                blocked: false,
                done: false,
            });
            self.hub
                .viewers
                .store(self.viewers.len(), Ordering::Release);
        }
    }
}

/// Starts the serving thread on `listener`.
fn spawn_server(listener: UnixListener, hub: Arc<Hub>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let server = Server {
        hub,
        listener,
        uid: nix::unistd::geteuid().as_raw(),
        viewers: Vec::with_capacity(MAX_VIEWERS),
        file: None,
        buf: vec![0u8; READ_BUF],
    };
    std::thread::Builder::new()
        .name("tpuscope-live".into())
        .stack_size(THREAD_STACK)
        .spawn(move || server.run())
        .map(drop)
}

/// The bound socket, for the exit cleanup.
struct Bound {
    path: PathBuf,
    pid: u32,
    hub: Arc<Hub>,
}

/// The socket of the session recording now (one at a time; a new one per attach).
static BOUND: Mutex<Option<Bound>> = Mutex::new(None);

/// Binds this process's socket (in `dir`, else the user's socket directory) and starts the
/// serving thread. A failure is said once on stderr; recording goes on without live viewers.
pub fn serve(hub: Arc<Hub>, dir: Option<&std::path::Path>) {
    let pid = std::process::id();
    let dir = match dir {
        Some(d) => paths::ensure_socket_dir_at(d),
        None => paths::ensure_socket_dir(),
    };
    let result = dir.and_then(|dir| {
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
    if let Err(e) = spawn_server(listener, Arc::clone(&hub)) {
        eprintln!("tpuscope: no live view for this process: {e}");
        let _ = std::fs::remove_file(&path);
        return;
    }
    if let Ok(mut b) = BOUND.lock() {
        *b = Some(Bound { path, pid, hub });
    }
}

/// When a session ends (at exit, or when `tpuscope attach` detaches), after the writer closed
/// the trace: lets the viewers be sent the rest (at most [`EXIT_WAIT`]), removes the socket and
/// stops the serving thread. Nothing in a forked child (the socket is its parent's).
/// Takes the socket's name away, so that nobody new connects to a session that is ending (its
/// viewers keep their connections to the end of the trace). `finish` does the rest.
pub fn unpublish() {
    let Ok(bound) = BOUND.lock() else { return };
    if let Some(s) = bound.as_ref()
        && std::process::id() == s.pid
    {
        // Gone already, or never there: nothing to take away.
        let _ = std::fs::remove_file(&s.path);
    }
}

pub fn finish() {
    let Some(s) = BOUND.lock().ok().and_then(|mut b| b.take()) else {
        return;
    };
    if std::process::id() != s.pid {
        return;
    }
    let deadline = Instant::now() + EXIT_WAIT;
    while s.hub.viewers.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_file(&s.path);
    s.hub.retired.store(true, Ordering::Release);
    s.hub.wake();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::Path;
    use tpuscope_core::event::{Execute, Manifest, Record};
    use tpuscope_core::live::{LiveDecoder, LiveError};
    use tpuscope_core::{TraceWriter, read_trace};

    /// A served socket in `dir` for `hub`; returns its path.
    fn listen(dir: &Path, hub: &Arc<Hub>) -> PathBuf {
        let sock = dir.join("v.sock");
        spawn_server(UnixListener::bind(&sock).unwrap(), Arc::clone(hub)).unwrap();
        sock
    }

    /// A trace writer over a file behind a tee with a hub, the file's path, and the socket.
    fn setup() -> (
        tempfile::TempDir,
        TraceWriter<Tee<File>>,
        Arc<Hub>,
        PathBuf,
        PathBuf,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tps");
        let file = File::create(&path).unwrap();
        let hub = Hub::new();
        let sock = listen(dir.path(), &hub);
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
        (dir, w, hub, path, sock)
    }

    fn execute(i: u64) -> Record {
        Record::Execute(Execute {
            t_ns: i,
            ..Default::default()
        })
    }

    /// Connects a viewer.
    fn connect(sock: &Path) -> UnixStream {
        UnixStream::connect(sock).unwrap()
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
        let (_dir, mut w, _hub, path, sock) = setup();
        for i in 0..50 {
            w.write(&execute(i)).unwrap();
        }
        let reader = read_all(connect(&sock));
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
        let (_dir, mut w, _hub, path, sock) = setup();
        let stalled = connect(&sock);
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
        let (_dir, mut w, hub, _path, sock) = setup();
        let theirs = connect(&sock);
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
        let (_dir, w, hub, _path, sock) = setup();
        let served: Vec<UnixStream> = (0..MAX_VIEWERS).map(|_| connect(&sock)).collect();
        assert_eq!(
            refusal_of(connect(&sock)),
            "the process refused the viewer: 16 viewers are attached already, the most one process serves"
        );
        drop(w);
        let deadline = Instant::now() + Duration::from_secs(10);
        while hub.viewers.load(Ordering::Acquire) > 0 {
            assert!(Instant::now() < deadline, "senders did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            refusal_of(connect(&sock)),
            "the process refused the viewer: the process is exiting"
        );
        drop(served);
    }

    #[test]
    fn without_a_trace_file_a_viewer_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::new();
        let sock = listen(dir.path(), &hub);
        assert_eq!(
            refusal_of(connect(&sock)),
            "the process refused the viewer: it has no trace file"
        );
    }
}
