//! The line window of a view (SW-2): the last `LINE_WINDOW` lines with synced counts,
//! kept in reusable slots so that a line joining the window allocates nothing once the
//! buffers have grown (SW-3, issue 14).
//!
//! Each distinct line of the window has one slot (where its text lies, its count and
//! insertion stamp); the window is a ring of slot numbers, and an open-addressed table
//! finds a line's slot by hash. The texts lie in one arena that is compacted into a
//! spare buffer once its dead text outweighs the live, so both buffers stop growing
//! at about twice the window's text. A slot whose count drops to 0 is freed, so a
//! line that comes back is inserted anew (the insertion order ties go by, SW-4).

use std::collections::VecDeque;

use super::view::LINE_WINDOW;

/// Table positions: a power of two well above the most distinct lines (`LINE_WINDOW` + 1),
/// so probes stay short.
const TABLE: usize = 256;
/// An empty table position.
const EMPTY: u16 = u16::MAX;

/// A distinct line of the window: its slot. Valid until the line leaves the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineKey(u16);

/// Below this many dead bytes the arena is not compacted.
const MIN_COMPACT: usize = 4_096;

/// One distinct line: where its text lies in the arena, how often it is in the window
/// (0: the slot is free), and when it was inserted.
#[derive(Debug, Clone, Default)]
struct Slot {
    start: usize,
    len: usize,
    hash: u64,
    count: usize,
    inserted: u64,
}

/// The last `LINE_WINDOW` lines with synced counts (SW-2): a line's count is how often
/// it is in the window, and a key whose count drops to 0 is deleted, so a line that
/// comes back is inserted anew (this is the insertion order ties go by, SW-4).
///
/// Identical lines in the window share one slot, so runs compare by slot.
#[derive(Debug, Clone)]
pub struct LineWindow {
    /// Slot numbers, oldest line first.
    order: VecDeque<u16>,
    slots: Vec<Slot>,
    /// The texts of the slots, back to back, with dead text of freed slots between:
    /// bytes, as the view hands lines over (each a whole UTF-8 text, so every slot's
    /// range is UTF-8, read back through [`utf8`]).
    arena: Vec<u8>,
    /// Where a compaction copies the live texts; then the two swap.
    spare: Vec<u8>,
    /// The bytes of live texts in the arena.
    live: usize,
    /// Free slot numbers, the most recently freed last.
    free: Vec<u16>,
    /// Slot number by hash, linear probing; `EMPTY` where none.
    table: [u16; TABLE],
    distinct: usize,
    /// `by_count[c]`: how many distinct lines are in the window `c` times, so the
    /// highest count is known without a scan.
    by_count: [u8; LINE_WINDOW + 2],
    /// The highest count of a line in the window (0 when empty).
    max_count: usize,
    next_insert: u64,
}

impl Default for LineWindow {
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            slots: Vec::new(),
            arena: Vec::new(),
            spare: Vec::new(),
            live: 0,
            free: Vec::new(),
            table: [EMPTY; TABLE],
            distinct: 0,
            by_count: [0; LINE_WINDOW + 2],
            max_count: 0,
            next_insert: 0,
        }
    }
}

impl LineWindow {
    /// How many lines are in the window (at most `LINE_WINDOW`).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the window has no line yet.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The lines in the window, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(|slot| self.slot_text(*slot))
    }

    /// How often `line` is in the window (0 if it has no key).
    pub fn count(&self, line: &str) -> usize {
        let line = line.as_bytes();
        self.find(line, line_hash(line))
            .and_then(|(_, slot)| self.slots.get(usize::from(slot)))
            .map_or(0, |slot| slot.count)
    }

    /// How many distinct lines have a key; every key has a count of at least 1.
    pub fn distinct(&self) -> usize {
        self.distinct
    }

    /// The window's lines with their counts, each distinct line once, in no order.
    pub fn counts(&self) -> impl Iterator<Item = (&str, usize)> {
        self.slots
            .iter()
            .filter(|slot| slot.count > 0)
            .map(|slot| (utf8(self.text_at(slot)), slot.count))
    }

    /// Empties the window, keeping its buffers for the next attempt.
    pub(crate) fn clear(&mut self) {
        self.order.clear();
        self.free.clear();
        for (number, slot) in self.slots.iter_mut().enumerate().rev() {
            slot.count = 0;
            if let Ok(number) = u16::try_from(number) {
                self.free.push(number);
            }
        }
        self.table.fill(EMPTY);
        self.arena.clear();
        self.live = 0;
        self.distinct = 0;
        self.by_count.fill(0);
        self.max_count = 0;
        self.next_insert = 0;
    }

    /// Adds a line and evicts the oldest beyond `LINE_WINDOW`, keeping counts in sync.
    /// The line is the UTF-8 bytes of a whole text (the view's buffer holds only such
    /// ranges), so it is stored and compared as bytes without being validated.
    pub(crate) fn push(&mut self, line: &[u8]) {
        let hash = line_hash(line);
        let slot = match self.find(line, hash) {
            Some((_, slot)) => slot,
            None => match self.insert(line, hash) {
                Some(slot) => slot,
                None => return,
            },
        };
        let count = match self.slots.get_mut(usize::from(slot)) {
            Some(entry) => {
                entry.count += 1;
                entry.count
            }
            None => return,
        };
        self.recount(count - 1, count);
        self.max_count = self.max_count.max(count);
        self.order.push_back(slot);
        while self.order.len() > LINE_WINDOW {
            if let Some(oldest) = self.order.pop_front() {
                self.decrement(oldest);
            }
        }
    }

    /// The text of a distinct line.
    pub(crate) fn text(&self, key: LineKey) -> &str {
        self.slot_text(key.0)
    }

    /// How often a distinct line is in the window.
    pub(crate) fn count_of(&self, key: LineKey) -> usize {
        self.slots
            .get(usize::from(key.0))
            .map_or(0, |slot| slot.count)
    }

    /// The highest count of a line in the window: the worst line's count. O(1).
    pub(crate) fn max_count(&self) -> usize {
        self.max_count
    }

    /// A line's count went from `was` to `now`: moves it between the count buckets.
    fn recount(&mut self, was: usize, now: usize) {
        if was > 0
            && let Some(lines) = self.by_count.get_mut(was)
        {
            *lines = lines.saturating_sub(1);
        }
        if now > 0
            && let Some(lines) = self.by_count.get_mut(now)
        {
            *lines = lines.saturating_add(1);
        }
    }

    /// The worst line (SW-4): the highest count, ties going to the earliest inserted key.
    pub(crate) fn worst(&self) -> Option<(LineKey, usize)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.count > 0)
            .min_by_key(|(_, slot)| (std::cmp::Reverse(slot.count), slot.inserted))
            .and_then(|(number, slot)| Some((LineKey(u16::try_from(number).ok()?), slot.count)))
    }

    /// The longest run of identical adjacent lines in the window (ties to the earliest)
    /// and, if `of` is given, the longest run of that line: `(line, run, run_of)`.
    pub(crate) fn runs(&self, of: Option<LineKey>) -> Option<(LineKey, usize, usize)> {
        let mut best: Option<(u16, usize)> = None;
        let mut best_of = 0;
        let mut current: Option<(u16, usize)> = None;
        for &line in &self.order {
            let run = match current {
                Some((previous, run)) if previous == line => run + 1,
                _ => 1,
            };
            current = Some((line, run));
            if best.is_none_or(|(_, longest)| run > longest) {
                best = Some((line, run));
            }
            if of.is_some_and(|wanted| wanted.0 == line) {
                best_of = best_of.max(run);
            }
        }
        best.map(|(line, run)| (LineKey(line), run, best_of))
    }

    fn slot_text(&self, slot: u16) -> &str {
        self.slots
            .get(usize::from(slot))
            .map_or("", |slot| utf8(self.text_at(slot)))
    }

    fn text_at(&self, slot: &Slot) -> &[u8] {
        self.arena
            .get(slot.start..slot.start + slot.len)
            .unwrap_or_default()
    }

    /// Copies the live texts into the spare buffer and swaps the two, once the dead
    /// text outweighs the live: O(live) after at least as many bytes were appended.
    fn compact_if_needed(&mut self) {
        let dead = self.arena.len() - self.live;
        if dead < MIN_COMPACT || dead < self.live {
            return;
        }
        self.spare.clear();
        for slot in self.slots.iter_mut().filter(|slot| slot.count > 0) {
            let text = self
                .arena
                .get(slot.start..slot.start + slot.len)
                .unwrap_or_default();
            slot.start = self.spare.len();
            self.spare.extend_from_slice(text);
        }
        std::mem::swap(&mut self.arena, &mut self.spare);
    }

    /// The table position and slot of `line`, if it has a key.
    fn find(&self, line: &[u8], hash: u64) -> Option<(usize, u16)> {
        let mut position = home(hash);
        for _ in 0..TABLE {
            let slot = *self.table.get(position)?;
            if slot == EMPTY {
                return None;
            }
            if self
                .slots
                .get(usize::from(slot))
                .is_some_and(|entry| entry.hash == hash && self.text_at(entry) == line)
            {
                return Some((position, slot));
            }
            position = (position + 1) % TABLE;
        }
        None
    }

    /// Gives `line` a slot (a freed one if any) and a table position; `None` only if
    /// the table is full, which the window's size rules out.
    fn insert(&mut self, line: &[u8], hash: u64) -> Option<u16> {
        let mut position = home(hash);
        while *self.table.get(position)? != EMPTY {
            position = (position + 1) % TABLE;
            if position == home(hash) {
                return None;
            }
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u16::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot::default());
                slot
            }
        };
        self.next_insert += 1;
        self.compact_if_needed();
        let entry = self.slots.get_mut(usize::from(slot))?;
        entry.start = self.arena.len();
        entry.len = line.len();
        self.arena.extend_from_slice(line);
        self.live += line.len();
        entry.hash = hash;
        entry.count = 0;
        entry.inserted = self.next_insert;
        *self.table.get_mut(position)? = slot;
        self.distinct += 1;
        Some(slot)
    }

    fn decrement(&mut self, slot: u16) {
        let Some(entry) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let was = entry.count;
        entry.count = was.saturating_sub(1);
        let (now, hash, len) = (entry.count, entry.hash, entry.len);
        self.recount(was, now);
        if was == self.max_count && self.by_count.get(was).is_none_or(|lines| *lines == 0) {
            // The line held the only highest count; it now has one less.
            self.max_count = now;
        }
        if now > 0 {
            return;
        }
        self.live = self.live.saturating_sub(len);
        let mut position = home(hash);
        for _ in 0..TABLE {
            match self.table.get(position) {
                Some(&found) if found == slot => {
                    self.remove_at(position);
                    break;
                }
                Some(&EMPTY) | None => break,
                Some(_) => position = (position + 1) % TABLE,
            }
        }
        self.free.push(slot);
        self.distinct = self.distinct.saturating_sub(1);
    }

    /// Empties a table position, shifting later entries of the probe run back so that
    /// every remaining line is still found from its home position.
    fn remove_at(&mut self, mut hole: usize) {
        let mut next = hole;
        loop {
            next = (next + 1) % TABLE;
            let Some(&slot) = self.table.get(next) else {
                break;
            };
            if slot == EMPTY {
                break;
            }
            let wanted = self
                .slots
                .get(usize::from(slot))
                .map_or(next, |entry| home(entry.hash));
            // The entry at `next` stays if its home lies cyclically in (hole, next].
            let stays = if hole <= next {
                hole < wanted && wanted <= next
            } else {
                hole < wanted || wanted <= next
            };
            if !stays {
                if let Some(target) = self.table.get_mut(hole) {
                    *target = slot;
                }
                hole = next;
            }
        }
        if let Some(target) = self.table.get_mut(hole) {
            *target = EMPTY;
        }
    }
}

/// The text of a slot's range: always UTF-8 (see `LineWindow::arena`), so the empty
/// fallback is never taken.
fn utf8(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// A line's table position from its hash (the high bits, the best mixed).
fn home(hash: u64) -> usize {
    (hash >> 56) as usize % TABLE
}

/// A fast 64-bit hash of a line: eight bytes at a time, multiply-rotate mixed. Not
/// meant to resist chosen collisions: a collision only costs a longer probe in a
/// table of at most `LINE_WINDOW` + 1 lines, and lines are always compared whole.
fn line_hash(bytes: &[u8]) -> u64 {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut hash = (bytes.len() as u64).wrapping_mul(MIX);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut buffer = [0u8; 8];
        buffer.copy_from_slice(word);
        hash = (hash.rotate_left(23) ^ u64::from_le_bytes(buffer)).wrapping_mul(MIX);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut buffer = [0u8; 8];
        if let Some(head) = buffer.get_mut(..rest.len()) {
            head.copy_from_slice(rest);
        }
        hash = (hash.rotate_left(23) ^ u64::from_le_bytes(buffer)).wrapping_mul(MIX);
    }
    hash ^ (hash >> 29)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;

    use super::*;

    /// The window as a plain list and map, the way SW-2 states it.
    #[derive(Default)]
    struct Reference {
        order: VecDeque<String>,
        counts: HashMap<String, (usize, u64)>,
        next: u64,
    }

    impl Reference {
        fn push(&mut self, line: &str) {
            let next = &mut self.next;
            self.counts
                .entry(line.to_owned())
                .or_insert_with(|| {
                    *next += 1;
                    (0, *next)
                })
                .0 += 1;
            self.order.push_back(line.to_owned());
            while self.order.len() > LINE_WINDOW {
                let oldest = self.order.pop_front().unwrap();
                let entry = self.counts.get_mut(&oldest).unwrap();
                entry.0 -= 1;
                if entry.0 == 0 {
                    self.counts.remove(&oldest);
                }
            }
        }

        fn worst(&self) -> Option<(&str, usize)> {
            self.counts
                .iter()
                .min_by_key(|(_, (count, inserted))| (std::cmp::Reverse(*count), *inserted))
                .map(|(line, (count, _))| (line.as_str(), *count))
        }
    }

    #[test]
    fn sw_2_the_slot_window_matches_the_plain_window() {
        let mut window = LineWindow::default();
        let mut reference = Reference::default();
        let mut seed: u32 = 7;
        for step in 0..20_000 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            // Few distinct lines early (long runs, high counts), many later (evictions,
            // table deletions with shifted probe runs).
            let spread = if step < 5_000 { 6 } else { 400 };
            let line = format!("line {}", (seed >> 16) % spread);
            window.push(line.as_bytes());
            reference.push(&line);
            assert_eq!(window.len(), reference.order.len());
            assert_eq!(window.distinct(), reference.counts.len());
            if step % 97 == 0 {
                assert!(window.iter().eq(reference.order.iter().map(String::as_str)));
                for (line, (count, _)) in &reference.counts {
                    assert_eq!(window.count(line), *count, "{line}");
                }
                let (key, count) = window.worst().unwrap();
                assert_eq!(Some((window.text(key), count)), reference.worst());
                assert_eq!(window.max_count(), count);
            }
        }
        window.clear();
        assert_eq!(
            (window.len(), window.distinct(), window.count("line 1")),
            (0, 0, 0)
        );
        window.push(b"again");
        assert_eq!(window.iter().collect::<Vec<_>>(), ["again"]);
    }
}
