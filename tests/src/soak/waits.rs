//! The waiting mix of a soak run, judged: per waiting client (a worker process) and key, the
//! grants it received, the waits that gave up `Busy`, and how often its queued requests
//! checked in (counted on Redis's side, [`crate::checkins`]). Two things fail the run:
//!
//! - **Starvation** ([`Starvation`]): a client that made requests on a key all run long and
//!   got no grant while the others got at least a round each; or a wait that gave up `Busy`
//!   after the key had been granted to others more often than FIFO order allows, even
//!   counting a lost place in the queue for every fault around it.
//! - **Check ins too fast**: a client's check ins on a key, averaged over its waiting time on
//!   it, above [`Rules::max_checkins_per_s`] per waiting request (WAITING.md, invariant 3).
//!
//! Both rules are written so that an honest run cannot break them however loaded; the
//! reasoning is beside each field of [`Rules`].

use std::collections::BTreeMap;

use super::history::{GaveUp, History, LATENESS_WINDOW_US, Waits};

/// The rules, with the shape of the run they depend on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Waiting-mix requests that can stand on one key at once, across workers (workers ×
    /// waiters per key). In FIFO order a queued request is passed by each of the others at
    /// most once before it is granted: once granted, a request ends and the task's next one
    /// queues behind.
    pub waiters_per_key: u64,
    /// Longest a waiter that lost its place in the queue (a hand-off it missed, a release
    /// that skipped it while its feed reconnected, a queue lost with its server) stays out of
    /// it, µs: one check interval (WAITING.md, invariant 1). The grants of any such window on
    /// the key, at their busiest, are added to what one lost place can cost.
    pub check_interval_us: u64,
    /// A client with fewer requests than this on a key is not judged for getting no grant.
    pub min_requests: u64,
    /// A wait during which the waiter's own process had its timers fire this late (stopped by
    /// the nemesis, or not scheduled) is not judged: the process could not take its turn.
    pub stall_us: u64,
    /// Highest average rate of check ins per waiting request, per second. WAITING.md's
    /// invariant 3: behind a holder whose lease is 2 s or more (renewed at a third, so at
    /// least 1.33 s is left at any check in), the head checks in once per 0.67 s and the
    /// others, who are not told the lease, once per 0.5 s: at most 2 a second on timers.
    /// On top of that come wake-ups (a declined hand-off, a confirmed or lost feed: one check
    /// in each) and polling every 50 ms while a feed reconnects. 5 a second leaves 3 a second
    /// for those on average; a waiter polling all along (announcements never confirmed, the
    /// defect of a lost subscription) checks in 20 times a second.
    pub max_checkins_per_s: f64,
    /// Below this much waiting time on a key (s), a client's rate is shown but not judged.
    pub min_waiting_s: f64,
}

impl Rules {
    /// The rules of a soak run with `waiters_per_key` waiting requests per key in all.
    pub fn for_run(waiters_per_key: u64) -> Rules {
        Rules {
            waiters_per_key,
            check_interval_us: 670_000,
            min_requests: 5,
            stall_us: 100_000,
            max_checkins_per_s: 5.0,
            min_waiting_s: 10.0,
        }
    }
}

/// A waiting client's figures on one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// The worker process.
    pub worker: u32,
    /// Index into [`History::keys`].
    pub key: u32,
    /// Its requests, as it counted them.
    pub waits: Waits,
    /// Its queued requests' check ins that found the lock busy, as Redis counted them.
    pub checkins: u64,
}

impl Row {
    /// Check ins per second of waiting, per waiting request.
    pub fn rate(&self) -> f64 {
        let waited_s = self.waits.waited_us as f64 / 1e6;
        if waited_s > 0.0 {
            self.checkins as f64 / waited_s
        } else {
            0.0
        }
    }
}

/// A starved waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Starvation {
    /// `worker` made `requests` requests on `key` and got no grant, while the other clients
    /// got `others` grants on it (at least one each per waiting request).
    NoGrant {
        /// The worker process.
        worker: u32,
        /// Index into [`History::keys`].
        key: u32,
        /// Its requests.
        requests: u64,
        /// The grants the other clients got on the key.
        others: u64,
    },
    /// `wait` gave up `Busy` after the key was granted `passes` times during it, more than
    /// the `allowed` `(1 + faults) × (waiters per key + busiest grants in a check interval)`.
    PassedOver {
        /// The wait.
        wait: GaveUp,
        /// Grants of the key during it.
        passes: u64,
        /// The most the rule allows.
        allowed: u64,
        /// Faults around it that could each have cost it its place.
        faults: u64,
    },
}

impl Starvation {
    /// The key it happened on (index into [`History::keys`]).
    fn key(&self) -> u32 {
        match self {
            Starvation::NoGrant { key, .. } => *key,
            Starvation::PassedOver { wait, .. } => wait.key,
        }
    }

    /// One line saying what happened.
    pub fn describe(&self, history: &History) -> String {
        let key = history
            .keys
            .get(self.key() as usize)
            .map_or("", String::as_str);
        match self {
            Starvation::NoGrant {
                worker,
                requests,
                others,
                ..
            } => format!(
                "starvation on {key}: worker {worker} made {requests} requests and got no grant \
                 while the others got {others}"
            ),
            Starvation::PassedOver {
                wait,
                passes,
                allowed,
                faults,
            } => format!(
                "starvation on {key}: worker {}'s wait from {} gave up after {} ms while the key \
                 was granted {passes} times (at most {allowed} allowed with {faults} faults \
                 around it)",
                wait.worker,
                wait.start_us,
                wait.end_us.saturating_sub(wait.start_us) / 1000
            ),
        }
    }
}

/// What [`judge`] found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Per waiting client and key, in order.
    pub rows: Vec<Row>,
    /// Must be empty.
    pub starved: Vec<Starvation>,
    /// Rows whose rate is judged and above the bound: must be empty.
    pub too_fast: Vec<Row>,
    /// Waits that gave up `Busy` and were not judged, their process having stalled.
    pub stalled_waits: u64,
    /// The rule applied.
    pub rules: Option<Rules>,
}

impl Verdict {
    /// The violations, one line each.
    pub fn violations(&self, history: &History) -> Vec<String> {
        let key = |k: u32| history.keys.get(k as usize).map_or("", String::as_str);
        let mut out: Vec<String> = self.starved.iter().map(|s| s.describe(history)).collect();
        let bound = self.rules.map_or(0.0, |r| r.max_checkins_per_s);
        for row in &self.too_fast {
            out.push(format!(
                "check ins too fast on {}: worker {} checked in {} times in {:.1} s of waiting, \
                 {:.2}/s per waiting request (bound {bound}/s)",
                key(row.key),
                row.worker,
                row.checkins,
                row.waits.waited_us as f64 / 1e6,
                row.rate()
            ));
        }
        out
    }
}

/// Check-in counts by (client id, lock key), as Redis saw them, put on (worker, key index)
/// through the clients the workers named; also what could not be (another client's, or a
/// key no worker named).
pub fn attribute(
    history: &History,
    counts: &BTreeMap<(String, String), u64>,
) -> (BTreeMap<(u32, u32), u64>, u64) {
    let mut by_worker = BTreeMap::new();
    let mut unattributed = 0;
    for ((client, key), n) in counts {
        let worker = history
            .clients
            .iter()
            .find(|(_, _, id)| id == client)
            .map(|(w, _, _)| *w);
        match (worker, history.key_id(key)) {
            (Some(w), Some(k)) => *by_worker.entry((w, k)).or_default() += n,
            _ => unattributed += n,
        }
    }
    (by_worker, unattributed)
}

/// Judges the waiting mix of `history`. `checkins` are per (worker, key) (see [`attribute`]);
/// `faults_during(key, from_us, to_us)` counts the nemesis faults that reach `key` and were
/// under way, or just healed, in that span.
pub fn judge(
    history: &History,
    rules: Rules,
    checkins: &BTreeMap<(u32, u32), u64>,
    faults_during: impl Fn(u32, u64, u64) -> u64,
) -> Verdict {
    let mut verdict = Verdict {
        rules: Some(rules),
        ..Verdict::default()
    };
    // Grant times per waiting key, sorted.
    let mut grants: BTreeMap<u32, Vec<u64>> = history
        .waits
        .keys()
        .map(|&(_, key)| (key, Vec::new()))
        .collect();
    for r in &history.records {
        if let Some(times) = grants.get_mut(&r.key) {
            times.push(r.grant_us);
        }
    }
    for times in grants.values_mut() {
        times.sort_unstable();
    }

    for (&(worker, key), waits) in &history.waits {
        let row = Row {
            worker,
            key,
            waits: *waits,
            checkins: checkins.get(&(worker, key)).copied().unwrap_or(0),
        };
        if waits.waited_us as f64 / 1e6 >= rules.min_waiting_s
            && row.rate() > rules.max_checkins_per_s
        {
            verdict.too_fast.push(row);
        }
        verdict.rows.push(row);
        let others: u64 = history
            .waits
            .iter()
            .filter(|&(&(w, k), _)| k == key && w != worker)
            .map(|(_, o)| o.grants)
            .sum();
        if waits.grants == 0
            && waits.requests >= rules.min_requests
            && others >= rules.waiters_per_key
        {
            verdict.starved.push(Starvation::NoGrant {
                worker,
                key,
                requests: waits.requests,
                others,
            });
        }
    }

    for wait in &history.gave_up {
        let Some(times) = grants.get(&wait.key) else {
            continue;
        };
        let stalled = history.lateness.iter().any(|l| {
            l.worker == wait.worker
                && l.late_us >= rules.stall_us
                && (wait.start_us..=wait.end_us.saturating_add(LATENESS_WINDOW_US))
                    .contains(&l.woke_us)
        });
        if stalled {
            verdict.stalled_waits += 1;
            continue;
        }
        let passes = count_within(times, wait.start_us, wait.end_us);
        let faults = faults_during(wait.key, wait.start_us, wait.end_us);
        let allowed =
            (1 + faults) * (rules.waiters_per_key + busiest(times, rules.check_interval_us));
        if passes > allowed {
            verdict.starved.push(Starvation::PassedOver {
                wait: *wait,
                passes,
                allowed,
                faults,
            });
        }
    }
    verdict
}

/// How many of the sorted `times` lie in `from..=to`.
fn count_within(times: &[u64], from: u64, to: u64) -> u64 {
    let start = times.partition_point(|&t| t < from);
    let end = times.partition_point(|&t| t <= to);
    end.saturating_sub(start) as u64
}

/// The most of the sorted `times` within any span of `span_us`.
fn busiest(times: &[u64], span_us: u64) -> u64 {
    let mut most = 0;
    let mut first = 0;
    for (last, &t) in times.iter().enumerate() {
        while times[first] + span_us < t {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most as u64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::protocol::Line;
    use crate::soak::history::{Lateness, Record, Release, SectionKind, Write, output};

    fn section(worker: u32, grant_us: u64) -> Line {
        let r = Record {
            worker,
            key: 0,
            fence: grant_us,
            grant_us,
            end_us: grant_us + 1,
            lost_us: 0,
            write_sent_us: 0,
            write_done_us: 0,
            write: Write::None,
            release: Release::Ok,
            kind: SectionKind::Lock,
        };
        r.line("k")
    }

    fn client(id: &str) -> Line {
        Line::Client {
            deployment: "single".into(),
            id: id.into(),
        }
    }

    fn waits_on_k(waits: Waits) -> Line {
        Line::Waits {
            key: "k".into(),
            waits,
        }
    }

    /// Worker 0 waits on `k` (with `waits`) and gives up once at `gave_up`; worker 1 is
    /// granted at each of `grants`, and checks in `checkins` times.
    fn run(
        waits: Waits,
        gave_up: Option<(u64, u64)>,
        grants: &[u64],
        lateness: &[(u64, u64)],
    ) -> History {
        let mut h = History::default();
        let mut zero = vec![client("c0"), waits_on_k(waits)];
        if let Some((start_us, end_us)) = gave_up {
            let wait = GaveUp {
                worker: 0,
                key: 0,
                start_us,
                end_us,
            };
            zero.push(wait.line("k"));
        }
        for &(woke_us, late_us) in lateness {
            let l = Lateness {
                worker: 0,
                woke_us,
                late_us,
            };
            zero.push(l.line());
        }
        h.add_worker(0, &output(&zero)).unwrap();
        let mut one = vec![client("c1")];
        for &g in grants {
            one.push(section(1, g));
        }
        let theirs = Waits {
            requests: grants.len() as u64,
            grants: grants.len() as u64,
            waited_us: 1,
            ..Waits::default()
        };
        one.push(waits_on_k(theirs));
        h.add_worker(1, &output(&one)).unwrap();
        h
    }

    fn rules() -> Rules {
        Rules {
            waiters_per_key: 4,
            check_interval_us: 100,
            ..Rules::for_run(4)
        }
    }

    #[test]
    fn lines_round_trip() {
        let w = Waits {
            requests: 9,
            grants: 5,
            busy: 1,
            cancelled: 2,
            errors: 1,
            waited_us: 77,
        };
        let h = run(w, Some((10, 20)), &[1, 2], &[(30, 4000)]);
        assert_eq!(h.waits[&(0, 0)], w);
        assert_eq!(h.waits[&(1, 0)].grants, 2);
        assert_eq!(
            h.gave_up,
            [GaveUp {
                worker: 0,
                key: 0,
                start_us: 10,
                end_us: 20
            }]
        );
        assert_eq!((h.lateness[0].woke_us, h.lateness[0].late_us), (30, 4000));
        assert_eq!(h.clients[1], (1, "single".to_owned(), "c1".to_owned()));
        assert!(
            History::default()
                .add_worker(0, "WAITS k 1 2\nDONE 0\n")
                .is_err()
        );
        assert!(
            History::default()
                .add_worker(0, "LATE 5\nDONE 0\n")
                .is_err()
        );
    }

    #[test]
    fn a_client_without_grants_while_others_are_served_is_starved() {
        let none = Waits {
            requests: 5,
            ..Waits::default()
        };
        let h = run(none, None, &[1, 2, 3, 4], &[]);
        let v = judge(&h, rules(), &BTreeMap::new(), |_, _, _| 0);
        assert!(
            matches!(
                v.starved[..],
                [Starvation::NoGrant {
                    worker: 0,
                    requests: 5,
                    others: 4,
                    ..
                }]
            ),
            "{v:?}"
        );
        assert!(v.violations(&h)[0].contains("starvation on k"));
        // Too few requests to judge, or others served less than a round: not starvation.
        let few = Waits {
            requests: 4,
            ..Waits::default()
        };
        assert!(
            judge(
                &run(few, None, &[1, 2, 3, 4], &[]),
                rules(),
                &BTreeMap::new(),
                |_, _, _| 0
            )
            .starved
            .is_empty()
        );
        assert!(
            judge(
                &run(none, None, &[1, 2, 3], &[]),
                rules(),
                &BTreeMap::new(),
                |_, _, _| 0
            )
            .starved
            .is_empty()
        );
    }

    #[test]
    fn a_wait_passed_over_more_than_fifo_allows_is_starved_unless_faults_or_a_stall_explain_it() {
        let w = Waits {
            requests: 3,
            grants: 2,
            busy: 1,
            ..Waits::default()
        };
        // Grants 1000 µs apart: at most one per 100 µs window, so one lost place allows
        // 4 + 1 = 5 passes.
        let grants: Vec<u64> = (1..=6).map(|i| i * 1000).collect();
        let h = run(w, Some((500, 6500)), &grants, &[]);
        let v = judge(&h, rules(), &BTreeMap::new(), |_, _, _| 0);
        assert!(
            matches!(
                v.starved[..],
                [Starvation::PassedOver {
                    passes: 6,
                    allowed: 5,
                    faults: 0,
                    ..
                }]
            ),
            "{v:?}"
        );
        // Five passes are within FIFO order.
        let h = run(w, Some((500, 5500)), &grants, &[]);
        assert!(
            judge(&h, rules(), &BTreeMap::new(), |_, _, _| 0)
                .starved
                .is_empty()
        );
        // A fault around it: one more lost place allowed.
        let h = run(w, Some((500, 6500)), &grants, &[]);
        let v = judge(&h, rules(), &BTreeMap::new(), |key, from, to| {
            assert_eq!((key, from, to), (0, 500, 6500));
            1
        });
        assert!(v.starved.is_empty(), "{v:?}");
        // Its own process stalled during it: not judged.
        let h = run(w, Some((500, 6500)), &grants, &[(7000, 150_000)]);
        let v = judge(&h, rules(), &BTreeMap::new(), |_, _, _| 0);
        assert_eq!((v.starved.len(), v.stalled_waits), (0, 1), "{v:?}");
        // A short hiccup does not excuse it.
        let h = run(w, Some((500, 6500)), &grants, &[(7000, 20_000)]);
        assert_eq!(
            judge(&h, rules(), &BTreeMap::new(), |_, _, _| 0)
                .starved
                .len(),
            1
        );
    }

    #[test]
    fn check_ins_above_the_bound_are_flagged_once_enough_waiting_is_seen() {
        let w = Waits {
            requests: 10,
            grants: 10,
            waited_us: 20_000_000,
            ..Waits::default()
        };
        let h = run(w, None, &[1], &[]);
        let counts: BTreeMap<(String, String), u64> = [
            (("c0".to_owned(), "k".to_owned()), 101),
            (("c1".to_owned(), "k".to_owned()), 3),
            (("stranger".to_owned(), "k".to_owned()), 7),
        ]
        .into_iter()
        .collect();
        let (checkins, unattributed) = attribute(&h, &counts);
        assert_eq!(
            (checkins[&(0, 0)], checkins[&(1, 0)], unattributed),
            (101, 3, 7)
        );
        let v = judge(&h, rules(), &checkins, |_, _, _| 0);
        assert_eq!(v.too_fast.len(), 1, "101 in 20 s is over 5/s: {v:?}");
        assert!((v.too_fast[0].rate() - 5.05).abs() < 1e-9);
        assert!(v.violations(&h)[0].contains("check ins too fast on k"));
        let fine: BTreeMap<(u32, u32), u64> = [((0, 0), 100)].into_iter().collect();
        assert!(judge(&h, rules(), &fine, |_, _, _| 0).too_fast.is_empty());
        // Too little waiting to judge (worker 1 waited 1 µs).
        let fast: BTreeMap<(u32, u32), u64> = [((1, 0), 1000)].into_iter().collect();
        assert!(judge(&h, rules(), &fast, |_, _, _| 0).too_fast.is_empty());
    }

    #[test]
    fn busiest_window() {
        assert_eq!(busiest(&[], 10), 0);
        assert_eq!(busiest(&[0, 5, 10, 11, 30], 10), 3);
        assert_eq!(count_within(&[1, 2, 3, 4], 2, 3), 2);
    }
}
