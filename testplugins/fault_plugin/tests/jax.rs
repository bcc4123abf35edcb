//! JAX 0.10.2 (the `jax` test env) running on the fault plugin in front of the XLA CPU plugin:
//! results are unchanged when nothing is injected, and injected failures reach Python with the
//! plugin's code and message. Fails when the env is missing (`scripts/setup-envs.sh jax`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// Runs `code` under the env's python with JAX on `plugin` (registered as platform "fault").
fn run_jax(plugin: &Path, code: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(jax_python());
    c.arg("-c")
        .arg(code)
        .args(args)
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("fault:{}", plugin.display()),
        )
        .env("JAX_PLATFORMS", "fault");
    for k in [ENV_REAL, ENV_SPEC, ENV_COUNTS] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    eprintln!("{}", show(&out));
    assert!(out.status.success(), "python failed");
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const JIT_TWICE: &str = r#"
import numpy as np, jax
x = np.arange(4, dtype=np.float32)
try:
    print("FIRST", np.asarray(jax.jit(lambda a: a * 2 + 1)(x)).tolist())
except Exception as e:
    print("ERROR", type(e).__name__, "|", e)
print("SECOND", np.asarray(jax.jit(lambda a: a * 3)(x)).tolist())
"#;

/// No spec: the same output as on the CPU plugin directly, and the calls JAX made are counted.
#[test]
fn jax_runs_unchanged_through_the_plugin() {
    let cpu = cpu_plugin();
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts.json");
    let direct = run_jax(&cpu, JIT_TWICE, &[], &[]);
    let via = run_jax(
        &fault_plugin(),
        JIT_TWICE,
        &[],
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_COUNTS, counts.to_str().unwrap()),
        ],
    );
    assert_eq!(stdout(&via), stdout(&direct));
    assert!(
        stdout(&via).contains("FIRST [1.0, 3.0, 5.0, 7.0]"),
        "{}",
        stdout(&via)
    );
    let c = read_counts(&counts);
    assert_eq!(c["Client_Create"], 1, "{c:?}");
    assert_eq!(c["Client_Compile"], 2, "{c:?}");
    assert_eq!(c["LoadedExecutable_Execute"], 2, "{c:?}");
    assert!(c["Client_BufferFromHostBuffer"] >= 2, "{c:?}");
    // Two results read back: JAX reads CPU buffers zero-copy (external reference), or copies.
    assert_eq!(
        c["Buffer_IncreaseExternalReferenceCount"] + c["Buffer_ToHostBuffer"],
        2,
        "{c:?}"
    );
    assert_eq!(c["Injected_Errors"], 0, "{c:?}");
}

/// `compile:error@1`: the first jit raises a Python exception carrying the injected code and
/// message; the next compile goes through.
#[test]
fn jax_sees_the_injected_compile_error() {
    let cpu = cpu_plugin();
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts.json");
    let out = run_jax(
        &fault_plugin(),
        JIT_TWICE,
        &[],
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_COUNTS, counts.to_str().unwrap()),
            (ENV_SPEC, "compile:error@1"),
        ],
    );
    let text = stdout(&out);
    assert!(
        text.contains(
            "ERROR JaxRuntimeError | INVALID_ARGUMENT: tpuscope fault injection: compile call #1"
        ),
        "{text}"
    );
    assert!(text.contains("SECOND [0.0, 3.0, 6.0, 9.0]"), "{text}");
    let c = read_counts(&counts);
    assert_eq!(c["Client_Compile"], 2, "{c:?}");
    assert_eq!(c["LoadedExecutable_Execute"], 1, "{c:?}");
    assert_eq!(c["Injected_Errors"], 1, "{c:?}");
    assert_eq!(c["Injected_ErrorsDestroyed"], 1, "{c:?}");
}

const CACHED_JIT: &str = r#"
import sys, numpy as np, jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
x = np.arange(4, dtype=np.float32)
print("RESULT", np.asarray(jax.jit(lambda a: a * 2 + 1)(x)).tolist())
"#;

/// `deserialize:error@*` mimics libtpu refusing a cached executable: JAX's persistent cache
/// hit fails to load, JAX warns with our message and compiles instead.
#[test]
fn jax_recompiles_when_deserialize_fails() {
    let cpu = cpu_plugin();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let counts = dir.path().join("counts.json");
    let plugin = fault_plugin();
    let (cpu_s, counts_s) = (cpu.to_str().unwrap(), counts.to_str().unwrap());
    let env = |spec| [(ENV_REAL, cpu_s), (ENV_COUNTS, counts_s), (ENV_SPEC, spec)];

    // Run 1 fills the cache: compile, then serialize.
    let first = run_jax(&plugin, CACHED_JIT, &[cache.to_str().unwrap()], &env(""));
    assert!(stdout(&first).contains("RESULT [1.0, 3.0, 5.0, 7.0]"));
    let c = read_counts(&counts);
    assert_eq!(
        (
            c["Client_Compile"],
            c["Executable_Serialize"],
            c["Executable_DeserializeAndLoad"]
        ),
        (1, 1, 0),
        "{c:?}"
    );

    // Run 2 hits the cache, the load fails, JAX compiles again and still gets the result.
    let second = run_jax(
        &plugin,
        CACHED_JIT,
        &[cache.to_str().unwrap()],
        &env("deserialize:error@*"),
    );
    assert!(stdout(&second).contains("RESULT [1.0, 3.0, 5.0, 7.0]"));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(
            "UNIMPLEMENTED: tpuscope fault injection: Deserializing serialized executable not supported"
        ),
        "{err}"
    );
    let c = read_counts(&counts);
    assert_eq!(c["Executable_DeserializeAndLoad"], 1, "{c:?}");
    assert_eq!(c["Client_Compile"], 1, "{c:?}");
    assert_eq!(c["Injected_Errors"], 1, "{c:?}");
    assert_eq!(c["Injected_ErrorsDestroyed"], 1, "{c:?}");
}
