//! tpuscope-core: the event model, the `.tps` trace format and the HLO proto subset.
//!
//! The collector writes traces with [`writer::TraceWriter`]; everything else reads them with
//! [`reader::read_trace`].
//!
//! Core reads no clock and does no I/O of its own except at its edge: [`host`] (the live-socket
//! directory, the uid, the environment) and [`stream::TraceFile`] (opening a trace input, for
//! [`stream::TraceStream::open`] and the readers that want its bytes). The bans are listed in
//! `core/clippy.toml`; tests, benches and examples are separate crates and may use files.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod align;
pub mod chunked;
pub mod compile_options;
pub mod event;
pub mod format;
pub mod hlo;
pub mod host;
pub mod json;
pub mod live;
pub mod par;
pub mod reader;
pub mod stream;
pub mod wire;
pub mod writer;
pub mod xplane;

pub use event::Record;
pub use reader::{
    Completeness, ReadError, Trace, TraceBuilder, read_trace, read_trace_file, read_traces,
    read_traces_file,
};
pub use stream::{Streamed, TraceStream};
pub use writer::{RawStackEntry, TraceWriter};
