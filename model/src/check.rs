//! Running the checker as the tests do: a model explored to the end, with what it explored
//! printed; a shortest counterexample to a property, or a shortest path to a state the test
//! describes, printed step by step.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model, Property};

/// Explores every state of `model` breadth first, and prints how many (as `name`).
pub fn explore<M>(name: &str, model: M) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{name}: {} states ({} unique), depth {}, {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// Finds a shortest counterexample to `property` in the model `make` builds, prints it and
/// its last state, and returns its steps (`Debug` of each action).
///
/// # Panics
///
/// When no path of up to 63 steps breaks `property`.
pub fn counterexample<M>(make: impl Fn() -> M, property: &'static str) -> Vec<M::Action>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    shortest(make, property, "broken")
}

/// Finds a shortest path to a state where `sought` holds (described as `what`) in the model
/// `make` builds, prints it and its last state, and returns its steps.
///
/// # Panics
///
/// When no path of up to 63 steps reaches such a state.
pub fn example<M>(
    make: impl Fn() -> M,
    what: &'static str,
    sought: fn(&M, &M::State) -> bool,
) -> Vec<M::Action>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    shortest(
        || Seek {
            model: make(),
            what,
            sought,
        },
        what,
        "reached",
    )
}

/// The steps of `actions`, each as its `Debug`.
pub fn names<A: Debug>(actions: &[A]) -> Vec<String> {
    actions.iter().map(|a| format!("{a:?}")).collect()
}

/// The shortest path to a discovery of `property`. A breadth-first checker keeps the last
/// discovery it met, not the first, so the search deepens one step at a time: the first depth
/// with a discovery is the shortest.
fn shortest<M>(make: impl Fn() -> M, property: &'static str, verb: &str) -> Vec<M::Action>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let started = Instant::now();
    let mut explored = 0;
    for depth in 2..64 {
        let checker = make()
            .checker()
            .target_max_depth(depth)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
            .spawn_bfs()
            .join();
        explored += checker.unique_state_count();
        if let Some(path) = checker.discovery(property) {
            println!(
                "\"{property}\" {verb} ({explored} states explored, {:.2?}) by {path}{:#?}",
                started.elapsed(),
                path.last_state()
            );
            return path.into_actions();
        }
    }
    panic!("\"{property}\" not {verb} within 63 steps");
}

/// A model whose one property is a state the test seeks.
struct Seek<M: Model> {
    model: M,
    what: &'static str,
    sought: fn(&M, &M::State) -> bool,
}

impl<M: Model> Model for Seek<M> {
    type State = M::State;
    type Action = M::Action;

    fn init_states(&self) -> Vec<M::State> {
        self.model.init_states()
    }

    fn actions(&self, state: &M::State, actions: &mut Vec<M::Action>) {
        self.model.actions(state, actions);
    }

    fn next_state(&self, last: &M::State, action: M::Action) -> Option<M::State> {
        self.model.next_state(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::sometimes(self.what, |seek: &Self, state| {
            (seek.sought)(&seek.model, state)
        })]
    }
}
