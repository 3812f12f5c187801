//! The backend-neutral conformance suite (`conformance/`) run against [`MemoryStore`]:
//! every check `all.rs` runs on SQLite, including the KV property tests, so the
//! in-memory store used by tests and benchmarks keeps exactly the [`Store`] contract.
//! Two "handles" are two clones of one store (they share its data).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::conformance;

use std::sync::atomic::{AtomicUsize, Ordering};

use ccare_store::{MemoryStore, Store};
use conformance::CasOp;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

macro_rules! conformance_on_one_store {
    ($($name:ident),* $(,)?) => {
        /// Each conformance check on a fresh memory store.
        mod conformance_on_memory {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = MemoryStore::new();
                    conformance::$name(&store).await;
                }
            )*
        }
    };
}

conformance_on_one_store!(
    h_sess_1_create_list_newest_first,
    h_store_8_create_existing_id_fails,
    h_log_1_create_rejects_non_contiguous_seed,
    h_log_3_append_and_read_ranges,
    h_log_1_append_checks_seqs,
    h_store_1_conflict_writes_nothing,
    h_store_unknown_session,
    h_store_4_writes_are_ordered_at_call_time,
    h_store_4_pipelined_appends_land_in_order,
    h_store_4_flush_reports_the_oldest_unreported_error,
    h_store_2_kv_cas_lifecycle,
    h_dom_2_kv_limits,
    h_dom_2_kv_scan_prefix_and_paging,
    act_1_lease_acquire_renew_release,
    act_1_lease_conflict_names_the_holder,
    act_1_lease_expired_is_taken_over,
    act_1_lease_replacing_takes_over_the_named_owner_only,
    act_1_lease_claims_are_checked,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_lease_concurrent_claims_one_wins_across_two_handles() {
    let store = MemoryStore::new();
    let other = store.clone();
    conformance::act_1_lease_concurrent_claims_one_wins(&[&store, &other]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_1_concurrent_appends_one_wins() {
    let store = MemoryStore::new();
    conformance::h_store_1_concurrent_appends_one_wins(&store, &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_1_concurrent_appends_one_wins_across_two_handles() {
    let store = MemoryStore::new();
    let other = store.clone();
    conformance::h_store_1_concurrent_appends_one_wins(&store, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_2_concurrent_cas_one_wins() {
    let store = MemoryStore::new();
    conformance::h_store_2_concurrent_cas_one_wins(&[&store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_store_2_concurrent_cas_one_wins_across_two_handles() {
    let store = MemoryStore::new();
    let other = store.clone();
    conformance::h_store_2_concurrent_cas_one_wins(&[&store, &other]).await;
}

/// Reads need no runtime: every future is ready when returned, and every ticket is
/// resolved (memory's "durable") before the write method returns.
#[test]
fn memory_futures_are_ready_without_a_runtime() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn now<T>(future: impl Future<Output = T>) -> T {
        let mut context = Context::from_waker(Waker::noop());
        match pin!(future).poll(&mut context) {
            Poll::Ready(value) => value,
            Poll::Pending => panic!("a memory store future was pending"),
        }
    }
    let store = MemoryStore::new();
    let id = conformance::sid("ready");
    now(store.create_session(conformance::new_session("ready", 1), Vec::new())).unwrap();
    assert_eq!(
        now(store.append(&id, 0, conformance::numbered(0, 2, "r"))),
        Ok(2)
    );
    assert_eq!(now(store.flush()), Ok(()));
    assert_eq!(now(store.session(&id)).unwrap().unwrap().head, 2);
    assert_eq!(
        now(store.read(&id, ccare_store::ReadRange::all())).unwrap(),
        conformance::numbered(0, 2, "r")
    );
}

// -------------------------------------------------------------------------------------
// KV linearizability, property-tested (as in all.rs)
// -------------------------------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn cas_op() -> impl Strategy<Value = CasOp> {
    let expected = prop_oneof![2 => Just(None), 3 => (1_u64..4).prop_map(Some)];
    let value = prop_oneof![3 => proptest::collection::vec(any::<u8>(), 0..4).prop_map(Some), 1 => Just(None)];
    (0_u8..3, expected, value).prop_map(|(key, expected, value)| CasOp {
        key,
        expected,
        value,
    })
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// H-STORE-2: pipelined CAS ops give the sequential model's results, in call order.
#[test]
fn h_store_2_pipelined_cas_matches_the_sequential_model() {
    let runtime = runtime();
    let store = MemoryStore::new();
    let case = AtomicUsize::new(0);
    runner(64)
        .run(&proptest::collection::vec(cas_op(), 1..40), |ops| {
            let domain = format!("pipeline-{}", case.fetch_add(1, Ordering::Relaxed));
            runtime
                .block_on(conformance::kv_pipeline_matches_model(
                    &store, &domain, &ops,
                ))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// H-STORE-2: two concurrent CAS clients, on one handle and on two clones: every
/// history is linearizable against the sequential model.
#[test]
fn h_store_2_concurrent_cas_clients_are_linearizable() {
    let runtime = runtime();
    let store = MemoryStore::new();
    let other = store.clone();
    let case = AtomicUsize::new(0);
    let client = || proptest::collection::vec(cas_op(), 0..10);
    runner(40)
        .run(&(client(), client()), |(a, b)| {
            let case = case.fetch_add(1, Ordering::Relaxed);
            runtime.block_on(async {
                let one = format!("linear-one-{case}");
                conformance::kv_concurrent_clients_are_linearizable(&store, &store, &one, [&a, &b])
                    .await
                    .map_err(TestCaseError::fail)?;
                let two = format!("linear-two-{case}");
                conformance::kv_concurrent_clients_are_linearizable(&store, &other, &two, [&a, &b])
                    .await
                    .map_err(TestCaseError::fail)
            })
        })
        .unwrap();
}
