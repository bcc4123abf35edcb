//! The cache of read traces: a long trace's tables and digest (`analyzers::saved`), kept under
//! `~/.cache/tpuscope/digests` so that a second `report`, `whatif` or `attach --snapshot` of
//! the same file skips reading it (the read is three quarters of a report's cost); and for
//! `view`, those with the window's lanes (`gui::kept`), in a file of their own.
//!
//! A cache file is named for the trace's path and file, and holds the trace's device, inode,
//! length, change and modification times and this binary's own (another build may digest
//! differently): any difference, a cut or changed cache file, and the trace is read again. It is
//! written only for traces of at least `TPUSCOPE_DIGEST_CACHE_MIN_MB` (32) that no one is
//! writing (an end record, or unchanged for a minute, and unchanged while it was read), through
//! a temporary file renamed into place; the oldest are removed past `TPUSCOPE_DIGEST_CACHE_MB`
//! (2048) in all. `TPUSCOPE_DIGEST_CACHE=0` turns it off. A cache that cannot be read or
//! written is no error: the trace is read as without one.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tpuscope_analyzers::digest::Digest;
use tpuscope_core::{Completeness, Trace};

const MAGIC: &[u8; 16] = b"tpuscope-digest\n";
const STAMP_WORDS: usize = 12;
const HEAD_LEN: usize = MAGIC.len() + STAMP_WORDS * 8;
/// A trace written to within this long may still be growing: not cached without its end.
const SETTLED: Duration = Duration::from_secs(60);

/// What a cache file holds: each has its own files, its own bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// `analyzers::saved`: what `report` reads.
    Reads,
    /// `gui::kept`: the reads with the window's lanes and marks.
    View,
}

impl Content {
    const ALL: [Content; 2] = [Content::Reads, Content::View];

    fn suffix(self) -> &'static str {
        match self {
            Content::Reads => ".digest",
            Content::View => ".view",
        }
    }
}

/// The cache's place for one trace, looked up once per read: the settings, the cache file and
/// the stamp the trace and this binary had then.
#[derive(Debug)]
pub(crate) struct Entry {
    settings: Settings,
    content: Content,
    file: PathBuf,
    stamp: [u64; STAMP_WORDS],
}

impl Entry {
    /// `None` when the cache is off, or the trace is too small to cache or not a regular file.
    /// Taken before the trace is read: [`Entry::store`] keeps nothing of a trace that changed
    /// since.
    pub(crate) fn of(path: &Path, content: Content) -> Option<Entry> {
        let settings = Settings::from_env()?;
        let (file, stamp) = entry(path, &settings, content)?;
        Some(Entry {
            settings,
            content,
            file,
            stamp,
        })
    }

    /// The trace's read from the cache, when one for this very file (and this binary) is there.
    pub(crate) fn load(&self) -> Option<Vec<(Trace, Digest)>> {
        tpuscope_analyzers::saved::decode(&self.load_bytes()?, Some(&crate::spill::new()))
    }

    /// This very file's reads (and this binary's), when kept, as parts to read one at a time.
    pub(crate) fn parts(&self) -> Option<KeptParts> {
        let (mut file, len) = self.open_body()?;
        let parts = tpuscope_analyzers::saved::index(&mut file, HEAD_LEN as u64..len)?;
        Some(KeptParts { file, parts })
    }

    /// The bytes kept for this very file (and this binary), when there are.
    fn load_bytes(&self) -> Option<Vec<u8>> {
        let (mut f, len) = self.open_body()?;
        let mut bytes = Vec::with_capacity(usize::try_from(len).ok()?.saturating_sub(HEAD_LEN));
        f.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }

    /// The cache file, read past its stamp, and its length, when it is this very file's (and
    /// this binary's). Marked used: the last to go when the cache is trimmed.
    fn open_body(&self) -> Option<(std::fs::File, u64)> {
        let mut f = std::fs::File::open(&self.file).ok()?;
        let meta = f.metadata().ok()?;
        if !meta.is_file() || meta.len() > self.settings.cap_bytes {
            return None;
        }
        // The stamp first: a cache file of another trace or build is not read through.
        let mut head = [0u8; HEAD_LEN];
        f.read_exact(&mut head).ok()?;
        if head[..] != header(&self.stamp)[..] {
            return None;
        }
        let _ = f.set_modified(SystemTime::now());
        Some((f, meta.len()))
    }

    /// Keeps `read`, the trace at `path` as read since [`Entry::of`], when it is worth keeping
    /// (a file that changed meanwhile is not kept).
    pub(crate) fn store(&self, path: &Path, read: &[(Trace, Digest)]) {
        if read.is_empty() {
            return;
        }
        let ended = read
            .iter()
            .all(|(t, _)| matches!(t.completeness, Completeness::Complete));
        self.store_with(path, ended, &mut |f| {
            tpuscope_analyzers::saved::write(read.iter().map(|(t, d)| (t, d)), f)
        });
    }

    /// Keeps what `write` writes of the trace at `path` (`ended`: every segment of it has its
    /// end record), unless the trace changed since [`Entry::of`] or may still grow.
    fn store_with(
        &self,
        path: &Path,
        ended: bool,
        write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) {
        let Some(stamp) = self.keepable(path, ended) else {
            return;
        };
        // Best effort: a cache that cannot be written leaves the report as it is.
        let written = write_new(&self.file, self.settings.cap_bytes / 2, |f| {
            f.write_all(&header(&stamp))?;
            write(f)
        });
        if written.is_ok() {
            trim(&self.settings, &self.file);
        }
    }

    /// The trace's stamp when what was read of it may be kept (`ended`: every segment of it has
    /// its end record): `None` when it changed since [`Entry::of`] or may still grow.
    fn keepable(&self, path: &Path, ended: bool) -> Option<[u64; STAMP_WORDS]> {
        let (_, stamp) = entry(path, &self.settings, self.content)?;
        if stamp != self.stamp {
            return None;
        }
        let settled = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= SETTLED);
        (ended || settled).then_some(stamp)
    }

    /// Starts keeping the reads of a file of `runs` segments as each is made
    /// ([`Storing::put`]), so that they are never all held: `None` when the cache file cannot
    /// be started. Only `Content::Reads`.
    pub(crate) fn storing(&self, runs: usize) -> Option<Storing<'_>> {
        if self.content != Content::Reads {
            return None;
        }
        let (tmp, mut f) = new_tmp(&self.file).ok()?;
        // The stamp is outside the sum, as `store_with` writes it.
        if f.write_all(&header(&self.stamp)).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        let mut out = Summed::new(f);
        out.bytes(&tpuscope_analyzers::saved::head(runs));
        Some(Storing {
            entry: self,
            tmp,
            pending: std::sync::Mutex::new(Pending {
                out: Some(out),
                runs,
                ended: true,
                ..Pending::default()
            }),
        })
    }
}

use tpuscope_analyzers::saved::Summed;

/// The reads kept of a file, each read back alone ([`KeptParts::each`]).
pub(crate) struct KeptParts {
    file: std::fs::File,
    parts: Vec<tpuscope_analyzers::saved::Part>,
}

impl KeptParts {
    /// How many reads (a merged file's hosts) there are.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    /// `then(i, trace, digest)` of each read, on up to `threads` threads, each read's bytes
    /// held only while it decodes: `None` when one is not what was written.
    pub(crate) fn each<R: Send>(
        &self,
        threads: usize,
        then: impl Fn(usize, Trace, Digest) -> R + Sync,
    ) -> Option<Vec<R>> {
        use std::os::unix::fs::FileExt;
        tpuscope_core::par::map_indices(self.parts.len(), threads, |i| {
            let p = self.parts.get(i)?;
            let mut bytes = vec![0u8; usize::try_from(p.at.end - p.at.start).ok()?];
            // Read at its place: the threads share the one file the stamp was checked on.
            self.file.read_exact_at(&mut bytes, p.at.start).ok()?;
            let (t, d) =
                tpuscope_analyzers::saved::decode_part(&bytes, p.sum, Some(&crate::spill::new()))?;
            drop(bytes);
            Some(then(i, t, d))
        })
        .into_iter()
        .map(Option::flatten)
        .collect()
    }
}

/// The reads of a merged file's hosts going into the cache as each is made, in file order: one
/// read before those ahead of it waits as its bytes. Renamed into place by
/// [`Storing::finish`] once every host's is in; removed otherwise.
pub(crate) struct Storing<'a> {
    entry: &'a Entry,
    tmp: PathBuf,
    pending: std::sync::Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    out: Option<Summed<std::fs::File>>,
    runs: usize,
    next: usize,
    waiting: std::collections::BTreeMap<usize, Vec<u8>>,
    ended: bool,
    written: u64,
    failed: bool,
}

impl Storing<'_> {
    /// The `i`-th segment's read (any thread, any order).
    pub(crate) fn put(&self, i: usize, t: &Trace, d: &Digest) {
        let cap = self.entry.settings.cap_bytes / 2;
        // Made before the lock: the other threads' reads go on meanwhile.
        let bytes = tpuscope_analyzers::saved::run_bytes(t, d);
        let mut guard = match self.pending.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        let p = &mut *guard;
        if p.failed || i < p.next || i >= p.runs {
            p.failed = true;
            return;
        }
        p.ended &= matches!(t.completeness, Completeness::Complete);
        p.waiting.insert(i, bytes);
        loop {
            let next = p.next;
            let Some(bytes) = p.waiting.remove(&next) else {
                break;
            };
            p.next += 1;
            p.written = p.written.saturating_add(bytes.len() as u64);
            if p.written > cap {
                // Past what the cache may hold: nothing more is written.
                p.failed = true;
                p.waiting.clear();
                return;
            }
            if let Some(out) = p.out.as_mut() {
                out.bytes(&bytes);
            }
        }
    }

    /// Puts the cache file in place when every segment's read is in, it was all written and
    /// the trace at `path` is as it was and will not grow; otherwise leaves nothing behind.
    pub(crate) fn finish(self, path: &Path) {
        // Taken out (`Storing` removes its file when dropped, so it cannot be moved apart).
        let Ok(p) = self.pending.lock().map(|mut p| std::mem::take(&mut *p)) else {
            return;
        };
        if p.failed || p.next != p.runs {
            return;
        }
        let Some(out) = p.out else { return };
        let Ok(file) = out.finish() else { return };
        drop(file);
        if self.entry.keepable(path, p.ended).is_some()
            && std::fs::rename(&self.tmp, &self.entry.file).is_ok()
        {
            trim(&self.entry.settings, &self.entry.file);
        }
    }
}

impl Drop for Storing<'_> {
    fn drop(&mut self) {
        // Gone once renamed into place: then this finds nothing.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

#[derive(Debug)]
struct Settings {
    dir: PathBuf,
    min_bytes: u64,
    cap_bytes: u64,
}

impl Settings {
    /// `None` when the cache is off.
    fn from_env() -> Option<Settings> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("TPUSCOPE_DIGEST_CACHE").is_some_and(|v| matches!(v.trim(), "0" | "off" | "no")) {
            return None;
        }
        let mb = |name: &str, default: u64| {
            var(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
                .saturating_mul(1 << 20)
        };
        Some(Settings {
            dir: crate::locate::cache_dir().join("digests"),
            min_bytes: mb("TPUSCOPE_DIGEST_CACHE_MIN_MB", 32),
            cap_bytes: mb("TPUSCOPE_DIGEST_CACHE_MB", 2048),
        })
    }
}

/// The cache file for the trace at `path` and what it must say of the trace and this binary;
/// `None` for a trace too small to cache, or what is not a regular file.
fn entry(
    path: &Path,
    settings: &Settings,
    content: Content,
) -> Option<(PathBuf, [u64; STAMP_WORDS])> {
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() || m.len() < settings.min_bytes {
        return None;
    }
    let exe = std::fs::metadata("/proc/self/exe").ok()?;
    let stamp = [
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime() as u64,
        m.mtime_nsec() as u64,
        m.ctime() as u64,
        m.ctime_nsec() as u64,
        exe.dev(),
        exe.ino(),
        exe.len(),
        exe.mtime() as u64,
        exe.mtime_nsec() as u64,
    ];
    let canonical = std::fs::canonicalize(path).ok()?;
    let mut key = canonical.as_os_str().as_encoded_bytes().to_vec();
    key.extend_from_slice(&m.dev().to_le_bytes());
    key.extend_from_slice(&m.ino().to_le_bytes());
    let name = format!(
        "{:016x}{}",
        crate::locate::fnv1a(&[("", &key)]),
        content.suffix()
    );
    Some((settings.dir.join(name), stamp))
}

fn header(stamp: &[u64; STAMP_WORDS]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEAD_LEN);
    h.extend_from_slice(MAGIC);
    stamp
        .iter()
        .for_each(|w| h.extend_from_slice(&w.to_le_bytes()));
    h
}

/// Writes `file` with `write` through a temporary file renamed over it, unless it came out
/// larger than `max` bytes; `file` is replaced only when it is a regular file (ours) or absent.
fn write_new(
    file: &Path,
    max: u64,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (tmp, mut f) = new_tmp(file)?;
    let written = write(&mut f).and_then(|()| match f.metadata()?.len() {
        len if len > max => Err(std::io::Error::other("larger than the cache may hold")),
        _ => Ok(()),
    });
    let renamed = written.and_then(|()| std::fs::rename(&tmp, file));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// A new temporary file beside `file`, to be renamed into its place; refused when what is at
/// `file` is not a regular file (never replaced).
fn new_tmp(file: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    if std::fs::symlink_metadata(file).is_ok_and(|m| !m.is_file()) {
        return Err(std::io::Error::other("not a regular file"));
    }
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    Ok((tmp, f))
}

/// Removes the least recently used cache files (never `kept`) while they take more than the cap.
fn trim(settings: &Settings, kept: &Path) {
    let Ok(dir) = std::fs::read_dir(&settings.dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let m = e.path().symlink_metadata().ok()?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            let ours = m.is_file() && Content::ALL.iter().any(|c| name.ends_with(c.suffix()));
            ours.then_some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort_unstable();
    for (_, len, path) in files {
        if total <= settings.cap_bytes {
            break;
        }
        if path != kept && std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

/// The window's reads kept in this cache (`Content::View` files).
#[derive(Debug)]
pub(crate) struct ViewCache;

impl tpuscope_gui::kept::ReadCache for ViewCache {
    fn slot(&self, path: &Path) -> Option<Box<dyn tpuscope_gui::kept::CacheSlot>> {
        Entry::of(path, Content::View)
            .map(|e| Box::new(e) as Box<dyn tpuscope_gui::kept::CacheSlot>)
    }
}

impl tpuscope_gui::kept::CacheSlot for Entry {
    fn open(&self) -> Option<(Box<dyn tpuscope_gui::kept::ReadSeek>, std::ops::Range<u64>)> {
        let (f, len) = self.open_body()?;
        Some((Box::new(f), HEAD_LEN as u64..len))
    }

    fn store(
        &self,
        path: &Path,
        ended: bool,
        write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) {
        self.store_with(path, ended, write);
    }
}
