//! Checks the topology, device-description attribute and cost-analysis layouts against the real
//! libtpu (0.0.52, PJRT 0.117) on its compile-only path: no TPU needed.
//!
//! libtpu comes from the torch_tpu test env (`scripts/setup-envs.sh torch_tpu`); the test fails
//! when it is absent.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADD_MLIR, find_in_env, load_api};
use tpuscope_pjrt::driver::{Driver, SINGLE_DEVICE_COMPILE_OPTIONS, Value};

#[test]
fn libtpu_topology_devices_attributes_and_cost_analysis() {
    let path = find_in_env("torch_tpu", "libtpu", "libtpu.so")
        .expect("libtpu.so missing from the torch_tpu env: run scripts/setup-envs.sh torch_tpu");
    // libtpu otherwise spends minutes on a cloud metadata server at load.
    // SAFETY: set before libtpu is loaded; this test binary has no other thread reading env.
    unsafe { std::env::set_var("TPU_SKIP_MDS_QUERY", "1") };
    let api = load_api(&path);
    // SAFETY: the table lives as long as the leaked library.
    let d = unsafe { Driver::new(api) }.unwrap();

    d.plugin_initialize().unwrap();
    let topo = d.topology_create("v5e:2x2", &[]).unwrap();
    assert!(!topo.is_null());
    // SAFETY: `topo` is live until destroyed at the end; descriptions live as long as it.
    unsafe {
        let descs = d.topology_device_descriptions(topo).unwrap();
        assert_eq!(descs.len(), 4, "v5e:2x2 has 4 chips");
        let kind = d.description_kind(descs[0]).unwrap();
        assert!(kind.contains("v5"), "{kind}");
        let attrs = d.description_attributes(descs[0]).unwrap();
        println!("device kind {kind:?}, attributes {attrs:?}");
        // Names as libtpu sets them: a layout error would garble or drop them.
        assert!(
            attrs
                .iter()
                .all(|(n, _)| !n.is_empty() && n.is_ascii() && n.len() < 64),
            "{attrs:?}"
        );
        let tattrs = d.topology_attributes(topo).unwrap();
        println!("topology attributes {tattrs:?}");
        // A v5e chip has 16 GiB of HBM; libtpu reports what a program may use of it, on the
        // device and on the topology alike.
        let limit = |a: &[(String, Value)]| {
            a.iter()
                .find(|(n, _)| n == "device_memory_bytes_limit")
                .and_then(|(_, v)| v.as_f64())
        };
        let hbm = limit(&attrs).expect("device_memory_bytes_limit");
        assert!(
            hbm > 15.0 * (1u64 << 30) as f64 && hbm <= 16.0 * (1u64 << 30) as f64,
            "{hbm}"
        );
        assert_eq!(limit(&tattrs), Some(hbm));

        let exe = d
            .compile_only(
                topo,
                std::ptr::null_mut(),
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let cost = d.cost_analysis(exe).unwrap();
        println!("cost analysis {cost:?}");
        let get = |k: &str| cost.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        // x + x on f32[2,3]: 6 flops; reads 24 bytes and writes 24.
        assert_eq!(get("flops").and_then(|v| v.as_f64()), Some(6.0), "{cost:?}");
        let bytes = get("bytes accessed").and_then(|v| v.as_f64()).unwrap();
        assert!(bytes >= 48.0, "{cost:?}");
        assert!(
            matches!(get("optimal_seconds"), Some(Value::Float(x)) if x > 0.0),
            "{cost:?}"
        );
        let mem = d.compiled_memory_stats(exe).unwrap();
        assert!(mem.argument_size_in_bytes >= 24);
        d.executable_destroy(exe).unwrap();
        d.topology_destroy(topo).unwrap();
    }
}

/// Only libtpu carries the TPU topology extension (how `tpuscope whatif` tells libtpu from
/// another PJRT plugin given as `--libtpu`); its topologies' devices are TPUs by kind.
#[test]
fn only_libtpu_carries_the_tpu_topology_extension() {
    let path = find_in_env("torch_tpu", "libtpu", "libtpu.so")
        .expect("libtpu.so missing from the torch_tpu env: run scripts/setup-envs.sh torch_tpu");
    // SAFETY: set before libtpu is loaded; this test binary has no other thread reading env.
    unsafe { std::env::set_var("TPU_SKIP_MDS_QUERY", "1") };
    // SAFETY: the tables live as long as the leaked libraries.
    let (tpu, cpu) = unsafe {
        (
            Driver::new(load_api(&path)).unwrap(),
            Driver::new(load_api(&common::cpu_plugin())).unwrap(),
        )
    };
    assert!(tpuscope_pjrt::probe::is_libtpu(&tpu));
    assert!(
        !tpuscope_pjrt::probe::is_libtpu(&cpu),
        "{:?}",
        tpuscope_pjrt::probe::extension_types(&cpu)
    );
    tpu.plugin_initialize().unwrap();
    let topo = tpuscope_pjrt::compile_only::Topology::create(tpu, "v6e:2x2").unwrap();
    assert_eq!(topo.device_kind().unwrap().as_deref(), Some("TPU v6 lite"));
}

/// v4 has two TensorCores per chip: what libtpu's compile-only topology counts as a device there.
#[test]
fn libtpu_v4_devices_and_chips() {
    let path = find_in_env("torch_tpu", "libtpu", "libtpu.so")
        .expect("libtpu.so missing from the torch_tpu env: run scripts/setup-envs.sh torch_tpu");
    // SAFETY: set before libtpu is loaded; this test binary has no other thread reading env.
    unsafe { std::env::set_var("TPU_SKIP_MDS_QUERY", "1") };
    // SAFETY: the table lives as long as the leaked library.
    let d = unsafe { Driver::new(load_api(&path)) }.unwrap();
    d.plugin_initialize().unwrap();
    // v4: one device per TensorCore (no megacore here), each with the chip's whole limit.
    for (name, devices, chips, min_gib) in [("v4:2x2x1", 8, 4, 30), ("v5p:2x2x1", 4, 4, 95)] {
        let topo = tpuscope_pjrt::compile_only::Topology::create(d, name).unwrap();
        let (dev, attrs) = topo.attributes();
        println!("{name}: first device {dev:?}, topology {attrs:?}");
        assert_eq!(topo.devices().unwrap(), devices, "{name}");
        assert_eq!(topo.chips().unwrap(), chips, "{name}");
        let hbm = topo.device_memory_limit().unwrap();
        assert!(
            hbm >= min_gib << 30 && hbm < (min_gib + 2) << 30,
            "{name}: {hbm}"
        );
    }
}
