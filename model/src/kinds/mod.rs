//! A model of one name used as several kinds of lease, checked with [stateright]: the name's
//! key in Redis is free, a lock, a semaphore or a read-write lock, and clients of every kind
//! call the scripts on it in every order.
//!
//! # What is modelled
//!
//! Redis' side ([`State`]): what the key holds ([`Name`]: a lock's holder; a semaphore's count
//! and permits; a read-write lock's writer and readers, each lease live or ended, an ended
//! one kept in its sorted set until a script purges it), the queue (entries of a client, a
//! kind letter and a fence flag, head first) and the fence record (how many fences were
//! issued). Each [`Client`] asks for one [`Kind`]: a lock, one or several permits of a
//! semaphore of some count (held together, as `permits(n)` holds them), a reader, the
//! upgradeable reader, the writer, or the upgrade of an upgradeable reader's read (which it
//! asks for once that reader holds; its token names that reader, and it is announced on
//! that reader's channel); a lock or writer may be fenced (an upgrade always is), a lock or
//! permit fair, and
//! a lock or permit client may join a queue with a plain `RPUSHX` as a client that already
//! waits for the name does (a permit's entry then carries the count its caller names, not
//! one set at run time). Its side ([`Progress`]): where it is in its life, and whether an
//! announcement handed it a lease.
//!
//! Every [`Action`] is one atomic step: one script call (or the store's release and its
//! call again with the fence record), a client's own step on an announcement, or an
//! environment step (a lease ends unreleased, a waiting process dies). The scripts are run
//! by `scripts.rs`, one function per script file, and say what each call answers and
//! announces ([`Effect`]), which the conformance test (`tests/conformance.rs`) compares with
//! the real scripts on a real server after every step of every path up to a depth.
//!
//! # The scripts
//!
//! [`Scripts::Now`] are the scripts as they are. [`Scripts::Before`] runs the hand-off and the
//! semaphore's loops as they were before every script read its key's kind (commit 42c36c4),
//! with today's arrivals (numbered as the defects they were):
//!
//! 2. `hand_off` told kinds apart only by the read-write role: a lock's and a semaphore's
//!    entries had none, so a semaphore's release granted a lock waiter a permit, beside the
//!    permits held;
//! 3. the semaphore's release (and fair acquire) looped `while` `hand_off` answered anything
//!    but false; a fenced lock waiter's entry, which a semaphore's call (declaring no fence
//!    record) puts back and answers `'fence'` for, made the loop turn for ever: a script that
//!    cannot finish stops the whole server.
//!
//! # What is abstracted away
//!
//! Time (a lease ends by an environment step, any time, and its holder then knows it lost
//! it), renewals (a holder renews; a lease ends only by that step), tokens (a client has one
//! token for its life), budgets and cut calls (the waiting model's), the queue's lapse and
//! bound, a reader's downgrade, Redlock and Cluster, and failures of Redis.
//!
//! # Properties
//!
//! - **K1 one kind of holder**: the key's leases are all of the kind it holds, each held by a
//!   client of that kind (so no waiter is ever granted another kind's lease); at most `count`
//!   live permits, a hold of several counting each; a live writer alone, but for an upgrade
//!   beside its own upgradeable reader.
//! - **K2 own count**: a permit waiter holds permits only of a semaphore of its own count.
//! - **K3 other kinds refused**: an arrival through the acquire script on a key holding
//!   another kind (or a semaphore of another count) is refused: never queued, never granted.
//! - **K4 every step ends**: every script call ends within a constant number of loop turns.
//! - **K5 plain joins refused**: a plain join (`RPUSHX`) never stands in the queue of a key
//!   holding another kind, or a semaphore of another count.
//! - **K6 lost leases told**: the release of a lease that ended unreleased answers that it
//!   was not the caller's (the client's `LockError::Lost`).
//! - **K7 one upgradeable reader**: at most one upgradeable reader holds a live lease.
//! - **P1 membership**: a check in that answers busy leaves its caller's entry queued.
//! - **P2 hand-off**: a release that gave a lease back leaves no live waiter of its kind
//!   queued first that fits now (a hold of several permits that does not fit stops the
//!   hand-offs: the waiters behind it wait, in arrival order).
//! - **P4 safety**: whoever believes it holds a lease holds it, live and of its own kind; a
//!   live lease is held knowingly, or by a waiter an announcement named, or by one whose
//!   withdrawal is still to run, or by a dead waiter until its lease ends.
//! - **P5 no orphan**: once every client is done, every live lease is held knowingly (or by a
//!   dead waiter, until its lease ends).
//! - **S every client served** (sometimes): every client can get its lease.
//!
//! (P3, the waiting model's check-in rate, needs time, which this model leaves out.)
//! [`Scripts::Now`] keeps every property but K5 (a plain join is refused at its first check
//! in, never granted), whose counterexample `tests/kinds.rs` prints and
//! `tests/conformance.rs` replays on the real scripts; [`Scripts::Before`] breaks K1
//! (defect 2), K2, K4 (defect 3) and K6, and the paths that break K2 and K6 there replay on
//! the real scripts of now as [`Scripts::Now`] steps them.

pub mod scenarios;
mod scripts;
mod state;

pub use scripts::MOST_ENTRIES;
pub use state::{Answer, Broken, Budget, Effect, Entry, Held, Holds, Name, Phase, Progress, State};

use scripts::{Fit, Run};
use stateright::{Model, Property};

/// What a client asks for.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    /// A lock.
    Lock,
    /// `take` permits of a semaphore of `permits`, held together as one lease.
    Permit {
        /// The semaphore's count, as the client names it.
        permits: u8,
        /// How many permits it holds at once (`permits(n)`).
        take: u8,
    },
    /// A reader of a read-write lock.
    Read,
    /// The upgradeable reader of a read-write lock: a reader, at most one at a time.
    UpgradeableRead,
    /// The writer of a read-write lock.
    Write,
    /// The upgrade of client `of`'s upgradeable read: the writer's lease beside it, under a
    /// token naming it (the same client's, announced on its channel). It comes once `of`
    /// holds.
    Upgrade {
        /// The upgradeable reader's client.
        of: usize,
    },
}

impl Kind {
    /// The letter of its queue entries (the scripts' `ME`).
    pub fn letter(self) -> char {
        match self {
            Kind::Lock => 'l',
            Kind::Permit { .. } => 'p',
            Kind::Read => 'r',
            Kind::UpgradeableRead => 'u',
            Kind::Write | Kind::Upgrade { .. } => 'w',
        }
    }

    /// What its scripts make of a key.
    pub fn holds(self) -> Holds {
        match self {
            Kind::Lock => Holds::Lock,
            Kind::Permit { .. } => Holds::Semaphore,
            Kind::Read | Kind::UpgradeableRead | Kind::Write | Kind::Upgrade { .. } => {
                Holds::ReadWrite
            }
        }
    }
}

/// One client: what it asks for, and how.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Client {
    /// Its kind.
    pub kind: Kind,
    /// It asks for a fence (a lock or the writer).
    pub fenced: bool,
    /// It never passes a live waiter queued earlier (a lock or a permit; a read-write lock's
    /// waiters are always served in arrival order).
    pub fair: bool,
    /// It may arrive by a plain join of the queue (a lock or a permit, whose client already
    /// waits for the name: `QueueCall::Append`).
    pub appends: bool,
    /// Its releases are bare (a lock): the first call carries the token alone, as the store
    /// sends a lock's whose lease was taken without waiting, and comes again in full when it
    /// finds a queue.
    pub bare: bool,
}

impl Client {
    fn of(kind: Kind) -> Self {
        Client {
            kind,
            fenced: false,
            fair: false,
            appends: false,
            bare: false,
        }
    }

    /// A lock client.
    pub fn lock() -> Self {
        Self::of(Kind::Lock)
    }

    /// A permit client of a semaphore of `permits`.
    pub fn permit(permits: u8) -> Self {
        Self::of(Kind::Permit { permits, take: 1 })
    }

    /// A client of a semaphore of `permits` holding `take` of them at once.
    pub fn permits(permits: u8, take: u8) -> Self {
        Self::of(Kind::Permit { permits, take })
    }

    /// How many permits its lease takes (1 but for a semaphore's hold of several).
    pub fn take(&self) -> usize {
        match self.kind {
            Kind::Permit { take, .. } => usize::from(take),
            Kind::Lock
            | Kind::Read
            | Kind::UpgradeableRead
            | Kind::Write
            | Kind::Upgrade { .. } => 1,
        }
    }

    /// A reader.
    pub fn reader() -> Self {
        Self::of(Kind::Read)
    }

    /// A writer.
    pub fn writer() -> Self {
        Self::of(Kind::Write)
    }

    /// The upgradeable reader.
    pub fn upgradeable_reader() -> Self {
        Self::of(Kind::UpgradeableRead)
    }

    /// The upgrade of client `of`'s upgradeable read: fenced, as every upgrade is.
    pub fn upgrade(of: usize) -> Self {
        Self::of(Kind::Upgrade { of }).fenced()
    }

    /// It asks for a fence.
    pub fn fenced(self) -> Self {
        assert!(
            matches!(self.kind, Kind::Lock | Kind::Write | Kind::Upgrade { .. }),
            "{self:?}"
        );
        Client {
            fenced: true,
            ..self
        }
    }

    /// It waits fairly.
    pub fn fair(self) -> Self {
        assert!(
            matches!(self.kind, Kind::Lock | Kind::Permit { .. }),
            "{self:?}"
        );
        Client { fair: true, ..self }
    }

    /// Its releases are bare.
    pub fn releases_bare(self) -> Self {
        assert!(matches!(self.kind, Kind::Lock), "{self:?}");
        Client { bare: true, ..self }
    }

    /// It may arrive by a plain join.
    pub fn appends(self) -> Self {
        assert!(
            matches!(self.kind, Kind::Lock | Kind::Permit { .. }),
            "{self:?}"
        );
        Client {
            appends: true,
            ..self
        }
    }
}

/// Which scripts run.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Scripts {
    /// The hand-off, the semaphore's loops and the late releases of sets' leases before
    /// every script read its key's kind: defects 2 and 3, K2 and K6 (see the module docs).
    Before,
    /// The scripts as they are.
    Now,
}

/// The model's parameters: the scripts, the clients and the faults allowed per run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The scripts checked.
    pub scripts: Scripts,
    /// The clients, by index.
    pub clients: Vec<Client>,
    /// How many leases may end unreleased.
    pub lease_ends: u8,
    /// How many waiters may give up.
    pub withdrawals: u8,
    /// How many waiting processes may die.
    pub deaths: u8,
    /// The counts an operator may set the semaphore to at run time (`set_permits`).
    pub set_counts: Vec<u8>,
    /// How many changes of the count (sets and clears) may happen per run.
    pub recounts: u8,
}

impl Config {
    /// The permits `name`'s live leases take, each as many as its client holds at once.
    pub fn live_permits(&self, name: &Name) -> usize {
        match name {
            Name::Semaphore { holders, .. } => holders
                .iter()
                .filter(|h| h.live)
                .map(|h| self.clients[h.client].take())
                .sum(),
            _ => 0,
        }
    }

    /// `clients` on `scripts`, with no fault.
    pub fn new(scripts: Scripts, clients: &[Client]) -> Self {
        Config {
            scripts,
            clients: clients.to_vec(),
            lease_ends: 0,
            withdrawals: 0,
            deaths: 0,
            set_counts: Vec::new(),
            recounts: 0,
        }
    }

    /// With the semaphore's count set at run time to any of `counts`, or cleared, at most
    /// `recounts` times per run.
    pub fn set_counts(self, counts: &[u8], recounts: u8) -> Self {
        Config {
            set_counts: counts.to_vec(),
            recounts,
            ..self
        }
    }

    /// With `lease_ends`, `withdrawals` and `deaths` allowed per run.
    pub fn faults(self, lease_ends: u8, withdrawals: u8, deaths: u8) -> Self {
        Config {
            lease_ends,
            withdrawals,
            deaths,
            ..self
        }
    }
}

/// One atomic step; clients are named by index.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The client's first call: its kind's acquire script (`Acquisition::queued`, the arrival).
    Arrive(usize),
    /// A lock or permit client's first call as a plain join (`Scripted::append`: `RPUSHX` of its
    /// entry); with no queue to join, the acquire script in the same attempt.
    Append(usize),
    /// A waiter's later acquire call, by its timer or once woken.
    CheckIn(usize),
    /// A waiter acts on the announcement naming it and the lease is live: it holds it, and
    /// renews it (its kind's renew script).
    Adopt(usize),
    /// A waiter acts on the announcement naming it, but the lease is gone: it checks in.
    Decline(usize),
    /// The holder releases its lease (its kind's release script), or a holder that lost
    /// its lease sends its release late.
    Release(usize),
    /// A waiter gives up, or a refused waiter's token is withdrawn in the background (the
    /// release script's `leaving` branch): its entry goes, a lease handed to it is handed on.
    Withdraw(usize),
    /// The client's lease ends unreleased: a holder stopped past it, or a waiter handed a
    /// lease that did not act in time. A holder then knows it lost it.
    LeaseEnds(usize),
    /// A waiting client's process dies: unsubscribed, its entry is dropped by the next
    /// release that meets it.
    Dies(usize),
    /// An operator sets the semaphore's count to the `i`th of [`Config::set_counts`]
    /// (`set_permits`, the resize script).
    SetPermits(usize),
    /// An operator clears the count set (`clear_permits`).
    ClearPermits,
}

/// The model checked: clients of several kinds on one name under a [`Config`].
#[derive(Clone, Debug)]
pub struct KindsModel {
    /// Its parameters.
    pub config: Config,
}

impl KindsModel {
    /// The model of `config`.
    pub fn new(config: Config) -> Self {
        KindsModel { config }
    }

    /// Every action of `client`, enabled or not.
    fn each_action(client: usize) -> [Action; 9] {
        [
            Action::Arrive(client),
            Action::Append(client),
            Action::CheckIn(client),
            Action::Adopt(client),
            Action::Decline(client),
            Action::Release(client),
            Action::Withdraw(client),
            Action::LeaseEnds(client),
            Action::Dies(client),
        ]
    }

    /// Whether `action` can happen in `s`.
    pub fn enabled(&self, s: &State, action: Action) -> bool {
        if s.stuck {
            // The server runs the step that cannot finish: nothing else happens.
            return false;
        }
        let client = match action {
            Action::SetPermits(_) => return s.budget.recounts > 0,
            Action::ClearPermits => return s.budget.recounts > 0 && s.record.is_some(),
            Action::Arrive(c)
            | Action::Append(c)
            | Action::CheckIn(c)
            | Action::Adopt(c)
            | Action::Decline(c)
            | Action::Release(c)
            | Action::Withdraw(c)
            | Action::LeaseEnds(c)
            | Action::Dies(c) => c,
        };
        let p = s.clients[client];
        let lease = s.name.live_lease_of(client);
        let upgrade_of = match self.config.clients[client].kind {
            Kind::Upgrade { of } => Some(of),
            _ => None,
        };
        match action {
            // An upgrade is asked for through its upgradeable read's guard, while it holds.
            Action::Arrive(_) => {
                p.phase == Phase::Arriving
                    && upgrade_of.is_none_or(|of| s.clients[of].phase == Phase::Holding)
            }
            Action::Append(_) => p.phase == Phase::Arriving && self.config.clients[client].appends,
            Action::CheckIn(_) => p.phase == Phase::Waiting,
            Action::Adopt(_) => p.phase == Phase::Waiting && p.handed && lease.is_some(),
            Action::Decline(_) => p.phase == Phase::Waiting && p.handed && lease.is_none(),
            Action::Release(_) => matches!(p.phase, Phase::Holding | Phase::Lost),
            Action::Withdraw(_) => {
                p.withdraw_pending || (p.phase == Phase::Waiting && s.budget.withdrawals > 0)
            }
            Action::LeaseEnds(_) => s.budget.lease_ends > 0 && lease.is_some(),
            // An upgrade's process is its upgradeable reader's, which holds: it does not die
            // alone.
            Action::Dies(_) => {
                p.phase == Phase::Waiting && s.budget.deaths > 0 && upgrade_of.is_none()
            }
            Action::SetPermits(_) | Action::ClearPermits => false,
        }
    }

    /// The step `action` from `s`: the state after it, and what its calls answered and
    /// announced. (The conformance test compares both with the real scripts.)
    pub fn step(&self, s: &State, action: Action) -> (State, Effect) {
        let mut run = Run::new(&self.config, s);
        match action {
            Action::Arrive(c) => self.arrive(&mut run, c),
            Action::Append(c) => {
                if run.s.queue.is_empty() {
                    // `RPUSHX` finds no queue: the acquire script, in the same attempt.
                    run.effect.answers.push(Answer::Appended(0));
                    self.arrive(&mut run, c);
                } else {
                    let entry = run.plain_entry(c);
                    let elsewhere = match &run.s.name {
                        Name::Semaphore { permits, .. } => *permits != entry.count,
                        name => name.holds() != self.config.clients[c].kind.holds(),
                    };
                    if elsewhere {
                        run.s.broken.plain_join_admitted = true;
                    }
                    run.s.queue.push(entry);
                    let length = u8::try_from(run.s.queue.len()).unwrap_or(u8::MAX);
                    run.effect.answers.push(Answer::Appended(length));
                    run.s.clients[c].phase = Phase::Waiting;
                }
            }
            Action::CheckIn(c) => {
                let answer = run.acquire(c, true);
                run.effect.answers.push(answer);
                Self::answered(&mut run, c, answer, true);
                if matches!(answer, Answer::Busy { .. }) && !run.s.queue.contains(&run.entry(c)) {
                    run.s.broken.out_after_checkin = true;
                }
            }
            Action::Adopt(c) => {
                let renewed = run.renew(c);
                run.effect.answers.push(renewed);
                let p = &mut run.s.clients[c];
                p.phase = Phase::Holding;
                p.handed = false;
            }
            Action::Decline(c) => run.s.clients[c].handed = false,
            Action::Release(c) => {
                let lost = run.s.clients[c].phase == Phase::Lost;
                let answer = run.release(c, false);
                if lost && answer == Answer::Released {
                    run.s.broken.lost_release_released = true;
                }
                run.s.clients[c].phase = Phase::Released;
                self.check_handoff(&mut run, c, answer);
            }
            Action::Withdraw(c) => {
                let p = &mut run.s.clients[c];
                if p.withdraw_pending {
                    p.withdraw_pending = false;
                } else {
                    p.phase = Phase::GaveUp;
                    p.handed = false;
                    run.s.budget.withdrawals -= 1;
                }
                let answer = run.release(c, true);
                self.check_handoff(&mut run, c, answer);
            }
            Action::LeaseEnds(c) => {
                run.s.budget.lease_ends -= 1;
                run.end_lease(c);
                if run.s.clients[c].phase == Phase::Holding {
                    run.s.clients[c].phase = Phase::Lost;
                }
            }
            Action::Dies(c) => {
                run.s.budget.deaths -= 1;
                run.s.clients[c].phase = Phase::Dead;
            }
            Action::SetPermits(i) => {
                run.s.budget.recounts -= 1;
                let answer = run.recount(Some(self.config.set_counts[i]));
                run.effect.answers.push(answer);
                // A free name's count is only recorded: nobody is served.
                if matches!(run.s.name, Name::Semaphore { .. }) {
                    self.check_served(&mut run, Holds::Semaphore);
                }
            }
            Action::ClearPermits => {
                run.s.budget.recounts -= 1;
                let answer = run.recount(None);
                run.effect.answers.push(answer);
            }
        }
        if run.s.stuck {
            // The step never ends: nothing is answered or announced.
            run.effect = Effect::default();
        }
        run.s.normalize();
        (run.s, run.effect)
    }

    /// A client's arrival by the acquire script, which must refuse another kind's state.
    fn arrive(&self, run: &mut Run<'_>, c: usize) {
        let kind = self.config.clients[c].kind;
        let other = match (&run.s.name, kind) {
            // (A count set at run time is every caller's; a hold of more than it is refused.)
            (
                Name::Semaphore { permits, .. },
                Kind::Permit {
                    permits: mine,
                    take,
                },
            ) => {
                let count = run.s.record.unwrap_or(mine);
                *permits != count && run.s.record.is_none() || take > count && count > 0
            }
            (Name::Free, Kind::Permit { take, .. }) => {
                run.s.record.is_some_and(|c| take > c && c > 0)
            }
            (Name::Free, _) => false,
            (name, kind) => name.holds() != kind.holds(),
        };
        let before = (run.s.name.clone(), run.s.queue.clone());
        let answer = run.acquire(c, false);
        run.effect.answers.push(answer);
        let refused = matches!(answer, Answer::OtherKind(_) | Answer::OtherCount);
        if other && !(refused && (run.s.name.clone(), run.s.queue.clone()) == before) {
            run.s.broken.arrival_admitted = true;
        }
        Self::answered(run, c, answer, false);
    }

    /// The client's side of an acquire's `answer`; `queued`: it was a check in.
    fn answered(run: &mut Run<'_>, c: usize, answer: Answer, queued: bool) {
        let p = &mut run.s.clients[c];
        match answer {
            Answer::Taken { .. } | Answer::Handed { .. } => {
                p.phase = Phase::Holding;
                p.handed = false;
            }
            Answer::OtherKind(_) | Answer::OtherCount | Answer::NotHeld => {
                // `LockError::WrongKind` (or the count's): its ticket goes, withdrawing its
                // token in the background if it was queued.
                p.phase = Phase::Refused;
                p.withdraw_pending = queued;
            }
            _ => p.phase = Phase::Waiting,
        }
    }

    /// P2: after a release by `c` that gave a lease back (`answer`), the first live waiter
    /// of its kind's letters, if any, does not fit.
    fn check_handoff(&self, run: &mut Run<'_>, c: usize, answer: Answer) {
        if answer != Answer::Released {
            return;
        }
        self.check_served(run, self.config.clients[c].kind.holds());
    }

    /// P2: after a step that served the queue of `family` (a release, a raised count), the
    /// first live waiter it serves, if any, does not fit.
    fn check_served(&self, run: &mut Run<'_>, family: Holds) {
        if run.s.stuck {
            return;
        }
        let count = match run.s.name {
            Name::Semaphore { permits, .. } => permits,
            _ => 0,
        };
        // (A permit's entry of another count is dropped, not served.)
        let served = |e: &Entry| match family {
            Holds::Lock => e.letter == 'l',
            Holds::Semaphore => e.letter == 'p' && e.count == count,
            Holds::ReadWrite => matches!(e.letter, 'r' | 'u' | 'w'),
            Holds::Free => false,
        };
        // (An upgrade whose upgradeable reader is gone never fits: a release drops it.)
        let Some(first) = run.s.queue.iter().find(|e| {
            served(e)
                && run.s.clients[e.client].subscribed()
                && !(matches!(run.s.name, Name::ReadWrite { .. })
                    && run.fits(e.client) == Fit::Drop)
        }) else {
            return;
        };
        let fits = match (&run.s.name, first.letter) {
            (Name::Free, _) => true,
            (Name::Semaphore { permits, .. }, 'p') => {
                self.config.live_permits(&run.s.name) + self.config.clients[first.client].take()
                    <= usize::from(*permits)
            }
            (Name::ReadWrite { .. }, 'r' | 'u' | 'w') => run.fits(first.client) == Fit::Yes,
            _ => false,
        };
        if fits {
            run.s.broken.missed_handoff = true;
        }
    }
}

impl Model for KindsModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.config;
        vec![State {
            name: Name::Free,
            queue: Vec::new(),
            fences: 0,
            clients: vec![Progress::default(); c.clients.len()],
            record: None,
            counts_set: false,
            budget: Budget {
                lease_ends: c.lease_ends,
                withdrawals: c.withdrawals,
                deaths: c.deaths,
                recounts: c.recounts,
            },
            stuck: false,
            broken: Broken::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for client in 0..self.config.clients.len() {
            actions.extend(
                Self::each_action(client)
                    .into_iter()
                    .filter(|&a| self.enabled(s, a)),
            );
        }
        let operator = (0..self.config.set_counts.len())
            .map(Action::SetPermits)
            .chain([Action::ClearPermits]);
        actions.extend(operator.filter(|&a| self.enabled(s, a)));
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        Some(self.step(last, action).0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("K1 one kind of holder", one_kind),
            Property::always("K2 own count", own_count),
            Property::always("K3 other kinds refused", |_, s: &State| {
                !s.broken.arrival_admitted
            }),
            Property::always("K4 every step ends", |_, s: &State| !s.stuck),
            Property::always("K5 plain joins refused", |_, s: &State| {
                !s.broken.plain_join_admitted
            }),
            Property::always("K6 lost leases told", |_, s: &State| {
                !s.broken.lost_release_released
            }),
            Property::always("K7 one upgradeable reader", one_upgrader),
            Property::always("P1 membership", |_, s: &State| !s.broken.out_after_checkin),
            Property::always("P2 hand-off", |_, s: &State| !s.broken.missed_handoff),
            Property::always("P4 safety", safe),
            Property::always("P5 no orphan", no_orphan),
            Property::sometimes("S every client served", |_, s: &State| {
                s.clients
                    .iter()
                    .all(|p| matches!(p.phase, Phase::Holding | Phase::Released))
            }),
        ]
    }
}

/// K1: every lease in the key is of the kind it holds and held by a client of that kind (a
/// permit by a permit client, the writer by a writer, a reader by a reader, the lock by a
/// lock client); at most `count` live permits; a live writer alone.
fn one_kind(m: &KindsModel, s: &State) -> bool {
    // (An upgradeable reader's lease that ended is named by nothing: a reader's, ended.)
    let own = s.name.leases().iter().all(|&(held, letter)| {
        let kind = m.config.clients[held.client].kind;
        kind.letter() == letter || (!held.live && letter == 'r' && kind == Kind::UpgradeableRead)
    });
    // (A count lowered at run time leaves holders above it: each grant is checked against
    // the count it was made under.)
    let room = match &s.name {
        Name::Semaphore { permits, .. } => {
            !s.broken.over_count
                && (s.counts_set || m.config.live_permits(&s.name) <= usize::from(*permits))
        }
        Name::ReadWrite {
            writer, readers, ..
        } => match writer.filter(|w| w.live) {
            None => true,
            // Beside a live writer, no live reader; beside an upgrade, its own alone.
            Some(w) => readers
                .iter()
                .filter(|r| r.live)
                .all(|r| m.config.clients[w.client].kind == Kind::Upgrade { of: r.client }),
        },
        Name::Free | Name::Lock { .. } => true,
    };
    own && room
}

/// K7: at most one upgradeable reader holds a live lease.
fn one_upgrader(m: &KindsModel, s: &State) -> bool {
    let leases = s.name.leases();
    let upgraders = leases.iter().filter(|(held, _)| {
        held.live && m.config.clients[held.client].kind == Kind::UpgradeableRead
    });
    upgraders.count() <= 1
}

/// K2: a permit client holds permits only of a semaphore of its own count.
fn own_count(m: &KindsModel, s: &State) -> bool {
    let Name::Semaphore { permits, holders } = &s.name else {
        return true;
    };
    // A count set at run time is every caller's.
    if s.counts_set {
        return true;
    }
    holders.iter().all(|h| {
        !matches!(m.config.clients[h.client].kind, Kind::Permit { permits: mine, .. } if mine != *permits)
    })
}

/// P4: whoever believes it holds a lease holds it, live and of its own kind; and every live
/// lease is its holder's knowingly, or an announcement's it has not acted on yet, or a token's
/// whose withdrawal is still to run, or a dead waiter's (which its lease ends).
fn safe(m: &KindsModel, s: &State) -> bool {
    let believers_hold = s.clients.iter().enumerate().all(|(c, p)| {
        p.phase != Phase::Holding
            || s.name.live_lease_of(c) == Some(m.config.clients[c].kind.letter())
    });
    let entitled = s
        .name
        .leases()
        .iter()
        .filter(|(held, _)| held.live)
        .all(|(held, _)| {
            let p = s.clients[held.client];
            matches!(p.phase, Phase::Holding | Phase::Dead)
                || (p.phase == Phase::Waiting && p.handed)
                || p.withdraw_pending
        });
    believers_hold && entitled
}

/// P5: once every client is done, every live lease is held knowingly, or by a dead waiter.
fn no_orphan(_: &KindsModel, s: &State) -> bool {
    !s.clients.iter().all(Progress::done)
        || s.name
            .leases()
            .iter()
            .filter(|(held, _)| held.live)
            .all(|(held, _)| matches!(s.clients[held.client].phase, Phase::Holding | Phase::Dead))
}
