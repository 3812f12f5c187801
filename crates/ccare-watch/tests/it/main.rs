//! Integration tests of the stream watch engine (SW-*) and the loop shapes (LS-*), named
//! after the spec ids they check. One test binary; one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod completion;
mod composition;
mod config;
mod detectors;
mod firing;
mod plugin;
mod policy;
mod prompts;
mod props;
mod shapes;
mod view;

use ccare_watch::engine::{Firing, Frame, StreamWatch, Triggers};
use serde_json::Value;

/// Which stream a test feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `text-delta`s.
    Text,
    /// `reasoning-delta`s.
    Reasoning,
}

/// A watch over the triggers of a JSON array, already started.
pub fn watch(triggers: Value) -> StreamWatch {
    let mut watch = StreamWatch::new(Triggers::from_json(&triggers).unwrap());
    assert!(watch.observe(Frame::Start).is_empty());
    watch
}

/// A watch over the default triggers, already started.
pub fn default_watch() -> StreamWatch {
    let mut watch = StreamWatch::new(Triggers::defaults());
    watch.observe(Frame::Start);
    watch
}

/// One frame of `source`.
pub fn frame(source: Source, delta: &str) -> Frame<'_> {
    match source {
        Source::Text => Frame::Text(delta),
        Source::Reasoning => Frame::Reasoning(delta),
    }
}

/// Feeds `text` in deltas of `chars` characters and collects the firings.
pub fn feed(watch: &mut StreamWatch, source: Source, text: &str, chars: usize) -> Vec<Firing> {
    let all: Vec<char> = text.chars().collect();
    let mut firings = Vec::new();
    for piece in all.chunks(chars.max(1)) {
        let delta: String = piece.iter().collect();
        firings.extend(watch.observe(frame(source, &delta)));
    }
    firings
}

/// A marker trigger `{id: "m"}` with these actions and scope.
pub fn marker_trigger(marker: &str, scope: &str, actions: &[&str]) -> Value {
    serde_json::json!({
        "id": "m",
        "detector": {"kind": "marker", "params": {"marker": marker}},
        "scope": scope,
        "actions": actions,
    })
}

/// A line-repeat trigger `{id: "lr"}` with these thresholds; windowed if `every` is set.
pub fn line_repeat_trigger(params: Value, every: Option<usize>) -> Value {
    let mut trigger = serde_json::json!({
        "id": "lr",
        "detector": {"kind": "line-repeat", "params": params},
        "scope": "combined",
        "actions": ["notice", "abort", "resume"],
    });
    if let Some(every) = every {
        trigger["mode"] = "windowed".into();
        trigger["everyChars"] = every.into();
    }
    trigger
}
