//! `hold`: the manual API, one lease (a lock, a reader's or the writer's lease of a
//! read-write lock, a semaphore's permit, or a leadership, or one another process handed
//! over) held until the test says `release`, or handed over when it says `hand-over`.

use std::io::BufRead;
use std::time::Duration;

use rlock_runtime::{HoldToken, LockClient, LockError};
use rlock_tests::holding::Holding as Held;
use rlock_tests::protocol::{Command, Line, Outcome};
use rlock_tests::worker::{Hold, HoldKind};

use crate::say;

pub(crate) async fn run(args: Hold) -> Result<(), String> {
    let client = LockClient::builder()
        .url(args.redis.as_str())
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let key = args.key.as_str();
    let ttl = Duration::from_millis(args.ttl_ms);
    let held = if let Some(token) = &args.take_over {
        let token = token.parse::<HoldToken>().map_err(|e| e.to_string())?;
        Held::Guard(client.take_over(token).await.map_err(|e| e.to_string())?)
    } else if args.kind == HoldKind::Leader {
        let lead = client.leader(key).ttl(ttl).campaign().await;
        Held::Leader(lead.map_err(|e| e.to_string())?)
    } else {
        let request = match args.kind {
            HoldKind::Read => client.read_lock(key),
            HoldKind::Write => client.write_lock(key).fenced(),
            HoldKind::Permit => client.semaphore(key, args.permits),
            HoldKind::Lock | HoldKind::Leader => client.lock(key).fenced(),
        };
        let guard = request.ttl(ttl).renew(args.renew).acquire().await;
        Held::Guard(guard.map_err(|e| e.to_string())?)
    };
    say(&Line::Acquired {
        token: held.token().to_owned(),
        fence: held.fence(),
    });

    // Stdin is read on a thread of its own: the runtime keeps renewing meanwhile.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // `None` once handed over: nothing is held, and only `release` is answered. Any other
    // command ends the worker with an error rather than leaving the harness waiting for an
    // answer that never comes.
    let mut held = Some(held);
    while let Some(command) = rx.recv().await {
        match (command.parse::<Command>()?, held.take()) {
            (Command::Release, None) => {
                say(&Line::Released(Outcome::Lost));
                return Ok(());
            }
            (command, None) => {
                return Err(format!("`{command}` after the hold was handed over"));
            }
            (Command::HandOver, Some(Held::Guard(guard))) => {
                let token = guard.hand_over().map_err(|e| e.to_string())?;
                say(&Line::Handed(token.to_string()));
            }
            (Command::HandOver, Some(Held::Leader(_))) => {
                return Err("a leadership is not handed over".into());
            }
            (Command::IsLost, Some(holding)) => {
                say(&Line::Lost(holding.is_lost()));
                held = Some(holding);
            }
            (Command::WaitLost, Some(holding)) => {
                holding.lost().await;
                say(&Line::Lost(true));
                held = Some(holding);
            }
            (Command::Release, Some(holding)) => {
                let outcome = match holding.release().await {
                    Ok(()) => Outcome::Ok,
                    Err(LockError::Lost { .. }) => Outcome::Lost,
                    Err(e) => return Err(e.to_string()),
                };
                say(&Line::Released(outcome));
                return Ok(());
            }
        }
    }
    Err("stdin closed before `release`".into())
}
