//! The event model: every record a trace can hold.
//!
//! Each record is a protobuf message (prost) so that fields can be added in later format minors
//! without breaking older readers (unknown fields are skipped), and a record kind that a reader does
//! not know is skipped whole (see [`RecordKind`]). Times are `CLOCK_MONOTONIC` nanoseconds of the
//! recording host; `Clock` records anchor them to wall time.

use prost::Message;

/// Identifier of an interned string (`StringDef`). 0 means "none".
pub type StringId = u32;
/// Identifier of an interned Python stack (`StackDef`). 0 means "no stack".
pub type StackId = u32;

/// A key/value pair (plugin attributes, environment, package versions).
#[derive(Clone, PartialEq, Eq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// The run manifest: the first record of every trace.
#[derive(Clone, PartialEq, Message)]
pub struct Manifest {
    #[prost(uint32, tag = "1")]
    pub pid: u32,
    #[prost(string, tag = "2")]
    pub host: String,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    #[prost(uint64, tag = "3")]
    pub start_wall_ns: u64,
    /// Monotonic clock at the same instant as `start_wall_ns`.
    #[prost(uint64, tag = "4")]
    pub start_mono_ns: u64,
    #[prost(string, repeated, tag = "5")]
    pub command_line: Vec<String>,
    /// The real plugin the collector wraps.
    #[prost(string, tag = "6")]
    pub plugin_path: String,
    #[prost(uint32, tag = "7")]
    pub pjrt_api_major: u32,
    #[prost(uint32, tag = "8")]
    pub pjrt_api_minor: u32,
    #[prost(message, repeated, tag = "9")]
    pub plugin_attributes: Vec<KeyValue>,
    /// Versions of jax, jaxlib, torch, torch_xla, torch_tpu, libtpu seen by the process.
    #[prost(message, repeated, tag = "10")]
    pub package_versions: Vec<KeyValue>,
    /// XLA_FLAGS, LIBTPU_INIT_ARGS, PJRT_DEVICE, TPU_*, XLA_*, TORCH_TPU_*, TPUSCOPE_*.
    #[prost(message, repeated, tag = "11")]
    pub environment: Vec<KeyValue>,
    #[prost(string, tag = "12")]
    pub collector_version: String,
    /// Identity shared by the processes of one multi-host job (empty when unknown).
    #[prost(string, tag = "13")]
    pub job_id: String,
    #[prost(uint32, tag = "14")]
    pub process_index: u32,
    /// `jax`, `torch_xla`, `torch_tpu` or empty when not known at start.
    #[prost(string, tag = "15")]
    pub frontend: String,
    /// The role the collector plays: `wrap` (in front of the plugin the frontend asked for) or
    /// `standin` (the CPU plugin standing in for a TPU) or `attach` (loaded into a running
    /// process by `tpuscope attach`: the trace starts at `start_wall_ns`, not at the process's
    /// start, and holds nothing of what happened before).
    #[prost(string, tag = "16")]
    pub role: String,
    /// When the process started (wall clock, ns since the Unix epoch), 0 when not known. With
    /// role `attach`, the process ran `start_wall_ns - process_start_wall_ns` before the trace.
    #[prost(uint64, tag = "17")]
    pub process_start_wall_ns: u64,
    /// With role `attach`: the `tpuscope attach` process the session belongs to (it ends when
    /// that process exits); 0 otherwise.
    #[prost(uint32, tag = "18")]
    pub attach_owner_pid: u32,
}

/// A device as the plugin describes it.
#[derive(Clone, PartialEq, Message)]
pub struct DeviceInfo {
    #[prost(int32, tag = "1")]
    pub id: i32,
    #[prost(string, tag = "2")]
    pub kind: String,
    #[prost(int32, tag = "3")]
    pub process_index: i32,
    #[prost(bool, tag = "4")]
    pub addressable: bool,
    #[prost(string, tag = "5")]
    pub debug_string: String,
}

/// A PJRT client was created (platform, devices). Folded into the manifest view by readers.
#[derive(Clone, PartialEq, Message)]
pub struct Client {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(string, tag = "4")]
    pub platform_name: String,
    #[prost(string, tag = "5")]
    pub platform_version: String,
    #[prost(message, repeated, tag = "6")]
    pub devices: Vec<DeviceInfo>,
    /// Create options the caller passed (names and values rendered as text).
    #[prost(message, repeated, tag = "7")]
    pub create_options: Vec<KeyValue>,
    #[prost(uint64, tag = "8")]
    pub client_id: u64,
}

/// An interned string.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StringDef {
    #[prost(uint32, tag = "1")]
    pub id: StringId,
    #[prost(string, tag = "2")]
    pub text: String,
}

/// One Python stack entry (file, function, line) of an interned stack.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct StackEntry {
    #[prost(uint32, tag = "1")]
    pub file: StringId,
    #[prost(uint32, tag = "2")]
    pub function: StringId,
    #[prost(uint32, tag = "3")]
    pub line: u32,
}

/// An interned Python stack, innermost frame first.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StackDef {
    #[prost(uint32, tag = "1")]
    pub id: StackId,
    #[prost(message, repeated, tag = "2")]
    pub frames: Vec<StackEntry>,
}

/// A content-addressed blob (a program, an optimized HLO, compile options), stored once per hash.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Blob {
    /// xxh3-64 of `data`.
    #[prost(uint64, tag = "1")]
    pub hash: u64,
    /// What the bytes are: `input_program`, `optimized_program`, `compile_options`, `serialized_executable`.
    #[prost(string, tag = "2")]
    pub role: String,
    /// Program format as PJRT names it: `mlir`, `hlo`, `hlo_with_config`; empty for non-programs.
    #[prost(string, tag = "3")]
    pub format: String,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

/// Compiled memory statistics (`PJRT_Executable_GetCompiledMemoryStats`), bytes.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct CompiledMemoryStats {
    #[prost(int64, tag = "1")]
    pub generated_code_size: i64,
    #[prost(int64, tag = "2")]
    pub argument_size: i64,
    #[prost(int64, tag = "3")]
    pub output_size: i64,
    #[prost(int64, tag = "4")]
    pub alias_size: i64,
    #[prost(int64, tag = "5")]
    pub temp_size: i64,
    #[prost(int64, tag = "6")]
    pub host_generated_code_size: i64,
    #[prost(int64, tag = "7")]
    pub host_argument_size: i64,
    #[prost(int64, tag = "8")]
    pub host_output_size: i64,
    #[prost(int64, tag = "9")]
    pub host_alias_size: i64,
    #[prost(int64, tag = "10")]
    pub host_temp_size: i64,
    #[prost(int64, tag = "11")]
    pub peak_memory: i64,
}

/// A PJRT error returned by a hooked call (also recorded on its own as an `ErrorEvent`).
#[derive(Clone, PartialEq, Eq, Message)]
pub struct ErrorInfo {
    /// `PJRT_Error_Code` (absl status code numbering: 12 = UNIMPLEMENTED).
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `PJRT_Client_Compile` or compile-only `PJRT_Compile`.
#[derive(Clone, PartialEq, Message)]
pub struct Compile {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    /// `PJRT_Client_Compile` or `PJRT_Compile`.
    #[prost(string, tag = "4")]
    pub api: String,
    #[prost(string, tag = "5")]
    pub program_format: String,
    #[prost(uint64, tag = "6")]
    pub program_size: u64,
    /// Blob hash of the input program (stored as a `Blob` with role `input_program`).
    #[prost(uint64, tag = "7")]
    pub program_hash: u64,
    /// Blob hash of the serialized compile options (role `compile_options`).
    #[prost(uint64, tag = "8")]
    pub options_hash: u64,
    #[prost(string, tag = "9")]
    pub executable_name: String,
    #[prost(string, tag = "10")]
    pub fingerprint: String,
    /// Blob hash of the optimized program (role `optimized_program`), 0 when not available.
    #[prost(uint64, tag = "11")]
    pub optimized_hash: u64,
    #[prost(string, tag = "12")]
    pub optimized_format: String,
    #[prost(message, optional, tag = "13")]
    pub memory: Option<CompiledMemoryStats>,
    #[prost(message, optional, tag = "14")]
    pub error: Option<ErrorInfo>,
    #[prost(uint32, tag = "15")]
    pub stack: StackId,
    /// Opaque handle of the resulting loaded executable (links executes to this compile).
    #[prost(uint64, tag = "16")]
    pub executable_id: u64,
    #[prost(uint32, tag = "17")]
    pub num_outputs: u32,
    /// Number of addressable devices the executable runs on.
    #[prost(uint32, tag = "18")]
    pub num_devices: u32,
}

/// `PJRT_Client_Load` of a compile-only executable.
#[derive(Clone, PartialEq, Message)]
pub struct Load {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(uint64, tag = "4")]
    pub executable_id: u64,
    #[prost(string, tag = "5")]
    pub executable_name: String,
    #[prost(message, optional, tag = "6")]
    pub error: Option<ErrorInfo>,
    #[prost(uint32, tag = "7")]
    pub stack: StackId,
    /// The `PJRT_Executable` that was loaded: matches `Compile::executable_id` of the compile-only
    /// `PJRT_Compile` that produced it.
    #[prost(uint64, tag = "8")]
    pub source_executable_id: u64,
}

/// An executable compiled before `tpuscope attach` (its compile is not in the trace), identified
/// at its first execute after the attach: what a `Compile` says of its executable, without the
/// input program, the compile time or a stack.
#[derive(Clone, PartialEq, Message)]
pub struct ExecutableSeen {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    /// How long asking the plugin about it took (on the executing thread, once).
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    /// The `PJRT_LoadedExecutable` (matches `Execute::executable_id`).
    #[prost(uint64, tag = "4")]
    pub executable_id: u64,
    #[prost(string, tag = "5")]
    pub executable_name: String,
    #[prost(string, tag = "6")]
    pub fingerprint: String,
    /// The optimized program's blob hash (0 if the plugin gave none).
    #[prost(uint64, tag = "7")]
    pub optimized_hash: u64,
    #[prost(string, tag = "8")]
    pub optimized_format: String,
    #[prost(message, optional, tag = "9")]
    pub memory: Option<CompiledMemoryStats>,
    #[prost(uint32, tag = "10")]
    pub num_outputs: u32,
    #[prost(uint32, tag = "11")]
    pub num_devices: u32,
}

/// `PJRT_LoadedExecutable_Execute`.
#[derive(Clone, PartialEq, Message)]
pub struct Execute {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    /// Host dispatch time: how long the call itself took.
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(uint64, tag = "4")]
    pub executable_id: u64,
    #[prost(uint32, tag = "5")]
    pub num_devices: u32,
    #[prost(uint32, tag = "6")]
    pub num_args: u32,
    /// Interned string of the argument signature, e.g. `f32[8,128] s32[]` (first device's list).
    #[prost(uint32, tag = "7")]
    pub arg_signature: StringId,
    /// Sequence number, matched by `ExecuteComplete` records.
    #[prost(uint64, tag = "8")]
    pub seq: u64,
    #[prost(message, optional, tag = "9")]
    pub error: Option<ErrorInfo>,
    /// Whether completion events were requested by the caller (only then is device time known).
    #[prost(bool, tag = "10")]
    pub completion_tracked: bool,
}

/// A device finished the work of an `Execute` (from `PJRT_Event_OnReady` on an event the caller asked for).
#[derive(Clone, PartialEq, Eq, Message)]
pub struct ExecuteComplete {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint64, tag = "2")]
    pub seq: u64,
    #[prost(uint32, tag = "3")]
    pub device_index: u32,
    #[prost(message, optional, tag = "4")]
    pub error: Option<ErrorInfo>,
}

/// Executes aggregated per executable once the trace passed its size cap.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct ExecuteSummary {
    #[prost(uint64, tag = "1")]
    pub t_start_ns: u64,
    #[prost(uint64, tag = "2")]
    pub t_end_ns: u64,
    #[prost(uint64, tag = "3")]
    pub executable_id: u64,
    #[prost(uint64, tag = "4")]
    pub count: u64,
    #[prost(uint64, tag = "5")]
    pub total_dur_ns: u64,
    #[prost(uint64, tag = "6")]
    pub errors: u64,
}

/// Transfer direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Direction {
    Unknown = 0,
    /// Host to device.
    H2d = 1,
    /// Device to host.
    D2h = 2,
}

/// A host↔device transfer.
#[derive(Clone, PartialEq, Message)]
pub struct Transfer {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(enumeration = "Direction", tag = "4")]
    pub direction: i32,
    /// The PJRT call, e.g. `PJRT_Buffer_ToHostBuffer`.
    #[prost(string, tag = "5")]
    pub api: String,
    #[prost(uint64, tag = "6")]
    pub bytes: u64,
    #[prost(int64, repeated, tag = "7")]
    pub dims: Vec<i64>,
    /// Element type name (`f32`, `bf16`, `s32`, …).
    #[prost(string, tag = "8")]
    pub dtype: String,
    #[prost(int32, tag = "9")]
    pub device: i32,
    /// Whether the host blocked on device work (every D2H read counts as a host sync).
    #[prost(bool, tag = "10")]
    pub sync: bool,
    /// How long the host was blocked, when measured.
    #[prost(uint64, tag = "11")]
    pub blocked_ns: u64,
    #[prost(uint32, tag = "12")]
    pub stack: StackId,
    #[prost(uint64, tag = "13")]
    pub buffer_id: u64,
    #[prost(message, optional, tag = "14")]
    pub error: Option<ErrorInfo>,
}

/// A blocking host wait on device work that moves no bytes.
#[derive(Clone, PartialEq, Message)]
pub struct Sync {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    /// `PJRT_Event_Await`, `zero_copy_read`, `block_until_ready`, …
    #[prost(string, tag = "4")]
    pub reason: String,
    #[prost(uint64, tag = "5")]
    pub buffer_id: u64,
    #[prost(uint32, tag = "6")]
    pub stack: StackId,
}

/// `PJRT_Executable_Serialize`: a persistent-cache store.
#[derive(Clone, PartialEq, Message)]
pub struct CacheStore {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(uint64, tag = "4")]
    pub executable_id: u64,
    #[prost(string, tag = "5")]
    pub executable_name: String,
    #[prost(uint64, tag = "6")]
    pub bytes: u64,
    #[prost(message, optional, tag = "7")]
    pub error: Option<ErrorInfo>,
    /// xxh3-64 of the serialized bytes (matches `CacheLoad::serialized_hash` of a later load).
    #[prost(uint64, tag = "8")]
    pub serialized_hash: u64,
}

/// `PJRT_Executable_DeserializeAndLoad`: a persistent-cache load.
#[derive(Clone, PartialEq, Message)]
pub struct CacheLoad {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    #[prost(uint64, tag = "3")]
    pub dur_ns: u64,
    #[prost(uint64, tag = "4")]
    pub bytes: u64,
    #[prost(bool, tag = "5")]
    pub ok: bool,
    #[prost(message, optional, tag = "6")]
    pub error: Option<ErrorInfo>,
    #[prost(uint64, tag = "7")]
    pub executable_id: u64,
    #[prost(string, tag = "8")]
    pub executable_name: String,
    #[prost(uint64, tag = "9")]
    pub serialized_hash: u64,
    #[prost(uint32, tag = "10")]
    pub stack: StackId,
    /// Blob hash of the loaded executable's optimized program, when it could be read.
    #[prost(uint64, tag = "11")]
    pub optimized_hash: u64,
}

/// Where a memory sample came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MemoryOrigin {
    Unknown = 0,
    /// `PJRT_Device_MemoryStats` answered by the plugin.
    PluginStats = 1,
    /// The collector's own accounting of live buffers it saw created and destroyed.
    LiveBuffers = 2,
}

/// A device memory sample.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Memory {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(int32, tag = "2")]
    pub device: i32,
    #[prost(enumeration = "MemoryOrigin", tag = "3")]
    pub origin: i32,
    #[prost(int64, tag = "4")]
    pub bytes_in_use: i64,
    #[prost(int64, optional, tag = "5")]
    pub peak_bytes_in_use: Option<i64>,
    #[prost(int64, optional, tag = "6")]
    pub bytes_limit: Option<i64>,
    #[prost(int64, optional, tag = "7")]
    pub num_allocs: Option<i64>,
    #[prost(int64, optional, tag = "8")]
    pub largest_alloc_size: Option<i64>,
    #[prost(int64, optional, tag = "9")]
    pub bytes_reserved: Option<i64>,
    /// Live buffer count (origin `live_buffers`).
    #[prost(int64, optional, tag = "10")]
    pub live_buffers: Option<i64>,
}

/// A step boundary seen by the Python agent.
#[derive(Clone, PartialEq, Message)]
pub struct Step {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    /// What marked it: `torch_xla.sync`, `mark_step`, `optimizer.step`, `jit_loop`, `user`.
    #[prost(string, tag = "3")]
    pub marker: String,
    #[prost(uint64, tag = "4")]
    pub number: u64,
}

/// A wall-clock ↔ monotonic anchor.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Clock {
    #[prost(uint64, tag = "1")]
    pub mono_ns: u64,
    #[prost(uint64, tag = "2")]
    pub wall_ns: u64,
}

/// A non-NULL `PJRT_Error` returned by a hooked call, forwarded unchanged to the caller.
#[derive(Clone, PartialEq, Message)]
pub struct ErrorEvent {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    /// The PJRT call that returned it.
    #[prost(string, tag = "3")]
    pub api: String,
    #[prost(int32, tag = "4")]
    pub code: i32,
    #[prost(string, tag = "5")]
    pub message: String,
    #[prost(uint32, tag = "6")]
    pub stack: StackId,
}

/// Something the collector itself did or could not do.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Note {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    #[prost(uint32, tag = "2")]
    pub thread: u32,
    /// Stable machine-readable topic, e.g. `abi_bridge`, `stack_unavailable`, `memory_stats_unimplemented`.
    #[prost(string, tag = "3")]
    pub topic: String,
    #[prost(string, tag = "4")]
    pub message: String,
}

/// Events the collector had to drop because its queue was full.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct Dropped {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    /// Dropped since the previous `Dropped` record.
    #[prost(uint64, tag = "2")]
    pub count: u64,
    /// Dropped since the start of the run.
    #[prost(uint64, tag = "3")]
    pub total: u64,
}

/// Written by a collector that shut down cleanly; a trace without it was cut (or is still being written).
#[derive(Clone, PartialEq, Eq, Message)]
pub struct End {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    /// Events written to this trace.
    #[prost(uint64, tag = "2")]
    pub events_written: u64,
    /// Events dropped over the whole run.
    #[prost(uint64, tag = "3")]
    pub dropped_total: u64,
}

/// A count of records of one kind (by its [`RecordKind::name`]).
#[derive(Clone, PartialEq, Eq, Message)]
pub struct KindCount {
    #[prost(string, tag = "1")]
    pub kind: String,
    #[prost(uint64, tag = "2")]
    pub count: u64,
}

/// Recording stopped before the process ended (the trace file hit the file size limit, the disk
/// filled up, the writer failed): nothing after `t_ns` is recorded, the process kept running.
/// Written when recording stops (`not_recorded` empty) and again at exit, just before `End`, with
/// what was not recorded; a reader takes the last one.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct RecordingStopped {
    #[prost(uint64, tag = "1")]
    pub t_ns: u64,
    /// Why, in words (`file size limit (ulimit -f) of 262144 bytes reached`, an OS error).
    #[prost(string, tag = "2")]
    pub reason: String,
    /// The file size limit (`RLIMIT_FSIZE`) when one applied, else 0.
    #[prost(uint64, tag = "3")]
    pub limit_bytes: u64,
    /// Size of the trace file up to the first of these records.
    #[prost(uint64, tag = "4")]
    pub bytes_written: u64,
    /// The events the collector saw after the stop and did not record, by kind (`"execute"`,
    /// …; `"dropped"` for those lost to a full queue). Empty in the record written at the stop.
    #[prost(message, repeated, tag = "5")]
    pub not_recorded: Vec<KindCount>,
    /// When the process exited (the record written at exit), else 0.
    #[prost(uint64, tag = "6")]
    pub exit_t_ns: u64,
}

/// Frame kind of a [`Segment`] record (format 1.1). Not a [`RecordKind`]: a segment marker is
/// consumed by the reader to split a merged file into per-host traces, never handed out as an
/// event.
pub const SEGMENT_KIND: u16 = 32;
/// The format minor that introduced segments: what a merged file's header says.
pub const SEGMENT_MINOR: u16 = 1;

/// Starts one host's part of a merged job trace (`tpuscope merge`): every frame from here to the
/// next `Segment` is that host's original trace, copied verbatim (its own manifest, string,
/// stack and blob ids, and monotonic times). `offset_ns` maps the host's monotonic times onto
/// the job timeline: `job_ns = t_ns + offset_ns` (wall-clock nanoseconds since the Unix epoch).
#[derive(Clone, PartialEq, Message)]
pub struct Segment {
    /// 0, 1, 2, … in file order.
    #[prost(uint32, tag = "1")]
    pub index: u32,
    #[prost(string, tag = "2")]
    pub host: String,
    #[prost(uint32, tag = "3")]
    pub process_index: u32,
    /// The job the merge put this host in (its manifest's, or one `merge` made up when the
    /// inputs carried none).
    #[prost(string, tag = "4")]
    pub job_id: String,
    #[prost(int64, tag = "5")]
    pub offset_ns: i64,
    /// How `offset_ns` was found: `clock_anchors` (median of wall − mono over the `Clock`
    /// records), `manifest_start` (the manifest's start pair) or `none` (offset 0).
    #[prost(string, tag = "6")]
    pub alignment: String,
    /// Clock anchors used.
    #[prost(uint32, tag = "7")]
    pub anchors: u32,
    /// Largest minus smallest wall − mono over the anchors: drift and jitter of the host's clocks
    /// during the run (0 with fewer than two anchors).
    #[prost(uint64, tag = "8")]
    pub spread_ns: u64,
    /// File name the segment came from.
    #[prost(string, tag = "9")]
    pub source: String,
    /// `complete`, `no_end_record` or `cut`: how the source trace ended.
    #[prost(string, tag = "10")]
    pub source_completeness: String,
    #[prost(uint32, tag = "11")]
    pub pid: u32,
    /// Bytes of the segment, this record's frame included: the next segment starts that far
    /// after this one, or the file ends there. 0: not said (merges before it was added, without
    /// a minor bump). What lets a reader find the segments without reading the frames between.
    #[prost(uint64, tag = "12")]
    pub len: u64,
}

impl Segment {
    /// The record's payload (what follows a frame header of kind [`SEGMENT_KIND`]).
    pub fn payload(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// The record's payload with [`Segment::len`] set for a segment whose frames after this
    /// one take `body` bytes (the length counts the record itself, whose size depends on it).
    pub fn payload_with_len(&mut self, body: u64) -> Vec<u8> {
        self.len = 0;
        loop {
            let payload = self.payload();
            let len = body + (crate::format::FRAME_HEADER_LEN + payload.len()) as u64;
            if self.len == len {
                return payload;
            }
            self.len = len;
        }
    }
}

/// The kind number of a record, as written in its frame header.
///
/// Numbers are never reused. Readers skip kinds they do not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum RecordKind {
    Manifest = 1,
    StringDef = 2,
    StackDef = 3,
    Blob = 4,
    Client = 10,
    Compile = 16,
    Load = 17,
    Execute = 18,
    ExecuteComplete = 19,
    ExecuteSummary = 20,
    Transfer = 21,
    Sync = 22,
    CacheStore = 23,
    CacheLoad = 24,
    Memory = 25,
    Step = 26,
    Clock = 27,
    Error = 28,
    Note = 29,
    Dropped = 30,
    End = 31,
    /// Format 1.0 readers skip it (unknown kind). 32 is [`SEGMENT_KIND`].
    RecordingStopped = 33,
    /// Format 1.0 readers skip it (unknown kind).
    ExecutableSeen = 34,
}

impl RecordKind {
    /// Maps a frame's kind number; `None` for kinds this reader does not know.
    pub fn from_u16(v: u16) -> Option<Self> {
        use RecordKind::*;
        Some(match v {
            1 => Manifest,
            2 => StringDef,
            3 => StackDef,
            4 => Blob,
            10 => Client,
            16 => Compile,
            17 => Load,
            18 => Execute,
            19 => ExecuteComplete,
            20 => ExecuteSummary,
            21 => Transfer,
            22 => Sync,
            23 => CacheStore,
            24 => CacheLoad,
            25 => Memory,
            26 => Step,
            27 => Clock,
            28 => Error,
            29 => Note,
            30 => Dropped,
            31 => End,
            33 => RecordingStopped,
            34 => ExecutableSeen,
            _ => return None,
        })
    }

    /// The `"kind"` name used by `tpuscope dump --json`.
    pub fn name(self) -> &'static str {
        use RecordKind::*;
        match self {
            Manifest => "manifest",
            StringDef => "string",
            StackDef => "stack",
            Blob => "blob",
            Client => "client",
            Compile => "compile",
            Load => "load",
            Execute => "execute",
            ExecuteComplete => "execute_complete",
            ExecuteSummary => "execute_summary",
            Transfer => "transfer",
            Sync => "sync",
            CacheStore => "cache_store",
            CacheLoad => "cache_load",
            Memory => "memory",
            Step => "step",
            Clock => "clock",
            Error => "error",
            Note => "note",
            Dropped => "dropped",
            End => "end",
            RecordingStopped => "recording_stopped",
            ExecutableSeen => "executable_seen",
        }
    }
}

/// One decoded record.
///
/// The large messages are boxed so a `Record` stays small (about 100 bytes): the collector queues
/// records by value, and the common ones (executes, syncs) are small.
#[derive(Clone, PartialEq)]
pub enum Record {
    Manifest(Box<Manifest>),
    StringDef(StringDef),
    StackDef(StackDef),
    Blob(Blob),
    Client(Box<Client>),
    Compile(Box<Compile>),
    Load(Box<Load>),
    Execute(Execute),
    ExecuteComplete(ExecuteComplete),
    ExecuteSummary(ExecuteSummary),
    Transfer(Box<Transfer>),
    Sync(Sync),
    CacheStore(Box<CacheStore>),
    CacheLoad(Box<CacheLoad>),
    Memory(Box<Memory>),
    Step(Step),
    Clock(Clock),
    Error(ErrorEvent),
    Note(Note),
    Dropped(Dropped),
    End(End),
    RecordingStopped(RecordingStopped),
    ExecutableSeen(Box<ExecutableSeen>),
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Manifest(_) => RecordKind::Manifest,
            Record::StringDef(_) => RecordKind::StringDef,
            Record::StackDef(_) => RecordKind::StackDef,
            Record::Blob(_) => RecordKind::Blob,
            Record::Client(_) => RecordKind::Client,
            Record::Compile(_) => RecordKind::Compile,
            Record::Load(_) => RecordKind::Load,
            Record::Execute(_) => RecordKind::Execute,
            Record::ExecuteComplete(_) => RecordKind::ExecuteComplete,
            Record::ExecuteSummary(_) => RecordKind::ExecuteSummary,
            Record::Transfer(_) => RecordKind::Transfer,
            Record::Sync(_) => RecordKind::Sync,
            Record::CacheStore(_) => RecordKind::CacheStore,
            Record::CacheLoad(_) => RecordKind::CacheLoad,
            Record::Memory(_) => RecordKind::Memory,
            Record::Step(_) => RecordKind::Step,
            Record::Clock(_) => RecordKind::Clock,
            Record::Error(_) => RecordKind::Error,
            Record::Note(_) => RecordKind::Note,
            Record::Dropped(_) => RecordKind::Dropped,
            Record::End(_) => RecordKind::End,
            Record::RecordingStopped(_) => RecordKind::RecordingStopped,
            Record::ExecutableSeen(_) => RecordKind::ExecutableSeen,
        }
    }

    /// Encodes the payload (without frame header).
    pub fn encode_payload(&self, buf: &mut Vec<u8>) {
        // Encoding into a Vec cannot run out of capacity, so the Result carries no information.
        let _ = match self {
            Record::Manifest(m) => m.encode(buf),
            Record::StringDef(m) => m.encode(buf),
            Record::StackDef(m) => m.encode(buf),
            Record::Blob(m) => m.encode(buf),
            Record::Client(m) => m.encode(buf),
            Record::Compile(m) => m.encode(buf),
            Record::Load(m) => m.encode(buf),
            Record::Execute(m) => m.encode(buf),
            Record::ExecuteComplete(m) => m.encode(buf),
            Record::ExecuteSummary(m) => m.encode(buf),
            Record::Transfer(m) => m.encode(buf),
            Record::Sync(m) => m.encode(buf),
            Record::CacheStore(m) => m.encode(buf),
            Record::CacheLoad(m) => m.encode(buf),
            Record::Memory(m) => m.encode(buf),
            Record::Step(m) => m.encode(buf),
            Record::Clock(m) => m.encode(buf),
            Record::Error(m) => m.encode(buf),
            Record::Note(m) => m.encode(buf),
            Record::Dropped(m) => m.encode(buf),
            Record::End(m) => m.encode(buf),
            Record::RecordingStopped(m) => m.encode(buf),
            Record::ExecutableSeen(m) => m.encode(buf),
        };
    }

    /// Decodes a payload of a known kind: the records a long trace is made of by
    /// [`crate::wire`]'s decoders when they take them, everything else by prost (the same result).
    pub fn decode_payload(kind: RecordKind, payload: &[u8]) -> Result<Record, prost::DecodeError> {
        let fast = match kind {
            RecordKind::ExecuteComplete => {
                crate::wire::execute_complete(payload).map(Record::ExecuteComplete)
            }
            RecordKind::Execute => crate::wire::execute(payload).map(Record::Execute),
            RecordKind::Transfer => {
                crate::wire::transfer(payload).map(|t| Record::Transfer(Box::new(t)))
            }
            RecordKind::Memory => crate::wire::memory(payload).map(|m| Record::Memory(Box::new(m))),
            RecordKind::Step => crate::wire::step(payload).map(Record::Step),
            _ => None,
        };
        match fast {
            Some(r) => Ok(r),
            None => Self::decode_payload_prost(kind, payload),
        }
    }

    /// Decodes a payload of a known kind with prost.
    pub(crate) fn decode_payload_prost(
        kind: RecordKind,
        payload: &[u8],
    ) -> Result<Record, prost::DecodeError> {
        Ok(match kind {
            RecordKind::Manifest => Record::Manifest(Box::new(Manifest::decode(payload)?)),
            RecordKind::StringDef => Record::StringDef(StringDef::decode(payload)?),
            RecordKind::StackDef => Record::StackDef(StackDef::decode(payload)?),
            RecordKind::Blob => Record::Blob(Blob::decode(payload)?),
            RecordKind::Client => Record::Client(Box::new(Client::decode(payload)?)),
            RecordKind::Compile => Record::Compile(Box::new(Compile::decode(payload)?)),
            RecordKind::Load => Record::Load(Box::new(Load::decode(payload)?)),
            RecordKind::Execute => Record::Execute(Execute::decode(payload)?),
            RecordKind::ExecuteComplete => {
                Record::ExecuteComplete(ExecuteComplete::decode(payload)?)
            }
            RecordKind::ExecuteSummary => Record::ExecuteSummary(ExecuteSummary::decode(payload)?),
            RecordKind::Transfer => Record::Transfer(Box::new(Transfer::decode(payload)?)),
            RecordKind::Sync => Record::Sync(Sync::decode(payload)?),
            RecordKind::CacheStore => Record::CacheStore(Box::new(CacheStore::decode(payload)?)),
            RecordKind::CacheLoad => Record::CacheLoad(Box::new(CacheLoad::decode(payload)?)),
            RecordKind::Memory => Record::Memory(Box::new(Memory::decode(payload)?)),
            RecordKind::Step => Record::Step(Step::decode(payload)?),
            RecordKind::Clock => Record::Clock(Clock::decode(payload)?),
            RecordKind::Error => Record::Error(ErrorEvent::decode(payload)?),
            RecordKind::Note => Record::Note(Note::decode(payload)?),
            RecordKind::Dropped => Record::Dropped(Dropped::decode(payload)?),
            RecordKind::End => Record::End(End::decode(payload)?),
            RecordKind::RecordingStopped => {
                Record::RecordingStopped(RecordingStopped::decode(payload)?)
            }
            RecordKind::ExecutableSeen => {
                Record::ExecutableSeen(Box::new(ExecutableSeen::decode(payload)?))
            }
        })
    }

    /// Monotonic time of the record, when it has one.
    pub fn t_ns(&self) -> Option<u64> {
        Some(match self {
            Record::Manifest(m) => m.start_mono_ns,
            Record::StringDef(_) | Record::StackDef(_) | Record::Blob(_) => return None,
            Record::Client(m) => m.t_ns,
            Record::Compile(m) => m.t_ns,
            Record::Load(m) => m.t_ns,
            Record::Execute(m) => m.t_ns,
            Record::ExecuteComplete(m) => m.t_ns,
            Record::ExecuteSummary(m) => m.t_start_ns,
            Record::Transfer(m) => m.t_ns,
            Record::Sync(m) => m.t_ns,
            Record::CacheStore(m) => m.t_ns,
            Record::CacheLoad(m) => m.t_ns,
            Record::Memory(m) => m.t_ns,
            Record::Step(m) => m.t_ns,
            Record::Clock(m) => m.mono_ns,
            Record::Error(m) => m.t_ns,
            Record::Note(m) => m.t_ns,
            Record::Dropped(m) => m.t_ns,
            Record::End(m) => m.t_ns,
            Record::RecordingStopped(m) => m.t_ns,
            Record::ExecutableSeen(m) => m.t_ns,
        })
    }

    /// How long the record's call took: 0 for records that are instants.
    pub fn dur_ns(&self) -> u64 {
        match self {
            Record::Compile(c) => c.dur_ns,
            Record::Load(l) => l.dur_ns,
            Record::CacheLoad(l) => l.dur_ns,
            Record::Execute(e) => e.dur_ns,
            Record::Transfer(t) => t.dur_ns,
            Record::Sync(s) => s.dur_ns,
            _ => 0,
        }
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Record::Manifest(m) => m.fmt(f),
            Record::StringDef(m) => m.fmt(f),
            Record::StackDef(m) => m.fmt(f),
            Record::Blob(m) => f
                .debug_struct("Blob")
                .field("hash", &m.hash)
                .field("role", &m.role)
                .field("format", &m.format)
                .field("len", &m.data.len())
                .finish(),
            Record::Client(m) => m.fmt(f),
            Record::Compile(m) => m.fmt(f),
            Record::Load(m) => m.fmt(f),
            Record::Execute(m) => m.fmt(f),
            Record::ExecuteComplete(m) => m.fmt(f),
            Record::ExecuteSummary(m) => m.fmt(f),
            Record::Transfer(m) => m.fmt(f),
            Record::Sync(m) => m.fmt(f),
            Record::CacheStore(m) => m.fmt(f),
            Record::CacheLoad(m) => m.fmt(f),
            Record::Memory(m) => m.fmt(f),
            Record::Step(m) => m.fmt(f),
            Record::Clock(m) => m.fmt(f),
            Record::Error(m) => m.fmt(f),
            Record::Note(m) => m.fmt(f),
            Record::Dropped(m) => m.fmt(f),
            Record::End(m) => m.fmt(f),
            Record::RecordingStopped(m) => m.fmt(f),
            Record::ExecutableSeen(m) => m.fmt(f),
        }
    }
}
