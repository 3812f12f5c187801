//! The model-visible text of a reading (TC-5), byte-exact, and its parser (for TC-7).
//!
//! A reading is exactly two lines joined by `\n`, with no trailing newline (the seed
//! shows the two lines and nothing after them):
//!
//! ```text
//! Time sampled while preparing turn <turn>, step 1: <timestamp>
//! Elapsed since the preceding model-visible message: <duration-or-unavailable>.
//! ```
//!
//! Later steps say `Elapsed since the preceding step context: …` on the second line.

use jiff::Timestamp;

use crate::zone::Zone;

/// The first line's fixed opening.
const SAMPLED: &str = "Time sampled while preparing turn ";
/// The second line of step 1, before the value.
const FIRST_STEP_ELAPSED: &str = "Elapsed since the preceding model-visible message: ";
/// The second line of later steps, before the value.
const LATER_STEP_ELAPSED: &str = "Elapsed since the preceding step context: ";
/// What a reading says when it has no baseline (TC-4.4).
pub(crate) const UNAVAILABLE: &str = "unavailable";

/// Renders `epoch_ms` in `zone` as `YYYY-MM-DDTHH:mm:ss±HH:MM[Zone]` (TC-5.1).
///
/// The instant is floored to its second, never rounded (`…:59.999` stays `…:59`, and
/// `-1` ms is `1969-12-31T23:59:59` in UTC). Years outside 0000..=9999 are written with
/// a sign and six digits; an offset with seconds (local mean time before ~1900) is
/// written `±HH:MM:SS`. Fails only for instants outside the supported range
/// (about ±9999 years).
pub fn render_timestamp(zone: &Zone, epoch_ms: i64) -> Result<String, String> {
    let second = epoch_ms.div_euclid(1000);
    let timestamp = Timestamp::from_second(second)
        .map_err(|_| format!("the instant {epoch_ms} ms is outside the supported range"))?;
    let zoned = timestamp.to_zoned_datetime(zone.time_zone().clone());
    let year = i32::from(zoned.year());
    let year_text = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", year.unsigned_abs())
    } else {
        format!("+{year:06}")
    };
    let offset_seconds = zoned.offset().seconds();
    let sign = if offset_seconds < 0 { '-' } else { '+' };
    let magnitude = offset_seconds.unsigned_abs();
    let (hours, minutes, seconds) = (magnitude / 3600, magnitude / 60 % 60, magnitude % 60);
    let offset = if seconds == 0 {
        format!("{sign}{hours:02}:{minutes:02}")
    } else {
        format!("{sign}{hours:02}:{minutes:02}:{seconds:02}")
    };
    Ok(format!(
        "{year_text}-{:02}-{:02}T{:02}:{:02}:{:02}{offset}[{}]",
        zoned.month(),
        zoned.day(),
        zoned.hour(),
        zoned.minute(),
        zoned.second(),
        zone.name(),
    ))
}

/// Renders an elapsed time (TC-5.2): floored to whole seconds, compact units
/// `Nd Nh Nm Ns` with d, h and m only when non-zero and s always. A negative value (a
/// clock that went backwards) renders `0s` (TC-4.3).
pub fn render_duration(elapsed_ms: i64) -> String {
    let total = elapsed_ms.max(0) / 1000;
    let (days, hours, minutes, seconds) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    let mut parts = Vec::with_capacity(4);
    if days != 0 {
        parts.push(format!("{days}d"));
    }
    if hours != 0 {
        parts.push(format!("{hours}h"));
    }
    if minutes != 0 {
        parts.push(format!("{minutes}m"));
    }
    parts.push(format!("{seconds}s"));
    parts.join(" ")
}

/// Renders a whole reading (TC-5): two lines joined by `\n`, no trailing newline.
///
/// `baseline_ms` is the durable time of the baseline event (TC-4); `None` renders
/// `unavailable`. Elapsed is `now_ms - baseline_ms`, clamped at zero.
pub fn render_reading(
    zone: &Zone,
    now_ms: i64,
    turn: u32,
    step: u32,
    baseline_ms: Option<i64>,
) -> Result<String, String> {
    let timestamp = render_timestamp(zone, now_ms)?;
    let elapsed = match baseline_ms {
        Some(baseline_ms) => render_duration(now_ms.saturating_sub(baseline_ms)),
        None => UNAVAILABLE.to_owned(),
    };
    let second_line = if step == 1 {
        FIRST_STEP_ELAPSED
    } else {
        LATER_STEP_ELAPSED
    };
    Ok(format!(
        "{SAMPLED}{turn}, step {step}: {timestamp}\n{second_line}{elapsed}."
    ))
}

/// Which wording the second line uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wording {
    /// "preceding model-visible message" (step 1).
    FirstStep,
    /// "preceding step context" (later steps).
    LaterStep,
}

/// A reading's text taken apart. Numbers are kept as written, so a turn of 0 is
/// reported by the turn rule rather than by the format rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedReading {
    pub(crate) turn: u64,
    pub(crate) step: u64,
    pub(crate) timestamp: String,
    pub(crate) wording: Wording,
    /// `None` for `unavailable`, else whole seconds.
    pub(crate) elapsed_seconds: Option<i64>,
    /// The elapsed value as written.
    pub(crate) elapsed_text: String,
}

/// Parses a reading's text; the error says what does not match TC-5.
pub(crate) fn parse_reading(text: &str) -> Result<ParsedReading, String> {
    let (first, second) = text
        .split_once('\n')
        .ok_or("the text is not two lines joined by a newline")?;
    if second.contains('\n') {
        return Err("the text has more than two lines".to_owned());
    }
    let rest = first
        .strip_prefix(SAMPLED)
        .ok_or_else(|| format!("the first line does not start with {SAMPLED:?}"))?;
    let (turn_text, rest) = rest
        .split_once(", step ")
        .ok_or("the first line has no \", step \"")?;
    let (step_text, timestamp) = rest
        .split_once(": ")
        .ok_or("the first line has no \": \" before the timestamp")?;
    let turn =
        parse_number(turn_text).ok_or_else(|| format!("turn {turn_text:?} is not a number"))?;
    let step =
        parse_number(step_text).ok_or_else(|| format!("step {step_text:?} is not a number"))?;
    let (wording, value) = if let Some(value) = second.strip_prefix(FIRST_STEP_ELAPSED) {
        (Wording::FirstStep, value)
    } else if let Some(value) = second.strip_prefix(LATER_STEP_ELAPSED) {
        (Wording::LaterStep, value)
    } else {
        return Err("the second line is neither elapsed wording of TC-5".to_owned());
    };
    let value = value
        .strip_suffix('.')
        .ok_or("the second line does not end with a full stop")?;
    let elapsed_seconds = if value == UNAVAILABLE {
        None
    } else {
        Some(parse_duration(value).ok_or_else(|| format!("elapsed {value:?} is not a duration"))?)
    };
    Ok(ParsedReading {
        turn,
        step,
        timestamp: timestamp.to_owned(),
        wording,
        elapsed_seconds,
        elapsed_text: value.to_owned(),
    })
}

/// Parses the timestamp of a reading: it must be exactly what [`render_timestamp`]
/// writes for some instant in its zone. Returns the zone and the epoch second.
pub(crate) fn parse_timestamp(text: &str) -> Option<(Zone, i64)> {
    let open = text.rfind('[')?;
    let name = text.get(open + 1..)?.strip_suffix(']')?;
    let zone = Zone::named(name).ok()?;
    let zoned = jiff::fmt::temporal::DateTimeParser::new()
        .parse_zoned_datetime_with(crate::zone::bundled(), text)
        .ok()?;
    let second = zoned.timestamp().as_second();
    if zoned.timestamp().subsec_nanosecond() != 0 {
        return None;
    }
    (render_timestamp(&zone, second.checked_mul(1000)?).ok()? == text).then_some((zone, second))
}

/// A canonical decimal: digits only, no leading zero unless it is `0`.
fn parse_number(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// Parses a canonical duration (what [`render_duration`] writes) into whole seconds.
fn parse_duration(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    for part in text.split(' ') {
        let unit = part.chars().last()?;
        let number = i64::try_from(parse_number(part.get(..part.len() - 1)?)?).ok()?;
        let scale = match unit {
            'd' => 86_400,
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        total = total.checked_add(number.checked_mul(scale)?)?;
    }
    (render_duration(total.checked_mul(1000)?) == text).then_some(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tc_5_2_durations() {
        let cases = [
            (0, "0s"),
            (999, "0s"),
            (59_999, "59s"),
            (60_000, "1m 0s"),
            (3_605_000, "1h 5s"),
            (90_061_000, "1d 1h 1m 1s"),
            (-5_000, "0s"),
            (86_400_000, "1d 0s"),
        ];
        for (ms, text) in cases {
            assert_eq!(render_duration(ms), text, "{ms}");
            assert_eq!(parse_duration(text), Some(ms.max(0) / 1000), "{text}");
        }
        assert_eq!(parse_duration("60s"), None);
        assert_eq!(parse_duration("0m 5s"), None);
        assert_eq!(parse_duration("1m"), None);
    }

    #[test]
    fn tc_5_parse_round_trips() {
        let zone = Zone::named("UTC").unwrap();
        let text = render_reading(&zone, 61_000, 2, 3, Some(0)).unwrap();
        let parsed = parse_reading(&text).unwrap();
        assert_eq!((parsed.turn, parsed.step), (2, 3));
        assert_eq!(parsed.wording, Wording::LaterStep);
        assert_eq!(parsed.elapsed_seconds, Some(61));
        assert_eq!(parse_timestamp(&parsed.timestamp).map(|(_, s)| s), Some(61));
        assert!(parse_timestamp("1970-01-01T00:01:01.5+00:00[UTC]").is_none());
        assert!(parse_timestamp("1970-01-01T00:01:01+01:00[UTC]").is_none());
        assert!(parse_reading(&format!("{text}\n")).is_err());
    }
}
