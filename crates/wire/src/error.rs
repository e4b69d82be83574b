use std::fmt;

/// Why a frame or message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtoError {
    /// The proto header's version byte is not 2.
    BadVersion { version: u8 },
    /// The proto header's type byte is not one the server understands.
    BadType { message_type: u8 },
    /// The body is larger than the protocol maximum.
    TooLarge { body_bytes: u64 },
    /// The AS_MSG header is shorter than 22 bytes or declares another size.
    BadMsgHeader { header_bytes: u8 },
    /// A field or op runs past the end of the message.
    Truncated { what: &'static str },
    /// Bytes are left over after the declared fields and ops.
    TrailingBytes { bytes: usize },
    /// A field has size 0 (it must at least hold its type byte).
    EmptyField,
    /// An op's declared name length exceeds its size.
    BadOpSize,
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::BadVersion { version } => write!(f, "bad proto version {version}"),
            ProtoError::BadType { message_type } => write!(f, "bad proto type {message_type}"),
            ProtoError::TooLarge { body_bytes } => {
                write!(f, "proto body of {body_bytes} bytes is too large")
            }
            ProtoError::BadMsgHeader { header_bytes } => {
                write!(f, "bad AS_MSG header size {header_bytes}")
            }
            ProtoError::Truncated { what } => write!(f, "truncated {what}"),
            ProtoError::TrailingBytes { bytes } => write!(f, "{bytes} trailing bytes after ops"),
            ProtoError::EmptyField => write!(f, "field of size 0"),
            ProtoError::BadOpSize => write!(f, "op name longer than op"),
        }
    }
}

impl std::error::Error for ProtoError {}
