//! Files the commands write (`export -o`, `merge -o`, `view --screenshot`): never a half-written
//! file, never a replaced device, FIFO or symlink, never one of the inputs.
//!
//! A regular file (or nothing) is written through a temporary file next to it and renamed over it
//! on [`Output::commit`] (flushed to disk first when it replaces a file); a failed write removes
//! the temporary file and leaves the target as it was. A character or block device, a FIFO or a
//! socket, and `-` (stdout), are written in place: they are never replaced nor removed, also
//! when a write fails. A symlink is followed, and the
//! file it leads to is what is written or replaced; the link itself stays. A dangling symlink is
//! refused: the file it names is not one the user made or named, and may be anywhere.
//!
//! ```ignore
//! let mut out = Output::create(&path, force, &[input])?;
//! out.write_all(bytes)?; // errors name the output already
//! out.commit()?;
//! ```

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

/// Buffer of the writes (the exporters write many small pieces).
const BUFFER: usize = 256 * 1024;
/// Links followed before giving up (as the kernel's `ELOOP`).
const MAX_LINKS: usize = 40;

/// An output being written; dropped without [`Output::commit`], its temporary file is removed.
pub struct Output {
    /// The output as the user named it, for messages.
    shown: String,
    sink: Sink,
}

enum Sink {
    /// stdout, a device, a FIFO or a socket: written where it is.
    Direct(BufWriter<File>),
    /// A temporary file next to `target`, renamed over it on commit.
    Temp {
        w: BufWriter<File>,
        tmp: PathBuf,
        target: PathBuf,
        /// Whether an existing regular file may be replaced (`--force`).
        replace: bool,
        /// The mode of the file replaced, kept by the new one.
        mode: Option<Permissions>,
    },
    /// Committed, or failed: nothing left to clean up.
    Done,
}

/// What the output path leads to once symlinks are followed.
enum Target {
    /// A file descriptor of this process (`-`, `/dev/stdout`, `/proc/self/fd/1`, …).
    Stdout,
    Stderr,
    /// A device, FIFO or socket at this path.
    Special(PathBuf),
    Regular(PathBuf, fs::Metadata),
    /// Nothing yet at the path (never reached through a symlink).
    New(PathBuf),
}

/// Whether a file can be created in `dir` (tried with a file of ours, removed at once): the only
/// test that covers read-only mounts, ACLs and quotas.
pub fn can_create_file_in(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".tpuscope-write-check-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

impl Output {
    /// Opens `path` for writing (`-`: stdout). Refused, with one line: an existing regular file
    /// without `force`, a directory, and any output that is one of `inputs` (the same file,
    /// also through a symlink or a hard link).
    pub fn create(path: &Path, force: bool, inputs: &[&Path]) -> Result<Output> {
        let shown = path.display().to_string();
        let target = resolve(path)?;
        let same_as = |m: &fs::Metadata| not_an_input(path, m, inputs);
        let sink = match target {
            Target::Stdout | Target::Stderr => {
                let fd = if matches!(target, Target::Stdout) {
                    io::stdout().as_fd().try_clone_to_owned()
                } else {
                    io::stderr().as_fd().try_clone_to_owned()
                };
                let f = File::from(fd.map_err(|e| anyhow!("cannot write {shown}: {e}"))?);
                if let Ok(m) = f.metadata() {
                    // `export A.tps -o - >> A.tps`.
                    same_as(&m)?;
                }
                Sink::Direct(BufWriter::with_capacity(BUFFER, f))
            }
            Target::Special(p) => {
                if let Ok(m) = fs::metadata(&p) {
                    same_as(&m)?;
                }
                // No create, no truncate: the node is written, never made anew. A FIFO waits here
                // for its reader.
                let f = OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|e| anyhow!("cannot open {shown}: {e}"))?;
                let m = f
                    .metadata()
                    .map_err(|e| anyhow!("cannot open {shown}: {e}"))?;
                if m.is_file() || m.is_dir() {
                    bail!("{shown} changed while it was being opened: not written");
                }
                Sink::Direct(BufWriter::with_capacity(BUFFER, f))
            }
            Target::Regular(p, m) => {
                same_as(&m)?;
                if !force {
                    bail!("{shown} exists (use --force to overwrite)");
                }
                let (w, tmp) = temp_next_to(&p, &shown)?;
                Sink::Temp {
                    w,
                    tmp,
                    target: p,
                    replace: true,
                    mode: Some(m.permissions()),
                }
            }
            Target::New(p) => {
                let (w, tmp) = temp_next_to(&p, &shown)?;
                Sink::Temp {
                    w,
                    tmp,
                    target: p,
                    replace: force,
                    mode: None,
                }
            }
        };
        Ok(Output { shown, sink })
    }

    /// Finishes the output: flushes it and, for a file, puts it in place. Without it, nothing
    /// the output held before is changed (a device or FIFO may have received part of the bytes).
    pub fn commit(mut self) -> Result<()> {
        let shown = self.shown.clone();
        match std::mem::replace(&mut self.sink, Sink::Done) {
            Sink::Direct(mut w) => w.flush().map_err(|e| anyhow!("cannot write {shown}: {e}")),
            Sink::Temp {
                w,
                tmp,
                target,
                replace,
                mode,
            } => {
                let result = finish_temp(w, &tmp, &target, replace, mode, &shown);
                // After a rename this finds nothing; after a link or a failure, it is the copy.
                let _ = fs::remove_file(&tmp);
                result
            }
            Sink::Done => Ok(()),
        }
    }

    /// Appends all that `src` gives; the bytes copied. From a file into a file the kernel
    /// copies them (`std::io::copy`), never through this process.
    pub fn append_from(&mut self, src: &mut impl io::Read) -> io::Result<u64> {
        let r = io::copy(src, self.writer()?);
        r.map_err(|e| io::Error::new(e.kind(), format!("copying into {}: {e}", self.shown)))
    }

    fn writer(&mut self) -> io::Result<&mut BufWriter<File>> {
        match &mut self.sink {
            Sink::Direct(w) | Sink::Temp { w, .. } => Ok(w),
            Sink::Done => Err(io::Error::other("the output is closed")),
        }
    }

    /// An I/O error of this output as one line that names it.
    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("cannot write {}: {e}", self.shown))
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.writer()?.write(buf);
        r.map_err(|e| self.named(e))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let r = self.writer()?.write_all(buf);
        r.map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.writer()?.flush();
        r.map_err(|e| self.named(e))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Sink::Temp { tmp, .. } = &self.sink {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// `m` is the metadata of the output `path` leads to.
fn not_an_input(path: &Path, m: &fs::Metadata, inputs: &[&Path]) -> Result<()> {
    for input in inputs {
        if fs::metadata(input).is_ok_and(|i| (i.dev(), i.ino()) == (m.dev(), m.ino())) {
            if *input == path {
                bail!(
                    "{} is both an input and the output: choose another output",
                    path.display()
                );
            }
            bail!(
                "the output {} is the input {} (the same file): choose another output",
                path.display(),
                input.display()
            );
        }
    }
    Ok(())
}

fn finish_temp(
    w: BufWriter<File>,
    tmp: &Path,
    target: &Path,
    replace: bool,
    mode: Option<Permissions>,
    shown: &str,
) -> Result<()> {
    let f = w
        .into_inner()
        .map_err(|e| anyhow!("cannot write {shown}: {}", e.error()))?;
    if let Some(mode) = mode {
        let _ = f.set_permissions(mode);
    }
    // What is at the target now: it may have changed since `create` looked.
    let replaces = match fs::symlink_metadata(target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => bail!("cannot write {shown}: {e}"),
        Ok(m) if m.is_file() && replace => true,
        Ok(m) if m.is_file() => bail!("{shown} exists (use --force to overwrite)"),
        Ok(_) => {
            bail!("{shown} was replaced by something other than a file while writing: not written")
        }
    };
    // On disk before it replaces a file, so that a system crash leaves the old file or the
    // whole new one. A new file is not waited for (a merged pod trace is GBs: seconds of
    // flushing): a crash can only cut it short, which loses nothing (its inputs are intact) and
    // reads as a cut trace; a crash of this process never leaves it at all.
    if replaces {
        f.sync_all()
            .map_err(|e| anyhow!("cannot write {shown}: {e}"))?;
    }
    drop(f);
    if replace {
        fs::rename(tmp, target).map_err(|e| anyhow!("cannot write {shown}: {e}"))
    } else {
        // The link fails if a file appeared at the target since: it is never overwritten.
        let exists = || anyhow!("{shown} exists (use --force to overwrite)");
        match fs::hard_link(tmp, target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(exists()),
            // A file system without hard links: copied into a file only this call creates.
            Err(_) => {
                let mut to = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(target)
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists => exists(),
                        _ => anyhow!("cannot write {shown}: {e}"),
                    })?;
                let copied = File::open(tmp)
                    .and_then(|mut from| io::copy(&mut from, &mut to))
                    .and_then(|_| to.sync_all());
                if let Err(e) = copied {
                    drop(to);
                    let _ = fs::remove_file(target);
                    bail!("cannot write {shown}: {e}");
                }
                Ok(())
            }
        }
    }
}

/// A new temporary file in the directory of `target`.
fn temp_next_to(target: &Path, shown: &str) -> Result<(BufWriter<File>, PathBuf)> {
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let mut last = None;
    for n in 0..100u32 {
        let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((BufWriter::with_capacity(BUFFER, f), tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => bail!("cannot create {shown}: {e}"),
        }
    }
    bail!(
        "cannot create {shown}: no free temporary name in {}{}",
        dir.display(),
        last.map(|e| format!(" ({e})")).unwrap_or_default()
    )
}

/// This process's descriptor a path names directly: `-`, `/dev/stdout`, `/dev/fd/1`,
/// `/proc/self/fd/1` (and 2). Writing to one means writing to the descriptor, never reopening or
/// replacing what it points at (a pipe, a terminal, a file opened for appending).
fn own_fd(p: &Path) -> Option<Target> {
    let s = p.to_str()?;
    let pid = std::process::id().to_string();
    let fd = match s {
        "-" | "/dev/stdout" => "1",
        "/dev/stderr" => "2",
        _ => ["/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"]
            .iter()
            .find_map(|pre| s.strip_prefix(pre))
            .or_else(|| {
                s.strip_prefix("/proc/")?
                    .strip_prefix(pid.as_str())?
                    .strip_prefix("/fd/")
            })?,
    };
    match fd {
        "1" => Some(Target::Stdout),
        "2" => Some(Target::Stderr),
        _ => None,
    }
}

/// Follows `path`'s symlinks to what will be written.
fn resolve(path: &Path) -> Result<Target> {
    let shown = path.display();
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        if let Some(t) = own_fd(&p) {
            return Ok(t);
        }
        let m = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound && p == path => {
                return Ok(Target::New(p));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "{shown} is a symlink to {}, which does not exist: not written (remove the link, or name the file to write)",
                p.display()
            ),
            Err(e) => bail!("cannot write {shown}: {e}"),
        };
        let ft = m.file_type();
        if ft.is_symlink() {
            let to = fs::read_link(&p).map_err(|e| anyhow!("cannot write {shown}: {e}"))?;
            p = match p.parent() {
                Some(dir) if to.is_relative() => dir.join(to),
                _ => to,
            };
        } else if ft.is_file() {
            return Ok(Target::Regular(p, m));
        } else if ft.is_dir() {
            if p == path {
                bail!("{shown} is a directory: name the file to write");
            }
            bail!(
                "{shown} leads to the directory {}: name the file to write",
                p.display()
            );
        } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() || ft.is_socket() {
            return Ok(Target::Special(p));
        } else {
            bail!("{shown}: cannot write this kind of file");
        }
    }
    bail!("cannot write {shown}: too many levels of symbolic links")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("o.json");
        fs::write(&f, b"old").unwrap();
        {
            let mut out = Output::create(&f, true, &[]).unwrap();
            out.write_all(b"new, never committed").unwrap();
        }
        assert_eq!(fs::read(&f).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        let mut out = Output::create(&f, true, &[]).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn symlinks_are_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        assert!(Output::create(&link, false, &[]).is_err());
        let mut out = Output::create(&link, true, &[]).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&real).unwrap(), b"new");
        // A dangling link, also one behind another link: refused, nothing made where it points.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("made.json", &dangling).unwrap();
        let chained = dir.path().join("chained");
        std::os::unix::fs::symlink("dangling", &chained).unwrap();
        for link in [&dangling, &chained] {
            for force in [false, true] {
                let e = Output::create(link, force, &[]).err().unwrap();
                assert!(
                    e.to_string()
                        .contains("made.json, which does not exist: not written"),
                    "{e}"
                );
            }
        }
        assert!(!dir.path().join("made.json").exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 4);
    }

    #[test]
    fn an_input_is_never_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("a.tps");
        fs::write(&input, b"trace").unwrap();
        let hard = dir.path().join("hard");
        fs::hard_link(&input, &hard).unwrap();
        for out in [&input, &hard] {
            let e = Output::create(out, true, &[&input]).err().unwrap();
            assert!(e.to_string().contains("input"), "{e}");
        }
        assert_eq!(fs::read(&input).unwrap(), b"trace");
        assert!(Output::create(dir.path(), true, &[]).is_err());
    }
}
