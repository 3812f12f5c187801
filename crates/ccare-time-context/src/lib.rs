//! time-context: an optional, durable reading of the local time and of the time that
//! has passed, added before each model request is prepared (spec time-context.md,
//! from the README of `@deepseek-ai/dsh-time-context`).
//!
//! # Configuration
//!
//! ```toml
//! [plugins.time-context]
//! time_zone = "Asia/Shanghai"     # optional IANA id; omit for the process zone
//! refresh_interval_ms = 60000     # optional; omit or 0 = every eligible attempt
//!
//! [plugins.time-context-invariant] # recommended companion: checks every reading
//! ```
//!
//! - `time_zone` omitted: the process zone is resolved once, at load: `TZ` when set
//!   (`Name`, `:Name` or a path ending in `zoneinfo/Name`; empty means `UTC`), else the
//!   system zone (`/etc/localtime`). A zone without an IANA name (a POSIX rule string
//!   in `TZ`, an unnamed `/etc/localtime`) is a load error: set `time_zone`.
//! - An explicit `time_zone` must be an IANA identifier (`UTC` allowed; matched
//!   case-insensitively and shown as the database spells it), checked at load.
//! - Zone names and rules always come from the tz database bundled into the binary,
//!   so a reading never depends on the machine's `/usr/share/zoneinfo`.
//! - `refresh_interval_ms` must be an integer in 0 ..= 2^53-1.
//! - Unknown keys are refused. Errors are prefixed with the plugin name, e.g.
//!   `time-context: refresh_interval_ms must be a non-negative safe integer, got -1`.
//!
//! Nothing mounts the plugin by default. [`TimeContext`] (`time-context`) adds the
//! readings; [`TimeContextInvariant`] (`time-context-invariant`) registers the TC-7
//! validator, which vetoes a malformed or misplaced reading before it is committed.
//! They are separate so the checker can also guard logs written elsewhere; mount both.
//!
//! # What the model sees
//!
//! When a reading is due, the plugin's outermost pre-step hook samples the clock and
//! adds one user-role message to the batch of the step being prepared. The kernel logs
//! it after `step/start` and before the step's `request/header`; inner pre-step hooks
//! (automatic compaction, the status notice) see and price it. Its text is two lines,
//! joined by `\n`, with no trailing newline. Step 1 of a turn:
//!
//! ```text
//! Time sampled while preparing turn 3, step 1: 2026-07-16T09:30:05+08:00[Asia/Shanghai]
//! Elapsed since the preceding model-visible message: 1m 0s.
//! ```
//!
//! Later steps:
//!
//! ```text
//! Time sampled while preparing turn 3, step 2: 2026-07-16T09:30:12+08:00[Asia/Shanghai]
//! Elapsed since the preceding step context: 7s.
//! ```
//!
//! - The timestamp is the local time with its numeric offset and IANA zone, floored
//!   to the second; durations are floored to whole seconds, in `Nd Nh Nm Ns` with only
//!   the non-zero larger units (`0s`, `59s`, `1m 0s`, `1h 5s`, `1d 1h 1m 1s`).
//! - Step 1 measures from the newest `user/message`, `assistant/message` or
//!   `tool/result` in the log: normally the prompt that opened the turn, so a prompt
//!   that waited shows the wait before it was claimed. Later steps measure from the
//!   previous reading of the same turn. With no such baseline the value is
//!   `unavailable`; a clock that went backwards gives `0s`.
//! - The source is `{kind: "plugin", plugin: "time-context", form: "snapshot",
//!   sections: [{name: "time-context", text}]}`. Nothing goes into the system prompt
//!   or the request headers.
//!
//! # When
//!
//! With interval 0 every step-preparation attempt whose cancellation has not fired
//! gets a reading. With a positive interval a reading is added only if the session has
//! none yet, the clock went backwards since the latest one, or at least the interval
//! has passed since it (exactly the interval is due). The latest reading is found in
//! the raw durable log, readings hidden by compaction included, so the schedule holds
//! across turns and restarts, per session, without process state.
//!
//! # Token and KV-cache impact
//!
//! Readings are appended after the reusable request prefix, so cached prefixes stay
//! valid. Each reading (about 40 tokens) stays in the history until a compaction hides
//! it; a positive interval adds fewer, but never removes existing ones.
//!
//! # Known limits
//!
//! - Whole seconds only, although durable event times keep milliseconds.
//! - Baselines are durable append times, not the times clients sent messages.
//! - The default zone is the process zone at load, not the remote user's: configure
//!   `time_zone` when they differ.
//! - A reading records a preparation attempt, not a committed step or a sent request.
//!   Once logged it stays even if the step then fails; the plugin never rolls back.
//!   (If an inner pre-step hook rejects the step, the kernel enters none of the
//!   batch, so no reading is logged for that attempt.)
//! - With interval 0 every eligible attempt keeps a reading; a positive interval
//!   reduces but does not remove that cost.
//!
//! # Layout
//!
//! `zone.rs` resolves zones, `config.rs` validates the table, `render.rs` writes (and
//! parses) the text, `events.rs` reads the raw log, `plugin.rs` holds the hook, and
//! `invariant.rs` the TC-7 checker ([`check_log`] runs it over an existing log).

#![deny(missing_docs)]

mod config;
mod events;
mod invariant;
mod plugin;
mod render;
mod zone;

pub use config::TimeContextConfig;
pub use invariant::{VALIDATOR, check_event, check_log, invariant_validator};
pub use plugin::{
    TimeContext, TimeContextInvariant, baseline_ms, reading_due, reading_message, reading_source,
};
pub use render::{render_duration, render_reading, render_timestamp};
pub use zone::Zone;
