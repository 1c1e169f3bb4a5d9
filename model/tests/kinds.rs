//! The claims about one name used as several kinds of lease, checked: the scripts of now
//! keep every kind to itself and end every call; the scripts before 835fceb granted a lock
//! waiter a semaphore's permit (defect 2), looped for ever on a fenced lock waiter's entry
//! (defect 3), granted a permit waiter a semaphore of another count (K2) and told a late
//! release of an ended permit that it gave it back (K6). One property the scripts of now do
//! not keep is shown with its counterexample (replayed on the real scripts by
//! `conformance.rs`): a plain join stands in another kind's queue until its first check in
//! refuses it (K5); it is never granted.

use rlock_model::check::{counterexample, example, explore, names};
use rlock_model::kinds::scenarios::{a_plain_join, late_release, locks_and_permits, two_counts};
use rlock_model::kinds::{Action, Client, Config, Kind, KindsModel, Name, Scripts, State};
use stateright::{Checker, Expectation, Model};

/// The property the scripts of now break, shown by a test below.
const FINDINGS: [&str; 1] = ["K5 plain joins refused"];

/// Checks `config` to the end and asserts every property but `except`.
fn assert_keeps(name: &str, config: Config, except: &[&str]) {
    let checker = explore(name, KindsModel::new(config));
    for property in checker.model().properties() {
        if except.contains(&property.name) {
            continue;
        }
        match property.expectation {
            Expectation::Always | Expectation::Eventually => {
                checker.assert_no_discovery(property.name);
            }
            Expectation::Sometimes => {
                assert!(
                    checker.discovery(property.name).is_some(),
                    "{name}: no example of \"{}\"",
                    property.name
                );
            }
        }
    }
}

/// The client who took `action` (`None`: the operator).
fn actor(action: &Action) -> Option<usize> {
    match *action {
        Action::Arrive(c)
        | Action::Append(c)
        | Action::CheckIn(c)
        | Action::Adopt(c)
        | Action::Decline(c)
        | Action::Release(c)
        | Action::Withdraw(c)
        | Action::LeaseEnds(c)
        | Action::Dies(c) => Some(c),
        Action::SetPermits(_) | Action::ClearPermits => None,
    }
}

#[test]
fn now_keeps_every_kind_to_itself() {
    let now = Scripts::Now;
    assert_keeps(
        "now, a lock and a semaphore",
        Config::new(
            now,
            &[
                Client::lock().fenced(),
                Client::lock().fair(),
                Client::permit(2),
                Client::permit(2),
                Client::permit(2).fair(),
            ],
        )
        .faults(2, 2, 1),
        &[],
    );
    assert_keeps(
        "now, a read-write lock and a lock",
        Config::new(
            now,
            &[
                Client::reader(),
                Client::reader(),
                Client::writer().fenced(),
                Client::writer(),
                Client::lock().fenced(),
            ],
        )
        .faults(2, 2, 1),
        &[],
    );
    assert_keeps(
        "now, every kind",
        Config::new(
            now,
            &[
                Client::lock().fenced().appends(),
                Client::lock().fair(),
                Client::permit(2),
                Client::permit(2).fair(),
                Client::reader(),
                Client::writer().fenced(),
            ],
        )
        .faults(3, 2, 1),
        &FINDINGS,
    );
    assert_keeps(
        "now, upgradeable reads",
        Config::new(
            now,
            &[
                Client::upgradeable_reader(),
                Client::upgrade(0),
                Client::reader(),
                Client::writer().fenced(),
                Client::upgradeable_reader(),
            ],
        )
        .faults(2, 2, 1),
        &[],
    );
    assert_keeps(
        "now, a count set at run time",
        Config::new(
            now,
            &[
                Client::permit(2),
                Client::permit(2).appends(),
                Client::permits(2, 2),
                Client::permit(3).fair(),
                Client::lock(),
            ],
        )
        .set_counts(&[1, 3], 2)
        .faults(1, 1, 1),
        &FINDINGS,
    );
    assert_keeps(
        "now, semaphores of two counts",
        Config::new(
            now,
            &[
                Client::permit(1),
                Client::permit(1).appends(),
                Client::permit(2),
                Client::permit(2).fair(),
            ],
        )
        .faults(2, 2, 1),
        &FINDINGS,
    );
    assert_keeps(
        "now, holds of several permits",
        Config::new(
            now,
            &[
                Client::permits(3, 2),
                Client::permits(3, 3).fair(),
                Client::permit(3),
                Client::permit(3),
                Client::lock().releases_bare(),
            ],
        )
        .faults(2, 2, 1),
        &[],
    );
    // Locks alone: their late release is told it lost the lock; a bare release that finds a
    // queue comes again in full.
    assert_keeps(
        "now, locks",
        Config::new(
            now,
            &[
                Client::lock().fenced(),
                Client::lock().fair(),
                Client::lock().releases_bare(),
            ],
        )
        .faults(2, 2, 1),
        &[],
    );
}

/// A lock client holds a permit while another client's permit is live.
fn lock_waiter_beside_a_permit(m: &KindsModel, s: &State) -> bool {
    let Name::Semaphore { holders, .. } = &s.name else {
        return false;
    };
    let lock_holds = holders
        .iter()
        .any(|h| h.live && m.config.clients[h.client].kind == Kind::Lock);
    let permit_holds = holders
        .iter()
        .any(|h| h.live && m.config.clients[h.client].kind != Kind::Lock);
    lock_holds && permit_holds
}

#[test]
fn before_grants_a_lock_waiter_a_permit() {
    // Defect 2: the lock ends unreleased with a waiter queued, a semaphore takes the name, and
    // a permit's release hands the lock waiter a permit.
    let config = locks_and_permits(Scripts::Before, Client::lock(), Client::permit(2));
    let steps = names(&counterexample(
        || KindsModel::new(config.clone()),
        "K1 one kind of holder",
    ));
    let ended = steps.iter().position(|a| a.starts_with("LeaseEnds"));
    let released = steps.iter().rposition(|a| a.starts_with("Release"));
    assert!(
        matches!((ended, released), (Some(e), Some(r)) if e < r),
        "{steps:?}"
    );
    // And beside a permit another client holds.
    let path = example(
        || KindsModel::new(config.clone()),
        "a lock waiter holds a permit beside a live permit",
        lock_waiter_beside_a_permit,
    );
    let permit_released =
        |a: &Action| matches!(a, Action::Release(c) if config.clients[*c].kind != Kind::Lock);
    assert!(path.iter().any(permit_released), "{path:?}");
    // The scripts of now drop the lock waiter's entry: it is never granted.
    let fixed = locks_and_permits(Scripts::Now, Client::lock(), Client::permit(2));
    assert_keeps("now, locks and permits", fixed, &[]);
}

#[test]
fn before_loops_for_ever_on_a_fenced_lock_waiter() {
    // Defect 3: a fenced lock waiter's entry in a semaphore's queue. The semaphore's call
    // declares no fence record, so the old `hand_off` put the entry back and answered
    // 'fence', which the semaphore's `while` took for a grant: it turned for ever. A
    // permit's release loops so...
    let fenced = Client::lock().fenced();
    let release = locks_and_permits(Scripts::Before, fenced, Client::permit(2));
    let path = counterexample(|| KindsModel::new(release.clone()), "K4 every step ends");
    let last = path.last().expect("a step");
    assert!(matches!(last, Action::Release(c) if release.clients[*c].kind != Kind::Lock));
    // ... and so does a fair permit's arrival on the free name, handing free permits to the
    // waiters queued first.
    let arrival = locks_and_permits(Scripts::Before, fenced, Client::permit(2).fair());
    let path = counterexample(|| KindsModel::new(arrival.clone()), "K4 every step ends");
    let last = path.last().expect("a step");
    assert!(matches!(last, Action::Arrive(c) if arrival.clients[*c].kind != Kind::Lock));
    // The scripts of now drop the entry (a semaphore serves no lock waiter), and every loop
    // stops at a grant's end.
    for permit in [Client::permit(2), Client::permit(2).fair()] {
        let fixed = locks_and_permits(Scripts::Now, fenced, permit);
        assert_keeps("now, a fenced lock waiter", fixed, &[]);
    }
}

#[test]
fn before_granted_a_permit_waiter_a_semaphore_of_another_count() {
    // A waiter queued for a semaphore of 1 (a mutex) whose holder's lease ends; a semaphore
    // of 2 takes the name, and its release handed the waiter one of its permits: the waiter
    // believed it held the one permit there is, beside a second any client of 2 may take.
    // Entries carried no count, and `hand_off` granted any permit waiter.
    let path = counterexample(
        || KindsModel::new(two_counts(Scripts::Before)),
        "K2 own count",
    );
    assert!(matches!(path.last(), Some(Action::Release(2))));
    // Now a permit's entry carries its count (`p1`), and a release serves its own count's.
    assert_keeps("now, two counts", two_counts(Scripts::Now), &[]);
}

#[test]
fn a_plain_join_stands_in_another_kinds_queue() {
    // A lock waiter joins by `RPUSHX` (its client already waits for the name, crowded) while
    // the name is a semaphore: nothing reads the key, so it stands in the semaphore's queue
    // until its first check in refuses it. It is never granted (K1 holds).
    let path = counterexample(|| KindsModel::new(a_plain_join()), "K5 plain joins refused");
    assert!(matches!(path.last(), Some(Action::Append(2))));
    let checker = explore("now, a plain join", KindsModel::new(a_plain_join()));
    checker.assert_no_discovery("K1 one kind of holder");
    checker.assert_no_discovery("K3 other kinds refused");
}

#[test]
fn before_told_a_late_release_of_an_ended_permit_it_gave_it_back() {
    // A permit (or a reader's lease) whose lease ended stays in its sorted set until a script
    // purges it; the release script removed the caller's member before it purged, so a late
    // release answered RELEASED while nobody looked in between (another lease keeping the
    // set alive). Now it answers by whether the lease was live, as a lock's and a writer's.
    for client in [Client::permit(2), Client::reader()] {
        let path = counterexample(
            || KindsModel::new(late_release(Scripts::Before, client)),
            "K6 lost leases told",
        );
        let release = path.last().expect("a step");
        assert!(matches!(release, Action::Release(_)));
        let ended = path
            .iter()
            .any(|a| matches!(a, Action::LeaseEnds(c) if Some(*c) == actor(release)));
        assert!(ended, "{path:?}");
    }
    for client in [
        Client::permit(2),
        Client::reader(),
        Client::lock(),
        Client::writer(),
    ] {
        assert_keeps(
            "now, a late release",
            late_release(Scripts::Now, client),
            &[],
        );
    }
}
