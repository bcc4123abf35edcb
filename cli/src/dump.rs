//! `tpuscope dump`: every record of a trace, as JSON lines or as text.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};
use tpuscope_core::Trace;
use tpuscope_core::event::Record;
use tpuscope_core::json::{manifest_json, record_json};

use crate::summary::completeness_warning;

pub fn dump(path: &Path, as_json: bool) -> Result<()> {
    // A merged job file holds one trace per host: each is dumped after a line naming it.
    let traces =
        tpuscope_core::read_traces_file(path).with_context(|| format!("{}", path.display()))?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let result = traces.iter().try_for_each(|trace| {
        segment_line(trace, as_json, &mut out)?;
        if as_json {
            dump_json(trace, &mut out)
        } else {
            dump_text(trace, &mut out)
        }
    });
    match result.and_then(|()| out.flush()) {
        Ok(()) => {}
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e).context("cannot write to stdout"),
    }
    for trace in &traces {
        warn(path, trace);
    }
    Ok(())
}

/// The header of one host's part of a merged file (nothing for a plain trace).
fn segment_line(trace: &Trace, as_json: bool, out: &mut impl Write) -> io::Result<()> {
    let Some(s) = &trace.segment else {
        return Ok(());
    };
    if as_json {
        let v = serde_json::json!({
            "kind": "segment",
            "index": s.index,
            "host": s.host,
            "process_index": s.process_index,
            "pid": s.pid,
            "job_id": s.job_id,
            "offset_ns": s.offset_ns,
            "alignment": s.alignment,
            "anchors": s.anchors,
            "spread_ns": s.spread_ns,
            "source": s.source,
            "source_completeness": s.source_completeness,
        });
        writeln!(out, "{v}")
    } else {
        writeln!(
            out,
            "== segment {}: host {} process {} (from {}; job {}; clock offset {} ns by {})",
            s.index, s.host, s.process_index, s.source, s.job_id, s.offset_ns, s.alignment
        )
    }
}

fn warn(path: &Path, trace: &Trace) {
    if !trace.damage.is_empty() {
        let bytes: u64 = trace.damage.iter().map(|d| d.len).sum();
        eprintln!(
            "tpuscope: warning: {} damaged region(s), {bytes} bytes skipped (first at byte {})",
            trace.damage.len(),
            trace.damage.first().map(|d| d.offset).unwrap_or(0)
        );
    }
    if trace.unknown_records > 0 {
        eprintln!(
            "tpuscope: note: {} record(s) of kinds newer than this tpuscope were skipped",
            trace.unknown_records
        );
    }
    if let Some(w) = completeness_warning(path, trace) {
        eprintln!("tpuscope: {w}");
    }
}

fn dump_json(trace: &Trace, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "{}", manifest_json(trace))?;
    for r in &trace.events {
        writeln!(out, "{}", record_json(trace, r))?;
    }
    if let Some(e) = &trace.end {
        writeln!(out, "{}", record_json(trace, &Record::End(e.clone())))?;
    }
    Ok(())
}

fn ms(ns: u64) -> String {
    format!("{:.3}ms", ns as f64 / 1e6)
}

fn top_frame(trace: &Trace, stack: u32) -> String {
    trace
        .stacks
        .get(&stack)
        .and_then(|s| s.frames.first())
        .map(|f| {
            format!(
                "  at {}:{} {}",
                trace.string(f.file),
                f.line,
                trace.string(f.function)
            )
        })
        .unwrap_or_default()
}

fn dump_text(trace: &Trace, out: &mut impl Write) -> io::Result<()> {
    let t0 = trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .unwrap_or(0);
    if let Some(m) = &trace.manifest {
        writeln!(
            out,
            "trace of pid {} on {}: {}",
            m.pid,
            m.host,
            m.command_line.join(" ")
        )?;
        writeln!(
            out,
            "plugin {} (PJRT API {}.{}), role {}",
            m.plugin_path, m.pjrt_api_major, m.pjrt_api_minor, m.role
        )?;
        let versions: Vec<String> = m
            .package_versions
            .iter()
            .map(|kv| format!("{}=={}", kv.key, kv.value))
            .collect();
        if !versions.is_empty() {
            writeln!(out, "packages {}", versions.join(" "))?;
        }
    }
    for r in &trace.events {
        let t = r.t_ns().map(|t| t.saturating_sub(t0)).unwrap_or(0);
        let line = match r {
            Record::Client(c) => format!(
                "client {} {} ({} devices)",
                c.platform_name,
                c.platform_version,
                c.devices.len()
            ),
            Record::Compile(c) => format!(
                "compile {} {} {}B in {}{}{}",
                c.executable_name,
                c.program_format,
                c.program_size,
                ms(c.dur_ns),
                c.error
                    .as_ref()
                    .map(|e| format!(" FAILED: {}", e.message))
                    .unwrap_or_default(),
                top_frame(trace, c.stack)
            ),
            Record::Load(l) => format!("load {} in {}", l.executable_name, ms(l.dur_ns)),
            Record::Execute(e) => format!(
                "execute {:x} on {} device(s) [{}] dispatch {}",
                e.executable_id,
                e.num_devices,
                trace.string(e.arg_signature),
                ms(e.dur_ns)
            ),
            Record::ExecuteComplete(e) => {
                format!("execute #{} done on device {}", e.seq, e.device_index)
            }
            Record::ExecuteSummary(s) => format!(
                "executes of {:x}: {} in {}",
                s.executable_id,
                s.count,
                ms(s.total_dur_ns)
            ),
            Record::Transfer(x) => format!(
                "transfer {} {} {}{:?} {}B{} blocked {}{}",
                if x.direction == 1 { "h2d" } else { "d2h" },
                x.api,
                x.dtype,
                x.dims,
                x.bytes,
                if x.sync { " SYNC" } else { "" },
                ms(x.blocked_ns),
                top_frame(trace, x.stack)
            ),
            Record::Sync(s) => format!(
                "sync {} {}{}",
                s.reason,
                ms(s.dur_ns),
                top_frame(trace, s.stack)
            ),
            Record::CacheStore(c) => format!("cache store {} {}B", c.executable_name, c.bytes),
            Record::CacheLoad(c) => format!(
                "cache load {}B {}",
                c.bytes,
                if c.ok {
                    "ok".to_string()
                } else {
                    format!(
                        "FAILED: {}",
                        c.error.as_ref().map(|e| e.message.as_str()).unwrap_or("")
                    )
                }
            ),
            Record::Memory(m) => format!("memory device {} in use {}B", m.device, m.bytes_in_use),
            Record::Step(s) => format!("step {} ({})", s.number, s.marker),
            Record::Clock(_) => continue,
            Record::Error(e) => format!("error {} code {}: {}", e.api, e.code, e.message),
            Record::Note(n) => format!("note [{}] {}", n.topic, n.message),
            Record::Dropped(d) => format!("dropped {} events ({} total)", d.count, d.total),
            _ => continue,
        };
        writeln!(out, "{:>12} {line}", ms(t))?;
    }
    Ok(())
}
