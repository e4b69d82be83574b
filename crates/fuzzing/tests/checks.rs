//! The checks themselves can fail: answers that break a property are
//! caught (a check that cannot fail would pass any server).

use bolide_fuzzing::answers;
use bolide_fuzzing::execute::{check_answer, without_throttle};
use bolide_fuzzing::fixture;
use bolide_wire::frame::{MessageType, ProtoHeader};
use bolide_wire::message::{encode_field, encode_header, MsgHeader};
use bolide_wire::{field_type, info1, info3};

fn frame(messages: &[MsgHeader]) -> Vec<u8> {
    let mut body = Vec::new();
    for header in messages {
        encode_header(&mut body, header);
    }
    let mut out = ProtoHeader::encode(MessageType::Message, body.len()).to_vec();
    out.extend_from_slice(&body);
    out
}

fn batch_request(rows: u32) -> Vec<u8> {
    let mut body = Vec::new();
    encode_header(
        &mut body,
        &MsgHeader {
            info1: info1::BATCH | info1::READ,
            n_fields: 1,
            ..MsgHeader::default()
        },
    );
    let mut batch = rows.to_be_bytes().to_vec();
    batch.push(0);
    encode_field(&mut body, field_type::BATCH_INDEX, &batch);
    body
}

#[test]
fn a_batch_missing_a_row_or_its_last_fails() {
    let row = MsgHeader::default();
    let last = MsgHeader {
        info3: info3::LAST,
        ..MsgHeader::default()
    };
    let request = batch_request(2);
    assert!(check_answer(&request, &frame(&[row, row, last])).is_ok());
    assert!(check_answer(&request, &frame(&[row, last])).is_err());
    assert!(check_answer(&request, &frame(&[row, row])).is_err());
    assert!(check_answer(&request, &frame(&[row, last, row, last])).is_err());
}

#[test]
fn unknown_result_codes_and_cut_frames_fail() {
    let bad_code = MsgHeader {
        result_code: 99,
        ..MsgHeader::default()
    };
    assert!(answers::frames(&frame(&[bad_code])).is_err());
    let good = frame(&[MsgHeader::default()]);
    assert!(answers::frames(&good).is_ok());
    assert!(answers::frames(&good[..good.len() - 1]).is_err());
    // A single-record request answered twice.
    let read = fixture::put_body(0);
    let twice = [good.clone(), good].concat();
    assert!(check_answer(&read, &twice).is_err());
}

#[test]
fn records_per_second_is_zeroed_and_nothing_else() {
    let mut body = Vec::new();
    encode_header(
        &mut body,
        &MsgHeader {
            n_fields: 2,
            ..MsgHeader::default()
        },
    );
    encode_field(&mut body, field_type::NAMESPACE, b"test");
    encode_field(&mut body, field_type::RECORDS_PER_SECOND, &[0, 0, 0, 5]);
    let copy = without_throttle(&body);
    assert_eq!(copy.len(), body.len());
    assert_eq!(&copy[..copy.len() - 4], &body[..body.len() - 4]);
    assert_eq!(&copy[copy.len() - 4..], &[0, 0, 0, 0]);
}

#[test]
fn the_fixture_answers_reads_of_its_records() {
    let node = fixture::node();
    assert_eq!(
        node.store()
            .namespace(b"test")
            .expect("namespace")
            .stats
            .objects
            .load(std::sync::atomic::Ordering::Relaxed),
        fixture::RECORDS as i64
    );
}

#[test]
fn the_connection_run_answers_pipelined_frames_and_closes_on_garbage() {
    use bolide_fuzzing::connection::{run, End};
    let mut stream = ProtoHeader::encode(MessageType::Info, 6).to_vec();
    stream.extend_from_slice(b"build\n");
    let put = fixture::put_body(3);
    stream.extend_from_slice(&ProtoHeader::encode(MessageType::Message, put.len()));
    stream.extend_from_slice(&put);
    stream.extend_from_slice(&[2, 3, 0]); // a frame header cut short
    for piece in [stream.len(), 1, 7] {
        let result = run(&stream, piece);
        assert_eq!(result.end, End::Waiting { pending: 3 });
        let frames = answers::frames(&result.output).expect("well-formed");
        assert_eq!(frames.len(), 2);
        assert_eq!(
            frames[0],
            answers::Frame::Info(b"build\t8.1.0.0\n".to_vec())
        );
        let answers::Frame::Messages(messages) = &frames[1] else {
            panic!("{frames:?}");
        };
        assert_eq!(messages[0].header.result_code, 0);
        assert_eq!(messages[0].header.generation, 2);
    }
    let result = run(b"GET / HTTP/1.1\r\n\r\n", 1);
    assert!(matches!(result.end, End::Closed(_)), "{:?}", result.end);
    assert!(result.output.is_empty());
}
