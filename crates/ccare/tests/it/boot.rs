//! The one boot through the real binary (ACT-5, ACT-6, H-CFG-1..4, H-VAL-3): care
//! and stream watch with no config, `--profile`, the discovery order, and the
//! `sessions` commands reading the config (store, validators).

use std::path::Path;
use std::process::{Command, Output};

use crate::chat::{banner_id, ccare_command, chat};
use crate::run::text;

/// `ccare --home home ARGS` in `dir`, with no provider key and no config env.
fn ccare(dir: &Path, args: &[&str]) -> Output {
    ccare_command(dir)
        .args(["--home", "home"])
        .args(args)
        .output()
        .unwrap()
}

/// The session id `ccare run` prints on stderr.
fn run_session(output: &Output) -> String {
    text(&output.stderr)
        .lines()
        .find_map(|line| line.strip_prefix("session: "))
        .unwrap_or_else(|| panic!("{}", text(&output.stderr)))
        .to_owned()
}

/// The exported events of `id`, as JSON values (the header line skipped).
fn events(dir: &Path, id: &str) -> Vec<serde_json::Value> {
    let export = ccare(dir, &["sessions", "export", id]);
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    text(&export.stdout)
        .lines()
        .skip(1)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn act_6_run_with_no_config_stops_a_looping_answer_and_samples_care() {
    let dir = tempfile::tempdir().unwrap();
    let looping = serde_json::json!({"text": "same line\n".repeat(80)});
    std::fs::write(
        dir.path().join("s.jsonl"),
        format!("{looping}\n{{\"text\": \"Back on track.\"}}\n"),
    )
    .unwrap();
    assert!(!dir.path().join("ccare.toml").exists());
    let output = ccare(
        dir.path(),
        &[
            "run",
            "--prompt",
            "write it",
            "--provider",
            "script:s.jsonl",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("same line\n"), "{stdout}");
    assert!(stdout.trim_end().ends_with("Back on track."), "{stdout}");
    let id = run_session(&output);
    let ends: Vec<serde_json::Value> = events(dir.path(), &id)
        .into_iter()
        .filter(|event| event["type"] == "turn/end")
        .map(|event| event["data"]["reason"].clone())
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0]["kind"], "aborted");
    assert_eq!(ends[0]["cause"]["plugin"], "stream-watch");
    assert_eq!(ends[1]["kind"], "completed");
    // Context care is mounted too: its sample works with no [plugins.context-care].
    let status = ccare(dir.path(), &["context", "status", "--session", &id]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    let stdout = text(&status.stdout);
    assert!(
        stdout.starts_with(&format!("session      {id}\nfatigue      ")),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("(sampled now; nothing was appended to the session)\n"),
        "{stdout}"
    );
}

#[test]
fn act_6_chat_with_no_config_shows_care_in_status_and_levels_rise() {
    let dir = tempfile::tempdir().unwrap();
    // No config at all: the demo provider answers, /status carries care's sample.
    let bare = chat(dir.path(), &[], "hello\n/status\n");
    assert_eq!(bare.status.code(), Some(0), "{}", text(&bare.stderr));
    let stdout = text(&bare.stdout);
    assert!(stdout.contains("\nfatigue      "), "{stdout}");
    assert!(stdout.contains("\nwakefulness  "), "{stdout}");
    assert!(
        stdout.ends_with("(sampled now; nothing was appended to the session)\n"),
        "{stdout}"
    );

    // A config without any plugin table: a long session's levels rise.
    std::fs::write(
        dir.path().join("s.jsonl"),
        "{\"text\": \"Noted.\"}\n".repeat(4),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[agent]\nmodel = \"s/small\"\n[providers.s]\nkind = \"script\"\nscript = \"s.jsonl\"\n[models.\"s/small\"]\ncontext_window = 16000\nmax_output_tokens = 1000\n",
    )
    .unwrap();
    let long = "lorem ipsum dolor sit amet ".repeat(400);
    let input: String = (0..4).map(|_| format!("{long}\n/status\n")).collect();
    let output = chat(dir.path(), &[], &input);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let fatigue: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("fatigue      "))
        .collect();
    assert_eq!(fatigue.len(), 4, "{stdout}");
    let percent = |value: &str| -> f64 { value.split('%').next().unwrap().parse().unwrap() };
    for pair in fatigue.windows(2) {
        assert!(percent(pair[0]) < percent(pair[1]), "rising: {fatigue:?}");
    }
    let levels: Vec<&str> = fatigue
        .iter()
        .map(|value| value.split_once(" (").unwrap().1.trim_end_matches(')'))
        .collect();
    assert_eq!(levels, ["normal", "elevated", "high", "very-high"]);
}

/// A config with two script providers and a profile that picks the second.
fn two_profiles(dir: &Path) {
    std::fs::write(dir.join("a.jsonl"), "{\"text\": \"from a\"}\n".repeat(3)).unwrap();
    std::fs::write(dir.join("b.jsonl"), "{\"text\": \"from b\"}\n".repeat(3)).unwrap();
    std::fs::write(
        dir.join("ccare.toml"),
        "[agent]\nmodel = \"a/m\"\n[providers.a]\nkind = \"script\"\nscript = \"a.jsonl\"\n[providers.b]\nkind = \"script\"\nscript = \"b.jsonl\"\n\n[profiles.second.agent]\nmodel = \"b/m\"\n[profiles.second.plugins.context-care]\nenabled = false\n",
    )
    .unwrap();
}

#[test]
fn h_cfg_4_profile_selects_the_profiles_model_and_plugins() {
    let dir = tempfile::tempdir().unwrap();
    two_profiles(dir.path());
    let default = ccare(dir.path(), &["run", "--prompt", "x"]);
    assert_eq!(default.status.code(), Some(0), "{}", text(&default.stderr));
    assert_eq!(text(&default.stdout), "from a\n");
    let second = ccare(dir.path(), &["run", "--profile", "second", "--prompt", "x"]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "from b\n");
    // --model (the agent level) wins over the profile.
    let flagged = ccare(
        dir.path(),
        &[
            "run",
            "--profile",
            "second",
            "--model",
            "a/m",
            "--prompt",
            "x",
        ],
    );
    assert_eq!(text(&flagged.stdout), "from a\n");
    let banner = chat(dir.path(), &["--profile", "second"], "");
    assert_eq!(banner.status.code(), Some(0), "{}", text(&banner.stderr));
    let stderr = text(&banner.stderr);
    banner_id(&stderr);
    assert!(stderr.contains(" · model b/m · "), "{stderr}");
    // The profile turns context care off; the default one keeps it.
    let id = run_session(&second);
    let off = ccare(
        dir.path(),
        &["context", "status", "--session", &id, "--profile", "second"],
    );
    assert_eq!(off.status.code(), Some(2));
    assert_eq!(
        text(&off.stderr),
        "error: context-care is not mounted: the second profile turns it off ([plugins.context-care] enabled = false)\n"
    );
    let on = ccare(dir.path(), &["context", "status", "--session", &id]);
    assert_eq!(on.status.code(), Some(0), "{}", text(&on.stderr));
}

#[test]
fn an_unknown_profile_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    two_profiles(dir.path());
    for args in [
        vec!["run", "--profile", "third", "--prompt", "x"],
        vec!["chat", "--profile", "third"],
        vec!["context", "status", "--session", "s", "--profile", "third"],
    ] {
        let output = ccare(dir.path(), &args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(
            text(&output.stderr),
            "error: --profile: no profile \"third\" in the config (profiles: default, second)\n",
            "{args:?}"
        );
    }
}

#[test]
fn h_cfg_1_discovery_order_flag_env_cwd_home() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("home")).unwrap();
    std::fs::create_dir_all(root.join("elsewhere")).unwrap();
    for name in ["flag", "env", "cwd", "home"] {
        std::fs::write(
            root.join(format!("{name}.jsonl")),
            format!("{{\"text\": \"{name}\"}}\n"),
        )
        .unwrap();
    }
    let config = |script: &str| {
        format!(
            "[agent]\nmodel = \"s/m\"\n[providers.s]\nkind = \"script\"\nscript = \"{}\"\n",
            root.join(format!("{script}.jsonl")).display()
        )
    };
    std::fs::write(root.join("flag.toml"), config("flag")).unwrap();
    std::fs::write(root.join("env.toml"), config("env")).unwrap();
    std::fs::write(root.join("ccare.toml"), config("cwd")).unwrap();
    std::fs::write(root.join("home/ccare.toml"), config("home")).unwrap();
    let answer = |cwd: &Path, flag: bool, env: bool| {
        let mut command: Command = ccare_command(cwd);
        command.env("CCARE_HOME", root.join("home"));
        if env {
            command.env("CCARE_CONFIG", root.join("env.toml"));
        }
        if flag {
            command.arg("--config").arg(root.join("flag.toml"));
        }
        let output = command.args(["run", "--prompt", "x"]).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    assert_eq!(answer(root, true, true), "flag\n");
    assert_eq!(answer(root, false, true), "env\n");
    assert_eq!(answer(root, false, false), "cwd\n");
    assert_eq!(answer(&root.join("elsewhere"), false, false), "home\n");
}

/// A log whose first event ends a turn that never started: `turn-step-nesting`
/// objects to seq 0.
const BAD_NESTING: &str = concat!(
    r#"{"format":"context-care.session","version":1,"id":"odd","created_ms":0,"meta":{}}"#,
    "\n",
    r#"{"seq":0,"time_ms":1000,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
    "\n",
);

#[test]
fn h_val_3_sessions_commands_read_the_validators_table() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("odd.jsonl"), BAD_NESTING).unwrap();
    let violation = "seq 0  turn-step-nesting  turn/end for turn 1, which is not open\n";
    // Reported, not fatal, by default.
    let imported = ccare(dir.path(), &["sessions", "import", "odd.jsonl"]);
    assert_eq!(
        imported.status.code(),
        Some(0),
        "{}",
        text(&imported.stderr)
    );
    let check = ccare(dir.path(), &["sessions", "check", "odd"]);
    assert_eq!(check.status.code(), Some(1));
    assert_eq!(text(&check.stdout), violation);
    // deny turns the validator off for the audit.
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[validators]\ndeny = [\"turn-step-nesting\"]\n",
    )
    .unwrap();
    let check = ccare(dir.path(), &["sessions", "check", "odd"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
    assert_eq!(text(&check.stdout), "odd: 1 events, no violations\n");
    // strict_load makes the violation fatal: the import is refused, nothing stored.
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[validators]\nstrict_load = true\n",
    )
    .unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.path().join("ccare.toml"),
        other.path().join("ccare.toml"),
    )
    .unwrap();
    std::fs::write(other.path().join("odd.jsonl"), BAD_NESTING).unwrap();
    let refused = ccare(other.path(), &["sessions", "import", "odd.jsonl"]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(
        stderr.contains("turn/end for turn 1, which is not open"),
        "{stderr}"
    );
    let list = ccare(other.path(), &["sessions", "list", "--json"]);
    assert_eq!(text(&list.stdout), "[]\n");
    // A misspelt validator is a config error naming the key.
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[validators]\nallow = [\"turn-step-nestin\"]\n",
    )
    .unwrap();
    let misspelt = ccare(dir.path(), &["sessions", "list"]);
    assert_eq!(misspelt.status.code(), Some(2));
    assert!(
        text(&misspelt.stderr).contains(
            "ccare.toml: validators.allow: unknown validator \"turn-step-nestin\" (known: "
        ),
        "{}",
        text(&misspelt.stderr)
    );
}

#[test]
fn store_path_is_where_run_writes_and_sessions_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[store]\npath = \"db/sessions.db\"\ndurability = \"per-append\"\n",
    )
    .unwrap();
    let run = ccare(dir.path(), &["run", "--prompt", "ping"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let id = run_session(&run);
    assert!(dir.path().join("db/sessions.db").is_file());
    assert!(!dir.path().join("home/ccare.db").exists());
    let list = ccare(dir.path(), &["sessions", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str());
    let bad = ccare(dir.path(), &["sessions", "list"]);
    assert_eq!(bad.status.code(), Some(0));
    std::fs::write(
        dir.path().join("ccare.toml"),
        "[store]\nkind = \"postgres\"\n",
    )
    .unwrap();
    let refused = ccare(dir.path(), &["sessions", "list"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        text(&refused.stderr),
        "error: ccare.toml: store.kind: expected \"sqlite\" (the only store of this build), found \"postgres\"\n"
    );
}

/// The base prompt of an agent with the four built-in tools (the kernel's text).
const BASE: &str = "You are an agent working with the user in this session. Answer the user's latest request; use your tools when they help, and say plainly what you did.\nYour tools: read_file, write_file, list_files, session_search.";

#[tokio::test(flavor = "multi_thread")]
async fn instructions_base_file_and_agents_md_reach_every_request_in_that_order() {
    use ccare_fake_openai::{FakeServer, Reply};
    let server = FakeServer::start().await.unwrap();
    server.push(Reply::text("one"));
    server.push(Reply::text("two"));
    server.push(Reply::text("three"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("conf/ws")).unwrap();
    std::fs::write(dir.path().join("conf/team.md"), "Team rules:\n- be brief\n").unwrap();
    std::fs::write(
        dir.path().join("conf/ws/AGENTS.md"),
        "# Repo notes\nRun `make test`.\n",
    )
    .unwrap();
    let config = dir.path().join("conf/ccare.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[agent]
model = "local/m"
workspace = "ws"
instructions_file = "team.md"

[providers.local]
kind = "openai"
base_url = "{}"
api_key_env = "FAKE_KEY"

[plugins.context-care]
enabled = false
[plugins.stream-watch]
enabled = false

[profiles.raw.agent]
base_prompt = false
instructions = "Only the user's words."
"#,
            server.base_url()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let first = ccare(dir.path(), &["--config", &config, "run", "--prompt", "a"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let id = run_session(&first);
    let again = ccare(
        dir.path(),
        &[
            "--config",
            &config,
            "run",
            "--session",
            &id,
            "--prompt",
            "b",
        ],
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let raw = ccare(
        dir.path(),
        &[
            "--config",
            &config,
            "run",
            "--profile",
            "raw",
            "--prompt",
            "c",
        ],
    );
    assert_eq!(raw.status.code(), Some(0), "{}", text(&raw.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let system = |index: usize| requests[index].body["messages"][0].clone();
    let expected =
        format!("{BASE}\n\nTeam rules:\n- be brief\n\n\n# Repo notes\nRun `make test`.\n");
    assert_eq!(
        system(0),
        serde_json::json!({"role": "system", "content": expected})
    );
    assert_eq!(system(1), system(0), "byte-identical on the next request");
    assert_eq!(
        system(2),
        serde_json::json!({"role": "system", "content": "Only the user's words.\n\n# Repo notes\nRun `make test`.\n"})
    );
    // A missing instructions file stops the start naming the key.
    std::fs::remove_file(dir.path().join("conf/team.md")).unwrap();
    let missing = ccare(dir.path(), &["--config", &config, "run", "--prompt", "d"]);
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        text(&missing.stderr),
        format!(
            "error: {config}: agent.instructions_file: expected an instructions file, found no file at {}\n",
            dir.path().join("conf/team.md").display()
        )
    );
}
