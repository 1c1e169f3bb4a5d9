//! The family of primitives cut off from Redis: a semaphore's permit, a read lease and a
//! write lease behind a full partition (every flow silent, new ones too) are told lost
//! before anyone else is granted what they held, and their release after the partition
//! heals answers `Lost`.

use std::time::Duration;

use rlock_runtime::{LockClient, LockRequest};
use rlock_tests::RedisServer;
use rlock_tests::locking::{PATIENCE, client_at};
use rlock_tests::proxy::FaultProxy;

use super::SHORT;

/// The kinds of lease cut off, and what contends with each: the same request, or for a
/// reader, a writer (another reader would share it).
#[derive(Debug, Clone, Copy)]
enum Taking {
    Permit,
    Read,
    Write,
}

impl Taking {
    fn request<'a>(self, client: &'a LockClient, key: &str, contending: bool) -> LockRequest<'a> {
        match (self, contending) {
            (Taking::Permit, _) => client.semaphore(key, 1),
            (Taking::Read, false) => client.read_lock(key),
            (Taking::Read, true) | (Taking::Write, _) => client.write_lock(key),
        }
    }
}

/// A holder behind a full partition: its renewals get no answer, so `lost()` fires at the
/// lower bound of its lease, by its own clock; a client on the other side is granted the key
/// only when Redis's lease ended, after that. Once the partition heals the holder's release
/// answers `Lost`.
async fn a_partitioned_holder_is_told_before_anyone_else_is_granted(taking: Taking) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let cut_off = client_at(&proxy.url(), SHORT).await;
    let other = client_at(&server.url(), SHORT).await;
    let key = format!("family:{taking:?}");
    let held = taking
        .request(&cut_off, &key, false)
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    proxy.partition();
    let granted = taking
        .request(&other, &key, true)
        .wait(PATIENCE)
        .acquire()
        .await
        .unwrap();
    assert!(
        held.is_lost(),
        "{taking:?}: another client was granted the key while the cut-off holder still \
         believed it held it"
    );
    proxy.heal();
    let release = tokio::time::timeout(PATIENCE, held.release())
        .await
        .unwrap();
    let err = release.unwrap_err();
    assert!(err.is_lost(), "{taking:?}: {err:?}");
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_permit_holder_is_told_first() {
    a_partitioned_holder_is_told_before_anyone_else_is_granted(Taking::Permit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_reader_is_told_first() {
    a_partitioned_holder_is_told_before_anyone_else_is_granted(Taking::Read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_writer_is_told_first() {
    a_partitioned_holder_is_told_before_anyone_else_is_granted(Taking::Write).await;
}
