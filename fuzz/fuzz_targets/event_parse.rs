//! The event envelope parser on arbitrary text: no panic, and a parsed event keeps
//! its exact bytes and a `data` slice that is valid JSON.
#![no_main]

use ccare_core::Event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(event) = Event::parse(text) {
        assert_eq!(event.raw_json(), text);
        assert!(serde_json::from_str::<serde_json::Value>(event.data_json()).is_ok());
    }
});
