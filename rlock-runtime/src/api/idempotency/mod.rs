//! Idempotent HTTP requests, after the IETF `Idempotency-Key` header draft
//! (draft-ietf-httpapi-idempotency-key-header), for tower (axum and any tower service:
//! [`tower`]) and actix-web ([`actix`]).
//!
//! A `POST` or `PATCH` with an `Idempotency-Key` header runs once per key (scoped by the
//! caller's function, e.g. the authenticated user): while it runs, the same key is answered
//! `409 Conflict` (or waits, by option); once it has answered, the same key gets its answer
//! again (status, chosen headers, body) for the retention period, with
//! `Idempotency-Replayed: true`; the same key with another request (method, path and query,
//! body) is answered `422 Unprocessable Content`. The key is held by a lock on
//! `idempotency:<hash of scope and key>` while the request runs, and the answer is kept at
//! `rlock:idempotency:<hash>`.
//!
//! This file is what both frameworks share, in their types' common terms (header names as
//! lower-case text, statuses as numbers, bodies as bytes): the rules, a key's checks, the
//! request's fingerprint, the kept answer, and the steps before and after a request runs.

#[cfg(feature = "actix-web")]
pub(crate) mod actix;
pub(crate) mod tower;

use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::api::client::LockClient;
use crate::api::guard::LockGuard;
use crate::error::LockError;
use crate::key::own_key;

/// The request header that names a request (the draft's), in lower case.
pub(crate) const KEY_HEADER: &str = "idempotency-key";
/// The response header that marks a replayed answer, in lower case.
pub(crate) const REPLAYED_HEADER: &str = "idempotency-replayed";
/// The longest key accepted, in bytes.
const MOST_KEY_BYTES: usize = 255;

/// What every request of one layer or middleware is kept by.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) client: LockClient,
    pub(crate) retention: Duration,
    pub(crate) wait: Duration,
    pub(crate) required: bool,
    /// The answer's headers kept and replayed, in lower case.
    pub(crate) replayed: Vec<String>,
    pub(crate) most_request: usize,
    pub(crate) most_response: usize,
}

impl Rules {
    /// Answers kept a day, a request in flight answered `409` at once, `Content-Type` and
    /// `Location` replayed, bodies up to 1 MiB.
    pub(crate) fn new(client: LockClient) -> Self {
        Self {
            client,
            retention: Duration::from_secs(24 * 60 * 60),
            wait: Duration::ZERO,
            required: false,
            replayed: vec!["content-type".into(), "location".into()],
            most_request: 1 << 20,
            most_response: 1 << 20,
        }
    }

    /// What a request asks: `keyed` when its method is one the layer keeps (`POST`,
    /// `PATCH`), `key` its header's value, `scope` what the caller's function said of it.
    pub(crate) fn asked(
        &self,
        keyed: bool,
        key: Option<&[u8]>,
        scope: Option<String>,
    ) -> Result<Option<String>, Answer> {
        if !keyed {
            return Ok(None);
        }
        let Some(value) = key else {
            return if self.required {
                Err(Answer::BadKey(
                    "this resource needs an Idempotency-Key header",
                ))
            } else {
                Ok(None)
            };
        };
        let key = key_of(value).ok_or(Answer::BadKey(
            "the Idempotency-Key header must be a string of 1 to 255 characters, such as \
             \"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
        ))?;
        Ok(Some(hashed(&[
            scope.as_deref().unwrap_or("").as_bytes(),
            key.as_bytes(),
        ])))
    }

    /// Where the answer to the key whose hash is `id` is kept.
    fn record_key(&self, id: &str) -> String {
        own_key(
            self.client.shared().namespace.as_deref(),
            &format!("idempotency:{id}"),
        )
    }

    /// What to do with the request of key `id` and `fingerprint` before it runs: replay a
    /// kept answer, give one of the layer's own, or run it under the key's lock.
    pub(crate) async fn before(&self, id: &str, fingerprint: &str) -> Before {
        let engine = &self.client.shared().engine;
        let record_key = self.record_key(id);
        match kept(engine.read_value(&record_key).await, fingerprint) {
            Ok(Some(stored)) => return Before::Replay(stored),
            Ok(None) => {}
            Err(answer) => return Before::Answer(answer),
        }
        let lock = self.client.lock(format!("idempotency:{id}"));
        let guard = match lock.wait(self.wait).acquire().await {
            Ok(guard) => guard,
            Err(e) if e.is_busy() => {
                // Another request with this key runs (with a wait, it ran out).
                return match kept(engine.read_value(&record_key).await, fingerprint) {
                    Ok(Some(stored)) => Before::Replay(stored),
                    Ok(None) => Before::Answer(Answer::InFlight),
                    Err(answer) => Before::Answer(answer),
                };
            }
            Err(e) => return Before::Answer(Answer::Unavailable(e)),
        };
        // An answer kept between the read above and the grant.
        let before = match kept(engine.read_value(&record_key).await, fingerprint) {
            Ok(None) => {
                return Before::Run(Running {
                    guard,
                    record_key,
                    fingerprint: fingerprint.to_owned(),
                });
            }
            Ok(Some(stored)) => Before::Replay(stored),
            Err(answer) => Before::Answer(answer),
        };
        let _ = guard.release().await;
        before
    }

    /// The answer to keep of a request that ran: its status, its body, and the values of
    /// the headers replayed, as `values` reads them from the framework's answer.
    pub(crate) fn answer(
        &self,
        status: u16,
        body: Bytes,
        values: impl Fn(&str) -> Vec<String>,
    ) -> Stored {
        let headers = self
            .replayed
            .iter()
            .flat_map(|name| values(name).into_iter().map(|value| (name.clone(), value)))
            .collect();
        Stored {
            status,
            headers,
            body,
        }
    }

    /// Keeps the answer of a request that ran (unless it is a server error or too large:
    /// then a retry runs again) and gives its key up.
    pub(crate) async fn after(&self, running: Running, answer: Option<&Stored>) {
        if let Some(answer) =
            answer.filter(|a| a.status < 500 && a.body.len() <= self.most_response)
        {
            let record = answer.record(&running.fingerprint);
            let engine = &self.client.shared().engine;
            // An answer that could not be kept is still this request's: a retry runs again.
            let _ = engine
                .write_value(&running.record_key, &record, self.retention)
                .await;
        }
        let _ = running.guard.release().await;
    }
}

/// What to do with a keyed request before it runs.
pub(crate) enum Before {
    /// The answer kept for it: replay it (with [`REPLAYED_HEADER`]).
    Replay(Stored),
    /// One of the layer's own answers.
    Answer(Answer),
    /// Run it; then hand its answer to [`Rules::after`].
    Run(Running),
}

/// A keyed request that runs, holding its key.
pub(crate) struct Running {
    guard: LockGuard,
    record_key: String,
    fingerprint: String,
}

/// The key of a header value: a structured-field string (`"…"`, as the draft writes it) or,
/// as many clients send it, the bare token; `None` when empty, too long or not text.
fn key_of(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let key = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(text);
    let printable = key.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    (!key.is_empty() && key.len() <= MOST_KEY_BYTES && printable && !key.contains(['"', '\\']))
        .then_some(key)
}

/// The SHA-256 of `parts`, each length-prefixed (so that no two lists pass for each other),
/// in hex.
fn hashed(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A request's fingerprint: its method, path and query, and body.
pub(crate) fn fingerprint(method: &str, target: &str, body: &[u8]) -> String {
    hashed(&[method.as_bytes(), target.as_bytes(), body])
}

/// The kept answer for a request of `fingerprint`, if there is one; the `422` if it was
/// another request's; `503` if it could not be read.
fn kept(
    stored: Result<Option<Vec<u8>>, LockError>,
    fingerprint: &str,
) -> Result<Option<Stored>, Answer> {
    let stored = stored.map_err(Answer::Unavailable)?;
    let Some((kept_for, answer)) = stored.as_deref().and_then(Stored::parse) else {
        return Ok(None);
    };
    if kept_for != fingerprint {
        return Err(Answer::OtherRequest);
    }
    Ok(Some(answer))
}

/// An answer in the frameworks' common terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) status: u16,
    /// Headers, lower-case names.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Bytes,
}

impl Stored {
    /// Its kept form, for a request of `fingerprint`: a JSON line (fingerprint, status,
    /// headers), then the body's bytes.
    fn record(&self, fingerprint: &str) -> Vec<u8> {
        let head = serde_json::json!({
            "fingerprint": fingerprint,
            "status": self.status,
            "headers": self.headers,
        });
        let mut record = head.to_string().into_bytes();
        record.push(b'\n');
        record.extend_from_slice(&self.body);
        record
    }

    /// The fingerprint and answer of a kept form; `None` for anything else.
    fn parse(record: &[u8]) -> Option<(String, Self)> {
        let split = record.iter().position(|b| *b == b'\n')?;
        let head: serde_json::Value = serde_json::from_slice(&record[..split]).ok()?;
        let status = u16::try_from(head["status"].as_u64()?).ok()?;
        let headers = head["headers"]
            .as_array()?
            .iter()
            .map(|pair| Some((pair[0].as_str()?.to_owned(), pair[1].as_str()?.to_owned())))
            .collect::<Option<Vec<_>>>()?;
        let answer = Self {
            status,
            headers,
            body: Bytes::copy_from_slice(&record[split + 1..]),
        };
        Some((head["fingerprint"].as_str()?.to_owned(), answer))
    }
}

/// The layer's own answers.
#[derive(Debug)]
pub(crate) enum Answer {
    BadKey(&'static str),
    TooLarge,
    InFlight,
    OtherRequest,
    Unreadable,
    Unavailable(LockError),
}

impl Answer {
    /// Its status and plain-text body.
    pub(crate) fn status_and_text(self) -> (u16, &'static str) {
        match self {
            Self::BadKey(why) => (400, why),
            Self::TooLarge => (413, "the request body is too large to be made idempotent"),
            Self::InFlight => (
                409,
                "a request with this Idempotency-Key is being processed; retry later",
            ),
            Self::OtherRequest => (422, "this Idempotency-Key was used for another request"),
            Self::Unreadable => (500, "the answer could not be read"),
            Self::Unavailable(e) => {
                let error = &e as &(dyn std::error::Error + 'static);
                let answer = if matches!(e, LockError::InvalidConfig(_)) {
                    // A client that cannot keep answers (Redlock): retrying will not help.
                    crate::util::trace::warn_event!(error, "rlock: idempotency store misused");
                    (
                        500,
                        "the idempotency store cannot keep answers; see the service's logs",
                    )
                } else {
                    crate::util::trace::debug_event!(error, "rlock: idempotency store failed");
                    (503, "the idempotency store is unavailable; retry later")
                };
                let _ = error; // read by the events only when `tracing` is on
                answer
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_a_quoted_or_bare_string_of_1_to_255_bytes() {
        let key = |text: &str| key_of(text.as_bytes()).map(str::to_owned);
        assert_eq!(key("\"abc\"").as_deref(), Some("abc"));
        assert_eq!(key(" abc ").as_deref(), Some("abc"));
        assert_eq!(key(&"a".repeat(255)), Some("a".repeat(255)));
        for bad in ["", "\"\"", "a\"b", "\"a\\\"\"", "a\u{7}b", &"a".repeat(256)] {
            assert_eq!(key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_answer_is_kept_and_read_back_whole() {
        let answer = Stored {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::from_static(b"{\"order\":1}\n\xff binary"),
        };
        let record = answer.record("print");
        assert_eq!(Stored::parse(&record), Some(("print".to_owned(), answer)));
        assert!(Stored::parse(b"not a record").is_none());
        assert!(Stored::parse(b"{\"status\":99999}\n").is_none());
    }

    #[test]
    fn fingerprints_and_keys_tell_their_parts_apart() {
        let base = fingerprint("POST", "/orders?a=1", b"x");
        assert_eq!(base, fingerprint("POST", "/orders?a=1", b"x"));
        for other in [
            fingerprint("PATCH", "/orders?a=1", b"x"),
            fingerprint("POST", "/orders?a=2", b"x"),
            fingerprint("POST", "/orders?a=1", b"y"),
            fingerprint("POST", "/orders?a=1x", b""),
        ] {
            assert_ne!(base, other);
        }
        let rules = Rules::new(LockClient::in_memory());
        let id = |scope: Option<&str>, key: &str| {
            rules
                .asked(true, Some(key.as_bytes()), scope.map(str::to_owned))
                .unwrap()
        };
        assert_eq!(id(Some("7"), "k"), id(Some("7"), "\"k\""));
        assert_ne!(id(Some("7"), "k"), id(Some("8"), "k"));
        assert_ne!(id(Some("7"), "k"), id(None, "7k"));
        assert_eq!(rules.asked(false, Some(b"k"), None).unwrap(), None);
        assert_eq!(rules.asked(true, None, None).unwrap(), None);
    }
}
