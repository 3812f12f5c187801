//! Input checks both backends run before a write, so they accept and refuse exactly
//! the same things with the same messages.

use ccare_core::SessionId;

use crate::error::StoreError;
use crate::types::{MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES, StoredEvent};

/// Checks that `events` carry seqs `start, start + 1, ...`; returns the head after them.
/// Seqs stay within `i64` (SQLite's integer), so both backends accept the same logs.
pub(crate) fn check_seqs(
    what: &'static str,
    session: &SessionId,
    start: u64,
    events: &[StoredEvent],
) -> Result<u64, StoreError> {
    let invalid = |detail: String| StoreError::Invalid {
        what,
        detail: format!("session {session}: {detail}"),
    };
    let count = u64::try_from(events.len()).unwrap_or(u64::MAX);
    let head = start
        .checked_add(count)
        .filter(|head| i64::try_from(*head).is_ok())
        .ok_or_else(|| {
            invalid(format!(
                "{count} events from seq {start} overflow the seq range"
            ))
        })?;
    for (seq, (index, event)) in (start..).zip(events.iter().enumerate()) {
        if event.seq != seq {
            return Err(invalid(format!(
                "event #{index} has seq {}, but the events must be numbered {start}, {}, ... without gaps",
                event.seq,
                start.saturating_add(1)
            )));
        }
    }
    Ok(head)
}

/// Checks a KV write against [`MAX_KV_KEY_BYTES`] and [`MAX_KV_VALUE_BYTES`].
pub(crate) fn check_kv(domain: &str, key: &str, value: Option<&[u8]>) -> Result<(), StoreError> {
    if key.len() > MAX_KV_KEY_BYTES {
        return Err(StoreError::Invalid {
            what: "kv key",
            detail: format!(
                "kv {domain}/{}: the key is {} bytes, the limit is {MAX_KV_KEY_BYTES}",
                preview(key),
                key.len()
            ),
        });
    }
    if let Some(value) = value
        && value.len() > MAX_KV_VALUE_BYTES
    {
        return Err(StoreError::Invalid {
            what: "kv value",
            detail: format!(
                "kv {domain}/{}: the value is {} bytes, the limit is {MAX_KV_VALUE_BYTES}",
                preview(key),
                value.len()
            ),
        });
    }
    Ok(())
}

/// The first characters of a key, for messages.
pub(crate) fn preview(key: &str) -> String {
    const SHOWN: usize = 64;
    match key.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}... ({} bytes)", &key[..end], key.len()),
        None => key.to_owned(),
    }
}
