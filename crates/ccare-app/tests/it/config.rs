//! Loading `ccare.toml` (DESIGN.md §5, H-CFG-1..3): discovery, the host tables
//! (`[host]`, `[store]`, `[validators]`, `[http]`, `[gateway]`), the environment
//! fallback, and errors that name the file, the key path and the value.

use std::path::{Path, PathBuf};

use ccare_app::config::{StoreKind, load_text};
use ccare_app::{AppError, Home, Overrides, Settings, load};
use ccare_core::Locale;
use ccare_store::Durability;

pub(crate) fn no_env(_: &str) -> Option<String> {
    None
}

/// The config file every test pretends to have read.
pub(crate) const FILE: &str = "/cfg/ccare.toml";

pub(crate) fn home() -> Home {
    Home {
        dir: PathBuf::from("/data"),
    }
}

pub(crate) fn settings(text: &str) -> Result<Settings, String> {
    load_text(
        text,
        Path::new(FILE),
        &home(),
        &Overrides::default(),
        &no_env,
    )
    .map_err(|error| error.to_string())
}

/// The load error of `text`, without the `/cfg/ccare.toml: ` prefix (asserted here).
pub(crate) fn error(text: &str) -> String {
    let message = settings(text).err().unwrap_or_default();
    message
        .strip_prefix(&format!("{FILE}: "))
        .unwrap_or_else(|| panic!("the error names the file: {message}"))
        .to_owned()
}

#[test]
fn h_cfg_2_unknown_keys_name_the_key_path_and_the_value() {
    let found =
        error("[providers.local]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\ncolour = 1\n");
    assert!(
        found.starts_with("providers.local.colour: unknown field `colour`"),
        "{found}"
    );
    assert!(found.ends_with(", found 1"), "{found}");
    let found = error("[models.\"local/m\"]\ncontext_window = \"big\"\n");
    assert!(
        found.starts_with(
            "models.local/m.context_window: invalid type: string \"big\", expected u64"
        ),
        "{found}"
    );
    let found = error("[loop]\nmax_step_per_turn = 3\n");
    assert!(
        found.starts_with("loop.max_step_per_turn: unknown field `max_step_per_turn`"),
        "{found}"
    );
    let found = error("[agent]\nmodle = \"local/m\"\n");
    assert!(
        found.starts_with("agent.modle: unknown field `modle`, expected one of `model`"),
        "{found}"
    );
    assert!(found.ends_with(", found \"local/m\""), "{found}");
    let found = error("[store]\ncommit_windows_ms = 3\n");
    assert!(
        found.starts_with("store.commit_windows_ms: unknown field `commit_windows_ms`"),
        "{found}"
    );
    assert!(found.ends_with(", found 3"), "{found}");
    let found = error("[tools]\nshell = true\n");
    assert!(found.starts_with("tools: unknown field `tools`"), "{found}");
    let found = error("[profiles.fast]\nmodel = \"x/y\"\n");
    assert!(
        found.starts_with("profiles.fast.model: unknown field `model`, expected one of `agent`, `plugins`, `tools`"),
        "{found}"
    );
    assert!(found.ends_with(", found \"x/y\""), "{found}");
}

#[test]
fn design_5_contract_example_loads() {
    let loaded = settings(
        r#"
[agent]
model = "local/fake-model"
workspace = "."
locale = "zh"

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
api_key_env = "OPENAI_API_KEY"

[models."local/fake-model"]
context_window = 16000
max_output_tokens = 1024

[plugins.time-context]
time_zone = "UTC"
"#,
    )
    .unwrap();
    let profile = loaded.profile(None).unwrap();
    assert_eq!(profile.model, "local/fake-model");
    assert_eq!(profile.locale, Locale::Zh);
    assert_eq!(profile.workspace, PathBuf::from("/cfg/."));
    assert_eq!(loaded.notice, None);
    assert_eq!(
        loaded
            .llm
            .models
            .get("local/fake-model")
            .and_then(|model| model.context_window),
        Some(16000)
    );
    assert_eq!(
        profile
            .plugin("time-context")
            .map(|plugin| plugin.config.clone()),
        Some(serde_json::json!({"time_zone": "UTC"}))
    );
}

#[test]
fn design_5_no_file_falls_back_to_the_scripted_demo_with_a_notice() {
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        dir: dir.path().to_path_buf(),
    };
    let loaded = load(None, &home, &Overrides::default(), &no_env).unwrap();
    assert_eq!(loaded.source, None);
    assert_eq!(loaded.profile(None).unwrap().model, "demo/scripted");
    assert_eq!(
        loaded.notice.as_deref(),
        Some(
            "no API key found (DEEPSEEK_API_KEY, OPENAI_API_KEY) and no ccare.toml: using the scripted demo provider"
        )
    );
}

#[test]
fn h_cfg_1_discovery_takes_the_flag_then_ccare_config_then_the_home_file() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, model: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("[agent]\nmodel = \"{model}\"\n[providers.s]\nkind = \"script\"\n"),
        )
        .unwrap();
        path
    };
    let flag = write("flag.toml", "s/flag");
    let by_env = write("env.toml", "s/env");
    std::fs::create_dir(dir.path().join("home")).unwrap();
    write("home/ccare.toml", "s/home");
    let home = Home {
        dir: dir.path().join("home"),
    };
    let env_path = by_env.display().to_string();
    let env = |name: &str| (name == "CCARE_CONFIG").then(|| env_path.clone());
    let model = |flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>| {
        let loaded = load(flag, &home, &Overrides::default(), env).unwrap();
        (
            loaded.source.clone().unwrap(),
            loaded.profile(None).unwrap().model.clone(),
        )
    };
    assert_eq!(
        model(Some(&flag), &env),
        (flag.clone(), "s/flag".to_owned())
    );
    assert_eq!(model(None, &env), (by_env.clone(), "s/env".to_owned()));
    // (./ccare.toml comes next; the CLI's tests cover it, a process has one cwd.)
    assert_eq!(
        model(None, &no_env),
        (dir.path().join("home/ccare.toml"), "s/home".to_owned())
    );
    // A named file must exist.
    let missing = dir.path().join("nope.toml");
    let error = load(Some(&missing), &home, &Overrides::default(), &no_env).unwrap_err();
    assert!(error.is_bad_input());
    assert!(
        error
            .to_string()
            .starts_with(&format!("cannot read config {}: ", missing.display())),
        "{error}"
    );
}

#[test]
fn host_table_time_zone_and_actor_idle() {
    let loaded = settings("[host]\ntime_zone = \"Asia/Kolkata\"\nactor_idle_ms = 60000\n").unwrap();
    assert_eq!(loaded.host.time_zone.as_deref(), Some("Asia/Kolkata"));
    assert_eq!(loaded.host.actor_idle_ms, 60_000);
    let defaults = settings("").unwrap();
    assert_eq!(defaults.host.time_zone, None);
    assert_eq!(defaults.host.actor_idle_ms, 300_000);
    assert_eq!(
        error("[host]\ntime_zone = \"Mars/Olympus_Mons\"\n"),
        "host.time_zone: expected an IANA time zone identifier such as \"Asia/Shanghai\" or \"UTC\", found \"Mars/Olympus_Mons\""
    );
    assert_eq!(
        error("[host]\nactor_idle_ms = 0\n"),
        "host.actor_idle_ms: expected a positive integer of at most 9007199254740991, found 0"
    );
    assert_eq!(
        error("[host]\nactor_idle_ms = -5\n"),
        "host.actor_idle_ms: invalid value: integer `-5`, expected u64"
    );
}

#[test]
fn store_table_kind_path_window_and_durability() {
    let defaults = settings("").unwrap();
    assert_eq!(defaults.store.kind, StoreKind::Sqlite);
    assert_eq!(defaults.store.path, PathBuf::from("/data/ccare.db"));
    assert_eq!(defaults.store.commit_window_ms, 200);
    assert_eq!(defaults.store.busy_timeout_ms, 5000);
    assert_eq!(defaults.store.durability, Durability::Group);
    let loaded = settings(
        "[store]\nkind = \"sqlite\"\npath = \"db/sessions.db\"\ncommit_window_ms = 50\nbusy_timeout_ms = 250\ndurability = \"per-append\"\n",
    )
    .unwrap();
    assert_eq!(loaded.store.path, PathBuf::from("/cfg/db/sessions.db"));
    assert_eq!(loaded.store.commit_window_ms, 50);
    assert_eq!(loaded.store.busy_timeout_ms, 250);
    assert_eq!(loaded.store.durability, Durability::PerAppend);
    assert_eq!(
        settings("[store]\ndurability = \"group\"\n")
            .unwrap()
            .store
            .durability,
        Durability::Group
    );
    assert_eq!(
        error("[store]\nkind = \"postgres\"\n"),
        "store.kind: expected \"sqlite\" (the only store of this build), found \"postgres\""
    );
    assert_eq!(
        error("[store]\ndurability = \"sometimes\"\n"),
        "store.durability: expected \"group\" or \"per-append\", found \"sometimes\""
    );
    assert_eq!(
        error("[store]\ncommit_window_ms = 120000\n"),
        "store.commit_window_ms: expected at most 60000 (ms), found 120000"
    );
    assert_eq!(
        error("[store]\nbusy_timeout_ms = 600001\n"),
        "store.busy_timeout_ms: expected at most 600000 (ms), found 600001"
    );
    assert_eq!(
        error("[store]\npath = \"\"\n"),
        "store.path: expected the database file, found \"\""
    );
}

#[test]
fn h_val_3_validators_table() {
    let loaded = settings(
        "[validators]\nstrict_load = true\nallow = [\"tool-pairing\", \"turn-step-nesting\"]\ndeny = [\"tool-pairing\"]\n",
    )
    .unwrap();
    assert!(loaded.validators.strict);
    assert!(loaded.validators.runs("turn-step-nesting"));
    assert!(!loaded.validators.runs("tool-pairing"), "deny wins");
    assert!(
        !loaded.validators.runs("single-open-compaction"),
        "not allowed"
    );
    let defaults = settings("").unwrap();
    assert!(!defaults.validators.strict);
    assert!(defaults.validators.runs("single-open-compaction"));
    assert_eq!(
        error("[validators]\nstrict_load = \"yes\"\n"),
        "validators.strict_load: invalid type: string \"yes\", expected a boolean"
    );
}

#[test]
fn http_table_is_validated_now() {
    let defaults = settings("").unwrap();
    assert_eq!(defaults.http.addr.to_string(), "127.0.0.1:7878");
    assert_eq!(defaults.http.token_env, None);
    assert!(defaults.http.trusted_hosts.is_empty());
    let loaded = settings(
        "[http]\naddr = \"[::1]:8080\"\ntoken_env = \"CCARE_TOKEN\"\ntrusted_hosts = [\"agents.example.com\", \"10.0.0.7\"]\n",
    )
    .unwrap();
    assert_eq!(loaded.http.addr.to_string(), "[::1]:8080");
    assert_eq!(loaded.http.token_env.as_deref(), Some("CCARE_TOKEN"));
    assert_eq!(
        loaded.http.trusted_hosts,
        vec!["agents.example.com".to_owned(), "10.0.0.7".to_owned()]
    );
    assert_eq!(
        error("[http]\naddr = \"localhost\"\n"),
        "http.addr: expected a socket address such as \"127.0.0.1:7878\" or \"[::1]:7878\", found \"localhost\""
    );
    assert_eq!(
        error("[http]\ntoken_env = \"MY-TOKEN\"\n"),
        "http.token_env: expected the name of an environment variable (letters, digits and _, not starting with a digit), found \"MY-TOKEN\""
    );
    assert_eq!(
        error("[http]\ntrusted_hosts = [\"ok.example\", \"https://bad.example\"]\n"),
        "http.trusted_hosts[1]: expected a host name such as \"example.com\" or an IP address, without scheme or port, found \"https://bad.example\""
    );
}

/// GW-1: `[gateway] pass_through_keys` is off unless set, and loads when set.
#[test]
fn gateway_table_maps_models_and_loads_pass_through_keys() {
    let loaded = settings(
        "[agent]\nmodel = \"local/qwen3\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://x/v1\"\n[gateway]\nmodels = { \"gpt-4o\" = \"local/qwen3\" }\npass_through_keys = false\n",
    )
    .unwrap();
    assert_eq!(
        loaded.gateway.models.get("gpt-4o").map(String::as_str),
        Some("local/qwen3")
    );
    assert!(!loaded.gateway.pass_through_keys, "false as written");
    let empty = settings("[gateway]\n").unwrap();
    assert!(empty.gateway.models.is_empty());
    assert!(!empty.gateway.pass_through_keys, "off by default");
    assert!(
        !settings("").unwrap().gateway.pass_through_keys,
        "off with no table"
    );
    assert!(
        settings("[gateway]\npass_through_keys = true\n")
            .unwrap()
            .gateway
            .pass_through_keys
    );
    assert_eq!(
        empty.gateway.max_request_bytes,
        32 * 1024 * 1024,
        "32 MiB by default"
    );
    assert_eq!(
        settings("[gateway]\nmax_request_mib = 4\n")
            .unwrap()
            .gateway
            .max_request_bytes,
        4 * 1024 * 1024
    );
    for bad in ["0", "1025"] {
        assert_eq!(
            error(&format!("[gateway]\nmax_request_mib = {bad}\n")),
            format!("gateway.max_request_mib: expected 1 to 1024, found {bad}")
        );
    }
    assert!(
        error("[gateway]\nport = 9000\n").starts_with(
            "gateway.port: unknown field `port`, expected one of `models`, `pass_through_keys`, `max_request_mib`"
        ),
        "{}",
        error("[gateway]\nport = 9000\n")
    );
    assert!(
        error("[gateway]\npass_through_keys = \"yes\"\n")
            .starts_with("gateway.pass_through_keys: "),
        "{}",
        error("[gateway]\npass_through_keys = \"yes\"\n")
    );
    assert_eq!(
        error("[gateway]\nmodels = { \"gpt-4o\" = \"nowhere/qwen3\" }\n"),
        "gateway.models.gpt-4o: no provider named \"nowhere\" is configured (in \"nowhere/qwen3\")"
    );
    assert_eq!(
        error("[gateway]\nmodels = { \"gpt-4o\" = \"qwen3\" }\n"),
        "gateway.models.gpt-4o: expected \"<provider>/<model>\", found \"qwen3\""
    );
    assert_eq!(
        error("[gateway]\nmodels = { \"a/b\" = \"local/qwen3\" }\n"),
        "gateway.models: an alias is a bare model name (no \"/\", not empty), found \"a/b\""
    );
}

#[test]
fn invalid_config_is_bad_input() {
    let error = load_text(
        "[store]\nkind = \"postgres\"\n",
        Path::new(FILE),
        &home(),
        &Overrides::default(),
        &no_env,
    )
    .unwrap_err();
    assert!(matches!(error, AppError::Config { .. }), "{error:?}");
    assert!(error.is_bad_input());
}

#[test]
fn model_and_loop_values_no_turn_could_use_are_refused_naming_the_key() {
    // Each of these loaded before, and then failed every turn: a window the session
    // log cannot carry exactly (NON_LOSSLESS_JSON), no step or no tool slot allowed.
    let model = |line: &str| error(&format!("[models.\"s/m\"]\n{line}\n"));
    assert_eq!(
        model("context_window = 9223372036854775807"),
        "models.s/m.context_window: expected a positive integer of at most 9007199254740991, found 9223372036854775807"
    );
    assert_eq!(
        model("context_window = 0"),
        "models.s/m.context_window: expected a positive integer of at most 9007199254740991, found 0"
    );
    assert_eq!(
        model("max_output_tokens = 0"),
        "models.s/m.max_output_tokens: expected a positive integer, found 0"
    );
    assert_eq!(
        model("image_tokens = 9007199254740992"),
        "models.s/m.image_tokens: expected at most 9007199254740991, found 9007199254740992"
    );
    assert_eq!(
        error("[loop]\nmax_steps_per_turn = 0\n"),
        "loop.max_steps_per_turn: expected at least 1, found 0"
    );
    assert_eq!(
        error("[loop]\ntool_pool = 0\n"),
        "loop.tool_pool: expected at least 1, found 0"
    );
    // The edges that work still load.
    let loaded = settings(
        "[models.\"s/m\"]\ncontext_window = 9007199254740991\nmax_output_tokens = 1\n\
         image_tokens = 0\n[loop]\nmax_steps_per_turn = 1\ntool_pool = 1\n",
    )
    .unwrap();
    assert_eq!(
        loaded.llm.models["s/m"].context_window,
        Some(9_007_199_254_740_991)
    );
    assert_eq!(loaded.loop_limits.max_steps_per_turn, 1);
}
