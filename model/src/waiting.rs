//! A model of how rlock's waiters wait for a busy lock, checked with [stateright].
//!
//! # What is modelled
//!
//! One lock in Redis, the process **H** that holds it at the start, and a few waiters
//! W0, W1, … that want it. Everything lives in one global [`State`]; every [`Action`] is one
//! atomic step (a Redis script runs atomically, so one script call is one step). The checker
//! explores every interleaving of the actions up to the bounds below and checks the
//! properties of [`WaitModel::properties`] in every state it reaches.
//!
//! Redis' side ([`State`]): the lock key (`SET <lock> <token> PX <lease>`: `holder`,
//! `lease_end`) and the waiters' queue (a list in arrival order, `<base>:waiters`, see
//! `rlock-runtime/scripts/queue.lua`: `queue`, `queue_exists`). The queue has an expiry
//! that check-ins refresh, so it can vanish whole ([`Action::QueueLapse`]), and Redis deletes
//! a list whose last entry is popped; whether the key exists is kept apart from the entries
//! because the released protocol looked only at that. A waiter's client side ([`Waiter`]):
//! whether it believes it is queued, the holder's lease as its last reply told, whether it
//! heard an announcement naming it, its timer, whether its last call was cut short by its
//! deadline and the background withdrawal of that call's token is still to run, and whether
//! its process is stalled (`SIGSTOP`: it does nothing, but its client stays subscribed, so
//! releases still count it as live) or dead (unsubscribed). Each action's doc names the
//! script or function it stands for.
//!
//! # The protocols
//!
//! [`Protocol::Before`] is the waiting protocol as released in 0.1, with three defects:
//! 1. a check-in's reply reports the holder's lease only to the call that created the queue,
//!    and the client keeps the last deadline it was told; once that deadline passes while
//!    the holder renews, the waiter's pause is the floor: it hot-loops on Redis;
//! 2. a waiter that missed its handoff (stalled until the handoff lease ended) believes it
//!    is still queued, but the hand-off popped its entry and its check-ins never put it back:
//!    it starves;
//! 3. after the queue lapsed, a check-in re-adds its entry only if it is the first call to
//!    find the key gone; once anyone re-created the queue (a new arrival), the other waiters
//!    are forgotten.
//!
//! [`Protocol::CutAdopts`] fixed those, but kept a defect of the client found later:
//! 4. a call the waiter's deadline cuts short ([`Action::Cut`]) leaves its reply unread, and
//!    its token is withdrawn in the background, later, on another connection
//!    ([`Action::Withdraw`]: `LREM` of its entry; a lock held by the token is handed on). The
//!    waiter still counted itself queued, so a hand-off naming it (a release that ran while
//!    the call was in flight, heard late on a loaded machine) was adopted under the token
//!    being withdrawn; the withdrawal then handed the lock on under its feet: it believes it
//!    holds a lock that is free or another waiter's (P4).
//!
//! [`Protocol::Now`] is the fixed protocol: every check-in makes sure the caller's entry is
//! queued, the head of the queue is told the holder's lease on every check-in, and a waiter
//! whose call was cut counts itself as not queued: it adopts nothing handed to that token
//! (the withdrawal hands it on) and gives up, its budget spent.
//!
//! # What is abstracted away
//!
//! Token formats, fencing tokens, Redis Cluster and Redlock, the network (a script call and
//! its reply are one step; a lost reply is not modelled, only a call cut short by the
//! waiter's deadline, whose script ran just before the cut or not at all), the queue's
//! length cap, the refresh-every-so-often of the queue's expiry (any check-in would refresh
//! it; a lapse is an environment step), jitter, wait budgets (a waiter may give up, or have
//! its call cut, at any moment instead), and locks taken by processes that never queue. A
//! waiter that holds the lock renews it and cannot stall or die (that is H's story, told
//! once).
//!
//! # Time and bounds
//!
//! Time is discrete ([`Action::Tick`]). A step that is due now (a timer that fired, a
//! renewal, an announcement to act on, an arrival) is *urgent*: time does not pass until it
//! happened, though urgent steps of different actors interleave in every order. A lease
//! ends the moment its tick is reached ([`Action::LeaseEnds`] comes before anything else).
//! Waiters arrive at tick 0 (in every order), a late joiner once the queue lapsed.
//! The bounds: `horizon` ticks, at most one stall, one queue lapse, one death, one cancel
//! and one cut call per run, each only when its [`Config`] flag allows it. A cut call's
//! withdrawal is not urgent: it runs at any later step, or not before the horizon.
//!
//! # Properties
//!
//! - **P1 membership**: a live waiter that believes it is queued is, after each of its
//!   check-ins, in the queue or the holder.
//! - **P2 handoff**: a release that finds a subscribed waiter queued hands it the lock.
//! - **P3 check-in rate**: a waiter calls at most once per tick unless woken in between.
//! - **P4 safety**: whoever believes it holds the lock holds it (so one holder at most), and
//!   only one entitled to it holds it: never one that released or gave up, unless the lock
//!   went to a cut call's token whose withdrawal, still to run, hands it on.
//! - **P5 no orphan**: once H released, every waiter is done and every withdrawal ran, the
//!   lock is free or held by a waiter that knows it holds it.
//! - **S every waiter granted** (sometimes): every waiter can get the lock.
//!
//! # Running
//!
//! `cargo test -p rlock-model` checks that [`Protocol::Now`] keeps every property, that
//! [`Protocol::Before`] breaks P1 and P3, and that [`Protocol::CutAdopts`] breaks P4,
//! printing each counterexample.

use stateright::{Model, Property};

/// Ticks a waiter pauses between check-ins when it knows no deadline (the real one: 1 s).
pub const INTERVAL: u8 = 2;
/// The shortest pause (the real one is 2 ms: nothing on the scale of ticks).
pub const FLOOR: u8 = 0;
/// The lease its owner holds the lock for, renewed when one tick is left.
pub const LEASE: u8 = 3;
/// The lease a release grants the waiter it hands the lock to.
pub const HANDOFF_LEASE: u8 = 2;

/// Which waiting protocol the waiters and scripts follow.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Protocol {
    /// As released in 0.1: defects 1, 2 and 3 (see the crate docs).
    Before,
    /// The fixed protocol but for the client's defect 4: after an attempt its deadline cut
    /// short, the waiter still counts itself queued and adopts a hand-off to the token being
    /// withdrawn.
    CutAdopts,
    /// The fixed protocol.
    Now,
}

/// The model's parameters: the protocol and the bounds of the exploration.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The protocol checked.
    pub protocol: Protocol,
    /// How many waiters (2 or 3 keep the checks fast).
    pub waiters: usize,
    /// The last tick time may reach.
    pub horizon: u8,
    /// A waiter may stall (once per run).
    pub stalls: bool,
    /// The queue may lapse (once per run).
    pub lapses: bool,
    /// The last waiter arrives only once the queue lapsed (a new arrival re-creating it).
    pub late_joiner: bool,
    /// H or a waiter may die (once per run).
    pub deaths: bool,
    /// A waiter may give up (once per run).
    pub cancels: bool,
    /// A waiter's call may be cut short by its deadline, its token withdrawn in the
    /// background (once per run).
    pub cuts: bool,
}

impl Config {
    /// `waiters` waiters following `protocol`, up to tick 6, with no faults.
    pub fn quiet(protocol: Protocol, waiters: usize) -> Self {
        Config {
            protocol,
            waiters,
            horizon: 6,
            stalls: false,
            lapses: false,
            late_joiner: false,
            deaths: false,
            cancels: false,
            cuts: false,
        }
    }
}

/// Who can own the lock.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Owner {
    /// H, the process holding the lock at the start.
    Holder,
    /// A waiter, by index.
    Waiter(usize),
}

/// Where H is.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HolderPhase {
    /// It holds the lock and its watchdog renews it.
    Holding,
    /// It released the lock.
    Released,
    /// Its process died: its lease just runs out.
    Dead,
}

/// Where a waiter is in its wait, in order (a waiter past `Waiting` is done).
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Not arrived yet: its first acquire call is to come.
    #[default]
    Arriving,
    /// Waiting for the lock.
    Waiting,
    /// It got the lock and holds it (renewing it).
    Holding,
    /// It got the lock and released it.
    Released,
    /// It gave up waiting (its budget ran out).
    GaveUp,
}

/// One waiter's client-side state, and what the checker records about it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Waiter {
    /// Where it is in its wait ("done" is anything past `Waiting`).
    pub phase: Phase,
    /// Its process lives and its client is subscribed to its announcements.
    pub alive: bool,
    /// Its process is stopped: it does nothing, but its client stays subscribed.
    pub stalled: bool,
    /// It believes its entry stands in the queue.
    pub believes_queued: bool,
    /// The end of the holder's lease, as a reply told it.
    pub holder_until: Option<u8>,
    /// When its fallback timer fires its next check-in.
    pub next_checkin: u8,
    /// It heard an announcement naming it: a release handed it the lock.
    pub handed: bool,
    /// It was woken (an announcement, a declined handoff) since its last call.
    pub woken: bool,
    /// It called the acquire script in the current tick.
    pub called_this_tick: bool,
    /// Its last check-in left it believing it is queued, yet neither queued nor holder (P1).
    pub out_after_checkin: bool,
    /// It checked in twice in one tick without being woken in between (P3).
    pub double_checkin: bool,
    /// Its last call was cut short by its deadline, its reply never read: it calls no more,
    /// and gives up unless it adopts a hand-off it heard (only [`Protocol::CutAdopts`] lets
    /// it, keeping it waiting for that).
    pub cut: bool,
    /// The background withdrawal of its cut call's token is still to run
    /// ([`Action::Withdraw`]).
    pub withdraw_pending: bool,
}

impl Waiter {
    /// It can act: alive, not stalled, still waiting.
    fn live(&self) -> bool {
        self.alive && !self.stalled && self.phase == Phase::Waiting
    }
}

/// The whole system at one moment: Redis' keys, H, the waiters, and the fault budget left.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The current tick.
    pub now: u8,
    /// Who holds the lock key (`None`: the key does not exist, the lock is free).
    pub holder: Option<Owner>,
    /// The tick the holder's lease ends at (meaningless while the lock is free).
    pub lease_end: u8,
    /// The queue's entries, by waiter index, head first.
    pub queue: Vec<usize>,
    /// The queue's key exists in Redis.
    pub queue_exists: bool,
    /// Where H is.
    pub h: HolderPhase,
    /// The waiters.
    pub waiters: Vec<Waiter>,
    /// The queue lapsed in this run.
    pub lapsed: bool,
    /// Stalls, lapses, deaths, cancels and cuts still allowed in this run.
    pub budget: Budget,
    /// A release found a subscribed waiter queued yet left the lock free (P2).
    pub missed_handoff: bool,
}

/// The faults still allowed in a run (each 0 or 1).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Budget {
    /// Stalls left.
    pub stalls: u8,
    /// Queue lapses left.
    pub lapses: u8,
    /// Deaths left.
    pub deaths: u8,
    /// Cancels left.
    pub cancels: u8,
    /// Cut calls left.
    pub cuts: u8,
}

/// One atomic step. Waiters are named by index.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The lock's owner renews its lease when one tick is left (`scripts/lock/renew.lua`, fired by
    /// the watchdog, `src/lease/watchdog.rs`).
    Renew,
    /// H or a waiter holding the lock releases it (`scripts/lock/release.lua`, then
    /// `queue.lua`'s `hand_off`).
    Release(Owner),
    /// H's process dies: nobody renews its lease, which ends by itself.
    HolderDies,
    /// A waiter's first acquire call (`scripts/lock/acquire.lua` from `Acquisition::queued`,
    /// `src/lease/acquisition.rs`): it takes a free lock or joins the queue.
    Join(usize),
    /// A later acquire call of a waiter, fired by its fallback timer (`fallback_pause`,
    /// `src/wait/timers.rs`) or right after it was woken.
    CheckIn(usize),
    /// The waiter acts on the announcement naming it and the lock is its own: it holds it
    /// (and renews at once).
    Adopt(usize),
    /// The waiter acts on the announcement naming it, but the handoff lease ended first (or
    /// a withdrawal handed the lock on): the lock is not its own; it goes back to waiting, or
    /// gives up if its call was cut.
    Decline(usize),
    /// The waiter gives up: the withdraw script (`release_queued.lua`'s `leaving` branch,
    /// from `Backend::withdraw`) removes its entry and hands on a lock handed to it.
    Cancel(usize),
    /// The waiter's call is cut short by its deadline before its reply is read
    /// (`Attempted::Unanswered` in `Acquisition::queued`, `src/lease/acquisition.rs`). Its script ran in
    /// Redis (`ran`: it may have queued the waiter again, or granted it the lock) or not;
    /// either way the client arms the background withdrawal of the call's token
    /// (`Resend::orphan` in `Engine::attempt`, `src/lease/mod.rs`: [`Action::Withdraw`])
    /// and, its budget spent, gives up. Under [`Protocol::CutAdopts`] it still counts itself
    /// queued: if it heard a hand-off naming it, it acts on it first (adopts or declines)
    /// instead. The cut and the client's look at what it heard are one step: a hand-off
    /// heard in between is a release ordered before the cut. Its client stays subscribed
    /// (the worst case: until the withdrawal ran, a release may still hand the lock to the
    /// token).
    Cut {
        /// The waiter.
        waiter: usize,
        /// The call's script ran before the cut.
        ran: bool,
    },
    /// The cut call's token is withdrawn, in the background, on another connection, any time
    /// after the cut (`Backend::withdraw` from the dropped `Resend`: `release_queued.lua`'s
    /// `leaving` branch): its entry is removed, and a lock held by that token is handed on.
    Withdraw(usize),
    /// The waiter's process stops (its client stays subscribed).
    Stall(usize),
    /// The stalled process goes on.
    Resume(usize),
    /// The waiter's process dies: it unsubscribes, its entry stays until a release skips it.
    Die(usize),
    /// The queue's key vanishes whole (its expiry ran out: Redis blocked, or nobody
    /// refreshed it in time).
    QueueLapse,
    /// The lease of an owner that does not renew (a dead H, a handed waiter that did not
    /// adopt) ends: the lock is free.
    LeaseEnds,
    /// Time advances one tick.
    Tick,
}

impl Action {
    /// Urgent steps are due now: time does not pass while one is enabled.
    fn urgent(self) -> bool {
        matches!(
            self,
            Action::Renew
                | Action::Join(_)
                | Action::CheckIn(_)
                | Action::Adopt(_)
                | Action::Decline(_)
        )
    }
}

/// The pause a waiter's timer waits after a reply: the holder's remaining lease if it knows
/// it (no less than the floor), at most the check interval.
pub fn pause(holder_until: Option<u8>, now: u8) -> u8 {
    match holder_until {
        Some(until) => until.saturating_sub(now).clamp(FLOOR, INTERVAL),
        None => INTERVAL,
    }
}

/// What the acquire script answers.
enum Reply {
    /// The lock is the caller's.
    Granted,
    /// The lock is busy; the holder's lease end, if told.
    Busy { reported: Option<u8> },
}

/// The model checked: the waiting protocol under a [`Config`].
#[derive(Clone, Debug)]
pub struct WaitModel {
    /// Its parameters.
    pub config: Config,
}

impl WaitModel {
    /// The model of `config`.
    pub fn new(config: Config) -> Self {
        WaitModel { config }
    }

    /// Whether `action` can happen in `s`.
    fn enabled(&self, s: &State, action: Action) -> bool {
        let owner_renews = match s.holder {
            Some(Owner::Holder) => s.h == HolderPhase::Holding,
            Some(Owner::Waiter(i)) => s.waiters[i].phase == Phase::Holding,
            None => false,
        };
        match action {
            Action::Renew => owner_renews && s.lease_end <= s.now + 1,
            Action::Release(Owner::Holder) => s.h == HolderPhase::Holding,
            Action::Release(Owner::Waiter(i)) => s.waiters[i].phase == Phase::Holding,
            Action::HolderDies => s.h == HolderPhase::Holding && s.budget.deaths > 0,
            Action::Join(i) => {
                // The late joiner is the last waiter.
                let late = self.config.late_joiner && i + 1 == self.config.waiters;
                s.waiters[i].phase == Phase::Arriving && (!late || s.lapsed)
            }
            Action::CheckIn(i) => {
                let w = &s.waiters[i];
                w.live() && !w.handed && !w.cut && s.now >= w.next_checkin
            }
            Action::Adopt(i) => {
                let w = &s.waiters[i];
                w.live() && w.handed && s.holder == Some(Owner::Waiter(i))
            }
            Action::Decline(i) => {
                let w = &s.waiters[i];
                w.live() && w.handed && s.holder != Some(Owner::Waiter(i))
            }
            Action::Cancel(i) => {
                let w = &s.waiters[i];
                w.live() && !w.cut && s.budget.cancels > 0
            }
            Action::Cut { waiter: i, .. } => {
                let w = &s.waiters[i];
                w.live() && !w.cut && s.budget.cuts > 0
            }
            Action::Withdraw(i) => s.waiters[i].withdraw_pending,
            Action::Stall(i) => s.waiters[i].live() && s.budget.stalls > 0,
            Action::Resume(i) => s.waiters[i].stalled,
            Action::Die(i) => {
                let w = &s.waiters[i];
                w.alive && w.phase == Phase::Waiting && s.budget.deaths > 0
            }
            Action::QueueLapse => s.queue_exists && s.budget.lapses > 0,
            Action::LeaseEnds => s.holder.is_some() && s.now >= s.lease_end,
            Action::Tick => s.now < self.config.horizon,
        }
    }

    /// The acquire script (`scripts/lock/acquire.lua`), called by waiter `i` (`Join` and
    /// `CheckIn`), and the client's handling of its reply.
    fn acquire(&self, s: &mut State, i: usize) {
        let now = s.now;
        let w = &mut s.waiters[i];
        // P3 counts the calls of one tick; a wake-up in between excuses a second one.
        if w.called_this_tick && !w.woken {
            w.double_checkin = true;
        }
        w.called_this_tick = true;
        w.woken = false;
        w.out_after_checkin = false;
        w.phase = Phase::Waiting;
        let queued = w.believes_queued;
        let Reply::Busy { reported } = self.script(s, i, queued) else {
            let w = &mut s.waiters[i];
            w.phase = Phase::Holding;
            w.believes_queued = false;
            w.handed = false;
            return;
        };
        let in_queue = s.queue.contains(&i);
        let w = &mut s.waiters[i];
        w.believes_queued = true;
        w.holder_until = match self.config.protocol {
            // Before kept the old deadline when the reply did not tell (defect 1).
            Protocol::Before => reported.or(w.holder_until),
            Protocol::CutAdopts | Protocol::Now => reported,
        };
        w.next_checkin = now + pause(w.holder_until, now);
        w.out_after_checkin = queued && !in_queue;
    }

    /// Redis' side of the acquire script (`scripts/lock/acquire.lua`), called by waiter `i`, who
    /// believes it is `queued` or not: what the script does and what its reply says.
    fn script(&self, s: &mut State, i: usize, queued: bool) -> Reply {
        // Handed to me (the announcement may have been lost), or free: SET NX takes it and
        // LREM removes my entry.
        if s.holder == Some(Owner::Waiter(i)) || s.holder.is_none() {
            s.holder = Some(Owner::Waiter(i));
            s.lease_end = s.now + LEASE;
            s.queue.retain(|&e| e != i);
            s.queue_exists &= !s.queue.is_empty();
            return Reply::Granted;
        }
        // Busy: a newcomer joins with RPUSH. A queued caller is put back only if it is
        // missing (Now: LPOS), or (Before) if the queue key is gone (PEXPIRE answered 0).
        let push = match self.config.protocol {
            _ if !queued => true,
            Protocol::CutAdopts | Protocol::Now => !s.queue.contains(&i),
            Protocol::Before => !s.queue_exists,
        };
        if push {
            s.queue.push(i);
            s.queue_exists = true;
        }
        // The holder's remaining lease in the reply.
        let reported = match self.config.protocol {
            Protocol::Before => (push && s.queue.len() == 1).then_some(s.lease_end),
            Protocol::CutAdopts | Protocol::Now => {
                (s.queue.first() == Some(&i)).then_some(s.lease_end)
            }
        };
        Reply::Busy { reported }
    }

    /// The withdraw script (`release_queued.lua`'s `leaving` branch) for waiter `i`'s token:
    /// `LREM` of its entry, and a lock held by that token is handed on.
    fn withdraw(s: &mut State, i: usize) {
        s.queue.retain(|&e| e != i);
        s.queue_exists &= !s.queue.is_empty();
        if s.holder == Some(Owner::Waiter(i)) {
            Self::hand_off(s);
        }
    }

    /// `queue.lua`'s `hand_off`, run by a release with the lock its caller's: pops entries
    /// from the head until one whose client is subscribed, grants that waiter the lock under
    /// the handoff lease and announces it; entries of unsubscribed clients are dropped. With
    /// no such entry the lock is deleted.
    fn hand_off(s: &mut State) {
        let live_queued = s.queue.iter().any(|&e| s.waiters[e].alive);
        s.holder = None;
        while !s.queue.is_empty() {
            let head = s.queue.remove(0);
            let w = &mut s.waiters[head];
            if w.alive {
                w.handed = true;
                w.woken = true;
                s.holder = Some(Owner::Waiter(head));
                s.lease_end = s.now + HANDOFF_LEASE;
                break;
            }
        }
        // Redis deletes an emptied list.
        s.queue_exists &= !s.queue.is_empty();
        s.missed_handoff |= live_queued && s.holder.is_none();
    }
}

impl Model for WaitModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.config;
        vec![State {
            now: 0,
            holder: Some(Owner::Holder),
            lease_end: LEASE,
            queue: Vec::new(),
            queue_exists: false,
            h: HolderPhase::Holding,
            waiters: vec![
                Waiter {
                    alive: true,
                    ..Waiter::default()
                };
                c.waiters
            ],
            lapsed: false,
            budget: Budget {
                stalls: c.stalls.into(),
                lapses: c.lapses.into(),
                deaths: c.deaths.into(),
                cancels: c.cancels.into(),
                cuts: c.cuts.into(),
            },
            missed_handoff: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // A lease ends at its tick, before anyone can see the lock as still held.
        if self.enabled(s, Action::LeaseEnds) {
            actions.push(Action::LeaseEnds);
            return;
        }
        let mut candidates = vec![
            Action::Renew,
            Action::Release(Owner::Holder),
            Action::HolderDies,
            Action::QueueLapse,
        ];
        for i in 0..self.config.waiters {
            candidates.extend([
                Action::Release(Owner::Waiter(i)),
                Action::Join(i),
                Action::CheckIn(i),
                Action::Adopt(i),
                Action::Decline(i),
                Action::Cancel(i),
                Action::Cut {
                    waiter: i,
                    ran: false,
                },
                Action::Cut {
                    waiter: i,
                    ran: true,
                },
                Action::Withdraw(i),
                Action::Stall(i),
                Action::Resume(i),
                Action::Die(i),
            ]);
        }
        actions.extend(candidates.into_iter().filter(|&a| self.enabled(s, a)));
        if !actions.iter().any(|a| a.urgent()) && self.enabled(s, Action::Tick) {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Renew => s.lease_end = s.now + LEASE,
            Action::Release(owner) => {
                match owner {
                    Owner::Holder => s.h = HolderPhase::Released,
                    Owner::Waiter(i) => s.waiters[i].phase = Phase::Released,
                }
                // release.lua: only the lock's owner releases it.
                if s.holder == Some(owner) {
                    Self::hand_off(&mut s);
                }
            }
            Action::HolderDies => {
                s.h = HolderPhase::Dead;
                s.budget.deaths -= 1;
            }
            Action::Join(i) | Action::CheckIn(i) => self.acquire(&mut s, i),
            Action::Adopt(i) => {
                s.lease_end = s.now + LEASE;
                let w = &mut s.waiters[i];
                w.phase = Phase::Holding;
                w.handed = false;
                w.believes_queued = false;
            }
            Action::Decline(i) => {
                // It was woken: it checks in at once, or gives up if its call was cut (its
                // budget is spent).
                let w = &mut s.waiters[i];
                w.handed = false;
                w.woken = true;
                w.next_checkin = s.now;
                if w.cut {
                    w.phase = Phase::GaveUp;
                }
            }
            Action::Cancel(i) => {
                s.budget.cancels -= 1;
                let w = &mut s.waiters[i];
                w.phase = Phase::GaveUp;
                w.believes_queued = false;
                w.handed = false;
                // A lock handed to it is handed on, not left to its lease.
                Self::withdraw(&mut s, i);
            }
            Action::Cut { waiter: i, ran } => {
                s.budget.cuts -= 1;
                if ran {
                    let queued = s.waiters[i].believes_queued;
                    self.script(&mut s, i, queued);
                }
                let w = &mut s.waiters[i];
                w.cut = true;
                w.withdraw_pending = true;
                // Now: it counts itself as not queued, so it adopts nothing (the withdrawal
                // hands on what was handed to it) and gives up. CutAdopts: still counting
                // itself queued, it first acts on a hand-off naming it (defect 4).
                if !(self.config.protocol == Protocol::CutAdopts && w.handed) {
                    w.phase = Phase::GaveUp;
                }
            }
            Action::Withdraw(i) => {
                s.waiters[i].withdraw_pending = false;
                Self::withdraw(&mut s, i);
            }
            Action::Stall(i) => {
                s.budget.stalls -= 1;
                s.waiters[i].stalled = true;
            }
            Action::Resume(i) => s.waiters[i].stalled = false,
            Action::Die(i) => {
                s.budget.deaths -= 1;
                s.waiters[i].alive = false;
                s.waiters[i].stalled = false;
            }
            Action::QueueLapse => {
                s.budget.lapses -= 1;
                s.queue.clear();
                s.queue_exists = false;
                s.lapsed = true;
            }
            Action::LeaseEnds => s.holder = None,
            Action::Tick => {
                s.now += 1;
                for w in &mut s.waiters {
                    w.called_this_tick = false;
                }
            }
        }
        normalize(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("P1 membership", |_, s: &State| {
                !s.waiters.iter().any(|w| w.live() && w.out_after_checkin)
            }),
            Property::always("P2 handoff", |_, s: &State| !s.missed_handoff),
            Property::always("P3 check-in rate", |_, s: &State| {
                !s.waiters.iter().any(|w| w.double_checkin)
            }),
            Property::always("P4 safety", safe),
            Property::always("P5 no orphan", |_, s: &State| {
                let all_done = s.h == HolderPhase::Released
                    && s.waiters
                        .iter()
                        .all(|w| w.phase > Phase::Waiting && !w.withdraw_pending);
                !all_done
                    || s.holder.is_none_or(|owner| {
                        matches!(owner, Owner::Waiter(i) if s.waiters[i].phase == Phase::Holding)
                    })
            }),
            Property::sometimes("S every waiter granted", |_, s: &State| {
                s.waiters
                    .iter()
                    .all(|w| matches!(w.phase, Phase::Holding | Phase::Released))
            }),
        ]
    }
}

/// Forgets what no longer matters, so that states that behave alike are one state: the
/// lease end of a free lock, deadlines already past (any of them gives the floor pause, and
/// any due timer is due), and the client state of a waiter that is done or dead.
fn normalize(s: &mut State) {
    if s.holder.is_none() {
        s.lease_end = 0;
    }
    let now = s.now;
    for w in &mut s.waiters {
        if w.phase == Phase::Waiting && w.alive {
            w.next_checkin = w.next_checkin.max(now);
            w.holder_until = w.holder_until.map(|t| t.max(now));
        } else if w.phase != Phase::Arriving {
            w.believes_queued = false;
            w.holder_until = None;
            w.next_checkin = 0;
            w.woken = false;
            w.called_this_tick = false;
            w.stalled = false;
            w.cut = false;
            // A hand-off heard once done is ignored.
            if w.phase > Phase::Waiting {
                w.handed = false;
            }
        }
    }
}

/// P4: whoever believes it holds the lock holds it (so no two do); a process that released
/// or gave up never holds it; a waiter holds it only knowingly or through an announcement
/// naming it.
fn safe(_: &WaitModel, s: &State) -> bool {
    let believers_hold = (s.h != HolderPhase::Holding || s.holder == Some(Owner::Holder))
        && (0..s.waiters.len())
            .filter(|&i| s.waiters[i].phase == Phase::Holding)
            .all(|i| s.holder == Some(Owner::Waiter(i)));
    let holder_entitled = match s.holder {
        None => true,
        Some(Owner::Holder) => s.h != HolderPhase::Released,
        Some(Owner::Waiter(i)) => {
            let w = &s.waiters[i];
            w.phase == Phase::Holding
                || (w.phase == Phase::Waiting && w.handed)
                || w.withdraw_pending
        }
    };
    believers_hold && holder_entitled
}
