//! State the Python agent shares with the collector (through the `tpuscope_*` exports in `ffi`):
//! the frontend it detected. Stacks and steps it reports become ordinary events.

use std::sync::Mutex;

static FRONTEND: Mutex<String> = Mutex::new(String::new());

/// Sets the frontend name the agent detected (`jax`, `torch_xla`, `torch_tpu`).
pub fn set_frontend(name: &str) {
    if let Ok(mut f) = FRONTEND.lock() {
        *f = name.to_string();
    }
}

/// The frontend, from the agent if it spoke, else from the environment.
pub fn frontend_hint() -> String {
    if let Ok(f) = FRONTEND.lock()
        && !f.is_empty()
    {
        return f.clone();
    }
    std::env::var("TPUSCOPE_FRONTEND").unwrap_or_default()
}
