//! Asks a PJRT plugin which API version it speaks, for `tpuscope doctor`: load it, call its
//! `GetPjrtApi`, read the table's header. Loading a plugin runs its initializers (a broken one can
//! crash the process), so callers run this in a throwaway process.

use std::path::Path;

use crate::abi::{self, ApiVersion, PjrtApi};
use crate::driver::Driver;

/// The newest API minor whose table this crate knows in full (`abi::SLOT_COUNT` slots): a newer
/// plugin is wrapped, but the slots it added pass through unrecorded.
pub const NEWEST_KNOWN_MINOR: i32 = 117;
/// The oldest API minor the collector wraps (older tables have another layout).
pub const MIN_WRAPPABLE_MINOR: i32 = abi::MIN_WRAPPABLE_MINOR;

/// What a plugin's table header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginApi {
    pub major: i32,
    pub minor: i32,
    /// The table's `struct_size` (bytes): the slots the plugin knows.
    pub struct_size: usize,
}

impl PluginApi {
    /// Function slots in the table (the bytes after the 40-byte header, 8 per slot).
    pub fn slots(&self) -> usize {
        self.struct_size.saturating_sub(abi::API_HEADER_SIZE) / size_of::<usize>()
    }
}

/// Why a plugin could not be probed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// `dlopen` failed (missing file, not a shared library, unresolved symbols).
    #[error("cannot load it: {0}")]
    Load(String),
    /// The library has no `GetPjrtApi`: not a PJRT plugin.
    #[error("not a PJRT plugin (no GetPjrtApi): {0}")]
    NoEntryPoint(String),
    /// `GetPjrtApi` returned NULL (a wrapper whose own setup failed).
    #[error("GetPjrtApi returned NULL (no API table)")]
    NullTable,
    /// The table is too small to hold its own version.
    #[error("GetPjrtApi returned a {0}-byte table, too small for its version")]
    TruncatedTable(usize),
    /// A table older than the layout this crate knows (0.57).
    #[error("PJRT API {0}.{1}: older than 0.57, a table layout tpuscope does not know")]
    UnknownLayout(i32, i32),
}

type GetPjrtApiFn = unsafe extern "C" fn() -> *const PjrtApi;

/// Loads the plugin at `path` for the rest of the process (its table points into it) and returns
/// its table, checked to hold at least its own version.
fn load_table(path: &Path) -> Result<&'static PjrtApi, ProbeError> {
    let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
    // SAFETY: loading a PJRT plugin runs its initializers, as a frontend loading it would; the
    // caller runs this in a process that exists only to do so.
    let lib = unsafe { libloading::os::unix::Library::open(Some(path), flags) }
        .map_err(|e| ProbeError::Load(e.to_string()))?;
    let lib: &'static libloading::os::unix::Library = Box::leak(Box::new(lib));
    // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
    let get = unsafe { lib.get::<GetPjrtApiFn>(b"GetPjrtApi\0") }
        .map_err(|e| ProbeError::NoEntryPoint(e.to_string()))?;
    // SAFETY: calling the plugin's entry point, as a frontend would.
    let api = unsafe { get() };
    if api.is_null() {
        return Err(ProbeError::NullTable);
    }
    // SAFETY: a non-NULL table is at least `struct_size` readable bytes (its first field) while
    // the library stays loaded (forever, leaked above).
    let struct_size = unsafe { (*api).struct_size };
    let version_end =
        std::mem::offset_of!(PjrtApi, pjrt_api_version) + std::mem::offset_of!(ApiVersion, minor);
    if struct_size < version_end + size_of::<i32>() {
        return Err(ProbeError::TruncatedTable(struct_size));
    }
    // SAFETY: non-NULL, and the library is never unloaded.
    Ok(unsafe { &*api })
}

/// Loads the plugin at `path` (for the rest of the process: its table points into it) and reads
/// the API version and table size its `GetPjrtApi` reports.
pub fn plugin_api_version(path: &Path) -> Result<PluginApi, ProbeError> {
    let api = load_table(path)?;
    let version = api.pjrt_api_version;
    Ok(PluginApi {
        major: version.major,
        minor: version.minor,
        struct_size: api.struct_size,
    })
}

/// Loads the plugin at `path` for the rest of the process and returns a driver over its table,
/// refusing a table whose layout this crate does not know (major ≠ 0 or minor < 0.57).
pub fn load_driver(path: &Path) -> Result<(Driver, PluginApi), ProbeError> {
    let api = load_table(path)?;
    let v = api.pjrt_api_version;
    let info = PluginApi {
        major: v.major,
        minor: v.minor,
        struct_size: api.struct_size,
    };
    if v.major != 0 || v.minor < MIN_WRAPPABLE_MINOR {
        return Err(ProbeError::UnknownLayout(v.major, v.minor));
    }
    // SAFETY: the table lives as long as the leaked library, i.e. the process.
    let d = unsafe { Driver::new(api) }.ok_or(ProbeError::NullTable)?;
    Ok((d, info))
}

/// `PJRT_Extension_Type_TpuTopology`: an extension only libtpu's table carries.
const EXTENSION_TYPE_TPU_TOPOLOGY: i32 = 16;
/// How far to follow a plugin's extension chain: a corrupt chain must not loop forever.
const MAX_EXTENSIONS: usize = 64;

/// The `PJRT_Extension_Type`s on the plugin's table's extension chain, in chain order.
pub fn extension_types(d: &Driver) -> Vec<i32> {
    let mut out = Vec::new();
    let mut ext = d.api().extension_start.cast_const();
    for _ in 0..MAX_EXTENSIONS {
        // SAFETY: a non-NULL chain entry is a live extension header in the plugin, which is
        // never unloaded.
        let Some(base) = (unsafe { ext.as_ref() }) else {
            break;
        };
        out.push(base.type_);
        ext = base.next.cast_const();
    }
    out
}

/// Whether the plugin is libtpu: its table carries the TPU topology extension (the XLA CPU
/// plugin and other PJRT plugins do not).
pub fn is_libtpu(d: &Driver) -> bool {
    extension_types(d).contains(&EXTENSION_TYPE_TPU_TOPOLOGY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_library_is_a_load_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnot.so");
        std::fs::write(&p, b"not an ELF file").unwrap();
        assert!(matches!(plugin_api_version(&p), Err(ProbeError::Load(_))));
    }

    #[test]
    fn a_library_without_the_entry_point_is_not_a_plugin() {
        // libc is a shared library that certainly has no GetPjrtApi.
        let err = plugin_api_version(Path::new("libc.so.6")).unwrap_err();
        assert!(matches!(err, ProbeError::NoEntryPoint(_)), "{err}");
        assert!(err.to_string().contains("not a PJRT plugin"));
    }

    #[test]
    fn slot_count_from_struct_size() {
        let api = PluginApi {
            major: 0,
            minor: 115,
            struct_size: abi::API_STRUCT_SIZE,
        };
        assert_eq!(api.slots(), abi::SLOT_COUNT);
    }
}
