//! SW-2 views: text chunks, the line window, the open line, UTF-16 lengths (GEN-1).

use ccare_watch::engine::{
    Frame, LINE_LIMIT, LINE_WINDOW, MIN_LINE_LEN, TEXT_LIMIT, View, WINDOWED_EVERY,
};

use crate::{Source, default_watch, feed};

fn units(text: &str) -> usize {
    text.encode_utf16().count()
}

#[test]
fn sw_2_constants_are_exact() {
    assert_eq!(
        (
            TEXT_LIMIT,
            LINE_WINDOW,
            MIN_LINE_LEN,
            LINE_LIMIT,
            WINDOWED_EVERY
        ),
        (16_384, 80, 3, 4_096, 300)
    );
}

#[test]
fn sw_2_ac_4_five_hundred_lines_keep_a_window_of_80_with_synced_counts() {
    let mut view = View::new();
    for index in 0..500 {
        view.push(&format!("line {}\n", index % 7));
    }
    let window = view.lines();
    assert_eq!(window.len(), 80);
    assert_eq!(window.counts().map(|(_, count)| count).sum::<usize>(), 80);
    for line in window.iter() {
        let in_window = window.iter().filter(|other| *other == line).count();
        assert_eq!(window.count(line), in_window);
    }
}

#[test]
fn sw_2_a_key_whose_count_drops_to_zero_is_deleted() {
    let mut view = View::new();
    for index in 0..500 {
        view.push(&format!("unique {index}\n"));
    }
    let window = view.lines();
    assert_eq!(window.distinct(), 80);
    assert_eq!(window.count("unique 419"), 0);
    assert_eq!(window.count("unique 420"), 1);
    assert_eq!(window.iter().next(), Some("unique 420"));
}

#[test]
fn sw_2_ac_4_fifty_thousand_one_char_deltas_stay_within_the_text_limit() {
    let mut view = View::new();
    for _ in 0..50_000 {
        view.push("x");
    }
    assert_eq!(view.text_len(), TEXT_LIMIT);
    assert_eq!(view.chunks().map(units).sum::<usize>(), TEXT_LIMIT);
}

#[test]
fn sw_2_ac_4_an_oversized_delta_keeps_its_last_16384_units() {
    let mut view = View::new();
    let delta = format!("{}{}", "a".repeat(2 * TEXT_LIMIT), "b".repeat(TEXT_LIMIT));
    view.push(&delta);
    assert_eq!(view.text_len(), TEXT_LIMIT);
    assert_eq!(view.chunks().collect::<String>(), "b".repeat(TEXT_LIMIT));
}

#[test]
fn sw_2_oldest_chunks_drop_only_while_more_than_one_remains() {
    let mut view = View::new();
    view.push(&"a".repeat(10_000));
    view.push(&"b".repeat(6_384));
    assert_eq!(
        view.text_len(),
        TEXT_LIMIT,
        "exactly at the limit: nothing dropped"
    );
    assert_eq!(view.chunks().count(), 2);
    view.push("c");
    assert_eq!(view.text_len(), 6_385, "the oldest chunk goes as a whole");
    view.push(&"d".repeat(TEXT_LIMIT));
    assert_eq!(view.chunks().collect::<String>(), "d".repeat(TEXT_LIMIT));
}

#[test]
fn gen_1_sw_2_text_limit_counts_utf16_units() {
    let mut view = View::new();
    view.push(&"😀".repeat(TEXT_LIMIT / 2));
    assert_eq!(view.text_len(), TEXT_LIMIT);
    let mut view = View::new();
    view.push(&format!("x{}", "😀".repeat(TEXT_LIMIT / 2)));
    assert_eq!(
        view.chunks().collect::<String>(),
        "😀".repeat(TEXT_LIMIT / 2)
    );
    let mut view = View::new();
    view.push(&format!("{}x", "😀".repeat(TEXT_LIMIT / 2)));
    assert_eq!(view.text_len(), TEXT_LIMIT - 1, "a pair is never split");
}

#[test]
fn sw_2_ac_4_lines_are_trimmed_and_short_ones_skipped() {
    let mut view = View::new();
    assert_eq!(view.push("ab\n{}\n\n   \nreal line\n"), 1);
    assert_eq!(view.lines().iter().collect::<Vec<_>>(), ["real line"]);
    view.push("  abc \r\n");
    assert_eq!(view.lines().iter().last(), Some("abc"));
}

#[test]
fn gen_1_sw_2_min_line_len_counts_utf16_units() {
    let mut view = View::new();
    view.push("😀\n😀a\n时间\n时间了\n");
    assert_eq!(view.lines().iter().collect::<Vec<_>>(), ["😀a", "时间了"]);
}

#[test]
fn sw_2_a_line_split_over_deltas_joins_once_at_its_newline() {
    let mut view = View::new();
    for delta in ["sa", "me l", "ine", "\nne", "xt\n"] {
        view.push(delta);
    }
    assert_eq!(
        view.lines().iter().collect::<Vec<_>>(),
        ["same line", "next"]
    );
}

#[test]
fn sw_2_the_open_line_keeps_its_last_4096_units() {
    let mut view = View::new();
    view.push(&"a".repeat(5_000));
    view.push(&"b".repeat(LINE_LIMIT));
    assert_eq!(view.open_line(), "b".repeat(LINE_LIMIT));
    for _ in 0..10_000 {
        view.push("x");
    }
    assert_eq!(view.open_line(), "x".repeat(LINE_LIMIT));
    view.push("\n");
    assert_eq!(
        view.lines().iter().last(),
        Some("x".repeat(LINE_LIMIT).as_str())
    );
    assert_eq!(view.open_line(), "");
}

#[test]
fn gen_1_sw_2_the_open_line_limit_counts_utf16_units() {
    let mut view = View::new();
    view.push(&"😀".repeat(3_000));
    assert_eq!(units(view.open_line()), LINE_LIMIT);
    assert_eq!(view.open_line(), "😀".repeat(LINE_LIMIT / 2));
}

#[test]
fn sw_2_combined_scope_reads_text_and_reasoning_into_one_view() {
    let mut watch = default_watch();
    watch.observe(Frame::Reasoning("thinking line\n"));
    watch.observe(Frame::Text("answer line\n"));
    let lines: Vec<String> = watch
        .view("line-repeat")
        .unwrap()
        .lines()
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines, ["thinking line", "answer line"]);
    assert_eq!(
        watch.view("time-anxiety").unwrap().text_len(),
        0,
        "incremental phrases keep no view"
    );
}

#[test]
fn sw_1_start_clears_the_view() {
    let mut watch = default_watch();
    feed(&mut watch, Source::Text, "one line\nopen", 3);
    assert_eq!(watch.view("line-repeat").unwrap().lines().len(), 1);
    watch.observe(Frame::Start);
    let view = watch.view("line-repeat").unwrap();
    assert_eq!(
        (view.lines().len(), view.text_len(), view.open_line()),
        (0, 0, "")
    );
}

#[test]
fn sw_1_empty_deltas_are_not_read() {
    let mut watch = default_watch();
    assert!(watch.observe(Frame::Text("")).is_empty());
    assert!(watch.observe(Frame::Reasoning("")).is_empty());
    assert_eq!(watch.view("line-repeat").unwrap().chunks().count(), 0);
}
