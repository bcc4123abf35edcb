//! One recording session per process: configuration, recorder, writer, and what happens at exit
//! and fork. Entered from `GetPjrtApi` (in `ffi`).

use std::sync::OnceLock;
use std::time::Duration;

use tpuscope_core::event::{KeyValue, Note, Record};

use crate::config::Config;
use crate::recorder::{self, Event};
use crate::writer::{self, WriterHandle};

static CONFIG: OnceLock<Config> = OnceLock::new();
static WRITER: OnceLock<Option<WriterHandle>> = OnceLock::new();

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
    let writer = WRITER.get_or_init(|| {
        let rec = recorder::install(cfg.queue_capacity);
        // Hooks read the TSC once the writer calibrated it against CLOCK_MONOTONIC.
        crate::ffi::os::start_clock();
        let mono = recorder::now_ns();
        let wall = crate::ffi::os::wall_ns();
        let mut manifest =
            crate::manifest::build(cfg, plugin.api_major, plugin.api_minor, mono, wall);
        manifest.plugin_attributes = plugin.attributes;
        manifest.frontend = crate::agent::frontend_hint();
        let path = writer::choose_trace_path(
            cfg.out.as_deref(),
            &manifest.host,
            manifest.process_index,
            manifest.pid,
            wall / 1_000_000_000,
        );
        let hub = cfg.live.then(crate::live::Hub::new);
        let handle = writer::start_with_live(rec, manifest, path, cfg.size_cap_bytes, hub.clone());
        if let Some(h) = &handle {
            if let Some(hub) = hub {
                crate::live::serve(hub);
            }
            crate::ffi::os::at_exit(shutdown_at_exit);
            crate::ffi::os::on_fork_child(disable_in_fork_child);
            if std::env::var_os("TPUSCOPE_QUIET").is_none() {
                eprintln!("tpuscope: tracing to {}", h.path.display());
            }
        }
        handle
    });
    writer.is_some() && recorder::enabled()
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
    if let Some(Some(w)) = WRITER.get() {
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
