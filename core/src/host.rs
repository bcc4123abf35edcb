//! What core reads from the host it runs on: the live-socket directory (its place, ownership and
//! mode), this process's uid, and the live viewer's memory limit from the environment.
//!
//! This module is core's I/O edge: with [`crate::stream::TraceFile`], the only code of core
//! allowed to touch the file system or the environment (`core/clippy.toml` bans them elsewhere).
//! The event model, the format, the readers and the decoders take bytes and return values.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "core's I/O edge: see the module documentation"
)]

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The most a live viewer holds of one process's trace, from `TPUSCOPE_LIVE_MAX_MB` (MiB), else
/// [`DEFAULT_LIVE_MAX_MB`].
pub fn viewer_limit_bytes() -> Result<u64, String> {
    match std::env::var("TPUSCOPE_LIVE_MAX_MB") {
        Err(_) => Ok(DEFAULT_LIVE_MAX_MB << 20),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(mb) if mb > 0 => Ok(mb.saturating_mul(1 << 20)),
            _ => Err(format!(
                "TPUSCOPE_LIVE_MAX_MB={v:?}: expected a positive number of MiB"
            )),
        },
    }
}

/// Default of [`viewer_limit_bytes`].
pub const DEFAULT_LIVE_MAX_MB: u64 = 1024;

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

/// [`ensure_socket_dir`] at a directory another process of this user chose (`tpuscope attach`
/// tells the process it attaches to where its viewers look).
pub fn ensure_socket_dir_at(dir: &Path) -> io::Result<PathBuf> {
    ensure_private_dir(dir)?;
    Ok(dir.to_path_buf())
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

#[cfg(test)]
mod tests {
    use super::*;

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
