//! Storage domains (spec H-DOM-1..4) against the in-memory store, the test kit's
//! `FailingStore` around it (KV write acknowledgements held back or refused), and a
//! real SQLite file that is reopened as after a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use ccare_domains::domains::{
    DomainChanged, DomainError, DomainSpec, Domains, RecordId, TableSpec,
};
use ccare_store::testing::{FailingStore, Fault};
use ccare_store::{MemoryStore, SqliteConfig, SqliteStore, Store};
use parking_lot::Mutex;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------
// Fixtures.

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

fn sqlite(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(SqliteConfig::new(dir.path().join("state.db"))).unwrap()
}

fn notes_spec(version: u64) -> DomainSpec {
    DomainSpec::new("notes", version)
        .table(TableSpec::new("notes"))
        .table(TableSpec::by_first_segment("by_session"))
        .global(json!({"count": 0}))
}

/// What each migration call saw: from, to, stored tables.
type MigrationCalls = Arc<Mutex<Vec<(u64, u64, Vec<String>)>>>;

async fn stored(store: &dyn Store, domain: &str, key: &str) -> Option<Value> {
    store
        .kv_get(domain, key)
        .await
        .unwrap()
        .map(|entry| serde_json::from_slice(&entry.value).unwrap())
}

fn value(table: &ccare_domains::domains::Table, key: &str) -> Option<Value> {
    table.get(key).map(|value| Value::clone(&value))
}

/// Receives the change notifications already sent.
fn drain(changes: &mut tokio::sync::broadcast::Receiver<DomainChanged>) -> Vec<DomainChanged> {
    let mut seen = Vec::new();
    while let Ok(change) = changes.try_recv() {
        seen.push(change);
    }
    seen
}

// ---------------------------------------------------------------------------------
// H-DOM-1: open, ownership, versions, migration.

#[tokio::test]
async fn h_dom_1_second_opener_gets_domain_in_use_until_closed() {
    let domains = Domains::new(memory());
    let first = domains.open(notes_spec(1), "plugin_a").await.unwrap();

    let error = domains.open(notes_spec(1), "plugin_b").await.unwrap_err();
    assert_eq!(error.code(), "DOMAIN_IN_USE");
    assert_eq!(
        error,
        DomainError::InUse {
            domain: "notes".into(),
            owner: "plugin_a".into()
        }
    );
    // The holder itself cannot open a second handle either; it clones the first.
    let again = domains.open(notes_spec(1), "plugin_a").await.unwrap_err();
    assert_eq!(again.code(), "DOMAIN_IN_USE");
    assert_eq!(domains.owner("notes").as_deref(), Some("plugin_a"));

    first
        .table("notes")
        .unwrap()
        .put("k", json!(1))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(domains.close_owner("plugin_a"), vec!["notes".to_owned()]);
    assert!(first.is_closed());
    assert_eq!(
        first
            .table("notes")
            .unwrap()
            .put("k", json!(2))
            .unwrap_err()
            .code(),
        "DOMAIN_CLOSED"
    );
    assert!(!domains.close("notes"), "already closed");

    let second = domains.open(notes_spec(1), "plugin_b").await.unwrap();
    assert_eq!(value(&second.table("notes").unwrap(), "k"), Some(json!(1)));
    assert_eq!(domains.owner("notes").as_deref(), Some("plugin_b"));
    // The scoped opener goes through the same registry.
    let scoped = domains.for_owner("plugin_c");
    assert_eq!(
        scoped.open(notes_spec(1)).await.unwrap_err().code(),
        "DOMAIN_IN_USE"
    );
    assert!(domains.close("notes"));
    assert_eq!(scoped.open(notes_spec(1)).await.unwrap().name(), "notes");
}

#[tokio::test]
async fn h_dom_1_names_and_specs_are_validated_and_a_failed_open_frees_the_name() {
    let domains = Domains::new(memory());
    for name in ["", "Notes", "1notes", "_notes", "no-tes", "notes/x"] {
        let error = domains
            .open(DomainSpec::new(name, 1), "p")
            .await
            .unwrap_err();
        assert_eq!(error.code(), "DOMAIN_INVALID_NAME", "{name:?}");
    }
    let zero = domains
        .open(DomainSpec::new("ok", 0), "p")
        .await
        .unwrap_err();
    assert_eq!(zero.code(), "DOMAIN_INVALID_SPEC");
    let twice = DomainSpec::new("ok", 1)
        .table(TableSpec::new("t"))
        .table(TableSpec::new("t"));
    assert_eq!(
        domains.open(twice, "p").await.unwrap_err().code(),
        "DOMAIN_INVALID_SPEC"
    );
    let bad_table = DomainSpec::new("ok", 1).table(TableSpec::new("__meta"));
    assert_eq!(
        domains.open(bad_table, "p").await.unwrap_err().code(),
        "DOMAIN_INVALID_SPEC"
    );
    assert_eq!(domains.owner("ok"), None);
    domains.open(DomainSpec::new("ok", 1), "p").await.unwrap();
}

#[tokio::test]
async fn h_dom_1_newer_stored_version_is_refused() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let v2 = domains.open(notes_spec(2), "p").await.unwrap();
    v2.table("notes")
        .unwrap()
        .put("k", json!("v2 row"))
        .unwrap()
        .await
        .unwrap();
    domains.close("notes");

    let error = domains.open(notes_spec(1), "p").await.unwrap_err();
    assert_eq!(
        error,
        DomainError::VersionNewer {
            domain: "notes".into(),
            stored: 2,
            requested: 1
        }
    );
    assert_eq!(error.code(), "DOMAIN_VERSION_NEWER");
    // Nothing was touched and the name is free again.
    assert_eq!(
        stored(store.as_ref(), "notes", "__meta").await,
        Some(json!({"version": 2}))
    );
    assert_eq!(domains.owner("notes"), None);
    domains.open(notes_spec(2), "p").await.unwrap();
}

#[tokio::test]
async fn h_dom_1_older_version_without_migrate_is_refused_and_a_failing_migration_writes_nothing() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let v1 = domains.open(notes_spec(1), "p").await.unwrap();
    v1.table("notes")
        .unwrap()
        .put("k", json!(1))
        .unwrap()
        .await
        .unwrap();
    domains.close("notes");

    let error = domains.open(notes_spec(3), "p").await.unwrap_err();
    assert_eq!(
        error,
        DomainError::MigrationRequired {
            domain: "notes".into(),
            stored: 1,
            requested: 3
        }
    );
    assert_eq!(error.code(), "DOMAIN_MIGRATION_REQUIRED");

    let refusing = notes_spec(3).migrate(|context| {
        context.put("notes", "k", json!("half-migrated"))?;
        Err(context.fail("cannot read k"))
    });
    let error = domains.open(refusing, "p").await.unwrap_err();
    assert_eq!(error.code(), "DOMAIN_MIGRATION_FAILED");
    assert_eq!(
        error,
        DomainError::MigrationFailed {
            domain: "notes".into(),
            from: 1,
            to: 3,
            message: "cannot read k".into()
        }
    );
    assert_eq!(
        stored(store.as_ref(), "notes", "notes/k").await,
        Some(json!(1))
    );
    assert_eq!(
        stored(store.as_ref(), "notes", "__meta").await,
        Some(json!({"version": 1}))
    );
    assert_eq!(domains.owner("notes"), None);
}

#[tokio::test]
async fn h_dom_1_older_version_is_migrated_durably_and_only_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Arc<dyn Store> = Arc::new(sqlite(&dir));
        let domains = Domains::new(Arc::clone(&store));
        let v1 = domains
            .open(
                DomainSpec::new("journal", 1).table(TableSpec::new("entries")),
                "p",
            )
            .await
            .unwrap();
        let entries = v1.table("entries").unwrap();
        entries.put("a", json!({"text": "alpha"})).unwrap();
        entries.put("b", json!({"text": "beta"})).unwrap();
        entries.put("c", json!({"text": "obsolete"})).unwrap();
        v1.flush(None).await.unwrap();
    }

    let v2_spec = |calls: MigrationCalls| {
        DomainSpec::new("journal", 2)
            .table(TableSpec::by_first_segment("records"))
            .global(json!({"migrated": false}))
            .migrate(move |context| {
                calls.lock().push((
                    context.from_version(),
                    context.to_version(),
                    context.tables(),
                ));
                for (key, value) in context.entries("entries", "") {
                    context.delete("entries", &key);
                    if key == "c" {
                        continue;
                    }
                    let text = value["text"].as_str().unwrap().to_uppercase();
                    context.put("records", &format!("s1/{key}"), json!({"text": text}))?;
                }
                context.set_global(Some(json!({"migrated": true})))?;
                Ok(())
            })
    };

    let calls = Arc::new(Mutex::new(Vec::new()));
    {
        let store: Arc<dyn Store> = Arc::new(sqlite(&dir));
        let domains = Domains::new(Arc::clone(&store));
        let v2 = domains
            .open(v2_spec(Arc::clone(&calls)), "p")
            .await
            .unwrap();
        assert_eq!(v2.version(), 2);
        let records = v2.table("records").unwrap();
        let keys: Vec<(String, Value)> = records
            .entries("s1/")
            .into_iter()
            .map(|(key, value)| (key, Value::clone(&value)))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("s1/a".to_owned(), json!({"text": "ALPHA"})),
                ("s1/b".to_owned(), json!({"text": "BETA"})),
            ]
        );
        assert_eq!(*v2.global().unwrap().get(), json!({"migrated": true}));
        assert_eq!(
            v2.table("entries").unwrap_err().code(),
            "DOMAIN_UNKNOWN_TABLE"
        );
        assert_eq!(
            stored(store.as_ref(), "journal", "__meta").await,
            Some(json!({"version": 2}))
        );
        assert_eq!(stored(store.as_ref(), "journal", "entries/a").await, None);
        // The migrated rows are writable: their versions were reloaded.
        records
            .put("s1/a", json!({"text": "edited"}))
            .unwrap()
            .await
            .unwrap();
    }
    assert_eq!(*calls.lock(), vec![(1, 2, vec!["entries".to_owned()])]);

    // Reopening at version 2 does not migrate again.
    let store: Arc<dyn Store> = Arc::new(sqlite(&dir));
    let domains = Domains::new(store);
    let v2 = domains
        .open(v2_spec(Arc::clone(&calls)), "p")
        .await
        .unwrap();
    assert_eq!(calls.lock().len(), 1);
    assert_eq!(
        value(&v2.table("records").unwrap(), "s1/a"),
        Some(json!({"text": "edited"}))
    );
}

#[tokio::test]
async fn h_dom_1_rows_without_a_version_row_count_as_version_zero() {
    let store = memory();
    store
        .kv_cas("legacy", "items/x", None, Some(b"7".to_vec()))
        .await
        .unwrap();
    let domains = Domains::new(Arc::clone(&store));
    let spec = || DomainSpec::new("legacy", 1).table(TableSpec::new("items"));
    assert_eq!(
        domains.open(spec(), "p").await.unwrap_err(),
        DomainError::MigrationRequired {
            domain: "legacy".into(),
            stored: 0,
            requested: 1
        }
    );
    let migrated = spec().migrate(|context| {
        assert_eq!(context.from_version(), 0);
        let x = context.get("items", "x").cloned().unwrap();
        context.put("items", "x", json!({"value": x}))
    });
    let legacy = domains.open(migrated, "p").await.unwrap();
    assert_eq!(
        value(&legacy.table("items").unwrap(), "x"),
        Some(json!({"value": 7}))
    );
}

#[tokio::test]
async fn h_dom_1_a_corrupt_row_fails_the_open() {
    let store = memory();
    store
        .kv_cas("broken", "__meta", None, Some(br#"{"version":1}"#.to_vec()))
        .await
        .unwrap();
    store
        .kv_cas("broken", "t/x", None, Some(b"{not json".to_vec()))
        .await
        .unwrap();
    let domains = Domains::new(store);
    let error = domains
        .open(DomainSpec::new("broken", 1).table(TableSpec::new("t")), "p")
        .await
        .unwrap_err();
    assert_eq!(error.code(), "DOMAIN_CORRUPT");
    assert_eq!(domains.owner("broken"), None);
}

#[tokio::test]
async fn h_dom_1_reopen_waits_for_the_previous_holders_queued_writes() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let first = domains.open(notes_spec(1), "a").await.unwrap();
    store.hold_kv_writes();
    let ticket = first
        .table("notes")
        .unwrap()
        .put("late", json!("queued"))
        .unwrap();
    assert!(domains.close("notes"));

    let opening = tokio::spawn({
        let domains = domains.clone();
        async move { domains.open(notes_spec(1), "b").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !opening.is_finished(),
        "the new holder waits for the old queue"
    );
    store.release_kv_writes();
    ticket.await.unwrap();
    let second = opening.await.unwrap().unwrap();
    assert_eq!(
        value(&second.table("notes").unwrap(), "late"),
        Some(json!("queued"))
    );
}

// ---------------------------------------------------------------------------------
// H-DOM-2: records, reads, limits.

#[tokio::test]
async fn h_dom_2_records_are_table_slash_key_rows_of_compact_json() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains
        .open(
            DomainSpec::new("rows", 1)
                .table(TableSpec::new("a"))
                .table(TableSpec::new("ab"))
                .global(json!(null)),
            "p",
        )
        .await
        .unwrap();
    let a = domain.table("a").unwrap();
    let ab = domain.table("ab").unwrap();
    a.put("x/2", json!({"n": 2, "s": "two"})).unwrap();
    a.put("x/1", json!([1])).unwrap();
    a.put("y", json!(true)).unwrap();
    ab.put("x/0", json!("other table")).unwrap();
    domain.global().unwrap().set(json!({"g": 1})).unwrap();
    domain.flush(None).await.unwrap();

    let raw = store.kv_get("rows", "a/x/2").await.unwrap().unwrap();
    assert_eq!(raw.version, 1);
    assert_eq!(raw.value, br#"{"n":2,"s":"two"}"#);
    assert_eq!(
        stored(store.as_ref(), "rows", "__global").await,
        Some(json!({"g": 1}))
    );
    assert_eq!(
        stored(store.as_ref(), "rows", "__meta").await,
        Some(json!({"version": 1}))
    );

    let listed: Vec<(String, Value)> = a
        .entries("x/")
        .into_iter()
        .map(|(key, value)| (key, Value::clone(&value)))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("x/1".to_owned(), json!([1])),
            ("x/2".to_owned(), json!({"n": 2, "s": "two"}))
        ]
    );
    assert_eq!(a.entries("").len(), 3);
    assert_eq!(ab.entries("").len(), 1);
    // Counted as listed: by prefix, within the table, acknowledged rows only.
    assert_eq!((a.count("x/"), a.count(""), a.count("z")), (2, 3, 0));
    assert_eq!(ab.count(""), 1);
    assert_eq!(value(&a, "missing"), None);

    a.delete("y").unwrap().await.unwrap();
    assert_eq!(value(&a, "y"), None);
    assert_eq!(store.kv_get("rows", "a/y").await.unwrap(), None);
    // Deleting an absent row is a no-op.
    a.delete("y").unwrap().await.unwrap();

    assert_eq!(
        domain.table("nope").unwrap_err().code(),
        "DOMAIN_UNKNOWN_TABLE"
    );
    let no_global = domains.open(DomainSpec::new("bare", 1), "p").await.unwrap();
    assert_eq!(no_global.global().unwrap_err().code(), "DOMAIN_NO_GLOBAL");
}

#[tokio::test]
async fn h_dom_2_global_record_has_a_default_and_an_update() {
    let domains = Domains::new(memory());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let global = domain.global().unwrap();
    assert_eq!(*global.get(), json!({"count": 0}));
    for _ in 0..3 {
        global
            .update(|current| json!({"count": current["count"].as_i64().unwrap() + 1}))
            .unwrap();
    }
    domain.flush(None).await.unwrap();
    assert_eq!(*global.get(), json!({"count": 3}));
}

#[tokio::test]
async fn h_dom_2_key_and_value_limits_are_checked_before_queueing() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();

    // "notes/" is 6 bytes: 506 more make the row key exactly 512.
    let longest = "k".repeat(512 - "notes/".len());
    notes.put(&longest, json!(1)).unwrap().await.unwrap();
    let too_long = "k".repeat(512 - "notes/".len() + 1);
    let error = notes.put(&too_long, json!(1)).unwrap_err();
    assert_eq!(error.code(), "KEY_TOO_LONG");
    match &error {
        DomainError::KeyTooLong {
            domain,
            record: RecordId::Row { table, key },
            bytes,
            limit,
        } => {
            assert_eq!((domain.as_str(), table.as_str()), ("notes", "notes"));
            assert!(
                key.starts_with("kkkk") && key.contains("507 bytes"),
                "{key}"
            );
            assert_eq!((*bytes, *limit), (513, 512));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(notes.delete(&too_long).unwrap_err().code(), "KEY_TOO_LONG");
    assert_eq!(
        notes.update(&too_long, |_| None).unwrap_err().code(),
        "KEY_TOO_LONG"
    );
    assert_eq!(
        notes.put("", json!(1)).unwrap_err().code(),
        "DOMAIN_INVALID_KEY"
    );
    assert_eq!(
        notes.put("a\0b", json!(1)).unwrap_err().code(),
        "DOMAIN_INVALID_KEY"
    );

    let four_mib = 4 * 1024 * 1024;
    // A JSON string of n characters encodes to n + 2 bytes.
    notes
        .put("big", json!("x".repeat(four_mib - 2)))
        .unwrap()
        .await
        .unwrap();
    let error = notes
        .put("big", json!("x".repeat(four_mib - 1)))
        .unwrap_err();
    assert_eq!(error.code(), "VALUE_TOO_LARGE");
    assert!(error.to_string().contains("notes/big"), "{error}");
    let error = domain
        .global()
        .unwrap()
        .set(json!("x".repeat(four_mib)))
        .unwrap_err();
    assert_eq!(error.code(), "VALUE_TOO_LARGE");

    // An update computes its value in the queue: the ticket reports the limit and
    // memory keeps the old value.
    let before = notes.get("big").unwrap();
    let error = notes
        .update("big", move |_| Some(json!("y".repeat(four_mib))))
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.code(), "VALUE_TOO_LARGE");
    assert!(Arc::ptr_eq(&before, &notes.get("big").unwrap()));
    assert_eq!(
        store
            .kv_get("notes", "notes/big")
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
    // Reported through the ticket, so the flush is clean.
    domain.flush(None).await.unwrap();
}

// ---------------------------------------------------------------------------------
// H-DOM-3: acknowledged reads, ordering, the update CAS loop.

#[tokio::test]
async fn h_dom_3_reads_see_only_acknowledged_values() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("k", json!("old")).unwrap().await.unwrap();
    let mut changes = domain.subscribe();

    store.hold_kv_writes();
    let ticket = notes.put("k", json!("new")).unwrap();
    let created = notes.put("fresh", json!(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(value(&notes, "k"), Some(json!("old")), "not durable yet");
    assert_eq!(value(&notes, "fresh"), None);
    assert!(drain(&mut changes).is_empty());

    store.release_kv_writes();
    ticket.await.unwrap();
    assert_eq!(value(&notes, "k"), Some(json!("new")));
    created.await.unwrap();
    assert_eq!(
        drain(&mut changes),
        vec![
            DomainChanged {
                domain: Arc::from("notes"),
                record: RecordId::Row {
                    table: "notes".into(),
                    key: "k".into()
                },
                version: Some(2),
            },
            DomainChanged {
                domain: Arc::from("notes"),
                record: RecordId::Row {
                    table: "notes".into(),
                    key: "fresh".into()
                },
                version: Some(1),
            },
        ]
    );
}

/// `put_lingering` is a put whose store write may keep its group open for what the
/// caller sends next (`Store::kv_cas_lingering`); `put` and the other writes never ask
/// for that. Both are read back alike.
#[tokio::test]
async fn h_dom_3_a_lingering_put_asks_the_store_to_linger() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("plain", json!(1)).unwrap().await.unwrap();
    notes.delete("plain").unwrap().await.unwrap();
    notes
        .update("updated", |_| Some(json!(2)))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(store.lingering_kv_writes(), 0);
    notes
        .put_lingering("lingering", json!(3))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(store.lingering_kv_writes(), 1);
    assert_eq!(value(&notes, "lingering"), Some(json!(3)));
    assert_eq!(
        stored(store.as_ref(), "notes", "notes/lingering").await,
        Some(json!(3))
    );
}

/// Writes to one partition apply in call order, through many rounds, with deletes.
async fn check_partition_order(store: Arc<dyn Store>) {
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let by_session = domain.table("by_session").unwrap();
    let mut changes = domain.subscribe();
    let mut expected = Vec::new();
    for i in 0..60_u64 {
        for session in ["s1", "s2"] {
            let key = format!("{session}/k{}", i % 4);
            if i % 7 == 6 {
                by_session.delete(&key).unwrap();
            } else {
                by_session.put(&key, json!(i)).unwrap();
            }
            if session == "s1" {
                expected.push((key, i));
            }
        }
    }
    assert_eq!(by_session.partition("s1/k0").as_deref(), Some("s1"));
    domain.flush(Some("s1")).await.unwrap();
    domain.flush(None).await.unwrap();

    // The s1 notifications come in call order (deletes of absent rows notify nothing).
    let seen: Vec<String> = drain(&mut changes)
        .into_iter()
        .filter_map(|change| match change.record {
            RecordId::Row { key, .. } if key.starts_with("s1/") => Some(key),
            _ => None,
        })
        .collect();
    let mut present = std::collections::HashSet::new();
    let called: Vec<String> = expected
        .iter()
        .filter(|(key, i)| {
            if i % 7 == 6 {
                present.remove(key)
            } else {
                present.insert(key.clone());
                true
            }
        })
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(seen, called);

    for k in 0..4_u64 {
        let key = format!("s1/k{k}");
        let last = expected
            .iter()
            .rev()
            .find(|(written, _)| *written == key)
            .unwrap();
        let want = (last.1 % 7 != 6).then(|| json!(last.1));
        assert_eq!(value(&by_session, &key), want, "{key}");
        assert_eq!(
            stored(store.as_ref(), "notes", &format!("by_session/{key}")).await,
            want
        );
    }
}

#[tokio::test]
async fn h_dom_3_writes_in_one_partition_apply_in_call_order_memory() {
    check_partition_order(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_dom_3_writes_in_one_partition_apply_in_call_order_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    check_partition_order(Arc::new(sqlite(&dir))).await;
}

#[tokio::test]
async fn h_dom_3_partitions_are_independent_queues() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains
        .open(
            DomainSpec::new("parts", 1).table(TableSpec::by("t", |key: &str| {
                key.chars().take(2).collect()
            })),
            "p",
        )
        .await
        .unwrap();
    let table = domain.table("t").unwrap();
    table.put("aa1", json!(1)).unwrap().await.unwrap();
    store.fail(Fault::kv_writes("disk full").once());
    let failed = table.put("aa1", json!(2)).unwrap();
    table.put("bb1", json!(3)).unwrap();
    drop(failed);
    // Each partition's flush reports only its own failures.
    domain.flush(Some("bb")).await.unwrap();
    assert_eq!(
        domain.flush(Some("aa")).await.unwrap_err().code(),
        "STORE_IO"
    );
    domain.flush(Some("aa")).await.unwrap();
    domain.flush(None).await.unwrap();
    assert_eq!(value(&table, "aa1"), Some(json!(1)));
    assert_eq!(value(&table, "bb1"), Some(json!(3)));
}

async fn check_concurrent_updates(store: Arc<dyn Store>) {
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let notes = domain.table("notes").unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let ticket = notes
                    .update("counter", |current| {
                        Some(json!(current.and_then(Value::as_u64).unwrap_or(0) + 1))
                    })
                    .unwrap();
                ticket.await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        value(&domain.table("notes").unwrap(), "counter"),
        Some(json!(100))
    );
    let raw = store
        .kv_get("notes", "notes/counter")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((raw.version, raw.value), (100, b"100".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_dom_3_update_converges_under_two_concurrent_updaters_memory() {
    check_concurrent_updates(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_dom_3_update_converges_under_two_concurrent_updaters_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    check_concurrent_updates(Arc::new(sqlite(&dir))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_dom_3_update_cas_loop_retries_against_writes_behind_its_back() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    let increment =
        |current: Option<&Value>| Some(json!(current.and_then(Value::as_u64).unwrap_or(0) + 1));

    // A foreign writer increments the same row directly through the store.
    let foreign = tokio::spawn({
        let store = Arc::clone(&store);
        async move {
            let mut done = 0;
            while done < 50 {
                let current = store.kv_get("notes", "notes/counter").await.unwrap();
                let (version, count) = match current {
                    Some(entry) => (
                        Some(entry.version),
                        serde_json::from_slice::<u64>(&entry.value).unwrap(),
                    ),
                    None => (None, 0),
                };
                let next = (count + 1).to_string().into_bytes();
                if store
                    .kv_cas("notes", "notes/counter", version, Some(next))
                    .await
                    .is_ok()
                {
                    done += 1;
                }
                tokio::task::yield_now().await;
            }
        }
    });
    for _ in 0..50 {
        notes.update("counter", increment).unwrap().await.unwrap();
        tokio::task::yield_now().await;
    }
    foreign.await.unwrap();
    assert_eq!(
        stored(store.as_ref(), "notes", "notes/counter").await,
        Some(json!(100))
    );
    // Memory may lag the foreign writes; the next update re-reads and catches up.
    notes.update("counter", increment).unwrap().await.unwrap();
    assert_eq!(value(&notes, "counter"), Some(json!(101)));
}

#[tokio::test]
async fn h_dom_3_update_edge_cases() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("k", json!(1)).unwrap().await.unwrap();

    // Returning the current value writes nothing.
    notes
        .update("k", |current| current.cloned())
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        store
            .kv_get("notes", "notes/k")
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
    // `None` for an absent row writes nothing either.
    notes.update("absent", |_| None).unwrap().await.unwrap();
    assert_eq!(store.kv_get("notes", "notes/absent").await.unwrap(), None);
    // Returning `None` deletes.
    notes.update("k", |_| None).unwrap().await.unwrap();
    assert_eq!(value(&notes, "k"), None);
    assert_eq!(store.kv_get("notes", "notes/k").await.unwrap(), None);

    // A panicking update fails its own write only; the queue goes on.
    let panicking = notes.update("p", |_| panic!("update bug")).unwrap();
    let after = notes.put("p", json!("after")).unwrap();
    assert_eq!(
        panicking.await.unwrap_err().code(),
        "DOMAIN_UPDATE_PANICKED"
    );
    after.await.unwrap();
    assert_eq!(value(&notes, "p"), Some(json!("after")));
}

// ---------------------------------------------------------------------------------
// H-DOM-4: tickets, flush, failures.

#[tokio::test]
async fn h_dom_4_failed_write_leaves_memory_unchanged_and_flush_reports_it_once() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("k", json!("kept")).unwrap().await.unwrap();
    let mut changes = domain.subscribe();

    store.fail(Fault::kv_writes("disk full").once());
    // The ticket is dropped: only flush can report the failure.
    drop(notes.put("k", json!("lost")).unwrap());
    let error = domain.flush(None).await.unwrap_err();
    assert_eq!(error.code(), "STORE_IO");
    assert!(matches!(
        &error,
        DomainError::Store { domain, record: Some(RecordId::Row { table, key }), .. }
            if domain == "notes" && table == "notes" && key == "k"
    ));
    assert_eq!(value(&notes, "k"), Some(json!("kept")));
    assert!(drain(&mut changes).is_empty());
    domain.flush(None).await.unwrap();

    // A failure yielded by its ticket is not reported again.
    store.fail(Fault::kv_writes("disk full").once());
    let error = notes
        .put("k", json!("lost again"))
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STORE_IO");
    domain.flush(None).await.unwrap();

    // Of two unreported failures flush returns the older, then nothing.
    store.fail(Fault::kv_writes("disk full").once());
    drop(notes.put("first", json!(1)).unwrap());
    domain.flush(None).await.unwrap_err();
    store.fail(Fault::kv_writes("disk full").once());
    drop(notes.put("second", json!(1)).unwrap());
    store.fail(Fault::kv_writes("disk full").once());
    drop(domain.global().unwrap().set(json!(2)).unwrap());
    let oldest = domain.flush(None).await.unwrap_err();
    assert!(
        matches!(&oldest, DomainError::Store { record: Some(RecordId::Row { key, .. }), .. } if key == "second"),
        "{oldest:?}"
    );
    domain.flush(None).await.unwrap();

    // Writes after the failures still work.
    notes.put("k", json!("new")).unwrap().await.unwrap();
    assert_eq!(value(&notes, "k"), Some(json!("new")));
}

#[tokio::test]
async fn h_dom_4_put_over_a_row_written_behind_its_back_is_a_cas_conflict() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("k", json!("mine")).unwrap().await.unwrap();
    store
        .kv_cas("notes", "notes/k", Some(1), Some(br#""theirs""#.to_vec()))
        .await
        .unwrap();

    drop(notes.put("k", json!("mine again")).unwrap());
    let error = domain.flush(None).await.unwrap_err();
    assert_eq!(error.code(), "CAS_CONFLICT");
    assert_eq!(value(&notes, "k"), Some(json!("mine")));
    assert_eq!(
        stored(store.as_ref(), "notes", "notes/k").await,
        Some(json!("theirs"))
    );
    domain.flush(None).await.unwrap();
}

#[tokio::test]
async fn h_dom_4_a_closed_sqlite_store_fails_writes_without_touching_memory() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite(&dir);
    let domains = Domains::new(Arc::new(sqlite.clone()));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    notes.put("k", json!(1)).unwrap().await.unwrap();
    tokio::task::spawn_blocking(move || sqlite.close())
        .await
        .unwrap()
        .unwrap();

    let error = notes.put("k", json!(2)).unwrap().await.unwrap_err();
    assert_eq!(error.code(), "STORE_CLOSED");
    assert_eq!(value(&notes, "k"), Some(json!(1)));
    domain.flush(None).await.unwrap();
}

#[tokio::test]
async fn h_dom_4_reopen_after_restart_sees_the_durable_rows() {
    let dir = tempfile::tempdir().unwrap();
    {
        let domains = Domains::new(Arc::new(sqlite(&dir)));
        let domain = domains.open(notes_spec(1), "p").await.unwrap();
        let by_session = domain.table("by_session").unwrap();
        for i in 0..20 {
            // Fire and forget; the flush waits for all of them.
            by_session
                .put(&format!("s{}/r{i:02}", i % 3), json!({"i": i}))
                .unwrap();
        }
        domain.global().unwrap().set(json!({"count": 20})).unwrap();
        domain.flush(None).await.unwrap();
        // Dropping the domain, the registry and the store ends the "process".
    }
    let store: Arc<dyn Store> = Arc::new(sqlite(&dir));
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let by_session = domain.table("by_session").unwrap();
    let s1: Vec<String> = by_session
        .entries("s1/")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        s1,
        [
            "s1/r01", "s1/r04", "s1/r07", "s1/r10", "s1/r13", "s1/r16", "s1/r19"
        ]
    );
    assert_eq!(by_session.entries("").len(), 20);
    assert_eq!(*domain.global().unwrap().get(), json!({"count": 20}));
    // Versions were loaded too: the next write expects the stored one.
    by_session
        .put("s1/r01", json!("rewritten"))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        store
            .kv_get("notes", "by_session/s1/r01")
            .await
            .unwrap()
            .unwrap()
            .version,
        2
    );
}

/// H-DOM-3 with the store's call-order durability: a write on an idle queue is handed to
/// the store when it is made (before any await), a write behind one in flight waits for
/// it, and `ordered` returns once everything queued before it has been handed over —
/// durable or not — so whatever the caller gives the store next is durable no earlier.
#[tokio::test]
async fn h_dom_3_ordered_waits_until_queued_writes_are_handed_to_the_store_not_durable() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    domain.ordered(None).await;

    store.hold_kv_writes();
    let first = notes.put("a", json!(1)).unwrap();
    assert_eq!(
        stored(store.inner(), "notes", "notes/a").await,
        Some(json!(1)),
        "an idle queue's write reaches the store at once"
    );
    let second = notes.put("a", json!(2)).unwrap();
    let ordered = tokio::spawn({
        let domain = domain.clone();
        async move { domain.ordered(None).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !ordered.is_finished(),
        "the second write waits in the queue until the first is settled"
    );
    assert_eq!(
        stored(store.inner(), "notes", "notes/a").await,
        Some(json!(1))
    );
    assert_eq!(value(&notes, "a"), None, "nothing is acknowledged yet");

    store.release_kv_writes();
    ordered.await.unwrap();
    assert_eq!(
        stored(store.inner(), "notes", "notes/a").await,
        Some(json!(2))
    );
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(value(&notes, "a"), Some(json!(2)));
}

#[tokio::test]
async fn h_dom_3_a_write_to_another_row_is_handed_to_the_store_while_the_first_is_in_flight() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(store.clone());
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let notes = domain.table("notes").unwrap();
    domain.ordered(None).await;

    store.hold_kv_writes();
    let first = notes.put("a", json!(1)).unwrap();
    // Another row, nothing unissued before it: issued at once, behind the first.
    let second = notes.put("b", json!(2)).unwrap();
    assert_eq!(
        stored(store.inner(), "notes", "notes/b").await,
        Some(json!(2)),
        "the second row's write reaches the store while the first is unsettled"
    );
    // The same row again, and every write behind it, waits for the round in flight.
    let third = notes.put("a", json!(3)).unwrap();
    let fourth = notes.put("c", json!(4)).unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        stored(store.inner(), "notes", "notes/a").await,
        Some(json!(1))
    );
    assert_eq!(
        stored(store.inner(), "notes", "notes/c").await,
        None,
        "a write behind a waiting one is not issued past it"
    );
    assert_eq!(value(&notes, "a"), None, "nothing is acknowledged yet");
    assert_eq!(value(&notes, "b"), None);

    store.release_kv_writes();
    first.await.unwrap();
    second.await.unwrap();
    third.await.unwrap();
    fourth.await.unwrap();
    domain.flush(None).await.unwrap();
    assert_eq!(value(&notes, "a"), Some(json!(3)));
    assert_eq!(value(&notes, "b"), Some(json!(2)));
    assert_eq!(value(&notes, "c"), Some(json!(4)));
    assert_eq!(
        stored(store.inner(), "notes", "notes/a").await,
        Some(json!(3))
    );
}

#[tokio::test]
async fn h_dom_3_evicted_rows_leave_memory_until_loaded_and_rows_being_written_stay() {
    let store = memory();
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let table = domain.table("by_session").unwrap();
    table.put("s1/a", json!({"n": 1})).unwrap();
    table.put("s1/b", json!({"n": 2})).unwrap();
    table.put("s2/a", json!({"n": 3})).unwrap();
    domain.flush(None).await.unwrap();

    assert_eq!(table.evict_prefix("s1/"), 2);
    assert_eq!((value(&table, "s1/a"), table.count("s1/")), (None, 0));
    assert_eq!(value(&table, "s2/a"), Some(json!({"n": 3})));
    // The store keeps them, and a reader that does not keep them reads them there.
    assert_eq!(
        stored(store.as_ref(), "notes", "by_session/s1/b").await,
        Some(json!({"n": 2}))
    );
    assert_eq!(
        table.stored("s1/a").await.unwrap().as_deref(),
        Some(&json!({"n": 1}))
    );
    let listed: Vec<(String, Value)> = table
        .stored_prefix("s1/")
        .await
        .unwrap()
        .into_iter()
        .map(|(key, value)| (key, Value::clone(&value)))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("s1/a".to_owned(), json!({"n": 1})),
            ("s1/b".to_owned(), json!({"n": 2}))
        ]
    );
    assert_eq!(table.count("s1/"), 0, "reading the store keeps nothing");

    // Loading brings them back, as stored, and loading twice changes nothing.
    for _ in 0..2 {
        let loaded = table.load_prefix("s1/").await.unwrap();
        assert_eq!(loaded.len(), 2);
        assert_eq!(value(&table, "s1/b"), Some(json!({"n": 2})));
    }
    // An update then works against the loaded row's version.
    table
        .update("s1/a", |current| {
            let n = current?.get("n")?.as_i64()?;
            Some(json!({"n": n + 10}))
        })
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        stored(store.as_ref(), "notes", "by_session/s1/a").await,
        Some(json!({"n": 11}))
    );

    // One key at a time.
    assert!(table.evict("s2/a"));
    assert!(!table.evict("s2/a"), "nothing left to drop");
    assert_eq!(
        table.load("s2/a").await.unwrap().as_deref(),
        Some(&json!({"n": 3}))
    );
    assert_eq!(table.load("s2/none").await.unwrap(), None);

    // A row with a write queued stays in memory; its neighbours go.
    let ticket = table.update("s1/a", |current| current.cloned()).unwrap();
    assert!(!table.evict("s1/a"));
    assert_eq!(table.evict_prefix("s1/"), 1, "s1/b only");
    assert_eq!(value(&table, "s1/a"), Some(json!({"n": 11})));
    ticket.await.unwrap();
    assert!(table.evict("s1/a"));
    // An evicted row written before it is loaded is written against absence.
    assert_eq!(
        table
            .put("s1/b", json!({"n": 22}))
            .unwrap()
            .await
            .unwrap_err()
            .code(),
        "CAS_CONFLICT"
    );
    // A load never lands beside a write in flight.
    let ticket = table.put("s1/d", json!({"n": 5})).unwrap();
    assert_eq!(
        table.load("s1/d").await.unwrap(),
        None,
        "not acknowledged yet"
    );
    ticket.await.unwrap();
    assert_eq!(value(&table, "s1/d"), Some(json!({"n": 5})));
}

/// Runs `load` (a load of `table`) with the store's reads held; returns once its read
/// has read the store, so what it will answer is fixed while the test writes.
async fn loading_with_read_held<T, F>(
    store: &FailingStore,
    table: &ccare_domains::domains::Table,
    load: impl FnOnce(ccare_domains::domains::Table) -> F,
) -> tokio::task::JoinHandle<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    store.hold_kv_reads();
    let read = store.kv_read_made();
    let loading = tokio::spawn(load(table.clone()));
    read.await;
    loading
}

/// Waits for `ticket`, then lets the write's queue finish with it (nothing of it is
/// queued or in flight any more).
async fn settled(ticket: ccare_domains::domains::WriteTicket) {
    ticket.await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A load whose store read is still on its way back while the row is deleted (the
/// delete settled, nothing of it queued or in flight any more) does not bring the
/// deleted row back into memory: memory, which saw the delete, knows better than the
/// read. Likewise for a prefix load. A load that began after a write puts the row in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_dom_3_a_load_racing_a_write_does_not_bring_back_what_it_read() {
    let store = Arc::new(FailingStore::default());
    let domains = Domains::new(Arc::clone(&store) as Arc<dyn Store>);
    let domain = domains.open(notes_spec(1), "p").await.unwrap();
    let table = domain.table("by_session").unwrap();
    for key in ["s1/a", "s1/b"] {
        table.put(key, json!({"n": 1})).unwrap();
    }
    domain.flush(None).await.unwrap();

    let loading =
        loading_with_read_held(
            &store,
            &table,
            |table| async move { table.load("s1/a").await },
        )
        .await;
    settled(table.delete("s1/a").unwrap()).await;
    store.release_kv_reads();
    assert_eq!(loading.await.unwrap().unwrap(), None);
    assert_eq!(value(&table, "s1/a"), None, "the deleted row came back");
    assert_eq!(
        stored(store.inner(), "notes", "by_session/s1/a").await,
        None
    );

    let loading = loading_with_read_held(&store, &table, |table| async move {
        table.load_prefix("s1/").await
    })
    .await;
    settled(table.delete("s1/b").unwrap()).await;
    store.release_kv_reads();
    assert_eq!(loading.await.unwrap().unwrap(), Vec::new());
    assert_eq!(value(&table, "s1/b"), None, "the deleted row came back");

    // A load that began after a write was applied puts the row in, even while another
    // load, older than the write, is still reading.
    let older = loading_with_read_held(&store, &table, |table| async move {
        table.load_prefix("s3/").await
    })
    .await;
    settled(table.put("s2/b", json!({"n": 2})).unwrap()).await;
    assert!(table.evict("s2/b"));
    let newer = loading_with_read_held(
        &store,
        &table,
        |table| async move { table.load("s2/b").await },
    )
    .await;
    store.release_kv_reads();
    assert_eq!(older.await.unwrap().unwrap(), Vec::new());
    assert_eq!(
        newer.await.unwrap().unwrap().as_deref(),
        Some(&json!({"n": 2}))
    );
    assert_eq!(value(&table, "s2/b"), Some(json!({"n": 2})));
}

#[tokio::test]
async fn h_dom_1_an_on_demand_table_is_not_loaded_at_open_and_reads_the_store_by_page() {
    let store = memory();
    let spec = || {
        DomainSpec::new("lazy", 1)
            .table(TableSpec::new("eager"))
            .table(TableSpec::new("lazy").on_demand())
            .table(TableSpec::new("later"))
            .global(json!(0))
    };
    {
        let domains = Domains::new(Arc::clone(&store));
        let domain = domains.open(spec(), "p").await.unwrap();
        domain.table("eager").unwrap().put("e", json!(1)).unwrap();
        let lazy = domain.table("lazy").unwrap();
        for n in 0..5 {
            lazy.put(&format!("k{n}"), json!(n)).unwrap();
        }
        domain.table("later").unwrap().put("z", json!(2)).unwrap();
        domain.global().unwrap().set(json!(7)).unwrap();
        domain.flush(None).await.unwrap();
    }
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(spec(), "p").await.unwrap();
    let (eager, lazy, later) = (
        domain.table("eager").unwrap(),
        domain.table("lazy").unwrap(),
        domain.table("later").unwrap(),
    );
    // The tables around it are loaded; it is not.
    assert_eq!(value(&eager, "e"), Some(json!(1)));
    assert_eq!(value(&later, "z"), Some(json!(2)));
    assert_eq!(*domain.global().unwrap().get(), json!(7));
    assert_eq!(lazy.count(""), 0);

    let first = lazy.stored_page("", None, 2).await.unwrap();
    let keys: Vec<&str> = first.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["k0", "k1"]);
    let rest = lazy.stored_page("", Some("k1"), 10).await.unwrap();
    let keys: Vec<&str> = rest.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["k2", "k3", "k4"]);
    assert_eq!(lazy.count(""), 0, "a page read keeps nothing");

    // Loaded, a row is written against its stored version.
    assert_eq!(lazy.load("k3").await.unwrap().as_deref(), Some(&json!(3)));
    lazy.put("k3", json!(30)).unwrap().await.unwrap();
    assert_eq!(
        stored(store.as_ref(), "lazy", "lazy/k3").await,
        Some(json!(30))
    );
}

#[tokio::test]
async fn h_dom_1_a_typed_page_reads_each_row_as_its_type_and_refuses_a_row_that_is_not_json() {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Head {
        n: u64,
    }
    let store = memory();
    let spec = || DomainSpec::new("typed", 1).table(TableSpec::new("rows").on_demand());
    {
        let domains = Domains::new(Arc::clone(&store));
        let domain = domains.open(spec(), "p").await.unwrap();
        let rows = domain.table("rows").unwrap();
        rows.put("a", json!({"n": 1, "rest": [1, 2, {"deep": true}]}))
            .unwrap();
        rows.put("b", json!({"n": "one"})).unwrap();
        rows.put("c", json!("three")).unwrap();
        rows.put("d", json!({"n": 4})).unwrap();
        domain.flush(None).await.unwrap();
    }
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(spec(), "p").await.unwrap();
    let rows = domain.table("rows").unwrap();
    let page = rows.stored_page_as::<Head>("", None, 3).await.unwrap();
    assert_eq!(
        page,
        vec![
            ("a".to_owned(), Some(Head { n: 1 })),
            ("b".to_owned(), None),
            ("c".to_owned(), None),
        ]
    );
    let rest = rows.stored_page_as::<Head>("", Some("c"), 3).await.unwrap();
    assert_eq!(rest, vec![("d".to_owned(), Some(Head { n: 4 }))]);
    assert_eq!(rows.count(""), 0, "a page read keeps nothing");

    // A row that starts as a `Head` of the wrong type but is not JSON at all, and one
    // that is not JSON from the start: the page fails as `Corrupt`, naming the row.
    for (after, key, bytes) in [
        ("d", "e", &b"{\"n\": \"x\", oops"[..]),
        ("e", "f", &b"{not json"[..]),
    ] {
        store
            .kv_cas("typed", &format!("rows/{key}"), None, Some(bytes.to_vec()))
            .await
            .unwrap();
        let error = rows
            .stored_page_as::<Head>("", Some(after), 3)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, DomainError::Corrupt { domain, row, .. } if domain == "typed" && row.contains(&format!("rows/{key}"))),
            "{error:?}"
        );
    }
}

#[tokio::test]
async fn h_dom_1_stored_keys_lists_a_prefix_by_key_across_pages_keeping_nothing() {
    let store = memory();
    let spec = || DomainSpec::new("keys", 1).table(TableSpec::by_first_segment("rows").on_demand());
    {
        let domains = Domains::new(Arc::clone(&store));
        let domain = domains.open(spec(), "p").await.unwrap();
        let rows = domain.table("rows").unwrap();
        // More than one page (the first holds 64), and neighbours on both sides.
        for n in 0..150 {
            rows.put(&format!("s1/{n:03}"), json!({"n": n, "big": [n, n, n]}))
                .unwrap();
        }
        rows.put("s0/x", json!(0)).unwrap();
        rows.put("s2/x", json!(2)).unwrap();
        domain.flush(None).await.unwrap();
    }
    let domains = Domains::new(Arc::clone(&store));
    let domain = domains.open(spec(), "p").await.unwrap();
    let rows = domain.table("rows").unwrap();
    let keys = rows.stored_keys("s1/").await.unwrap();
    let expected: Vec<String> = (0..150).map(|n| format!("s1/{n:03}")).collect();
    assert_eq!(keys, expected);
    assert_eq!(rows.stored_keys("s3/").await.unwrap(), Vec::<String>::new());
    assert_eq!(rows.stored_keys("").await.unwrap().len(), 152);
    assert_eq!(rows.count(""), 0, "nothing is kept");

    // A row that is not JSON is refused, as a read of it would be.
    store
        .kv_cas("keys", "rows/s1/200", None, Some(b"{not json".to_vec()))
        .await
        .unwrap();
    assert!(matches!(
        rows.stored_keys("s1/").await,
        Err(DomainError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn h_dom_1_a_domain_whose_handles_are_all_dropped_frees_its_name() {
    // An opener that drops what it opened without closing it (a set-up that failed or
    // was cancelled after the open) must not hold the name for the rest of the process.
    let domains = Domains::new(memory());
    let first = domains.open(notes_spec(1), "plugin_a").await.unwrap();
    let table = first.table("notes").unwrap();
    let written = table.put("k", json!(1)).unwrap();
    drop(first);
    // Its table still uses it.
    assert_eq!(
        domains
            .open(notes_spec(1), "plugin_a")
            .await
            .unwrap_err()
            .code(),
        "DOMAIN_IN_USE"
    );
    drop(table);
    assert_eq!(domains.owner("notes"), None);
    // The next opener waits for the write the dropped handle queued.
    let again = domains.open(notes_spec(1), "plugin_a").await.unwrap();
    assert_eq!(value(&again.table("notes").unwrap(), "k"), Some(json!(1)));
    written.await.unwrap();
    // A handle of a closed claim going later leaves the next claim alone.
    let closed = again.clone();
    assert!(domains.close("notes"));
    let third = domains.open(notes_spec(1), "plugin_b").await.unwrap();
    drop((again, closed));
    assert_eq!(domains.owner("notes").as_deref(), Some("plugin_b"));
    assert!(!third.is_closed());
}
