//! The session lease a front end holds (spec server.md ACT-1): `[host] lease_ms`
//! validated in the host table, time-based renewal, release on `release` and on drop,
//! immediate takeover from a dead process of this machine, `SESSION_BUSY` naming a
//! live holder, and waiting for one.

use std::sync::Arc;
use std::time::Duration;

use ccare_app::{AppError, SessionLease, WhenBusy};
use ccare_core::{Clock, SessionId, SystemClock};
use ccare_store::{Lease, LeaseClaim, LeaseHolder, MemoryStore, Store};

use crate::config::{error, settings};

fn sid() -> SessionId {
    SessionId::new("leased").unwrap()
}

fn this_host() -> String {
    // What the lease helper records, read back from a lease it took.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// Stores a lease held by `pid` on `host` for `ms` from now.
async fn foreign(store: &dyn Store, host: &str, pid: u32, ms: i64) -> Lease {
    let now_ms = SystemClock.now_ms();
    store
        .lease_acquire(LeaseClaim {
            session: sid(),
            holder: LeaseHolder {
                owner: "someone-else".into(),
                host: host.into(),
                pid,
                process_start: None,
            },
            now_ms,
            expires_ms: now_ms + ms,
            replacing: None,
        })
        .await
        .unwrap()
}

async fn acquire(
    store: &Arc<MemoryStore>,
    lease_ms: u64,
    when_busy: WhenBusy<'_>,
) -> Result<SessionLease, AppError> {
    let store: Arc<dyn Store> = store.clone();
    SessionLease::acquire(store, Arc::new(SystemClock), &sid(), lease_ms, when_busy).await
}

#[test]
fn act_1_host_lease_ms_defaults_to_30_s_and_is_at_least_one_second() {
    assert_eq!(settings("").unwrap().host.lease_ms, 30_000);
    assert_eq!(
        settings("[host]\nlease_ms = 45000\n")
            .unwrap()
            .host
            .lease_ms,
        45_000
    );
    assert_eq!(
        error("[host]\nlease_ms = 999\n"),
        "host.lease_ms: expected a lease of at least 1000 ms (one second) and at most 9007199254740991, found 999"
    );
    assert_eq!(
        error("[host]\nlease_ms = \"30s\"\n"),
        "host.lease_ms: invalid type: string \"30s\", expected u64"
    );
}

/// ACT-1: the lease names this process, is renewed on a timer (a third of its life)
/// while held, and is gone after `release`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_the_lease_names_this_process_and_is_renewed_until_released() {
    let store = Arc::new(MemoryStore::new());
    let held = acquire(&store, 1_200, WhenBusy::Fail).await.unwrap();
    let granted = held.lease().clone();
    assert_eq!(granted.holder.pid, std::process::id());
    if !this_host().is_empty() {
        assert_eq!(granted.holder.host, this_host());
    }
    assert_eq!(store.lease(&sid()).await.unwrap(), Some(granted.clone()));
    tokio::time::sleep(Duration::from_millis(900)).await;
    let renewed = store.lease(&sid()).await.unwrap().unwrap();
    assert_eq!(renewed.holder, granted.holder);
    assert!(
        renewed.expires_ms > granted.expires_ms,
        "not renewed: {renewed:?}"
    );
    held.release().await.unwrap();
    assert_eq!(store.lease(&sid()).await.unwrap(), None);
}

/// Dropping the lease (an error path of a command) releases it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_dropped_lease_is_released() {
    let store = Arc::new(MemoryStore::new());
    drop(acquire(&store, 30_000, WhenBusy::Fail).await.unwrap());
    assert_eq!(store.lease(&sid()).await.unwrap(), None);
}

/// ACT-1: a live holder (this very process, under another owner) refuses the claim
/// with `SESSION_BUSY` naming it; a holder on this machine whose process is gone is
/// taken over at once, although its lease has a minute left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_a_live_holder_is_busy_and_a_dead_one_here_is_taken_over() {
    if this_host().is_empty() {
        return; // no /proc: liveness is unknown, only expiry frees a lease
    }
    let store = Arc::new(MemoryStore::new());
    let live = foreign(store.as_ref(), &this_host(), std::process::id(), 60_000).await;
    let error = acquire(&store, 30_000, WhenBusy::Fail).await.unwrap_err();
    assert!(error.is_bad_input());
    let AppError::SessionBusy {
        lease,
        remaining_ms,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(**lease, live);
    assert!((59_000..=60_000).contains(remaining_ms), "{remaining_ms}");
    assert_eq!(
        error.to_string(),
        format!(
            "SESSION_BUSY: session leased is driven by pid {} on host {} (its lease expires in {remaining_ms} ms unless renewed)",
            std::process::id(),
            this_host()
        )
    );

    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    let store = Arc::new(MemoryStore::new());
    let dead = foreign(store.as_ref(), &this_host(), dead_pid, 60_000).await;
    let held = acquire(&store, 30_000, WhenBusy::Fail).await.unwrap();
    assert_ne!(held.lease().holder.owner, dead.holder.owner);
    assert_eq!(held.lease().holder.pid, std::process::id());
}

/// ACT-1: waiting for a live holder of another machine announces it once and takes
/// the lease when it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn act_1_waiting_announces_the_holder_once_and_takes_the_lease_at_expiry() {
    let store = Arc::new(MemoryStore::new());
    let other = foreign(store.as_ref(), "elsewhere.example", 1, 700).await;
    let mut heard = Vec::new();
    let mut on_wait = |lease: &Lease| heard.push(lease.clone());
    let held = acquire(&store, 30_000, WhenBusy::Wait(&mut on_wait))
        .await
        .unwrap();
    assert!(SystemClock.now_ms() >= other.expires_ms);
    assert_eq!(heard, [other]);
    assert_eq!(held.lease().holder.pid, std::process::id());
}
