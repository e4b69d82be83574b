//! A bounded MessagePack reader for what the clients send inside requests
//! (filter expressions, and later list/map operations). It borrows the
//! input, never allocates, and refuses input nested deeper than
//! [`DEPTH_MAX`].

use crate::ProtoError;

/// Deepest nesting `skip` follows.
pub const DEPTH_MAX: usize = 64;

/// One MessagePack item header; arrays and maps give their element count,
/// their elements follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Array(u32),
    Map(u32),
    Ext(i8, &'a [u8]),
}

/// Reads items off the front of a byte slice.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

const TRUNCATED: ProtoError = ProtoError::Truncated { what: "msgpack" };

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.bytes
    }

    /// Reads one item header.
    pub fn item(&mut self) -> Result<Item<'a>, ProtoError> {
        let marker = self.u8()?;
        Ok(match marker {
            0x00..=0x7f => Item::Int(i64::from(marker)),
            0x80..=0x8f => Item::Map(u32::from(marker & 0x0f)),
            0x90..=0x9f => Item::Array(u32::from(marker & 0x0f)),
            0xa0..=0xbf => Item::Str(self.take(usize::from(marker & 0x1f))?),
            0xc0 => Item::Nil,
            0xc2 => Item::Bool(false),
            0xc3 => Item::Bool(true),
            0xc4 => {
                let len = usize::from(self.u8()?);
                Item::Bin(self.take(len)?)
            }
            0xc5 => {
                let len = usize::from(self.u16()?);
                Item::Bin(self.take(len)?)
            }
            0xc6 => {
                let len = self.u32()? as usize;
                Item::Bin(self.take(len)?)
            }
            0xc7 => {
                let len = usize::from(self.u8()?);
                let kind = self.u8()? as i8;
                Item::Ext(kind, self.take(len)?)
            }
            0xc8 => {
                let len = usize::from(self.u16()?);
                let kind = self.u8()? as i8;
                Item::Ext(kind, self.take(len)?)
            }
            0xc9 => {
                let len = self.u32()? as usize;
                let kind = self.u8()? as i8;
                Item::Ext(kind, self.take(len)?)
            }
            0xca => Item::Float(f64::from(f32::from_bits(self.u32()?))),
            0xcb => Item::Float(f64::from_bits(self.u64()?)),
            0xcc => Item::Uint(u64::from(self.u8()?)),
            0xcd => Item::Uint(u64::from(self.u16()?)),
            0xce => Item::Uint(u64::from(self.u32()?)),
            0xcf => Item::Uint(self.u64()?),
            0xd0 => Item::Int(i64::from(self.u8()? as i8)),
            0xd1 => Item::Int(i64::from(self.u16()? as i16)),
            0xd2 => Item::Int(i64::from(self.u32()? as i32)),
            0xd3 => Item::Int(self.u64()? as i64),
            0xd4 => self.fixext(1)?,
            0xd5 => self.fixext(2)?,
            0xd6 => self.fixext(4)?,
            0xd7 => self.fixext(8)?,
            0xd8 => self.fixext(16)?,
            0xd9 => {
                let len = usize::from(self.u8()?);
                Item::Str(self.take(len)?)
            }
            0xda => {
                let len = usize::from(self.u16()?);
                Item::Str(self.take(len)?)
            }
            0xdb => {
                let len = self.u32()? as usize;
                Item::Str(self.take(len)?)
            }
            0xdc => Item::Array(u32::from(self.u16()?)),
            0xdd => Item::Array(self.u32()?),
            0xde => Item::Map(u32::from(self.u16()?)),
            0xdf => Item::Map(self.u32()?),
            0xe0..=0xff => Item::Int(i64::from(marker as i8)),
            0xc1 => {
                return Err(ProtoError::Truncated {
                    what: "msgpack marker 0xc1",
                })
            }
        })
    }

    /// Reads an integer item (signed or unsigned that fits i64).
    pub fn int(&mut self) -> Result<i64, ProtoError> {
        match self.item()? {
            Item::Int(value) => Ok(value),
            Item::Uint(value) => i64::try_from(value).map_err(|_| TRUNCATED),
            _ => Err(ProtoError::Truncated {
                what: "msgpack integer",
            }),
        }
    }

    /// Skips one whole item, nested elements included.
    pub fn skip(&mut self) -> Result<(), ProtoError> {
        self.skip_nested(0)
    }

    fn skip_nested(&mut self, depth: usize) -> Result<(), ProtoError> {
        if depth > DEPTH_MAX {
            return Err(ProtoError::Truncated {
                what: "msgpack nesting",
            });
        }
        let children = match self.item()? {
            Item::Array(count) => u64::from(count),
            Item::Map(count) => u64::from(count) * 2,
            _ => 0,
        };
        for _ in 0..children {
            self.skip_nested(depth + 1)?;
        }
        Ok(())
    }

    fn fixext(&mut self, len: usize) -> Result<Item<'a>, ProtoError> {
        let kind = self.u8()? as i8;
        Ok(Item::Ext(kind, self.take(len)?))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ProtoError> {
        if self.bytes.len() < len {
            return Err(TRUNCATED);
        }
        let (taken, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, ProtoError> {
        let (&first, rest) = self.bytes.split_first().ok_or(TRUNCATED)?;
        self.bytes = rest;
        Ok(first)
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        let (two, rest) = self.bytes.split_first_chunk::<2>().ok_or(TRUNCATED)?;
        self.bytes = rest;
        Ok(u16::from_be_bytes(*two))
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        let (four, rest) = self.bytes.split_first_chunk::<4>().ok_or(TRUNCATED)?;
        self.bytes = rest;
        Ok(u32::from_be_bytes(*four))
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        let (eight, rest) = self.bytes.split_first_chunk::<8>().ok_or(TRUNCATED)?;
        self.bytes = rest;
        Ok(u64::from_be_bytes(*eight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_common_items() {
        let bytes = [
            0x93, 0x01, 0xd0, 0xff, 0xa3, b'a', b'b', b'c', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
            0xc3,
        ];
        let mut reader = Reader::new(&bytes);
        assert_eq!(reader.item(), Ok(Item::Array(3)));
        assert_eq!(reader.int(), Ok(1));
        assert_eq!(reader.int(), Ok(-1));
        assert_eq!(reader.item(), Ok(Item::Str(b"abc")));
        assert_eq!(reader.item(), Ok(Item::Float(1.5)));
        assert_eq!(reader.item(), Ok(Item::Bool(true)));
        assert!(reader.remaining().is_empty());
    }

    #[test]
    fn skip_is_bounded_and_never_panics() {
        let deep = vec![0x91u8; 1000];
        assert!(Reader::new(&deep).skip().is_err());
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 0x90) as u8).collect();
            let _ = Reader::new(&bytes).skip();
        }
    }
}
