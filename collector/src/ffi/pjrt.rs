//! The PJRT C API as `#[repr(C)]` Rust types: the function table (`PjrtApi`), the Args structs
//! the collector calls or hooks, and the buffer element types.
//!
//! Written from the upstream header's layout (API 0.57+, table complete through 0.117: 138 slots,
//! 1144 bytes). The table is append-only since 0.57; Args structs only grow at the end, and every
//! one starts with `{struct_size, extension_start}`. `tests/abi.rs` checks these layouts against a
//! real plugin.
//!
//! Conventions: `size_t` → `usize`, `int` → `c_int`, C enums → `i32` (a Rust enum would be UB for
//! values a newer plugin adds), `bool` → `bool`. `STRUCT_SIZE` of an Args struct is the end of its
//! last field, as the header computes it (no tail padding).

use std::ffi::{c_char, c_int, c_void};
use std::marker::{PhantomData, PhantomPinned};
use std::mem::{offset_of, size_of};

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$m])*
            #[repr(C)]
            pub struct $name {
                _data: [u8; 0],
                _marker: PhantomData<(*mut u8, PhantomPinned)>,
            }
        )*
    };
}

opaque!(
    /// `PJRT_Error`: owned by whoever receives it; freed with `PJRT_Error_Destroy`.
    PjrtError,
    PjrtClient,
    PjrtDevice,
    PjrtDeviceDescription,
    PjrtMemory,
    PjrtTopologyDescription,
    PjrtExecutable,
    PjrtLoadedExecutable,
    PjrtBuffer,
    PjrtEvent,
    PjrtExecuteContext,
    PjrtAsyncHostToDeviceTransferManager,
    PjrtSerializedExecutable,
    PjrtMultiSliceConfig,
);

/// A PJRT call: one Args pointer in, `PJRT_Error*` out (NULL = ok).
pub type PjrtFn<A> = unsafe extern "C" fn(*mut A) -> *mut PjrtError;
/// `PJRT_Error_Destroy` and `PJRT_Error_Message` return nothing.
pub type PjrtVoidFn<A> = unsafe extern "C" fn(*mut A);
/// Args of a slot the collector never calls.
pub type Opaque = c_void;

/// Every Args struct: its header-defined size, and a zeroed value with `struct_size` set.
pub trait PjrtArgs: Sized {
    /// End of the last field this crate knows (what the header's `*_STRUCT_SIZE` would be).
    const STRUCT_SIZE: usize;

    /// All fields zero (NULL pointers, `false`, 0), `struct_size` = `STRUCT_SIZE`.
    fn new() -> Self;
}

macro_rules! args {
    ($($ty:ident => $last:ident : $lt:ty),* $(,)?) => {
        $(
            impl PjrtArgs for $ty {
                const STRUCT_SIZE: usize = offset_of!($ty, $last) + size_of::<$lt>();

                #[inline]
                fn new() -> Self {
                    // SAFETY: Args structs hold only integers, bools, raw pointers, `Option` of
                    // fn pointers and unions of those: all-zero bytes are a valid value of each.
                    let mut v: Self = unsafe { std::mem::zeroed() };
                    v.struct_size = Self::STRUCT_SIZE;
                    v
                }
            }
        )*
    };
}

/// `PJRT_Extension_Base`: the head of every extension in the plugin's chain.
#[repr(C)]
#[derive(Debug)]
pub struct ExtensionBase {
    pub struct_size: usize,
    /// `PJRT_Extension_Type`.
    pub type_: i32,
    pub next: *mut ExtensionBase,
}

/// `PJRT_Api_Version`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major: c_int,
    pub minor: c_int,
}

macro_rules! pjrt_api {
    ($($(#[$m:meta])* $field:ident : $ty:ty),* $(,)?) => {
        /// `PJRT_Api`: the function table a plugin's `GetPjrtApi` returns. Slots after the ones a
        /// plugin knows are absent (check `struct_size` before reading them); a slot a plugin does
        /// not implement is NULL.
        #[repr(C)]
        pub struct PjrtApi {
            pub struct_size: usize,
            pub extension_start: *mut ExtensionBase,
            pub pjrt_api_version: ApiVersion,
            $( $(#[$m])* pub $field: Option<$ty>, )*
        }

        /// Slot names in table order (the C name without `PJRT_`, in snake case).
        pub const SLOT_NAMES: &[&str] = &[$(stringify!($field)),*];

        /// Byte offset of a slot in `PjrtApi`, by its snake-case name.
        pub fn slot_offset(name: &str) -> Option<usize> {
            match name {
                $( stringify!($field) => Some(offset_of!(PjrtApi, $field)), )*
                _ => None,
            }
        }
    };
}

pjrt_api!(
    error_destroy: PjrtVoidFn<ErrorDestroyArgs>,
    error_message: PjrtVoidFn<ErrorMessageArgs>,
    error_get_code: PjrtFn<ErrorGetCodeArgs>,
    plugin_initialize: PjrtFn<PluginInitializeArgs>,
    plugin_attributes: PjrtFn<PluginAttributesArgs>,
    event_destroy: PjrtFn<EventDestroyArgs>,
    event_is_ready: PjrtFn<EventIsReadyArgs>,
    event_error: PjrtFn<EventErrorArgs>,
    event_await: PjrtFn<EventAwaitArgs>,
    event_on_ready: PjrtFn<EventOnReadyArgs>,
    client_create: PjrtFn<ClientCreateArgs>,
    client_destroy: PjrtFn<ClientDestroyArgs>,
    client_platform_name: PjrtFn<ClientPlatformNameArgs>,
    client_process_index: PjrtFn<ClientProcessIndexArgs>,
    client_platform_version: PjrtFn<ClientPlatformVersionArgs>,
    client_devices: PjrtFn<ClientDevicesArgs>,
    client_addressable_devices: PjrtFn<ClientAddressableDevicesArgs>,
    client_lookup_device: PjrtFn<Opaque>,
    client_lookup_addressable_device: PjrtFn<Opaque>,
    client_addressable_memories: PjrtFn<Opaque>,
    client_compile: PjrtFn<ClientCompileArgs>,
    client_default_device_assignment: PjrtFn<Opaque>,
    client_buffer_from_host_buffer: PjrtFn<ClientBufferFromHostBufferArgs>,
    device_description_id: PjrtFn<DeviceDescriptionIdArgs>,
    device_description_process_index: PjrtFn<DeviceDescriptionProcessIndexArgs>,
    device_description_attributes: PjrtFn<Opaque>,
    device_description_kind: PjrtFn<DeviceDescriptionKindArgs>,
    device_description_debug_string: PjrtFn<DeviceDescriptionDebugStringArgs>,
    device_description_to_string: PjrtFn<DeviceDescriptionToStringArgs>,
    device_get_description: PjrtFn<DeviceGetDescriptionArgs>,
    device_is_addressable: PjrtFn<Opaque>,
    device_local_hardware_id: PjrtFn<Opaque>,
    device_addressable_memories: PjrtFn<Opaque>,
    device_default_memory: PjrtFn<Opaque>,
    device_memory_stats: PjrtFn<DeviceMemoryStatsArgs>,
    memory_id: PjrtFn<Opaque>,
    memory_kind: PjrtFn<Opaque>,
    memory_debug_string: PjrtFn<Opaque>,
    memory_to_string: PjrtFn<Opaque>,
    memory_addressable_by_devices: PjrtFn<Opaque>,
    executable_destroy: PjrtFn<ExecutableDestroyArgs>,
    executable_name: PjrtFn<ExecutableNameArgs>,
    executable_num_replicas: PjrtFn<ExecutableNumReplicasArgs>,
    executable_num_partitions: PjrtFn<ExecutableNumPartitionsArgs>,
    executable_num_outputs: PjrtFn<ExecutableNumOutputsArgs>,
    executable_size_of_generated_code_in_bytes: PjrtFn<Opaque>,
    executable_get_cost_analysis: PjrtFn<Opaque>,
    executable_output_memory_kinds: PjrtFn<Opaque>,
    executable_optimized_program: PjrtFn<ExecutableOptimizedProgramArgs>,
    executable_serialize: PjrtFn<ExecutableSerializeArgs>,
    loaded_executable_destroy: PjrtFn<LoadedExecutableDestroyArgs>,
    loaded_executable_get_executable: PjrtFn<LoadedExecutableGetExecutableArgs>,
    loaded_executable_addressable_devices: PjrtFn<LoadedExecutableAddressableDevicesArgs>,
    loaded_executable_delete: PjrtFn<Opaque>,
    loaded_executable_is_deleted: PjrtFn<Opaque>,
    loaded_executable_execute: PjrtFn<LoadedExecutableExecuteArgs>,
    executable_deserialize_and_load: PjrtFn<ExecutableDeserializeAndLoadArgs>,
    loaded_executable_fingerprint: PjrtFn<Opaque>,
    buffer_destroy: PjrtFn<BufferDestroyArgs>,
    buffer_element_type: PjrtFn<BufferElementTypeArgs>,
    buffer_dimensions: PjrtFn<BufferDimensionsArgs>,
    buffer_unpadded_dimensions: PjrtFn<Opaque>,
    buffer_dynamic_dimension_indices: PjrtFn<Opaque>,
    buffer_get_memory_layout: PjrtFn<Opaque>,
    buffer_on_device_size_in_bytes: PjrtFn<BufferOnDeviceSizeInBytesArgs>,
    buffer_device: PjrtFn<BufferDeviceArgs>,
    buffer_memory: PjrtFn<BufferMemoryArgs>,
    buffer_delete: PjrtFn<BufferDeleteArgs>,
    buffer_is_deleted: PjrtFn<Opaque>,
    buffer_copy_to_device: PjrtFn<BufferCopyToDeviceArgs>,
    buffer_to_host_buffer: PjrtFn<BufferToHostBufferArgs>,
    buffer_is_on_cpu: PjrtFn<BufferIsOnCpuArgs>,
    buffer_ready_event: PjrtFn<BufferReadyEventArgs>,
    buffer_unsafe_pointer: PjrtFn<BufferUnsafePointerArgs>,
    buffer_increase_external_reference_count: PjrtFn<BufferExternalReferenceCountArgs>,
    buffer_decrease_external_reference_count: PjrtFn<BufferExternalReferenceCountArgs>,
    buffer_opaque_device_memory_data_pointer: PjrtFn<BufferOpaqueDeviceMemoryDataPointerArgs>,
    copy_to_device_stream_destroy: PjrtFn<Opaque>,
    copy_to_device_stream_add_chunk: PjrtFn<Opaque>,
    copy_to_device_stream_total_bytes: PjrtFn<Opaque>,
    copy_to_device_stream_granule_size: PjrtFn<Opaque>,
    copy_to_device_stream_current_bytes: PjrtFn<Opaque>,
    topology_description_create: PjrtFn<TopologyDescriptionCreateArgs>,
    topology_description_destroy: PjrtFn<TopologyDescriptionDestroyArgs>,
    topology_description_platform_name: PjrtFn<Opaque>,
    topology_description_platform_version: PjrtFn<Opaque>,
    topology_description_get_device_descriptions: PjrtFn<Opaque>,
    topology_description_serialize: PjrtFn<Opaque>,
    topology_description_attributes: PjrtFn<Opaque>,
    compile: PjrtFn<CompileArgs>,
    // Appended after 0.x reorder (0.57): new slots only ever go at the end.
    executable_output_element_types: PjrtFn<Opaque>,
    executable_output_dimensions: PjrtFn<Opaque>,
    buffer_copy_to_memory: PjrtFn<BufferCopyToMemoryArgs>,
    client_create_view_of_device_buffer: PjrtFn<Opaque>,
    executable_fingerprint: PjrtFn<ExecutableFingerprintArgs>,
    client_topology_description: PjrtFn<ClientTopologyDescriptionArgs>,
    executable_get_compiled_memory_stats: PjrtFn<ExecutableGetCompiledMemoryStatsArgs>,
    memory_kind_id: PjrtFn<Opaque>,
    execute_context_create: PjrtFn<Opaque>,
    execute_context_destroy: PjrtFn<Opaque>,
    buffer_copy_raw_to_host: PjrtFn<BufferCopyRawToHostArgs>,
    async_host_to_device_transfer_manager_destroy: PjrtFn<AsyncH2dDestroyArgs>,
    async_host_to_device_transfer_manager_transfer_data: PjrtFn<AsyncH2dTransferDataArgs>,
    client_create_buffers_for_async_host_to_device: PjrtFn<ClientCreateBuffersForAsyncH2dArgs>,
    async_host_to_device_transfer_manager_retrieve_buffer: PjrtFn<AsyncH2dRetrieveBufferArgs>,
    async_host_to_device_transfer_manager_device: PjrtFn<Opaque>,
    async_host_to_device_transfer_manager_buffer_count: PjrtFn<AsyncH2dBufferCountArgs>,
    async_host_to_device_transfer_manager_buffer_size: PjrtFn<AsyncH2dBufferSizeArgs>,
    async_host_to_device_transfer_manager_set_buffer_error: PjrtFn<Opaque>,
    async_host_to_device_transfer_manager_add_metadata: PjrtFn<Opaque>,
    client_dma_map: PjrtFn<Opaque>,
    client_dma_unmap: PjrtFn<Opaque>,
    client_create_uninitialized_buffer: PjrtFn<ClientCreateUninitializedBufferArgs>,
    client_update_global_process_info: PjrtFn<Opaque>,
    topology_description_deserialize: PjrtFn<Opaque>,
    client_create_alias_buffer: PjrtFn<Opaque>,
    client_fulfill_alias_buffer: PjrtFn<Opaque>,
    loaded_executable_get_device_assignment: PjrtFn<Opaque>,
    client_create_error_buffer: PjrtFn<Opaque>,
    async_host_to_device_transfer_manager_transfer_literal: PjrtFn<AsyncH2dTransferLiteralArgs>,
    buffer_copy_raw_to_host_future: PjrtFn<BufferCopyRawToHostFutureArgs>,
    device_poison_execution: PjrtFn<Opaque>,
    device_create_async_tracking_event: PjrtFn<Opaque>,
    async_tracking_event_destroy: PjrtFn<Opaque>,
    executable_get_compile_options: PjrtFn<Opaque>,
    buffer_donate_with_control_dependency: PjrtFn<Opaque>,
    event_create: PjrtFn<EventCreateArgs>,
    event_set: PjrtFn<Opaque>,
    device_get_attributes: PjrtFn<Opaque>,
    /// 0.95+.
    client_load: PjrtFn<ClientLoadArgs>,
    loaded_executable_addressable_device_logical_ids: PjrtFn<Opaque>,
    buffer_bitcast: PjrtFn<Opaque>,
    error_for_each_payload: PjrtFn<Opaque>,
    topology_description_fingerprint: PjrtFn<Opaque>,
    executable_parameter_memory_kinds: PjrtFn<Opaque>,
    device_clear_memory_stats: PjrtFn<Opaque>,
    topology_description_make_canonical_shape_for_memory_space: PjrtFn<Opaque>,
    topology_description_get_memory_space_kind_ids: PjrtFn<Opaque>,
);

/// Number of function slots this crate knows (the table through API 0.117).
pub const SLOT_COUNT: usize = SLOT_NAMES.len();
/// Byte size of the table before the first slot.
pub const API_HEADER_SIZE: usize = offset_of!(PjrtApi, error_destroy);
/// `PJRT_Api_STRUCT_SIZE` of the newest table this crate knows.
pub const API_STRUCT_SIZE: usize = size_of::<PjrtApi>();
/// The collector refuses to wrap tables older than this minor (0.57 rearranged the table).
pub const MIN_WRAPPABLE_MINOR: i32 = 57;

const _: () = assert!(SLOT_COUNT == 138);
const _: () = assert!(API_HEADER_SIZE == 40);
const _: () = assert!(API_STRUCT_SIZE == 1144);
const _: () = assert!(API_STRUCT_SIZE == API_HEADER_SIZE + SLOT_COUNT * size_of::<usize>());

impl PjrtApi {
    /// Whether the table (as the plugin sized it) reaches past the slot at `offset`.
    #[inline]
    pub fn has_slot_at(&self, offset: usize) -> bool {
        self.struct_size >= offset + size_of::<usize>()
    }
}

// ---------------------------------------------------------------- errors

/// `PJRT_Error_Code` values (absl status codes).
pub mod error_code {
    pub const OK: i32 = 0;
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    pub const ALREADY_EXISTS: i32 = 6;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const ABORTED: i32 = 10;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
    pub const DATA_LOSS: i32 = 15;
    pub const UNAUTHENTICATED: i32 = 16;
}

#[repr(C)]
pub struct ErrorDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *mut PjrtError,
}

#[repr(C)]
pub struct ErrorMessageArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *const PjrtError,
    /// Lives as long as `error`.
    pub message: *const c_char,
    pub message_size: usize,
}

#[repr(C)]
pub struct ErrorGetCodeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *const PjrtError,
    pub code: i32,
}

// ---------------------------------------------------------- named values

/// `PJRT_NamedValue_Type`.
pub mod named_value_type {
    pub const STRING: i32 = 0;
    pub const INT64: i32 = 1;
    pub const INT64_LIST: i32 = 2;
    pub const FLOAT: i32 = 3;
    pub const BOOL: i32 = 4;
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union NamedValueValue {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

/// `PJRT_NamedValue`: create options, plugin and device attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub name: *const c_char,
    pub name_size: usize,
    /// `named_value_type::*`.
    pub type_: i32,
    pub value: NamedValueValue,
    /// Elements for strings and lists, 1 for scalars.
    pub value_size: usize,
}

// ---------------------------------------------------------------- plugin

#[repr(C)]
pub struct PluginInitializeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
}

#[repr(C)]
pub struct PluginAttributesArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    /// Lives as long as the process.
    pub attributes: *const NamedValue,
    pub num_attributes: usize,
}

// ---------------------------------------------------------------- events

#[repr(C)]
pub struct EventDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
}

#[repr(C)]
pub struct EventIsReadyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
    pub is_ready: bool,
}

#[repr(C)]
pub struct EventErrorArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
}

#[repr(C)]
pub struct EventAwaitArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
}

/// Called once the event is ready; owns `error` (must destroy it).
pub type EventOnReadyCallback = unsafe extern "C" fn(error: *mut PjrtError, user_arg: *mut c_void);

#[repr(C)]
pub struct EventOnReadyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
    pub callback: Option<EventOnReadyCallback>,
    pub user_arg: *mut c_void,
}

/// 0.89+.
#[repr(C)]
pub struct EventCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub event: *mut PjrtEvent,
}

// ---------------------------------------------------------------- client

/// Key-value store callbacks are opaque to the collector: forwarded, never called.
pub type KvCallback = unsafe extern "C" fn(*mut c_void) -> *mut PjrtError;

#[repr(C)]
pub struct ClientCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub create_options: *const NamedValue,
    pub num_options: usize,
    pub kv_get_callback: Option<KvCallback>,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: Option<KvCallback>,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PjrtClient,
    /// 0.61+.
    pub kv_try_get_callback: Option<KvCallback>,
    pub kv_try_get_user_arg: *mut c_void,
}

#[repr(C)]
pub struct ClientDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
}

#[repr(C)]
pub struct ClientPlatformNameArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
}

#[repr(C)]
pub struct ClientProcessIndexArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub process_index: c_int,
}

#[repr(C)]
pub struct ClientPlatformVersionArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub platform_version: *const c_char,
    pub platform_version_size: usize,
}

#[repr(C)]
pub struct ClientDevicesArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub devices: *const *mut PjrtDevice,
    pub num_devices: usize,
}

#[repr(C)]
pub struct ClientAddressableDevicesArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub addressable_devices: *const *mut PjrtDevice,
    pub num_addressable_devices: usize,
}

/// The client's runtime topology (owned by the client).
#[repr(C)]
pub struct ClientTopologyDescriptionArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub topology: *mut PjrtTopologyDescription,
}

/// `PJRT_Program`: `format` is `mlir`, `hlo` or `hlo_with_config`.
#[repr(C)]
pub struct Program {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

#[repr(C)]
pub struct ClientCompileArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub program: *const Program,
    /// Serialized `CompileOptionsProto`.
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PjrtLoadedExecutable,
}

/// `PJRT_Client_Load` (0.95+): loads a compile-only executable.
#[repr(C)]
pub struct ClientLoadArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub executable: *mut PjrtExecutable,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub loaded_executable: *mut PjrtLoadedExecutable,
}

/// `PJRT_Compile`: compile-only against a topology.
#[repr(C)]
pub struct CompileArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub topology: *const PjrtTopologyDescription,
    pub program: *const Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    /// Optional.
    pub client: *mut PjrtClient,
    pub executable: *mut PjrtExecutable,
}

// --------------------------------------------------------- buffer types

/// `PJRT_Buffer_Type` values.
pub mod buffer_type {
    pub const INVALID: i32 = 0;
    pub const PRED: i32 = 1;
    pub const S8: i32 = 2;
    pub const S16: i32 = 3;
    pub const S32: i32 = 4;
    pub const S64: i32 = 5;
    pub const U8: i32 = 6;
    pub const U16: i32 = 7;
    pub const U32: i32 = 8;
    pub const U64: i32 = 9;
    pub const F16: i32 = 10;
    pub const F32: i32 = 11;
    pub const F64: i32 = 12;
    pub const BF16: i32 = 13;
    pub const C64: i32 = 14;
    pub const C128: i32 = 15;
    pub const F8E5M2: i32 = 16;
    pub const F8E4M3FN: i32 = 17;
    pub const F8E4M3B11FNUZ: i32 = 18;
    pub const F8E5M2FNUZ: i32 = 19;
    pub const F8E4M3FNUZ: i32 = 20;
    pub const S4: i32 = 21;
    pub const U4: i32 = 22;
    pub const TOKEN: i32 = 23;
    pub const S2: i32 = 24;
    pub const U2: i32 = 25;
    pub const F8E4M3: i32 = 26;
    pub const F8E3M4: i32 = 27;
    pub const F8E8M0FNU: i32 = 28;
    pub const F4E2M1FN: i32 = 29;
    pub const S1: i32 = 30;
    pub const U1: i32 = 31;
}

/// XLA's name for a `PJRT_Buffer_Type` (`f32`, `bf16`, `s32`, `pred`, …); `?` for unknown values.
pub fn dtype_name(t: i32) -> &'static str {
    use buffer_type::*;
    match t {
        INVALID => "invalid",
        PRED => "pred",
        S8 => "s8",
        S16 => "s16",
        S32 => "s32",
        S64 => "s64",
        U8 => "u8",
        U16 => "u16",
        U32 => "u32",
        U64 => "u64",
        F16 => "f16",
        F32 => "f32",
        F64 => "f64",
        BF16 => "bf16",
        C64 => "c64",
        C128 => "c128",
        F8E5M2 => "f8e5m2",
        F8E4M3FN => "f8e4m3fn",
        F8E4M3B11FNUZ => "f8e4m3b11fnuz",
        F8E5M2FNUZ => "f8e5m2fnuz",
        F8E4M3FNUZ => "f8e4m3fnuz",
        S4 => "s4",
        U4 => "u4",
        TOKEN => "token",
        S2 => "s2",
        U2 => "u2",
        F8E4M3 => "f8e4m3",
        F8E3M4 => "f8e3m4",
        F8E8M0FNU => "f8e8m0fnu",
        F4E2M1FN => "f4e2m1fn",
        S1 => "s1",
        U1 => "u1",
        _ => "?",
    }
}

/// Bits per element (sub-byte types pack), `None` for `invalid`, `token` and unknown values.
pub fn dtype_bits(t: i32) -> Option<u32> {
    use buffer_type::*;
    Some(match t {
        S1 | U1 => 1,
        S2 | U2 => 2,
        S4 | U4 | F4E2M1FN => 4,
        PRED | S8 | U8 | F8E5M2 | F8E4M3FN | F8E4M3B11FNUZ | F8E5M2FNUZ | F8E4M3FNUZ | F8E4M3
        | F8E3M4 | F8E8M0FNU => 8,
        S16 | U16 | F16 | BF16 => 16,
        S32 | U32 | F32 => 32,
        S64 | U64 | F64 | C64 => 64,
        C128 => 128,
        _ => return None,
    })
}

/// Bytes per element for whole-byte types; `None` for sub-byte, `token`, `invalid`, unknown.
pub fn dtype_byte_width(t: i32) -> Option<u32> {
    dtype_bits(t).filter(|b| b.is_multiple_of(8)).map(|b| b / 8)
}

/// `PJRT_HostBufferSemantics` values.
pub mod host_buffer_semantics {
    pub const IMMUTABLE_ONLY_DURING_CALL: i32 = 0;
    pub const IMMUTABLE_UNTIL_TRANSFER_COMPLETES: i32 = 1;
    pub const IMMUTABLE_ZERO_COPY: i32 = 2;
    pub const MUTABLE_ZERO_COPY: i32 = 3;
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufferMemoryLayoutTiled {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub minor_to_major: *const i64,
    pub minor_to_major_size: usize,
    pub tile_dims: *const i64,
    pub tile_dim_sizes: *const usize,
    pub num_tiles: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BufferMemoryLayoutStrides {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union BufferMemoryLayoutUnion {
    pub tiled: BufferMemoryLayoutTiled,
    pub strides: BufferMemoryLayoutStrides,
}

/// `PJRT_Buffer_MemoryLayout`.
#[repr(C)]
pub struct BufferMemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub layout: BufferMemoryLayoutUnion,
    /// 0 = tiled, 1 = strides.
    pub type_: i32,
}

#[repr(C)]
pub struct ClientBufferFromHostBufferArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub data: *const c_void,
    /// `buffer_type::*`.
    pub type_: i32,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    /// `host_buffer_semantics::*`.
    pub host_buffer_semantics: i32,
    pub device: *mut PjrtDevice,
    pub memory: *mut PjrtMemory,
    pub device_layout: *mut BufferMemoryLayout,
    pub done_with_host_buffer: *mut PjrtEvent,
    pub buffer: *mut PjrtBuffer,
}

#[repr(C)]
pub struct ClientCreateUninitializedBufferArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub shape_dims: *const i64,
    pub shape_num_dims: usize,
    pub shape_element_type: i32,
    pub shape_layout: *mut BufferMemoryLayout,
    pub device: *mut PjrtDevice,
    pub memory: *mut PjrtMemory,
    pub buffer: *mut PjrtBuffer,
}

/// `PJRT_ShapeSpec`.
#[repr(C)]
pub struct ShapeSpec {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dims: *const i64,
    pub num_dims: usize,
    pub element_type: i32,
}

/// `PJRT_Client_CreateBuffersForAsyncHostToDevice` (0.60+).
#[repr(C)]
pub struct ClientCreateBuffersForAsyncH2dArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub shape_specs: *mut ShapeSpec,
    pub num_shape_specs: usize,
    /// Optional.
    pub device_layouts: *mut *mut BufferMemoryLayout,
    pub num_device_layouts: usize,
    pub memory: *mut PjrtMemory,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
}

#[repr(C)]
pub struct AsyncH2dDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
}

#[repr(C)]
pub struct AsyncH2dTransferDataArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    pub buffer_index: c_int,
    pub data: *const c_void,
    pub offset: i64,
    pub transfer_size: i64,
    pub is_last_transfer: bool,
    pub done_with_h2d_transfer: *mut PjrtEvent,
}

#[repr(C)]
pub struct AsyncH2dRetrieveBufferArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    pub buffer_index: c_int,
    pub buffer_out: *mut PjrtBuffer,
}

#[repr(C)]
pub struct AsyncH2dBufferCountArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    pub buffer_count: usize,
}

#[repr(C)]
pub struct AsyncH2dBufferSizeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    pub buffer_index: c_int,
    pub buffer_size: usize,
}

/// 0.83+.
#[repr(C)]
pub struct AsyncH2dTransferLiteralArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    pub buffer_index: c_int,
    pub data: *const c_void,
    pub shape_dims: *const i64,
    pub shape_num_dims: usize,
    pub shape_element_type: i32,
    pub shape_layout: *mut BufferMemoryLayout,
    pub done_with_h2d_transfer: *mut PjrtEvent,
}

// --------------------------------------------------- device descriptions

#[repr(C)]
pub struct DeviceDescriptionIdArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device_description: *mut PjrtDeviceDescription,
    pub id: c_int,
}

#[repr(C)]
pub struct DeviceDescriptionProcessIndexArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device_description: *mut PjrtDeviceDescription,
    pub process_index: c_int,
}

#[repr(C)]
pub struct DeviceDescriptionKindArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device_description: *mut PjrtDeviceDescription,
    pub device_kind: *const c_char,
    pub device_kind_size: usize,
}

#[repr(C)]
pub struct DeviceDescriptionDebugStringArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device_description: *mut PjrtDeviceDescription,
    pub debug_string: *const c_char,
    pub debug_string_size: usize,
}

#[repr(C)]
pub struct DeviceDescriptionToStringArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device_description: *mut PjrtDeviceDescription,
    pub to_string: *const c_char,
    pub to_string_size: usize,
}

// --------------------------------------------------------------- devices

#[repr(C)]
pub struct DeviceGetDescriptionArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device: *mut PjrtDevice,
    pub device_description: *mut PjrtDeviceDescription,
}

/// `PJRT_Device_MemoryStats`: `bytes_in_use` always; every other stat only when its `_is_set`
/// flag is true. Plugins may return UNIMPLEMENTED (the CPU plugin does).
#[repr(C)]
pub struct DeviceMemoryStatsArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub device: *mut PjrtDevice,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub peak_bytes_in_use_is_set: bool,
    pub num_allocs: i64,
    pub num_allocs_is_set: bool,
    pub largest_alloc_size: i64,
    pub largest_alloc_size_is_set: bool,
    pub bytes_limit: i64,
    pub bytes_limit_is_set: bool,
    pub bytes_reserved: i64,
    pub bytes_reserved_is_set: bool,
    pub peak_bytes_reserved: i64,
    pub peak_bytes_reserved_is_set: bool,
    pub bytes_reservable_limit: i64,
    pub bytes_reservable_limit_is_set: bool,
    pub largest_free_block_bytes: i64,
    pub largest_free_block_bytes_is_set: bool,
    pub pool_bytes: i64,
    pub pool_bytes_is_set: bool,
    pub peak_pool_bytes: i64,
    pub peak_pool_bytes_is_set: bool,
}

// ----------------------------------------------------------- executables

#[repr(C)]
pub struct ExecutableDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
}

#[repr(C)]
pub struct LoadedExecutableDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtLoadedExecutable,
}

/// The returned executable is the caller's: free it with `PJRT_Executable_Destroy`.
#[repr(C)]
pub struct LoadedExecutableGetExecutableArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub loaded_executable: *mut PjrtLoadedExecutable,
    pub executable: *mut PjrtExecutable,
}

#[repr(C)]
pub struct ExecutableNameArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub executable_name: *const c_char,
    pub executable_name_size: usize,
}

#[repr(C)]
pub struct ExecutableNumOutputsArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub num_outputs: usize,
}

#[repr(C)]
pub struct ExecutableNumReplicasArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub num_replicas: usize,
}

#[repr(C)]
pub struct ExecutableNumPartitionsArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub num_partitions: usize,
}

#[repr(C)]
pub struct ExecutableFingerprintArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub executable_fingerprint: *const c_char,
    pub executable_fingerprint_size: usize,
}

/// Two calls: `program.code` NULL → `code_size` set; then a buffer of that size → filled.
/// `program.format` is set by the plugin (owned by it).
#[repr(C)]
pub struct ExecutableOptimizedProgramArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub program: *mut Program,
}

/// Bytes; fields after `host_temp_size_in_bytes` were added later (peak 0.72, total 0.90,
/// allocation/indefinite/unpadded 0.104) and stay 0 from older plugins.
#[repr(C)]
pub struct ExecutableGetCompiledMemoryStatsArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtExecutable,
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
    pub total_size_in_bytes: i64,
    pub total_allocation_bytes: i64,
    pub indefinite_allocations: i64,
    pub peak_unpadded_heap_bytes: i64,
}

#[repr(C)]
pub struct LoadedExecutableAddressableDevicesArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtLoadedExecutable,
    pub addressable_devices: *const *mut PjrtDevice,
    pub num_addressable_devices: usize,
}

/// `PJRT_SendCallbackInfo` / `PJRT_RecvCallbackInfo`: forwarded untouched.
#[repr(C)]
pub struct CallbackInfo {
    pub channel_id: i64,
    pub user_arg: *mut c_void,
    pub callback: *mut c_void,
}

/// `PJRT_ExecuteOptions`. Grew over time: `context` (0.64, size 80 — what torch_xla 2.9 sends),
/// `call_location` (0.76), task incarnations (0.78, size 112 — what the 0.115 CPU plugin
/// requires), `multi_slice_config` (0.97) and the callback layout flag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub send_callbacks: *mut *mut CallbackInfo,
    pub recv_callbacks: *mut *mut CallbackInfo,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PjrtExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut c_int,
    pub incarnation_ids: *mut i64,
    pub multi_slice_config: *mut PjrtMultiSliceConfig,
    pub use_major_to_minor_data_layout_for_callbacks: bool,
}

/// End of `context`: the options size of a 0.64–0.75 caller (torch_xla 2.9 sends this).
pub const EXECUTE_OPTIONS_SIZE_CONTEXT: usize =
    offset_of!(ExecuteOptions, context) + size_of::<*mut PjrtExecuteContext>();
/// End of `call_location` (0.76).
pub const EXECUTE_OPTIONS_SIZE_CALL_LOCATION: usize =
    offset_of!(ExecuteOptions, call_location) + size_of::<*const c_char>();
/// End of `incarnation_ids` (0.78): what plugins since then check the options against.
pub const EXECUTE_OPTIONS_SIZE_INCARNATIONS: usize =
    offset_of!(ExecuteOptions, incarnation_ids) + size_of::<*mut i64>();

const _: () = assert!(EXECUTE_OPTIONS_SIZE_CONTEXT == 80);
const _: () = assert!(EXECUTE_OPTIONS_SIZE_INCARNATIONS == 112);

/// The smallest `PJRT_ExecuteOptions::struct_size` a plugin of API minor `minor` accepts: it
/// rejects anything shorter than the fields it knows up to the incarnation ids.
pub fn execute_options_size_needed(minor: i32) -> usize {
    if minor >= 78 {
        EXECUTE_OPTIONS_SIZE_INCARNATIONS
    } else if minor >= 76 {
        EXECUTE_OPTIONS_SIZE_CALL_LOCATION
    } else {
        EXECUTE_OPTIONS_SIZE_CONTEXT
    }
}

#[repr(C)]
pub struct LoadedExecutableExecuteArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *mut PjrtLoadedExecutable,
    pub options: *mut ExecuteOptions,
    /// `[num_devices][num_args]`.
    pub argument_lists: *const *const *mut PjrtBuffer,
    pub num_devices: usize,
    pub num_args: usize,
    /// `[num_devices][num_outputs]`, filled by the plugin.
    pub output_lists: *const *mut *mut PjrtBuffer,
    /// NULL, or `[num_devices]` filled by the plugin on success (the caller destroys them).
    pub device_complete_events: *mut *mut PjrtEvent,
    pub execute_device: *mut PjrtDevice,
}

/// The caller frees the bytes with `serialized_executable_deleter(serialized_executable)`.
#[repr(C)]
pub struct ExecutableSerializeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub executable: *const PjrtExecutable,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_executable: *mut PjrtSerializedExecutable,
    pub serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PjrtSerializedExecutable)>,
}

#[repr(C)]
pub struct ExecutableDeserializeAndLoadArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub client: *mut PjrtClient,
    pub serialized_executable: *const c_char,
    pub serialized_executable_size: usize,
    pub loaded_executable: *mut PjrtLoadedExecutable,
    /// 0.71+.
    pub overridden_serialized_compile_options: *const c_char,
    pub overridden_serialized_compile_options_size: usize,
}

// --------------------------------------------------------------- buffers

#[repr(C)]
pub struct BufferDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
}

#[repr(C)]
pub struct BufferDeleteArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
}

#[repr(C)]
pub struct BufferElementTypeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    /// `buffer_type::*`.
    pub type_: i32,
}

#[repr(C)]
pub struct BufferDimensionsArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    /// Lives as long as `buffer`.
    pub dims: *const i64,
    pub num_dims: usize,
}

#[repr(C)]
pub struct BufferOnDeviceSizeInBytesArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub on_device_size_in_bytes: usize,
}

#[repr(C)]
pub struct BufferDeviceArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub device: *mut PjrtDevice,
}

#[repr(C)]
pub struct BufferMemoryArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub memory: *mut PjrtMemory,
}

#[repr(C)]
pub struct BufferIsOnCpuArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub is_on_cpu: bool,
}

/// The caller destroys the returned event.
#[repr(C)]
pub struct BufferReadyEventArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub event: *mut PjrtEvent,
}

/// `dst` NULL = size query (`dst_size` set); otherwise an asynchronous copy completing `event`.
#[repr(C)]
pub struct BufferToHostBufferArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub src: *mut PjrtBuffer,
    pub host_layout: *mut BufferMemoryLayout,
    pub dst: *mut c_void,
    pub dst_size: usize,
    pub event: *mut PjrtEvent,
}

#[repr(C)]
pub struct BufferCopyToDeviceArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub dst_device: *mut PjrtDevice,
    pub dst_buffer: *mut PjrtBuffer,
}

#[repr(C)]
pub struct BufferCopyToMemoryArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub dst_memory: *mut PjrtMemory,
    pub dst_buffer: *mut PjrtBuffer,
}

/// 0.56+.
#[repr(C)]
pub struct BufferCopyRawToHostArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub dst: *mut c_void,
    pub offset: i64,
    pub transfer_size: i64,
    pub event: *mut PjrtEvent,
}

/// What the caller passes to `future_ready_callback` once `dst` is ready.
#[repr(C)]
pub struct BufferCopyRawToHostFutureCallbackArgs {
    pub struct_size: usize,
    pub callback_data: *mut c_void,
    pub error_code: i32,
    pub error_message: *const c_char,
    pub error_message_size: usize,
    pub dst: *mut c_void,
}

/// 0.84+: the copy starts once the caller calls `future_ready_callback(callback_data, dst)`.
#[repr(C)]
pub struct BufferCopyRawToHostFutureArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub offset: i64,
    pub transfer_size: i64,
    pub event: *mut PjrtEvent,
    pub callback_data: *mut c_void,
    pub future_ready_callback:
        Option<unsafe extern "C" fn(*mut BufferCopyRawToHostFutureCallbackArgs)>,
}

#[repr(C)]
pub struct BufferUnsafePointerArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub buffer_pointer: usize,
}

/// Args of both `Increase…` and `Decrease…ExternalReferenceCount`.
#[repr(C)]
pub struct BufferExternalReferenceCountArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
}

#[repr(C)]
pub struct BufferOpaqueDeviceMemoryDataPointerArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub buffer: *mut PjrtBuffer,
    pub device_memory_ptr: *mut c_void,
}

// -------------------------------------------------------------- topology

#[repr(C)]
pub struct TopologyDescriptionCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub topology_name: *const c_char,
    pub topology_name_size: usize,
    pub create_options: *const NamedValue,
    pub num_options: usize,
    pub topology: *mut PjrtTopologyDescription,
}

#[repr(C)]
pub struct TopologyDescriptionDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub topology: *mut PjrtTopologyDescription,
}

args!(
    ErrorDestroyArgs => error: *mut PjrtError,
    ErrorMessageArgs => message_size: usize,
    ErrorGetCodeArgs => code: i32,
    NamedValue => value_size: usize,
    PluginInitializeArgs => extension_start: *mut ExtensionBase,
    PluginAttributesArgs => num_attributes: usize,
    EventDestroyArgs => event: *mut PjrtEvent,
    EventIsReadyArgs => is_ready: bool,
    EventErrorArgs => event: *mut PjrtEvent,
    EventAwaitArgs => event: *mut PjrtEvent,
    EventOnReadyArgs => user_arg: *mut c_void,
    EventCreateArgs => event: *mut PjrtEvent,
    ClientCreateArgs => kv_try_get_user_arg: *mut c_void,
    ClientDestroyArgs => client: *mut PjrtClient,
    ClientPlatformNameArgs => platform_name_size: usize,
    ClientProcessIndexArgs => process_index: c_int,
    ClientPlatformVersionArgs => platform_version_size: usize,
    ClientDevicesArgs => num_devices: usize,
    ClientAddressableDevicesArgs => num_addressable_devices: usize,
    ClientTopologyDescriptionArgs => topology: *mut PjrtTopologyDescription,
    Program => format_size: usize,
    ClientCompileArgs => executable: *mut PjrtLoadedExecutable,
    ClientLoadArgs => loaded_executable: *mut PjrtLoadedExecutable,
    CompileArgs => executable: *mut PjrtExecutable,
    BufferMemoryLayoutTiled => num_tiles: usize,
    BufferMemoryLayoutStrides => num_byte_strides: usize,
    BufferMemoryLayout => type_: i32,
    ClientBufferFromHostBufferArgs => buffer: *mut PjrtBuffer,
    ClientCreateUninitializedBufferArgs => buffer: *mut PjrtBuffer,
    ShapeSpec => element_type: i32,
    ClientCreateBuffersForAsyncH2dArgs => transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    AsyncH2dDestroyArgs => transfer_manager: *mut PjrtAsyncHostToDeviceTransferManager,
    AsyncH2dTransferDataArgs => done_with_h2d_transfer: *mut PjrtEvent,
    AsyncH2dRetrieveBufferArgs => buffer_out: *mut PjrtBuffer,
    AsyncH2dBufferCountArgs => buffer_count: usize,
    AsyncH2dBufferSizeArgs => buffer_size: usize,
    AsyncH2dTransferLiteralArgs => done_with_h2d_transfer: *mut PjrtEvent,
    DeviceDescriptionIdArgs => id: c_int,
    DeviceDescriptionProcessIndexArgs => process_index: c_int,
    DeviceDescriptionKindArgs => device_kind_size: usize,
    DeviceDescriptionDebugStringArgs => debug_string_size: usize,
    DeviceDescriptionToStringArgs => to_string_size: usize,
    DeviceGetDescriptionArgs => device_description: *mut PjrtDeviceDescription,
    DeviceMemoryStatsArgs => peak_pool_bytes_is_set: bool,
    ExecutableDestroyArgs => executable: *mut PjrtExecutable,
    LoadedExecutableDestroyArgs => executable: *mut PjrtLoadedExecutable,
    LoadedExecutableGetExecutableArgs => executable: *mut PjrtExecutable,
    ExecutableNameArgs => executable_name_size: usize,
    ExecutableNumOutputsArgs => num_outputs: usize,
    ExecutableNumReplicasArgs => num_replicas: usize,
    ExecutableNumPartitionsArgs => num_partitions: usize,
    ExecutableFingerprintArgs => executable_fingerprint_size: usize,
    ExecutableOptimizedProgramArgs => program: *mut Program,
    ExecutableGetCompiledMemoryStatsArgs => peak_unpadded_heap_bytes: i64,
    LoadedExecutableAddressableDevicesArgs => num_addressable_devices: usize,
    ExecuteOptions => use_major_to_minor_data_layout_for_callbacks: bool,
    LoadedExecutableExecuteArgs => execute_device: *mut PjrtDevice,
    ExecutableSerializeArgs => serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PjrtSerializedExecutable)>,
    ExecutableDeserializeAndLoadArgs => overridden_serialized_compile_options_size: usize,
    BufferDestroyArgs => buffer: *mut PjrtBuffer,
    BufferDeleteArgs => buffer: *mut PjrtBuffer,
    BufferElementTypeArgs => type_: i32,
    BufferDimensionsArgs => num_dims: usize,
    BufferOnDeviceSizeInBytesArgs => on_device_size_in_bytes: usize,
    BufferDeviceArgs => device: *mut PjrtDevice,
    BufferMemoryArgs => memory: *mut PjrtMemory,
    BufferIsOnCpuArgs => is_on_cpu: bool,
    BufferReadyEventArgs => event: *mut PjrtEvent,
    BufferToHostBufferArgs => event: *mut PjrtEvent,
    BufferCopyToDeviceArgs => dst_buffer: *mut PjrtBuffer,
    BufferCopyToMemoryArgs => dst_buffer: *mut PjrtBuffer,
    BufferCopyRawToHostArgs => event: *mut PjrtEvent,
    BufferCopyRawToHostFutureArgs => future_ready_callback: Option<unsafe extern "C" fn(*mut BufferCopyRawToHostFutureCallbackArgs)>,
    BufferUnsafePointerArgs => buffer_pointer: usize,
    BufferExternalReferenceCountArgs => buffer: *mut PjrtBuffer,
    BufferOpaqueDeviceMemoryDataPointerArgs => device_memory_ptr: *mut c_void,
    TopologyDescriptionCreateArgs => topology: *mut PjrtTopologyDescription,
    TopologyDescriptionDestroyArgs => topology: *mut PjrtTopologyDescription,
);

// Sizes the header defines (checked here so a field typo fails the build, not a plugin call).
const _: () = assert!(offset_of!(ApiVersion, minor) + size_of::<c_int>() == 24);
const _: () = assert!(NamedValue::STRUCT_SIZE == 56);
const _: () = assert!(ClientCreateArgs::STRUCT_SIZE == 88);
const _: () = assert!(Program::STRUCT_SIZE == 48);
const _: () = assert!(ClientCompileArgs::STRUCT_SIZE == 56);
const _: () = assert!(CompileArgs::STRUCT_SIZE == 64);
const _: () = assert!(ExecuteOptions::STRUCT_SIZE == 121);
const _: () = assert!(LoadedExecutableExecuteArgs::STRUCT_SIZE == 80);
const _: () = assert!(DeviceMemoryStatsArgs::STRUCT_SIZE == 185);
const _: () = assert!(ExecutableGetCompiledMemoryStatsArgs::STRUCT_SIZE == 144);
const _: () = assert!(ClientBufferFromHostBufferArgs::STRUCT_SIZE == 120);
const _: () = assert!(BufferToHostBufferArgs::STRUCT_SIZE == 56);
const _: () = assert!(ExecutableDeserializeAndLoadArgs::STRUCT_SIZE == 64);
const _: () = assert!(BufferMemoryLayout::STRUCT_SIZE == 76);

/// Reads a `(ptr, len)` string a plugin returned; empty for NULL.
///
/// # Safety
/// `ptr` must be NULL or valid for `len` bytes for the duration of the call.
pub unsafe fn str_from(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // SAFETY: the caller guarantees `ptr` is valid for `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Renders a named value's value as text (for manifests and create-option records).
///
/// # Safety
/// `nv` must be a valid `PJRT_NamedValue` whose pointers are valid for its sizes.
pub unsafe fn named_value_text(nv: &NamedValue) -> (String, String) {
    // SAFETY: the caller guarantees the name pointer is valid for `name_size` bytes.
    let name = unsafe { str_from(nv.name, nv.name_size) };
    // SAFETY: the union member read is the one `type_` says the plugin/caller wrote; pointer
    // members are valid for `value_size` elements by the caller's guarantee.
    let value = unsafe {
        match nv.type_ {
            named_value_type::STRING => str_from(nv.value.string_value, nv.value_size),
            named_value_type::INT64 => nv.value.int64_value.to_string(),
            named_value_type::INT64_LIST => {
                let p = nv.value.int64_array_value;
                if p.is_null() || nv.value_size == 0 {
                    "[]".to_string()
                } else {
                    let items = std::slice::from_raw_parts(p, nv.value_size);
                    let parts: Vec<String> = items.iter().map(i64::to_string).collect();
                    format!("[{}]", parts.join(","))
                }
            }
            named_value_type::FLOAT => nv.value.float_value.to_string(),
            named_value_type::BOOL => nv.value.bool_value.to_string(),
            other => format!("<type {other}>"),
        }
    };
    (name, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_offsets() {
        assert_eq!(slot_offset("error_destroy"), Some(40));
        assert_eq!(slot_offset("client_compile"), Some(40 + 20 * 8));
        assert_eq!(
            slot_offset("topology_description_get_memory_space_kind_ids"),
            Some(1136)
        );
        assert_eq!(slot_offset("nope"), None);
        let mut seen = std::collections::HashSet::new();
        for n in SLOT_NAMES {
            assert!(seen.insert(*n), "duplicate slot {n}");
        }
    }

    #[test]
    fn dtypes() {
        assert_eq!(dtype_name(buffer_type::F32), "f32");
        assert_eq!(dtype_name(buffer_type::BF16), "bf16");
        assert_eq!(dtype_name(99), "?");
        assert_eq!(dtype_byte_width(buffer_type::F32), Some(4));
        assert_eq!(dtype_byte_width(buffer_type::PRED), Some(1));
        assert_eq!(dtype_byte_width(buffer_type::C128), Some(16));
        assert_eq!(dtype_byte_width(buffer_type::S4), None);
        assert_eq!(dtype_bits(buffer_type::S4), Some(4));
    }

    #[test]
    fn execute_options_sizes() {
        assert_eq!(execute_options_size_needed(115), 112);
        assert_eq!(execute_options_size_needed(75), 80);
        let o = ExecuteOptions::new();
        assert_eq!(o.struct_size, 121);
    }
}

/// A minimal PJRT frontend over any table (the real plugin's or the collector's): what the
/// collector uses to ask the real plugin about clients, devices and executables, and what tests use
/// to drive a plugin the way JAX or torch_xla would.
pub mod driver {
    use std::ffi::{c_char, c_void};
    use std::ptr;

    use super::*;

    /// A PJRT error read out of a `PJRT_Error` (which the driver then destroyed).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Status {
        pub code: i32,
        pub message: String,
    }

    impl std::fmt::Display for Status {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "PJRT error {}: {}", self.code, self.message)
        }
    }

    impl std::error::Error for Status {}

    pub type Result<T> = std::result::Result<T, Status>;

    fn missing(slot: &str) -> Status {
        Status {
            code: error_code::UNIMPLEMENTED,
            message: format!("the table has no {slot} slot"),
        }
    }

    /// A serialized `CompileOptionsProto` for one replica and one partition
    /// (`executable_build_options` = field 3 {`num_replicas` = 4: 1, `num_partitions` = 5: 1}):
    /// the least a plugin accepts (empty options abort the CPU plugin on `replica_count > 0`).
    pub const SINGLE_DEVICE_COMPILE_OPTIONS: &[u8] = &[0x1a, 0x04, 0x20, 0x01, 0x28, 0x01];

    /// A create option for `Driver::client_create`.
    #[derive(Clone, Debug)]
    pub enum OptionValue {
        Str(String),
        Int(i64),
        Bool(bool),
        Float(f32),
    }

    /// What `Driver::execute` returned: outputs per device, and completion events when asked for.
    pub struct ExecuteResult {
        pub outputs: Vec<Vec<*mut PjrtBuffer>>,
        pub events: Vec<*mut PjrtEvent>,
    }

    /// Options of `Driver::execute`.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct ExecuteWith {
        /// Ask for device completion events.
        pub completion_events: bool,
        /// Send `PJRT_ExecuteOptions` with this `struct_size` instead of ours (to act like an
        /// older frontend, e.g. 80 for torch_xla 2.9).
        pub options_struct_size: Option<usize>,
    }

    /// Calls through a PJRT table. Every method forwards to one table slot.
    #[derive(Clone, Copy)]
    pub struct Driver {
        api: &'static PjrtApi,
    }

    // SAFETY: a PJRT table is immutable function pointers; PJRT calls are thread-safe.
    unsafe impl Send for Driver {}
    // SAFETY: as above.
    unsafe impl Sync for Driver {}

    macro_rules! slot {
        ($self:ident, $name:ident) => {
            if $self.api.has_slot_at(std::mem::offset_of!(PjrtApi, $name)) {
                $self.api.$name.ok_or_else(|| missing(stringify!($name)))?
            } else {
                return Err(missing(stringify!($name)));
            }
        };
    }

    impl Driver {
        /// # Safety
        /// `api` must point to a PJRT table that stays valid for the rest of the process.
        pub unsafe fn new(api: *const PjrtApi) -> Option<Driver> {
            // SAFETY: the caller guarantees validity for 'static.
            unsafe { api.as_ref() }.map(|api| Driver { api })
        }

        pub fn api(&self) -> &'static PjrtApi {
            self.api
        }

        /// Reads code and message of `err` without destroying it.
        ///
        /// # Safety
        /// `err` must be a live `PJRT_Error` from this table's plugin.
        pub unsafe fn peek_error(&self, err: *const PjrtError) -> Status {
            let mut code = error_code::UNKNOWN;
            if let Some(f) = self.api.error_get_code {
                let mut a = ErrorGetCodeArgs::new();
                a.error = err;
                // SAFETY: `err` is live (caller); `a` is a valid Args struct. GetCode returns an
                // error only for a bad argument; ignore it rather than recurse.
                let _ = unsafe { f(&mut a) };
                code = a.code;
            }
            let mut message = String::new();
            if let Some(f) = self.api.error_message {
                let mut a = ErrorMessageArgs::new();
                a.error = err;
                // SAFETY: as above; the message lives as long as `err`, read before returning.
                unsafe {
                    f(&mut a);
                    message = str_from(a.message, a.message_size);
                }
            }
            Status { code, message }
        }

        /// Destroys `err`.
        ///
        /// # Safety
        /// `err` must be NULL or a live `PJRT_Error` this caller owns.
        pub unsafe fn destroy_error(&self, err: *mut PjrtError) {
            if err.is_null() {
                return;
            }
            if let Some(f) = self.api.error_destroy {
                let mut a = ErrorDestroyArgs::new();
                a.error = err;
                // SAFETY: the caller owns `err`.
                unsafe { f(&mut a) };
            }
        }

        /// Turns a returned `PJRT_Error*` into a `Result`, destroying the error.
        ///
        /// # Safety
        /// `err` must be NULL or a live `PJRT_Error` this caller owns.
        pub unsafe fn check(&self, err: *mut PjrtError) -> Result<()> {
            if err.is_null() {
                return Ok(());
            }
            // SAFETY: forwarded caller guarantee.
            let st = unsafe { self.peek_error(err) };
            // SAFETY: forwarded caller guarantee.
            unsafe { self.destroy_error(err) };
            Err(st)
        }

        /// Calls a slot with `args` and checks the result.
        ///
        /// # Safety
        /// `args` must be valid for `f` (handles live, pointers valid for their sizes).
        unsafe fn call<A>(&self, f: PjrtFn<A>, args: &mut A) -> Result<()> {
            // SAFETY: forwarded caller guarantee.
            unsafe { self.check(f(args)) }
        }

        pub fn plugin_attributes(&self) -> Result<Vec<(String, String)>> {
            let f = slot!(self, plugin_attributes);
            let mut a = PluginAttributesArgs::new();
            // SAFETY: `a` is a valid Args struct with no inputs.
            unsafe { self.call(f, &mut a)? };
            let mut out = Vec::with_capacity(a.num_attributes);
            for i in 0..a.num_attributes {
                // SAFETY: the plugin returned `num_attributes` values living for the process.
                out.push(unsafe { named_value_text(&*a.attributes.add(i)) });
            }
            Ok(out)
        }

        pub fn client_create(&self, options: &[(&str, OptionValue)]) -> Result<*mut PjrtClient> {
            let f = slot!(self, client_create);
            let strings: Vec<&str> = options
                .iter()
                .map(|(_, v)| match v {
                    OptionValue::Str(s) => s.as_str(),
                    _ => "",
                })
                .collect();
            let nvs: Vec<NamedValue> = options
                .iter()
                .zip(&strings)
                .map(|((name, v), s)| {
                    let mut nv = NamedValue::new();
                    nv.name = name.as_ptr().cast();
                    nv.name_size = name.len();
                    nv.value_size = 1;
                    match v {
                        OptionValue::Str(_) => {
                            nv.type_ = named_value_type::STRING;
                            nv.value.string_value = s.as_ptr().cast();
                            nv.value_size = s.len();
                        }
                        OptionValue::Int(i) => {
                            nv.type_ = named_value_type::INT64;
                            nv.value.int64_value = *i;
                        }
                        OptionValue::Bool(b) => {
                            nv.type_ = named_value_type::BOOL;
                            nv.value.bool_value = *b;
                        }
                        OptionValue::Float(x) => {
                            nv.type_ = named_value_type::FLOAT;
                            nv.value.float_value = *x;
                        }
                    }
                    nv
                })
                .collect();
            let mut a = ClientCreateArgs::new();
            a.create_options = if nvs.is_empty() {
                ptr::null()
            } else {
                nvs.as_ptr()
            };
            a.num_options = nvs.len();
            // SAFETY: the options and their strings outlive the call.
            unsafe { self.call(f, &mut a)? };
            Ok(a.client)
        }

        /// # Safety
        /// `client` must be live.
        pub unsafe fn client_destroy(&self, client: *mut PjrtClient) -> Result<()> {
            let f = slot!(self, client_destroy);
            let mut a = ClientDestroyArgs::new();
            a.client = client;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// # Safety
        /// `client` must be live.
        pub unsafe fn platform_name(&self, client: *mut PjrtClient) -> Result<String> {
            let f = slot!(self, client_platform_name);
            let mut a = ClientPlatformNameArgs::new();
            a.client = client;
            // SAFETY: caller guarantee; the name lives as long as the client.
            unsafe {
                self.call(f, &mut a)?;
                Ok(str_from(a.platform_name, a.platform_name_size))
            }
        }

        /// # Safety
        /// `client` must be live.
        pub unsafe fn platform_version(&self, client: *mut PjrtClient) -> Result<String> {
            let f = slot!(self, client_platform_version);
            let mut a = ClientPlatformVersionArgs::new();
            a.client = client;
            // SAFETY: caller guarantee; the version lives as long as the client.
            unsafe {
                self.call(f, &mut a)?;
                Ok(str_from(a.platform_version, a.platform_version_size))
            }
        }

        /// # Safety
        /// `client` must be live.
        pub unsafe fn addressable_devices(
            &self,
            client: *mut PjrtClient,
        ) -> Result<Vec<*mut PjrtDevice>> {
            let f = slot!(self, client_addressable_devices);
            let mut a = ClientAddressableDevicesArgs::new();
            a.client = client;
            // SAFETY: caller guarantee; the list lives as long as the client.
            unsafe {
                self.call(f, &mut a)?;
                Ok(slice_of(a.addressable_devices, a.num_addressable_devices).to_vec())
            }
        }

        /// # Safety
        /// `device` must be live.
        pub unsafe fn device_description(
            &self,
            device: *mut PjrtDevice,
        ) -> Result<*mut PjrtDeviceDescription> {
            let f = slot!(self, device_get_description);
            let mut a = DeviceGetDescriptionArgs::new();
            a.device = device;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.device_description)
        }

        /// Id, kind and process index of a device.
        ///
        /// # Safety
        /// `device` must be live.
        pub unsafe fn device_info(&self, device: *mut PjrtDevice) -> Result<(i32, String, i32)> {
            // SAFETY: caller guarantee.
            let desc = unsafe { self.device_description(device)? };
            let f_id = slot!(self, device_description_id);
            let f_kind = slot!(self, device_description_kind);
            let f_pi = slot!(self, device_description_process_index);
            let mut id = DeviceDescriptionIdArgs::new();
            id.device_description = desc;
            let mut kind = DeviceDescriptionKindArgs::new();
            kind.device_description = desc;
            let mut pi = DeviceDescriptionProcessIndexArgs::new();
            pi.device_description = desc;
            // SAFETY: `desc` lives as long as the device; strings likewise.
            unsafe {
                self.call(f_id, &mut id)?;
                self.call(f_kind, &mut kind)?;
                self.call(f_pi, &mut pi)?;
                Ok((
                    id.id,
                    str_from(kind.device_kind, kind.device_kind_size),
                    pi.process_index,
                ))
            }
        }

        /// # Safety
        /// `device` must be live.
        pub unsafe fn device_debug_string(&self, device: *mut PjrtDevice) -> Result<String> {
            // SAFETY: caller guarantee.
            let desc = unsafe { self.device_description(device)? };
            let f = slot!(self, device_description_debug_string);
            let mut a = DeviceDescriptionDebugStringArgs::new();
            a.device_description = desc;
            // SAFETY: `desc` is live; the string lives as long as the device.
            unsafe {
                self.call(f, &mut a)?;
                Ok(str_from(a.debug_string, a.debug_string_size))
            }
        }

        /// # Safety
        /// `device` must be live.
        pub unsafe fn memory_stats(
            &self,
            device: *mut PjrtDevice,
        ) -> Result<DeviceMemoryStatsArgs> {
            let f = slot!(self, device_memory_stats);
            let mut a = DeviceMemoryStatsArgs::new();
            a.device = device;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a)
        }

        /// Copies `data` (dense, major-to-minor) to `device`; waits until the host data is no
        /// longer needed, so `data` may be dropped when this returns.
        ///
        /// # Safety
        /// `client` and `device` must be live; `data` must hold `dims`' elements of `dtype`.
        pub unsafe fn buffer_from_host(
            &self,
            client: *mut PjrtClient,
            device: *mut PjrtDevice,
            data: &[u8],
            dtype: i32,
            dims: &[i64],
        ) -> Result<*mut PjrtBuffer> {
            let f = slot!(self, client_buffer_from_host_buffer);
            let mut a = ClientBufferFromHostBufferArgs::new();
            a.client = client;
            a.data = data.as_ptr().cast();
            a.type_ = dtype;
            a.dims = dims.as_ptr();
            a.num_dims = dims.len();
            a.host_buffer_semantics = host_buffer_semantics::IMMUTABLE_UNTIL_TRANSFER_COMPLETES;
            a.device = device;
            // SAFETY: caller guarantee; `data` stays borrowed until the done event fired.
            unsafe {
                self.call(f, &mut a)?;
                if !a.done_with_host_buffer.is_null() {
                    let r = self.event_await(a.done_with_host_buffer);
                    self.event_destroy(a.done_with_host_buffer)?;
                    r?;
                }
            }
            Ok(a.buffer)
        }

        /// # Safety
        /// `buffer` must be live.
        pub unsafe fn buffer_dimensions(&self, buffer: *mut PjrtBuffer) -> Result<Vec<i64>> {
            let f = slot!(self, buffer_dimensions);
            let mut a = BufferDimensionsArgs::new();
            a.buffer = buffer;
            // SAFETY: caller guarantee; dims live as long as the buffer.
            unsafe {
                self.call(f, &mut a)?;
                Ok(slice_of(a.dims, a.num_dims).to_vec())
            }
        }

        /// # Safety
        /// `buffer` must be live.
        pub unsafe fn buffer_element_type(&self, buffer: *mut PjrtBuffer) -> Result<i32> {
            let f = slot!(self, buffer_element_type);
            let mut a = BufferElementTypeArgs::new();
            a.buffer = buffer;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.type_)
        }

        /// # Safety
        /// `buffer` must be live.
        pub unsafe fn buffer_on_device_size(&self, buffer: *mut PjrtBuffer) -> Result<usize> {
            let f = slot!(self, buffer_on_device_size_in_bytes);
            let mut a = BufferOnDeviceSizeInBytesArgs::new();
            a.buffer = buffer;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.on_device_size_in_bytes)
        }

        /// Reads a whole buffer to host memory (size query, copy, await).
        ///
        /// # Safety
        /// `buffer` must be live.
        pub unsafe fn buffer_to_host(&self, buffer: *mut PjrtBuffer) -> Result<Vec<u8>> {
            let f = slot!(self, buffer_to_host_buffer);
            let mut q = BufferToHostBufferArgs::new();
            q.src = buffer;
            // SAFETY: caller guarantee; dst NULL is the size query.
            unsafe { self.call(f, &mut q)? };
            let mut out = vec![0u8; q.dst_size];
            let mut a = BufferToHostBufferArgs::new();
            a.src = buffer;
            a.dst = out.as_mut_ptr().cast::<c_void>();
            a.dst_size = out.len();
            // SAFETY: `out` is valid for `dst_size` bytes and outlives the awaited copy.
            unsafe {
                self.call(f, &mut a)?;
                if !a.event.is_null() {
                    let r = self.event_await(a.event);
                    self.event_destroy(a.event)?;
                    r?;
                }
            }
            Ok(out)
        }

        /// # Safety
        /// `buffer` must be live and owned by the caller.
        pub unsafe fn buffer_destroy(&self, buffer: *mut PjrtBuffer) -> Result<()> {
            let f = slot!(self, buffer_destroy);
            let mut a = BufferDestroyArgs::new();
            a.buffer = buffer;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// # Safety
        /// `event` must be live.
        pub unsafe fn event_await(&self, event: *mut PjrtEvent) -> Result<()> {
            let f = slot!(self, event_await);
            let mut a = EventAwaitArgs::new();
            a.event = event;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// # Safety
        /// `event` must be live and owned by the caller.
        pub unsafe fn event_destroy(&self, event: *mut PjrtEvent) -> Result<()> {
            let f = slot!(self, event_destroy);
            let mut a = EventDestroyArgs::new();
            a.event = event;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// `PJRT_Client_Compile`.
        ///
        /// # Safety
        /// `client` must be live.
        pub unsafe fn compile(
            &self,
            client: *mut PjrtClient,
            code: &[u8],
            format: &str,
            compile_options: &[u8],
        ) -> Result<*mut PjrtLoadedExecutable> {
            let f = slot!(self, client_compile);
            let mut p = Program::new();
            p.code = code.as_ptr().cast_mut().cast::<c_char>();
            p.code_size = code.len();
            p.format = format.as_ptr().cast();
            p.format_size = format.len();
            let mut a = ClientCompileArgs::new();
            a.client = client;
            a.program = &p;
            a.compile_options = compile_options.as_ptr().cast();
            a.compile_options_size = compile_options.len();
            // SAFETY: caller guarantee; program and options outlive the call (the plugin only
            // reads `code`).
            unsafe { self.call(f, &mut a)? };
            Ok(a.executable)
        }

        /// The client's topology (owned by the client).
        ///
        /// # Safety
        /// `client` must be live.
        pub unsafe fn client_topology(
            &self,
            client: *mut PjrtClient,
        ) -> Result<*mut PjrtTopologyDescription> {
            let f = slot!(self, client_topology_description);
            let mut a = ClientTopologyDescriptionArgs::new();
            a.client = client;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.topology)
        }

        /// `PJRT_Compile`: compile-only against `topology` (the caller destroys the result with
        /// `executable_destroy`, or loads it with `client_load`).
        ///
        /// # Safety
        /// `topology` must be live; `client` NULL or live.
        pub unsafe fn compile_only(
            &self,
            topology: *mut PjrtTopologyDescription,
            client: *mut PjrtClient,
            code: &[u8],
            format: &str,
            compile_options: &[u8],
        ) -> Result<*mut PjrtExecutable> {
            let f = slot!(self, compile);
            let mut p = Program::new();
            p.code = code.as_ptr().cast_mut().cast::<c_char>();
            p.code_size = code.len();
            p.format = format.as_ptr().cast();
            p.format_size = format.len();
            let mut a = CompileArgs::new();
            a.topology = topology;
            a.program = &p;
            a.compile_options = compile_options.as_ptr().cast();
            a.compile_options_size = compile_options.len();
            a.client = client;
            // SAFETY: caller guarantee; program and options outlive the call.
            unsafe { self.call(f, &mut a)? };
            Ok(a.executable)
        }

        /// `PJRT_Client_Load` (0.95+).
        ///
        /// # Safety
        /// `client` and `exe` must be live.
        pub unsafe fn client_load(
            &self,
            client: *mut PjrtClient,
            exe: *mut PjrtExecutable,
            compile_options: &[u8],
        ) -> Result<*mut PjrtLoadedExecutable> {
            let f = slot!(self, client_load);
            let mut a = ClientLoadArgs::new();
            a.client = client;
            a.executable = exe;
            a.compile_options = compile_options.as_ptr().cast();
            a.compile_options_size = compile_options.len();
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.loaded_executable)
        }

        /// The executable behind a loaded one (the caller destroys it with
        /// `executable_destroy`).
        ///
        /// # Safety
        /// `loaded` must be live.
        pub unsafe fn get_executable(
            &self,
            loaded: *mut PjrtLoadedExecutable,
        ) -> Result<*mut PjrtExecutable> {
            let f = slot!(self, loaded_executable_get_executable);
            let mut a = LoadedExecutableGetExecutableArgs::new();
            a.loaded_executable = loaded;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.executable)
        }

        /// # Safety
        /// `exe` must be live and owned by the caller.
        pub unsafe fn executable_destroy(&self, exe: *mut PjrtExecutable) -> Result<()> {
            let f = slot!(self, executable_destroy);
            let mut a = ExecutableDestroyArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// # Safety
        /// `exe` must be live and owned by the caller.
        pub unsafe fn loaded_executable_destroy(
            &self,
            exe: *mut PjrtLoadedExecutable,
        ) -> Result<()> {
            let f = slot!(self, loaded_executable_destroy);
            let mut a = LoadedExecutableDestroyArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a) }
        }

        /// # Safety
        /// `exe` must be live.
        pub unsafe fn executable_name(&self, exe: *mut PjrtExecutable) -> Result<String> {
            let f = slot!(self, executable_name);
            let mut a = ExecutableNameArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee; the name lives as long as `exe`.
            unsafe {
                self.call(f, &mut a)?;
                Ok(str_from(a.executable_name, a.executable_name_size))
            }
        }

        /// Raw fingerprint bytes rendered as text (lossy).
        ///
        /// # Safety
        /// `exe` must be live.
        pub unsafe fn executable_fingerprint(&self, exe: *mut PjrtExecutable) -> Result<String> {
            let f = slot!(self, executable_fingerprint);
            let mut a = ExecutableFingerprintArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee; the fingerprint lives as long as `exe`.
            unsafe {
                self.call(f, &mut a)?;
                Ok(str_from(
                    a.executable_fingerprint,
                    a.executable_fingerprint_size,
                ))
            }
        }

        /// # Safety
        /// `exe` must be live.
        pub unsafe fn num_outputs(&self, exe: *mut PjrtExecutable) -> Result<usize> {
            let f = slot!(self, executable_num_outputs);
            let mut a = ExecutableNumOutputsArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a.num_outputs)
        }

        /// Devices the executable was compiled for: replicas × partitions.
        ///
        /// # Safety
        /// `exe` must be live.
        pub unsafe fn num_devices(&self, exe: *mut PjrtExecutable) -> Result<usize> {
            let f = slot!(self, executable_num_replicas);
            let mut r = ExecutableNumReplicasArgs::new();
            r.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut r)? };
            let f = slot!(self, executable_num_partitions);
            let mut p = ExecutableNumPartitionsArgs::new();
            p.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut p)? };
            Ok(r.num_replicas.saturating_mul(p.num_partitions))
        }

        /// The optimized program (two-call size protocol): `(format, bytes)`.
        ///
        /// # Safety
        /// `exe` must be live.
        pub unsafe fn optimized_program(
            &self,
            exe: *mut PjrtExecutable,
        ) -> Result<(String, Vec<u8>)> {
            let f = slot!(self, executable_optimized_program);
            let mut p = Program::new();
            let mut a = ExecutableOptimizedProgramArgs::new();
            a.executable = exe;
            a.program = &mut p;
            // SAFETY: caller guarantee; first call with code NULL only sets `code_size`.
            unsafe { self.call(f, &mut a)? };
            let mut code = vec![0u8; p.code_size];
            p.code = code.as_mut_ptr().cast();
            a.program = &mut p;
            // SAFETY: `code` holds `code_size` bytes; the plugin fills at most that.
            unsafe { self.call(f, &mut a)? };
            code.truncate(p.code_size);
            // SAFETY: the format string is owned by the plugin and valid for `format_size`.
            let format = unsafe { str_from(p.format, p.format_size) };
            Ok((format, code))
        }

        /// # Safety
        /// `exe` must be live.
        pub unsafe fn compiled_memory_stats(
            &self,
            exe: *mut PjrtExecutable,
        ) -> Result<ExecutableGetCompiledMemoryStatsArgs> {
            let f = slot!(self, executable_get_compiled_memory_stats);
            let mut a = ExecutableGetCompiledMemoryStatsArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee.
            unsafe { self.call(f, &mut a)? };
            Ok(a)
        }

        /// # Safety
        /// `exe` must be live.
        pub unsafe fn loaded_addressable_devices(
            &self,
            exe: *mut PjrtLoadedExecutable,
        ) -> Result<Vec<*mut PjrtDevice>> {
            let f = slot!(self, loaded_executable_addressable_devices);
            let mut a = LoadedExecutableAddressableDevicesArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee; the list lives as long as `exe`.
            unsafe {
                self.call(f, &mut a)?;
                Ok(slice_of(a.addressable_devices, a.num_addressable_devices).to_vec())
            }
        }

        /// `PJRT_Executable_Serialize`: the serialized bytes (copied; the plugin's are freed).
        ///
        /// # Safety
        /// `exe` must be live.
        pub unsafe fn serialize(&self, exe: *mut PjrtExecutable) -> Result<Vec<u8>> {
            let f = slot!(self, executable_serialize);
            let mut a = ExecutableSerializeArgs::new();
            a.executable = exe;
            // SAFETY: caller guarantee; bytes live until the deleter runs, after the copy.
            unsafe {
                self.call(f, &mut a)?;
                let bytes =
                    slice_of(a.serialized_bytes.cast::<u8>(), a.serialized_bytes_size).to_vec();
                if let Some(del) = a.serialized_executable_deleter {
                    del(a.serialized_executable);
                }
                Ok(bytes)
            }
        }

        /// # Safety
        /// `client` must be live.
        pub unsafe fn deserialize_and_load(
            &self,
            client: *mut PjrtClient,
            bytes: &[u8],
        ) -> Result<*mut PjrtLoadedExecutable> {
            let f = slot!(self, executable_deserialize_and_load);
            let mut a = ExecutableDeserializeAndLoadArgs::new();
            a.client = client;
            a.serialized_executable = bytes.as_ptr().cast();
            a.serialized_executable_size = bytes.len();
            // SAFETY: caller guarantee; `bytes` outlives the call.
            unsafe { self.call(f, &mut a)? };
            Ok(a.loaded_executable)
        }

        /// `PJRT_LoadedExecutable_Execute` with `args[device][arg]`.
        ///
        /// # Safety
        /// `exe` and every buffer must be live.
        pub unsafe fn execute(
            &self,
            exe: *mut PjrtLoadedExecutable,
            args: &[Vec<*mut PjrtBuffer>],
            with: ExecuteWith,
        ) -> Result<ExecuteResult> {
            let f = slot!(self, loaded_executable_execute);
            // SAFETY: caller guarantee.
            let inner = unsafe { self.get_executable(exe)? };
            // SAFETY: `inner` is live until destroyed below.
            let n_out = unsafe { self.num_outputs(inner) };
            // SAFETY: the driver owns `inner`.
            unsafe { self.executable_destroy(inner)? };
            let n_out = n_out?;
            let num_devices = args.len();
            let num_args = args.first().map_or(0, Vec::len);
            let arg_ptrs: Vec<*const *mut PjrtBuffer> = args.iter().map(|l| l.as_ptr()).collect();
            let mut outputs: Vec<Vec<*mut PjrtBuffer>> = (0..num_devices)
                .map(|_| vec![ptr::null_mut(); n_out])
                .collect();
            let out_ptrs: Vec<*mut *mut PjrtBuffer> =
                outputs.iter_mut().map(|l| l.as_mut_ptr()).collect();
            let mut events: Vec<*mut PjrtEvent> = vec![ptr::null_mut(); num_devices];
            let mut opts = ExecuteOptions::new();
            if let Some(sz) = with.options_struct_size {
                opts.struct_size = sz;
            }
            let mut a = LoadedExecutableExecuteArgs::new();
            a.executable = exe;
            a.options = &mut opts;
            a.argument_lists = arg_ptrs.as_ptr();
            a.num_devices = num_devices;
            a.num_args = num_args;
            a.output_lists = out_ptrs.as_ptr();
            a.device_complete_events = if with.completion_events {
                events.as_mut_ptr()
            } else {
                ptr::null_mut()
            };
            // SAFETY: every list has the sizes announced and outlives the call.
            unsafe { self.call(f, &mut a)? };
            if !with.completion_events {
                events.clear();
            }
            Ok(ExecuteResult { outputs, events })
        }
    }

    /// A plugin-owned `(ptr, len)` array as a slice; empty for NULL.
    ///
    /// # Safety
    /// `p` must be NULL or valid for `n` elements while the slice is used.
    pub unsafe fn slice_of<'a, T>(p: *const T, n: usize) -> &'a [T] {
        if p.is_null() || n == 0 {
            &[]
        } else {
            // SAFETY: caller guarantee.
            unsafe { std::slice::from_raw_parts(p, n) }
        }
    }
}
