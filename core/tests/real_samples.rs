//! The real sample traces (sample_traces/real, recorded by scripts/record-samples.sh) stay
//! readable and hold what their workloads did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_core::event::Record;
use tpuscope_core::{Completeness, Trace};

fn sample(name: &str) -> Trace {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/real")
        .join(name);
    let t = tpuscope_core::read_trace_file(&p).unwrap();
    assert_eq!(t.completeness, Completeness::Complete, "{name}");
    assert!(
        t.damage.is_empty() && t.unknown_records == 0 && t.undecodable_records == 0,
        "{name}"
    );
    t
}

fn compiles(t: &Trace) -> Vec<&tpuscope_core::event::Compile> {
    t.events
        .iter()
        .filter_map(|r| {
            if let Record::Compile(c) = r {
                Some(&**c)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn jax_lr_recompiles_its_train_step_per_epoch() {
    let t = sample("jax_lr.tps");
    let steps = compiles(&t)
        .into_iter()
        .filter(|c| c.executable_name == "jit_train_step")
        .count();
    assert_eq!(steps, 4, "one compile per learning rate");
    assert!(
        t.manifest
            .as_ref()
            .unwrap()
            .package_versions
            .iter()
            .any(|kv| kv.key == "jax")
    );
}

#[test]
fn torch_xla_item_has_hlo_programs_and_item_syncs() {
    let t = sample("torch_xla_item.tps");
    assert!(compiles(&t).iter().all(|c| c.program_format == "hlo"));
    let syncs = t
        .events
        .iter()
        .filter(|r| matches!(r, Record::Transfer(x) if x.sync))
        .count();
    assert!(syncs >= 5);
}

#[test]
fn torch_tpu_cache_stores_executables() {
    let t = sample("torch_tpu_cache.tps");
    assert!(t.events.iter().any(|r| matches!(r, Record::CacheStore(_))));
    assert_eq!(t.manifest.as_ref().unwrap().role, "standin");
}

#[test]
fn jax_aot_v5e_is_a_compile_only_tpu_compile() {
    let t = sample("jax_aot_v5e.tps");
    let c = compiles(&t);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].api, "PJRT_Compile");
    assert!(c[0].memory.is_some());
    assert!(t.blobs.contains_key(&c[0].optimized_hash));
}

#[test]
fn jax_shapes_reads_back_24_results() {
    let t = sample("jax_shapes.tps");
    let d2h = t
        .events
        .iter()
        .filter(|r| matches!(r, Record::Transfer(x) if x.sync))
        .count();
    assert_eq!(d2h, 24);
}
