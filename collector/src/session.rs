//! One recording session per process: configuration, recorder, writer, and what happens at exit
//! and fork. Entered from `GetPjrtApi` (in `ffi`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use tpuscope_core::event::{KeyValue, Manifest, Note, Record};

use crate::config::Config;
use crate::recorder::{self, Event};
use crate::writer::{self, WriterHandle};

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Whether the session `GetPjrtApi` started is recording (decided once per process).
static STARTED: OnceLock<bool> = OnceLock::new();
/// The session recording now: the one `GetPjrtApi` started, or one `tpuscope attach` started
/// (there can be several in a row, one per attach).
static WRITER: Mutex<Option<WriterHandle>> = Mutex::new(None);
static PROCESS_HOOKS: Once = Once::new();

/// The configuration, read from the environment on first use.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

/// What `GetPjrtApi` learned about the real plugin.
pub struct PluginInfo {
    pub api_major: u32,
    pub api_minor: u32,
    pub attributes: Vec<KeyValue>,
}

/// Starts recording (once per process). Returns whether hooks should record.
pub fn start(plugin: PluginInfo) -> bool {
    let cfg = config();
    if !cfg.enabled {
        return false;
    }
    let on = *STARTED.get_or_init(|| {
        let out = cfg.out.clone();
        open(plugin, Role::Plugin, None, |manifest| {
            writer::choose_trace_path(
                out.as_deref(),
                &manifest.host,
                manifest.process_index,
                manifest.pid,
                manifest.start_wall_ns / 1_000_000_000,
            )
        })
        .is_some()
    });
    on && recorder::enabled()
}

/// Who started a session.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// `GetPjrtApi`: the collector is the frontend's plugin, from the process's start.
    Plugin,
    /// `tpuscope attach`, into a process already running on `plugin_path`.
    Attach,
}

/// Opens a trace and starts the writer and the live socket. `finish` completes the manifest
/// for the role and chooses the trace path. Returns the trace path, or `None` when no writer
/// could start (said on stderr).
fn open(
    plugin: PluginInfo,
    role: Role,
    socket_dir: Option<&Path>,
    finish: impl FnOnce(&mut Manifest) -> PathBuf,
) -> Option<PathBuf> {
    let cfg = config();
    let rec = recorder::install(cfg.queue_capacity);
    // Hooks read the TSC once the writer calibrated it against CLOCK_MONOTONIC.
    crate::ffi::os::start_clock();
    let mono = recorder::now_ns();
    let wall = crate::ffi::os::wall_ns();
    let mut manifest = crate::manifest::build(cfg, plugin.api_major, plugin.api_minor, mono, wall);
    manifest.plugin_attributes = plugin.attributes;
    manifest.frontend = crate::agent::frontend_hint();
    let path = finish(&mut manifest);
    let hub = cfg.live.then(crate::live::Hub::new);
    let handle = writer::start_with_live(rec, manifest, path, cfg.size_cap_bytes, hub.clone())?;
    if let Some(hub) = hub {
        crate::live::serve(hub, socket_dir);
    }
    PROCESS_HOOKS.call_once(|| {
        crate::ffi::os::at_exit(shutdown_at_exit);
        crate::ffi::os::on_fork_child(disable_in_fork_child);
    });
    if std::env::var_os("TPUSCOPE_QUIET").is_none() {
        let what = match role {
            Role::Plugin => "tracing to",
            Role::Attach => "attached; tracing to",
        };
        eprintln!("tpuscope: {what} {}", handle.path.display());
    }
    let path = handle.path.clone();
    if let Ok(mut w) = WRITER.lock() {
        *w = Some(handle);
    }
    Some(path)
}

/// Starts an attach session recording to `out` (never replaced: the writer creates it or a
/// numbered sibling), its live socket in `socket_dir` (where the attaching process looks).
/// Events a hook queued after the last session ended are dropped first.
pub fn start_attached(
    plugin: PluginInfo,
    plugin_path: &Path,
    out: &Path,
    socket_dir: Option<&Path>,
    owner: u32,
) -> Result<PathBuf, String> {
    if WRITER.lock().map(|w| w.is_some()).unwrap_or(true) {
        return Err("a recording session is already open".into());
    }
    recorder::install(config().queue_capacity).reset_for_new_trace();
    open(plugin, Role::Attach, socket_dir, |manifest| {
        manifest.role = "attach".into();
        manifest.plugin_path = plugin_path.display().to_string();
        manifest.attach_owner_pid = owner;
        out.to_path_buf()
    })
    .ok_or_else(|| format!("cannot record to {}", out.display()))
}

/// Ends an attach session: the queue drained, the end record written, viewers sent the rest,
/// the socket removed. Hooks still running finish; what they record is dropped.
pub fn stop_attached() {
    // First: a `tpuscope attach` right after this one must find no socket (and attach anew,
    // its request waiting for this detach), not connect to a session whose trace is closing.
    crate::live::unpublish();
    shutdown();
    if let Some(r) = recorder::global() {
        r.set_enabled(false);
    }
}

/// Records a note about what the collector itself did or could not do.
pub fn note(topic: &str, message: impl Into<String>) {
    recorder::record(Event::new(Record::Note(Note {
        t_ns: recorder::now_ns(),
        thread: recorder::thread_id(),
        topic: topic.to_string(),
        message: message.into(),
    })));
}

/// Drains the queue and closes the trace with its end record.
pub fn shutdown() {
    let writer = WRITER.lock().ok().and_then(|mut w| w.take());
    if let Some(w) = writer {
        w.shutdown(Duration::from_secs(3));
    }
    crate::live::finish();
}

extern "C" fn shutdown_at_exit() {
    // A panic must not unwind into libc's exit path.
    let _ = std::panic::catch_unwind(shutdown);
}

/// In a forked child the writer thread does not exist: stay silent, pass calls through.
extern "C" fn disable_in_fork_child() {
    if let Some(r) = recorder::global() {
        r.set_enabled(false);
    }
}
