//! Where the live sockets of instrumented processes live, and the few pieces of the trace format
//! the live stream needs beyond a file's (a frame's kind, a lag note).
//!
//! A viewer connected to `<socket_dir>/<pid>.sock` receives a byte stream that is a `.tps` trace:
//! the file's bytes so far, then every frame the collector writes after that. A slow viewer loses
//! whole frames (never definitions) and receives a [`VIEWER_LAGGED`] note before the next frame it
//! gets. The directory is private to the user (0700) and the collector checks the peer's uid.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::event::{Manifest, Note, Record, RecordKind};
use crate::format::{self, FRAME_HEADER_LEN, HEADER_LEN};

/// Topic of the note a lagging viewer receives; its message is the number of frames this viewer
/// lost so far (a total, not a delta).
pub const VIEWER_LAGGED: &str = "viewer_lagged";

/// The effective uid of this process (the one `SO_PEERCRED` reports and files are created with),
/// from `/proc/self/status`; `None` when that cannot be read.
pub fn current_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    // "Uid:	real	effective	saved	fs"
    line.split_whitespace().nth(2)?.parse().ok()
}

/// `$XDG_RUNTIME_DIR/tpuscope` when `XDG_RUNTIME_DIR` names a directory, else
/// `/tmp/tpuscope-<uid>`.
pub fn socket_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && xdg.is_absolute()
        && xdg.is_dir()
    {
        return xdg.join("tpuscope");
    }
    let uid = current_uid().map_or_else(|| "unknown".to_string(), |u| u.to_string());
    PathBuf::from(format!("/tmp/tpuscope-{uid}"))
}

/// The socket of process `pid`.
pub fn socket_path(pid: u32) -> PathBuf {
    socket_dir().join(format!("{pid}.sock"))
}

/// Checks that `dir` is a real directory (not a symlink) owned by this user; returns its mode
/// bits. The directory is the only protection of the sockets in it besides the peer-uid check.
fn check_owned_dir(dir: &Path) -> io::Result<u32> {
    let meta = std::fs::symlink_metadata(dir)?;
    let refuse = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: {why}; refusing to use it for tpuscope's sockets",
                dir.display()
            ),
        ))
    };
    if meta.file_type().is_symlink() {
        return refuse("is a symbolic link");
    }
    if !meta.is_dir() {
        return refuse("is not a directory");
    }
    let uid = current_uid().ok_or_else(|| io::Error::other("cannot read this process's uid"))?;
    if meta.uid() != uid {
        return refuse(&format!("is owned by uid {}, not {uid}", meta.uid()));
    }
    Ok(meta.mode() & 0o7777)
}

/// Creates the socket directory (mode 0700) if absent and returns it. Refuses (an error) a path
/// that is a symlink, not a directory, or owned by another user; a directory of ours that group
/// or others can enter is made private again.
pub fn ensure_socket_dir() -> io::Result<PathBuf> {
    let dir = socket_dir();
    ensure_private_dir(&dir)?;
    Ok(dir)
}

/// [`ensure_socket_dir`] for any path.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let mode = check_owned_dir(dir)?;
    // The umask may have taken bits away (or a user chmod-ed it): exactly 0700.
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The `<pid>.sock` files of the socket directory, by pid. Empty when the directory is absent or
/// not safely ours (a directory another user controls could hold anything).
pub fn pids_with_sockets() -> Vec<(u32, PathBuf)> {
    let dir = socket_dir();
    if check_owned_dir(&dir).is_err() {
        return Vec::new();
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let pid = name.to_str()?.strip_suffix(".sock")?.parse::<u32>().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// One whole frame (header and payload) holding `record`, as a trace writer writes it.
pub fn encode_record_frame(record: &Record) -> Vec<u8> {
    let mut payload = Vec::with_capacity(64);
    record.encode_payload(&mut payload);
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    format::encode_frame(&mut frame, record.kind() as u16, 0, &payload);
    frame
}

/// The note a lagging viewer receives before its next frame: `total_lost` frames lost so far.
pub fn lag_note(t_ns: u64, total_lost: u64) -> Record {
    Record::Note(Note {
        t_ns,
        thread: 0,
        topic: VIEWER_LAGGED.to_string(),
        message: total_lost.to_string(),
    })
}

/// The kind of the whole frame `frame` starts with (`None` for a kind this reader does not know
/// or fewer bytes than a frame header).
pub fn frame_kind(frame: &[u8]) -> Option<RecordKind> {
    RecordKind::from_u16(format::parse_frame_header(frame)?.kind)
}

/// Frames a slow viewer never loses: later records refer to definitions by id, and the end record
/// says the stream is complete.
pub fn never_dropped(kind: Option<RecordKind>) -> bool {
    matches!(
        kind,
        Some(RecordKind::StringDef | RecordKind::StackDef | RecordKind::End)
    )
}

/// The manifest of a stream's first bytes, once the header and the whole first frame are there
/// (`None` before, or when the bytes are not a trace).
pub fn manifest_from_prefix(bytes: &[u8]) -> Option<Manifest> {
    let header = crate::reader::parse_header(bytes.get(..HEADER_LEN)?).ok()?;
    let rest = bytes.get(header.len..)?;
    let h = format::parse_frame_header(rest)?;
    let payload = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.len as usize)?;
    if h.kind != RecordKind::Manifest as u16 || format::frame_crc(h.kind, h.flags, payload) != h.crc
    {
        return None;
    }
    match Record::decode_payload(RecordKind::Manifest, payload).ok()? {
        Record::Manifest(m) => Some(*m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceWriter;

    #[test]
    fn the_manifest_is_found_once_its_frame_is_whole() {
        let manifest = Manifest {
            pid: 42,
            command_line: vec!["python".into(), "train.py".into()],
            ..Default::default()
        };
        let w = TraceWriter::new(Vec::new(), &manifest).unwrap();
        let bytes = w.into_inner();
        assert_eq!(manifest_from_prefix(&bytes), Some(manifest));
        assert_eq!(manifest_from_prefix(&bytes[..bytes.len() - 1]), None);
        assert_eq!(manifest_from_prefix(&bytes[..HEADER_LEN]), None);
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(manifest_from_prefix(&damaged), None);
    }

    #[test]
    fn a_lag_note_frame_reads_back_as_the_note() {
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        w.intern_string("x").unwrap();
        let mut bytes = w.into_inner();
        let frame = encode_record_frame(&lag_note(7, 3));
        assert_eq!(frame_kind(&frame), Some(RecordKind::Note));
        assert!(!never_dropped(frame_kind(&frame)));
        bytes.extend_from_slice(&frame);
        let trace = crate::read_trace(&bytes).unwrap();
        match trace.events.as_slice() {
            [Record::Note(n)] => {
                assert_eq!((n.topic.as_str(), n.message.as_str()), (VIEWER_LAGGED, "3"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(trace.string(1), "x");
    }

    #[test]
    fn definitions_and_the_end_are_never_dropped() {
        for (r, keep) in [
            (Record::StringDef(Default::default()), true),
            (Record::StackDef(Default::default()), true),
            (Record::End(Default::default()), true),
            (Record::Execute(Default::default()), false),
            (Record::Blob(Default::default()), false),
        ] {
            assert_eq!(
                never_dropped(frame_kind(&encode_record_frame(&r))),
                keep,
                "{r:?}"
            );
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn the_private_dir_is_created_0700_and_made_private_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tpuscope");
        ensure_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn a_symlink_a_file_or_another_users_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = ensure_private_dir(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = ensure_private_dir(&file).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        if current_uid() == Some(0) {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let err = ensure_private_dir(&theirs).unwrap_err();
            assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        } else {
            eprintln!("skipped the other-owner case: needs root to chown");
        }
    }

    #[test]
    fn the_uid_is_this_process_owner() {
        // Files this process creates are owned by its effective uid.
        let f = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(current_uid(), Some(f.as_file().metadata().unwrap().uid()));
    }
}
