//! A read trace's tables and digest as bytes, and back: what `tpuscope report` keeps in its
//! cache so that a second look at a long trace skips reading it (the read is most of the cost:
//! ~1,300 instructions an event, the analyses ~400).
//!
//! Only what a finished read holds is written (tables, end, counts, the digest): in varints,
//! times as differences from the one before, but the launch table as it lies in memory (28
//! bytes a launch, read back by a copy: only this build reads it). Each read (a merged file's
//! host) is followed by its length and an XXH3 of its bytes, so that one read can be found
//! from the end ([`index`]) and checked alone ([`decode_part`]): a job's hosts are read back
//! one at a time, on all cores, never all at once. The bytes end with an XXH3 of what comes
//! before; [`decode`] checks it and every length, and gives `None` for anything it did not
//! write (a cache is never trusted: the caller reads the trace again).

use prost::Message;
use prost::encoding::encode_varint;
use tpuscope_core::Trace;
use tpuscope_core::event::{Blob, Client, End, Manifest, Record, RecordKind, Segment, StackDef};
use tpuscope_core::reader::{Completeness, Damage, Header};

use std::sync::Arc;

use crate::column::Spill;
use crate::digest::Digest;
use crate::hbm::{MemorySample, MemorySeries};

/// Changes whenever what is written changes: bytes of another version are not read.
const VERSION: u64 = 3;

/// What follows each read: its length and the XXH3 of its bytes, little-endian.
const TRAILER: usize = 16;

/// Writes the bytes of reads to `out` as they are made (a long run's are tens of MB): each
/// trace (its tables, end, counts, damage and completeness; its events are in the digest) with
/// its digest.
pub fn write<'a, W: std::io::Write>(
    reads: impl ExactSizeIterator<Item = (&'a Trace, &'a Digest)>,
    out: W,
) -> std::io::Result<()> {
    let mut e = Enc(Summed::new(out));
    e.0.bytes(&head(reads.len()));
    for (t, d) in reads {
        part(&mut e, t, d);
    }
    e.0.finish().map(drop)
}

/// One read, then its trailer (length and sum).
fn part<W: std::io::Write>(e: &mut Enc<W>, t: &Trace, d: &Digest) {
    e.0.start_part();
    trace(e, t);
    digest(e, d);
    let (len, sum) = e.0.end_part();
    e.0.bytes(&len.to_le_bytes());
    e.0.bytes(&sum.to_le_bytes());
}

/// What [`write`] writes before the reads, for `runs` of them: then each one's
/// [`run_bytes`], in order, and the sum of all (a [`Summed`] they go through). The way to
/// write a job's hosts as each is read, without holding them.
pub fn head(runs: usize) -> Vec<u8> {
    let mut b = Vec::new();
    encode_varint(VERSION, &mut b);
    encode_varint(runs as u64, &mut b);
    b
}

/// One read's bytes (and its trailer), as [`write`] writes them.
pub fn run_bytes(t: &Trace, d: &Digest) -> Vec<u8> {
    let mut e = Enc(Summed::new(Vec::new()));
    part(&mut e, t, d);
    e.0.unsummed()
}

/// What [`write`] wrote; `None` for any other bytes (another version, a cut or changed file).
/// The digests' old launches and batches go to `spill` where one is given (as when a trace is
/// read: [`crate::digest::DigestBuilder::spilling`]).
pub fn decode(bytes: &[u8], spill: Option<&Arc<dyn Spill>>) -> Option<Vec<(Trace, Digest)>> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if xxhash_rust::xxh3::xxh3_64(body).to_le_bytes() != *sum {
        return None;
    }
    let parts = index(&mut std::io::Cursor::new(bytes), 0..bytes.len() as u64)?;
    parts
        .iter()
        .map(|p| {
            let at = usize::try_from(p.at.start).ok()?..usize::try_from(p.at.end).ok()?;
            // The sum of the whole covered these bytes: not summed again.
            read_part(bytes.get(at)?, spill)
        })
        .collect()
}

/// Where one read lies in what [`write`] wrote, and the XXH3 its bytes must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub at: std::ops::Range<u64>,
    pub sum: u64,
}

/// Where each read lies in the bytes [`write`] wrote, `at` in `src`, found from their
/// trailers, last first (a seek and 16 bytes a read, not the reads): `None` unless the head
/// says this version and the reads fill the bytes exactly. The sum of the whole is not read.
pub fn index(
    src: &mut (impl std::io::Read + std::io::Seek),
    at: std::ops::Range<u64>,
) -> Option<Vec<Part>> {
    use std::io::SeekFrom;
    // The head: two varints, at most 20 bytes.
    let mut head_bytes = [0u8; 20];
    let n_head = usize::try_from(at.end.checked_sub(at.start)?.min(20)).ok()?;
    src.seek(SeekFrom::Start(at.start)).ok()?;
    src.read_exact(head_bytes.get_mut(..n_head)?).ok()?;
    let mut d = Dec {
        b: head_bytes.get(..n_head)?,
    };
    if d.u()? != VERSION {
        return None;
    }
    let n = usize::try_from(d.u()?).ok()?;
    let first = at.start + (n_head - d.b.len()) as u64;
    // The last read ends before the sum of the whole.
    let mut end = at.end.checked_sub(8)?;
    let mut parts = Vec::new();
    for _ in 0..n {
        let trailer_at = end.checked_sub(TRAILER as u64)?;
        if trailer_at < first {
            return None;
        }
        let mut t = [0u8; TRAILER];
        src.seek(SeekFrom::Start(trailer_at)).ok()?;
        src.read_exact(&mut t).ok()?;
        let (len, sum) = t.split_at(8);
        let len = u64::from_le_bytes(len.try_into().ok()?);
        let sum = u64::from_le_bytes(sum.try_into().ok()?);
        let start = trailer_at.checked_sub(len)?;
        if start < first {
            return None;
        }
        parts.push(Part {
            at: start..trailer_at,
            sum,
        });
        end = start;
    }
    if end != first {
        return None;
    }
    parts.reverse();
    Some(parts)
}

/// One read of [`index`], from its bytes; `None` unless they are the ones written. `spill` as
/// [`decode`]'s.
pub fn decode_part(
    bytes: &[u8],
    sum: u64,
    spill: Option<&Arc<dyn Spill>>,
) -> Option<(Trace, Digest)> {
    if xxhash_rust::xxh3::xxh3_64(bytes) != sum {
        return None;
    }
    read_part(bytes, spill)
}

/// One read from bytes already checked.
fn read_part(bytes: &[u8], spill: Option<&Arc<dyn Spill>>) -> Option<(Trace, Digest)> {
    let mut d = Dec { b: bytes };
    let t = read_trace(&mut d)?;
    let g = read_digest(&mut d, spill)?;
    d.b.is_empty().then_some((t, g))
}

fn trace<W: std::io::Write>(e: &mut Enc<W>, t: &Trace) {
    e.u(u64::from(t.header.major));
    e.u(u64::from(t.header.minor));
    e.u(t.header.len as u64);
    e.msg(t.segment.as_ref());
    e.msg(t.manifest.as_ref());
    e.msg(t.client.as_ref());
    e.msg(t.end.as_ref());
    e.u(t.unknown_records);
    e.u(t.undecodable_records);
    e.u(t.damage.len() as u64);
    for d in &t.damage {
        e.u(d.offset);
        e.u(d.len);
    }
    match t.completeness {
        Completeness::Complete => e.u(0),
        Completeness::NoEndRecord { file_len } => {
            e.u(1);
            e.u(file_len);
        }
        Completeness::Cut { offset, file_len } => {
            e.u(2);
            e.u(offset);
            e.u(file_len);
        }
    }
    // Sorted: the same read gives the same bytes.
    let mut strings: Vec<_> = t.strings.iter().collect();
    strings.sort_unstable_by_key(|(id, _)| **id);
    e.u(strings.len() as u64);
    for (id, s) in strings {
        e.u(u64::from(*id));
        e.bytes(s.as_bytes());
    }
    let mut stacks: Vec<_> = t.stacks.iter().collect();
    stacks.sort_unstable_by_key(|(id, _)| **id);
    e.u(stacks.len() as u64);
    for (id, s) in stacks {
        e.u(u64::from(*id));
        e.msg(Some(s));
    }
    let mut blobs: Vec<_> = t.blobs.iter().collect();
    blobs.sort_unstable_by_key(|(id, _)| **id);
    e.u(blobs.len() as u64);
    for (id, b) in blobs {
        e.u(*id);
        e.msg(Some(b));
    }
}

fn read_trace(d: &mut Dec<'_>) -> Option<Trace> {
    let header = Header {
        major: u16::try_from(d.u()?).ok()?,
        minor: u16::try_from(d.u()?).ok()?,
        len: usize::try_from(d.u()?).ok()?,
    };
    let segment = d.msg::<Segment>()?;
    let manifest = d.msg::<Manifest>()?;
    let client = d.msg::<Client>()?;
    let end = d.msg::<End>()?;
    let unknown_records = d.u()?;
    let undecodable_records = d.u()?;
    let n = d.count()?;
    let mut damage = Vec::with_capacity(n);
    for _ in 0..n {
        damage.push(Damage {
            offset: d.u()?,
            len: d.u()?,
        });
    }
    let completeness = match d.u()? {
        0 => Completeness::Complete,
        1 => Completeness::NoEndRecord { file_len: d.u()? },
        2 => Completeness::Cut {
            offset: d.u()?,
            file_len: d.u()?,
        },
        _ => return None,
    };
    let n = d.count()?;
    let mut strings = std::collections::HashMap::with_capacity(n);
    for _ in 0..n {
        let id = u32::try_from(d.u()?).ok()?;
        let s = std::str::from_utf8(d.bytes()?).ok()?;
        strings.insert(id, s.to_string());
    }
    let n = d.count()?;
    let mut stacks = std::collections::HashMap::with_capacity(n);
    for _ in 0..n {
        let id = u32::try_from(d.u()?).ok()?;
        stacks.insert(id, d.msg::<StackDef>()??);
    }
    let n = d.count()?;
    let mut blobs = std::collections::HashMap::with_capacity(n);
    for _ in 0..n {
        let id = d.u()?;
        blobs.insert(id, d.msg::<Blob>()??);
    }
    Some(Trace {
        header,
        manifest,
        client,
        strings,
        stacks,
        blobs,
        events: Vec::new(),
        end,
        damage,
        unknown_records,
        undecodable_records,
        completeness,
        segment,
    })
}

fn digest<W: std::io::Write>(e: &mut Enc<W>, d: &Digest) {
    e.u(d.events as u64);
    for t in [d.first_t, d.last_t, d.end_t, d.last_t_in_file] {
        e.opt(t);
    }

    // As it lies: the bytes are read back by this same build only.
    e.u(d.launches.raw_len() as u64);
    d.launches.write_raw(&mut |b| e.raw(b));

    e.u(d.device_busy.len() as u64);
    for spans in &d.device_busy {
        e.u(spans.len() as u64);
        let mut at = 0u64;
        for &(start, end) in spans {
            e.i(start.wrapping_sub(at) as i64);
            e.u(end.wrapping_sub(start));
            at = end;
        }
    }

    e.u(d.shapes.len() as u64);
    for (dtype, dims) in &d.shapes {
        e.bytes(dtype.as_bytes());
        e.u(dims.len() as u64);
        dims.iter().for_each(|&x| e.i(x));
    }
    e.u(d.batch_count() as u64);
    let mut at = 0u64;
    for (t, shape) in d.batches() {
        e.i(t.wrapping_sub(at) as i64);
        e.u(u64::from(shape));
        at = t;
    }

    e.u(d.memory.by_origin.len() as u64);
    for (&(device, origin), (s, events)) in &d.memory.by_origin {
        e.i(i64::from(device));
        e.i(i64::from(origin));
        e.u(s.run as u64);
        e.i(i64::from(s.device));
        e.u(u64::from(s.reported));
        e.opt(s.limit.map(|x| x as u64));
        e.opt(s.live_buffers.map(|x| x as u64));
        e.u(s.samples.len() as u64);
        let mut at = 0u64;
        for x in &s.samples {
            e.i(x.t_ns.wrapping_sub(at) as i64);
            e.i(x.in_use);
            e.i(x.peak.wrapping_sub(x.in_use));
            at = x.t_ns;
        }
        e.u(events.len() as u64);
        let mut at = 0u32;
        for &ev in events {
            e.i(i64::from(ev) - i64::from(at));
            at = ev;
        }
    }

    e.u(d.step_marks.len() as u64);
    for (name, times) in &d.step_marks {
        e.bytes(name.as_bytes());
        e.u(times.len() as u64);
        let mut at = 0u64;
        for &t in times {
            e.i(t.wrapping_sub(at) as i64);
            at = t;
        }
    }

    e.u(d.transfers_h2d);
    e.u(d.transfers_d2h);

    let given: Vec<_> = d.ids.given().collect();
    e.u(given.len() as u64);
    for (id, from, g) in given {
        e.u(id);
        e.u(from);
        e.u(g);
    }

    e.u(d.others.len() as u64);
    let mut at = 0u64;
    let mut payload = Vec::new();
    for (event, r) in &d.others {
        e.i((*event as u64).wrapping_sub(at) as i64);
        at = *event as u64;
        e.u(r.kind() as u64);
        payload.clear();
        r.encode_payload(&mut payload);
        e.bytes(&payload);
    }
}

fn read_digest(d: &mut Dec<'_>, spill: Option<&Arc<dyn Spill>>) -> Option<Digest> {
    let mut g = Digest::default();
    if let Some(s) = spill {
        g.spill_to(s);
    }
    g.events = usize::try_from(d.u()?).ok()?;
    g.first_t = d.opt()?;
    g.last_t = d.opt()?;
    g.end_t = d.opt()?;
    g.last_t_in_file = d.opt()?;

    g.launches = crate::launch_table::Launches::from_raw(d.bytes()?, spill)?;

    let n = d.count()?;
    for _ in 0..n {
        let m = d.count()?;
        let mut spans = Vec::with_capacity(m);
        let mut at = 0u64;
        for _ in 0..m {
            let start = at.wrapping_add(d.i()? as u64);
            let end = start.checked_add(d.u()?)?;
            spans.push((start, end));
            at = end;
        }
        g.device_busy.push(spans);
    }

    let n = d.count()?;
    for _ in 0..n {
        let dtype = std::str::from_utf8(d.bytes()?).ok()?.to_string();
        let m = d.count()?;
        let dims = (0..m).map(|_| d.i()).collect::<Option<Vec<i64>>>()?;
        g.shapes.push((dtype, dims));
    }
    let n = d.count()?;
    let mut at = 0u64;
    for _ in 0..n {
        at = at.wrapping_add(d.i()? as u64);
        let shape = u32::try_from(d.u()?).ok()?;
        if shape as usize >= g.shapes.len() {
            return None;
        }
        g.batch(at, shape);
    }

    let n = d.count()?;
    for _ in 0..n {
        let device = i32::try_from(d.i()?).ok()?;
        let origin = i32::try_from(d.i()?).ok()?;
        let run = usize::try_from(d.u()?).ok()?;
        let series_device = i32::try_from(d.i()?).ok()?;
        let reported = d.u()? != 0;
        let limit = d.opt()?.map(|x| x as i64);
        let live_buffers = d.opt()?.map(|x| x as i64);
        let m = d.count()?;
        let mut samples = Vec::with_capacity(m);
        let mut at = 0u64;
        for _ in 0..m {
            at = at.wrapping_add(d.i()? as u64);
            let in_use = d.i()?;
            let peak = in_use.wrapping_add(d.i()?);
            samples.push(MemorySample {
                t_ns: at,
                in_use,
                peak,
            });
        }
        let m = d.count()?;
        let mut events = Vec::with_capacity(m);
        let mut ev = 0i64;
        for _ in 0..m {
            ev = ev.checked_add(d.i()?)?;
            events.push(u32::try_from(ev).ok()?);
        }
        let s = MemorySeries {
            run,
            device: series_device,
            reported,
            samples,
            limit,
            live_buffers,
        };
        g.memory.by_origin.insert((device, origin), (s, events));
    }

    let n = d.count()?;
    for _ in 0..n {
        let name = std::str::from_utf8(d.bytes()?).ok()?.to_string();
        let m = d.count()?;
        let mut times = Vec::with_capacity(m);
        let mut at = 0u64;
        for _ in 0..m {
            at = at.wrapping_add(d.i()? as u64);
            times.push(at);
        }
        g.step_marks.push((name, times));
    }

    g.transfers_h2d = d.u()?;
    g.transfers_d2h = d.u()?;

    let n = d.count()?;
    let given = (0..n)
        .map(|_| Some((d.u()?, d.u()?, d.u()?)))
        .collect::<Option<Vec<_>>>()?;
    g.ids = crate::executable_ids::ExecutableIds::from_given(given);

    let n = d.count()?;
    g.others.reserve(n);
    let mut at = 0u64;
    for _ in 0..n {
        at = at.wrapping_add(d.i()? as u64);
        let kind = RecordKind::from_u16(u16::try_from(d.u()?).ok()?)?;
        let r = Record::decode_payload(kind, d.bytes()?).ok()?;
        g.others.push((usize::try_from(at).ok()?, r));
    }
    Some(g)
}

/// Bytes past which [`Summed`] hands what it made to its output.
const FLUSH_AT: usize = 1 << 20;

/// A buffered writer that sums what goes through it (XXH3) and ends with that sum: what the
/// cache of reads is written through (here and in the window's part, `gui::kept`). A failed
/// write is kept, nothing is written after it, and [`Summed::finish`] returns it: the writers
/// push without a `?` at every word.
pub struct Summed<W> {
    buf: Vec<u8>,
    out: W,
    sum: xxhash_rust::xxh3::Xxh3,
    failed: Option<std::io::Error>,
    /// The part being written ([`Summed::start_part`]): where it starts in `buf`, how much of
    /// it went out before, and the sum of that.
    part: Option<(usize, u64, xxhash_rust::xxh3::Xxh3)>,
}

impl<W: std::io::Write> Summed<W> {
    pub fn new(out: W) -> Summed<W> {
        Summed {
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            out,
            sum: xxhash_rust::xxh3::Xxh3::new(),
            failed: None,
            part: None,
        }
    }

    /// Starts a part: what goes through from here to [`Summed::end_part`] is also summed alone.
    fn start_part(&mut self) {
        self.part = Some((self.buf.len(), 0, xxhash_rust::xxh3::Xxh3::new()));
    }

    /// The length and the sum of what went through since [`Summed::start_part`].
    fn end_part(&mut self) -> (u64, u64) {
        let Some((from, len, mut sum)) = self.part.take() else {
            return (0, 0);
        };
        let rest = self.buf.get(from..).unwrap_or_default();
        sum.update(rest);
        (len + rest.len() as u64, sum.digest())
    }

    /// Bytes as they are.
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.flush_if_full();
    }

    fn flush_if_full(&mut self) {
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.sum.update(&self.buf);
        if let Some((from, len, sum)) = &mut self.part {
            let rest = self.buf.get(*from..).unwrap_or_default();
            sum.update(rest);
            *len += rest.len() as u64;
            *from = 0;
        }
        if self.failed.is_none()
            && let Err(err) = self.out.write_all(&self.buf)
        {
            self.failed = Some(err);
        }
        self.buf.clear();
    }

    /// What went through, without the sum: a part of what another `Summed` sums.
    fn unsummed(mut self) -> Vec<u8>
    where
        W: Into<Vec<u8>>,
    {
        let mut out: Vec<u8> = self.out.into();
        out.append(&mut self.buf);
        out
    }

    /// Writes what is buffered and the sum of all of it; gives the output back.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.flush();
        let sum = self.sum.digest();
        self.buf.extend_from_slice(&sum.to_le_bytes());
        if self.failed.is_none()
            && let Err(err) = self.out.write_all(&self.buf)
        {
            self.failed = Some(err);
        }
        self.failed.map_or(Ok(self.out), Err)
    }
}

/// [`Summed`] with the words the reads are written in.
struct Enc<W>(Summed<W>);

impl<W: std::io::Write> Enc<W> {
    fn u(&mut self, v: u64) {
        encode_varint(v, &mut self.0.buf);
        self.0.flush_if_full();
    }

    /// Zigzag: small differences either way take a byte or two.
    fn i(&mut self, v: i64) {
        self.u(((v << 1) ^ (v >> 63)) as u64);
    }

    fn opt(&mut self, v: Option<u64>) {
        match v {
            None => self.u(0),
            Some(v) => {
                self.u(1);
                self.u(v);
            }
        }
    }

    /// Bytes as they are, their length written before by the caller.
    fn raw(&mut self, b: &[u8]) {
        self.0.bytes(b);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.u(b.len() as u64);
        self.raw(b);
    }

    fn msg<M: Message>(&mut self, m: Option<&M>) {
        match m {
            None => self.u(0),
            Some(m) => {
                self.u(1);
                self.u(m.encoded_len() as u64);
                m.encode_raw(&mut self.0.buf);
                self.0.flush_if_full();
            }
        }
    }
}

struct Dec<'a> {
    b: &'a [u8],
}

impl<'a> Dec<'a> {
    #[inline(always)]
    fn u(&mut self) -> Option<u64> {
        tpuscope_core::wire::take_varint(&mut self.b)
    }

    #[inline(always)]
    fn i(&mut self) -> Option<i64> {
        let v = self.u()?;
        Some((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// A count of things that take at least a byte each: never more than the bytes left (a
    /// forged count allocates nothing).
    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.u()?)
            .ok()
            .filter(|&n| n <= self.b.len())
    }

    fn opt(&mut self) -> Option<Option<u64>> {
        match self.u()? {
            0 => Some(None),
            1 => self.u().map(Some),
            _ => None,
        }
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u()?).ok()?;
        let (b, rest) = self.b.split_at_checked(n)?;
        self.b = rest;
        Some(b)
    }

    /// `Some(None)` for an absent message; `None` for bytes that are not one.
    fn msg<M: Message + Default>(&mut self) -> Option<Option<M>> {
        match self.u()? {
            0 => Some(None),
            1 => M::decode(self.bytes()?).ok().map(Some),
            _ => None,
        }
    }
}
