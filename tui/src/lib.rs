//! Live terminal view of an instrumented process (`tpuscope run`, `tpuscope attach`).
//!
//! The driver (the CLI) owns the event loop: it folds the trace stream (the trace's tables, the
//! digest of its events, its latest events: a [`Run`]), runs the analyzers, builds a [`Model`] with
//! [`Model::build_run`] ([`Model::build`] for a trace decoded whole) and hands it to the [`App`];
//! keys go to [`App::handle_key`]; frames are drawn with [`view::draw_app`] (or [`view::draw`] with
//! an explicit model). Nothing here reads the clock or the terminal except [`term`], so every
//! screen is testable on ratatui's `TestBackend`.

pub mod app;
mod fmt;
pub mod model;
pub mod term;
pub mod view;

pub use app::{Action, App, HIGHLIGHT_MS, Tab};
pub use model::{EVENT_SCAN_LIMIT, Extra, Model, Run, RunState};
pub use view::{draw, draw_app};

/// The ratatui and crossterm this crate draws with, for the driver's event loop.
pub use crossterm;
pub use ratatui;
