//! The time-context plugin from the command line: the preview (TC-9), mounting from
//! `ccare.toml` (TC-2), and `sessions check` on an imported log (TC-7).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

fn ccare(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ccare"))
        .current_dir(dir)
        .env_remove("DEEPSEEK_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CCARE_CONFIG")
        .env_remove("CCARE_HOME")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn tc_9_preview_prints_exactly_the_two_lines() {
    let dir = tempfile::tempdir().unwrap();
    let step1 = ccare(
        dir.path(),
        &[
            "time-context",
            "preview",
            "--zone",
            "Asia/Kolkata",
            "--now-ms",
            "951782400000",
            "--turn",
            "1",
            "--step",
            "1",
            "--baseline-ms",
            "951782399000",
        ],
    );
    assert_eq!(step1.status.code(), Some(0));
    assert_eq!(
        text(&step1.stdout),
        "Time sampled while preparing turn 1, step 1: 2000-02-29T05:30:00+05:30[Asia/Kolkata]\nElapsed since the preceding model-visible message: 1s.\n"
    );
    let later = ccare(
        dir.path(),
        &[
            "time-context",
            "preview",
            "--zone",
            "Pacific/Chatham",
            "--now-ms",
            "1320587100000",
            "--turn",
            "3",
            "--step",
            "2",
            "--baseline-ms",
            "1320497039000",
        ],
    );
    assert_eq!(
        text(&later.stdout),
        "Time sampled while preparing turn 3, step 2: 2011-11-07T03:30:00+13:45[Pacific/Chatham]\nElapsed since the preceding step context: 1d 1h 1m 1s.\n"
    );
    let unavailable = ccare(
        dir.path(),
        &[
            "time-context",
            "preview",
            "--zone",
            "UTC",
            "--now-ms",
            "0",
            "--turn",
            "1",
            "--step",
            "1",
        ],
    );
    assert_eq!(
        text(&unavailable.stdout),
        "Time sampled while preparing turn 1, step 1: 1970-01-01T00:00:00+00:00[UTC]\nElapsed since the preceding model-visible message: unavailable.\n"
    );
    let invalid = ccare(
        dir.path(),
        &[
            "time-context",
            "preview",
            "--zone",
            "Mars/Olympus_Mons",
            "--now-ms",
            "0",
            "--turn",
            "1",
            "--step",
            "1",
        ],
    );
    assert_eq!(invalid.status.code(), Some(2));
    assert!(
        text(&invalid.stderr).contains("\"Mars/Olympus_Mons\" is not a valid IANA time zone"),
        "{}",
        text(&invalid.stderr)
    );
}

#[test]
fn tc_2_mounted_from_config_the_reading_reaches_the_model_and_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"expect\": {\"contains\": \"Time sampled while preparing turn 1, step 1: \"}, \"text\": \"Noted.\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/scripted\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n\n[plugins.time-context]\ntime_zone = \"Asia/Shanghai\"\n\n[plugins.time-context-invariant]\n",
    )
    .unwrap();
    let home = dir.path().join("home");
    let home = home.to_str().unwrap();
    let run = ccare(
        dir.path(),
        &["--home", home, "run", "--prompt", "what time is it?"],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), "Noted.\n");
    let id = text(&run.stderr)
        .lines()
        .next()
        .unwrap()
        .strip_prefix("session: ")
        .unwrap()
        .to_owned();
    let check = ccare(dir.path(), &["--home", home, "sessions", "check", &id]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
    assert!(text(&check.stdout).ends_with("no violations\n"));

    std::fs::write(
        dir.path().join("ccare.toml"),
        "[plugins.time-context]\nrefresh_interval_ms = -1\n",
    )
    .unwrap();
    let bad = ccare(dir.path(), &["--home", home, "run", "--prompt", "x"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains(
            "time-context: refresh_interval_ms must be a non-negative safe integer, got -1"
        ),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn tc_7_sessions_check_names_seq_and_rule_of_a_forged_reading() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let home = home.to_str().unwrap();
    let source = r#"{"kind":"plugin","plugin":"time-context","form":"snapshot","sections":[{"name":"time-context","text":"Time sampled while preparing turn 2, step 1: 1970-01-01T00:00:00+00:00[UTC]\nElapsed since the preceding model-visible message: 0s."}]}"#;
    let lines = [
        r#"{"format":"context-care.session","version":1,"id":"forged","created_ms":0,"meta":{}}"#.to_owned(),
        r#"{"seq":0,"time_ms":1000,"type":"turn/start","data":{"turn":1}}"#.to_owned(),
        r#"{"seq":1,"time_ms":1000,"type":"user/message","data":{"message":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}},"surface":{"op":"append"}}"#.to_owned(),
        format!(
            r#"{{"seq":2,"time_ms":1000,"type":"user/message","data":{{"message":{{"content":[{{"type":"text","text":"Time sampled while preparing turn 2, step 1: 1970-01-01T00:00:00+00:00[UTC]\nElapsed since the preceding model-visible message: 0s."}}],"source":{source}}}}},"surface":{{"op":"append"}}}}"#
        ),
        r#"{"seq":3,"time_ms":1000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#.to_owned(),
    ];
    let file = dir.path().join("forged.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let import = ccare(
        dir.path(),
        &["--home", home, "sessions", "import", file.to_str().unwrap()],
    );
    assert_eq!(import.status.code(), Some(0), "{}", text(&import.stderr));
    let check = ccare(
        dir.path(),
        &["--home", home, "sessions", "check", "forged", "--json"],
    );
    assert_eq!(check.status.code(), Some(1));
    let found: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(found[0]["seq"], 2);
    assert_eq!(found[0]["validator"], "time-context-invariant");
    assert!(
        found[0]["message"].as_str().unwrap().starts_with("TC-7.2"),
        "{found}"
    );
}
