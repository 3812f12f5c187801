//! Text measures shared by the stream watch and the loop shapes: lengths in UTF-16 code
//! units (GEN-1), cuts that keep whole characters, and the JavaScript-style trim the
//! spec's "trimmed line" means.

/// The length of `text` in UTF-16 code units (GEN-1).
///
/// Counts from the UTF-8 bytes: every character starts with one non-continuation byte,
/// and the four-byte ones (outside the BMP) take two units.
pub(crate) fn utf16_len(text: &str) -> usize {
    text.bytes().map(unit_of).sum()
}

/// The UTF-16 units a UTF-8 byte starts: 0 for a continuation byte, 2 for the lead
/// byte of a four-byte character, else 1.
#[inline]
pub(crate) fn unit_of(byte: u8) -> usize {
    match byte {
        0x80..=0xBF => 0,
        0xF0..=0xFF => 2,
        _ => 1,
    }
}

/// What a view needs to know of a delta before it keeps it, in one pass over its
/// bytes: its length in UTF-16 units and whether it holds a `\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaScan {
    /// The length in UTF-16 units (see [`utf16_len`]).
    pub(crate) units: usize,
    /// Whether it holds a `\n`.
    pub(crate) newline: bool,
}

/// Scans a delta once: its UTF-16 length and whether it holds a `\n`. A plain byte
/// loop: deltas are a few bytes, where a vectorized count costs more than it saves.
pub(crate) fn scan_delta(text: &str) -> DeltaScan {
    let mut units = 0;
    let mut newline = false;
    for &byte in text.as_bytes() {
        units += match byte {
            0x80..=0xBF => 0,
            0xF0..=0xFF => 2,
            _ => 1,
        };
        newline |= byte == b'\n';
    }
    DeltaScan { units, newline }
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

    #[test]
    fn js_trim_removes_white_space_and_bom() {
        assert_eq!(js_trim("\u{FEFF} \t x y\r"), "x y");
        assert_eq!(js_trim("\u{3000}好\u{3000}"), "好");
    }
}
