//! The chat-completions wire decoder on arbitrary bytes (issue 3: bad input from the
//! wire is `STREAM_PROTOCOL`, never a panic). Whatever the bytes, `decode_stream`
//! returns chunks or a failure; when it returns chunks they obey H-LLM-3 (the
//! assembler accepts every one, and the last is the only finish).
#![no_main]

use ccare_llm::openai::decode_stream;
use ccare_llm::{Assembler, Chunk, FailureCode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(1, |byte| usize::from(*byte % 64) + 1);
    match decode_stream(data.chunks(split), "fuzz") {
        Ok(chunks) => {
            let mut assembler = Assembler::new();
            for chunk in &chunks {
                assert!(assembler.push(chunk).is_ok(), "{chunk:?} breaks H-LLM-3");
            }
            let finishes = chunks.iter().filter(|chunk| matches!(chunk, Chunk::Finish(_))).count();
            assert_eq!(finishes, 1);
            assert!(matches!(chunks.last(), Some(Chunk::Finish(_))));
        }
        Err(failure) => assert!(
            matches!(failure.code, FailureCode::StreamProtocol | FailureCode::ContextWindowExceeded | FailureCode::RateLimited | FailureCode::ProviderUnavailable),
            "{failure:?}"
        ),
    }
});
