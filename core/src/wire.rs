//! Hand-written decoders for the records a long trace is made of (executes, their completions,
//! transfers, memory samples, steps: 97 % of a training trace's records). prost's generic
//! decoding costs about a third of a report's CPU on such traces; these read the same bytes
//! into the same structs in one pass.
//!
//! They decode only the plain case: every field of the expected wire type, one-byte keys,
//! varints of at most ten bytes, no nested message (an error), nothing unknown. Anything else
//! gives `None` and the caller decodes with prost, so a record decodes to exactly what prost
//! gives (or prost's error) whichever path reads it; the tests hold the two paths equal.

use crate::event::{Execute, ExecuteComplete, Memory, Step, Transfer};

/// Wire types (protobuf encoding).
const VARINT: u8 = 0;
const LEN: u8 = 2;

/// A cursor over a message's bytes.
struct Wire<'a> {
    b: &'a [u8],
}

/// A varint from the front of `b` (prost's rule, read as the records' fields are), `b` moved
/// past it.
#[inline(always)]
pub fn take_varint(b: &mut &[u8]) -> Option<u64> {
    let mut w = Wire { b };
    let v = w.varint();
    *b = w.b;
    v
}

impl<'a> Wire<'a> {
    /// The next field's (tag, wire type); `None` at the end. A key over one byte (tags above
    /// 15) or tag 0 stops the fast path: `Some(None)`.
    #[inline]
    fn key(&mut self) -> Option<Option<(u8, u8)>> {
        let (&k, rest) = self.b.split_first()?;
        if k >= 0x80 || k >> 3 == 0 {
            return Some(None);
        }
        self.b = rest;
        Some(Some((k >> 3, k & 7)))
    }

    /// A varint of at most ten bytes, the tenth holding only bit 63 (prost's rule; negative
    /// signed values take ten).
    #[inline]
    fn varint(&mut self) -> Option<u64> {
        // Small values (threads, devices, counts) take one byte.
        if let Some((&byte, rest)) = self.b.split_first()
            && byte < 0x80
        {
            self.b = rest;
            return Some(u64::from(byte));
        }
        // Times take six to eight bytes: read eight bytes as one word and gather their 7-bit
        // groups at once, instead of a byte at a time.
        if let Some(head) = self.b.first_chunk::<8>() {
            let word = u64::from_le_bytes(*head);
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = (ends.trailing_zeros() / 8 + 1) as usize;
                let kept = word & (u64::MAX >> (64 - 8 * len));
                let mut v = kept & 0x7f7f_7f7f_7f7f_7f7f;
                v = (v & 0x007f_007f_007f_007f) | ((v & 0x7f00_7f00_7f00_7f00) >> 1);
                v = (v & 0x0000_3fff_0000_3fff) | ((v & 0x3fff_0000_3fff_0000) >> 2);
                v = (v & 0x0000_0000_0fff_ffff) | ((v & 0x0fff_ffff_0000_0000) >> 4);
                self.b = self.b.get(len..)?;
                return Some(v);
            }
        }
        let mut v = 0u64;
        for (i, &byte) in self.b.iter().enumerate().take(10) {
            if i == 9 && byte > 1 {
                return None;
            }
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.b = self.b.get(i + 1..)?;
                return Some(v);
            }
        }
        None
    }

    /// A length-delimited field's bytes.
    #[inline]
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        let (head, rest) = (self.b.get(..n)?, self.b.get(n..)?);
        self.b = rest;
        Some(head)
    }

    #[inline]
    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

/// Decodes the fields of one message: `field(wire, tag, wire_type)` reads one field and gives
/// `None` for one it does not take.
#[inline]
fn fields<'a>(
    payload: &'a [u8],
    mut field: impl FnMut(&mut Wire<'a>, u8, u8) -> Option<()>,
) -> Option<()> {
    let mut w = Wire { b: payload };
    while let Some(key) = w.key() {
        let (tag, wire_type) = key?;
        field(&mut w, tag, wire_type)?;
    }
    Some(())
}

/// A varint field of the expected wire type.
#[inline]
fn varint(w: &mut Wire<'_>, wire_type: u8) -> Option<u64> {
    (wire_type == VARINT).then_some(())?;
    w.varint()
}

/// A string field of the expected wire type.
#[inline]
fn string(w: &mut Wire<'_>, wire_type: u8) -> Option<String> {
    str_ref(w, wire_type).map(str::to_owned)
}

/// A string field of the expected wire type, borrowed.
#[inline]
fn str_ref<'a>(w: &mut Wire<'a>, wire_type: u8) -> Option<&'a str> {
    (wire_type == LEN).then_some(())?;
    w.str()
}

// Truncating casts below are protobuf's (and prost's) rule for 32-bit and signed varints.

pub(crate) fn execute(payload: &[u8]) -> Option<Execute> {
    let mut m = Execute::default();
    fields(payload, |w, tag, wt| {
        match tag {
            1 => m.t_ns = varint(w, wt)?,
            2 => m.thread = varint(w, wt)? as u32,
            3 => m.dur_ns = varint(w, wt)?,
            4 => m.executable_id = varint(w, wt)?,
            5 => m.num_devices = varint(w, wt)? as u32,
            6 => m.num_args = varint(w, wt)? as u32,
            7 => m.arg_signature = varint(w, wt)? as u32,
            8 => m.seq = varint(w, wt)?,
            10 => m.completion_tracked = varint(w, wt)? != 0,
            _ => return None,
        }
        Some(())
    })?;
    Some(m)
}

pub(crate) fn execute_complete(payload: &[u8]) -> Option<ExecuteComplete> {
    let mut m = ExecuteComplete::default();
    fields(payload, |w, tag, wt| {
        match tag {
            1 => m.t_ns = varint(w, wt)?,
            2 => m.seq = varint(w, wt)?,
            3 => m.device_index = varint(w, wt)? as u32,
            _ => return None,
        }
        Some(())
    })?;
    Some(m)
}

pub(crate) fn transfer(payload: &[u8]) -> Option<Transfer> {
    TransferRef::parse(payload).map(|t| t.to_owned())
}

/// A transfer read in place, borrowing its strings and dimensions from the payload: what a
/// digest needs of the most common record that allocates, without allocating. Only for a
/// plain payload (as the decoders here take them, with the dimensions in at most one packed
/// field, as every writer writes them): one it parses is one prost decodes to the same
/// `Transfer` (`to_owned`), and it has no error.
#[derive(Clone, Copy, Debug)]
pub struct TransferRef<'a> {
    pub t_ns: u64,
    pub thread: u32,
    pub dur_ns: u64,
    pub direction: i32,
    pub api: &'a str,
    pub bytes: u64,
    /// The packed dimensions (`dims()` reads them).
    dims: &'a [u8],
    pub dtype: &'a str,
    pub device: i32,
    pub sync: bool,
    pub blocked_ns: u64,
    pub stack: u32,
    pub buffer_id: u64,
}

impl<'a> TransferRef<'a> {
    /// `None` when the payload is not plain (then decode it with `Record::decode_payload`).
    pub fn parse(payload: &'a [u8]) -> Option<TransferRef<'a>> {
        let mut m = TransferRef {
            t_ns: 0,
            thread: 0,
            dur_ns: 0,
            direction: 0,
            api: "",
            bytes: 0,
            dims: &[],
            dtype: "",
            device: 0,
            sync: false,
            blocked_ns: 0,
            stack: 0,
            buffer_id: 0,
        };
        let mut dims_seen = false;
        fields(payload, |w, tag, wt| {
            match tag {
                1 => m.t_ns = varint(w, wt)?,
                2 => m.thread = varint(w, wt)? as u32,
                3 => m.dur_ns = varint(w, wt)?,
                4 => m.direction = varint(w, wt)? as i32,
                5 => m.api = str_ref(w, wt)?,
                6 => m.bytes = varint(w, wt)?,
                7 if wt == LEN && !dims_seen => {
                    dims_seen = true;
                    m.dims = w.bytes()?;
                    // Every varint ends inside the field.
                    let mut packed = Wire { b: m.dims };
                    while !packed.b.is_empty() {
                        packed.varint()?;
                    }
                }
                8 => m.dtype = str_ref(w, wt)?,
                9 => m.device = varint(w, wt)? as i32,
                10 => m.sync = varint(w, wt)? != 0,
                11 => m.blocked_ns = varint(w, wt)?,
                12 => m.stack = varint(w, wt)? as u32,
                13 => m.buffer_id = varint(w, wt)?,
                _ => return None,
            }
            Some(())
        })?;
        Some(m)
    }

    /// The dimensions.
    pub fn dims(&self) -> impl Iterator<Item = i64> + 'a {
        let mut packed = Wire { b: self.dims };
        // `parse` checked that they all read.
        std::iter::from_fn(move || packed.varint().map(|v| v as i64))
    }

    pub fn has_dims(&self) -> bool {
        !self.dims.is_empty()
    }

    /// The decoded record.
    pub fn to_owned(&self) -> Transfer {
        Transfer {
            t_ns: self.t_ns,
            thread: self.thread,
            dur_ns: self.dur_ns,
            direction: self.direction,
            api: self.api.to_owned(),
            bytes: self.bytes,
            dims: self.dims().collect(),
            dtype: self.dtype.to_owned(),
            device: self.device,
            sync: self.sync,
            blocked_ns: self.blocked_ns,
            stack: self.stack,
            buffer_id: self.buffer_id,
            error: None,
        }
    }
}

pub(crate) fn memory(payload: &[u8]) -> Option<Memory> {
    let mut m = Memory::default();
    fields(payload, |w, tag, wt| {
        match tag {
            1 => m.t_ns = varint(w, wt)?,
            2 => m.device = varint(w, wt)? as i32,
            3 => m.origin = varint(w, wt)? as i32,
            4 => m.bytes_in_use = varint(w, wt)? as i64,
            5 => m.peak_bytes_in_use = Some(varint(w, wt)? as i64),
            6 => m.bytes_limit = Some(varint(w, wt)? as i64),
            7 => m.num_allocs = Some(varint(w, wt)? as i64),
            8 => m.largest_alloc_size = Some(varint(w, wt)? as i64),
            9 => m.bytes_reserved = Some(varint(w, wt)? as i64),
            10 => m.live_buffers = Some(varint(w, wt)? as i64),
            _ => return None,
        }
        Some(())
    })?;
    Some(m)
}

pub(crate) fn step(payload: &[u8]) -> Option<Step> {
    let mut m = Step::default();
    fields(payload, |w, tag, wt| {
        match tag {
            1 => m.t_ns = varint(w, wt)?,
            2 => m.thread = varint(w, wt)? as u32,
            3 => m.marker = string(w, wt)?,
            4 => m.number = varint(w, wt)?,
            _ => return None,
        }
        Some(())
    })?;
    Some(m)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::event::{Direction, ErrorInfo, Record, RecordKind};

    /// Bytes of a field key.
    fn key(tag: u32, wt: u32, out: &mut Vec<u8>) {
        prost::encoding::encode_varint(u64::from(tag << 3 | wt), out);
    }

    /// Checks that the fast path, where it answers, answers exactly as prost.
    fn same(kind: RecordKind, bytes: &[u8]) -> bool {
        let fast = match kind {
            RecordKind::Execute => execute(bytes).map(Record::Execute),
            RecordKind::ExecuteComplete => execute_complete(bytes).map(Record::ExecuteComplete),
            RecordKind::Transfer => transfer(bytes).map(|t| Record::Transfer(Box::new(t))),
            RecordKind::Memory => memory(bytes).map(|t| Record::Memory(Box::new(t))),
            RecordKind::Step => step(bytes).map(Record::Step),
            _ => None,
        };
        let slow = Record::decode_payload_prost(kind, bytes);
        match (fast, slow) {
            (Some(f), Ok(s)) => {
                assert_eq!(f, s, "{kind:?} {bytes:?}");
                true
            }
            (Some(f), Err(e)) => panic!("{kind:?} {bytes:?}: fast {f:?}, prost {e}"),
            (None, _) => false,
        }
    }

    #[test]
    fn varints_of_every_length_read_as_prost_reads_them() {
        // Values around each 7-bit boundary, followed by nothing or by more bytes (the word
        // path needs eight at hand; a varint within them may end at any byte).
        let mut values: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX >> 1, 0x7f7f_7f7f_7f7f_7f7f];
        for bits in 1..64 {
            let v = 1u64 << bits;
            values.extend([v - 1, v, v + 1, v | 0x55]);
        }
        for v in values {
            for tail in [
                &[][..],
                &[0x01],
                &[0xff; 12],
                &[0, 0x80, 5, 6, 7, 8, 9, 10, 11],
            ] {
                let mut b = Vec::new();
                prost::encoding::encode_varint(v, &mut b);
                let len = b.len();
                b.extend_from_slice(tail);
                let mut w = Wire { b: &b };
                assert_eq!(w.varint(), Some(v), "{v:#x} then {tail:?}");
                assert_eq!(w.b, tail, "{v:#x}: {len} bytes taken");
            }
        }
        // An overlong zero (as prost reads it) and a cut one.
        assert_eq!(
            Wire {
                b: &[0x80, 0x80, 0, 9, 9, 9, 9, 9]
            }
            .varint(),
            Some(0)
        );
        assert_eq!(Wire { b: &[0xff; 8] }.varint(), None);
    }

    #[test]
    fn plain_records_decode_as_prost_does() {
        let t = Transfer {
            t_ns: 1 << 40,
            thread: 7,
            dur_ns: 300,
            direction: Direction::D2h as i32,
            api: "PJRT_Buffer_ToHostBuffer".into(),
            bytes: 4096,
            dims: vec![8, 128, -1, 0],
            dtype: "bf16".into(),
            device: -3,
            sync: true,
            blocked_ns: u64::MAX >> 8,
            stack: 42,
            buffer_id: 0xdead_beef,
            error: None,
        };
        assert!(same(RecordKind::Transfer, &t.encode_to_vec()));
        let e = Execute {
            t_ns: 123_456_789,
            thread: 3,
            dur_ns: 50_000,
            executable_id: 0x7f00_0000_1000,
            num_devices: 8,
            num_args: 300,
            arg_signature: 17,
            seq: 99,
            error: None,
            completion_tracked: true,
        };
        assert!(same(RecordKind::Execute, &e.encode_to_vec()));
        let c = ExecuteComplete {
            t_ns: 5,
            seq: 6,
            device_index: 7,
            error: None,
        };
        assert!(same(RecordKind::ExecuteComplete, &c.encode_to_vec()));
        let m = Memory {
            t_ns: 9,
            device: 1,
            origin: 2,
            bytes_in_use: -5,
            peak_bytes_in_use: Some(0),
            bytes_limit: Some(16 << 30),
            num_allocs: None,
            largest_alloc_size: Some(3),
            bytes_reserved: None,
            live_buffers: Some(12),
        };
        assert!(same(RecordKind::Memory, &m.encode_to_vec()));
        let s = Step {
            t_ns: 1,
            thread: 2,
            marker: "torch_xla.sync".into(),
            number: 77,
        };
        assert!(same(RecordKind::Step, &s.encode_to_vec()));
        // Defaults encode to nothing; an empty message is a default one.
        assert!(same(RecordKind::Transfer, &[]));
    }

    #[test]
    fn what_the_fast_path_does_not_take_goes_to_prost() {
        // An error (nested message) on an execute.
        let e = Execute {
            error: Some(ErrorInfo {
                code: 3,
                message: "bad".into(),
            }),
            ..Execute::default()
        };
        assert!(!same(RecordKind::Execute, &e.encode_to_vec()));
        // An unknown field (a later minor's), a wrong wire type, an eleven-byte varint, a ten-byte one past 64 bits, bad UTF-8,
        // a key of two bytes, a cut varint and a cut string.
        let mut unknown = Vec::new();
        key(30, 0, &mut unknown);
        unknown.push(1);
        let mut wrong = Vec::new();
        key(1, 2, &mut wrong);
        wrong.extend([1, 0]);
        let mut long = Vec::new();
        key(1, 0, &mut long);
        long.extend([0xff; 10]);
        long.push(1);
        let mut overflow = Vec::new();
        key(1, 0, &mut overflow);
        overflow.extend([0xff; 9]);
        overflow.push(2);
        let mut utf = Vec::new();
        key(3, 2, &mut utf);
        utf.extend([2, 0xff, 0xfe]);
        for bytes in [
            unknown,
            wrong,
            long,
            utf,
            vec![0x88, 0x01, 0],
            vec![8, 0x80],
            vec![26, 5, b'a'],
        ] {
            for kind in [RecordKind::Execute, RecordKind::Step, RecordKind::Transfer] {
                assert!(!same(kind, &bytes), "{kind:?} {bytes:?}");
            }
        }
    }

    #[test]
    fn repeated_and_duplicate_fields_follow_prost() {
        // Last value wins for scalars and strings; dims append, packed or not.
        let mut b = Vec::new();
        for (tag, v) in [(1, 5u64), (1, 6), (9, u64::MAX >> 1)] {
            key(tag, 0, &mut b);
            prost::encoding::encode_varint(v, &mut b);
        }
        key(7, 0, &mut b);
        b.push(3);
        key(7, 2, &mut b);
        b.extend([2, 4, 5]);
        key(7, 0, &mut b);
        b.push(6);
        for s in ["f32", "s8"] {
            key(8, 2, &mut b);
            b.push(s.len() as u8);
            b.extend(s.as_bytes());
        }
        // Dimensions in several fields are left to prost (no writer writes them so).
        assert!(!same(RecordKind::Transfer, &b));
        let Ok(Record::Transfer(t)) = Record::decode_payload(RecordKind::Transfer, &b) else {
            panic!("prost decodes it")
        };
        assert_eq!(
            (t.t_ns, t.dims.as_slice(), t.dtype.as_str()),
            (6, &[3, 4, 5, 6][..], "s8")
        );
        // One packed field, strings and scalars repeated: the fast path, last value wins.
        let mut b = Vec::new();
        for (tag, v) in [(1, 5u64), (1, 6)] {
            key(tag, 0, &mut b);
            prost::encoding::encode_varint(v, &mut b);
        }
        key(7, 2, &mut b);
        b.extend([3, 4, 5, 0x7f]);
        for s in ["f32", "s8"] {
            key(8, 2, &mut b);
            b.push(s.len() as u8);
            b.extend(s.as_bytes());
        }
        assert!(same(RecordKind::Transfer, &b));
        let Some(r) = TransferRef::parse(&b) else {
            panic!("plain fields")
        };
        assert_eq!(
            (r.t_ns, r.dims().collect::<Vec<_>>(), r.dtype),
            (6, vec![4, 5, 0x7f], "s8")
        );
        assert!(r.has_dims());
        // A packed field whose last varint runs past its end.
        let mut cut = Vec::new();
        key(7, 2, &mut cut);
        cut.extend([2, 4, 0x85, 1]);
        assert!(TransferRef::parse(&cut).is_none());
        assert!(!same(RecordKind::Transfer, &cut));
    }

    #[test]
    fn random_bytes_never_disagree_with_prost() {
        // A small xorshift: reproducible, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let kinds = [
            RecordKind::Execute,
            RecordKind::ExecuteComplete,
            RecordKind::Transfer,
            RecordKind::Memory,
            RecordKind::Step,
        ];
        let mut taken = 0;
        for _ in 0..200_000 {
            let len = (next() % 24) as usize;
            // Mostly small keys and short varints so that many inputs are plain.
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % 3 == 0 {
                        (r >> 8) as u8
                    } else {
                        ((r >> 8) % 0x60) as u8
                    }
                })
                .collect();
            for kind in kinds {
                taken += usize::from(same(kind, &bytes));
            }
        }
        // The fast path took a fair share, so the comparison compared something.
        assert!(taken > 10_000, "{taken}");
    }
}
