//! Checks the `#[repr(C)]` layouts in `abi` against the real XLA CPU plugin (API 0.115):
//! table size, slot count, version, and a few calls made through our Args structs.
//!
//! The plugin comes from `TPUSCOPE_TEST_CPU_PLUGIN` or the jax test env
//! (`~/.cache/tpuscope/envs/jax`, see `scripts/setup-envs.sh`); the test fails when it is absent.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    compile_add, compile_only_add, cpu_client, cpu_plugin, execute_doubles, find_in_env, load_api,
};
use tpuscope_pjrt::abi::{self as pjrt, PjrtApi, buffer_type, error_code};
use tpuscope_pjrt::driver::{Driver, ExecuteWith, SINGLE_DEVICE_COMPILE_OPTIONS};

#[test]
fn cpu_plugin_table_layout() {
    let api = load_api(&cpu_plugin());
    assert_eq!(api.struct_size, 1144);
    assert_eq!(pjrt::SLOT_COUNT, 138);
    assert_eq!(
        pjrt::API_HEADER_SIZE + pjrt::SLOT_COUNT * 8,
        api.struct_size
    );
    assert_eq!(api.struct_size, pjrt::API_STRUCT_SIZE);
    assert_eq!(api.pjrt_api_version.major, 0);
    assert_eq!(api.pjrt_api_version.minor, 115);
    assert_eq!(api.pjrt_api_version.struct_size, 24);

    // Our field offsets agree with the by-name table, and reading the slot through raw bytes
    // gives the same pointer as through the field.
    let base = (api as *const PjrtApi).cast::<u8>();
    let mut null = Vec::new();
    for name in pjrt::SLOT_NAMES {
        let off = pjrt::slot_offset(name).unwrap();
        assert!(off + 8 <= api.struct_size, "{name} beyond the table");
        // SAFETY: `off` is inside the plugin's table (checked above), 8-byte aligned.
        let raw = unsafe { base.add(off).cast::<usize>().read() };
        if raw == 0 {
            null.push(*name);
        }
    }
    assert_eq!(
        api.client_compile.map(|f| f as usize),
        // SAFETY: the slot's offset is inside the plugin's table (checked in the loop above).
        Some(unsafe {
            base.add(pjrt::slot_offset("client_compile").unwrap())
                .cast::<usize>()
                .read()
        })
    );
    println!("NULL slots in the 0.115 CPU plugin: {null:?}");
    // Every slot the collector hooks or calls is implemented by this plugin.
    for must in [
        "error_destroy",
        "error_message",
        "error_get_code",
        "plugin_attributes",
        "event_on_ready",
        "event_await",
        "event_destroy",
        "client_create",
        "client_platform_name",
        "client_platform_version",
        "client_addressable_devices",
        "client_compile",
        "client_buffer_from_host_buffer",
        "device_get_description",
        "device_description_id",
        "device_description_kind",
        "device_description_process_index",
        "device_memory_stats",
        "loaded_executable_get_executable",
        "loaded_executable_execute",
        "loaded_executable_addressable_devices",
        "executable_name",
        "executable_num_outputs",
        "executable_optimized_program",
        "executable_get_compiled_memory_stats",
        "executable_serialize",
        "executable_deserialize_and_load",
        "buffer_destroy",
        "buffer_dimensions",
        "buffer_element_type",
        "buffer_to_host_buffer",
        "buffer_ready_event",
        "buffer_is_on_cpu",
        "buffer_copy_raw_to_host",
        "compile",
        "client_load",
    ] {
        assert!(!null.contains(&must), "{must} is NULL in the CPU plugin");
    }
}

#[test]
fn cpu_plugin_calls_through_our_layouts() {
    let api = load_api(&cpu_plugin());
    // SAFETY: the table is leaked for the process.
    let d = unsafe { Driver::new(api) }.unwrap();

    let attrs = d.plugin_attributes().unwrap();
    println!("plugin attributes: {attrs:?}");
    assert!(attrs.iter().any(|(k, _)| k == "xla_version"), "{attrs:?}");

    let client = cpu_client(&d, 2);
    assert!(!client.is_null());
    // SAFETY: every handle below comes from this client and stays live until destroyed.
    unsafe {
        assert_eq!(d.platform_name(client).unwrap(), "cpu");
        println!("platform version: {}", d.platform_version(client).unwrap());
        let devs = d.addressable_devices(client).unwrap();
        assert_eq!(devs.len(), 2);
        let infos: Vec<_> = devs.iter().map(|&x| d.device_info(x).unwrap()).collect();
        println!("devices: {infos:?}");
        assert_eq!(infos[0].0, 0);
        assert_eq!(infos[1].0, 1);
        assert!(infos.iter().all(|i| i.2 == 0 && !i.1.is_empty()));

        // Host → device → host roundtrip.
        let vals: Vec<f32> = (0..6).map(|i| i as f32 * 1.5).collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let buf = d
            .buffer_from_host(client, devs[1], &bytes, buffer_type::F32, &[2, 3])
            .unwrap();
        assert_eq!(d.buffer_dimensions(buf).unwrap(), vec![2, 3]);
        assert_eq!(d.buffer_element_type(buf).unwrap(), buffer_type::F32);
        assert_eq!(pjrt::dtype_name(d.buffer_element_type(buf).unwrap()), "f32");
        assert_eq!(d.buffer_on_device_size(buf).unwrap(), 24);
        assert_eq!(d.buffer_to_host(buf).unwrap(), bytes);

        // Memory stats are not implemented by this plugin.
        let err = d.memory_stats(devs[0]).map(|_| ()).unwrap_err();
        println!("memory stats: {err}");
        assert_eq!(err.code, error_code::UNIMPLEMENTED);

        // Compile + execute with completion events, through our Program/Execute layouts.
        let exe = compile_add(&d, client);
        let inner = d.get_executable(exe).unwrap();
        println!("executable name: {}", d.executable_name(inner).unwrap());
        assert_eq!(d.num_outputs(inner).unwrap(), 1);
        let (fmt, opt) = d.optimized_program(inner).unwrap();
        println!("optimized program: {fmt}, {} bytes", opt.len());
        assert_eq!(fmt, "hlo_with_config");
        assert!(!opt.is_empty());
        let ms = d.compiled_memory_stats(inner).unwrap();
        println!(
            "compiled memory: args {} out {} temp {} code {}",
            ms.argument_size_in_bytes,
            ms.output_size_in_bytes,
            ms.temp_size_in_bytes,
            ms.generated_code_size_in_bytes
        );
        assert_eq!(ms.argument_size_in_bytes, 24);
        assert_eq!(ms.output_size_in_bytes, 24);
        match d.executable_fingerprint(inner) {
            Ok(fp) => println!("fingerprint: {} bytes", fp.len()),
            Err(e) => println!("fingerprint: {e}"),
        }
        d.executable_destroy(inner).unwrap();
        let exe_devs = d.loaded_addressable_devices(exe).unwrap();
        assert_eq!(exe_devs.len(), 1);

        let x = d
            .buffer_from_host(client, exe_devs[0], &bytes, buffer_type::F32, &[2, 3])
            .unwrap();
        execute_doubles(&d, exe, x, &vals, None);

        // The options size this plugin requires: torch_xla 2.9's 80 is rejected, ours and
        // the 0.78 size are accepted.
        let old = d.execute(
            exe,
            &[vec![x]],
            ExecuteWith {
                completion_events: false,
                options_struct_size: Some(pjrt::EXECUTE_OPTIONS_SIZE_CONTEXT),
            },
        );
        let err = old.map(|_| ()).unwrap_err();
        println!("80-byte options: {err}");
        assert!(err.message.contains("112"), "{err}");
        let needed = pjrt::execute_options_size_needed(api.pjrt_api_version.minor);
        let just = d
            .execute(
                exe,
                &[vec![x]],
                ExecuteWith {
                    completion_events: false,
                    options_struct_size: Some(needed),
                },
            )
            .unwrap();
        d.buffer_destroy(just.outputs[0][0]).unwrap();
        let short = d.execute(
            exe,
            &[vec![x]],
            ExecuteWith {
                completion_events: false,
                options_struct_size: Some(needed - 8),
            },
        );
        assert!(short.is_err());

        // Compile-only against the client's topology, then load.
        let topo = d.client_topology(client).unwrap();
        let co = compile_only_add(&d, topo, client);
        assert_eq!(d.executable_name(co).unwrap(), "add_self");
        let l = d
            .client_load(client, co, SINGLE_DEVICE_COMPILE_OPTIONS)
            .unwrap();
        d.loaded_executable_destroy(l).unwrap();
        d.executable_destroy(co).unwrap();

        // Serialize → DeserializeAndLoad.
        let inner = d.get_executable(exe).unwrap();
        let ser = d.serialize(inner).unwrap();
        d.executable_destroy(inner).unwrap();
        assert!(!ser.is_empty());
        let loaded = d.deserialize_and_load(client, &ser).unwrap();
        d.loaded_executable_destroy(loaded).unwrap();

        d.buffer_destroy(x).unwrap();
        d.buffer_destroy(buf).unwrap();
        d.loaded_executable_destroy(exe).unwrap();
        d.client_destroy(client).unwrap();
    }
}

#[test]
fn libtpu_table_layout_if_present() {
    let Some(path) = find_in_env("torch_tpu", "libtpu", "libtpu.so") else {
        println!("libtpu.so not found in the torch_tpu env: skipping its layout check");
        return;
    };
    // libtpu otherwise spends minutes on a cloud metadata server at load.
    // SAFETY: single-threaded at this point of this test; only affects this process.
    unsafe { std::env::set_var("TPU_SKIP_MDS_QUERY", "1") };
    let api = load_api(&path);
    println!(
        "libtpu: struct_size {} version {}.{}",
        api.struct_size, api.pjrt_api_version.major, api.pjrt_api_version.minor
    );
    assert_eq!(api.struct_size, pjrt::API_STRUCT_SIZE);
    assert_eq!(api.pjrt_api_version.major, 0);
    assert!(api.pjrt_api_version.minor >= 117);
    assert!(api.client_compile.is_some() && api.compile.is_some() && api.client_load.is_some());
}
