//! Fuzzes the stream watch (SW-1 .. SW-7) with untrusted model output: any bytes,
//! read as UTF-8 (lossily), cut into text and reasoning deltas at positions the input
//! chooses. The engine must never panic, and the same text in any split must give the
//! same firings as feeding it one character at a time (split invariance).
#![no_main]

use ccare_watch::engine::{Frame, StreamWatch, Triggers};
use libfuzzer_sys::fuzz_target;

fn firings(pieces: &[(bool, String)]) -> Vec<String> {
    let mut watch = StreamWatch::new(Triggers::defaults());
    watch.observe(Frame::Start);
    let mut seen = Vec::new();
    for (reasoning, text) in pieces {
        let frame = if *reasoning {
            Frame::Reasoning(text)
        } else {
            Frame::Text(text)
        };
        for firing in watch.observe(frame) {
            seen.push(format!("{} {:?}", firing.trigger, firing.evidence));
        }
    }
    seen
}

fuzz_target!(|data: &[u8]| {
    let Some((&cuts, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let chars: Vec<char> = text.chars().collect();
    // Pieces of 1..=8 characters, chosen by the cut byte; the source switches every piece
    // when the low bit says so.
    let mut pieces = Vec::new();
    let mut single = Vec::new();
    let mut at = 0;
    let mut step = 0usize;
    while at < chars.len() {
        let size = 1 + (usize::from(cuts).wrapping_add(step * 7) % 8);
        let end = (at + size).min(chars.len());
        let reasoning = cuts & 1 == 1 && step % 2 == 0;
        let piece: String = chars[at..end].iter().collect();
        for c in piece.chars() {
            single.push((reasoning, c.to_string()));
        }
        pieces.push((reasoning, piece));
        at = end;
        step += 1;
    }
    assert_eq!(firings(&pieces), firings(&single), "split invariance");
});
