//! The spec default (H-TOK-1) is unchanged by the structure counts and weights added for
//! the `deepseek_v4` preset: `estimate_text` gives, on every corpus sample, exactly what
//! it gave before they existed (the figures below were recorded with the three-counter
//! implementation), and `HeuristicWeights::default()` is the bare spec formula
//! `ceil(0.7·cjk + 0.3·ascii_alnum + 0.8·other)` on every sample, new ones included.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;

use ccare_meter::{CharCounts, HeuristicWeights, Meter, estimate_text};

/// `estimate_text` of each sample, recorded before structure counts were added.
const RECORDED: &[(&str, u64)] = &[
    ("zh-prose/01-cache-consistency.txt", 392),
    ("zh-prose/02-rainy-town.txt", 309),
    ("zh-prose/03-isolation-levels.txt", 421),
    ("zh-prose/04-mountain-diary.txt", 346),
    ("zh-prose/05-prd-export.txt", 360),
    ("zh-prose/06-rust-ownership.txt", 379),
    ("zh-prose/07-dumplings.txt", 317),
    ("zh-prose/08-meeting-notes.txt", 361),
    ("zh-prose/09-old-letters.txt", 350),
    ("zh-prose/10-incident-review.txt", 423),
    ("zh-prose/11-queue-selection.txt", 273),
    ("zh-prose/12-grandma-garden.txt", 265),
    ("zh-prose/13-account-faq.txt", 293),
    ("zh-prose/14-night-train.txt", 259),
    ("en-prose/01-backpressure.txt", 400),
    ("en-prose/02-lighthouse.txt", 375),
    ("en-prose/03-code-review.txt", 389),
    ("en-prose/04-bakery.txt", 370),
    ("en-prose/05-release-notes.txt", 386),
    ("en-prose/06-city-walk.txt", 385),
    ("en-prose/07-onboarding.txt", 392),
    ("en-prose/08-migration-essay.txt", 400),
    ("en-prose/09-garden-letter.txt", 330),
    ("en-prose/10-observability.txt", 422),
    ("en-prose/11-support-reply.txt", 325),
    ("en-prose/12-the-map.txt", 332),
    ("en-prose/13-capacity-plan.txt", 322),
    ("rust-code/01-ring-buffer.rs.txt", 583),
    ("rust-code/02-config-loader.rs.txt", 549),
    ("rust-code/03-http-handler.rs.txt", 650),
    ("rust-code/04-tokenize-args.rs.txt", 647),
    ("rust-code/05-lru-cache.rs.txt", 594),
    ("rust-code/06-async-worker.rs.txt", 536),
    ("rust-code/07-trait-shapes.rs.txt", 498),
    ("rust-code/08-cli-main.rs.txt", 580),
    ("rust-code/09-parser-combinator.rs.txt", 833),
    ("rust-code/10-sqlite-repo.rs.txt", 582),
    ("json-tool-output/01-list-dir.json", 444),
    ("json-tool-output/02-grep-results.json", 417),
    ("json-tool-output/03-github-issue.json", 423),
    ("json-tool-output/04-test-report.json", 702),
    ("json-tool-output/05-weather-api.json", 561),
    ("json-tool-output/06-k8s-pods.json", 561),
    ("json-tool-output/07-git-log.json", 523),
    ("json-tool-output/08-search-api.json", 462),
    ("json-tool-output/09-error-response.json", 238),
    ("json-tool-output/10-package-info.json", 447),
    ("json-tool-output/11-zh-api-response.json", 296),
    ("json-tool-output/12-npm-audit.json", 576),
    ("json-tool-output/13-event-stream.json", 594),
    ("json-tool-output/14-app-logs.json", 608),
    ("json-tool-output/15-file-tree.json", 469),
    ("json-tool-output/16-sql-result.json", 309),
    ("json-tool-output/17-web-search.json", 380),
];

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

#[test]
fn estimate_text_is_unchanged_on_the_corpus() {
    let meter = Meter::default();
    for (sample, recorded) in RECORDED {
        let text = std::fs::read_to_string(corpus().join(sample))
            .unwrap_or_else(|err| panic!("{sample}: {err}"));
        assert_eq!(estimate_text(&text), *recorded, "{sample}");
        assert_eq!(meter.text(&text), *recorded, "{sample} (default meter)");
    }
}

#[test]
fn the_default_is_the_bare_spec_formula_on_every_sample() {
    let weights = HeuristicWeights::default();
    assert!(weights.structure().is_zero());
    let mut checked = 0;
    for category in std::fs::read_dir(corpus()).unwrap() {
        let category = category.unwrap().path();
        if !category.is_dir() {
            continue;
        }
        for sample in std::fs::read_dir(&category).unwrap() {
            let text = std::fs::read_to_string(sample.unwrap().path()).unwrap();
            let counts = CharCounts::of(&text);
            // Exact integer arithmetic: tenths of a token.
            let tenths = 7 * counts.cjk + 3 * counts.ascii_alnum + 8 * counts.other;
            assert_eq!(weights.apply(counts), tenths.div_ceil(10));
            assert_eq!(estimate_text(&text), tenths.div_ceil(10));
            checked += 1;
        }
    }
    assert!(checked >= RECORDED.len(), "only {checked} samples found");
}
