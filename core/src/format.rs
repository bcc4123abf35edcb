//! Byte layout of a `.tps` trace: a fixed header, then framed records. Specified in
//! `docs/trace-format.md`; this module is the one place that knows the bytes.

/// First 8 bytes of every trace.
pub const MAGIC: [u8; 8] = *b"TPUSCOPE";
/// Incompatible layout changes bump the major; readers refuse a newer major.
pub const FORMAT_MAJOR: u16 = 1;
/// Additive changes (new record kinds, new fields) bump the minor; readers accept any minor.
pub const FORMAT_MINOR: u16 = 0;
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
