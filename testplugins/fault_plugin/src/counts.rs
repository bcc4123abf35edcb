//! Exact call counters and the JSON file they are written to.
//!
//! Every counter counts calls the plugin received from above, whether forwarded or failed by an
//! injected fault. All keys are always written (zeros too) so tests can compare whole maps.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter per hooked call (and three for the injection itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    ClientCreate,
    ClientCompile,
    Compile,
    LoadedExecutableExecute,
    ClientBufferFromHostBuffer,
    /// `PJRT_Buffer_ToHostBuffer` with a destination: a real copy.
    BufferToHostBuffer,
    /// `PJRT_Buffer_ToHostBuffer` with `dst` NULL: a size query.
    BufferToHostBufferSizeQuery,
    BufferCopyRawToHost,
    EventAwait,
    BufferIsOnCpu,
    BufferReadyEvent,
    BufferIncreaseExternalReferenceCount,
    BufferOpaqueDeviceMemoryDataPointer,
    BufferUnsafePointer,
    ExecutableSerialize,
    ExecutableDeserializeAndLoad,
    BufferDestroy,
    ExecutableOptimizedProgram,
    DeviceMemoryStats,
    /// Errors this plugin returned instead of calling the real plugin.
    InjectedErrors,
    /// Of those, how many the caller destroyed (through `PJRT_Error_Destroy`).
    InjectedErrorsDestroyed,
    /// Calls that were delayed.
    InjectedDelays,
}

impl Counter {
    pub const ALL: [Counter; 22] = [
        Counter::ClientCreate,
        Counter::ClientCompile,
        Counter::Compile,
        Counter::LoadedExecutableExecute,
        Counter::ClientBufferFromHostBuffer,
        Counter::BufferToHostBuffer,
        Counter::BufferToHostBufferSizeQuery,
        Counter::BufferCopyRawToHost,
        Counter::EventAwait,
        Counter::BufferIsOnCpu,
        Counter::BufferReadyEvent,
        Counter::BufferIncreaseExternalReferenceCount,
        Counter::BufferOpaqueDeviceMemoryDataPointer,
        Counter::BufferUnsafePointer,
        Counter::ExecutableSerialize,
        Counter::ExecutableDeserializeAndLoad,
        Counter::BufferDestroy,
        Counter::ExecutableOptimizedProgram,
        Counter::DeviceMemoryStats,
        Counter::InjectedErrors,
        Counter::InjectedErrorsDestroyed,
        Counter::InjectedDelays,
    ];

    /// The JSON key: the C name without `PJRT_`.
    pub fn key(self) -> &'static str {
        match self {
            Counter::ClientCreate => "Client_Create",
            Counter::ClientCompile => "Client_Compile",
            Counter::Compile => "Compile",
            Counter::LoadedExecutableExecute => "LoadedExecutable_Execute",
            Counter::ClientBufferFromHostBuffer => "Client_BufferFromHostBuffer",
            Counter::BufferToHostBuffer => "Buffer_ToHostBuffer",
            Counter::BufferToHostBufferSizeQuery => "Buffer_ToHostBuffer_SizeQuery",
            Counter::BufferCopyRawToHost => "Buffer_CopyRawToHost",
            Counter::EventAwait => "Event_Await",
            Counter::BufferIsOnCpu => "Buffer_IsOnCpu",
            Counter::BufferReadyEvent => "Buffer_ReadyEvent",
            Counter::BufferIncreaseExternalReferenceCount => {
                "Buffer_IncreaseExternalReferenceCount"
            }
            Counter::BufferOpaqueDeviceMemoryDataPointer => "Buffer_OpaqueDeviceMemoryDataPointer",
            Counter::BufferUnsafePointer => "Buffer_UnsafePointer",
            Counter::ExecutableSerialize => "Executable_Serialize",
            Counter::ExecutableDeserializeAndLoad => "Executable_DeserializeAndLoad",
            Counter::BufferDestroy => "Buffer_Destroy",
            Counter::ExecutableOptimizedProgram => "Executable_OptimizedProgram",
            Counter::DeviceMemoryStats => "Device_MemoryStats",
            Counter::InjectedErrors => "Injected_Errors",
            Counter::InjectedErrorsDestroyed => "Injected_ErrorsDestroyed",
            Counter::InjectedDelays => "Injected_Delays",
        }
    }
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise the array below
const ZERO: AtomicU64 = AtomicU64::new(0);
static COUNTS: [AtomicU64; Counter::ALL.len()] = [ZERO; Counter::ALL.len()];

#[inline]
pub fn bump(c: Counter) {
    if let Some(a) = COUNTS.get(c as usize) {
        a.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn get(c: Counter) -> u64 {
    COUNTS
        .get(c as usize)
        .map_or(0, |a| a.load(Ordering::Relaxed))
}

/// `{"Client_Create": 1, ...}` in table order, one key per line.
pub fn to_json() -> String {
    let mut s = String::from("{\n");
    for (i, c) in Counter::ALL.iter().enumerate() {
        let sep = if i + 1 == Counter::ALL.len() { "" } else { "," };
        s.push_str(&format!("  \"{}\": {}{sep}\n", c.key(), get(*c)));
    }
    s.push_str("}\n");
    s
}

/// Writes the counts to `path` through a temporary file and a rename, so a reader never sees a
/// half-written file.
pub fn write_to(path: &Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(to_json().as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_key_once() {
        bump(Counter::ClientCompile);
        let j = to_json();
        for c in Counter::ALL {
            assert_eq!(j.matches(&format!("\"{}\":", c.key())).count(), 1, "{j}");
        }
        assert!(j.contains("\"Client_Compile\": 1"), "{j}");
        assert!(j.trim_end().ends_with('}'));
        assert!(!j.contains(",\n}"));
    }

    #[test]
    fn counters_are_distinct() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
