//! Writes the fuzz targets' seed corpora from `sample_traces/` (run by `scripts/fuzz.sh`; the
//! seeds are generated, never committed).
//!
//! `tpuscope-fuzz-seedgen SAMPLE_TRACES_DIR OUT_DIR` writes `OUT_DIR/{reader,live_stream,hlo,
//! torch_trace}/`:
//! - reader: every sample trace whole, cut at a few offsets (inside frames and on boundaries), its
//!   first frames only, and without its blobs (small inputs of every record kind fuzz faster);
//! - live_stream: the same streams behind the target's two chunking bytes, in each chunking mode;
//! - hlo: the HLO blobs of `sample_traces/hlo/` and every program and optimized HLO stored in the
//!   traces, behind the target's format and reference bytes;
//! - torch_trace: the TORCH_TRACE logs, alone and together (NUL between files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tpuscope_core::Record;
use tpuscope_core::event::RecordKind;
use tpuscope_core::format::{self, FRAME_HEADER_LEN};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Files under `dir` (recursively) whose name ends with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(files(&p, suffix)?);
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Byte ranges of the whole frames of a trace, in order (stops at the first bad one).
fn frames(bytes: &[u8]) -> Vec<(usize, usize, u16)> {
    let mut out = Vec::new();
    let Ok(h) = tpuscope_core::reader::parse_header(bytes) else {
        return out;
    };
    let mut pos = h.len;
    while let Some(fh) = format::parse_frame_header(&bytes[pos..]) {
        let end = pos + FRAME_HEADER_LEN + fh.len as usize;
        if end > bytes.len() {
            break;
        }
        out.push((pos, end, fh.kind));
        pos = end;
    }
    out
}

struct Out {
    dir: PathBuf,
    written: usize,
}

impl Out {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) -> Result<()> {
        let dir = self.dir.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        self.written += 1;
        Ok(())
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, samples, out_dir] = &args[..] else {
        return Err("usage: tpuscope-fuzz-seedgen SAMPLE_TRACES_DIR OUT_DIR".into());
    };
    let samples = Path::new(samples);
    let mut out = Out {
        dir: PathBuf::from(out_dir),
        written: 0,
    };

    // Traces: reader and live_stream seeds; their programs for the HLO target.
    let mut programs: BTreeMap<u64, (String, Vec<u8>)> = BTreeMap::new();
    for path in files(samples, ".tps")? {
        let bytes = std::fs::read(&path)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let fr = frames(&bytes);
        let mut streams: Vec<(String, Vec<u8>)> = vec![(stem.clone(), bytes.clone())];
        if let (Some(&(hs, _, _)), Some(&(_, last_end, _))) = (fr.first(), fr.last()) {
            // Cuts: inside the last frame, on a boundary in the middle, inside a middle frame.
            let (ms, me, _) = fr[fr.len() / 2];
            for (what, cut) in [
                ("cut-last", last_end - 1),
                ("cut-boundary", ms),
                ("cut-inside", ms + (me - ms) / 2),
            ] {
                streams.push((format!("{stem}.{what}"), bytes[..cut].to_vec()));
            }
            // The first frames (about 2 KB), and the whole trace without its blobs.
            let head_end = fr
                .iter()
                .map(|f| f.1)
                .take_while(|&e| e <= hs + 2048)
                .last()
                .unwrap_or(hs);
            streams.push((format!("{stem}.head"), bytes[..head_end].to_vec()));
            let mut thin = bytes[..hs].to_vec();
            for &(s, e, kind) in &fr {
                if kind != RecordKind::Blob as u16 {
                    thin.extend_from_slice(&bytes[s..e]);
                }
            }
            streams.push((format!("{stem}.no-blobs"), thin));
        }
        for (name, s) in &streams {
            out.put("reader", &format!("{name}.tps"), s)?;
            let modes: &[u8] = if s.len() <= 16 << 10 {
                &[0, 1, 2, 3]
            } else {
                &[1, 2]
            };
            for &m in modes {
                let mut live = vec![m | 0x10, 0x5e];
                live.extend_from_slice(s);
                out.put("live_stream", &format!("{name}.mode{m}.bin"), &live)?;
            }
        }
        // Programs stored in the trace, with the format the compile record gives them.
        let mut formats: BTreeMap<u64, String> = BTreeMap::new();
        let mut blobs: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for &(s, e, kind) in &fr {
            let Some(kind) = RecordKind::from_u16(kind) else {
                continue;
            };
            match Record::decode_payload(kind, &bytes[s + FRAME_HEADER_LEN..e]) {
                Ok(Record::Compile(c)) => {
                    formats.insert(c.program_hash, c.program_format.clone());
                    formats.insert(c.optimized_hash, c.optimized_format.clone());
                }
                Ok(Record::Blob(b)) => {
                    blobs.insert(b.hash, b.data);
                }
                _ => {}
            }
        }
        for (hash, data) in blobs {
            if let Some(f) = formats.get(&hash).filter(|f| !f.is_empty()) {
                programs.insert(hash, (f.clone(), data));
            }
        }
    }

    // HLO: the target's first byte is the format, the second the reference program.
    let selector = |format: &str| match format {
        "hlo" => Some(0u8),
        "hlo_with_config" => Some(1),
        "mlir" => Some(2),
        _ => None,
    };
    let mut hlo_inputs: Vec<(String, u8, Vec<u8>)> = Vec::new();
    for path in files(&samples.join("hlo"), ".pb")? {
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let format = ["hlo_with_config", "hlo", "mlir"]
            .into_iter()
            .find(|f| name.contains(&format!(".{f}.")))
            .unwrap_or("hlo");
        if let Some(sel) = selector(format) {
            hlo_inputs.push((name, sel, std::fs::read(&path)?));
        }
    }
    // StableHLO bytecode is not decoded (one sample of it is enough).
    for (hash, (format, data)) in programs {
        if let Some(sel) = selector(&format).filter(|_| format != "mlir") {
            hlo_inputs.push((format!("{hash:016x}.{format}"), sel, data));
        }
    }
    for (i, (name, sel, data)) in hlo_inputs.iter().enumerate() {
        let mut input = vec![*sel, i as u8];
        input.extend_from_slice(data);
        out.put("hlo", &format!("{name}.bin"), &input)?;
    }

    // TORCH_TRACE logs, alone and all together.
    let logs = files(&samples.join("torch_trace"), ".log")?;
    let mut together = Vec::new();
    for (i, path) in logs.iter().enumerate() {
        let text = std::fs::read(path)?;
        if i > 0 {
            together.push(0);
        }
        together.extend_from_slice(&text);
        out.put("torch_trace", &format!("log{i}.log"), &text)?;
    }
    out.put("torch_trace", "all.log", &together)?;

    println!("seedgen: {} seeds in {}", out.written, out.dir.display());
    Ok(())
}
