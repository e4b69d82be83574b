//! The node-to-node codec (BLDE frames: heartbeat control messages and
//! fabric messages): any bytes, read as a stream of frames the way a
//! heartbeat or fabric connection reads them.
//!
//! Properties:
//! - nothing panics, whatever the header announces (nothing is allocated
//!   from a declared length);
//! - a header with the wrong magic, version or reserved bits, or a length
//!   over the limit, is refused for that reason;
//! - every body is also decoded as both kinds of message whatever its
//!   checksum (so mutated bodies reach the decoders); anything that decodes
//!   round-trips: encoding it and decoding that gives the same message, and
//!   the encoding is stable (encode → decode → encode is the same bytes);
//! - the re-encoded frame passes the checksum, every prefix of it is
//!   "incomplete" (never an error), and a frame whose body or checksum has
//!   any one bit flipped is refused with a checksum mismatch;
//! - a frame whose checksum the input got right (`split_frame` takes it)
//!   decodes exactly as its unchecked body did.

use bolide_cluster::codec::{self, CodecError, FRAME_BODY_BYTES_MAX, FRAME_HEADER_BYTES};
use bolide_cluster::fabric::Fabric;
use bolide_cluster::Envelope;

/// Frames looked at per input (a long input of tiny frames stays fast).
const FRAMES_MAX: usize = 64;

pub fn check(bytes: &[u8]) {
    let mut rest = bytes;
    for _ in 0..FRAMES_MAX {
        let Some(head) = rest.first_chunk::<FRAME_HEADER_BYTES>() else {
            // Too short for a header: incomplete, never an error.
            assert_eq!(codec::split_frame(rest), Ok(None));
            return;
        };
        let header = match codec::read_header(head) {
            Ok(header) => header,
            Err(error) => {
                check_refusal(head, &error);
                assert_eq!(codec::split_frame(rest), Err(error));
                return;
            }
        };
        let whole = FRAME_HEADER_BYTES + header.body_bytes;
        // The body as far as the input goes (a stream cut short).
        let body = &rest[FRAME_HEADER_BYTES..whole.min(rest.len())];
        check_body(header.kind, body);
        let split = codec::split_frame(rest);
        if rest.len() < whole {
            assert_eq!(split, Ok(None), "a cut frame must wait for more");
            return;
        }
        let expected = crc32c::crc32c(body);
        match split {
            Ok(Some((split_header, split_body, total))) => {
                assert_eq!(expected, header.checksum);
                assert_eq!(split_header, header);
                assert_eq!(split_body, body);
                assert_eq!(total, whole);
            }
            Err(CodecError::ChecksumMismatch {
                expected: claimed,
                actual,
            }) => {
                assert_eq!(claimed, header.checksum);
                assert_eq!(actual, expected);
                assert_ne!(claimed, actual);
            }
            other => panic!("a whole frame split as {other:?}"),
        }
        rest = &rest[whole..];
    }
}

/// A header `read_header` refused must break the rule it names.
fn check_refusal(head: &[u8; FRAME_HEADER_BYTES], error: &CodecError) {
    match error {
        CodecError::BadMagic(magic) => {
            assert_ne!(*magic, codec::MAGIC);
            assert_eq!(magic.to_be_bytes(), head[0..4]);
        }
        CodecError::BadVersion(version) => {
            assert_eq!(head[0..4], codec::MAGIC.to_be_bytes());
            assert_ne!(*version, codec::VERSION);
        }
        CodecError::Reserved(bits) => assert_ne!(*bits, 0),
        CodecError::TooLarge(bytes) => assert!(*bytes > FRAME_BODY_BYTES_MAX),
        other => panic!("a header refused for {other:?}"),
    }
}

/// Decodes `body` as a control message and as a fabric message; checks
/// whatever decodes.
fn check_body(kind: u8, body: &[u8]) {
    if let Ok(envelope) = Envelope::decode(kind, body) {
        let mut frame = Vec::new();
        envelope.encode(&mut frame);
        let (header, encoded_body) = check_frame(&frame);
        assert_eq!(header.kind, kind);
        let again = Envelope::decode(kind, encoded_body).expect("a re-encoded envelope decodes");
        assert_eq!(again, envelope, "envelope changed in a round trip");
        let mut frame_again = Vec::new();
        again.encode(&mut frame_again);
        assert_eq!(frame_again, frame, "envelope encoding is not stable");
    }
    if let Ok(message) = Fabric::decode(kind, body) {
        let mut frame = Vec::new();
        message.encode(&mut frame);
        let (header, encoded_body) = check_frame(&frame);
        assert_eq!(header.kind, kind);
        let again =
            Fabric::decode(kind, encoded_body).expect("a re-encoded fabric message decodes");
        assert_eq!(again, message, "fabric message changed in a round trip");
        let mut frame_again = Vec::new();
        again.encode(&mut frame_again);
        assert_eq!(frame_again, frame, "fabric encoding is not stable");
    }
}

/// A frame the encoder wrote: whole, every prefix incomplete, any flipped
/// bit of body or checksum refused.
fn check_frame(frame: &[u8]) -> (codec::FrameHeader, &[u8]) {
    let (header, body, total) = codec::split_frame(frame)
        .expect("an encoded frame is valid")
        .expect("an encoded frame is whole");
    assert_eq!(total, frame.len());
    for cut in [
        0,
        1,
        FRAME_HEADER_BYTES - 1,
        FRAME_HEADER_BYTES,
        frame.len() - 1,
    ] {
        if cut < frame.len() {
            assert_eq!(
                codec::split_frame(&frame[..cut]),
                Ok(None),
                "prefix of {cut}"
            );
        }
    }
    // Bits of the checksum field and, spread over the body, of the body.
    let mut positions: Vec<usize> = (12..FRAME_HEADER_BYTES).collect();
    let body_bytes = frame.len() - FRAME_HEADER_BYTES;
    for step in 0..16 {
        if body_bytes > 0 {
            positions.push(FRAME_HEADER_BYTES + step * body_bytes / 16);
        }
    }
    positions.dedup();
    let mut damaged = frame.to_vec();
    for (round, &at) in positions.iter().enumerate() {
        let bit = 1u8 << (round % 8);
        damaged[at] ^= bit;
        assert!(
            matches!(
                codec::split_frame(&damaged),
                Err(CodecError::ChecksumMismatch { .. })
            ),
            "bit {bit:#x} of byte {at} flipped and the frame still passed"
        );
        damaged[at] ^= bit;
    }
    (header, body)
}
