//! The test-support wrapper `testing::FailingStore` (feature `testing`): a matched call
//! fails with the fault's `Backend` error and writes nothing, an unmatched one goes
//! through, `once` faults fail once, and `heal` lets everything through again; what
//! was written is read back through the inner store.

use ccare_store::testing::{FailingStore, Fault};
use ccare_store::{KvPage, ReadRange, Store, StoreError};

use crate::conformance::{event, new_session, numbered, sid};

fn backend(operation: &'static str, message: &str) -> StoreError {
    StoreError::Backend {
        operation,
        message: message.to_owned(),
    }
}

async fn stored_tags(store: &FailingStore) -> Vec<String> {
    store
        .inner()
        .read(&sid("s"), ReadRange::all())
        .await
        .unwrap()
        .iter()
        .map(|event| event.json.to_string())
        .collect()
}

#[tokio::test]
async fn an_append_fault_fails_appends_until_healed_and_writes_nothing() {
    let store = FailingStore::default();
    store
        .create_session(new_session("s", 1), Vec::new())
        .await
        .unwrap();
    store.fail(Fault::appends("disk unplugged"));
    let error = store.append(&sid("s"), 0, numbered(0, 2, "lost")).await;
    assert_eq!(error, Err(backend("append", "disk unplugged")));
    assert!(stored_tags(&store).await.is_empty());
    store.heal();
    assert_eq!(
        store.append(&sid("s"), 0, numbered(0, 1, "kept")).await,
        Ok(1)
    );
    assert_eq!(stored_tags(&store).await, [r#"{"seq":0,"tag":"kept"}"#]);
}

#[tokio::test]
async fn a_containing_append_fault_fails_only_batches_with_the_needle() {
    let store = FailingStore::default();
    store
        .create_session(new_session("s", 1), Vec::new())
        .await
        .unwrap();
    store.fail(Fault::appends("disk full").containing("\"compaction/end\""));
    assert_eq!(
        store
            .append(
                &sid("s"),
                0,
                vec![event(0, r#"{"type":"compaction/start"}"#)]
            )
            .await,
        Ok(1)
    );
    let batch = vec![
        event(1, r#"{"type":"user/message"}"#),
        event(2, r#"{"type":"compaction/end"}"#),
    ];
    assert_eq!(
        store.append(&sid("s"), 1, batch).await,
        Err(backend("append", "disk full"))
    );
    assert_eq!(
        stored_tags(&store).await,
        [r#"{"type":"compaction/start"}"#]
    );
}

#[tokio::test]
async fn kv_faults_match_their_domain_and_a_once_fault_fails_once() {
    let store = FailingStore::default();
    store.fail(Fault::kv_writes("disk full").containing("journal").once());
    assert_eq!(
        store.kv_cas("other", "k", None, Some(b"1".to_vec())).await,
        Ok(Some(1))
    );
    assert_eq!(
        store
            .kv_cas("care/journal", "k", None, Some(b"1".to_vec()))
            .await,
        Err(backend("kv_cas", "disk full"))
    );
    assert_eq!(store.inner().kv_get("care/journal", "k").await, Ok(None));
    assert_eq!(
        store
            .kv_cas("care/journal", "k", None, Some(b"2".to_vec()))
            .await,
        Ok(Some(1)),
        "the once fault is gone"
    );

    store.fail(Fault::kv_reads("disk unplugged"));
    assert_eq!(
        store.kv_get("other", "k").await,
        Err(backend("kv_get", "disk unplugged"))
    );
    assert_eq!(
        store.kv_scan("other", "", KvPage::default()).await,
        Err(backend("kv_scan", "disk unplugged"))
    );
    store.heal();
    let value = store.kv_get("care/journal", "k").await.unwrap().unwrap();
    assert_eq!(value.value, b"2");
}
