//! H-TEST-3 / H-LLM-7: property tests of the SSE parser.
//!
//! 1. Any list of events, rendered to SSE text with any line-ending style (with comments,
//!    unknown fields, extra blank lines and an optional BOM), parses back to exactly those
//!    events, however the bytes are split across feeds.
//! 2. Arbitrary bytes, split arbitrarily, never panic and give the same events, the same
//!    error and the same parser state as feeding them whole.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ccare_llm::sse::{SseError, SseEvent, SseParser};
use proptest::prelude::*;
use proptest::sample::Index;

/// What one parse produced: the events, the error that stopped it (if any), and the
/// parser's state at the end.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    retry_ms: Option<u64>,
    last_event_id: Option<String>,
    line: u64,
}

/// Feeds `bytes` cut at `cuts` (positions into `bytes`, any order), then finishes.
fn run(parser: SseParser, bytes: &[u8], cuts: &[usize]) -> Outcome {
    let mut parser = parser;
    let mut positions: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
    positions.push(0);
    positions.push(bytes.len());
    positions.sort_unstable();
    let mut events = Vec::new();
    let mut error = None;
    for window in positions.windows(2) {
        if let Err(failure) = parser.feed(&bytes[window[0]..window[1]], &mut events) {
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

/// One generated event and the noise around it.
#[derive(Debug, Clone)]
struct Spec {
    comment: Option<String>,
    event: Option<String>,
    id: Option<String>,
    data: Vec<String>,
    retry: Option<u64>,
    unknown_field: bool,
    extra_blank_lines: usize,
}

/// Text that may appear in a value: anything but CR and LF (NUL, BOM, colons and leading
/// spaces included).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\r\n]{0,12}",
        " {0,3}[a-z:{}\" ]{0,12}",
        Just("[DONE]".to_owned()),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        proptest::option::of("[^\r\n]{0,8}"),
        proptest::option::of("[A-Za-z0-9_.]{1,8}"),
        proptest::option::of("[^\r\n\0]{0,8}"),
        proptest::collection::vec(value(), 1..4),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
        0usize..3,
    )
        .prop_map(
            |(comment, event, id, data, retry, unknown_field, extra_blank_lines)| Spec {
                comment,
                event,
                id,
                data,
                retry,
                unknown_field,
                extra_blank_lines,
            },
        )
}

/// How lines end in a rendered stream.
#[derive(Debug, Clone, Copy)]
enum Endings {
    Lf,
    CrLf,
    Cr,
    /// Each line picks its own ending.
    Mixed,
}

/// How the last event is closed.
#[derive(Debug, Clone, Copy)]
enum Close {
    BlankLine,
    LineEndOnly,
    Nothing,
}

struct Renderer {
    bytes: Vec<u8>,
    line: u64,
    endings: Endings,
    choices: Vec<Index>,
    previous_ending: &'static str,
}

impl Renderer {
    fn ending(&mut self, blank: bool) -> &'static str {
        let ending = match self.endings {
            Endings::Lf => "\n",
            Endings::CrLf => "\r\n",
            Endings::Cr => "\r",
            Endings::Mixed => {
                let choice = self.choices[self.line as usize % self.choices.len()];
                let ending = ["\n", "\r\n", "\r"][choice.index(3)];
                // A lone CR followed by a blank line ending in LF would read as one CRLF.
                if blank && self.previous_ending == "\r" && ending == "\n" {
                    "\r\n"
                } else {
                    ending
                }
            }
        };
        self.previous_ending = ending;
        ending
    }

    /// Writes one line and returns its 1-based number.
    fn line(&mut self, text: &str) -> u64 {
        self.bytes.extend_from_slice(text.as_bytes());
        let ending = self.ending(text.is_empty());
        self.bytes.extend_from_slice(ending.as_bytes());
        self.line += 1;
        self.line
    }
}

/// Renders `specs` as an SSE stream; returns the bytes, the events a correct parser must
/// give and the final `retry` value.
fn render(
    specs: &[Spec],
    endings: Endings,
    choices: Vec<Index>,
    bom: bool,
    close: Close,
) -> (Vec<u8>, Vec<SseEvent>, Option<u64>) {
    let mut renderer = Renderer {
        bytes: Vec::new(),
        line: 0,
        endings,
        choices,
        previous_ending: "",
    };
    if bom {
        renderer.bytes.extend_from_slice("\u{FEFF}".as_bytes());
    }
    let mut expected = Vec::new();
    let mut last_event_id: Option<String> = None;
    let mut retry_ms = None;
    for (index, spec) in specs.iter().enumerate() {
        if let Some(comment) = &spec.comment {
            renderer.line(&format!(":{comment}"));
        }
        let mut first_line = None;
        let mut field = |renderer: &mut Renderer, text: String| {
            let line = renderer.line(&text);
            first_line.get_or_insert(line);
        };
        if let Some(event) = &spec.event {
            field(&mut renderer, format!("event:{event}"));
        }
        if let Some(id) = &spec.id {
            field(&mut renderer, format!("id: {id}"));
            last_event_id = (!id.is_empty()).then(|| id.clone());
        }
        if let Some(retry) = spec.retry {
            field(&mut renderer, format!("retry: {retry}"));
            retry_ms = Some(retry);
        }
        if spec.unknown_field {
            field(&mut renderer, "unknown: field".to_owned());
        }
        for data in &spec.data {
            // Always write the optional space, so a value's own leading spaces survive;
            // an empty value sometimes as a bare field name.
            if data.is_empty() && index % 2 == 0 {
                field(&mut renderer, "data".to_owned());
            } else {
                field(&mut renderer, format!("data: {data}"));
            }
        }
        let last = index + 1 == specs.len();
        if !last || matches!(close, Close::BlankLine) {
            renderer.line("");
        }
        if !last {
            for _ in 0..spec.extra_blank_lines {
                renderer.line("");
            }
        }
        expected.push(SseEvent {
            event: spec.event.clone(),
            data: spec.data.join("\n"),
            id: last_event_id.clone(),
            line: first_line.unwrap_or_default(),
        });
    }
    if matches!(close, Close::Nothing) && !specs.is_empty() {
        // Drop the last line terminator.
        let ending_len = renderer.previous_ending.len();
        renderer.bytes.truncate(renderer.bytes.len() - ending_len);
    }
    (renderer.bytes, expected, retry_ms)
}

fn endings() -> impl Strategy<Value = Endings> {
    prop_oneof![
        Just(Endings::Lf),
        Just(Endings::CrLf),
        Just(Endings::Cr),
        Just(Endings::Mixed),
    ]
}

fn close() -> impl Strategy<Value = Close> {
    prop_oneof![
        Just(Close::BlankLine),
        Just(Close::LineEndOnly),
        Just(Close::Nothing),
    ]
}

/// Arbitrary bytes, biased towards the pieces the parser cares about.
fn noisy_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        any::<u8>().prop_map(|byte| vec![byte]),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"data".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"event:".to_vec()),
        Just(b"id:".to_vec()),
        Just(b"retry: ".to_vec()),
        Just(b"123".to_vec()),
        Just(b"\0".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"\xEF\xBB".to_vec()),
        Just("é€".as_bytes().to_vec()),
        Just(b"[DONE]".to_vec()),
    ];
    proptest::collection::vec(token, 0..64).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn h_test_3_rendered_events_parse_back_under_any_split(
        specs in proptest::collection::vec(spec(), 0..6),
        endings in endings(),
        choices in proptest::collection::vec(any::<Index>(), 1..8),
        bom in any::<bool>(),
        close in close(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let (bytes, expected, retry_ms) = render(&specs, endings, choices, bom, close);
        let whole = run(SseParser::new(), &bytes, &[]);
        prop_assert_eq!(&whole.events, &expected);
        prop_assert_eq!(&whole.error, &None);
        prop_assert_eq!(whole.retry_ms, retry_ms);
        prop_assert_eq!(
            whole.last_event_id.as_deref(),
            expected.last().and_then(|event| event.id.as_deref())
        );
        let split = run(SseParser::new(), &bytes, &cuts);
        prop_assert_eq!(&split, &whole);
        let bytewise_cuts: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&run(SseParser::new(), &bytes, &bytewise_cuts), &whole);
    }

    #[test]
    fn h_test_3_arbitrary_bytes_split_anywhere_agree(
        bytes in prop_oneof![noisy_bytes(), proptest::collection::vec(any::<u8>(), 0..256)],
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
        max_line in prop_oneof![Just(SseParser::DEFAULT_MAX_LINE), 0usize..24],
        max_event in prop_oneof![Just(SseParser::DEFAULT_MAX_EVENT), 0usize..32],
    ) {
        let parser = SseParser::with_limits(max_line, max_event);
        let whole = run(parser.clone(), &bytes, &[]);
        let split = run(parser.clone(), &bytes, &cuts);
        prop_assert_eq!(&split, &whole);
        let bytewise_cuts: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&run(parser, &bytes, &bytewise_cuts), &whole);
        if let Some(error) = &whole.error {
            prop_assert!(error.line() >= 1);
            prop_assert!(!error.to_string().is_empty());
        }
        for event in &whole.events {
            prop_assert!(event.data.len() <= max_event);
            prop_assert!(event.line >= 1);
        }
    }
}
