//! Lease checks of the conformance suite (spec server.md ACT-1): acquire, a conflict
//! that names the holder, renewal, release, takeover after expiry or of a named
//! (dead) owner, input checks, and one winner among racing claims. Every backend runs
//! them, so a PostgreSQL store later grants and refuses exactly as these do.

use ccare_store::{Lease, LeaseClaim, LeaseHolder, MAX_LEASE_TEXT_BYTES, Store, StoreError};

use super::{race, sid};

/// A holder named `owner` on `host` with `pid`.
pub(crate) fn holder(owner: &str, host: &str, pid: u32) -> LeaseHolder {
    LeaseHolder {
        owner: owner.to_owned(),
        host: host.to_owned(),
        pid,
        process_start: Some(u64::from(pid) * 1000 + 7),
    }
}

/// `holder`'s claim on `session` at `now_ms`, expiring at `expires_ms`.
pub(crate) fn claim(
    session: &str,
    holder: LeaseHolder,
    now_ms: i64,
    expires_ms: i64,
) -> LeaseClaim {
    LeaseClaim {
        session: sid(session),
        holder,
        now_ms,
        expires_ms,
        replacing: None,
    }
}

fn lease(session: &str, holder: LeaseHolder, expires_ms: i64) -> Lease {
    Lease {
        session: sid(session),
        holder,
        expires_ms,
    }
}

async fn stored(store: &dyn Store, session: &str) -> Option<Lease> {
    store.lease(&sid(session)).await.unwrap()
}

fn busy_holder(error: StoreError) -> Lease {
    assert_eq!(error.code(), "SESSION_BUSY", "{error}");
    match error {
        StoreError::SessionBusy { lease } => *lease,
        other => panic!("expected SessionBusy, got {other:?}"),
    }
}

/// ACT-1: a free session's lease is granted as claimed and read back; the holder may
/// claim it again (it is renewed); renew moves the expiry; release frees it once.
pub(crate) async fn act_1_lease_acquire_renew_release(store: &dyn Store) {
    let a = holder("owner-a", "host-a", 4242);
    assert_eq!(stored(store, "s").await, None);
    let granted = store
        .lease_acquire(claim("s", a.clone(), 1_000, 31_000))
        .await
        .unwrap();
    assert_eq!(granted, lease("s", a.clone(), 31_000));
    assert_eq!(stored(store, "s").await, Some(granted));
    // A lease on one session says nothing about another.
    assert_eq!(stored(store, "t").await, None);

    let again = store
        .lease_acquire(claim("s", a.clone(), 2_000, 32_000))
        .await
        .unwrap();
    assert_eq!(again, lease("s", a.clone(), 32_000));

    let renewed = store
        .lease_renew(&sid("s"), "owner-a", 50_000)
        .await
        .unwrap();
    assert_eq!(renewed, lease("s", a.clone(), 50_000));
    assert_eq!(stored(store, "s").await, Some(renewed));

    assert!(store.lease_release(&sid("s"), "owner-a").await.unwrap());
    assert_eq!(stored(store, "s").await, None);
    assert!(!store.lease_release(&sid("s"), "owner-a").await.unwrap());
    let lost = store
        .lease_renew(&sid("s"), "owner-a", 60_000)
        .await
        .unwrap_err();
    assert_eq!(
        lost,
        StoreError::LeaseLost {
            session: sid("s"),
            owner: "owner-a".into()
        }
    );
    assert_eq!(lost.code(), "LEASE_LOST");
    // Released, it is free for anyone.
    let b = holder("owner-b", "host-b", 7);
    let taken = store
        .lease_acquire(claim("s", b.clone(), 3_000, 33_000))
        .await
        .unwrap();
    assert_eq!(taken, lease("s", b, 33_000));
    // A holder without a known process start round-trips as such.
    let bare = LeaseHolder {
        process_start: None,
        ..holder("owner-c", "host-c", u32::MAX)
    };
    let granted = store
        .lease_acquire(claim("u", bare.clone(), 0, 1))
        .await
        .unwrap();
    assert_eq!(granted, lease("u", bare, 1));
    assert_eq!(stored(store, "u").await, Some(granted));
}

/// ACT-1: a claim on a lease another owner holds and that has not expired fails with
/// `SESSION_BUSY` naming the holder (owner, host, pid, expiry) and changes nothing; the
/// other owner can neither renew nor release it.
pub(crate) async fn act_1_lease_conflict_names_the_holder(store: &dyn Store) {
    let a = holder("owner-a", "host-a", 4242);
    let held = store
        .lease_acquire(claim("s", a.clone(), 1_000, 31_000))
        .await
        .unwrap();
    let b = holder("owner-b", "host-b", 99);
    let error = store
        .lease_acquire(claim("s", b.clone(), 30_999, 60_999))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "session s: busy, driven by pid 4242 on host host-a (owner owner-a) until 31000 ms"
    );
    assert_eq!(busy_holder(error), held);
    assert_eq!(stored(store, "s").await, Some(held.clone()));

    assert_eq!(
        store
            .lease_renew(&sid("s"), "owner-b", 90_000)
            .await
            .unwrap_err(),
        StoreError::LeaseLost {
            session: sid("s"),
            owner: "owner-b".into()
        }
    );
    assert!(!store.lease_release(&sid("s"), "owner-b").await.unwrap());
    assert_eq!(stored(store, "s").await, Some(held));
    // The refused claims were reported through their tickets: a flush is clean.
    store.flush().await.unwrap();
}

/// ACT-1: once `now_ms` reaches the expiry, any claim takes the lease over; the old
/// owner's renewal then fails with `LEASE_LOST` and its release leaves the new lease.
pub(crate) async fn act_1_lease_expired_is_taken_over(store: &dyn Store) {
    let a = holder("owner-a", "host-a", 4242);
    store
        .lease_acquire(claim("s", a, 1_000, 31_000))
        .await
        .unwrap();
    let b = holder("owner-b", "host-b", 99);
    let taken = store
        .lease_acquire(claim("s", b.clone(), 31_000, 61_000))
        .await
        .unwrap();
    assert_eq!(taken, lease("s", b, 61_000));
    assert_eq!(
        store
            .lease_renew(&sid("s"), "owner-a", 90_000)
            .await
            .unwrap_err()
            .code(),
        "LEASE_LOST"
    );
    assert!(!store.lease_release(&sid("s"), "owner-a").await.unwrap());
    assert_eq!(stored(store, "s").await, Some(taken));
}

/// ACT-1: a claim that replaces a named owner (found dead by the caller) takes an
/// unexpired lease from exactly that owner; a claim replacing an owner that no longer
/// holds it is refused, naming the current holder.
pub(crate) async fn act_1_lease_replacing_takes_over_the_named_owner_only(store: &dyn Store) {
    let a = holder("owner-a", "host-a", 4242);
    store
        .lease_acquire(claim("s", a, 1_000, 31_000))
        .await
        .unwrap();
    let b = holder("owner-b", "host-a", 4243);
    let taken = store
        .lease_acquire(LeaseClaim {
            replacing: Some("owner-a".into()),
            ..claim("s", b.clone(), 2_000, 32_000)
        })
        .await
        .unwrap();
    assert_eq!(taken, lease("s", b, 32_000));
    let c = holder("owner-c", "host-a", 4244);
    let error = store
        .lease_acquire(LeaseClaim {
            replacing: Some("owner-a".into()),
            ..claim("s", c, 2_001, 32_001)
        })
        .await
        .unwrap_err();
    assert_eq!(busy_holder(error), taken.clone());
    assert_eq!(stored(store, "s").await, Some(taken));
}

/// Claims with an empty or over-long owner or host, or an expiry not after now, fail
/// with `STORE_INVALID` and write nothing.
pub(crate) async fn act_1_lease_claims_are_checked(store: &dyn Store) {
    let long = "o".repeat(MAX_LEASE_TEXT_BYTES + 1);
    let bad = [
        (
            claim("s", holder("", "h", 1), 0, 10),
            "the owner is 0 bytes",
        ),
        (
            claim("s", holder(&long, "h", 1), 0, 10),
            "the owner is 257 bytes",
        ),
        (claim("s", holder("o", "", 1), 0, 10), "the host is 0 bytes"),
        (
            claim("s", holder("o", "h", 1), 10, 10),
            "not after now (10 ms)",
        ),
    ];
    for (claim, expected) in bad {
        let error = store.lease_acquire(claim).await.unwrap_err();
        assert_eq!(error.code(), "STORE_INVALID", "{error}");
        assert!(error.to_string().contains(expected), "{error}");
    }
    assert_eq!(stored(store, "s").await, None);
    // The longest accepted owner is accepted.
    let longest = "o".repeat(MAX_LEASE_TEXT_BYTES);
    store
        .lease_acquire(claim("s", holder(&longest, "h", 1), 0, 10))
        .await
        .unwrap();
    assert_eq!(
        stored(store, "s").await.map(|lease| lease.holder.owner),
        Some(longest)
    );
}

/// ACT-1: claims racing on one free session (through one or several handles): exactly
/// one is granted, every other is refused naming that winner.
pub(crate) async fn act_1_lease_concurrent_claims_one_wins(stores: &[&dyn Store]) {
    const CLAIMS: usize = 8;
    let handles: Vec<&dyn Store> = (0..CLAIMS).map(|i| stores[i % stores.len()]).collect();
    let tickets = race(&handles, |index, store| {
        store.lease_acquire(claim(
            "s",
            holder(&format!("owner-{index}"), "host", 100 + index as u32),
            1_000,
            31_000,
        ))
    });
    let mut granted = Vec::new();
    let mut refused = Vec::new();
    for ticket in tickets {
        match ticket.await {
            Ok(lease) => granted.push(lease),
            Err(error) => refused.push(busy_holder(error)),
        }
    }
    assert_eq!(granted.len(), 1, "{granted:?}");
    assert_eq!(refused.len(), CLAIMS - 1);
    assert!(refused.iter().all(|holder| *holder == granted[0]));
    assert_eq!(stored(stores[0], "s").await, Some(granted[0].clone()));
}
