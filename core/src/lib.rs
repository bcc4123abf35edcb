//! tpuscope-core: the event model, the `.tps` trace format and the HLO proto subset.
//!
//! The collector writes traces with [`writer::TraceWriter`]; everything else reads them with
//! [`reader::read_trace`].

pub mod align;
pub mod event;
pub mod format;
pub mod hlo;
pub mod json;
pub mod live;
pub mod reader;
pub mod stream;
pub mod writer;

pub use event::Record;
pub use reader::{
    Completeness, ReadError, Trace, TraceBuilder, read_trace, read_trace_file, read_traces,
    read_traces_file,
};
pub use stream::{Streamed, TraceStream};
pub use writer::{RawFrame, TraceWriter};
