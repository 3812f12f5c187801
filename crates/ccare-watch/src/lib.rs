//! Detection engines over model output (spec watch-rules-ui.md §1, §2, §4). Pure code:
//! no I/O, no host types; the plugin that wires them into the agent feeds them text
//! and acts on what they report.
//!
//! - [`engine`]: the stream watch (SW-1 .. SW-7): views over streamed text and
//!   reasoning, detectors, triggers and their firing state per agent.
//! - [`shapes`]: the pre-step loop shapes (LS-1, LS-2) over a committed reply.
//! - [`pattern`]: the output-pattern detector (OP-1 .. OP-5).
//! - [`plugin`]: the `stream-watch` plugin that wires the stream watch and the loop
//!   shapes into the agent (the only module that knows host types).

pub mod completion;
pub mod engine;
pub mod pattern;
pub mod plugin;
pub mod shapes;
pub mod tool_loop;
