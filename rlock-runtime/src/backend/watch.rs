//! One deadline keeper per connection, instead of a timer per command.
//!
//! A connection whose reply reader rlock runs itself (a plain TCP or Unix socket) is
//! *watched*: each call counts itself, while it is outstanding, in the slice of time it
//! started in; the connection's task steps through the slices and, when a slice a command
//! timeout old still has calls outstanding, cuts the connection. Its reply reader stops, and
//! every call waiting on it fails at once. So each call is bounded by the command timeout
//! (cut between 15/16 and all of it after it started, or later by as much as the task's own
//! wake-up is late; a timeout under 16 ms is cut into slices of a millisecond), and pays a clock read and two uncontended atomic additions where a timer
//! cost a lock of the runtime's timer wheel on insertion and again on removal.
//!
//! Replies come in order on a connection, so a call that waits past the timeout means
//! that the flow went silent, the server stalled, or the calls queued ahead of it did not get
//! through in time: in each case the connection is no use to the calls behind it either, and
//! cutting them all at once is what the per-call timers would have done one by one.
//!
//! The counts are kept in per-thread stripes ([`crate::util::stripe`]), so that a runtime's workers
//! do not fight over one cache line on every command.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};

use crate::util::stripe::{self, STRIPES};

/// How many slices a command timeout is cut into (fewer, of a millisecond each, for a
/// timeout under 16 ms: a timer tick is no finer): a call is cut at most one slice early.
const SLICES: u64 = 16;
/// Counters per stripe: two timeouts' worth, so that the task, even a whole timeout late,
/// never judges a counter that newer calls have already reused.
const BUCKETS: usize = 2 * SLICES as usize;

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[repr(align(64))]
struct Stripe([AtomicU32; BUCKETS]);

/// The deadline keeper of one connection; see the module's docs.
pub(crate) struct Watch {
    /// The clock's origin for slices.
    origin: Instant,
    slice: Duration,
    /// Slices per command timeout: [`SLICES`], or fewer for a timeout under 16 ms.
    span: u64,
    stripes: [Stripe; STRIPES],
    /// Set when the task cut the connection for an overdue call.
    cut: AtomicBool,
    /// The task sleeps while no call is outstanding; the first call after that wakes it.
    idle: AtomicBool,
    wake: Notify,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("slice", &self.slice)
            .field("cut", &self.was_cut())
            .finish_non_exhaustive()
    }
}

/// A call outstanding on a watched connection; counted until dropped.
#[must_use = "a call is counted only while its `Pending` lives"]
pub(crate) struct Pending<'a> {
    counter: &'a AtomicU32,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Release);
    }
}

/// Why a watched connection's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The reply reader ended: the server closed the connection, or it failed.
    Closed,
    /// A call was overdue: the connection was cut.
    Cut,
    /// The connection was given up and its last call has ended.
    Retired,
}

impl Watch {
    /// A keeper for calls bounded by `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        // Lossless: at most SLICES.
        let span = (timeout.as_millis().clamp(1, u128::from(SLICES))) as u64;
        Self {
            origin: Instant::now(),
            // Never zero: a slice of zero would make every call overdue.
            slice: (timeout / span as u32).max(Duration::from_micros(1)),
            span,
            stripes: std::array::from_fn(|_| Stripe(std::array::from_fn(|_| AtomicU32::new(0)))),
            cut: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    /// The slice `at` falls in.
    fn slice_of(&self, at: Instant) -> u64 {
        // In u64 nanoseconds (a 128-bit division costs a call on every command): they last
        // 584 years from the watch's start.
        let nanos = |d: Duration| {
            d.as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(d.subsec_nanos()))
        };
        nanos(at.saturating_duration_since(self.origin)) / nanos(self.slice).max(1)
    }

    fn bucket(slice: u64) -> usize {
        // Lossless: the remainder is below BUCKETS.
        (slice % BUCKETS as u64) as usize
    }

    /// Counts a call from now until the returned guard is dropped.
    pub(crate) fn start(&self) -> Pending<'_> {
        let bucket = Self::bucket(self.slice_of(Instant::now()));
        let counter = &self.stripes[stripe::this_thread()].0[bucket];
        // SeqCst with the task's store of `idle` and its recount: either this call sees the
        // task idle and wakes it, or the task's recount sees this call.
        counter.fetch_add(1, Ordering::SeqCst);
        if self.idle.load(Ordering::SeqCst) && self.idle.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
        Pending { counter }
    }

    /// Whether the task cut the connection for an overdue call.
    pub(crate) fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Calls started in `bucket`'s slice, outstanding.
    fn outstanding_in(&self, bucket: usize) -> u32 {
        self.stripes
            .iter()
            .map(|stripe| stripe.0[bucket].load(Ordering::SeqCst))
            .sum()
    }

    fn outstanding(&self) -> bool {
        (0..BUCKETS).any(|bucket| self.outstanding_in(bucket) > 0)
    }

    /// [`run`](Self::run) with `reader` in a task of its own, as the driver would run it:
    /// polled alone on every reply, not beside the watch's timer. The task is aborted when
    /// this ends, and with it every call still waiting for a reply.
    pub(crate) async fn run_reader(
        &self,
        reader: impl Future<Output = ()> + Send + 'static,
        retire: impl Future<Output = ()>,
    ) -> Ended {
        let mut reader = AbortOnDrop(tokio::spawn(reader));
        let read = async {
            let _ = (&mut reader.0).await;
        };
        self.run(read, retire).await
    }

    /// Runs the connection's reply reader (`reader`) and keeps its calls' deadlines, until
    /// the reader ends, a call is overdue (the reader is then dropped, which fails every
    /// call waiting on it), or `retire` has resolved and no call is outstanding.
    pub(crate) async fn run(
        &self,
        reader: impl Future<Output = ()>,
        retire: impl Future<Output = ()>,
    ) -> Ended {
        let mut tick = tokio::time::interval(self.slice);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(reader, retire);
        let mut retiring = false;
        let mut idle = false;
        // The first slice not judged yet.
        let mut unjudged = 0;
        loop {
            tokio::select! {
                () = &mut reader => return Ended::Closed,
                () = &mut retire, if !retiring => {
                    // Ends at the next tick without calls outstanding, an idle one too (a
                    // call that took the connection just before it was given up still gets
                    // to count itself).
                    retiring = true;
                    idle = false;
                    self.idle.store(false, Ordering::SeqCst);
                    tick.reset();
                }
                () = self.wake.notified(), if idle => {
                    idle = false;
                    tick.reset();
                }
                _ = tick.tick(), if !idle => {
                    let now = self.slice_of(Instant::now());
                    // Calls of slice `s` have run at least `span - 1` slices once `now`
                    // reaches `s + span`. A counter older than `BUCKETS` slices holds newer
                    // calls by now: those slices are not judged (only a task a whole timeout
                    // late skips any, and while idle there are none to judge).
                    if let Some(newest) = now.checked_sub(self.span) {
                        let oldest = unjudged.max(now.saturating_sub(BUCKETS as u64 - 1));
                        if (oldest..=newest).any(|slice| self.outstanding_in(Self::bucket(slice)) > 0) {
                            self.cut.store(true, Ordering::Release);
                            return Ended::Cut;
                        }
                        unjudged = unjudged.max(newest + 1);
                    }
                    if !self.outstanding() {
                        if retiring {
                            return Ended::Retired;
                        }
                        self.idle.store(true, Ordering::SeqCst);
                        // A call that started before the store above is seen here.
                        if self.outstanding() {
                            self.idle.store(false, Ordering::SeqCst);
                        } else {
                            idle = true;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_outstanding_past_the_timeout_cuts_the_connection() {
        let watch = Watch::new(Duration::from_millis(160));
        let pending = watch.start();
        let never = std::future::pending::<()>();
        let ended = watch.run(never, std::future::pending()).await;
        assert_eq!(ended, Ended::Cut);
        assert!(watch.was_cut());
        drop(pending);
    }

    #[tokio::test]
    async fn calls_that_end_in_time_keep_it_and_a_retired_one_ends_once_idle() {
        let watch = Watch::new(Duration::from_millis(160));
        let (retire_tx, retire_rx) = tokio::sync::oneshot::channel::<()>();
        let calls = async {
            for _ in 0..30 {
                let _pending = watch.start();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = retire_tx.send(());
        };
        let retire = async {
            let _ = retire_rx.await;
        };
        let run = watch.run(std::future::pending(), retire);
        let (ended, ()) = tokio::join!(run, calls);
        assert_eq!(ended, Ended::Retired);
        assert!(!watch.was_cut());
    }

    #[tokio::test]
    async fn an_idle_watch_wakes_for_the_next_call() {
        let watch = Watch::new(Duration::from_millis(160));
        let late = async {
            // Long enough for the task to go idle, then a call that never ends.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(watch.idle.load(Ordering::SeqCst));
            let pending = watch.start();
            std::future::pending::<()>().await;
            drop(pending);
        };
        let ended = tokio::select! {
            ended = watch.run(std::future::pending(), std::future::pending()) => ended,
            () = late => unreachable!(),
        };
        assert_eq!(ended, Ended::Cut);
    }

    #[tokio::test]
    async fn an_idle_watch_given_up_ends() {
        let watch = Watch::new(Duration::from_millis(160));
        let retire = async {
            // Long enough for the task to go idle first.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(watch.idle.load(Ordering::SeqCst));
        };
        let ended = tokio::time::timeout(
            Duration::from_secs(5),
            watch.run(std::future::pending(), retire),
        )
        .await;
        assert_eq!(ended, Ok(Ended::Retired));
    }

    /// A timeout under 16 ms is kept to the millisecond, not stretched to 16 slices of one.
    #[tokio::test]
    async fn a_short_timeout_is_cut_in_millisecond_slices() {
        let watch = Watch::new(Duration::from_millis(4));
        assert_eq!((watch.slice, watch.span), (Duration::from_millis(1), 4));
        let long = Watch::new(Duration::MAX);
        assert_eq!(long.span, SLICES);
        let _ = long.slice_of(Instant::now());
    }

    #[tokio::test]
    async fn the_reader_ending_ends_the_task() {
        let watch = Watch::new(Duration::from_secs(2));
        let ended = watch.run(async {}, std::future::pending()).await;
        assert_eq!(ended, Ended::Closed);
    }
}
