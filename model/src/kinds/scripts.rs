//! The lease scripts as the model runs them. Each function is one script call, named after its
//! file under `rlock-runtime/scripts/`: it changes the state as the script changes Redis, and
//! answers as it answers, line for line where the lines decide something. A release is the
//! store's: its first call (bare for a [bare](super::Client::bare) client) and, when that
//! answers `AGAIN_IN_FULL`, its second.
//!
//! [`Scripts::Before`] runs the hand-off and the semaphore's loops as they were before every
//! script read its key's kind (commit 42c36c4): `hand_off` told kinds apart by the read-write
//! role alone, so a lock's and a semaphore's releases granted each other's waiters, and the
//! semaphore's loops went on while `hand_off` answered anything but false, `'fence'` too.

use super::state::{Answer, Effect, Entry, Held, Holds, Name, State};
use super::{Config, Kind, Scripts};

/// The most entries a script looks at in one call (`MOST_ENTRIES` in `protocol.lua`): every
/// loop of the scripts counts to it.
pub const MOST_ENTRIES: u32 = 10_100;

/// How many turns an old script's `while` loop may take before the model calls it endless.
/// Every turn that leads anywhere grants a permit or drops an entry, so no queue of the model
/// needs more than a few dozen; a loop still going after this many turns goes on for ever.
const ENDLESS: u32 = 1_000;

/// What `rw/common.lua`'s `fits` answers for a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fit {
    /// It can be granted now.
    Yes,
    /// Not now: it keeps its place.
    No,
    /// Never: an upgrade whose upgradeable reader no longer holds (`DROP`); its entry goes.
    Drop,
}

/// What `hand_off` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HandOff {
    /// It granted the first live waiter it serves, and named it.
    Handed,
    /// Nobody live that it serves, or the first does not fit now.
    Nobody,
    /// The first live waiter wants a fence, and the call did not declare the fence record:
    /// its entry is back at the head.
    Fence,
}

/// One step's run of scripts over a copy of the state.
pub(super) struct Run<'a> {
    config: &'a Config,
    /// The state, as the scripts leave it.
    pub(super) s: State,
    /// What the calls answered and announced.
    pub(super) effect: Effect,
}

impl<'a> Run<'a> {
    pub(super) fn new(config: &'a Config, s: &State) -> Self {
        Run {
            config,
            s: s.clone(),
            effect: Effect::default(),
        }
    }

    fn kind(&self, client: usize) -> Kind {
        self.config.clients[client].kind
    }

    /// The entry `client`'s acquire stands in the queue.
    pub(super) fn entry(&self, client: usize) -> Entry {
        Entry {
            client,
            letter: self.kind(client).letter(),
            fenced: self.config.clients[client].fenced,
            count: match self.kind(client) {
                Kind::Permit { permits, .. } => self.count_of(permits),
                _ => 0,
            },
        }
    }

    /// The entry `client`'s plain join (`RPUSHX`) stands in the queue: a permit's under the
    /// count its caller names, which is all its client knows.
    pub(super) fn plain_entry(&self, client: usize) -> Entry {
        Entry {
            count: match self.kind(client) {
                Kind::Permit { permits, .. } => permits,
                _ => 0,
            },
            ..self.entry(client)
        }
    }

    /// The count a permit client naming `permits` acquires under: the count set at run time,
    /// if one is (`semaphore/acquire.lua` reads its record).
    fn count_of(&self, permits: u8) -> u8 {
        self.s.record.unwrap_or(permits)
    }

    /// `LREM queue 1 entry`: its first copy goes.
    fn remove_entry(&mut self, entry: Entry) {
        if let Some(at) = self.s.queue.iter().position(|&e| e == entry) {
            self.s.queue.remove(at);
        }
    }

    /// `queue.lua`'s `stand`: a newcomer joins at the end (`first`: at the head); a queued
    /// caller keeps its place, and comes back when its entry is gone. Its place (0: the
    /// head).
    fn stand(&mut self, client: usize, queued: bool, first: bool) -> usize {
        let mine = self.entry(client);
        let place = if queued {
            self.s.queue.iter().position(|&e| e == mine)
        } else {
            None
        };
        place.unwrap_or_else(|| {
            if first {
                self.s.queue.insert(0, mine);
                0
            } else {
                self.s.queue.push(mine);
                self.s.queue.len() - 1
            }
        })
    }

    /// `issue_fence`: a new fence, above every earlier one.
    fn issue_fence(&mut self) -> u8 {
        self.s.fences += 1;
        self.s.fences
    }

    /// Whether `hand_off`, run by a script of `family` (a semaphore's of `permits`), grants
    /// `entry`.
    fn serves(&self, family: Holds, entry: Entry, permits: u8) -> bool {
        let letter = entry.letter;
        match (self.config.scripts, family) {
            // `SERVED`: each kind's own letters; a semaphore's, its own count's permits (the
            // entry carries the count: `p3`).
            (Scripts::Now, Holds::Lock) => letter == 'l',
            (Scripts::Now, Holds::Semaphore) => letter == 'p' && entry.count == permits,
            // Before: only a read-write lock's entries had a role, and only its releases
            // asked `fits`; a lock's and a semaphore's releases took every entry without one.
            (Scripts::Before, Holds::Lock | Holds::Semaphore) => matches!(letter, 'l' | 'p'),
            (_, Holds::ReadWrite) => matches!(letter, 'r' | 'u' | 'w'),
            (_, Holds::Free) => false,
        }
    }

    /// `rw/common.lua`'s `upgrader`: the upgradeable reader whose lease is live.
    fn upgrader(&self) -> Option<usize> {
        match &self.s.name {
            Name::ReadWrite {
                readers, upgrader, ..
            } => upgrader.filter(|&u| readers.iter().any(|r| r.client == u && r.live)),
            _ => None,
        }
    }

    /// `rw/common.lua`'s `fits` for `client`'s entry: a writer when nobody holds; an upgrade
    /// when its upgradeable reader is the only holder (never once that reader is gone); the
    /// upgradeable reader when no writer and no other upgradeable reader holds; a reader when
    /// no writer does. (Called after a purge: every lease in the set is live.)
    pub(super) fn fits(&self, client: usize) -> Fit {
        let yes = |fits: bool| if fits { Fit::Yes } else { Fit::No };
        let Name::ReadWrite {
            writer, readers, ..
        } = &self.s.name
        else {
            return Fit::Yes;
        };
        match self.kind(client) {
            Kind::Upgrade { of } if self.upgrader() != Some(of) => Fit::Drop,
            Kind::Upgrade { of } => yes(writer.is_none() && readers.iter().all(|r| r.client == of)),
            Kind::Write => yes(writer.is_none() && readers.is_empty()),
            Kind::UpgradeableRead => yes(writer.is_none() && self.upgrader().is_none()),
            Kind::Read | Kind::Lock | Kind::Permit { .. } => yes(writer.is_none()),
        }
    }

    /// Grants `client` a lease as a script of `family` grants (a lock's `SET … PX`, a
    /// semaphore's `take`, creating it with `permits` when the key is free, a read-write
    /// lock's `take` as `letter`), whatever kind the client asked for.
    fn grant(&mut self, family: Holds, client: usize, letter: char, permits: u8) {
        let live = Held { client, live: true };
        match (family, &mut self.s.name) {
            (Holds::Lock, name) => *name = Name::Lock { holder: client },
            (Holds::Semaphore, Name::Semaphore { holders, .. }) => {
                holders.retain(|h| h.client != client);
                holders.push(live);
                if self.config.live_permits(&self.s.name) > usize::from(permits) {
                    self.s.broken.over_count = true;
                }
            }
            (Holds::Semaphore, name) => {
                *name = Name::Semaphore {
                    permits,
                    holders: vec![live],
                }
            }
            (
                Holds::ReadWrite,
                Name::ReadWrite {
                    writer,
                    readers,
                    upgrader,
                },
            ) => {
                if letter == 'w' {
                    *writer = Some(live);
                } else {
                    readers.retain(|h| h.client != client);
                    readers.push(live);
                    if letter == 'u' {
                        *upgrader = Some(client);
                    }
                }
            }
            (Holds::ReadWrite, name) => {
                *name = Name::ReadWrite {
                    writer: (letter == 'w').then_some(live),
                    readers: if letter == 'w' {
                        Vec::new()
                    } else {
                        vec![live]
                    },
                    upgrader: (letter == 'u').then_some(client),
                }
            }
            (Holds::Free, _) => {}
        }
    }

    /// `semaphore/*.lua`'s `fits`: `client`'s permits fit beside the live ones of a
    /// semaphore of `permits`.
    fn permits_fit(&self, client: usize, permits: u8) -> bool {
        self.config.live_permits(&self.s.name) + self.config.clients[client].take()
            <= usize::from(permits)
    }

    /// `semaphore/acquire.lua`'s `kept`: the permits kept for the queue's head, another
    /// client's hold of several permits (whatever it asked for: the script reads the
    /// entry's token alone).
    fn kept(&self, client: usize, permits: u8) -> usize {
        match self.s.queue.first() {
            Some(head) if head.client != client => match self.config.clients[head.client].take() {
                take if take == 1 || take > usize::from(permits) => 0,
                take => take,
            },
            _ => 0,
        }
    }

    /// `queue.lua`'s `hand_off`, run by a script of `family` (`declared`: the call declared
    /// the fence record; `head`: the queue's first entry, popped by the caller; `permits`:
    /// the count a semaphore's `take` creates a free key with). Pops entries from the head,
    /// drops those of dead waiters and of kinds it does not serve, and grants the first
    /// other one, naming it. (Its own loop ends in both scripts: every turn pops an entry or
    /// returns; the old one's `while true` with it. The loops around it are `repeat`'s.)
    fn hand_off(
        &mut self,
        family: Holds,
        declared: bool,
        mut head: Option<Entry>,
        permits: u8,
    ) -> HandOff {
        for _ in 0..MOST_ENTRIES {
            let entry = match head.take() {
                Some(entry) => entry,
                None if self.s.queue.is_empty() => return HandOff::Nobody,
                None => self.s.queue.remove(0),
            };
            if !self.serves(family, entry, permits) || !self.s.clients[entry.client].subscribed() {
                continue;
            }
            if family == Holds::ReadWrite {
                match self.fits(entry.client) {
                    Fit::Yes => {}
                    Fit::Drop => continue,
                    Fit::No => {
                        self.s.queue.insert(0, entry);
                        return HandOff::Nobody;
                    }
                }
            }
            // A semaphore's `fits`: the waiter's permits beside those in use (only now's
            // scripts ask it; a hold of several permits is theirs alone). A hold of more than
            // the count (lowered at run time) never fits: its entry goes.
            if family == Holds::Semaphore && self.config.scripts == Scripts::Now {
                if self.config.clients[entry.client].take() > usize::from(permits) && permits > 0 {
                    continue;
                }
                if !self.permits_fit(entry.client, permits) {
                    self.s.queue.insert(0, entry);
                    return HandOff::Nobody;
                }
            }
            let mut fence = 0;
            if entry.fenced {
                if !declared {
                    self.s.queue.insert(0, entry);
                    return HandOff::Fence;
                }
                fence = self.issue_fence();
            }
            self.grant(family, entry.client, entry.letter, permits);
            self.s.clients[entry.client].handed = true;
            self.effect.announced.push((entry.client, fence));
            return HandOff::Handed;
        }
        HandOff::Nobody
    }

    /// Runs `turn` as a loop of the scripts runs it: [`Scripts::Now`] counts to
    /// [`MOST_ENTRIES`] and goes on only while `turn` handed a lease; [`Scripts::Before`]'s
    /// `while` went on while `hand_off` answered anything but false. `turn` answers `None`
    /// when the loop ends on its own condition, before calling `hand_off`. A loop still
    /// going after [`ENDLESS`] turns makes the step one that cannot finish.
    fn repeat(&mut self, mut turn: impl FnMut(&mut Self) -> Option<HandOff>) {
        let bound = match self.config.scripts {
            Scripts::Now => MOST_ENTRIES,
            Scripts::Before => ENDLESS,
        };
        for _ in 0..bound {
            match (self.config.scripts, turn(self)) {
                (Scripts::Now, Some(HandOff::Handed)) => {}
                (Scripts::Before, Some(HandOff::Handed | HandOff::Fence)) => {}
                _ => return,
            }
        }
        if self.config.scripts == Scripts::Before {
            self.s.stuck = true;
        }
    }

    /// The acquire script of `client`'s kind: its arrival, or (`queued`) a check in.
    pub(super) fn acquire(&mut self, client: usize, queued: bool) -> Answer {
        match self.kind(client) {
            Kind::Lock => self.lock_acquire(client, queued),
            Kind::Permit { permits, .. } => {
                self.semaphore_acquire(client, queued, self.count_of(permits))
            }
            Kind::Read | Kind::UpgradeableRead | Kind::Write | Kind::Upgrade { .. } => {
                self.read_write_acquire(client, queued)
            }
        }
    }

    /// `lock/acquire.lua` in the queue's mode.
    fn lock_acquire(&mut self, client: usize, queued: bool) -> Answer {
        let fair = self.config.clients[client].fair;
        let fenced = self.config.clients[client].fenced;
        // The holder, when read (`Some(None)`: free): a queued or fair caller reads it, and a
        // key of another type refuses it.
        let mut holder = None;
        if queued || fair {
            holder = match self.s.name {
                Name::Free => Some(None),
                Name::Lock { holder } => Some(Some(holder)),
                _ => return Answer::OtherKind(self.s.name.holds()),
            };
        }
        if holder == Some(None)
            && fair
            && self.hand_off(Holds::Lock, true, None, 0) == HandOff::Handed
            && let Name::Lock { holder: granted } = self.s.name
        {
            holder = Some(Some(granted));
        }
        if holder == Some(Some(client)) {
            let fence = if fenced { self.s.fences } else { 0 };
            return Answer::Handed { fence };
        }
        if !matches!(holder, Some(Some(_))) {
            if self.s.name == Name::Free {
                self.s.name = Name::Lock { holder: client };
                if queued {
                    self.remove_entry(self.entry(client));
                }
                let fence = if fenced { self.issue_fence() } else { 0 };
                return Answer::Taken { fence };
            }
            if self.s.name.holds() != Holds::Lock {
                return Answer::OtherKind(self.s.name.holds());
            }
        }
        // Busy: the head is told the holder's lease.
        let place = self.stand(client, queued, false);
        Answer::Busy { told: place == 0 }
    }

    /// `semaphore/acquire.lua` in the queue's mode, for a semaphore of `permits` (the count
    /// set at run time, if one is, else its caller's).
    fn semaphore_acquire(&mut self, client: usize, queued: bool, permits: u8) -> Answer {
        let set = self.s.record.is_some();
        match &mut self.s.name {
            Name::Free => {}
            // The set follows a count set at run time; another count is refused.
            Name::Semaphore {
                permits: stored, ..
            } if *stored != permits => {
                if !set {
                    return Answer::OtherCount;
                }
                *stored = permits;
            }
            Name::Semaphore { .. } => {}
            other => return Answer::OtherKind(other.holds()),
        }
        // More permits than a count set at run time: never granted while it lasts (a count
        // of 0 pauses the semaphore instead).
        if self.config.clients[client].take() > usize::from(permits) && permits > 0 {
            return Answer::OtherCount;
        }
        let mine = self.s.name.live_lease_of(client).is_some();
        self.s.name.purge();
        if mine {
            return Answer::Handed { fence: 0 };
        }
        let full = |run: &Self| run.config.live_permits(&run.s.name) >= usize::from(permits);
        let fair = self.config.clients[client].fair;
        let now = self.config.scripts == Scripts::Now;
        let mut keep = if now && !full(self) {
            self.kept(client, permits)
        } else {
            0
        };
        if (fair || keep > 0) && !full(self) {
            // The queue is served first (maybe this caller): for a fair caller, and while a
            // hold of several permits heads it.
            let mut handed = false;
            self.repeat(|run| {
                if full(run) {
                    return None;
                }
                let turn = run.hand_off(Holds::Semaphore, false, None, permits);
                if run.s.name.live_lease_of(client).is_some() {
                    handed = true;
                    return None;
                }
                Some(turn)
            });
            if handed {
                return Answer::Handed { fence: 0 };
            }
            if self.s.stuck {
                // Never answered (see `KindsModel::step`).
                return Answer::Busy { told: false };
            }
            if now {
                keep = self.kept(client, permits);
            }
        }
        let want = self.config.clients[client].take();
        let free = match self.config.scripts {
            Scripts::Now => {
                self.config.live_permits(&self.s.name) + want + keep <= usize::from(permits)
            }
            Scripts::Before => !full(self),
        };
        if free {
            self.grant(Holds::Semaphore, client, 'p', permits);
            if queued {
                self.remove_entry(self.entry(client));
            }
            return Answer::Taken { fence: 0 };
        }
        // Busy: the head is told the earliest permit's lease, when one is held.
        let place = self.stand(client, queued, false);
        Answer::Busy {
            told: place == 0 && self.config.live_permits(&self.s.name) > 0,
        }
    }

    /// `semaphore/resize.lua`: the count set at run time to `count`, or (`None`) cleared.
    /// The set and its waiters' entries of the old count move to the new one, and the queue
    /// is served while permits are free.
    pub(super) fn recount(&mut self, count: Option<u8>) -> Answer {
        let stored = match &self.s.name {
            Name::Free => None,
            Name::Semaphore { permits, .. } => Some(*permits),
            other => return Answer::OtherKind(other.holds()),
        };
        let Some(permits) = count else {
            if let (None, Some(set)) = (stored, self.s.record) {
                // Nobody holds: the entries under the count cleared go.
                self.s
                    .queue
                    .retain(|e| !(e.letter == 'p' && e.count == set));
            }
            self.s.record = None;
            return Answer::Recounted(stored.unwrap_or(0));
        };
        self.s.record = Some(permits);
        self.s.counts_set = true;
        let Some(old) = stored else {
            return Answer::Recounted(permits);
        };
        self.s.name.purge();
        if let Name::Semaphore { permits: count, .. } = &mut self.s.name {
            *count = permits;
        }
        for entry in &mut self.s.queue {
            if entry.letter == 'p' && entry.count == old {
                entry.count = permits;
            }
        }
        self.repeat(|run| {
            (run.config.live_permits(&run.s.name) < usize::from(permits))
                .then(|| run.hand_off(Holds::Semaphore, false, None, permits))
        });
        self.s.name.expire();
        Answer::Recounted(permits)
    }

    /// `rw/acquire.lua` in the queue's mode, as a reader, the upgradeable reader, the writer
    /// or an upgrade.
    fn read_write_acquire(&mut self, client: usize, queued: bool) -> Answer {
        if !matches!(self.s.name.holds(), Holds::Free | Holds::ReadWrite) {
            return Answer::OtherKind(self.s.name.holds());
        }
        self.s.name.purge();
        let letter = self.kind(client).letter();
        let writing = letter == 'w';
        let fenced = writing && self.config.clients[client].fenced;
        // Handed to this caller by a release before this call came.
        let handed = |run: &Self| queued && run.s.name.live_lease_of(client).is_some();
        if handed(self) {
            let fence = if fenced { self.s.fences } else { 0 };
            return Answer::Handed { fence };
        }
        let upgrading = match self.kind(client) {
            Kind::Upgrade { of } if self.upgrader() != Some(of) => return Answer::NotHeld,
            Kind::Upgrade { .. } => true,
            _ => false,
        };
        if upgrading && self.fits(client) == Fit::Yes {
            // An upgrade passes every waiter: none could be granted before it.
            self.remove_entry(self.entry(client));
            self.grant(Holds::ReadWrite, client, letter, 0);
            let fence = if fenced { self.issue_fence() } else { 0 };
            return Answer::Taken { fence };
        }
        if !self.s.queue.is_empty() {
            // Whoever at the head fits is granted first, as a release would have.
            self.repeat(|run| Some(run.hand_off(Holds::ReadWrite, true, None, 0)));
            if handed(self) {
                let fence = if fenced { self.s.fences } else { 0 };
                return Answer::Handed { fence };
            }
        }
        if self.s.queue.is_empty() && self.fits(client) == Fit::Yes {
            self.grant(Holds::ReadWrite, client, letter, 0);
            let fence = if fenced { self.issue_fence() } else { 0 };
            return Answer::Taken { fence };
        }
        // Busy: the head is told how long until its role could be granted, when a lease
        // tells (a writer waits for every holder, a reader for the writer).
        let place = self.stand(client, queued, upgrading);
        let known = match &self.s.name {
            Name::ReadWrite {
                writer, readers, ..
            } => writer.is_some() || (writing && !readers.is_empty()),
            _ => false,
        };
        Answer::Busy {
            told: place == 0 && known,
        }
    }

    /// The store's release of `client`'s lease, or (`leaving`) its withdrawal from the queue:
    /// the release script's call, and its second with the fence record declared when the
    /// first asks for it. Its answers go to the effect; the last is returned.
    pub(super) fn release(&mut self, client: usize, leaving: bool) -> Answer {
        let kind = self.kind(client);
        // The store declares the fence record up front for a withdrawal, a fenced holder's
        // release and any read-write lock's; a lock's other releases declare it when asked.
        let declared = leaving
            || self.config.clients[client].fenced
            || matches!(
                kind,
                Kind::Read | Kind::UpgradeableRead | Kind::Write | Kind::Upgrade { .. }
            );
        let mut answer = if self.config.clients[client].bare && !leaving {
            self.bare_release(client)
        } else {
            self.release_call(client, leaving, declared)
        };
        self.effect.answers.push(answer);
        if answer == Answer::AgainInFull && !self.s.stuck {
            answer = self.release_call(client, false, true);
            self.effect.answers.push(answer);
        }
        answer
    }

    fn release_call(&mut self, client: usize, leaving: bool, declared: bool) -> Answer {
        match self.kind(client) {
            Kind::Lock => self.lock_release(client, leaving, declared),
            Kind::Permit { .. } => self.semaphore_release(client, leaving),
            Kind::Read | Kind::UpgradeableRead | Kind::Write | Kind::Upgrade { .. } => {
                self.read_write_release(client, leaving)
            }
        }
    }

    /// `lock/release.lua`'s bare release: the token alone, so nothing to hand on with.
    fn bare_release(&mut self, client: usize) -> Answer {
        if self.s.name != (Name::Lock { holder: client }) {
            return Answer::NotOurs;
        }
        if !self.s.queue.is_empty() {
            return Answer::AgainInFull;
        }
        self.s.name = Name::Free;
        Answer::Released
    }

    /// `lock/release.lua` and `lock/release_queued.lua`.
    fn lock_release(&mut self, client: usize, leaving: bool, declared: bool) -> Answer {
        let mut ours = false;
        let mut head = None;
        if !leaving {
            ours = self.s.name == Name::Lock { holder: client };
            if !ours {
                return Answer::NotOurs;
            }
            if self.s.queue.is_empty() {
                self.s.name = Name::Free;
                return Answer::Released;
            }
            head = Some(self.s.queue.remove(0));
        }
        if leaving {
            self.remove_entry(self.entry(client));
            ours = self.s.name == Name::Lock { holder: client };
        }
        if ours {
            match self.hand_off(Holds::Lock, declared, head, 0) {
                HandOff::Fence => return Answer::AgainInFull,
                HandOff::Nobody => self.s.name = Name::Free,
                HandOff::Handed => {}
            }
            return Answer::Released;
        }
        // A waiter left while the lock was free: the next live waiter is handed it now.
        if leaving
            && self.s.name == Name::Free
            && self.hand_off(Holds::Lock, declared, None, 0) == HandOff::Fence
        {
            return Answer::AgainInFull;
        }
        Answer::NotOurs
    }

    /// `semaphore/release.lua`.
    fn semaphore_release(&mut self, client: usize, leaving: bool) -> Answer {
        if leaving {
            // The entry under its caller's own count, and the one under the semaphore's
            // (where a count set at run time moved it).
            let own = match self.kind(client) {
                Kind::Permit { permits, .. } => permits,
                _ => 0,
            };
            let mine = Entry {
                count: own,
                ..self.entry(client)
            };
            self.remove_entry(mine);
            // Its entry under the semaphore's count and under the count set, where a change
            // of the count moved it.
            let stored = match self.s.name {
                Name::Semaphore { permits, .. } => Some(permits),
                _ => None,
            };
            for count in [stored, self.s.record].into_iter().flatten() {
                self.remove_entry(Entry { count, ..mine });
            }
        }
        let Name::Semaphore { permits, .. } = self.s.name else {
            return Answer::NotOurs;
        };
        // Ours while its lease lasts; one that ended goes too, and what it held is handed on.
        // Other ended leases stay (the live ones are counted): the next acquire purges them.
        let ours = self.live(client);
        let removed = self.s.name.remove(client);
        if self.config.scripts == Scripts::Before {
            self.s.name.purge();
        }
        if removed || leaving {
            // Each free permit goes to the next live waiter.
            self.repeat(|run| {
                (run.config.live_permits(&run.s.name) < usize::from(permits))
                    .then(|| run.hand_off(Holds::Semaphore, false, None, permits))
            });
        }
        self.s.name.expire();
        if ours {
            Answer::Released
        } else {
            Answer::NotOurs
        }
    }

    /// `rw/release.lua`.
    fn read_write_release(&mut self, client: usize, leaving: bool) -> Answer {
        if leaving {
            self.remove_entry(self.entry(client));
        }
        if !matches!(self.s.name.holds(), Holds::Free | Holds::ReadWrite) {
            return Answer::NotOurs;
        }
        let ours = self.live(client);
        let removed = self.s.name.remove(client);
        if (removed || leaving) && !self.s.queue.is_empty() {
            self.s.name.purge();
            self.repeat(|run| Some(run.hand_off(Holds::ReadWrite, true, None, 0)));
        }
        self.s.name.expire();
        if ours {
            Answer::Released
        } else {
            Answer::NotOurs
        }
    }

    /// Whether `client`'s lease here is live (scripts of [`Scripts::Before`] took any lease
    /// still in the set for the caller's).
    fn live(&self, client: usize) -> bool {
        match self.config.scripts {
            Scripts::Now => self.s.name.live_lease_of(client).is_some(),
            Scripts::Before => self
                .s
                .name
                .leases()
                .iter()
                .any(|(held, _)| held.client == client),
        }
    }

    /// The renewal of `client`'s lease (its kind's renew script): still its own, live.
    pub(super) fn renew(&mut self, client: usize) -> Answer {
        Answer::Renewed(self.s.name.live_lease_of(client) == Some(self.kind(client).letter()))
    }

    /// `client`'s lease ends unreleased (it was stopped past it): a lock's key goes; a set's
    /// member stays, ended, until a script purges it, and the set goes with its last live
    /// lease.
    pub(super) fn end_lease(&mut self, client: usize) {
        match &mut self.s.name {
            Name::Lock { holder } if *holder == client => self.s.name = Name::Free,
            Name::Semaphore { holders, .. } => {
                for h in holders.iter_mut().filter(|h| h.client == client) {
                    h.live = false;
                }
            }
            Name::ReadWrite {
                writer, readers, ..
            } => {
                for h in writer
                    .iter_mut()
                    .chain(readers.iter_mut())
                    .filter(|h| h.client == client)
                {
                    h.live = false;
                }
            }
            Name::Free | Name::Lock { .. } => {}
        }
        self.s.name.expire();
    }
}
