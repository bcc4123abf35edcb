//! What a live stream says about itself rather than about the workload: the notes the collector
//! adds for one viewer. Read here once for every view of a stream (the live view, `/metrics`).

use tpuscope_core::event::Record;
use tpuscope_core::live::VIEWER_LAGGED;

use crate::digest::Digest;

/// Trace frames this viewer lost because it read more slowly than the workload wrote (the trace
/// file has them): the highest total its `viewer_lagged` notes carry, 0 without any. Read from
/// the run's digest (notes are among the records it keeps whole).
pub fn viewer_lost_of(d: &Digest) -> u64 {
    d.others()
        .filter_map(|(_, r)| match r {
            // Each note carries this viewer's total so far.
            Record::Note(n) if n.topic == VIEWER_LAGGED => n.message.trim().parse().ok(),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{Manifest, Note};

    #[test]
    fn the_highest_total_of_the_viewer_notes_counts_and_other_notes_do_not() {
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        let lost = |w: &TraceWriter<Vec<u8>>| {
            viewer_lost_of(&Digest::of(
                &tpuscope_core::read_trace(w.get_ref()).unwrap(),
            ))
        };
        assert_eq!(lost(&w), 0);
        for (topic, message) in [
            (VIEWER_LAGGED, "2"),
            (VIEWER_LAGGED, " 9\n"),
            (VIEWER_LAGGED, "not a number"),
            ("abi_bridge", "40"),
            (VIEWER_LAGGED, "7"),
        ] {
            w.write(&Record::Note(Note {
                t_ns: 1,
                thread: 0,
                topic: topic.into(),
                message: message.into(),
            }))
            .unwrap();
        }
        assert_eq!(lost(&w), 9);
    }
}
