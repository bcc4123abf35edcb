//! Reading a running workload's live stream: connect to its socket, decode the trace it sends
//! (history first, then live frames) as it arrives.

use std::io::{ErrorKind, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tpuscope_core::{Trace, TraceBuilder};

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

/// Bytes read from the stream by a background thread: a chunk, or the end (with an error text
/// when it ended badly).
pub enum Chunk {
    Data(Vec<u8>),
    End(Option<String>),
}

/// Reads the stream on its own thread so the UI never blocks on the socket.
pub fn spawn_reader(mut stream: UnixStream) -> Receiver<Chunk> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("tpuscope-live-reader".into())
        .spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        let _ = tx.send(Chunk::End(None));
                        return;
                    }
                    Ok(n) => {
                        if tx.send(Chunk::Data(buf[..n].to_vec())).is_err() {
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
        let (tx2, rx2) = mpsc::channel();
        let _ = tx2.send(Chunk::End(Some(format!(
            "cannot start a reader thread: {e}"
        ))));
        return rx2;
    }
    rx
}

/// The state of a process now: everything it has sent until it has been quiet for `quiet` (the
/// history is sent at once, then only live events trickle in), or until it ended, or `limit`.
pub fn snapshot(stream: UnixStream, quiet: Duration, limit: Duration) -> Result<Trace> {
    let rx = spawn_reader(stream);
    let mut builder = TraceBuilder::new();
    let start = Instant::now();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(quiet.min(left)) {
            Ok(Chunk::Data(d)) => {
                builder.push(&d)?;
            }
            Ok(Chunk::End(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if builder.trace().is_some() {
                    break;
                }
            }
        }
    }
    match builder.into_trace() {
        Some(t) => Ok(t),
        None => bail!("the process sent no trace header before the timeout"),
    }
}
