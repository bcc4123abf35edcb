//! A trace `tpuscope attach` recorded from the middle of a real JAX run
//! (`sample_traces/real/jax_attach.tps`, from tests/workloads/attach_jax.py): the program that
//! ran before the attach is what the first compile after it is compared with, it is never
//! counted as a compile, and the report says what the trace cannot hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_analyzers::diff::Cause;
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::families;
use tpuscope_analyzers::report;
use tpuscope_core::event::Record;

fn trace() -> tpuscope_core::Trace {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/jax_attach.tps");
    tpuscope_core::reader::read_trace_file(&p).unwrap()
}

#[test]
fn the_first_compile_after_an_attach_is_diffed_against_the_program_from_before() {
    let t = trace();
    let rep = report::build_one("jax_attach.tps", &t, None);
    let compiles = t
        .events
        .iter()
        .filter(|r| matches!(r, Record::Compile(_)))
        .count() as u64;
    // Only compiles the trace holds are counted; the program from before is not one of them.
    assert_eq!(rep.compiles.total, compiles);
    let f = rep
        .recompiles
        .iter()
        .find(|f| f.graph == "jit_train_step")
        .expect("train_step's family");
    let first = &f.members[0];
    assert!(first.before_attach, "{first:?}");
    assert_eq!(first.cause_label(), "before attach");
    assert_eq!(first.compile_ms, 0.0);
    assert!(
        matches!(t.events[first.event], Record::ExecutableSeen(_)),
        "the first member points at its ExecutableSeen record"
    );
    // The first compile seen is a recompile: its learning rate changed from the one before.
    let second = &f.members[1];
    assert_eq!(second.cause, Some(Cause::ConstantChanged));
    assert_eq!(second.against, Some(0));
    let changed = &second.diff.as_ref().unwrap().constants[0];
    assert_ne!(changed.old, changed.new);
    assert_eq!(f.count, f.members.len() as u64);
    assert_eq!(rep.compiles.recompiles, f.count - 1);
    assert_eq!(
        rep.compiles.recompiles, compiles,
        "every compile seen changed the constant"
    );
    let a = rep.traces[0].attached.as_ref().unwrap();
    assert!(a.detached);
    assert!(
        a.executables_before
            .contains(&"jit_weight_norm".to_string())
    );
    assert!(
        rep.warnings
            .iter()
            .any(|w| w.contains("attached to a process"))
    );
    // No set-up phase in a trace that starts mid-run.
    assert!(
        rep.phases
            .iter()
            .all(|p| p.phase != tpuscope_analyzers::phases::Phase::Setup)
    );
}

#[test]
fn programs_from_before_the_attach_are_listed_apart_from_the_compiles() {
    let t = trace();
    let compiles = families::compiles(&t, &Digest::of(&t), 0);
    let before = families::seen_before_attach(&t, &Digest::of(&t), 0);
    assert!(compiles.iter().all(|c| !c.before_attach));
    assert!(!before.is_empty() && before.iter().all(|c| c.before_attach && c.dur_ns == 0));
    let both = families::compiles_and_baselines(&t, &tpuscope_analyzers::digest::Digest::of(&t), 0);
    assert_eq!(both.len(), compiles.len() + before.len());
    // A trace recorded from its start has none.
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/jax_lr.tps");
    let lr = tpuscope_core::reader::read_trace_file(&p).unwrap();
    assert!(families::seen_before_attach(&lr, &Digest::of(&lr), 0).is_empty());
    assert!(
        report::build_one("jax_lr.tps", &lr, None).traces[0]
            .attached
            .is_none()
    );
}
