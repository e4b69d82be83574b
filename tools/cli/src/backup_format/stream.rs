//! Compression and encryption of backup files, in the tools' order: the
//! text goes through one zstd stream, then AES-CTR, then to the file.
//!
//! Encrypted layout (as asbackup writes it): bytes 0–15 are the first
//! counter block C0 encrypted with the key (AES-ECB); the ciphertext that
//! follows uses the keystream whose counter starts at C0 + 1 (a 128-bit
//! big-endian increment). The AES key is SHA-256 of the private key file's
//! key in DER (PKCS#1 for RSA): all 32 bytes for aes256, the first 16 for
//! aes128. Nothing in the file says it is compressed or encrypted: a
//! restore is given the same options as the backup.

use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use base64::Engine;
use ctr::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use sha2::Digest;
use std::io::{self, Read, Write};

pub const IV_BYTES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    Aes128,
    Aes256,
}

/// An AES key derived from a key file.
#[derive(Clone)]
pub struct Key {
    pub cipher: Cipher,
    bytes: [u8; 32],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?})", self.cipher)
    }
}

impl Key {
    fn material(&self) -> &[u8] {
        match self.cipher {
            Cipher::Aes128 => &self.bytes[..16],
            Cipher::Aes256 => &self.bytes,
        }
    }

    /// The key from a PEM private key file's text: an RSA key, PKCS#1
    /// (`BEGIN RSA PRIVATE KEY`) or PKCS#8 (`BEGIN PRIVATE KEY`).
    pub fn from_pem(text: &[u8], cipher: Cipher) -> Result<Key, String> {
        let text = std::str::from_utf8(text).map_err(|_| "the key file is not PEM text")?;
        let begin = text
            .find("-----BEGIN ")
            .ok_or("the key file has no '-----BEGIN' line (a PEM private key is expected)")?;
        let rest = &text[begin + 11..];
        let label_end = rest
            .find("-----")
            .ok_or("the key file's BEGIN line is cut")?;
        let label = &rest[..label_end];
        let body_start = label_end + 5;
        let end_marker = format!("-----END {label}-----");
        let body_end = rest
            .find(&end_marker)
            .ok_or_else(|| format!("the key file has no '{end_marker}' line"))?;
        let body = &rest[body_start..body_end];
        if body.contains("ENCRYPTED") || label.contains("ENCRYPTED") {
            return Err("the key file is encrypted: give an unencrypted private key".to_owned());
        }
        let encoded: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|error| format!("the key file's body is not base64: {error}"))?;
        let pkcs1 = match label {
            "RSA PRIVATE KEY" => der,
            "PRIVATE KEY" => pkcs8_rsa(&der)?,
            other => {
                return Err(format!(
                    "the key file holds a '{other}', not an RSA private key"
                ))
            }
        };
        let hash = sha2::Sha256::digest(&pkcs1);
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&hash);
        Ok(Key { cipher, bytes })
    }

    /// The first counter block, encrypted (the file's first 16 bytes).
    fn encrypt_block(&self, block: [u8; 16]) -> [u8; 16] {
        let mut block = aes::Block::from(block);
        match self.cipher {
            Cipher::Aes128 => aes::Aes128::new_from_slice(self.material())
                .map(|aes| aes.encrypt_block(&mut block))
                .ok(),
            Cipher::Aes256 => aes::Aes256::new_from_slice(self.material())
                .map(|aes| aes.encrypt_block(&mut block))
                .ok(),
        };
        block.into()
    }

    fn decrypt_block(&self, block: [u8; 16]) -> [u8; 16] {
        let mut block = aes::Block::from(block);
        match self.cipher {
            Cipher::Aes128 => aes::Aes128::new_from_slice(self.material())
                .map(|aes| aes.decrypt_block(&mut block))
                .ok(),
            Cipher::Aes256 => aes::Aes256::new_from_slice(self.material())
                .map(|aes| aes.decrypt_block(&mut block))
                .ok(),
        };
        block.into()
    }

    /// The keystream for the text after an IV block C0, at `position`.
    fn keystream(&self, counter0: [u8; 16], position: u64) -> Keystream {
        let start = u128::from_be_bytes(counter0).wrapping_add(1).to_be_bytes();
        let mut stream = match self.cipher {
            Cipher::Aes128 => Keystream::Aes128(
                ctr::Ctr128BE::<aes::Aes128>::new_from_slices(self.material(), &start)
                    .unwrap_or_else(|_| unreachable!("16-byte key and IV")),
            ),
            Cipher::Aes256 => Keystream::Aes256(
                ctr::Ctr128BE::<aes::Aes256>::new_from_slices(self.material(), &start)
                    .unwrap_or_else(|_| unreachable!("32-byte key and 16-byte IV")),
            ),
        };
        stream.seek(position);
        stream
    }
}

/// The RSAPrivateKey (PKCS#1) inside a PKCS#8 PrivateKeyInfo.
fn pkcs8_rsa(der: &[u8]) -> Result<Vec<u8>, String> {
    const RSA_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    let bad = || "the key file's PKCS#8 structure is not valid".to_owned();
    let (tag, info, _) = der_item(der).ok_or_else(bad)?;
    if tag != 0x30 {
        return Err(bad());
    }
    let (tag, _version, rest) = der_item(info).ok_or_else(bad)?;
    if tag != 0x02 {
        return Err(bad());
    }
    let (tag, algorithm, rest) = der_item(rest).ok_or_else(bad)?;
    if tag != 0x30 {
        return Err(bad());
    }
    let (tag, oid, _) = der_item(algorithm).ok_or_else(bad)?;
    if tag != 0x06 || oid != RSA_OID {
        return Err("the key file holds a private key that is not RSA".to_owned());
    }
    let (tag, key, _) = der_item(rest).ok_or_else(bad)?;
    if tag != 0x04 {
        return Err(bad());
    }
    Ok(key.to_vec())
}

/// One DER item: (tag, contents, rest).
fn der_item(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (digits, after) = rest.split_at(count);
        rest = after;
        digits
            .iter()
            .fold(0usize, |acc, &digit| (acc << 8) | usize::from(digit))
    };
    if rest.len() < length {
        return None;
    }
    let (contents, after) = rest.split_at(length);
    Some((tag, contents, after))
}

/// Reads a key file.
pub fn read_key_file(path: &std::path::Path, cipher: Cipher) -> Result<Key, String> {
    let text = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    Key::from_pem(&text, cipher).map_err(|error| format!("{}: {error}", path.display()))
}

enum Keystream {
    Aes128(ctr::Ctr128BE<aes::Aes128>),
    Aes256(ctr::Ctr128BE<aes::Aes256>),
}

impl Keystream {
    fn apply(&mut self, bytes: &mut [u8]) {
        match self {
            Keystream::Aes128(stream) => stream.apply_keystream(bytes),
            Keystream::Aes256(stream) => stream.apply_keystream(bytes),
        }
    }

    fn seek(&mut self, position: u64) {
        match self {
            Keystream::Aes128(stream) => stream.seek(position),
            Keystream::Aes256(stream) => stream.seek(position),
        }
    }
}

/// A fresh first counter block: 4 bytes of the time (big-endian seconds),
/// 12 random, as asbackup makes it.
fn new_counter0() -> io::Result<[u8; 16]> {
    let mut block = [0u8; 16];
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as u32);
    block[..4].copy_from_slice(&seconds.to_be_bytes());
    getrandom::fill(&mut block[4..]).map_err(|error| io::Error::other(error.to_string()))?;
    Ok(block)
}

/// The bottom layer: encryption (if any) and a count of the bytes that
/// reached the file.
pub struct Lower<W: Write> {
    inner: W,
    keystream: Option<Keystream>,
    scratch: Vec<u8>,
    written: u64,
}

impl<W: Write> Write for Lower<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match &mut self.keystream {
            None => {
                let written = self.inner.write(bytes)?;
                self.written += written as u64;
                Ok(written)
            }
            Some(keystream) => {
                // All or nothing, so the keystream stays in step.
                self.scratch.clear();
                self.scratch.extend_from_slice(bytes);
                keystream.apply(&mut self.scratch);
                self.inner.write_all(&self.scratch)?;
                self.written += bytes.len() as u64;
                Ok(bytes.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Text in, file bytes out: zstd (optional), then AES-CTR (optional).
pub struct LayeredWriter<W: Write> {
    compressor: Option<zstd::stream::write::Encoder<'static, Lower<W>>>,
    plain: Option<Lower<W>>,
    level: Option<i32>,
}

impl<W: Write> LayeredWriter<W> {
    /// Starts a new file on `inner` (the IV block first when encrypted).
    pub fn new(
        mut inner: W,
        level: Option<i32>,
        key: Option<&Key>,
    ) -> io::Result<LayeredWriter<W>> {
        let mut written = 0;
        let keystream = match key {
            Some(key) => {
                let counter0 = new_counter0()?;
                inner.write_all(&key.encrypt_block(counter0))?;
                written = IV_BYTES as u64;
                Some(key.keystream(counter0, 0))
            }
            None => None,
        };
        LayeredWriter::with_lower(
            Lower {
                inner,
                keystream,
                scratch: Vec::new(),
                written,
            },
            level,
        )
    }

    /// Continues a file of `length` bytes whose first 16 are `iv_block`
    /// (when encrypted): the keystream picks up where it stopped.
    pub fn resume(
        inner: W,
        level: Option<i32>,
        key: Option<&Key>,
        iv_block: Option<[u8; 16]>,
        length: u64,
    ) -> io::Result<LayeredWriter<W>> {
        let keystream = match (key, iv_block) {
            (Some(key), Some(block)) => {
                let counter0 = key.decrypt_block(block);
                Some(key.keystream(counter0, length.saturating_sub(IV_BYTES as u64)))
            }
            (Some(_), None) => {
                return Err(io::Error::other("an encrypted file without its IV block"))
            }
            _ => None,
        };
        LayeredWriter::with_lower(
            Lower {
                inner,
                keystream,
                scratch: Vec::new(),
                written: length,
            },
            level,
        )
    }

    fn with_lower(lower: Lower<W>, level: Option<i32>) -> io::Result<LayeredWriter<W>> {
        Ok(match level {
            Some(level) => LayeredWriter {
                compressor: Some(zstd::stream::write::Encoder::new(lower, level)?),
                plain: None,
                level: Some(level),
            },
            None => LayeredWriter {
                compressor: None,
                plain: Some(lower),
                level: None,
            },
        })
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match (&mut self.compressor, &mut self.plain) {
            (Some(compressor), _) => compressor.write_all(bytes),
            (None, Some(plain)) => plain.write_all(bytes),
            (None, None) => Err(io::Error::other("writer already finished")),
        }
    }

    fn lower(&self) -> Option<&Lower<W>> {
        match (&self.compressor, &self.plain) {
            (Some(compressor), _) => Some(compressor.get_ref()),
            (None, plain) => plain.as_ref(),
        }
    }

    /// Bytes that reached the file so far.
    pub fn file_bytes(&self) -> u64 {
        self.lower().map_or(0, |lower| lower.written)
    }

    /// Makes everything written so far a complete, readable prefix of the
    /// file (the zstd frame ends; the next write starts a new one) and
    /// flushes it; returns the file's length.
    pub fn checkpoint(&mut self) -> io::Result<u64> {
        if let Some(compressor) = self.compressor.take() {
            let mut lower = compressor.finish()?;
            lower.flush()?;
            let length = lower.written;
            self.compressor = Some(zstd::stream::write::Encoder::new(
                lower,
                self.level.unwrap_or(3),
            )?);
            return Ok(length);
        }
        match &mut self.plain {
            Some(plain) => {
                plain.flush()?;
                Ok(plain.written)
            }
            None => Err(io::Error::other("writer already finished")),
        }
    }

    /// Ends the streams and returns the file.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        let mut lower = match (self.compressor.take(), self.plain.take()) {
            (Some(compressor), _) => compressor.finish()?,
            (None, Some(plain)) => plain,
            (None, None) => return Err(io::Error::other("writer already finished")),
        };
        lower.flush()?;
        Ok((lower.inner, lower.written))
    }

    pub fn get_mut(&mut self) -> Option<&mut W> {
        match (&mut self.compressor, &mut self.plain) {
            (Some(compressor), _) => Some(&mut compressor.get_mut().inner),
            (None, Some(plain)) => Some(&mut plain.inner),
            (None, None) => None,
        }
    }
}

/// Decrypts what it reads (after taking the IV block off the front).
pub struct Decrypting<R: Read> {
    inner: R,
    key: Key,
    keystream: Option<Keystream>,
}

impl<R: Read> Decrypting<R> {
    pub fn new(inner: R, key: Key) -> Decrypting<R> {
        Decrypting {
            inner,
            key,
            keystream: None,
        }
    }
}

impl<R: Read> Read for Decrypting<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.keystream.is_none() {
            let mut block = [0u8; IV_BYTES];
            let mut filled = 0;
            while filled < IV_BYTES {
                match self.inner.read(&mut block[filled..]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "the file is {filled} bytes long, shorter than an encrypted file's {IV_BYTES}-byte IV block"
                            ),
                        ))
                    }
                    Ok(read) => filled += read,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
            let counter0 = self.key.decrypt_block(block);
            self.keystream = Some(self.key.keystream(counter0, 0));
        }
        let read = self.inner.read(out)?;
        if let Some(keystream) = &mut self.keystream {
            keystream.apply(&mut out[..read]);
        }
        Ok(read)
    }
}

/// File bytes in, text out: decryption (optional), then zstd (optional).
pub fn layered_reader<'r>(
    inner: impl Read + Send + 'r,
    compressed: bool,
    key: Option<Key>,
) -> io::Result<Box<dyn Read + Send + 'r>> {
    let decrypted: Box<dyn Read + Send + 'r> = match key {
        Some(key) => Box::new(Decrypting::new(inner, key)),
        None => Box::new(inner),
    };
    Ok(if compressed {
        Box::new(zstd::stream::read::Decoder::new(decrypted)?)
    } else {
        decrypted
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PKCS1: &str = include_str!("../../tests/data/backup-key-pkcs1.pem");
    const PKCS8: &str = include_str!("../../tests/data/backup-key-pkcs8.pem");

    #[test]
    fn pkcs1_and_pkcs8_give_the_same_key() {
        let one = Key::from_pem(PKCS1.as_bytes(), Cipher::Aes256).expect("pkcs1");
        let eight = Key::from_pem(PKCS8.as_bytes(), Cipher::Aes256).expect("pkcs8");
        assert_eq!(one.bytes, eight.bytes);
        assert!(Key::from_pem(b"hello", Cipher::Aes128).is_err());
        assert!(Key::from_pem(
            b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
            Cipher::Aes128
        )
        .is_err());
    }

    fn round_trip(level: Option<i32>, cipher: Option<Cipher>) {
        let key = cipher.map(|cipher| Key::from_pem(PKCS1.as_bytes(), cipher).expect("key"));
        let text: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut writer = LayeredWriter::new(Vec::new(), level, key.as_ref()).expect("writer");
        writer.write_all(&text[..1000]).expect("write");
        let checkpoint = writer.checkpoint().expect("checkpoint");
        writer.write_all(&text[1000..]).expect("write");
        let (file, length) = writer.finish().expect("finish");
        assert_eq!(file.len() as u64, length);
        assert!(checkpoint <= length);
        if cipher.is_some() || level.is_some() {
            assert_ne!(&file[..16.min(file.len())], &text[..16]);
        }
        let mut reader = layered_reader(&file[..], level.is_some(), key.clone()).expect("reader");
        let mut back = Vec::new();
        reader.read_to_end(&mut back).expect("read");
        assert_eq!(back, text);

        // A file cut at the checkpoint and continued reads as one.
        let mut prefix = file[..checkpoint as usize].to_vec();
        let iv = key.as_ref().map(|_| {
            let mut block = [0u8; 16];
            block.copy_from_slice(&prefix[..16]);
            block
        });
        let mut writer = LayeredWriter::resume(&mut prefix, level, key.as_ref(), iv, checkpoint)
            .expect("resume");
        writer.write_all(&text[1000..]).expect("write");
        writer.finish().expect("finish");
        let mut reader = layered_reader(&prefix[..], level.is_some(), key.clone()).expect("reader");
        let mut back = Vec::new();
        reader.read_to_end(&mut back).expect("read");
        assert_eq!(back, text);
    }

    #[test]
    fn every_layering_round_trips_and_resumes() {
        for level in [None, Some(3)] {
            for cipher in [None, Some(Cipher::Aes128), Some(Cipher::Aes256)] {
                round_trip(level, cipher);
            }
        }
    }

    #[test]
    fn the_iv_block_is_the_encrypted_first_counter() {
        let key = Key::from_pem(PKCS1.as_bytes(), Cipher::Aes128).expect("key");
        let mut writer = LayeredWriter::new(Vec::new(), None, Some(&key)).expect("writer");
        writer.write_all(&[0u8; 32]).expect("write");
        let (file, _) = writer.finish().expect("finish");
        let mut block = [0u8; 16];
        block.copy_from_slice(&file[..16]);
        let counter0 = key.decrypt_block(block);
        // Zeros encrypt to the keystream itself: E(C0 + 1), E(C0 + 2).
        let next = u128::from_be_bytes(counter0).wrapping_add(1).to_be_bytes();
        assert_eq!(&file[16..32], &key.encrypt_block(next));
        let after = u128::from_be_bytes(counter0).wrapping_add(2).to_be_bytes();
        assert_eq!(&file[32..48], &key.encrypt_block(after));
    }
}
