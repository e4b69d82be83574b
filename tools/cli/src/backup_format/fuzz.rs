//! Properties of the `.asb` decoder on any input, checked by the `asb`
//! fuzz target (`fuzz/fuzz_targets/asb.rs`) and by the corpus replay
//! (`tools/cli/tests/backup_fuzz_corpus.rs`):
//!
//! - no panic, and decoding always ends (every error is followed by a skip
//!   that moves forward or reaches the end);
//! - an error names a line and byte inside the input (line ≤ newlines + 1,
//!   byte ≤ length);
//! - every item decoded re-encodes (both blob forms) to text that decodes
//!   to the same item, and that text is canonical: encoding it again gives
//!   the same bytes.

use crate::asb::{encode_header, encode_item, Decoder, Item};

/// Blocks looked at per input, at most.
const ITEMS_MAX: usize = 10_000;

pub fn check(input: &[u8]) {
    let newlines = input.iter().filter(|&&byte| byte == b'\n').count() as u64;
    let in_bounds =
        |line: u64, byte: u64| line >= 1 && line <= newlines + 1 && byte <= input.len() as u64;
    let mut decoder = match Decoder::new(input) {
        Ok(decoder) => decoder,
        Err(error) => {
            assert!(
                in_bounds(error.line, error.byte),
                "{error} outside the input"
            );
            return;
        }
    };
    for _ in 0..ITEMS_MAX {
        let before = decoder.offset();
        match decoder.next_item() {
            Ok(None) => return,
            Ok(Some(item)) => {
                assert!(decoder.offset() > before, "an item consumed nothing");
                round_trip(&item);
            }
            Err(error) => {
                assert!(
                    in_bounds(error.line, error.byte),
                    "{error} outside the input"
                );
                assert!(error.byte >= before, "{error} before the block it is in");
                match decoder.skip_to_next_block() {
                    Ok(true) => {
                        // The skip must move past the block that failed.
                        if decoder.offset() == before {
                            return;
                        }
                    }
                    Ok(false) => return,
                    Err(error) => {
                        assert!(
                            in_bounds(error.line, error.byte),
                            "{error} outside the input"
                        );
                        return;
                    }
                }
            }
        }
    }
}

fn round_trip(item: &Item) {
    for compact in [false, true] {
        let mut text = Vec::new();
        encode_header("3.2", b"ns", false, &mut text);
        encode_item(item, compact, &mut text);
        let mut decoder = Decoder::new(&text[..]).expect("an encoded header decodes");
        let back = decoder
            .next_item()
            .unwrap_or_else(|error| panic!("{item:?} encoded to text that fails: {error}"))
            .expect("an encoded item decodes");
        assert_eq!(&back, item, "round trip changed the item");
        assert_eq!(
            decoder.next_item(),
            Ok(None),
            "an encoded item left bytes over"
        );
        let mut again = Vec::new();
        encode_header("3.2", b"ns", false, &mut again);
        encode_item(&back, compact, &mut again);
        assert_eq!(again, text, "encoding is not canonical");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn checks_hold_on_hand_made_inputs() {
        super::check(b"");
        super::check(b"Version 3.1\n");
        super::check(b"Version 3.1\n# namespace a\\ b\n+ n x\n+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ g 0\n+ t 0\n+ b 1\n- D d nan\n");
        super::check(b"Version 3.1\n+ k B! 2 \n\n+ n x\n+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ g 0\n+ t 0\n+ b 0\n* e n s i N 1  N AAAA\n");
        super::check(b"Version 3.1\nzzz\n+ n x\n+ n y\n* u L a 99999999999 x\n");
    }
}
