//! Untrusted session files (issue 2: "fuzz targets for every parser of untrusted
//! input"): the JSONL framing, the event envelope parser and replay with the host's
//! validators, on arbitrary bytes. Whatever the bytes: no panic; an accepted file
//! replays to a log whose head is its line count and whose events re-encode to the
//! exact lines given.
#![no_main]

use ccare_session::jsonl::parse_file;
use ccare_session::{LoadPolicy, Registry, replay};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = parse_file(data) else {
        return;
    };
    let registry = Registry::with_host_defaults();
    let lines: Vec<String> = file.lines.iter().map(|line| (*line).to_owned()).collect();
    if let Ok(replayed) = replay(&file.id, lines.clone(), &registry, &LoadPolicy::default()) {
        assert_eq!(replayed.log.head(), lines.len() as u64);
        for (event, line) in replayed.log.events().iter().zip(&lines) {
            assert_eq!(event.raw_json(), line.as_str());
        }
    }
});
