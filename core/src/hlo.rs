//! HLO proto subset.
#![allow(missing_docs)]
include!(concat!(env!("OUT_DIR"), "/tpuscope.hlo.rs"));
