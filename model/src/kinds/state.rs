//! What the kinds model's state holds: the name in Redis (what its key holds, its queue, its
//! fence record), each client's side, and what a step answered.

/// What a name's key holds, as the scripts' `kind_of` finds it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Holds {
    /// Nothing: free for any kind.
    Free,
    /// A string: a lock.
    Lock,
    /// A sorted set marked with a count.
    Semaphore,
    /// A sorted set marked as a read-write lock's.
    ReadWrite,
}

/// One lease held in a sorted set: a permit, a reader or the writer.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    /// Whose it is (the client's index).
    pub client: usize,
    /// Its lease has not ended. An ended one stays in the set (scored by its end, now past)
    /// until a script that purges looks; a set whose every lease ended is gone (its expiry
    /// is its latest lease's end).
    pub live: bool,
}

/// The name's key.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Name {
    /// The key does not exist.
    Free,
    /// A lock: the holder's token (`SET … PX`). Its lease's end deletes the key.
    Lock {
        /// The holder.
        holder: usize,
    },
    /// A semaphore: its count and the permits in it, by client.
    Semaphore {
        /// The count it was created with.
        permits: u8,
        /// The permits, sorted by client.
        holders: Vec<Held>,
    },
    /// A read-write lock: its writer, or its readers (sorted by client), one of whom may be
    /// the upgradeable reader; or the upgrade of the upgradeable reader, beside it.
    ReadWrite {
        /// The writer, if one holds.
        writer: Option<Held>,
        /// The readers.
        readers: Vec<Held>,
        /// The reader the set names as its upgradeable one (`UPGRADER_MARK`), while that
        /// reader's lease is live: a name whose lease ended names nobody (the scripts drop
        /// it when they next read it), so it is forgotten here.
        upgrader: Option<usize>,
    },
}

impl Name {
    /// What `kind_of` finds.
    pub fn holds(&self) -> Holds {
        match self {
            Name::Free => Holds::Free,
            Name::Lock { .. } => Holds::Lock,
            Name::Semaphore { .. } => Holds::Semaphore,
            Name::ReadWrite { .. } => Holds::ReadWrite,
        }
    }

    /// Every lease in it, live or ended, with the letter of the place it holds (`l` the lock,
    /// `p` a permit, `r` a reader, `u` the upgradeable reader, `w` the writer).
    pub fn leases(&self) -> Vec<(Held, char)> {
        match self {
            Name::Free => Vec::new(),
            Name::Lock { holder } => vec![(
                Held {
                    client: *holder,
                    live: true,
                },
                'l',
            )],
            Name::Semaphore { holders, .. } => holders.iter().map(|&h| (h, 'p')).collect(),
            Name::ReadWrite {
                writer,
                readers,
                upgrader,
            } => writer
                .iter()
                .map(|&w| (w, 'w'))
                .chain(readers.iter().map(|&r| {
                    let letter = if Some(r.client) == *upgrader {
                        'u'
                    } else {
                        'r'
                    };
                    (r, letter)
                }))
                .collect(),
        }
    }

    /// The letter of `client`'s live lease here, if it has one.
    pub fn live_lease_of(&self, client: usize) -> Option<char> {
        self.leases()
            .into_iter()
            .find(|(held, _)| held.client == client && held.live)
            .map(|(_, letter)| letter)
    }

    /// Whether any lease in it is live.
    pub fn any_live(&self) -> bool {
        self.leases().iter().any(|(held, _)| held.live)
    }

    /// Drops the ended leases (`ZREMRANGEBYSCORE` up to now, and the writer's).
    pub fn purge(&mut self) {
        match self {
            Name::Semaphore { holders, .. } => holders.retain(|h| h.live),
            Name::ReadWrite {
                writer, readers, ..
            } => {
                readers.retain(|h| h.live);
                if writer.is_some_and(|w| !w.live) {
                    *writer = None;
                }
            }
            Name::Free | Name::Lock { .. } => {}
        }
    }

    /// Removes `client`'s lease, live or ended (`ZREM`): whether it had one.
    pub fn remove(&mut self, client: usize) -> bool {
        match self {
            Name::Semaphore { holders, .. } => {
                let before = holders.len();
                holders.retain(|h| h.client != client);
                holders.len() < before
            }
            Name::ReadWrite {
                writer,
                readers,
                upgrader,
            } => {
                let before = readers.len();
                readers.retain(|h| h.client != client);
                if *upgrader == Some(client) {
                    *upgrader = None;
                }
                if writer.is_some_and(|w| w.client == client) {
                    *writer = None;
                    return true;
                }
                readers.len() < before
            }
            Name::Free | Name::Lock { .. } => false,
        }
    }

    /// A set with no live lease left is gone: its expiry was its latest lease's end (or a
    /// release's `expire_with_latest` deleted it).
    pub fn expire(&mut self) {
        if matches!(self, Name::Semaphore { .. } | Name::ReadWrite { .. }) && !self.any_live() {
            *self = Name::Free;
        }
    }

    /// Keeps the sets sorted, and forgets a name of an upgradeable reader whose lease is
    /// not live, so that one Redis state is one model state.
    pub fn normalize(&mut self) {
        match self {
            Name::Semaphore { holders, .. } => holders.sort(),
            Name::ReadWrite {
                readers, upgrader, ..
            } => {
                readers.sort();
                if !upgrader.is_some_and(|u| readers.iter().any(|r| r.client == u && r.live)) {
                    *upgrader = None;
                }
            }
            Name::Free | Name::Lock { .. } => {}
        }
    }
}

/// A queue entry: whom to grant, as what, and whether with a fence.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Entry {
    /// The waiter (the client's index).
    pub client: usize,
    /// Its kind's letter: `l`, `p`, `r`, `u` or `w`.
    pub letter: char,
    /// It asked for a fence.
    pub fenced: bool,
    /// A permit's: the count it waits under (`p3`: its caller's, or the count set at run
    /// time); 0 for other kinds.
    pub count: u8,
}

/// Where a client is, in order of its life.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Its first call is to come.
    #[default]
    Arriving,
    /// It waits, believing it is queued.
    Waiting,
    /// It holds its lease (and renews it).
    Holding,
    /// Its lease ended while it held it (it was stopped past it): it knows by its own clock,
    /// and may still send its late release.
    Lost,
    /// It released its lease.
    Released,
    /// It gave up waiting; its withdrawal ran.
    GaveUp,
    /// It was refused: the name holds another kind, or a semaphore of another count.
    Refused,
    /// Its process died while waiting: it is unsubscribed, and does nothing more.
    Dead,
}

/// One client's side.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Progress {
    /// Where it is.
    pub phase: Phase,
    /// An announcement naming it came, not yet acted on: a release handed it a lease.
    pub handed: bool,
    /// It was refused at a check in, its entry perhaps still queued: the withdrawal of its
    /// token, in the background, is still to run.
    pub withdraw_pending: bool,
}

impl Progress {
    /// Its client listens on its channel: a release counts its entries as live.
    pub fn subscribed(&self) -> bool {
        self.phase != Phase::Dead
    }

    /// It is done: it calls nothing more (its background withdrawal aside).
    pub fn done(&self) -> bool {
        !matches!(self.phase, Phase::Arriving | Phase::Waiting) && !self.withdraw_pending
    }
}

/// Faults still allowed in a run.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Budget {
    /// Leases that may end unreleased.
    pub lease_ends: u8,
    /// Waiters that may give up.
    pub withdrawals: u8,
    /// Waiters that may die.
    pub deaths: u8,
    /// Changes of a semaphore's count at run time still to come.
    pub recounts: u8,
}

/// What a step broke, kept for the properties to see.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Broken {
    /// An arrival on another kind's state (or another count's) was queued or granted.
    pub arrival_admitted: bool,
    /// A release that gave a lease back left a live waiter of its kind queued that fits now.
    pub missed_handoff: bool,
    /// A check in answered busy, yet its caller's entry is not in the queue.
    pub out_after_checkin: bool,
    /// A plain join stood in the queue of a key holding another kind (or a semaphore of
    /// another count).
    pub plain_join_admitted: bool,
    /// A holder's release of a lease that had ended answered that it gave it back.
    pub lost_release_released: bool,
    /// A permit was granted past its semaphore's count at the time of the grant.
    pub over_count: bool,
}

/// The whole system at one moment.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// What the name's key holds.
    pub name: Name,
    /// The name's queue, head first.
    pub queue: Vec<Entry>,
    /// How many fences were issued on the name: the record holds the last (0: none).
    pub fences: u8,
    /// The semaphore's count set at run time (its count record), if one is.
    pub record: Option<u8>,
    /// A count was set at run time at some point: holders may since hold permits of a count
    /// their callers did not name.
    pub counts_set: bool,
    /// Each client's side, by index.
    pub clients: Vec<Progress>,
    /// Faults still allowed.
    pub budget: Budget,
    /// A script step could not finish: it loops for ever, and the server with it.
    pub stuck: bool,
    /// What steps broke.
    pub broken: Broken,
}

impl State {
    /// Forgets what no longer matters, so that states that behave alike are one: the order of
    /// a set's members, and an announcement heard by a client that no longer waits.
    pub(super) fn normalize(&mut self) {
        self.name.normalize();
        for c in &mut self.clients {
            if c.phase != Phase::Waiting {
                c.handed = false;
            }
        }
    }
}

/// What one script call answered, as the model predicts it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Answer {
    /// An acquire took it; `fence` is the number of the fence issued (0: none).
    Taken {
        /// The fence's number on this name, 0 when none was asked.
        fence: u8,
    },
    /// An acquire found it handed to its caller by an earlier release.
    Handed {
        /// The fence's number, 0 when none was asked.
        fence: u8,
    },
    /// An acquire found it busy and queued its caller; `told` when it told the holder's lease
    /// (the head is told), not when it did not (`-3`).
    Busy {
        /// The reply carries the holder's remaining lease.
        told: bool,
    },
    /// An acquire found a semaphore of another count.
    OtherCount,
    /// An acquire found another kind's state.
    OtherKind(Holds),
    /// An upgrade's acquire found its upgradeable reader gone.
    NotHeld,
    /// A release gave its lease back (or handed it on).
    Released,
    /// A release found nothing of its caller's.
    NotOurs,
    /// A release did nothing, and the call comes again in full: the next waiter wants a
    /// fence and the fence record was not declared, or a bare release found a queue.
    AgainInFull,
    /// A renewal: still the caller's, or not.
    Renewed(bool),
    /// A plain join (`RPUSHX`): the queue's length after it, 0 when there was no queue.
    Appended(u8),
    /// A change of a semaphore's count at run time: the count after it (for a clear, the one
    /// in use, 0 when none).
    Recounted(u8),
}

/// What a step did that the outside sees: each call's answer, in order, and the announcements
/// its releases sent, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// The answers.
    pub answers: Vec<Answer>,
    /// The announcements: to whom, and the number of the fence it carries (0: none).
    pub announced: Vec<(usize, u8)>,
}
