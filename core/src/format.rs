//! Byte layout of a `.tps` trace: a fixed header, then framed records. Specified in
//! `docs/trace-format.md`; this module is the one place that knows the bytes.

/// First 8 bytes of every trace.
pub const MAGIC: [u8; 8] = *b"TPUSCOPE";
/// Incompatible layout changes bump the major; readers refuse a newer major.
pub const FORMAT_MAJOR: u16 = 1;
/// Additive changes (new record kinds, new fields) bump the minor; readers accept any minor.
/// 1.2: packs ([`PACK_KIND`]).
pub const FORMAT_MINOR: u16 = 2;
/// The minor that introduced packs: a writer of an older minor never packs.
pub const PACK_MINOR: u16 = 2;
/// A frame that holds several records back to back (docs/trace-format.md section 12): one
/// header and one CRC for many small records.
pub const PACK_KIND: u16 = 35;
/// Payload bytes a writer gathers in a pack before it writes it (readers take any valid frame):
/// what a cut, or a failed write, loses at most beyond the frame it falls in.
pub const PACK_BYTES: usize = 16 << 10;
/// Records with longer payloads are written as frames of their own (blobs, long stacks).
pub const PACK_ENTRY_MAX: usize = 4 << 10;
/// Length of the version-1 header.
pub const HEADER_LEN: usize = 16;
/// Length of a frame header: payload length, kind, flags, CRC.
pub const FRAME_HEADER_LEN: usize = 12;
/// Largest payload a writer produces and a reader accepts; larger lengths mark damage.
pub const MAX_PAYLOAD_LEN: usize = 512 << 20;

/// Encodes the file header.
pub fn encode_header(major: u16, minor: u16) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&major.to_le_bytes());
    h[10..12].copy_from_slice(&minor.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h
}

/// The CRC of a frame covers its kind, flags and payload, so a flipped kind is caught too.
pub fn frame_crc(kind: u16, flags: u16, payload: &[u8]) -> u32 {
    // Every record pays this: the CPU's CRC kernel is picked once, not per frame, and kind and
    // flags go in as one word. (Continuing from a kept CRC of kind and flags instead costs more:
    // a hasher made from a state picks its kernel again.)
    static NEW: std::sync::LazyLock<crc32fast::Hasher> =
        std::sync::LazyLock::new(crc32fast::Hasher::new);
    let mut hasher = NEW.clone();
    let [k0, k1] = kind.to_le_bytes();
    let [f0, f1] = flags.to_le_bytes();
    hasher.update(&[k0, k1, f0, f1]);
    hasher.update(payload);
    hasher.finalize()
}

/// Appends one frame (header + payload) to `out`.
pub fn encode_frame(out: &mut Vec<u8>, kind: u16, flags: u16, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&frame_crc(kind, flags, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Appends one entry of a pack: the record's kind and payload length as varints, then the payload.
pub fn encode_pack_entry(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    prost::encoding::encode_varint(u64::from(kind), out);
    prost::encoding::encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// The first entry of a pack's payload `bytes` (non-empty): its kind, its payload and the bytes
/// after it; `None` when it does not parse (a kind over 16 bits, a length past the end).
#[inline]
pub fn pack_entry(bytes: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    // Most records: a kind and a length of one byte each.
    if let [kind @ 0..=0x7f, len @ 0..=0x7f, rest @ ..] = bytes {
        let len = usize::from(*len);
        return Some((u16::from(*kind), rest.get(..len)?, rest.get(len..)?));
    }
    pack_entry_long(bytes)
}

#[inline(never)]
fn pack_entry_long(mut bytes: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    let kind = u16::try_from(prost::encoding::decode_varint(&mut bytes).ok()?).ok()?;
    let len = usize::try_from(prost::encoding::decode_varint(&mut bytes).ok()?).ok()?;
    let payload = bytes.get(..len)?;
    Some((kind, payload, bytes.get(len..)?))
}

/// Whether a record of this kind may stand in a pack: not a pack, not a segment marker (which
/// splits a merged file's frames) and not the manifest (the first frame of a trace).
pub fn packable(kind: u16) -> bool {
    kind != 0
        && kind != crate::event::RecordKind::Manifest as u16
        && kind != crate::event::SEGMENT_KIND
        && kind != PACK_KIND
}

/// A frame header as read from bytes, not yet checked against its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u16,
    pub flags: u16,
    pub crc: u32,
}

/// Parses a frame header from the first 12 bytes of `b`; `None` when fewer are given.
pub fn parse_frame_header(b: &[u8]) -> Option<FrameHeader> {
    let h = b.get(..FRAME_HEADER_LEN)?;
    let u32_at =
        |i: usize| -> Option<u32> { Some(u32::from_le_bytes(h.get(i..i + 4)?.try_into().ok()?)) };
    let u16_at =
        |i: usize| -> Option<u16> { Some(u16::from_le_bytes(h.get(i..i + 2)?.try_into().ok()?)) };
    Some(FrameHeader {
        len: u32_at(0)?,
        kind: u16_at(4)?,
        flags: u16_at(6)?,
        crc: u32_at(8)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_crc_is_the_crc_of_kind_flags_and_payload() {
        // Kinds, flags 0 and not, payloads short and long (the kernel takes 64 bytes at a time).
        let payload: Vec<u8> = (0u8..=200).map(|b| b.wrapping_mul(37)).collect();
        for kind in [0u16, 1, 18, 19, 34, 63, 64, 65, 300, u16::MAX] {
            for flags in [0u16, 1, 255, 256] {
                for len in [0usize, 1, 4, 15, 16, 63, 64, 200] {
                    let p = &payload[..len];
                    let mut whole = Vec::new();
                    whole.extend_from_slice(&kind.to_le_bytes());
                    whole.extend_from_slice(&flags.to_le_bytes());
                    whole.extend_from_slice(p);
                    assert_eq!(
                        frame_crc(kind, flags, p),
                        crc32fast::hash(&whole),
                        "kind {kind} flags {flags} len {len}"
                    );
                }
            }
        }
        // The specification's check value.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }
}
