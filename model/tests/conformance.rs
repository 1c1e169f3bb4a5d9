//! Conformance: the kinds model is the scripts'. Every path of the model up to a depth, from
//! configurations small enough for CI, is replayed through the real Lua on a real
//! redis-server (`FLUSHALL` before each), and after every step what Redis holds and what it
//! answered must be what the model predicts:
//!
//! - what the key holds: its type and kind, the count of a semaphore, each holder and its
//!   place (the lock, a permit, a reader, the writer), and whether its lease is live or ended
//!   but not purged yet;
//! - the queue's entries, in order, each as the runtime writes it (token, hand-off lease,
//!   fence flag, kind letter);
//! - the fence record: the last fence issued, and every fence answered or announced, each
//!   above the ones before;
//! - each call's answer (taken, handed, busy and whether it told the holder's lease, other
//!   kind and which, other count; released, not ours, again in full; renewed);
//! - the announcements: who was named, on its own client's channel, with which fence.
//!
//! The calls are the runtime's own (`script_calls`, the scripted store's builders: the
//! scripts as the runtime concatenates them, the arguments in its order, a release's second
//! call when the first asks for it in full, a bare release's token alone), not a copy of the
//! calling convention.
//! Each modelled client has a real subscription on its channel, so releases count it live;
//! a client that dies unsubscribes.
//!
//! Time: leases are long (an hour; a hand-off's is the runtime's 2 s, which no replay comes
//! near). The model's "lease ends" step is emulated by rewriting the key as Redis would have
//! it once that lease passed: a lock's key is deleted; a set's member is scored by an end in
//! the past (1 ms after the epoch, minus that for a writer), and the set is deleted when no
//! live lease is left in it (its expiry is its latest lease's end). The fence record's own
//! expiry is not emulated: it outlives an emulated lease end, which no answer of the scripts
//! can tell apart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::Connection;
use rlock_model::check::counterexample;
use rlock_model::kinds::{
    Action, Answer, Client, Config, Effect, Entry, Held, Holds, Kind, KindsModel, Name, Scripts,
    State, scenarios,
};
use rlock_runtime::__private_0_1::script_calls::{AcquireReply, Found, ScriptCalls, released};
use rlock_tests::RedisServer;
use stateright::Model;

/// The name every replay uses.
const KEY: &str = "conformance";
/// Every lease asked for: no replay comes near its end.
const TTL: Duration = Duration::from_secs(3600);
/// A replayed path that takes longer than this may have outlived a hand-off's lease (2 s)
/// or the queue's: its comparison could not be trusted.
const SLOW_PATH: Duration = Duration::from_millis(1500);

/// The configurations replayed, each with the depth its paths are replayed to: locks hand on
/// to fenced waiters, fairly or not, and every kind meets every other on the name, in every
/// order, with a lease ending unreleased, a waiter giving up and a waiting process dying; a
/// lock joins plainly, a lock's release is bare, and semaphores of two counts take the name
/// in turn.
fn replayed() -> Vec<(&'static str, Config, usize)> {
    let now = Scripts::Now;
    vec![
        (
            "locks, fenced and fair",
            Config::new(
                now,
                &[
                    Client::lock().fenced(),
                    Client::lock().fair(),
                    Client::lock().releases_bare(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
        (
            "a lock and a semaphore",
            Config::new(
                now,
                &[
                    Client::lock().fenced(),
                    Client::lock().releases_bare(),
                    Client::permit(2),
                    Client::permit(2),
                ],
            )
            .faults(1, 1, 1),
            7,
        ),
        (
            "a read-write lock and a lock",
            Config::new(
                now,
                &[
                    Client::reader(),
                    Client::reader(),
                    Client::writer().fenced(),
                    Client::lock().fair(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
        (
            "a read-write lock and a semaphore",
            Config::new(
                now,
                &[
                    Client::reader(),
                    Client::writer().fenced(),
                    Client::permit(2),
                    Client::permit(2).fair(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
        (
            "holds of several permits beside single ones",
            Config::new(
                now,
                &[
                    Client::permits(3, 2),
                    Client::permit(3),
                    Client::permits(3, 3).fair(),
                    Client::lock(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
        (
            "upgradeable reads",
            Config::new(
                now,
                &[
                    Client::upgradeable_reader(),
                    Client::upgrade(0),
                    Client::reader(),
                    Client::writer().fenced(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
        (
            "a count set at run time",
            Config::new(
                now,
                &[
                    Client::permit(2),
                    Client::permit(2).appends(),
                    Client::permits(2, 2),
                ],
            )
            .set_counts(&[1, 3], 2)
            .faults(1, 1, 0),
            6,
        ),
        (
            "a plain join and semaphores of two counts",
            Config::new(
                now,
                &[
                    Client::lock().fenced().appends(),
                    Client::permit(1),
                    Client::permit(1).appends(),
                    Client::permit(2).fair(),
                ],
            )
            .faults(1, 1, 1),
            6,
        ),
    ]
}

#[test]
fn the_model_is_the_scripts() {
    let started = Instant::now();
    // One thread and one server per configuration: a replay waits on its server's round
    // trips, so the configurations overlap.
    let replays: Vec<(String, usize, Seen)> = std::thread::scope(|scope| {
        let runs: Vec<_> = replayed()
            .into_iter()
            .map(|(name, config, depth)| {
                scope.spawn(move || {
                    let server = RedisServer::start();
                    let started = Instant::now();
                    let mut replay = Replay::new(&server, config);
                    let init = replay.model.init_states().remove(0);
                    let mut path = Vec::new();
                    let mut paths = 0;
                    let mut steps = 0;
                    replay.every_path(&init, depth, &mut path, &mut paths, &mut steps);
                    let line = format!(
                        "{name}: {paths} paths of up to {depth} steps replayed ({steps} steps), \
                         {:.2?}",
                        started.elapsed()
                    );
                    (line, paths, replay.seen)
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| {
                run.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut replayed_paths = 0;
    let mut seen = Seen::default();
    for (line, paths, replay_seen) in &replays {
        println!("{line}");
        replayed_paths += paths;
        seen.add(replay_seen);
    }
    println!(
        "{replayed_paths} paths replayed in {:.2?}; what their steps did: {:#?}",
        started.elapsed(),
        seen.0
    );
    // The configurations are chosen to reach every answer and every kind of announcement.
    for what in [
        "taken",
        "taken with a fence",
        "handed",
        "handed with a fence",
        "busy, told the lease",
        "busy, not told",
        "other kind: Lock",
        "other kind: Semaphore",
        "other kind: ReadWrite",
        "other count",
        "an upgrade's read not held",
        "a count set at run time",
        "released",
        "not ours",
        "again in full",
        "a bare release",
        "a bare release found a queue",
        "renewed",
        "appended",
        "appended to no queue",
        "announced",
        "announced with a fence",
        "announced to several",
    ] {
        assert!(seen.0.contains_key(what), "no replayed step was {what}");
    }
}

/// The counterexample the model finds to K5 on the scripts of now is the scripts' own, and
/// the paths that broke K2 and K6 on the scripts before are the scripts' of now too (which no
/// longer break them): each replays step by step on the real scripts.
#[test]
fn the_findings_are_the_scripts() {
    let server = RedisServer::start();
    let findings = [
        ("K5 plain joins refused", scenarios::a_plain_join(), None),
        (
            "K2 own count",
            scenarios::two_counts(Scripts::Now),
            Some(scenarios::two_counts(Scripts::Before)),
        ),
        (
            "K6 lost leases told",
            scenarios::late_release(Scripts::Now, Client::permit(2)),
            Some(scenarios::late_release(Scripts::Before, Client::permit(2))),
        ),
        (
            "K6 lost leases told",
            scenarios::late_release(Scripts::Now, Client::reader()),
            Some(scenarios::late_release(Scripts::Before, Client::reader())),
        ),
    ];
    for (property, now, before) in findings {
        let found_in = before.unwrap_or_else(|| now.clone());
        let path = counterexample(|| KindsModel::new(found_in.clone()), property);
        let mut replay = Replay::new(&server, now);
        if let Err(mismatch) = replay.replay(&path) {
            panic!("the path to {property} parts ways with the scripts: {mismatch}");
        }
    }
}

/// How many replayed steps did each thing.
#[derive(Default)]
struct Seen(BTreeMap<&'static str, usize>);

impl Seen {
    fn saw(&mut self, what: &'static str) {
        *self.0.entry(what).or_default() += 1;
    }

    fn note(&mut self, effect: &Effect) {
        for answer in &effect.answers {
            self.saw(match answer {
                Answer::Taken { fence: 0 } => "taken",
                Answer::Taken { .. } => "taken with a fence",
                Answer::Handed { fence: 0 } => "handed",
                Answer::Handed { .. } => "handed with a fence",
                Answer::Busy { told: true } => "busy, told the lease",
                Answer::Busy { told: false } => "busy, not told",
                Answer::OtherKind(Holds::Lock) => "other kind: Lock",
                Answer::OtherKind(Holds::Semaphore) => "other kind: Semaphore",
                Answer::OtherKind(Holds::ReadWrite) => "other kind: ReadWrite",
                Answer::OtherKind(Holds::Free) => "other kind: Free",
                Answer::OtherCount => "other count",
                Answer::NotHeld => "an upgrade's read not held",
                Answer::Released => "released",
                Answer::NotOurs => "not ours",
                Answer::AgainInFull => "again in full",
                Answer::Renewed(true) => "renewed",
                Answer::Renewed(false) => "not renewed",
                Answer::Appended(0) => "appended to no queue",
                Answer::Appended(_) => "appended",
                Answer::Recounted(_) => "a count set at run time",
            });
        }
        for &(_, fence) in &effect.announced {
            self.saw(if fence == 0 {
                "announced"
            } else {
                "announced with a fence"
            });
        }
        if effect.announced.len() > 1 {
            self.saw("announced to several");
        }
    }

    fn add(&mut self, other: &Seen) {
        for (what, count) in &other.0 {
            *self.0.entry(what).or_default() += count;
        }
    }
}

/// The model, the runtime's calls for each of its clients, and the connections that replay
/// its paths on one server.
struct Replay {
    model: KindsModel,
    conn: Connection,
    /// Each client's calls (its kind's, on the name).
    calls: Vec<ScriptCalls>,
    /// Each client's subscription on its own channel.
    subscribers: Vec<Subscriber>,
    /// What the replayed steps did.
    seen: Seen,
}

/// The client part of each client's token: its channel's suffix.
fn client_id(client: usize) -> String {
    format!("c{client}")
}

/// The number in an upgrade's token: this plus its client's index.
const UPGRADE_NUMBERS: usize = 100;

/// Client `c`'s one token, in the runtime's form: `*<take>` after the number for a hold of
/// several permits; an upgrade's is its upgradeable reader's client's, `^` and that reader's
/// number after its own.
fn token(config: &Config, c: usize) -> String {
    match (config.clients[c].kind, config.clients[c].take()) {
        (Kind::Upgrade { of }, _) => format!("{}:{}^1", client_id(of), UPGRADE_NUMBERS + c),
        (_, 1) => format!("{}:1", client_id(c)),
        (_, take) => format!("{}:1*{take}", client_id(c)),
    }
}

/// Whose `token` is, by [`token`]'s form.
fn client_of(token: &str) -> Option<usize> {
    if let Some((own, _)) = token.split_once('^') {
        let number: usize = own.split_once(':')?.1.parse().ok()?;
        return number.checked_sub(UPGRADE_NUMBERS);
    }
    let token = token.split_once('*').map_or(token, |(token, _)| token);
    token.strip_prefix('c')?.strip_suffix(":1")?.parse().ok()
}

/// The client whose channel announces to `c`: an upgrade's upgradeable reader's (one client
/// in the runtime), else its own.
fn channel_of(config: &Config, c: usize) -> usize {
    match config.clients[c].kind {
        Kind::Upgrade { of } => of,
        _ => c,
    }
}

impl Replay {
    fn new(server: &RedisServer, config: Config) -> Self {
        let calls: Vec<ScriptCalls> = config
            .clients
            .iter()
            .map(|client| match client.kind {
                Kind::Lock => ScriptCalls::lock(KEY, TTL),
                Kind::Permit { permits, .. } => ScriptCalls::permit(KEY, u32::from(permits), TTL),
                Kind::Read => ScriptCalls::reader(KEY, TTL),
                Kind::UpgradeableRead => ScriptCalls::upgradeable_reader(KEY, TTL),
                Kind::Write | Kind::Upgrade { .. } => ScriptCalls::writer(KEY, TTL),
            })
            .collect();
        // An upgrade is announced on its upgradeable reader's channel: its own subscription
        // listens where nothing is said.
        let subscribers = (0..config.clients.len())
            .map(|c| {
                let channel = match channel_of(&config, c) {
                    own if own == c => client_id(c),
                    _ => format!("silent{c}"),
                };
                Subscriber::connect(server.port(), calls[c].channel(&channel))
            })
            .collect();
        Replay {
            model: KindsModel::new(config),
            conn: server
                .redis_client()
                .get_connection()
                .expect("a command connection"),
            calls,
            subscribers,
            seen: Seen::default(),
        }
    }

    /// Replays every path from `s` of `depth` more steps, or fewer where the model stops,
    /// each extending `path`.
    fn every_path(
        &mut self,
        s: &State,
        depth: usize,
        path: &mut Vec<Action>,
        paths: &mut usize,
        steps: &mut usize,
    ) {
        let mut actions = Vec::new();
        self.model.actions(s, &mut actions);
        if depth == 0 || actions.is_empty() {
            *paths += 1;
            *steps += path.len();
            let started = Instant::now();
            if let Err(mismatch) = self.replay(path) {
                panic!(
                    "the scripts and the model part ways on the path {path:#?}\n{mismatch}\n\
                     (config {:?})",
                    self.model.config
                );
            }
            assert!(
                started.elapsed() < SLOW_PATH,
                "replaying {path:?} took {:.2?}: too slow to trust its leases",
                started.elapsed()
            );
            return;
        }
        for action in actions {
            let (next, _) = self.model.step(s, action);
            path.push(action);
            self.every_path(&next, depth - 1, path, paths, steps);
            path.pop();
        }
    }

    /// Replays `path` from an empty server, comparing after every step.
    fn replay(&mut self, path: &[Action]) -> Result<(), String> {
        for subscriber in &mut self.subscribers {
            subscriber.subscribe();
        }
        let () = redis::cmd("FLUSHALL").query(&mut self.conn).unwrap();
        let mut s = self.model.init_states().remove(0);
        let mut fences = Fences::default();
        for (i, &action) in path.iter().enumerate() {
            let (next, effect) = self.model.step(&s, action);
            let at = |what: String| format!("step {} ({action:?}): {what}", i + 1);
            let replies = self.run(action, &s);
            compare_answers(&effect, &replies, &s, &mut fences).map_err(at)?;
            self.compare_announced(&effect, &mut fences).map_err(at)?;
            self.compare_held(&next, &fences).map_err(at)?;
            self.seen.note(&effect);
            if let Action::Release(c) = action
                && self.model.config.clients[c].bare
            {
                self.seen.saw(match effect.answers.first() {
                    Some(Answer::AgainInFull) => "a bare release found a queue",
                    _ => "a bare release",
                });
            }
            s = next;
        }
        Ok(())
    }

    /// Sends `action`'s calls (and those the replies call for: a plain join's script when it
    /// found no queue, a release's second call when the first asks for the fence record) from
    /// `s`, and reads their replies.
    fn run(&mut self, action: Action, s: &State) -> Vec<Reply> {
        let config = &self.model.config;
        let acquire = |this: &mut Self, c: usize, check_in: bool| {
            let client = this.model.config.clients[c];
            let token = token(&this.model.config, c);
            let call = this.calls[c].acquire(&token, client.fenced, client.fair, check_in);
            Reply::Acquire(ScriptCalls::acquired(
                &call.query::<Vec<i64>>(&mut this.conn).unwrap(),
            ))
        };
        match action {
            Action::Arrive(c) => vec![acquire(self, c, false)],
            Action::Append(c) => {
                let fenced = config.clients[c].fenced;
                let (length,): (u64,) = self.calls[c]
                    .append(&token(config, c), fenced)
                    .query(&mut self.conn)
                    .unwrap();
                let mut replies = vec![Reply::Appended(length)];
                if length == 0 {
                    replies.push(acquire(self, c, false));
                }
                replies
            }
            Action::CheckIn(c) => vec![acquire(self, c, true)],
            Action::Adopt(c) => {
                let renewed: Vec<i64> = self.calls[c]
                    .renew(&token(config, c))
                    .query(&mut self.conn)
                    .unwrap();
                vec![Reply::Renewed(renewed.first() == Some(&1))]
            }
            Action::Decline(_) => Vec::new(),
            Action::Release(c) | Action::Withdraw(c) => {
                let fenced = config.clients[c].fenced;
                let token = token(config, c);
                let first = if matches!(action, Action::Release(_)) {
                    if config.clients[c].bare {
                        self.calls[c].release_bare(&token)
                    } else {
                        self.calls[c].release(&token, fenced)
                    }
                } else {
                    self.calls[c].withdraw(&token, fenced)
                };
                let answer: i64 = first.query(&mut self.conn).unwrap();
                let mut replies = vec![Reply::Released(answer)];
                if answer == released::AGAIN_IN_FULL {
                    let again: i64 = self.calls[c]
                        .release_again(&token)
                        .query(&mut self.conn)
                        .unwrap();
                    replies.push(Reply::Released(again));
                }
                replies
            }
            Action::LeaseEnds(c) => {
                let () = redis::cmd("EVAL")
                    .arg(END_LEASE)
                    .arg(1)
                    .arg(KEY)
                    .arg(token(config, c))
                    .query(&mut self.conn)
                    .unwrap();
                Vec::new()
            }
            Action::SetPermits(_) | Action::ClearPermits => {
                let count = match action {
                    Action::SetPermits(i) => Some(u32::from(config.set_counts[i])),
                    _ => None,
                };
                let permit = (config.clients.iter())
                    .position(|client| matches!(client.kind, Kind::Permit { .. }))
                    .expect("a configuration that sets a count has a permit client");
                let reply: Vec<i64> = self.calls[permit]
                    .set_permits(count)
                    .query(&mut self.conn)
                    .unwrap();
                vec![Reply::Recounted(ScriptCalls::recounted(&reply))]
            }
            Action::Dies(c) => {
                let late = self.subscribers[c].unsubscribe();
                assert!(late.is_empty(), "{late:?} heard after its step ({s:?})");
                Vec::new()
            }
        }
    }

    /// The announcements each client heard in this step, against the model's.
    fn compare_announced(&mut self, effect: &Effect, fences: &mut Fences) -> Result<(), String> {
        for subscriber in &mut self.subscribers {
            subscriber.ping();
        }
        let config = &self.model.config;
        for (c, subscriber) in self.subscribers.iter_mut().enumerate() {
            let heard = subscriber.heard();
            let expected: Vec<(String, u8)> = effect
                .announced
                .iter()
                .filter(|(to, _)| channel_of(config, *to) == c)
                .map(|&(to, fence)| (token(config, to), fence))
                .collect();
            let agrees = heard.len() == expected.len()
                && heard
                    .iter()
                    .zip(&expected)
                    .all(|(message, (token, fence))| {
                        let (to, real) = message.split_once(' ').unwrap_or_default();
                        to == token && real.parse().is_ok_and(|real| fences.agree(*fence, real))
                    });
            if !agrees {
                return Err(format!(
                    "client {c} heard {heard:?}; the model announced fences {expected:?} to it"
                ));
            }
        }
        Ok(())
    }

    /// What Redis holds, against the model's `s`.
    fn compare_held(&mut self, s: &State, fences: &Fences) -> Result<(), String> {
        let calls = &self.calls[0];
        let count_key = ScriptCalls::permit(KEY, 1, TTL).count_key();
        let (kind, members, queue, record, now, count): Observed = redis::cmd("EVAL")
            .arg(OBSERVE)
            .arg(4)
            .arg(KEY)
            .arg(calls.queue_key())
            .arg(calls.fence_key())
            .arg(count_key)
            .query(&mut self.conn)
            .unwrap();
        let expected = s.record.map(|count| count.to_string()).unwrap_or_default();
        if count != expected {
            return Err(format!(
                "the count record is {count:?}; the model says {expected:?}"
            ));
        }
        let name = read_name(&kind, &members, now)?;
        if name != s.name {
            return Err(format!(
                "the key holds {name:?}; the model says {:?}",
                s.name
            ));
        }
        let expected: Vec<String> = s.queue.iter().map(|&e| self.entry(e)).collect();
        if queue != expected {
            return Err(format!(
                "the queue is {queue:?}; the model says {expected:?}"
            ));
        }
        let expected = match s.fences {
            0 => String::new(),
            last => fences.issued[usize::from(last) - 1].to_string(),
        };
        if record != expected {
            return Err(format!(
                "the fence record is {record:?}; expected {expected:?}"
            ));
        }
        Ok(())
    }

    /// A queue entry as the runtime writes it (a permit's with the count it carries).
    fn entry(&self, e: Entry) -> String {
        let token = token(&self.model.config, e.client);
        match self.model.config.clients[e.client].kind {
            Kind::Permit { .. } => {
                self.calls[e.client].entry_under(&token, e.fenced, u32::from(e.count))
            }
            _ => self.calls[e.client].entry(&token, e.fenced),
        }
    }
}

/// A reply of one call.
#[derive(Debug)]
enum Reply {
    Acquire(AcquireReply),
    Released(i64),
    Renewed(bool),
    Appended(u64),
    Recounted(Option<u32>),
}

/// Each call's reply against the model's answer, `s` the state the step started from.
fn compare_answers(
    effect: &Effect,
    replies: &[Reply],
    s: &State,
    fences: &mut Fences,
) -> Result<(), String> {
    let agree = |answer: &Answer, reply: &Reply, fences: &mut Fences| match (answer, reply) {
        (Answer::Taken { fence }, Reply::Acquire(AcquireReply::Taken { fence: real })) => {
            fences.agree(*fence, *real)
        }
        (Answer::Handed { fence }, Reply::Acquire(AcquireReply::Handed { fence: real, pttl })) => {
            fences.agree(*fence, *real) && *pttl > 0
        }
        (Answer::Busy { told }, Reply::Acquire(AcquireReply::Busy { pttl, queued })) => {
            *queued && *told == (*pttl >= 0)
        }
        (Answer::OtherCount, Reply::Acquire(AcquireReply::OtherCount { stored })) => {
            // The count stored with the permits, or the one set at run time (which a hold
            // of more permits exceeds).
            matches!(&s.name, Name::Semaphore { permits, .. } if i64::from(*permits) == *stored)
                || s.record.is_some_and(|count| i64::from(count) == *stored)
        }
        (Answer::OtherKind(holds), Reply::Acquire(AcquireReply::OtherKind(found))) => {
            *found
                == match holds {
                    Holds::Free => Found::Free,
                    Holds::Lock => Found::Lock,
                    Holds::Semaphore => Found::Semaphore,
                    Holds::ReadWrite => Found::ReadWrite,
                }
        }
        (Answer::NotHeld, Reply::Acquire(AcquireReply::NotHeld)) => true,
        (Answer::Released, Reply::Released(real)) => *real == released::RELEASED,
        (Answer::NotOurs, Reply::Released(real)) => *real == released::NOT_OURS,
        (Answer::AgainInFull, Reply::Released(real)) => *real == released::AGAIN_IN_FULL,
        (Answer::Renewed(renewed), Reply::Renewed(real)) => renewed == real,
        (Answer::Appended(length), Reply::Appended(real)) => u64::from(*length) == *real,
        (Answer::Recounted(count), Reply::Recounted(Some(real))) => u32::from(*count) == *real,
        (Answer::OtherKind(_), Reply::Recounted(None)) => true,
        _ => false,
    };
    let agrees = effect.answers.len() == replies.len()
        && effect
            .answers
            .iter()
            .zip(replies)
            .all(|(answer, reply)| agree(answer, reply, fences));
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "the scripts answered {replies:?}; the model says {:?}",
            effect.answers
        ))
    }
}

/// The real fences behind the model's numbers: the `n`th fence issued on the name is
/// `issued[n - 1]`, each above the one before.
#[derive(Default)]
struct Fences {
    issued: Vec<i64>,
}

impl Fences {
    /// Whether the real fence `real` is the model's fence number `number` (0: none): the one
    /// seen before under that number, or, for the next number, a fence above every earlier.
    fn agree(&mut self, number: u8, real: i64) -> bool {
        let number = usize::from(number);
        if number == 0 {
            return real == 0;
        }
        if let Some(&known) = self.issued.get(number - 1) {
            return known == real;
        }
        if number == self.issued.len() + 1 && self.issued.last().is_none_or(|&last| real > last) {
            self.issued.push(real);
            return true;
        }
        false
    }
}

/// What the key holds, from its type and (for a sorted set) its members and scores, read at
/// `now` (Redis's clock, ms).
fn read_name(kind: &str, members: &[String], now: i64) -> Result<Name, String> {
    let holder = |token: &str| client_of(token).ok_or(format!("a stranger's token {token:?}"));
    match kind {
        "none" => Ok(Name::Free),
        "string" => Ok(Name::Lock {
            holder: holder(&members[0])?,
        }),
        "zset" => {
            let mut permits = None;
            let mut read_write = false;
            let mut upgrader = None;
            let mut leases = Vec::new();
            for pair in members.chunks(2) {
                let score: f64 = pair[1].parse().map_err(|_| format!("score {pair:?}"))?;
                match pair[0].as_str() {
                    "#permits" => permits = Some(-score),
                    "#rw" => read_write = true,
                    named if named.starts_with("#up:") && score == 0.0 => {
                        upgrader = Some(holder(&named[4..])?);
                    }
                    // A hold's further permits (`<token>/<n>`), scored as its token.
                    extra if extra.contains('/') => {}
                    token => leases.push((holder(token)?, score)),
                }
            }
            let live = |end: f64| end > now as f64;
            let mut name = match (permits, read_write) {
                (Some(permits), false) => Name::Semaphore {
                    permits: permits as u8,
                    holders: leases
                        .iter()
                        .map(|&(client, end)| Held {
                            client,
                            live: live(end),
                        })
                        .collect(),
                },
                (None, true) => Name::ReadWrite {
                    writer: leases.iter().find(|(_, score)| *score < 0.0).map(
                        |&(client, score)| Held {
                            client,
                            live: live(-score),
                        },
                    ),
                    readers: leases
                        .iter()
                        .filter(|(_, score)| *score > 0.0)
                        .map(|&(client, end)| Held {
                            client,
                            live: live(end),
                        })
                        .collect(),
                    upgrader,
                },
                _ => return Err(format!("an unmarked sorted set {members:?}")),
            };
            name.normalize();
            Ok(name)
        }
        other => Err(format!("a key of type {other}")),
    }
}

/// What [`OBSERVE`] reads: the key's type, its value or members with scores, the queue's
/// entries, the fence record, Redis's clock and the count record.
type Observed = (String, Vec<String>, Vec<String>, String, i64, String);

/// Reads the name back in one atomic look: its type, its value or members with scores, the
/// queue's entries, the fence record ('' when none), Redis's clock in ms and the semaphore's
/// count record ('' when none).
const OBSERVE: &str = r"
local kind = redis.call('TYPE', KEYS[1])['ok']
local held = {}
if kind == 'string' then
  held = {redis.call('GET', KEYS[1])}
elseif kind == 'zset' then
  held = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
end
local queue = {}
if redis.call('TYPE', KEYS[2])['ok'] == 'list' then
  queue = redis.call('LRANGE', KEYS[2], 0, -1)
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
return {kind, held, queue, redis.call('GET', KEYS[3]) or '', now,
  redis.call('GET', KEYS[4]) or ''}
";

/// Ends the lease of ARGV[1] on KEYS[1] as the passing of time would have: a lock's key goes;
/// a set's members of the lease (its token, and a hold's further permits `<token>/<n>`) are
/// scored by an end in the past (1 ms after the epoch; a writer's by minus it), and the set goes when no live lease is left in it, its expiry being its latest
/// lease's end.
const END_LEASE: &str = r"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
  return
end
if kind ~= 'zset' then
  return
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return
end
local ended = tonumber(score) < 0 and -1 or 1
local scores = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #scores, 2 do
  local member = scores[i]
  if member == ARGV[1] or string.sub(member, 1, #ARGV[1] + 1) == ARGV[1] .. '/' then
    redis.call('ZADD', KEYS[1], 'XX', ended, member)
  end
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
scores = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 2, #scores, 2 do
  if math.abs(tonumber(scores[i])) > now then
    return
  end
end
redis.call('DEL', KEYS[1])
";

/// One client's subscription on its channel, on a connection of its own, spoken in RESP by
/// hand: its messages are read up to a `PING`'s answer, so a step's announcements are told
/// from the next step's.
struct Subscriber {
    channel: String,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    subscribed: bool,
}

/// A RESP value, as far as a subscription needs one.
#[derive(Debug)]
enum Resp {
    Text(String),
    /// An integer (a subscription's count), not read.
    Integer,
    Array(Vec<Resp>),
}

impl Subscriber {
    fn connect(port: u16, channel: String) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("a subscriber connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Subscriber {
            channel,
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
            subscribed: false,
        }
    }

    fn send(&mut self, args: &[&str]) {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.writer.write_all(request.as_bytes()).unwrap();
    }

    fn read(&mut self) -> Resp {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        let (tag, rest) = line.split_at(1);
        match tag {
            "+" => Resp::Text(rest.to_owned()),
            ":" => Resp::Integer,
            "$" => {
                let mut bulk = vec![0; rest.parse::<usize>().unwrap() + 2];
                self.reader.read_exact(&mut bulk).unwrap();
                bulk.truncate(bulk.len() - 2);
                Resp::Text(String::from_utf8(bulk).unwrap())
            }
            "*" => Resp::Array(
                (0..rest.parse::<usize>().unwrap())
                    .map(|_| self.read())
                    .collect(),
            ),
            _ => panic!("an unexpected reply {line:?}"),
        }
    }

    /// Reads up to the reply whose first element is `kind`, returning the messages before it
    /// (no step announces more than a few).
    fn read_until(&mut self, kind: &str) -> Vec<String> {
        let mut messages = Vec::new();
        for _ in 0..100 {
            let Resp::Array(reply) = self.read() else {
                panic!("a subscription's reply that is no array");
            };
            match &reply[..] {
                [Resp::Text(first), Resp::Text(channel), Resp::Text(payload)]
                    if first == "message" =>
                {
                    assert_eq!(channel, &self.channel);
                    messages.push(payload.clone());
                }
                [Resp::Text(first), ..] if first == kind => return messages,
                other => panic!("an unexpected reply {other:?} while waiting for {kind}"),
            }
        }
        panic!("no {kind} after {messages:?}");
    }

    fn subscribe(&mut self) {
        if !self.subscribed {
            let channel = self.channel.clone();
            self.send(&["SUBSCRIBE", &channel]);
            let late = self.read_until("subscribe");
            assert!(late.is_empty(), "{late:?} heard while unsubscribed");
            self.subscribed = true;
        }
    }

    /// Unsubscribes (the client died): the messages heard before.
    fn unsubscribe(&mut self) -> Vec<String> {
        let channel = self.channel.clone();
        self.send(&["UNSUBSCRIBE", &channel]);
        self.subscribed = false;
        self.read_until("unsubscribe")
    }

    /// Asks for a `PING`'s answer, read by [`heard`](Self::heard).
    fn ping(&mut self) {
        if self.subscribed {
            self.send(&["PING"]);
        }
    }

    /// The messages heard up to the answer of the last [`ping`](Self::ping).
    fn heard(&mut self) -> Vec<String> {
        if self.subscribed {
            self.read_until("pong")
        } else {
            Vec::new()
        }
    }
}
