//! Generated bad input to the public API (seeded, so a failure names its case): keys of any
//! length and content, absurd durations, malformed and unknown URLs. Every call returns a
//! typed `LockError` or works; none panics or hangs.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rlock_runtime::key::MAX_KEY_LEN;
use rlock_runtime::{
    KeyBuilder, LockClient, LockError, LockKey, MAX_COMMAND_TIMEOUT, MAX_HOLD, MAX_TTL,
};

/// Pieces keys and URLs are made of: ordinary text, separators rlock reserves, controls,
/// wide characters, and lookalikes of placeholders.
const PIECES: &[&str] = &[
    "a",
    "order",
    ":",
    "{",
    "}",
    "%",
    "*",
    "?",
    "[",
    "]",
    "\\",
    "/",
    "|",
    "#",
    ",",
    " ",
    "\t",
    "\n",
    "\0",
    "\u{7f}",
    "é",
    "日本",
    "🔒",
    "<",
    ">",
    "<user_id>",
    "{x}",
    "${x}",
    "#{x}",
    "0",
    "-1",
    "//",
    "@",
    "..",
];

fn text(rng: &mut fastrand::Rng) -> String {
    let mut out = String::new();
    let pieces = match rng.u8(..10) {
        0 => 0,
        1 => rng.usize(MAX_KEY_LEN / 2..MAX_KEY_LEN * 2),
        _ => rng.usize(1..12),
    };
    for _ in 0..pieces {
        out.push_str(PIECES[rng.usize(..PIECES.len())]);
    }
    out
}

fn duration(rng: &mut fastrand::Rng) -> Duration {
    match rng.u8(..8) {
        0 => Duration::ZERO,
        1 => Duration::from_nanos(rng.u64(1..1_000_000)),
        2 => MAX_TTL,
        3 => MAX_TTL + Duration::from_nanos(1),
        4 => MAX_HOLD + Duration::from_millis(rng.u64(0..1000)),
        5 => Duration::MAX,
        6 => Duration::from_secs(rng.u64(..u64::MAX / 2)),
        _ => Duration::from_millis(rng.u64(1..5000)),
    }
}

/// A typed error of the kinds bad input may get.
fn expected(e: &LockError) -> bool {
    matches!(
        e,
        LockError::InvalidKey { .. }
            | LockError::InvalidConfig(_)
            | LockError::Unavailable { .. }
            | LockError::Timeout { .. }
    )
}

#[test]
fn any_key_is_taken_or_refused_as_invalid() {
    let mut rng = fastrand::Rng::with_seed(1);
    for case in 0..20_000 {
        let raw = text(&mut rng);
        match LockKey::new(raw.clone()) {
            Ok(key) => {
                assert!(!key.as_str().is_empty() && key.as_str().len() <= MAX_KEY_LEN);
            }
            Err(LockError::InvalidKey { key, .. }) => assert!(key.len() <= raw.len() + 4),
            Err(e) => panic!("case {case}: {raw:?} gave {e:?}"),
        }
        let built = KeyBuilder::new()
            .literal(&text(&mut rng))
            .value(&raw)
            .finish();
        if let Err(e) = built {
            assert!(
                matches!(e, LockError::InvalidKey { .. }),
                "case {case}: {e:?}"
            );
        }
    }
}

#[tokio::test]
async fn absurd_options_are_refused_with_a_typed_error() {
    let client = LockClient::in_memory();
    let mut rng = fastrand::Rng::with_seed(2);
    for case in 0..3_000 {
        let key = format!("k{case}");
        let mut request = client.lock(key.as_str()).ttl(duration(&mut rng));
        if rng.bool() {
            request = request.wait(duration(&mut rng));
        }
        if rng.bool() {
            request = request.max_hold(duration(&mut rng));
        }
        if rng.bool() {
            request = request.renew(rng.bool()).fenced();
        }
        // A fresh key: any valid request is granted at once, whatever its wait.
        let outcome = tokio::time::timeout(Duration::from_secs(5), request.acquire())
            .await
            .unwrap_or_else(|_| panic!("case {case} hung"));
        match outcome {
            Ok(guard) => {
                let _ = guard.release().await;
            }
            Err(e) => assert!(expected(&e), "case {case}: {e:?}"),
        }
    }
}

/// A command timeout past [`MAX_COMMAND_TIMEOUT`] (`Duration::MAX`, a unit mistake) is
/// refused at `connect`, before any deadline could overflow.
#[tokio::test]
async fn an_absurd_command_timeout_is_refused() {
    for timeout in [Duration::MAX, MAX_COMMAND_TIMEOUT + Duration::from_nanos(1)] {
        let refused = LockClient::builder()
            .url("redis://127.0.0.1:1/")
            .command_timeout(timeout)
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, LockError::InvalidConfig(why) if why.contains("command timeout")),
            "{refused:?}"
        );
    }
}

#[tokio::test]
async fn malformed_and_unknown_urls_fail_with_a_typed_error() {
    let schemes = [
        "redis://",
        "rediss://",
        "redis+sentinel://",
        "redis+cluster://",
        "redlock://",
        "http://",
        "unix://",
        "",
        "redis:",
        "://",
    ];
    // Only loopback, on a port nothing listens on, or hosts no resolver is asked about.
    let hosts = [
        "127.0.0.1:1",
        "127.0.0.1:0",
        "127.0.0.1:99999",
        "[::1]:1",
        "127.0.0.1:1,127.0.0.1:2",
        "127.0.0.1:1/service",
        ":@127.0.0.1:1",
        "user:pa%ss@127.0.0.1:1",
        "%zz",
        "[",
        "",
    ];
    let mut rng = fastrand::Rng::with_seed(3);
    for case in 0..300 {
        let url = format!(
            "{}{}{}",
            schemes[rng.usize(..schemes.len())],
            hosts[rng.usize(..hosts.len())],
            if rng.u8(..4) == 0 {
                text(&mut rng)
            } else {
                String::new()
            }
        );
        let connect = LockClient::builder()
            .url(url.as_str())
            .command_timeout(Duration::from_millis(100))
            .connect();
        match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Err(_) => panic!("case {case}: connecting to {url:?} hung"),
            Ok(Ok(_)) => panic!("case {case}: {url:?} connected to nothing"),
            Ok(Err(e)) => assert!(expected(&e), "case {case}: {url:?} gave {e:?}"),
        }
    }
}

/// A leader election on a name that cannot be a key, or with an absurd lease, answers a
/// typed error from every form, the loop form included (which must not campaign for ever on
/// a mistake that trying again cannot mend); a leader's name of any content is refused or
/// elected.
#[tokio::test]
async fn leader_elections_on_bad_input_answer_a_typed_error() {
    let client = LockClient::in_memory();
    for name in ["", "}x", "a}:waiters"] {
        assert!(matches!(
            client.leader(name).campaign().await,
            Err(LockError::InvalidKey { .. })
        ));
        assert!(client.leader(name).observe().await.is_err());
        assert!(client.leader(name).changes().is_err());
        let run = client.leader(name).run(|term| async move { term });
        let outcome = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or_else(|_| panic!("{name:?}: run went on"));
        assert!(
            matches!(outcome, Err(LockError::InvalidKey { .. })),
            "{name:?}"
        );
    }
    let absurd = client
        .leader("billing")
        .ttl(Duration::MAX)
        .run(|term| async move { term });
    let outcome = tokio::time::timeout(Duration::from_secs(5), absurd)
        .await
        .unwrap_or_else(|_| panic!("an absurd lease: run went on"));
    assert!(matches!(outcome, Err(LockError::InvalidConfig(_))));
    let mut rng = fastrand::Rng::with_seed(3);
    for case in 0..2_000 {
        let name = text(&mut rng);
        match client.leader(name.as_str()).campaign().await {
            Ok(lead) => lead.resign().await.unwrap(),
            Err(e) => assert!(expected(&e), "case {case}: {name:?} gave {e:?}"),
        }
    }
}
