//! Compile-only against a named topology (libtpu's `"v5e:2x2"`) without a client, as a safe API:
//! what `tpuscope whatif`'s child process does with a captured program.
//!
//! Caveat: libtpu aborts the process (`Check failed: id < CoreCount`) for a program needing
//! more devices than the topology has; check [`Topology::devices`] first and compile in a
//! throwaway process.

use std::time::{Duration, Instant};

use crate::abi::PjrtTopologyDescription;
use crate::driver::{Driver, Result, Value};
use crate::profiler::Profiler;

/// Named values a plugin returned, copied.
pub type Attributes = Vec<(String, Value)>;

/// A topology description this process created (destroyed on drop).
pub struct Topology {
    d: Driver,
    topo: *mut PjrtTopologyDescription,
}

/// What one compile-only `PJRT_Compile` gave.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// Wall time of `PJRT_Compile`.
    pub compile_time: Duration,
    /// `PJRT_Executable_GetCompiledMemoryStats`, bytes per device (None when unimplemented).
    pub memory: Option<MemoryStats>,
    /// `PJRT_Executable_GetCostAnalysis` properties as the plugin names them.
    pub cost: Vec<(String, Value)>,
    /// The optimized program's format and size, when the plugin gives it.
    pub optimized: Option<(String, usize)>,
}

/// Compiled memory of one executable on one device, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub argument: i64,
    pub output: i64,
    pub alias: i64,
    pub temp: i64,
    pub generated_code: i64,
    pub peak: i64,
}

impl Topology {
    /// `PJRT_TopologyDescription_Create(name)`. The plugin must have been initialized
    /// ([`Driver::plugin_initialize`]).
    pub fn create(d: Driver, name: &str) -> Result<Topology> {
        let topo = d.topology_create(name, &[])?;
        Ok(Topology { d, topo })
    }

    /// Devices in the topology.
    pub fn devices(&self) -> Result<usize> {
        // SAFETY: `topo` is live while `self` is.
        unsafe { self.d.topology_device_descriptions(self.topo) }.map(|v| v.len())
    }

    /// The first device's kind (`TPU v5 lite`); `None` for a topology without devices.
    pub fn device_kind(&self) -> Result<Option<String>> {
        // SAFETY: `topo` and its descriptions are live while `self` is.
        unsafe {
            let descs = self.d.topology_device_descriptions(self.topo)?;
            match descs.first() {
                Some(&desc) => self.d.description_kind(desc).map(Some),
                None => Ok(None),
            }
        }
    }

    /// Chips in the topology: devices with distinct `coords` (a v4 chip holds two devices, one
    /// per TensorCore); the device count when the plugin gives no coordinates.
    pub fn chips(&self) -> Result<usize> {
        // SAFETY: `topo` and its descriptions are live while `self` is.
        let descs = unsafe { self.d.topology_device_descriptions(self.topo)? };
        let mut coords = std::collections::BTreeSet::new();
        for &desc in &descs {
            // SAFETY: as above.
            let attrs = unsafe { self.d.description_attributes(desc) }.unwrap_or_default();
            match attrs.into_iter().find(|(n, _)| n == "coords") {
                Some((_, Value::IntList(c))) => {
                    coords.insert(c);
                }
                _ => return Ok(descs.len()),
            }
        }
        Ok(coords.len())
    }

    /// Attributes of the first device and of the topology (libtpu:
    /// `device_memory_bytes_limit`, `num_cores`, `coords`…).
    pub fn attributes(&self) -> (Attributes, Attributes) {
        // SAFETY: `topo` and its descriptions are live while `self` is.
        unsafe {
            let device = self
                .d
                .topology_device_descriptions(self.topo)
                .ok()
                .and_then(|v| v.first().copied())
                .and_then(|desc| self.d.description_attributes(desc).ok())
                .unwrap_or_default();
            let topo = self.d.topology_attributes(self.topo).unwrap_or_default();
            (device, topo)
        }
    }

    /// The memory a program may use on one device, as the plugin says it
    /// (`device_memory_bytes_limit` of a device, else of the topology).
    pub fn device_memory_limit(&self) -> Option<u64> {
        let (device, topo) = self.attributes();
        let limit = |attrs: &[(String, Value)]| {
            attrs
                .iter()
                .find(|(n, _)| n == "device_memory_bytes_limit")
                .and_then(|(_, v)| match v {
                    Value::Int(b) => u64::try_from(*b).ok().filter(|b| *b > 0),
                    _ => None,
                })
        };
        limit(&device).or_else(|| limit(&topo))
    }

    /// `PJRT_Compile` of `code` (`format` `"mlir"`, `"hlo"`…) with a serialized
    /// `CompileOptionsProto`, no client; then what the executable says of itself.
    pub fn compile(&self, format: &str, code: &[u8], options: &[u8]) -> Result<Compiled> {
        self.compile_traced(format, code, options, None)
            .map(|(c, _)| c)
    }

    /// [`Topology::compile`] with `PJRT_Compile` (only it) inside a session of `profiler` with
    /// these serialized `ProfileOptions`: also the `XSpace` the plugin traced (or why not).
    pub fn compile_profiled(
        &self,
        format: &str,
        code: &[u8],
        options: &[u8],
        profiler: &Profiler,
        profile_options: &[u8],
    ) -> Result<(Compiled, Result<Vec<u8>>)> {
        self.compile_traced(format, code, options, Some((profiler, profile_options)))
            .map(|(c, xspace)| (c, xspace.unwrap_or_else(|| Ok(Vec::new()))))
    }

    fn compile_traced(
        &self,
        format: &str,
        code: &[u8],
        options: &[u8],
        profiler: Option<(&Profiler, &[u8])>,
    ) -> Result<(Compiled, Option<Result<Vec<u8>>>)> {
        let compile = || {
            let t0 = Instant::now();
            // SAFETY: `topo` is live; a NULL client is allowed for compile-only.
            let exe = unsafe {
                self.d
                    .compile_only(self.topo, std::ptr::null_mut(), code, format, options)
            };
            (exe, t0.elapsed())
        };
        let ((exe, compile_time), xspace) = match profiler {
            Some((p, profile_options)) => {
                let (r, xspace) = p.profile(profile_options, compile);
                (r, Some(xspace))
            }
            None => (compile(), None),
        };
        let exe = exe?;
        // SAFETY: `exe` is ours and live until destroyed at the end.
        unsafe {
            let memory = self.d.compiled_memory_stats(exe).ok().map(|m| MemoryStats {
                argument: m.argument_size_in_bytes,
                output: m.output_size_in_bytes,
                alias: m.alias_size_in_bytes,
                temp: m.temp_size_in_bytes,
                generated_code: m.generated_code_size_in_bytes,
                peak: m.peak_memory_in_bytes,
            });
            let cost = self.d.cost_analysis(exe).unwrap_or_default();
            let optimized = self
                .d
                .optimized_program(exe)
                .ok()
                .map(|(f, c)| (f, c.len()));
            self.d.executable_destroy(exe)?;
            let compiled = Compiled {
                compile_time,
                memory,
                cost,
                optimized,
            };
            Ok((compiled, xspace))
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // SAFETY: `topo` was created by this process and is destroyed once, here.
        let _ = unsafe { self.d.topology_destroy(self.topo) };
    }
}
