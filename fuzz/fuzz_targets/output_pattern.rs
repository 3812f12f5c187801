//! Fuzzes the output-pattern detector (OP-2, OP-3) and the completion detector (CO-1)
//! with untrusted model output: statement extraction, metrics and completion detection
//! must never panic, and every statement's UTF-16 offsets must slice the original text
//! on character boundaries.
#![no_main]

use ccare_watch::completion::detect_completion;
use ccare_watch::pattern::{extract_statements, fixture_1, measure};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let units: Vec<u16> = text.encode_utf16().collect();
    for statement in extract_statements(&text) {
        assert!(statement.start <= statement.end && statement.end <= units.len());
        assert!(String::from_utf16(&units[statement.start..statement.end]).is_ok());
    }
    let _ = measure(&fixture_1(), &text);
    let _ = detect_completion(&text);
});
