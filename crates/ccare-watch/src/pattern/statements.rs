//! OP-2: split a model output into statements.
//!
//! The text is parsed as GitHub-flavoured Markdown. Only the prose the reader sees is
//! kept: blockquotes, code blocks (fenced and indented) and HTML blocks are skipped;
//! inline code, inline HTML, images and all markup characters (`#`, `**`, list markers,
//! link targets, table pipes) are blanked with spaces. Blanking replaces each char by as
//! many spaces as it has UTF-16 code units, so the blanked *visible text* has exactly the
//! original's UTF-16 length and every kept char sits at its original offset (GEN-1).
//!
//! Each line of the visible text is then split into sentences, each sentence is trimmed,
//! and the ones containing a letter or a number become [`Statement`]s.
//!
//! # Sentence boundaries: UAX#29 via `unicode-segmentation`
//!
//! The spec names `icu_segmenter`. Its sentence segmenter implements the same default
//! rules, Unicode Standard Annex #29, which is what `unicode-segmentation` implements, at a
//! fraction of the weight (no ICU data provider, no CLDR data blobs). Known differences:
//! - neither applies abbreviation suppressions (ICU4C's optional `ss=standard`); so
//!   `Mr. Smith` splits after `Mr.` in both, and Chinese and English prose split alike;
//! - the Unicode version of the property tables may differ between the two crates
//!   (this one ships Unicode 17), which only matters for newly assigned characters.
//!
//! # Letters and numbers
//!
//! The spec keeps segments matching `\p{L}|\p{N}`; we use [`char::is_alphanumeric`]
//! (`Alphabetic` or `Numeric`). `Numeric` is exactly `\p{N}`; `Alphabetic` is `\p{L}` plus
//! letter numbers and `Other_Alphabetic` (combining vowel signs, circled letters such as
//! `Ⓐ`). So a segment made only of such marks or symbols is kept here and was not in the
//! original; prose never consists of them alone.

use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde::{Deserialize, Serialize};
use unicode_segmentation::UnicodeSegmentation;

/// One sentence of prose (OP-2), with UTF-16 offsets into the original output text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Statement {
    /// The trimmed sentence as visible text: blanked spans inside it are spaces.
    pub text: String,
    /// Start offset in the original text, UTF-16 code units.
    pub start: usize,
    /// End offset (exclusive) in the original text, UTF-16 code units; `end - start` is
    /// the UTF-16 length of `text`.
    pub end: usize,
}

/// Splits a model output into statements (OP-2), in document order.
pub fn extract_statements(markdown: &str) -> Vec<Statement> {
    let visible = visible_text(markdown);
    let mut statements = Vec::new();
    let mut cursor = Utf16Cursor::default();
    let mut line_start = 0;
    for line in visible.split('\n') {
        for (segment_start, segment) in line.split_sentence_bound_indices() {
            let trimmed_start = segment.len() - segment.trim_start().len();
            let trimmed = segment.trim();
            if !trimmed.chars().any(char::is_alphanumeric) {
                continue;
            }
            let byte_start = line_start + segment_start + trimmed_start;
            let byte_end = byte_start + trimmed.len();
            let start = cursor.advance_to(&visible, byte_start);
            let end = cursor.advance_to(&visible, byte_end);
            statements.push(Statement {
                text: trimmed.to_owned(),
                start,
                end,
            });
        }
        line_start += line.len() + 1;
    }
    statements
}

/// The GFM extensions the parser recognises.
fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_GFM
}

/// The prose of `markdown` with everything else blanked; same UTF-16 length, line
/// breaks kept.
fn visible_text(markdown: &str) -> String {
    let mut kept_ranges = prose_ranges(markdown);
    kept_ranges.sort_by_key(|range| range.start);
    let mut visible = String::with_capacity(markdown.len());
    let mut ranges = kept_ranges.iter().peekable();
    for (byte_idx, ch) in markdown.char_indices() {
        while ranges.next_if(|range| range.end <= byte_idx).is_some() {}
        let kept = ranges.peek().is_some_and(|range| range.start <= byte_idx);
        if kept || ch == '\n' || ch == '\r' {
            visible.push(ch);
        } else {
            for _ in 0..ch.len_utf16() {
                visible.push(' ');
            }
        }
    }
    visible
}

/// Byte ranges of the text events outside skipped blocks and images.
fn prose_ranges(markdown: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut skip_depth: usize = 0;
    for (event, range) in Parser::new_ext(markdown, markdown_options()).into_offset_iter() {
        match event {
            Event::Start(
                Tag::BlockQuote(_) | Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::Image { .. },
            ) => {
                skip_depth += 1;
            }
            Event::End(
                TagEnd::BlockQuote(_) | TagEnd::CodeBlock | TagEnd::HtmlBlock | TagEnd::Image,
            ) => {
                skip_depth = skip_depth.saturating_sub(1);
            }
            Event::Text(_) if skip_depth == 0 => ranges.push(range),
            Event::Start(_)
            | Event::End(_)
            | Event::Text(_)
            | Event::Code(_)
            | Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::Html(_)
            | Event::InlineHtml(_)
            | Event::FootnoteReference(_)
            | Event::SoftBreak
            | Event::HardBreak
            | Event::Rule
            | Event::TaskListMarker(_) => {}
        }
    }
    ranges
}

/// Converts increasing byte offsets of a string into UTF-16 offsets in linear time.
#[derive(Debug, Default)]
struct Utf16Cursor {
    byte_offset: usize,
    utf16_offset: usize,
}

impl Utf16Cursor {
    /// The UTF-16 offset of `byte_offset`, which must not be behind the cursor and
    /// should be a char boundary of `text` (otherwise the cursor stays put).
    fn advance_to(&mut self, text: &str, byte_offset: usize) -> usize {
        if let Some(skipped) = text.get(self.byte_offset..byte_offset) {
            self.utf16_offset += skipped.chars().map(char::len_utf16).sum::<usize>();
            self.byte_offset = byte_offset;
        }
        self.utf16_offset
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::pattern::utf16_len;

    /// `(text, start, end)` of each statement, for whole-value comparisons.
    fn check(markdown: &str, expected: &[(&str, usize, usize)]) {
        let actual: Vec<(String, usize, usize)> = extract_statements(markdown)
            .into_iter()
            .map(|statement| (statement.text, statement.start, statement.end))
            .collect();
        let expected: Vec<(String, usize, usize)> = expected
            .iter()
            .map(|(text, start, end)| ((*text).to_owned(), *start, *end))
            .collect();
        assert_eq!(actual, expected, "input: {markdown:?}");
    }

    /// The original text between two UTF-16 offsets, or `None` off a char boundary.
    fn slice_utf16(text: &str, start: usize, end: usize) -> Option<&str> {
        let byte_of = |target: usize| {
            let mut utf16 = 0;
            for (byte_idx, ch) in text.char_indices() {
                if utf16 == target {
                    return Some(byte_idx);
                }
                utf16 += ch.len_utf16();
            }
            (utf16 == target).then_some(text.len())
        };
        text.get(byte_of(start)?..byte_of(end)?)
    }

    #[test]
    fn op_2_splits_lines_and_cjk_sentences() {
        check(
            "我不会做。也不写成。\n证据已经查验。",
            &[
                ("我不会做。", 0, 5),
                ("也不写成。", 5, 10),
                ("证据已经查验。", 11, 18),
            ],
        );
    }

    #[test]
    fn op_2_splits_english_sentences_and_trims() {
        check(
            "  Tests pass. All done! Is it? yes\nNext line.",
            &[
                ("Tests pass.", 2, 13),
                ("All done!", 14, 23),
                ("Is it?", 24, 30),
                ("yes", 31, 34),
                ("Next line.", 35, 45),
            ],
        );
    }

    #[test]
    fn op_2_uax29_has_no_abbreviation_suppressions() {
        // `Mr.` before a capital splits; a period before a lowercase word does not (SB8).
        check(
            "Ask Mr. Smith. e.g. this",
            &[("Ask Mr.", 0, 7), ("Smith. e.g. this", 8, 24)],
        );
    }

    #[test]
    fn op_2_drops_segments_without_letters_or_numbers() {
        check("。。。\n---\n***\n- \n…… 42。", &[("…… 42。", 15, 21)]);
    }

    #[test]
    fn op_2_skips_code_fences_blockquotes_and_indented_code() {
        let text = "前言。\n\n```rust\nlet x = 1;\n```\n\n> 引用的话。\n> 第二行。\n\n    缩进代码\n\n结尾。";
        check(text, &[("前言。", 0, 3), ("结尾。", 55, 58)]);
        assert_eq!(slice_utf16(text, 55, 58), Some("结尾。"));
    }

    #[test]
    fn op_2_skips_html_blocks_and_blanks_inline_html() {
        let text = "<div>\n块里的话。\n</div>\n\n正文<b>加粗</b>结束。";
        let statements = extract_statements(text);
        assert_eq!(statements.len(), 1);
        let statement = &statements[0];
        assert_eq!(statement.text, "正文   加粗    结束。");
        assert_eq!(
            slice_utf16(text, statement.start, statement.end),
            Some("正文<b>加粗</b>结束。")
        );
    }

    #[test]
    fn op_2_blanks_inline_code_and_images_keeping_offsets() {
        let text = "先看 `代码` 再说。![图片说明](a.png) 后文。";
        check(text, &[("先看      再说。", 0, 11), ("后文。", 26, 29)]);
        assert_eq!(slice_utf16(text, 0, 11), Some("先看 `代码` 再说。"));
        assert_eq!(slice_utf16(text, 26, 29), Some("后文。"));
    }

    #[test]
    fn op_2_markup_is_blanked_but_link_text_is_kept() {
        let text = "# 标题\n\n- **重要**：看[文档](http://x.y/z)。\n1. 第二项";
        check(
            text,
            &[
                ("标题", 2, 4),
                ("重要  ：看 文档               。", 10, 35),
                ("第二项", 39, 42),
            ],
        );
    }

    #[test]
    fn op_2_offsets_are_utf16_with_non_bmp_chars() {
        // 😀 is two UTF-16 units; `𝒳` in inline code blanks to two spaces.
        let text = "😀好的。完成`𝒳`了。\n再见😀。";
        check(
            text,
            &[
                ("😀好的。", 0, 5),
                ("完成    了。", 5, 13),
                ("再见😀。", 14, 19),
            ],
        );
        assert_eq!(slice_utf16(text, 5, 13), Some("完成`𝒳`了。"));
        assert_eq!(slice_utf16(text, 14, 19), Some("再见😀。"));
    }

    #[test]
    fn op_2_ac_15_statements() {
        let text = "> 我不能宣称。\n\n~~~js\n我不会做。\n~~~\n\n    我不写成。\n\n`我不能宣称`\n\n规则匹配“不会做”和“不写成”。\n\n我“不会做”任何未经授权的修改。";
        let statements = extract_statements(text);
        let texts: Vec<&str> = statements.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "规则匹配“不会做”和“不写成”。",
                "我“不会做”任何未经授权的修改。"
            ]
        );
        for statement in &statements {
            assert_eq!(
                slice_utf16(text, statement.start, statement.end),
                Some(statement.text.as_str())
            );
        }
        assert!(extract_statements("~~~\n我不会做\n~~~").is_empty());
    }

    #[test]
    fn op_2_crlf_lines_and_tables() {
        check(
            "第一行。\r\n第二行。\r\n\r\n| 列一 | 列二 |\n|---|---|\n| 甲 | 乙 |",
            &[
                ("第一行。", 0, 4),
                ("第二行。", 6, 10),
                ("列一   列二", 16, 23),
                ("甲   乙", 38, 43),
            ],
        );
    }

    fn assert_offsets_hold(text: &str) {
        let total = utf16_len(text);
        let mut previous_end = 0;
        for statement in extract_statements(text) {
            assert!(statement.start < statement.end, "{statement:?}");
            assert!(statement.start >= previous_end, "{statement:?}");
            assert!(statement.end <= total, "{statement:?}");
            previous_end = statement.end;
            let original = slice_utf16(text, statement.start, statement.end)
                .unwrap_or_else(|| panic!("off a char boundary: {statement:?} in {text:?}"));
            assert_eq!(utf16_len(&statement.text), statement.end - statement.start);
            // Every visible char is the original's, or a blank standing in for it.
            let mut original_units = original.encode_utf16();
            for ch in statement.text.chars() {
                if ch == ' ' {
                    original_units.next();
                    continue;
                }
                let mut buffer = [0_u16; 2];
                for unit in ch.encode_utf16(&mut buffer) {
                    assert_eq!(
                        original_units.next(),
                        Some(*unit),
                        "{statement:?} in {text:?}"
                    );
                }
            }
            assert!(statement.text.chars().any(char::is_alphanumeric));
        }
    }

    proptest! {
        #[test]
        fn op_2_extraction_never_panics_and_offsets_slice_the_original(text in any::<String>()) {
            assert_offsets_hold(&text);
        }

        #[test]
        fn op_2_markdownish_text_keeps_offsets(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\n"), Just("\n\n"), Just("> "), Just("```"), Just("~~~\n"), Just("`"),
                    Just("    "), Just("<b>"), Just("</b>"), Just("<div>\n"), Just("!["), Just("]("),
                    Just(")"), Just("*"), Just("- "), Just("| a |"), Just("&amp;"), Just("\\"),
                    Just("。"), Just(". "), Just("我不会做"), Just("Hello"), Just("😀"), Just("\r\n"),
                    Just("[^1]"), Just("[^1]: 注"), Just("1. "), Just("#"), Just("\u{3000}"),
                ],
                0..40,
            )
        ) {
            assert_offsets_hold(&parts.concat());
        }
    }
}
