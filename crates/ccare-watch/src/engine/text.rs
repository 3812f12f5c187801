//! Text measures shared by the stream watch and the loop shapes: lengths in UTF-16 code
//! units (GEN-1), cuts that keep whole characters, and the JavaScript-style trim the
//! spec's "trimmed line" means.

/// The length of `text` in UTF-16 code units (GEN-1).
///
/// Counts from the UTF-8 bytes: every character starts with one non-continuation byte,
/// and the four-byte ones (outside the BMP) take two units.
pub(crate) fn utf16_len(text: &str) -> usize {
    scan_delta(text).units
}

/// What a view needs to know of a delta before it keeps it, in one pass over its
/// bytes: its length in UTF-16 units, whether it holds a `\n`, and whether it is all
/// ASCII (a phrase list without ASCII bytes can skip it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaScan {
    /// The length in UTF-16 units (see [`utf16_len`]).
    pub(crate) units: usize,
    /// Whether it holds a `\n`.
    pub(crate) newline: bool,
    /// Whether every byte is ASCII.
    pub(crate) ascii: bool,
    /// A delta of at most eight bytes as one little-endian word, zero-padded (0 for
    /// a longer one): what the scan loaded, so that keeping it needs no second load.
    pub(crate) word: u64,
}

/// The high bit of every byte of a word.
const HIGH: u64 = 0x8080_8080_8080_8080;
/// The low bit of every byte of a word.
const LOW: u64 = 0x0101_0101_0101_0101;
/// `\n` in every byte of a word.
const NEWLINES: u64 = LOW * 0x0A;

/// Scans a delta once: its UTF-16 length, whether it holds a `\n` and whether it is
/// all ASCII. Eight bytes at a time as one word (the last word zero-padded, which
/// counts as ASCII, non-continuation and no `\n`): a continuation byte is `10xxxxxx`,
/// a four-byte lead byte `11110xxx`. A delta of up to eight bytes (most are) is one
/// word, without a loop.
#[inline]
pub(crate) fn scan_delta(text: &str) -> DeltaScan {
    scan_bytes(text.as_bytes())
}

/// [`scan_delta`] of UTF-8 bytes (a whole text or a part cut at character boundaries).
#[inline]
pub(crate) fn scan_bytes(bytes: &[u8]) -> DeltaScan {
    if bytes.len() > 8 {
        return scan_words(bytes);
    }
    let word = load_word(bytes);
    let mut tally = Tally::default();
    tally.add(word);
    DeltaScan {
        word,
        ..tally.finish(bytes.len())
    }
}

/// [`scan_delta`] of more than eight bytes.
#[inline(never)]
fn scan_words(bytes: &[u8]) -> DeltaScan {
    let mut tally = Tally::default();
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        tally.add(load_word(word));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        tally.add(load_word(rest));
    }
    tally.finish(bytes.len())
}

/// What [`scan_delta`] adds up over the words of a text.
#[derive(Default)]
struct Tally {
    continuation: usize,
    four_byte: usize,
    high: u64,
    newline: u64,
}

impl Tally {
    #[inline]
    fn add(&mut self, word: u64) {
        self.continuation += high_bits(word & !(word << 1));
        self.four_byte += high_bits(word & (word << 1) & (word << 2) & (word << 3));
        self.high |= word & HIGH;
        let spot = word ^ NEWLINES;
        // Exact for whether some byte is zero, which is all this asks.
        self.newline |= spot.wrapping_sub(LOW) & !spot & HIGH;
    }

    #[inline]
    fn finish(&self, len: usize) -> DeltaScan {
        DeltaScan {
            units: len - self.continuation + self.four_byte,
            newline: self.newline != 0,
            ascii: self.high == 0,
            word: 0,
        }
    }
}

/// How many bytes of `word` have their high bit set: the bits moved to each byte's
/// low bit and summed into the top byte by one multiplication (at most 8, so no
/// carry), which needs no `popcnt` instruction.
#[inline]
fn high_bits(word: u64) -> usize {
    (((word & HIGH) >> 7).wrapping_mul(LOW) >> 56) as usize
}

/// Up to eight bytes as a little-endian word, zero-padded: without a loop, by two
/// overlapping loads (the overlap ORs a byte with itself).
#[inline]
fn load_word(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let byte = |at: usize| u64::from(bytes.get(at).copied().unwrap_or(0));
    let half = |at: usize| {
        let mut word = [0u8; 4];
        if let Some(four) = bytes.get(at..at + 4) {
            word.copy_from_slice(four);
        }
        u64::from(u32::from_le_bytes(word))
    };
    match len {
        0 => 0,
        1..=3 => byte(0) | (byte(len / 2) << (8 * (len / 2))) | (byte(len - 1) << (8 * (len - 1))),
        4..=7 => half(0) | (half(len - 4) << (8 * (len - 4))),
        _ => {
            let mut word = [0u8; 8];
            if let Some(eight) = bytes.get(..8) {
                word.copy_from_slice(eight);
            }
            u64::from_le_bytes(word)
        }
    }
}

/// The longest suffix of `text` that fits in `limit` UTF-16 units, cut at a character
/// boundary (a pair is never split, so the result may be one unit short of `limit`).
pub(crate) fn suffix_within_units(text: &str, limit: usize) -> &str {
    let mut units = 0;
    let mut start = text.len();
    for (index, ch) in text.char_indices().rev() {
        units += ch.len_utf16();
        if units > limit {
            break;
        }
        start = index;
    }
    text.get(start..).unwrap_or_default()
}

/// The longest prefix of `text` that fits in `limit` UTF-16 units, cut at a character
/// boundary: the spec's `line[0..40]` without splitting a pair.
pub(crate) fn prefix_within_units(text: &str, limit: usize) -> &str {
    let mut units = 0;
    let mut end = 0;
    for (index, ch) in text.char_indices() {
        units += ch.len_utf16();
        if units > limit {
            break;
        }
        end = index + ch.len_utf8();
    }
    text.get(..end).unwrap_or_default()
}

/// Whether `ch` is removed by JavaScript's `String.prototype.trim`: Unicode white space,
/// line terminators and the byte-order mark.
fn is_js_trimmed(ch: char) -> bool {
    ch.is_whitespace() || ch == '\u{FEFF}'
}

/// `text` without leading and trailing white space, as JavaScript's `trim` does; the
/// spec's "trimmed line".
pub(crate) fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_trimmed)
}

/// ASCII bytes [`js_trim`] removes (`char::is_whitespace` in ASCII: tab, line feed,
/// vertical tab, form feed, carriage return, space).
fn is_js_trimmed_ascii(byte: u8) -> bool {
    matches!(byte, 0x09..=0x0D | 0x20)
}

/// Whether a character starting with this lead byte may be trimmed: every non-ASCII
/// character [`js_trim`] removes (U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
/// U+2029, U+202F, U+205F, U+3000, U+FEFF) starts with one of these.
fn may_be_trimmed(lead: u8) -> bool {
    matches!(lead, 0xC2 | 0xE1 | 0xE2 | 0xE3 | 0xEF)
}

/// The one character `bytes` holds, if they are exactly one.
fn one_char(bytes: Option<&[u8]>) -> Option<char> {
    let text = std::str::from_utf8(bytes?).ok()?;
    let mut chars = text.chars();
    let ch = chars.next()?;
    chars.next().is_none().then_some(ch)
}

/// [`js_trim`] of the UTF-8 bytes of a whole text, without validating them: ASCII
/// white space is cut byte by byte, and only a character whose lead byte some
/// non-ASCII white space has is decoded (from its own few bytes).
pub(crate) fn js_trim_bytes(mut bytes: &[u8]) -> &[u8] {
    while let Some(&first) = bytes.first() {
        let len = if is_js_trimmed_ascii(first) {
            1
        } else if may_be_trimmed(first) {
            let len = if first >= 0xE0 { 3 } else { 2 };
            match one_char(bytes.get(..len)) {
                Some(ch) if is_js_trimmed(ch) => len,
                _ => break,
            }
        } else {
            break;
        };
        bytes = bytes.get(len..).unwrap_or_default();
    }
    while let Some(&last) = bytes.last() {
        let start = if is_js_trimmed_ascii(last) {
            bytes.len() - 1
        } else if last >= 0x80 {
            // The last character starts at the last byte that is no continuation byte.
            let Some(start) = (bytes.len().saturating_sub(4)..bytes.len())
                .rev()
                .find(|&at| bytes.get(at).is_some_and(|byte| byte & 0xC0 != 0x80))
            else {
                break;
            };
            let trimmed = bytes.get(start).copied().is_some_and(may_be_trimmed)
                && one_char(bytes.get(start..)).is_some_and(is_js_trimmed);
            if !trimmed {
                break;
            }
            start
        } else {
            break;
        };
        bytes = bytes.get(..start).unwrap_or_default();
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen_1_utf16_len_counts_pairs_as_two() {
        assert_eq!(utf16_len(""), 0);
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("时间"), 2);
        assert_eq!(utf16_len("a😀b"), 4);
        assert_eq!(utf16_len("é"), "é".encode_utf16().count());
    }

    #[test]
    fn gen_1_scan_delta_counts_like_utf16_len() {
        for text in ["", "abc", "时间\n", "a😀b", "\n", "é\r\n😀"] {
            let scan = scan_delta(text);
            assert_eq!(scan.units, text.encode_utf16().count(), "{text:?}");
            assert_eq!(scan.newline, text.contains('\n'), "{text:?}");
            assert_eq!(scan.ascii, text.is_ascii(), "{text:?}");
        }
    }

    /// Every length around the word size, with each kind of character at each
    /// position: the word-wise scan agrees with counting per character.
    #[test]
    fn gen_1_scan_delta_agrees_at_every_length_and_position() {
        let kinds = ["a", "\n", "\u{0}", "\u{7f}", "é", "时", "😀", "\u{ffff}"];
        let mut seed: u32 = 3;
        for len in 0..40 {
            for round in 0..60 {
                let text: String = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        // Mostly ASCII letters, so ASCII-only texts occur at every length.
                        let pick = (seed >> 16) as usize % (kinds.len() + round % 8);
                        kinds.get(pick).copied().unwrap_or("x")
                    })
                    .collect();
                let scan = scan_delta(&text);
                assert_eq!(scan.units, text.encode_utf16().count(), "{text:?}");
                assert_eq!(scan.newline, text.contains('\n'), "{text:?}");
                assert_eq!(scan.ascii, text.is_ascii(), "{text:?}");
            }
        }
    }

    #[test]
    fn gen_1_cuts_keep_whole_characters() {
        assert_eq!(suffix_within_units("ab😀", 2), "😀");
        assert_eq!(suffix_within_units("ab😀", 1), "");
        assert_eq!(suffix_within_units("ab😀", 3), "b😀");
        assert_eq!(prefix_within_units("😀ab", 1), "");
        assert_eq!(prefix_within_units("😀ab", 3), "😀a");
        assert_eq!(prefix_within_units("abc", 40), "abc");
    }

    /// Every character `js_trim` removes has a lead byte `may_be_trimmed` lets through,
    /// and the byte trim agrees with it around each of them.
    #[test]
    fn js_trim_bytes_matches_js_trim() {
        let trimmed: Vec<char> = (0..=0x10_FFFF)
            .filter_map(char::from_u32)
            .filter(|ch| is_js_trimmed(*ch))
            .collect();
        assert!(trimmed.len() > 20, "{trimmed:?}");
        for ch in &trimmed {
            let mut lead = [0u8; 4];
            ch.encode_utf8(&mut lead);
            assert!(
                ch.is_ascii() || may_be_trimmed(lead[0]),
                "{ch:?} starts with {:#x}",
                lead[0]
            );
        }
        let cores = ["", "x", "x y", "时间", "😀", "a\u{3000}b", "\u{85}é"];
        let spaces: Vec<String> = trimmed.iter().map(|ch| ch.to_string()).collect();
        for core in cores {
            for left in spaces.iter().map(String::as_str).chain(["", "é", "时"]) {
                for right in spaces
                    .iter()
                    .map(String::as_str)
                    .chain(["", "时", "\u{2030}"])
                {
                    let text = format!("{left}{core}{right}{right}");
                    assert_eq!(
                        js_trim_bytes(text.as_bytes()),
                        js_trim(&text).as_bytes(),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn js_trim_removes_white_space_and_bom() {
        assert_eq!(js_trim("\u{FEFF} \t x y\r"), "x y");
        assert_eq!(js_trim("\u{3000}好\u{3000}"), "好");
    }
}
