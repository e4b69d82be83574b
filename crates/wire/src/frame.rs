//! The 8-byte proto header that starts every message in both directions.
//!
//! ```text
//!  byte 0     byte 1    bytes 2..8
//! +---------+---------+--------------------------------+
//! | version | type    | body size, 48-bit big-endian   |
//! +---------+---------+--------------------------------+
//! ```

use crate::ProtoError;
use bolide_types::PROTO_BODY_BYTES_MAX;

pub const PROTO_HEADER_BYTES: usize = 8;
pub const PROTO_VERSION: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageType {
    Info = 1,
    Admin = 2,
    Message = 3,
    Compressed = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoHeader {
    pub message_type: MessageType,
    pub body_bytes: usize,
}

impl ProtoHeader {
    /// Decodes and validates a proto header. Version 0 is tolerated for
    /// admin messages (old tools send it).
    pub fn decode(bytes: &[u8; PROTO_HEADER_BYTES]) -> Result<ProtoHeader, ProtoError> {
        let word = u64::from_be_bytes(*bytes);
        let version = bytes[0];
        let message_type = match bytes[1] {
            1 => MessageType::Info,
            2 => MessageType::Admin,
            3 => MessageType::Message,
            4 => MessageType::Compressed,
            other => {
                return Err(ProtoError::BadType {
                    message_type: other,
                })
            }
        };
        if version != PROTO_VERSION && !(version == 0 && message_type == MessageType::Admin) {
            return Err(ProtoError::BadVersion { version });
        }
        let body_bytes = word & 0x0000_ffff_ffff_ffff;
        if body_bytes > PROTO_BODY_BYTES_MAX {
            return Err(ProtoError::TooLarge { body_bytes });
        }
        Ok(ProtoHeader {
            message_type,
            body_bytes: body_bytes as usize,
        })
    }

    /// Writes a proto header for a body of `body_bytes`.
    pub fn encode(message_type: MessageType, body_bytes: usize) -> [u8; PROTO_HEADER_BYTES] {
        let word = (u64::from(PROTO_VERSION) << 56)
            | ((message_type as u64) << 48)
            | (body_bytes as u64 & 0x0000_ffff_ffff_ffff);
        word.to_be_bytes()
    }
}

/// If `buffer` starts with a complete frame, its header and total length
/// (header included). `Ok(None)` means "wait for more bytes".
pub fn frame_length(buffer: &[u8]) -> Result<Option<(ProtoHeader, usize)>, ProtoError> {
    let Some(head) = buffer.first_chunk::<PROTO_HEADER_BYTES>() else {
        return Ok(None);
    };
    let header = ProtoHeader::decode(head)?;
    let total = PROTO_HEADER_BYTES + header.body_bytes;
    if buffer.len() < total {
        return Ok(None);
    }
    Ok(Some((header, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_reference_info_request() {
        let bytes = [
            0x02, 0x01, 0, 0, 0, 0, 0, 0x05, b'n', b'o', b'd', b'e', b'\n',
        ];
        let (header, total) = frame_length(&bytes).expect("valid").expect("complete");
        assert_eq!(header.message_type, MessageType::Info);
        assert_eq!(header.body_bytes, 5);
        assert_eq!(total, 13);
        assert_eq!(frame_length(&bytes[..12]), Ok(None));
    }

    #[test]
    fn rejects_bad_version_type_and_size() {
        assert_eq!(
            ProtoHeader::decode(&[3, 3, 0, 0, 0, 0, 0, 0]),
            Err(ProtoError::BadVersion { version: 3 })
        );
        assert_eq!(
            ProtoHeader::decode(&[2, 9, 0, 0, 0, 0, 0, 0]),
            Err(ProtoError::BadType { message_type: 9 })
        );
        assert!(matches!(
            ProtoHeader::decode(&[2, 3, 0, 0, 0x08, 0, 0, 1]),
            Err(ProtoError::TooLarge { .. })
        ));
        assert!(ProtoHeader::decode(&[0, 2, 0, 0, 0, 0, 0, 16]).is_ok());
    }

    #[test]
    fn encode_round_trips() {
        let bytes = ProtoHeader::encode(MessageType::Message, 0x52);
        assert_eq!(bytes, [2, 3, 0, 0, 0, 0, 0, 0x52]);
        let header = ProtoHeader::decode(&bytes).expect("valid");
        assert_eq!(header.body_bytes, 0x52);
    }
}
