//! The [`Store`] conformance suite: backend-neutral checks of the trait contract (spec
//! H-STORE-1/2/4, H-DOM-2), written against `&dyn Store` so that every backend (SQLite
//! now, PostgreSQL later) runs the same assertions. Each check expects a fresh, empty
//! store unless it says otherwise, and panics on the first deviation.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_core::SessionId;
use ccare_store::{
    KvEntry, KvPage, MAX_KV_KEY_BYTES, MAX_KV_VALUE_BYTES, NewSession, ReadDirection, ReadRange,
    SessionQuery, SessionRecord, Store, StoreError, StoredEvent, Ticket,
};

mod lease;

pub(crate) use lease::*;

// -------------------------------------------------------------------------------------
// Helpers
// -------------------------------------------------------------------------------------

pub(crate) fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

pub(crate) fn event(seq: u64, json: &str) -> StoredEvent {
    StoredEvent {
        seq,
        json: json.into(),
    }
}

pub(crate) fn new_session(id: &str, created_ms: i64) -> NewSession {
    NewSession {
        id: sid(id),
        created_ms,
        parent: None,
        seed_length: None,
        meta_json: "{}".into(),
        incarnation: ccare_store::new_incarnation(),
    }
}

/// Bodies that must round-trip byte for byte: raw non-ASCII, JSON escapes (kept as
/// escapes), control-character escapes, an escaped surrogate pair, a big one.
pub(crate) fn tricky_bodies() -> Vec<String> {
    vec![
        r#"{"seq":0,"type":"turn/start","data":{"turn":1}}"#.into(),
        "{\"t\":\"café — 日本語 🦀 ünïcödé\"}".into(),
        r#"{"t":"esc \"quoted\" \\ back \/ slash \n\t\r\b\f \u0000 \u2028"}"#.into(),
        r#"{"t":"pair \ud83e\udd80 and \u00e9"}"#.into(),
        r#"{ "spaced" : [ 1 , 2.50 , -0.0, 1e3 ] }"#.into(),
        format!("{{\"big\":\"{}\"}}", "xé".repeat(50_000)),
        "{}".into(),
    ]
}

/// Events `start..start + count`, with bodies tagged by `tag`.
pub(crate) fn numbered(start: u64, count: u64, tag: &str) -> Vec<StoredEvent> {
    (start..start + count)
        .map(|seq| event(seq, &format!("{{\"seq\":{seq},\"tag\":\"{tag}\"}}")))
        .collect()
}

async fn read(
    store: &dyn Store,
    id: &SessionId,
    from: u64,
    to: Option<u64>,
    direction: ReadDirection,
    limit: Option<usize>,
) -> Vec<StoredEvent> {
    store
        .read(
            id,
            ReadRange {
                from,
                to,
                direction,
                limit,
            },
        )
        .await
        .unwrap()
}

async fn read_all(store: &dyn Store, id: &SessionId) -> Vec<StoredEvent> {
    store.read(id, ReadRange::all()).await.unwrap()
}

async fn head(store: &dyn Store, id: &SessionId) -> u64 {
    store.session(id).await.unwrap().unwrap().head
}

/// Calls `issue` for each store on its own thread, all released together by a
/// barrier, so the calls (which queue their writes) really race; returns the tickets.
fn race<T: Send + 'static>(
    stores: &[&dyn Store],
    issue: impl Fn(usize, &dyn Store) -> Ticket<T> + Sync,
) -> Vec<Ticket<T>> {
    let barrier = Barrier::new(stores.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(index, store)| {
                let (barrier, issue) = (&barrier, &issue);
                scope.spawn(move || {
                    barrier.wait();
                    issue(index, *store)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    })
}

// -------------------------------------------------------------------------------------
// Sessions
// -------------------------------------------------------------------------------------

/// Sessions list newest first (ties: created later first), with heads and headers.
pub(crate) async fn h_sess_1_create_list_newest_first(store: &dyn Store) {
    let seed = numbered(0, 2, "seed");
    let a = store
        .create_session(new_session("s-a", 100), seed.clone())
        .await
        .unwrap();
    let b = store
        .create_session(
            NewSession {
                id: sid("s-b"),
                created_ms: 300,
                parent: Some(sid("s-a")),
                seed_length: Some(2),
                meta_json: r#"{"title":"é \"x\"","n":[1,2]}"#.into(),
                incarnation: "incarnation-of-s-b".into(),
            },
            Vec::new(),
        )
        .await
        .unwrap();
    let c = store
        .create_session(new_session("s-c", 300), Vec::new())
        .await
        .unwrap();
    let d = store
        .create_session(new_session("s-d", -5), numbered(0, 1, "d"))
        .await
        .unwrap();

    // The store keeps the incarnation its creator chose (fresh ones differ).
    assert_eq!(b, "incarnation-of-s-b");
    let incarnations = [&a, &b, &c, &d];
    for (index, incarnation) in incarnations.iter().enumerate() {
        assert!(!incarnation.is_empty(), "an incarnation is empty");
        for other in &incarnations[index + 1..] {
            assert_ne!(incarnation, other, "incarnations must differ");
        }
    }

    let listed = store.list_sessions(SessionQuery::default()).await.unwrap();
    let order: Vec<(&str, u64)> = listed
        .iter()
        .map(|record| (record.id.as_str(), record.head))
        .collect();
    assert_eq!(order, [("s-c", 0), ("s-b", 0), ("s-a", 2), ("s-d", 1)]);

    let limited = store
        .list_sessions(SessionQuery { limit: Some(2) })
        .await
        .unwrap();
    let order: Vec<&str> = limited.iter().map(|record| record.id.as_str()).collect();
    assert_eq!(order, ["s-c", "s-b"]);
    assert!(
        store
            .list_sessions(SessionQuery { limit: Some(0) })
            .await
            .unwrap()
            .is_empty()
    );

    let header = store.session(&sid("s-b")).await.unwrap();
    assert_eq!(
        header,
        Some(SessionRecord {
            id: sid("s-b"),
            created_ms: 300,
            parent: Some(sid("s-a")),
            seed_length: Some(2),
            meta_json: r#"{"title":"é \"x\"","n":[1,2]}"#.into(),
            incarnation: b.clone(),
            head: 0,
        })
    );
    assert_eq!(Some(listed[1].clone()), header);
    let header_a = store.session(&sid("s-a")).await.unwrap().unwrap();
    assert_eq!(
        (
            header_a.head,
            header_a.incarnation.as_str(),
            header_a.created_ms
        ),
        (2, a.as_str(), 100)
    );
    assert_eq!(read_all(store, &sid("s-a")).await, seed);
    assert_eq!(store.session(&sid("s-unknown")).await.unwrap(), None);
}

/// Creating an existing id fails with `SessionExists` and changes nothing.
pub(crate) async fn h_store_8_create_existing_id_fails(store: &dyn Store) {
    let id = sid("dup");
    let incarnation = store
        .create_session(new_session("dup", 1), numbered(0, 1, "first"))
        .await
        .unwrap();
    let second = NewSession {
        meta_json: r#"{"second":true}"#.into(),
        ..new_session("dup", 2)
    };
    let result = store.create_session(second, numbered(0, 3, "second")).await;
    assert_eq!(
        result,
        Err(StoreError::SessionExists {
            session: id.clone()
        })
    );
    let header = store.session(&id).await.unwrap().unwrap();
    assert_eq!(
        (header.head, header.created_ms, header.meta_json.as_str()),
        (1, 1, "{}")
    );
    assert_eq!(header.incarnation, incarnation);
    assert_eq!(read_all(store, &id).await, numbered(0, 1, "first"));
    assert_eq!(
        store
            .list_sessions(SessionQuery::default())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// A seed whose seqs are not `0..n` is `Invalid` and leaves nothing behind: the same
/// id can then be created with a proper seed.
pub(crate) async fn h_log_1_create_rejects_non_contiguous_seed(store: &dyn Store) {
    let id = sid("seeded");
    let bad = vec![event(0, "{}"), event(2, "{}")];
    let result = store.create_session(new_session("seeded", 1), bad).await;
    assert!(
        matches!(result, Err(StoreError::Invalid { .. })),
        "{result:?}"
    );
    let bad = vec![event(1, "{}")];
    let result = store.create_session(new_session("seeded", 1), bad).await;
    assert!(
        matches!(result, Err(StoreError::Invalid { .. })),
        "{result:?}"
    );
    assert_eq!(store.session(&id).await.unwrap(), None);
    assert!(
        store
            .list_sessions(SessionQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    // Leftover rows of the failed creates would collide here.
    store
        .create_session(new_session("seeded", 1), numbered(0, 3, "ok"))
        .await
        .unwrap();
    assert_eq!(read_all(store, &id).await, numbered(0, 3, "ok"));
}

// -------------------------------------------------------------------------------------
// Append and read
// -------------------------------------------------------------------------------------

/// Appends land at the expected seq; reads walk ranges both ways, with limits, and
/// return bodies byte for byte.
pub(crate) async fn h_log_3_append_and_read_ranges(store: &dyn Store) {
    let id = sid("ranges");
    store
        .create_session(new_session("ranges", 1), Vec::new())
        .await
        .unwrap();
    let bodies = tricky_bodies();
    let mut all: Vec<StoredEvent> = bodies
        .iter()
        .enumerate()
        .map(|(seq, body)| event(seq as u64, body))
        .collect();
    all.extend(numbered(all.len() as u64, 10 - all.len() as u64, "tail"));
    assert_eq!(all.len(), 10);

    assert_eq!(store.append(&id, 0, all[..3].to_vec()).await, Ok(3));
    assert_eq!(store.append(&id, 3, all[3..].to_vec()).await, Ok(10));
    assert_eq!(head(store, &id).await, 10);

    use ReadDirection::{Backward, Forward};
    let slice = |seqs: &[usize]| seqs.iter().map(|&seq| all[seq].clone()).collect::<Vec<_>>();
    let forward = read_all(store, &id).await;
    assert_eq!(forward, all);
    for (stored, original) in forward.iter().zip(&all) {
        assert_eq!(stored.json.as_bytes(), original.json.as_bytes());
    }
    let backward = read(store, &id, 0, None, Backward, None).await;
    assert_eq!(backward, all.iter().rev().cloned().collect::<Vec<_>>());

    assert_eq!(
        read(store, &id, 3, Some(7), Forward, None).await,
        slice(&[3, 4, 5, 6])
    );
    assert_eq!(
        read(store, &id, 3, Some(7), Backward, None).await,
        slice(&[6, 5, 4, 3])
    );
    assert_eq!(
        read(store, &id, 4, None, Forward, Some(2)).await,
        slice(&[4, 5])
    );
    assert_eq!(
        read(store, &id, 0, None, Backward, Some(2)).await,
        slice(&[9, 8])
    );
    assert_eq!(
        read(store, &id, 5, None, Backward, Some(3)).await,
        slice(&[9, 8, 7])
    );
    assert_eq!(
        read(store, &id, 0, Some(5), Backward, Some(2)).await,
        slice(&[4, 3])
    );
    assert_eq!(
        read(store, &id, 8, Some(100), Forward, None).await,
        slice(&[8, 9])
    );
    assert_eq!(
        read(store, &id, 0, Some(100), Forward, Some(100)).await,
        all
    );
    assert_eq!(read(store, &id, 9, None, Forward, None).await, slice(&[9]));
    for (from, to, limit) in [
        (10, None, None),
        (50, None, None),
        (5, Some(5), None),
        (6, Some(4), None),
        (0, None, Some(0)),
        (u64::MAX, None, None),
    ] {
        for direction in [Forward, Backward] {
            let events = read(store, &id, from, to, direction, limit).await;
            assert!(
                events.is_empty(),
                "{from}..{to:?} {direction:?} limit {limit:?}: {events:?}"
            );
        }
    }
}

/// Appended seqs must be `expected, expected + 1, ...`; otherwise `Invalid`, nothing
/// written. An empty append at the head is a no-op returning the head.
pub(crate) async fn h_log_1_append_checks_seqs(store: &dyn Store) {
    let id = sid("seqs");
    store
        .create_session(new_session("seqs", 1), numbered(0, 2, "seed"))
        .await
        .unwrap();
    for bad in [
        numbered(3, 2, "x"),
        numbered(1, 2, "x"),
        vec![event(2, "{}"), event(4, "{}")],
        vec![event(2, "{}"), event(2, "{}")],
    ] {
        let result = store.append(&id, 2, bad.clone()).await;
        assert!(
            matches!(result, Err(StoreError::Invalid { .. })),
            "{bad:?}: {result:?}"
        );
    }
    assert_eq!(head(store, &id).await, 2);
    assert_eq!(read_all(store, &id).await, numbered(0, 2, "seed"));
    assert_eq!(store.append(&id, 2, Vec::new()).await, Ok(2));
    assert_eq!(store.append(&id, 2, numbered(2, 1, "ok")).await, Ok(3));
}

/// H-STORE-1: a stale or future expected seq is a `Conflict{expected, actual}` and
/// writes nothing; a conflict inside a pipeline does not disturb its neighbours.
pub(crate) async fn h_store_1_conflict_writes_nothing(store: &dyn Store) {
    let id = sid("conflict");
    store
        .create_session(new_session("conflict", 1), Vec::new())
        .await
        .unwrap();
    assert_eq!(store.append(&id, 0, numbered(0, 2, "a")).await, Ok(2));
    let stale = store.append(&id, 0, numbered(0, 3, "stale")).await;
    assert_eq!(
        stale,
        Err(StoreError::Conflict {
            session: id.clone(),
            expected: 0,
            actual: 2
        })
    );
    let ahead = store.append(&id, 5, numbered(5, 1, "ahead")).await;
    assert_eq!(
        ahead,
        Err(StoreError::Conflict {
            session: id.clone(),
            expected: 5,
            actual: 2
        })
    );
    assert_eq!(read_all(store, &id).await, numbered(0, 2, "a"));
    assert_eq!(head(store, &id).await, 2);

    // Pipelined: the middle one conflicts, the others land.
    let first = store.append(&id, 2, numbered(2, 1, "b"));
    let loser = store.append(&id, 2, numbered(2, 4, "loser"));
    let third = store.append(&id, 3, numbered(3, 1, "c"));
    assert_eq!(first.await, Ok(3));
    assert_eq!(
        loser.await,
        Err(StoreError::Conflict {
            session: id.clone(),
            expected: 2,
            actual: 3
        })
    );
    assert_eq!(third.await, Ok(4));
    let mut expected = numbered(0, 2, "a");
    expected.extend(numbered(2, 1, "b"));
    expected.extend(numbered(3, 1, "c"));
    assert_eq!(read_all(store, &id).await, expected);
}

/// H-STORE-1 under a real race: two appends with the same expected seq, issued from
/// two threads at once (through `a` and `b`, which may be one store or two handles on
/// the same database): exactly one wins; the loser gets `Conflict` with the winner's
/// head and wrote nothing.
pub(crate) async fn h_store_1_concurrent_appends_one_wins(a: &dyn Store, b: &dyn Store) {
    let id = sid("race");
    a.create_session(new_session("race", 1), Vec::new())
        .await
        .unwrap();
    let lengths = [2_u64, 3];
    let mut wins = [0_usize; 2];
    let mut expected_log = Vec::new();
    for round in 0..24 {
        let at = head(a, &id).await;
        let tags = [format!("a{round}"), format!("b{round}")];
        let tickets = race(&[a, b], |index, store| {
            store.append(&id, at, numbered(at, lengths[index], &tags[index]))
        });
        let mut results = Vec::new();
        for ticket in tickets {
            results.push(ticket.await);
        }
        let winners: Vec<usize> = (0..2).filter(|&index| results[index].is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let (winner, loser) = (winners[0], 1 - winners[0]);
        wins[winner] += 1;
        let new_head = at + lengths[winner];
        assert_eq!(results[winner], Ok(new_head));
        assert_eq!(
            results[loser],
            Err(StoreError::Conflict {
                session: id.clone(),
                expected: at,
                actual: new_head
            }),
            "round {round}"
        );
        expected_log.extend(numbered(at, lengths[winner], &tags[winner]));
        assert_eq!(head(b, &id).await, new_head);
    }
    assert_eq!(read_all(a, &id).await, expected_log);
    assert_eq!(read_all(b, &id).await, expected_log);
    // Both sides ran; which one wins is up to the scheduler.
    assert_eq!(wins[0] + wins[1], 24);
}

/// An unknown session: append and read fail with `UnknownSession`, `session` is None.
pub(crate) async fn h_store_unknown_session(store: &dyn Store) {
    let id = sid("ghost");
    let unknown = Err(StoreError::UnknownSession {
        session: id.clone(),
    });
    assert_eq!(
        store.append(&id, 0, numbered(0, 1, "x")).await,
        unknown.clone().map(|()| 0)
    );
    assert_eq!(
        store.read(&id, ReadRange::all()).await,
        unknown.clone().map(|()| Vec::new())
    );
    assert_eq!(store.session(&id).await, Ok(None));
    // The append's error was delivered to its ticket, so a flush does not repeat it.
    assert_eq!(store.flush().await, Ok(()));
    assert_eq!(store.session(&id).await, Ok(None));
}

/// Operations queue at call time: a create followed at once by appends (nothing
/// awaited in between) all land, in order.
pub(crate) async fn h_store_4_writes_are_ordered_at_call_time(store: &dyn Store) {
    let id = sid("ordered");
    let created = store.create_session(new_session("ordered", 1), numbered(0, 1, "seed"));
    let first = store.append(&id, 1, numbered(1, 2, "x"));
    let cas = store.kv_cas("d", "k", None, Some(b"v".to_vec()));
    let second = store.append(&id, 3, numbered(3, 1, "y"));
    let flushed = store.flush();
    assert_eq!(flushed.await, Ok(()));
    assert!(created.await.is_ok());
    assert_eq!(
        (first.await, cas.await, second.await),
        (Ok(3), Ok(Some(1)), Ok(4))
    );
    let mut expected = numbered(0, 1, "seed");
    expected.extend(numbered(1, 2, "x"));
    expected.extend(numbered(3, 1, "y"));
    assert_eq!(read_all(store, &id).await, expected);
}

/// 1000 appends issued without awaiting, then only the last awaited: all land, in
/// order, each ticket with its own new head.
pub(crate) async fn h_store_4_pipelined_appends_land_in_order(store: &dyn Store) {
    let id = sid("pipeline");
    store
        .create_session(new_session("pipeline", 1), Vec::new())
        .await
        .unwrap();
    let mut tickets: Vec<_> = (0..1000_u64)
        .map(|seq| store.append(&id, seq, numbered(seq, 1, "p")))
        .collect();
    let last = tickets.pop().unwrap();
    assert_eq!(last.await, Ok(1000));
    for (seq, ticket) in tickets.into_iter().enumerate() {
        assert_eq!(ticket.await, Ok(seq as u64 + 1));
    }
    assert_eq!(read_all(store, &id).await, numbered(0, 1000, "p"));
    assert_eq!(head(store, &id).await, 1000);
}

/// H-STORE-4 / H-DOM-4: a flush resolves after the writes queued before it, and
/// returns the oldest error no ticket has reported (a dropped ticket's); once
/// reported, it is not repeated. An error already awaited through its ticket is not
/// reported again.
pub(crate) async fn h_store_4_flush_reports_the_oldest_unreported_error(store: &dyn Store) {
    let id = sid("flushy");
    store
        .create_session(new_session("flushy", 1), Vec::new())
        .await
        .unwrap();
    assert_eq!(store.flush().await, Ok(()));

    drop(store.append(&id, 0, numbered(0, 1, "ok")));
    drop(store.append(&id, 7, numbered(7, 1, "bad")));
    drop(store.kv_cas("d", "k", Some(3), Some(b"x".to_vec())));
    drop(store.append(&sid("nobody"), 0, numbered(0, 1, "x")));
    assert_eq!(
        store.flush().await,
        Err(StoreError::Conflict {
            session: id.clone(),
            expected: 7,
            actual: 1
        })
    );
    assert_eq!(store.flush().await, Ok(()));
    assert_eq!(read_all(store, &id).await, numbered(0, 1, "ok"));

    let awaited = store.append(&id, 9, numbered(9, 1, "bad")).await;
    assert!(
        matches!(awaited, Err(StoreError::Conflict { .. })),
        "{awaited:?}"
    );
    assert_eq!(store.flush().await, Ok(()));

    // A failed flush whose ticket is dropped is not lost either.
    drop(store.kv_cas("d", "k", Some(5), None));
    drop(store.flush());
    let again = store.flush().await;
    assert!(
        matches!(again, Err(StoreError::CasConflict { .. })),
        "{again:?}"
    );
    assert_eq!(store.flush().await, Ok(()));
}

// -------------------------------------------------------------------------------------
// KV
// -------------------------------------------------------------------------------------

/// H-STORE-2: versions start at 1 and bump on every write; `None` expected means
/// "must not exist"; `None` value deletes; mismatches are `CasConflict{current}` and
/// write nothing. After a delete the key starts again at version 1 (no tombstones).
pub(crate) async fn h_store_2_kv_cas_lifecycle(store: &dyn Store) {
    let conflict = |expected, current| {
        Err(StoreError::CasConflict {
            domain: "dom".into(),
            key: "key".into(),
            expected,
            current,
        })
    };
    let entry = |version, value: &[u8]| {
        Ok(Some(KvEntry {
            version,
            value: value.to_vec(),
        }))
    };
    assert_eq!(store.kv_get("dom", "key").await, Ok(None));
    assert_eq!(
        store
            .kv_cas("dom", "key", Some(1), Some(b"x".to_vec()))
            .await,
        conflict(Some(1), None)
    );
    assert_eq!(
        store.kv_cas("dom", "key", None, Some(b"v1".to_vec())).await,
        Ok(Some(1))
    );
    assert_eq!(store.kv_get("dom", "key").await, entry(1, b"v1"));
    assert_eq!(
        store
            .kv_cas("dom", "key", None, Some(b"again".to_vec()))
            .await,
        conflict(None, Some(1))
    );
    assert_eq!(
        store
            .kv_cas("dom", "key", Some(1), Some(b"v2".to_vec()))
            .await,
        Ok(Some(2))
    );
    assert_eq!(
        store
            .kv_cas("dom", "key", Some(1), Some(b"v3".to_vec()))
            .await,
        conflict(Some(1), Some(2))
    );
    assert_eq!(
        store.kv_cas("dom", "key", Some(3), None).await,
        conflict(Some(3), Some(2))
    );
    assert_eq!(store.kv_get("dom", "key").await, entry(2, b"v2"));
    assert_eq!(store.kv_cas("dom", "key", Some(2), None).await, Ok(None));
    assert_eq!(store.kv_get("dom", "key").await, Ok(None));
    assert_eq!(
        store.kv_cas("dom", "key", Some(2), None).await,
        conflict(Some(2), None)
    );
    assert_eq!(store.kv_cas("dom", "key", None, None).await, Ok(None));
    assert_eq!(
        store.kv_cas("dom", "key", None, Some(b"v4".to_vec())).await,
        Ok(Some(1))
    );
    assert_eq!(store.kv_get("dom", "key").await, entry(1, b"v4"));

    // Values are bytes: empty and every byte value round-trip.
    let all_bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(
        store.kv_cas("dom", "empty", None, Some(Vec::new())).await,
        Ok(Some(1))
    );
    assert_eq!(store.kv_get("dom", "empty").await, entry(1, b""));
    assert_eq!(
        store
            .kv_cas("dom", "bytes", None, Some(all_bytes.clone()))
            .await,
        Ok(Some(1))
    );
    assert_eq!(store.kv_get("dom", "bytes").await, entry(1, &all_bytes));

    // Domains are separate namespaces.
    assert_eq!(store.kv_get("other", "key").await, Ok(None));
    assert_eq!(
        store
            .kv_cas("other", "key", None, Some(b"o".to_vec()))
            .await,
        Ok(Some(1))
    );
    assert_eq!(store.kv_get("dom", "key").await, entry(1, b"v4"));
    assert_eq!(store.kv_get("other", "key").await, entry(1, b"o"));
}

/// H-DOM-2: keys up to 512 bytes and values up to 4 MiB; beyond is `Invalid` and
/// writes nothing.
pub(crate) async fn h_dom_2_kv_limits(store: &dyn Store) {
    let longest = "é".repeat(MAX_KV_KEY_BYTES / 2);
    assert_eq!(longest.len(), MAX_KV_KEY_BYTES);
    let too_long = format!("{longest}x");
    assert_eq!(
        store
            .kv_cas("lim", &longest, None, Some(b"ok".to_vec()))
            .await,
        Ok(Some(1))
    );
    let result = store
        .kv_cas("lim", &too_long, None, Some(b"no".to_vec()))
        .await;
    assert!(
        matches!(result, Err(StoreError::Invalid { .. })),
        "{result:?}"
    );
    assert_eq!(store.kv_get("lim", &too_long).await, Ok(None));

    let biggest = vec![7_u8; MAX_KV_VALUE_BYTES];
    assert_eq!(
        store
            .kv_cas("lim", "big", None, Some(biggest.clone()))
            .await,
        Ok(Some(1))
    );
    assert_eq!(
        store
            .kv_get("lim", "big")
            .await
            .unwrap()
            .map(|entry| entry.value == biggest),
        Some(true)
    );
    let result = store
        .kv_cas("lim", "big", Some(1), Some(vec![0; MAX_KV_VALUE_BYTES + 1]))
        .await;
    assert!(
        matches!(result, Err(StoreError::Invalid { .. })),
        "{result:?}"
    );
    let result = store
        .kv_cas("lim", "huge", None, Some(vec![0; MAX_KV_VALUE_BYTES + 1]))
        .await;
    assert!(
        matches!(result, Err(StoreError::Invalid { .. })),
        "{result:?}"
    );
    assert_eq!(
        store
            .kv_get("lim", "big")
            .await
            .unwrap()
            .map(|entry| entry.version),
        Some(1)
    );
    assert_eq!(store.kv_get("lim", "huge").await, Ok(None));
}

/// H-STORE-2 under a real race: many writers CAS the same version at once (through the
/// given stores, round robin); exactly one wins, the others see the winner's version.
pub(crate) async fn h_store_2_concurrent_cas_one_wins(stores: &[&dyn Store]) {
    let store = stores[0];
    for round in 0..10_u64 {
        let key = format!("k{round}");
        // Round 0..5: racing creates (expected None); then racing updates of version 1.
        let expected = if round < 5 {
            None
        } else {
            store
                .kv_cas("race", &key, None, Some(b"base".to_vec()))
                .await
                .unwrap();
            Some(1)
        };
        let racers: Vec<&dyn Store> = (0..6).map(|index| stores[index % stores.len()]).collect();
        let tickets = race(&racers, |index, store| {
            store.kv_cas(
                "race",
                &key,
                expected,
                Some(format!("w{index}").into_bytes()),
            )
        });
        let mut results = Vec::new();
        for ticket in tickets {
            results.push(ticket.await);
        }
        let won = expected.map_or(1, |version| version + 1);
        let winners: Vec<usize> = (0..results.len())
            .filter(|&index| results[index].is_ok())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert_eq!(results[winners[0]], Ok(Some(won)));
        for (index, result) in results.iter().enumerate() {
            if index != winners[0] {
                assert_eq!(
                    result,
                    &Err(StoreError::CasConflict {
                        domain: "race".into(),
                        key: key.clone(),
                        expected,
                        current: Some(won)
                    })
                );
            }
        }
        let stored = store.kv_get("race", &key).await.unwrap().unwrap();
        assert_eq!(stored.version, won);
        assert_eq!(stored.value, format!("w{}", winners[0]).into_bytes());
    }
}

/// `kv_scan` returns exactly the keys with the prefix, ascending by bytes, pages after
/// a key, and treats `%`, `_` and `\` as plain characters.
pub(crate) async fn h_dom_2_kv_scan_prefix_and_paging(store: &dyn Store) {
    let keys = [
        "a",
        "a%",
        "a%b",
        "a_c",
        "aXc",
        "ab",
        "a\\%",
        "a\\",
        "A",
        "a\u{10FFFF}",
        "a\u{10FFFF}z",
        "b",
        "é",
        "",
    ];
    for (index, key) in keys.iter().enumerate() {
        assert_eq!(
            store
                .kv_cas("scan", key, None, Some(vec![index as u8]))
                .await,
            Ok(Some(1)),
            "{key:?}"
        );
    }
    assert_eq!(
        store
            .kv_cas("scan", "ab", Some(1), Some(b"two".to_vec()))
            .await,
        Ok(Some(2))
    );
    store
        .kv_cas("scan2", "a%x", None, Some(b"other".to_vec()))
        .await
        .unwrap();

    let value_of = |key: &str| -> KvEntry {
        if key == "ab" {
            return KvEntry {
                version: 2,
                value: b"two".to_vec(),
            };
        }
        let index = keys.iter().position(|candidate| *candidate == key).unwrap();
        KvEntry {
            version: 1,
            value: vec![index as u8],
        }
    };
    let expect = |prefix: &str| -> Vec<String> {
        let mut matching: Vec<String> = keys
            .iter()
            .filter(|key| key.starts_with(prefix))
            .map(|key| key.to_string())
            .collect();
        matching.sort();
        matching
    };
    let scan = |prefix: &'static str, after: Option<&str>, limit: Option<usize>| {
        let page = KvPage {
            after: after.map(str::to_owned),
            limit,
        };
        async move { store.kv_scan("scan", prefix, page).await.unwrap() }
    };
    for prefix in [
        "",
        "a",
        "a%",
        "a_",
        "a\\",
        "a\\%",
        "a\u{10FFFF}",
        "é",
        "zz",
        "A",
        "ab",
    ] {
        let rows = scan(prefix, None, None).await;
        let got: Vec<String> = rows.iter().map(|(key, _)| key.clone()).collect();
        assert_eq!(got, expect(prefix), "prefix {prefix:?}");
        for (key, entry) in &rows {
            assert_eq!(entry, &value_of(key), "{key:?}");
        }
    }
    assert_eq!(scan("a%", None, None).await.len(), 2);
    assert_eq!(scan("a_", None, None).await.len(), 1);

    // Paging through "a" three at a time gives the same rows.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = scan("a", after.as_deref(), Some(3)).await;
        assert!(page.len() <= 3);
        if page.is_empty() {
            break;
        }
        after = page.last().map(|(key, _)| key.clone());
        paged.extend(page.into_iter().map(|(key, _)| key));
    }
    assert_eq!(paged, expect("a"));
    // `after` below the prefix range is no restriction; above it, nothing is left.
    assert_eq!(scan("a", Some("0"), None).await.len(), expect("a").len());
    assert!(scan("a", Some("b"), None).await.is_empty());
    assert_eq!(scan("", Some("a\u{10FFFF}z"), Some(1)).await[0].0, "b");
    assert!(scan("a", None, Some(0)).await.is_empty());

    let other = store
        .kv_scan("scan2", "a%", KvPage::default())
        .await
        .unwrap();
    assert_eq!(
        other,
        vec![(
            "a%x".to_string(),
            KvEntry {
                version: 1,
                value: b"other".to_vec()
            }
        )]
    );
    assert!(
        store
            .kv_scan("nothing", "", KvPage::default())
            .await
            .unwrap()
            .is_empty()
    );
}

// -------------------------------------------------------------------------------------
// KV linearizability (used by the property tests)
// -------------------------------------------------------------------------------------

/// One generated CAS: on key `key` (a small index), expecting `expected`, writing
/// `value` (`None` deletes).
#[derive(Debug, Clone)]
pub(crate) struct CasOp {
    pub(crate) key: u8,
    pub(crate) expected: Option<u64>,
    pub(crate) value: Option<Vec<u8>>,
}

type CasResult = Result<Option<u64>, StoreError>;

/// The sequential specification of `kv_cas` (H-STORE-2) over a map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KvModel {
    rows: BTreeMap<String, KvEntry>,
}

fn key_name(key: u8) -> String {
    format!("key-{key}")
}

impl KvModel {
    pub(crate) fn apply(&mut self, domain: &str, op: &CasOp) -> CasResult {
        let key = key_name(op.key);
        let current = self.rows.get(&key).map(|entry| entry.version);
        if current != op.expected {
            return Err(StoreError::CasConflict {
                domain: domain.into(),
                key,
                expected: op.expected,
                current,
            });
        }
        match &op.value {
            Some(value) => {
                let version = current.map_or(1, |version| version + 1);
                self.rows.insert(
                    key,
                    KvEntry {
                        version,
                        value: value.clone(),
                    },
                );
                Ok(Some(version))
            }
            None => {
                self.rows.remove(&key);
                Ok(None)
            }
        }
    }

    /// The store's rows of `domain`, as a model.
    pub(crate) async fn of(store: &dyn Store, domain: &str) -> KvModel {
        let rows = store.kv_scan(domain, "", KvPage::default()).await.unwrap();
        KvModel {
            rows: rows.into_iter().collect(),
        }
    }
}

/// Issues `ops` in order without awaiting any, then checks every result and the final
/// state against the sequential model: the store applies writes in call order.
pub(crate) async fn kv_pipeline_matches_model(
    store: &dyn Store,
    domain: &str,
    ops: &[CasOp],
) -> Result<(), String> {
    let tickets: Vec<_> = ops
        .iter()
        .map(|op| store.kv_cas(domain, &key_name(op.key), op.expected, op.value.clone()))
        .collect();
    let mut model = KvModel::default();
    for (index, (op, ticket)) in ops.iter().zip(tickets).enumerate() {
        let got = ticket.await;
        let want = model.apply(domain, op);
        if got != want {
            return Err(format!(
                "op #{index} {op:?}: store gave {got:?}, the model {want:?}"
            ));
        }
    }
    let stored = KvModel::of(store, domain).await;
    if stored != model {
        return Err(format!(
            "final state differs: store {stored:?}, model {model:?}"
        ));
    }
    Ok(())
}

/// A completed call: what it did, what it returned, and when (logical clock ticks)
/// it was invoked and returned.
#[derive(Debug, Clone)]
struct Call {
    op: CasOp,
    result: CasResult,
    invoked: u64,
    returned: u64,
}

async fn run_client(
    store: &dyn Store,
    domain: &str,
    ops: &[CasOp],
    clock: &AtomicU64,
) -> Vec<Call> {
    let mut calls = Vec::new();
    for op in ops {
        let invoked = clock.fetch_add(1, Ordering::SeqCst);
        let result = store
            .kv_cas(domain, &key_name(op.key), op.expected, op.value.clone())
            .await;
        let returned = clock.fetch_add(1, Ordering::SeqCst);
        calls.push(Call {
            op: op.clone(),
            result,
            invoked,
            returned,
        });
        tokio::task::yield_now().await;
    }
    calls
}

/// Searches for a linearization of two clients' histories: an interleaving that keeps
/// each client's order and real-time order (a call that returned before another was
/// invoked comes first) and under which the model gives every recorded result and
/// ends in `final_state`.
fn linearizable(
    domain: &str,
    clients: [&[Call]; 2],
    next: [usize; 2],
    model: &KvModel,
    final_state: &KvModel,
) -> bool {
    if next[0] == clients[0].len() && next[1] == clients[1].len() {
        return model == final_state;
    }
    for side in 0..2 {
        let Some(call) = clients[side].get(next[side]) else {
            continue;
        };
        // Every pending call of the other client that returned before this one was
        // invoked must be linearized first.
        let other = 1 - side;
        if clients[other][next[other]..]
            .iter()
            .any(|pending| pending.returned < call.invoked)
        {
            continue;
        }
        let mut after = model.clone();
        if after.apply(domain, &call.op) != call.result {
            continue;
        }
        let mut advanced = next;
        advanced[side] += 1;
        if linearizable(domain, clients, advanced, &after, final_state) {
            return true;
        }
    }
    false
}

/// Two clients each run their ops (awaiting each before the next) concurrently on
/// `a` and `b`; the recorded history must be linearizable against the model.
pub(crate) async fn kv_concurrent_clients_are_linearizable(
    a: &dyn Store,
    b: &dyn Store,
    domain: &str,
    ops: [&[CasOp]; 2],
) -> Result<(), String> {
    let clock = AtomicU64::new(0);
    let (first, second) = tokio::join!(
        run_client(a, domain, ops[0], &clock),
        run_client(b, domain, ops[1], &clock)
    );
    let final_state = KvModel::of(a, domain).await;
    if linearizable(
        domain,
        [&first, &second],
        [0, 0],
        &KvModel::default(),
        &final_state,
    ) {
        Ok(())
    } else {
        Err(format!(
            "no linearization explains client A {first:#?}\nclient B {second:#?}\nfinal {final_state:?}"
        ))
    }
}

#[cfg(test)]
mod checker_tests {
    use super::*;

    fn call(
        key: u8,
        expected: Option<u64>,
        value: Option<&[u8]>,
        result: CasResult,
        invoked: u64,
        returned: u64,
    ) -> Call {
        Call {
            op: CasOp {
                key,
                expected,
                value: value.map(<[u8]>::to_vec),
            },
            result,
            invoked,
            returned,
        }
    }

    /// The checker itself must reject impossible histories, or the property tests
    /// could not fail.
    #[test]
    fn the_linearizability_checker_rejects_impossible_histories() {
        let conflict = |expected, current| {
            Err(StoreError::CasConflict {
                domain: "d".into(),
                key: key_name(0),
                expected,
                current,
            })
        };
        let mut done = KvModel::default();
        done.apply(
            "d",
            &CasOp {
                key: 0,
                expected: None,
                value: Some(b"a".to_vec()),
            },
        )
        .unwrap();
        // Both creates "won": impossible.
        let a = [call(0, None, Some(b"a"), Ok(Some(1)), 0, 3)];
        let b = [call(0, None, Some(b"b"), Ok(Some(1)), 1, 2)];
        assert!(!linearizable(
            "d",
            [&a, &b],
            [0, 0],
            &KvModel::default(),
            &done
        ));
        // One won, the other saw it: fine in either order of invocation.
        let b = [call(0, None, Some(b"b"), conflict(None, Some(1)), 1, 2)];
        assert!(linearizable(
            "d",
            [&a, &b],
            [0, 0],
            &KvModel::default(),
            &done
        ));
        // The loser returned before the winner was invoked yet saw its write: not real-time.
        let a = [call(0, None, Some(b"a"), Ok(Some(1)), 5, 6)];
        let b = [call(0, None, Some(b"b"), conflict(None, Some(1)), 1, 2)];
        assert!(!linearizable(
            "d",
            [&a, &b],
            [0, 0],
            &KvModel::default(),
            &done
        ));
        // The final state must match too.
        let a = [call(0, None, Some(b"a"), Ok(Some(1)), 0, 1)];
        assert!(!linearizable(
            "d",
            [&a, &[]],
            [0, 0],
            &KvModel::default(),
            &KvModel::default()
        ));
    }
}
