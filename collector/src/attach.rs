//! `tpuscope attach` into a process that was not started under tpuscope. The CLI loads the
//! collector into it (`tpuscope-inject`) and calls `tpuscope_attach` (in `ffi::attach`) with a
//! [`Request`]; this module runs the session: the plugin's table is copied once, a trace is
//! opened, the hooks are swapped into the live table, the Python agent is started, and when the
//! attaching process goes away (quit, Ctrl-C, SIGTERM, a crash: all the same) the plugin's own
//! functions go back and the trace is closed. The library stays loaded, so a later attach only
//! swaps the hooks in again.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::ffi::attach::{self as raw, Patch};
use crate::session::{self, PluginInfo};

/// What the attaching process asks for: `key=value` lines.
#[derive(Debug, PartialEq)]
pub struct Request {
    /// The plugin the process loaded (`plugin=`), found in its memory map by the CLI.
    pub plugin: PathBuf,
    /// The trace to write (`out=`); never replaced (a numbered sibling is taken if it exists).
    pub out: PathBuf,
    /// The attaching process (`owner=`): the session ends when it exits.
    pub owner: u32,
    /// This library's path (`collector=`), for the Python agent to load by name.
    pub collector: Option<PathBuf>,
    /// The directory holding the `tpuscope_agent` package (`agent=`); none: no agent.
    pub agent: Option<PathBuf>,
    /// The frontend the CLI saw in the process's memory map (`frontend=`), for the manifest.
    pub frontend: Option<String>,
    /// Where to bind the live socket (`socket_dir=`): the attaching process's socket directory,
    /// which may differ from the one this process's environment names.
    pub socket_dir: Option<PathBuf>,
}

impl Request {
    pub fn parse(text: &str) -> Result<Request, String> {
        let mut plugin = None;
        let mut out = None;
        let mut owner = None;
        let mut collector = None;
        let mut agent = None;
        let mut frontend = None;
        let mut socket_dir = None;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("bad request line {line:?}"));
            };
            match key {
                "plugin" => plugin = Some(PathBuf::from(value)),
                "out" => out = Some(PathBuf::from(value)),
                "owner" => owner = value.parse::<u32>().ok(),
                "collector" => collector = Some(PathBuf::from(value)),
                "agent" => agent = Some(PathBuf::from(value)),
                "frontend" => frontend = Some(value.to_string()),
                "socket_dir" => socket_dir = Some(PathBuf::from(value)),
                // A newer CLI may ask for more: what this collector does not know it ignores.
                _ => {}
            }
        }
        Ok(Request {
            plugin: plugin.ok_or("the request names no plugin")?,
            out: out.ok_or("the request names no trace file")?,
            owner: owner.ok_or("the request names no owner pid")?,
            collector,
            agent,
            frontend,
            socket_dir,
        })
    }
}

/// What `attach` did.
pub enum Attached {
    /// A session started; the text says where it records.
    Started(String),
    /// A session is already recording (another `tpuscope attach`); the text says where.
    Already(String),
}

struct State {
    /// The plugin's table and the hooks for it: prepared at the first attach, kept.
    patch: Option<(PathBuf, Patch)>,
    /// The trace of the session recording now.
    recording: Option<PathBuf>,
}

static STATE: Mutex<State> = Mutex::new(State {
    patch: None,
    recording: None,
});

/// Starts a session (see the module doc). Errors are one line for the user.
pub fn attach(text: &str) -> Result<Attached, String> {
    let req = Request::parse(text)?;
    let mut st = STATE
        .lock()
        .map_err(|_| "attach state poisoned".to_string())?;
    if let Some(trace) = &st.recording {
        return Ok(Attached::Already(format!("trace={}", trace.display())));
    }
    if st.patch.is_none() {
        if crate::ffi::real().is_some() {
            return Err(
                "this process already runs under tpuscope (its PJRT plugin is the \
                        collector) but serves no live socket: it was started with TPUSCOPE_LIVE=0"
                    .into(),
            );
        }
        let patch = raw::prepare(&req.plugin)?;
        crate::ffi::python::init();
        crate::ffi::silence_forked_children();
        st.patch = Some((req.plugin.clone(), patch));
    }
    let Some((plugin, patch)) = &st.patch else {
        return Err("no plugin table".into());
    };
    if *plugin != req.plugin {
        return Err(format!(
            "an earlier attach hooked {}; this one asks for {}",
            plugin.display(),
            req.plugin.display()
        ));
    }
    if let Some(f) = &req.frontend {
        crate::agent::set_frontend(f);
    }
    let info = PluginInfo {
        api_major: patch.api_major,
        api_minor: patch.api_minor,
        attributes: crate::ffi::plugin_attributes(),
    };
    let trace =
        session::start_attached(info, plugin, &req.out, req.socket_dir.as_deref(), req.owner)?;
    raw::begin_session();
    raw::set_attached(true);
    crate::ffi::set_recording(true);
    let swapped = match raw::publish(patch) {
        Ok(0) => {
            let e = "no slot of the plugin's table could be swapped (another tool holds them)";
            return Err(end_session(patch, e.into()));
        }
        Ok(n) => n,
        Err(e) => return Err(end_session(patch, e)),
    };
    st.recording = Some(trace.clone());
    drop(st);
    session::note(
        "attach",
        format!(
            "attached by pid {} to a running process: {swapped} PJRT functions hooked; compiles, \
             transfers and buffers from before this point are not in the trace",
            req.owner
        ),
    );
    watch_owner(req.owner);
    if let (Some(agent), Some(collector)) = (&req.agent, &req.collector)
        && let Err(e) = raw::run_python_soon(&agent_code(agent, collector))
    {
        session::note("agent", format!("the Python agent was not started: {e}"));
    }
    Ok(Attached::Started(format!("trace={}", trace.display())))
}

/// Undoes a half-started session; returns `err` for the caller.
fn end_session(patch: &Patch, err: String) -> String {
    raw::unpublish(patch);
    raw::end_session();
    crate::ffi::set_recording(false);
    raw::set_attached(false);
    session::stop_attached();
    err
}

/// Ends the session when the attaching process exits (on a thread of its own).
fn watch_owner(owner: u32) {
    let spawned = std::thread::Builder::new()
        .name("tpuscope-attach".into())
        .spawn(move || {
            raw::wait_for_exit(owner);
            detach();
        });
    if spawned.is_err() {
        session::note(
            "attach",
            "could not start the thread that detaches when tpuscope exits: detaching now",
        );
        detach();
    }
}

/// Puts the plugin's functions back and closes the trace. Calls in flight finish where they
/// are (the library stays loaded).
pub fn detach() {
    let Ok(mut st) = STATE.lock() else { return };
    if st.recording.take().is_none() {
        return;
    }
    let Some((_, patch)) = &st.patch else { return };
    let restored = raw::unpublish(patch);
    // Before anything else: from now on a client can be destroyed without the hooks seeing it.
    raw::end_session();
    session::note(
        "detach",
        format!("tpuscope detached: {restored} PJRT functions restored"),
    );
    crate::ffi::set_recording(false);
    raw::set_attached(false);
    session::stop_attached();
}

/// Python that imports the agent from `agent` (appended to `sys.path` only for the import) and
/// starts it on the already-running frontend. Paths travel as hex: no quoting to get wrong.
fn agent_code(agent: &std::path::Path, collector: &std::path::Path) -> String {
    let hex = |p: &std::path::Path| -> String {
        p.as_os_str()
            .as_encoded_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    format!(
        "def _tpuscope_attach():\n\
         \x20   import os, sys\n\
         \x20   d = os.fsdecode(bytes.fromhex('{}'))\n\
         \x20   added = d not in sys.path\n\
         \x20   if added:\n\
         \x20       sys.path.append(d)\n\
         \x20   try:\n\
         \x20       import tpuscope_agent\n\
         \x20   finally:\n\
         \x20       if added:\n\
         \x20           sys.path.remove(d)\n\
         \x20   tpuscope_agent.attach(os.fsdecode(bytes.fromhex('{}')))\n\
         try:\n\
         \x20   _tpuscope_attach()\n\
         finally:\n\
         \x20   del _tpuscope_attach\n",
        hex(agent),
        hex(collector)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request_and_ignores_unknown_keys() {
        let r =
            Request::parse("plugin=/p/x.so\nout=/t/a.tps\nowner=42\nnewer=1\nagent=/a\n").unwrap();
        assert_eq!(r.plugin, PathBuf::from("/p/x.so"));
        assert_eq!(r.out, PathBuf::from("/t/a.tps"));
        assert_eq!(r.owner, 42);
        assert_eq!(r.agent, Some(PathBuf::from("/a")));
        assert_eq!(r.collector, None);
    }

    #[test]
    fn a_request_without_owner_or_plugin_is_refused() {
        assert!(Request::parse("plugin=/p\nout=/o\n").is_err());
        assert!(Request::parse("out=/o\nowner=1\n").is_err());
        assert!(Request::parse("garbage").is_err());
    }

    #[test]
    fn agent_code_carries_paths_as_hex() {
        let code = agent_code(std::path::Path::new("/a'b"), std::path::Path::new("/c\"d"));
        assert!(code.contains("2f612762"), "{code}");
        assert!(code.contains("2f632264"), "{code}");
        assert!(!code.contains("a'b"));
    }
}
