//! JSON views of records, with interned strings and stacks resolved (used by `tpuscope dump --json`
//! and by anything that hands events to other tools).

use serde_json::{Map, Value, json};

use crate::event::*;
use crate::reader::Trace;

fn error_json(e: &Option<ErrorInfo>) -> Value {
    match e {
        Some(e) => json!({"code": e.code, "message": e.message}),
        None => Value::Null,
    }
}

/// The frames of a stack as `[{file, line, function}]`, innermost first; `null` for no stack.
pub fn stack_json(trace: &Trace, id: StackId) -> Value {
    if id == 0 {
        return Value::Null;
    }
    match trace.stacks.get(&id) {
        Some(s) => Value::Array(
            s.frames
                .iter()
                .map(|f| json!({"file": trace.string(f.file), "line": f.line, "function": trace.string(f.function)}))
                .collect(),
        ),
        None => Value::Null,
    }
}

fn kv_object(kvs: &[KeyValue]) -> Value {
    let mut m = Map::new();
    for kv in kvs {
        m.insert(kv.key.clone(), Value::String(kv.value.clone()));
    }
    Value::Object(m)
}

fn device_json(d: &DeviceInfo) -> Value {
    json!({"id": d.id, "kind": d.kind, "process_index": d.process_index, "addressable": d.addressable})
}

/// The manifest, with the first client's platform and devices folded in.
pub fn manifest_json(trace: &Trace) -> Value {
    let mut v = match &trace.manifest {
        Some(m) => json!({
            "kind": "manifest",
            "format_version": format!("{}.{}", trace.header.major, trace.header.minor),
            "pid": m.pid,
            "host": m.host,
            "start_wall_ns": m.start_wall_ns,
            "start_mono_ns": m.start_mono_ns,
            "command_line": m.command_line,
            "plugin_path": m.plugin_path,
            "pjrt_api_version": format!("{}.{}", m.pjrt_api_major, m.pjrt_api_minor),
            "plugin_attributes": kv_object(&m.plugin_attributes),
            "package_versions": kv_object(&m.package_versions),
            "environment": kv_object(&m.environment),
            "collector_version": m.collector_version,
            "job_id": m.job_id,
            "process_index": m.process_index,
            "frontend": m.frontend,
            "role": m.role,
        }),
        None => json!({"kind": "manifest", "missing": true}),
    };
    // Only attached traces know it (the others start with the process).
    if let (Some(m), Value::Object(o)) = (&trace.manifest, &mut v)
        && m.process_start_wall_ns != 0
    {
        o.insert(
            "process_start_wall_ns".into(),
            m.process_start_wall_ns.into(),
        );
    }
    if let (Some(m), Value::Object(o)) = (&trace.manifest, &mut v)
        && m.attach_owner_pid != 0
    {
        o.insert("attach_owner_pid".into(), m.attach_owner_pid.into());
    }
    if let (Some(c), Value::Object(o)) = (&trace.client, &mut v) {
        o.insert("platform_name".into(), c.platform_name.clone().into());
        o.insert("platform_version".into(), c.platform_version.clone().into());
        o.insert(
            "devices".into(),
            Value::Array(c.devices.iter().map(device_json).collect()),
        );
    }
    v
}

fn direction_name(d: i32) -> &'static str {
    match Direction::try_from(d) {
        Ok(Direction::H2d) => "h2d",
        Ok(Direction::D2h) => "d2h",
        _ => "unknown",
    }
}

fn origin_name(o: i32) -> &'static str {
    match MemoryOrigin::try_from(o) {
        Ok(MemoryOrigin::PluginStats) => "plugin_stats",
        Ok(MemoryOrigin::LiveBuffers) => "live_buffers",
        _ => "unknown",
    }
}

fn compiled_memory_json(m: &crate::event::CompiledMemoryStats) -> Value {
    json!({
        "generated_code_size": m.generated_code_size, "argument_size": m.argument_size,
        "output_size": m.output_size, "alias_size": m.alias_size, "temp_size": m.temp_size,
        "peak_memory": m.peak_memory,
    })
}

/// One event record as a JSON object with a `"kind"` field.
pub fn record_json(trace: &Trace, r: &Record) -> Value {
    let kind = r.kind().name();
    match r {
        Record::Manifest(_) => manifest_json(trace),
        Record::StringDef(s) => json!({"kind": kind, "id": s.id, "text": s.text}),
        Record::StackDef(s) => json!({"kind": kind, "id": s.id, "frames": stack_json(trace, s.id)}),
        Record::Blob(b) => {
            json!({"kind": kind, "hash": format!("{:016x}", b.hash), "role": b.role, "format": b.format, "bytes": b.data.len()})
        }
        Record::Client(c) => json!({
            "kind": kind, "t_ns": c.t_ns, "thread": c.thread, "dur_ns": c.dur_ns,
            "platform_name": c.platform_name, "platform_version": c.platform_version,
            "devices": c.devices.iter().map(device_json).collect::<Vec<_>>(),
            "create_options": kv_object(&c.create_options),
        }),
        Record::Compile(c) => json!({
            "kind": kind, "t_ns": c.t_ns, "thread": c.thread, "dur_ns": c.dur_ns, "api": c.api,
            "program_format": c.program_format, "program_size": c.program_size,
            "program_hash": format!("{:016x}", c.program_hash),
            "options_hash": format!("{:016x}", c.options_hash),
            "executable_name": c.executable_name, "fingerprint": c.fingerprint,
            "optimized_hash": format!("{:016x}", c.optimized_hash),
            "optimized_format": c.optimized_format,
            "optimized_stored": trace.blobs.contains_key(&c.optimized_hash),
            "memory": c.memory.as_ref().map(compiled_memory_json),
            "error": error_json(&c.error), "executable_id": format!("{:x}", c.executable_id),
            "num_outputs": c.num_outputs, "num_devices": c.num_devices,
            "stack": stack_json(trace, c.stack),
        }),
        Record::ExecutableSeen(x) => json!({
            "kind": kind, "t_ns": x.t_ns, "thread": x.thread, "dur_ns": x.dur_ns,
            "executable_id": format!("{:x}", x.executable_id),
            "executable_name": x.executable_name, "fingerprint": x.fingerprint,
            "optimized_hash": format!("{:016x}", x.optimized_hash),
            "optimized_format": x.optimized_format,
            "optimized_stored": trace.blobs.contains_key(&x.optimized_hash),
            "memory": x.memory.as_ref().map(compiled_memory_json),
            "num_outputs": x.num_outputs, "num_devices": x.num_devices,
        }),
        Record::Load(l) => json!({
            "kind": kind, "t_ns": l.t_ns, "thread": l.thread, "dur_ns": l.dur_ns,
            "executable_id": format!("{:x}", l.executable_id), "executable_name": l.executable_name,
            "error": error_json(&l.error), "stack": stack_json(trace, l.stack),
        }),
        Record::Execute(e) => json!({
            "kind": kind, "t_ns": e.t_ns, "thread": e.thread, "dur_ns": e.dur_ns,
            "executable_id": format!("{:x}", e.executable_id), "num_devices": e.num_devices,
            "num_args": e.num_args, "arg_signature": trace.string(e.arg_signature), "seq": e.seq,
            "completion_tracked": e.completion_tracked, "error": error_json(&e.error),
        }),
        Record::ExecuteComplete(e) => json!({
            "kind": kind, "t_ns": e.t_ns, "seq": e.seq, "device_index": e.device_index,
            "error": error_json(&e.error),
        }),
        Record::ExecuteSummary(s) => json!({
            "kind": kind, "t_start_ns": s.t_start_ns, "t_end_ns": s.t_end_ns,
            "executable_id": format!("{:x}", s.executable_id), "count": s.count,
            "total_dur_ns": s.total_dur_ns, "errors": s.errors,
        }),
        Record::Transfer(t) => json!({
            "kind": kind, "t_ns": t.t_ns, "thread": t.thread, "dur_ns": t.dur_ns,
            "direction": direction_name(t.direction), "api": t.api, "bytes": t.bytes,
            "dims": t.dims, "dtype": t.dtype, "device": t.device, "sync": t.sync,
            "blocked_ns": t.blocked_ns, "buffer_id": format!("{:x}", t.buffer_id),
            "error": error_json(&t.error), "stack": stack_json(trace, t.stack),
        }),
        Record::Sync(s) => json!({
            "kind": kind, "t_ns": s.t_ns, "thread": s.thread, "dur_ns": s.dur_ns,
            "reason": s.reason, "buffer_id": format!("{:x}", s.buffer_id),
            "stack": stack_json(trace, s.stack),
        }),
        Record::CacheStore(c) => json!({
            "kind": kind, "t_ns": c.t_ns, "thread": c.thread, "dur_ns": c.dur_ns,
            "executable_id": format!("{:x}", c.executable_id), "executable_name": c.executable_name,
            "bytes": c.bytes, "serialized_hash": format!("{:016x}", c.serialized_hash),
            "error": error_json(&c.error),
        }),
        Record::CacheLoad(c) => json!({
            "kind": kind, "t_ns": c.t_ns, "thread": c.thread, "dur_ns": c.dur_ns,
            "bytes": c.bytes, "ok": c.ok, "error": error_json(&c.error),
            "executable_id": format!("{:x}", c.executable_id), "executable_name": c.executable_name,
            "serialized_hash": format!("{:016x}", c.serialized_hash),
            "stack": stack_json(trace, c.stack),
        }),
        Record::Memory(m) => json!({
            "kind": kind, "t_ns": m.t_ns, "device": m.device, "origin": origin_name(m.origin),
            "bytes_in_use": m.bytes_in_use, "peak_bytes_in_use": m.peak_bytes_in_use,
            "bytes_limit": m.bytes_limit, "num_allocs": m.num_allocs,
            "largest_alloc_size": m.largest_alloc_size, "bytes_reserved": m.bytes_reserved,
            "live_buffers": m.live_buffers,
        }),
        Record::Step(s) => {
            json!({"kind": kind, "t_ns": s.t_ns, "thread": s.thread, "marker": s.marker, "number": s.number})
        }
        Record::Clock(c) => json!({"kind": kind, "mono_ns": c.mono_ns, "wall_ns": c.wall_ns}),
        Record::Error(e) => json!({
            "kind": kind, "t_ns": e.t_ns, "thread": e.thread, "api": e.api, "code": e.code,
            "message": e.message, "stack": stack_json(trace, e.stack),
        }),
        Record::Note(n) => {
            json!({"kind": kind, "t_ns": n.t_ns, "thread": n.thread, "topic": n.topic, "message": n.message})
        }
        Record::Dropped(d) => {
            json!({"kind": kind, "t_ns": d.t_ns, "count": d.count, "total": d.total})
        }
        Record::End(e) => {
            json!({"kind": kind, "t_ns": e.t_ns, "events_written": e.events_written, "dropped_total": e.dropped_total})
        }
        Record::RecordingStopped(s) => {
            let not_recorded: Map<String, Value> = s
                .not_recorded
                .iter()
                .map(|k| (k.kind.clone(), json!(k.count)))
                .collect();
            json!({
                "kind": kind, "t_ns": s.t_ns, "reason": s.reason, "limit_bytes": s.limit_bytes,
                "bytes_written": s.bytes_written, "not_recorded": not_recorded,
                "exit_t_ns": s.exit_t_ns,
            })
        }
    }
}
