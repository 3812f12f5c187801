//! Fuzzes the SSE parser (H-LLM-7, H-TEST-3) with untrusted bytes.
//!
//! The first bytes of the input choose the limits and where to split the rest into feeds.
//! The target checks that parsing never panics, that any split gives the same events,
//! error and state as feeding the bytes whole and as feeding them one byte at a time, and
//! that the limits hold.
#![no_main]

use ccare_llm::sse::{SseError, SseEvent, SseParser};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    retry_ms: Option<u64>,
    last_event_id: Option<String>,
    line: u64,
}

fn run<'a>(mut parser: SseParser, pieces: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let mut events = Vec::new();
    let mut error = None;
    for piece in pieces {
        if let Err(failure) = parser.feed(piece, &mut events) {
            error = Some(failure);
            break;
        }
    }
    let line = parser.line();
    if error.is_none() {
        error = parser.finish(&mut events).err();
    }
    Outcome {
        events,
        error,
        retry_ms: parser.retry_ms(),
        last_event_id: parser.last_event_id().map(str::to_owned),
        line,
    }
}

fuzz_target!(|input: &[u8]| {
    let [limits, seed, body @ ..] = input else {
        return;
    };
    // Small limits half of the time, so that the limit paths are reached.
    let (max_line, max_event) = if limits & 0x80 == 0 {
        (SseParser::DEFAULT_MAX_LINE, SseParser::DEFAULT_MAX_EVENT)
    } else {
        (
            usize::from(limits & 0x0F) * 4,
            usize::from(limits >> 4 & 0x07) * 8,
        )
    };
    let parser = SseParser::with_limits(max_line, max_event);

    let whole = run(parser.clone(), [body]);

    // Piece lengths from a small xorshift generator seeded by `seed`.
    let mut state = u32::from(*seed) | 0x100;
    let mut pieces = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let len = (state as usize % 17).min(rest.len());
        let (piece, tail) = rest.split_at(len);
        pieces.push(piece);
        rest = tail;
    }
    assert_eq!(run(parser.clone(), pieces), whole);
    assert_eq!(run(parser, body.chunks(1)), whole);

    for event in &whole.events {
        assert!(event.data.len() <= max_event);
        assert!(event.line >= 1);
    }
    if let Some(error) = &whole.error {
        assert!(error.line() >= 1);
    }
});
