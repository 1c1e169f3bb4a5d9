//! The claims about rlock's waiting protocol, checked: the protocol of now keeps every
//! property; the protocol released in 0.1 breaks P1 (twice) and P3; a client that adopts a
//! hand-off after its call was cut short breaks P4.

use rlock_model::check::{self, explore};
use rlock_model::waiting::{Config, Protocol, WaitModel};
use stateright::Checker;

/// Checks `config` to the end and prints what it explored.
fn check(name: &str, config: Config) -> impl Checker<WaitModel> {
    explore(name, WaitModel::new(config))
}

/// Finds a shortest counterexample to `property` under `config`, prints it and returns its
/// steps.
fn counterexample(config: Config, property: &'static str) -> Vec<String> {
    check::names(&check::counterexample(|| WaitModel::new(config), property))
}

#[test]
fn now_keeps_every_invariant() {
    let everything = Config {
        horizon: 8,
        stalls: true,
        lapses: true,
        deaths: true,
        cancels: true,
        cuts: true,
        ..Config::quiet(Protocol::Now, 3)
    };
    check("now, 3 waiters, all faults", everything).assert_properties();
    let late = Config {
        late_joiner: true,
        ..everything
    };
    check("now, 3 waiters, late joiner", late).assert_properties();
    // And the configurations in which Before breaks (below).
    for (waiters, stalls, lapses) in [(1, false, false), (2, false, true), (3, true, false)] {
        let config = Config {
            stalls,
            lapses,
            late_joiner: lapses,
            ..Config::quiet(Protocol::Now, waiters)
        };
        check(&format!("now, {config:?}"), config).assert_properties();
    }
}

#[test]
fn before_loses_a_waiter_that_missed_its_handoff() {
    // Defect 2. No lapse here: the only way out of the queue is a missed handoff.
    let config = Config {
        stalls: true,
        ..Config::quiet(Protocol::Before, 3)
    };
    let steps = counterexample(config, "P1 membership");
    assert!(steps.iter().any(|a| a.starts_with("Stall")));
    assert!(steps.iter().any(|a| a.starts_with("Decline")));
}

#[test]
fn before_forgets_waiters_when_the_queue_lapses() {
    // Defect 3. No stall here: the only way out of the queue is the lapse. W1 arrives only
    // after it, re-creating the queue, so W0's check-ins never notice.
    let config = Config {
        lapses: true,
        late_joiner: true,
        ..Config::quiet(Protocol::Before, 2)
    };
    let steps = counterexample(config, "P1 membership");
    let lapse = steps.iter().position(|a| a == "QueueLapse");
    assert!(lapse.is_some() && lapse < steps.iter().position(|a| a == "Join(1)"));
}

#[test]
fn before_hot_loops_behind_a_long_hold() {
    // Defect 1: no fault at all, one waiter, and a holder that renews past the deadline the
    // waiter was told when it joined. It then checks in twice in a row at once.
    let steps = counterexample(Config::quiet(Protocol::Before, 1), "P3 check-in rate");
    assert!(steps.iter().any(|a| a == "Renew"));
    assert!(steps.ends_with(&["CheckIn(0)".to_string(), "CheckIn(0)".to_string()]));
}

#[test]
fn a_cut_attempt_is_never_adopted() {
    // Defect 4: a release hands the lock to a waiter whose call is in flight; the deadline
    // cuts the call and the client arms the withdrawal of its token, yet adopts the hand-off
    // it heard; the withdrawal then hands the lock on under its feet.
    let config = Config {
        cuts: true,
        ..Config::quiet(Protocol::CutAdopts, 2)
    };
    let steps = counterexample(config, "P4 safety");
    let at = |prefix: &str| steps.iter().position(|a| a.starts_with(prefix));
    let (cut, adopt, withdraw) = (at("Cut"), at("Adopt"), at("Withdraw"));
    assert!(cut.is_some() && cut < adopt && adopt < withdraw);
    assert!(steps.last().is_some_and(|a| a.starts_with("Withdraw")));
    // The fix: a cut waiter counts itself as not queued, adopts nothing and gives up.
    let fixed = Config {
        protocol: Protocol::Now,
        ..config
    };
    check("now, 2 waiters, cuts", fixed).assert_properties();
}
