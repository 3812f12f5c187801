//! Profiles (H-CFG-4): the top-level `[agent]` and `[plugins.*]` tables are the default
//! profile, `[profiles.<id>]` overrides them, and a value is looked up agent (the
//! command line) → profile → default profile → built-in default. Plugin tables merge,
//! `enabled` is the host's key, context care and stream watch are on by default
//! (ACT-6), and a profile chooses its built-in tools.

use std::path::{Path, PathBuf};

use ccare_app::config::{BuiltinTool, PluginMount, load_text};
use ccare_app::{AppError, Overrides};
use ccare_core::Locale;
use serde_json::json;

use crate::config::{FILE, error, home, no_env, settings};

const TWO_PROFILES: &str = r#"
[agent]
model = "s/main"
compaction_model = "s/small"
locale = "zh"
workspace = "work"

[providers.s]
kind = "script"

[plugins.context-care]
budget_ratio = 0.7
triggers = { a = 1, b = 2 }

[profiles.fast.agent]
model = "s/fast"
workspace = "fast-work"

[profiles.fast.plugins.context-care]
safety_tokens = 100
triggers = { b = 3 }

[profiles.fast.plugins.stream-watch]
enabled = false

[profiles.reader]
tools = ["read_file", "list_files"]
"#;

fn mounts(profile: &ccare_app::config::Profile) -> Vec<(&str, serde_json::Value, &str)> {
    profile
        .plugins
        .iter()
        .map(|PluginMount { name, config, key }| (name.as_str(), config.clone(), key.as_str()))
        .collect()
}

#[test]
fn h_cfg_4_lookup_goes_agent_then_profile_then_default_profile_then_host() {
    let loaded = settings(TWO_PROFILES).unwrap();
    assert_eq!(
        loaded.profiles.keys().collect::<Vec<_>>(),
        ["default", "fast", "reader"]
    );
    let default = loaded.profile(None).unwrap();
    assert_eq!(default.id, "default");
    assert_eq!(default.model, "s/main");
    assert_eq!(default.compaction_model.as_deref(), Some("s/small"));
    assert_eq!(default.workspace, PathBuf::from("/cfg/work"));
    let fast = loaded.profile(Some("fast")).unwrap();
    assert_eq!(fast.model, "s/fast", "the profile's own value");
    assert_eq!(fast.workspace, PathBuf::from("/cfg/fast-work"));
    assert_eq!(fast.locale, Locale::Zh, "inherited from [agent]");
    assert_eq!(fast.compaction_model.as_deref(), Some("s/small"));
    let reader = loaded.profile(Some("reader")).unwrap();
    assert_eq!(reader.model, "s/main");
    assert_eq!(reader.locale, Locale::Zh);
    // The agent level (a command-line flag) wins over every profile.
    let flagged = load_text(
        TWO_PROFILES,
        Path::new(FILE),
        &home(),
        &Overrides {
            model: Some("s/flag".to_owned()),
            provider: None,
        },
        &no_env,
    )
    .unwrap();
    assert_eq!(flagged.profile(Some("fast")).unwrap().model, "s/flag");
    assert_eq!(flagged.profile(None).unwrap().model, "s/flag");
    // Nothing anywhere: the built-in default.
    assert_eq!(
        settings("[providers.s]\nkind = \"script\"\n[agent]\nmodel = \"s/m\"\n")
            .unwrap()
            .profile(None)
            .unwrap()
            .locale,
        Locale::En
    );
}

#[test]
fn a_profile_merges_its_plugin_tables_over_the_top_level_ones() {
    let loaded = settings(TWO_PROFILES).unwrap();
    assert_eq!(
        mounts(loaded.profile(None).unwrap()),
        vec![
            (
                "context-care",
                json!({"budget_ratio": 0.7, "triggers": {"a": 1, "b": 2}}),
                "plugins.context-care"
            ),
            ("stream-watch", json!({}), "default"),
        ]
    );
    assert_eq!(
        mounts(loaded.profile(Some("fast")).unwrap()),
        vec![(
            "context-care",
            json!({"budget_ratio": 0.7, "triggers": {"a": 1, "b": 3}, "safety_tokens": 100}),
            "profiles.fast.plugins.context-care"
        )]
    );
}

#[test]
fn act_6_care_and_stream_watch_by_default_enabled_is_the_hosts_key() {
    let none = settings("").unwrap();
    assert_eq!(
        mounts(none.profile(None).unwrap()),
        vec![
            ("context-care", json!({}), "default"),
            ("stream-watch", json!({}), "default"),
        ]
    );
    let off = settings("[plugins.context-care]\nenabled = false\n[plugins.stream-watch]\nenabled = false\nthresholds = \"ignored while off\"\n").unwrap();
    assert!(off.profile(None).unwrap().plugins.is_empty());
    let on = settings("[plugins.context-care]\nenabled = true\nbudget_ratio = 0.5\n").unwrap();
    assert_eq!(
        mounts(on.profile(None).unwrap())[0],
        (
            "context-care",
            json!({"budget_ratio": 0.5}),
            "plugins.context-care"
        )
    );
    assert_eq!(
        error("[plugins.stream-watch]\nenabled = \"no\"\n"),
        "plugins.stream-watch.enabled: expected a boolean, found \"no\""
    );
    assert_eq!(
        error("[profiles.p.plugins.context-care]\nenabled = 0\n"),
        "profiles.p.plugins.context-care.enabled: expected a boolean, found 0"
    );
    // Time-context stays opt-in; [host] time_zone is its default zone.
    let timed = settings(
        "[host]\ntime_zone = \"Asia/Shanghai\"\n[plugins.time-context]\n[plugins.time-context-invariant]\n",
    )
    .unwrap();
    assert_eq!(
        mounts(timed.profile(None).unwrap())[2..],
        [
            (
                "time-context",
                json!({"time_zone": "Asia/Shanghai"}),
                "plugins.time-context"
            ),
            (
                "time-context-invariant",
                json!({}),
                "plugins.time-context-invariant"
            ),
        ]
    );
    let own_zone = settings(
        "[host]\ntime_zone = \"Asia/Shanghai\"\n[plugins.time-context]\ntime_zone = \"UTC\"\n",
    )
    .unwrap();
    assert_eq!(
        own_zone
            .profile(None)
            .unwrap()
            .plugin("time-context")
            .unwrap()
            .config,
        json!({"time_zone": "UTC"})
    );
    assert_eq!(
        error("[plugins.time-travel]\nenabled = true\n"),
        "plugins.time-travel: no such plugin in this build (known: context-care, stream-watch, time-context, time-context-invariant)"
    );
    assert_eq!(
        error("[profiles.p.plugins.time-travel]\n"),
        "profiles.p.plugins.time-travel: no such plugin in this build (known: context-care, stream-watch, time-context, time-context-invariant)"
    );
}

#[test]
fn a_profile_chooses_its_built_in_tools() {
    let loaded = settings(TWO_PROFILES).unwrap();
    assert_eq!(
        loaded.profile(None).unwrap().tools,
        BuiltinTool::ALL.to_vec()
    );
    assert_eq!(
        loaded.profile(Some("reader")).unwrap().tools,
        vec![BuiltinTool::ReadFile, BuiltinTool::ListFiles]
    );
    assert!(
        settings("[profiles.none]\ntools = []\n")
            .unwrap()
            .profile(Some("none"))
            .unwrap()
            .tools
            .is_empty()
    );
    assert_eq!(
        error("[profiles.p]\ntools = [\"read_file\", \"shell\"]\n"),
        "profiles.p.tools: expected built-in tool names (read_file, write_file, list_files, session_search), found \"shell\""
    );
}

#[test]
fn an_unknown_profile_is_named() {
    let loaded = settings(TWO_PROFILES).unwrap();
    let error = loaded.profile(Some("nope")).unwrap_err();
    assert!(matches!(error, AppError::UnknownProfile { .. }));
    assert!(error.is_bad_input());
    assert_eq!(
        error.to_string(),
        "--profile: no profile \"nope\" in the config (profiles: default, fast, reader)"
    );
}

#[test]
fn a_profile_without_a_model_is_named() {
    assert_eq!(
        error("[providers.s]\nkind = \"script\"\n"),
        "agent.model: expected \"<provider>/<model>\", found nothing (set [agent] model)"
    );
}

#[test]
fn instructions_keys_at_agent_and_profile_level() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("team.md"), "Be brief.").unwrap();
    let path = dir.path().join("ccare.toml");
    let load = |text: &str| {
        load_text(text, &path, &home(), &Overrides::default(), &no_env)
            .map_err(|error| error.to_string())
    };
    let loaded = load(
        "[agent]\ninstructions = \"Answer in English.\"\n[profiles.team.agent]\ninstructions_file = \"team.md\"\n",
    )
    .unwrap();
    let default = loaded.profile(None).unwrap();
    assert_eq!(default.instructions.as_deref(), Some("Answer in English."));
    assert_eq!(default.instructions_file, None);
    // A profile that names either key replaces both of [agent]'s.
    let team = loaded.profile(Some("team")).unwrap();
    assert_eq!(team.instructions, None);
    assert_eq!(team.instructions_file, Some(dir.path().join("team.md")));
    let origin = path.display();
    assert_eq!(
        load("[agent]\ninstructions_file = \"missing.md\"\n").unwrap_err(),
        format!(
            "{origin}: agent.instructions_file: expected an instructions file, found no file at {}",
            dir.path().join("missing.md").display()
        )
    );
    assert_eq!(
        load("[profiles.p.agent]\ninstructions_file = \"gone.md\"\n").unwrap_err(),
        format!(
            "{origin}: profiles.p.agent.instructions_file: expected an instructions file, found no file at {}",
            dir.path().join("gone.md").display()
        )
    );
    assert_eq!(
        load("[agent]\ninstructions = \"x\"\ninstructions_file = \"team.md\"\n").unwrap_err(),
        format!(
            "{origin}: agent.instructions_file: expected either agent.instructions or agent.instructions_file, found both"
        )
    );
}
