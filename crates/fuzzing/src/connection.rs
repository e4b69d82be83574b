//! The connection layer: any bytes a client could send on one connection
//! (frames of every type, pipelined, compressed, cut anywhere, garbage),
//! answered by the server's own frame loop (`connection::answer_buffered`)
//! as `bolided` runs it, minus the socket: once with the whole stream
//! buffered, once fed a byte at a time (every byte boundary is a split).
//! Both runs start from a fresh fixture node on a frozen clock, so they must
//! answer the same frames and end the same way.

use crate::answers::{self, Frame};
use crate::fixture;
use bolide_server::connection::{answer_buffered, Close, Session, Step};
use std::net::SocketAddr;

/// A stream job must finish within this many chunks.
const CHUNKS_MAX: usize = 100_000;

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Every complete frame answered; `pending` bytes of an unfinished one.
    Waiting { pending: usize },
    /// The server closed the connection.
    Closed(String),
}

/// One run's result: the answer bytes and how it ended.
#[derive(Debug)]
pub struct Run {
    pub output: Vec<u8>,
    pub end: End,
}

/// Answers `stream` twice (whole, and a byte at a time) and checks both.
pub fn check(stream: &[u8]) {
    let whole = run(stream, stream.len().max(1));
    let split = run(stream, 1);
    let whole_frames = answers::frames(&whole.output)
        .unwrap_or_else(|reason| panic!("{reason}\nstream: {stream:02x?}"));
    let split_frames = answers::frames(&split.output)
        .unwrap_or_else(|reason| panic!("split: {reason}\nstream: {stream:02x?}"));
    assert_eq!(
        whole.end, split.end,
        "the stream ends differently when split\nstream: {stream:02x?}"
    );
    assert_eq!(
        comparable(&whole_frames),
        comparable(&split_frames),
        "the stream is answered differently when split\nstream: {stream:02x?}"
    );
    for frame in &whole_frames {
        if let Frame::Messages(messages) = frame {
            if messages.is_empty() {
                panic!("an empty message frame");
            }
        }
    }
}

/// Feeds `stream` to a fresh node in pieces of `piece` bytes, answering
/// after each piece as the connection loop does after each read.
pub fn run(stream: &[u8], piece: usize) -> Run {
    let node = fixture::node();
    let context = node.connection_context();
    let mut session = Session::new(
        &context,
        SocketAddr::from(([127, 0, 0, 1], 3000)),
        bolide_transaction::Caller::client(None),
    );
    let mut answered = Vec::new();
    for chunk in stream.chunks(piece) {
        session.input.extend(chunk);
        loop {
            let step = answer_buffered(&context, &mut session);
            assert!(
                session.pending.is_empty(),
                "a node alone needs no other node"
            );
            answered.append(&mut session.output);
            match step {
                Step::Read => break,
                Step::Flush => {}
                Step::Stream(mut job, _) => {
                    let mut chunks = 0;
                    while !job.fill(&mut answered) {
                        chunks += 1;
                        assert!(chunks <= CHUNKS_MAX, "stream job did not end");
                    }
                }
                Step::Inflate(bytes) => {
                    panic!("no room to inflate {bytes} bytes in an otherwise idle budget")
                }
                // Only a secured node hands admin messages back; the
                // fixture's node is open (it answers 52 inline).
                Step::Admin(_) => panic!("an open node handed back an admin message"),
                Step::Close(close) => {
                    return Run {
                        output: answered,
                        end: End::Closed(close_kind(&close)),
                    }
                }
            }
        }
    }
    Run {
        output: answered,
        end: End::Waiting {
            pending: session.input.len(),
        },
    }
}

fn close_kind(close: &Close) -> String {
    match close {
        Close::BadFrame(error) => format!("bad frame: {error}"),
        other => format!("{other:?}"),
    }
}

/// The frames with what may differ between two runs masked: info values
/// (uptime, memory figures), keeping each line's command name.
fn comparable(frames: &[Frame]) -> Vec<Frame> {
    frames
        .iter()
        .map(|frame| match frame {
            Frame::Info(text) => Frame::Info(
                text.split(|&byte| byte == b'\n')
                    .flat_map(|line| {
                        let name = line.split(|&byte| byte == b'\t').next().unwrap_or(line);
                        name.iter().copied().chain([b'\n'])
                    })
                    .collect(),
            ),
            other => other.clone(),
        })
        .collect()
}
