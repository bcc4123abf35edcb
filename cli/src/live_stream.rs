//! Reading a running workload's live stream: connect to its socket, decode the trace it sends
//! (its backlog, an end-of-backlog mark, then live frames) as it arrives, with bounded memory: a
//! reader thread holds at most [`CHANNEL_CHUNKS`] chunks before the socket pushes back, and
//! `tpuscope_core::live::LiveDecoder` refuses absurd frames and holds the decoded trace to
//! `TPUSCOPE_LIVE_MAX_MB`. Every view folds the stream as it comes ([`Folded`]): the limit
//! then holds the trace's tables and what the digest keeps of each event.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use tpuscope_analyzers::digest::{Digest, DigestBuilder};
use tpuscope_core::live::{LiveDecoder, LiveError};
use tpuscope_core::{Record, Trace};

/// Bytes a reader thread reads at once.
const CHUNK: usize = 64 << 10;
/// Chunks read and not yet taken that a reader thread holds before it waits (then the socket
/// fills and the workload's sender waits: nothing piles up on either side).
pub const CHANNEL_CHUNKS: usize = 16;

/// Connects to the live socket of `pid`, with a message that says what to do when it is not one.
pub fn connect(pid: u32) -> Result<(UnixStream, PathBuf)> {
    let path = tpuscope_core::live::socket_path(pid);
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    if !alive {
        bail!(
            "process {pid} does not exist; start a workload with `tpuscope run -- python train.py` and attach to the pid `tpuscope ps` lists"
        );
    }
    match UnixStream::connect(&path) {
        Ok(s) => Ok((s, path)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => bail!(
            "process {pid} is not instrumented by tpuscope (no live socket at {}); start it under `tpuscope run -- <command>`, or see `tpuscope ps`",
            path.display()
        ),
        Err(e) => bail!("cannot connect to {}: {e}", path.display()),
    }
}

/// A live stream folded as it arrives: the decoder holds the trace's tables, the events go into
/// a digest and only the latest few are kept (for the events log). What it holds grows with
/// the run's launches (a few dozen bytes each), not with its records, and is held to the
/// user's limit as [`tpuscope_analyzers::digest::held_bytes`] estimates it.
pub struct Folded {
    decoder: LiveDecoder,
    digest: DigestBuilder,
    /// The latest events, oldest first, at most `keep`.
    recent: VecDeque<Record>,
    keep: usize,
}

impl Folded {
    /// A fold keeping the latest `keep` events, held to the user's limit
    /// (`TPUSCOPE_LIVE_MAX_MB`).
    pub fn new(keep: usize) -> Result<Folded> {
        let limit = tpuscope_core::live::viewer_limit_bytes().map_err(|e| anyhow!(e))?;
        Ok(Folded::with_limit(keep, limit))
    }

    pub fn with_limit(keep: usize, limit_bytes: u64) -> Folded {
        Folded {
            decoder: LiveDecoder::folding(limit_bytes, tpuscope_analyzers::digest::held_bytes),
            digest: DigestBuilder::default(),
            recent: VecDeque::with_capacity(keep.min(4096)),
            keep,
        }
    }

    /// Takes all of `bytes`; the events decoded before an error are folded too.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), LiveError> {
        let fed = feed(&mut self.decoder, bytes);
        self.fold_events();
        fed
    }

    /// Takes `bytes` up to the end-of-backlog mark (as [`LiveDecoder::push`]).
    pub fn push(&mut self, bytes: &[u8]) -> Result<tpuscope_core::live::Pushed, LiveError> {
        let pushed = self.decoder.push(bytes);
        self.fold_events();
        pushed
    }

    fn fold_events(&mut self) {
        for r in self.decoder.take_events() {
            self.digest.push(&r);
            if self.keep == 0 {
                continue;
            }
            if self.recent.len() == self.keep {
                self.recent.pop_front();
            }
            self.recent.push_back(r);
        }
    }

    pub fn decoder(&self) -> &LiveDecoder {
        &self.decoder
    }

    /// The trace's tables and the digest of its events (`None` before its header arrived).
    pub fn finish(self) -> Option<(Trace, Digest)> {
        let digest = self.digest.finish();
        self.decoder.into_trace().map(|t| (t, digest))
    }

    /// The trace's tables (`None` before its header arrived), the digest of the events so far
    /// and the latest events, oldest first.
    pub fn so_far(&mut self) -> Option<(&Trace, Digest, &[Record])> {
        let trace = self.decoder.trace()?;
        Some((trace, self.digest.snapshot(), self.recent.make_contiguous()))
    }
}

/// Takes all of `bytes` (a live view reads on past the end of the backlog).
pub fn feed(decoder: &mut LiveDecoder, mut bytes: &[u8]) -> Result<(), LiveError> {
    while !bytes.is_empty() {
        let p = decoder.push(bytes)?;
        bytes = bytes.get(p.consumed..).unwrap_or_default();
    }
    Ok(())
}

/// Why a stream ended with nothing to show (`None` when it ended after a trace arrived).
pub fn closed_early(decoder: &LiveDecoder) -> Option<String> {
    decoder.trace().is_none().then(|| {
        format!(
            "the process closed the connection: it sent no trace ({} bytes; it may be exiting)",
            decoder.bytes_received()
        )
    })
}

/// Bytes read from the stream by a background thread: a chunk, or the end (with an error text
/// when it ended badly).
pub enum Chunk {
    Data(Vec<u8>),
    End(Option<String>),
}

/// Reads the stream on its own thread so the UI never blocks on the socket. The channel holds
/// at most [`CHANNEL_CHUNKS`] chunks: a consumer that falls behind slows the reader down.
pub fn spawn_reader(mut stream: UnixStream) -> Receiver<Chunk> {
    let (tx, rx) = mpsc::sync_channel(CHANNEL_CHUNKS);
    let spawned = std::thread::Builder::new()
        .name("tpuscope-live-reader".into())
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        let _ = tx.send(Chunk::End(None));
                        return;
                    }
                    Ok(n) => {
                        let data = buf.get(..n).unwrap_or_default().to_vec();
                        if tx.send(Chunk::Data(data)).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Chunk::End(Some(e.to_string())));
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        let (tx2, rx2) = mpsc::sync_channel(1);
        let _ = tx2.send(Chunk::End(Some(format!(
            "cannot start a reader thread: {e}"
        ))));
        return rx2;
    }
    rx
}

/// The state of a process at the moment of the request: its stream up to the end-of-backlog
/// mark (the trace as written when the connection was made). The backlog comes at once, as fast
/// as it can be read; fails when nothing arrives for `silence` before the mark (the process is
/// stuck, or its collector sends no mark), when the stream passes the decoder's limit, or when it
/// ends before the mark (unless it ended with the trace's end record: the process finished
/// meanwhile). The stream is folded as it comes: the trace's tables and the digest of its
/// events.
pub fn snapshot(mut stream: UnixStream, silence: Duration) -> Result<(Trace, Digest)> {
    let mut fold = Folded::new(0)?;
    let mut buf = vec![0u8; CHUNK];
    stream.set_read_timeout(Some(silence))?;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => {
                if let Some(why) = closed_early(fold.decoder()) {
                    bail!(why);
                }
                let complete = fold.decoder().trace().is_some_and(|t| t.end.is_some());
                if !complete {
                    bail!(
                        "the process closed the connection: the stream ended after {} bytes, before the end of its backlog",
                        fold.decoder().bytes_received()
                    );
                }
                break;
            }
            Ok(n) => {
                if fold.push(buf.get(..n).unwrap_or_default())?.backlog_end {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => bail!(
                "the process sent nothing for {} s after {} bytes, before the end of its backlog: it is stuck, or not served by this version of tpuscope's collector",
                silence.as_secs(),
                fold.decoder().bytes_received()
            ),
            Err(e) => bail!("reading the stream: {e}"),
        }
    }
    fold.finish()
        .ok_or_else(|| anyhow!("the process sent no trace"))
}

/// Test helpers for the live views, shared with the integration tests.
#[cfg(test)]
#[path = "../tests/common/graph_break_stream.rs"]
pub(crate) mod testing;
