//! Lock keys: validation, the namespace prefix and the injective escaping of template values.
//!
//! A key template such as `order:<user_id>:<item>` is rendered by writing its literal parts as
//! they are and every value through [`KeyBuilder::value`], which percent-encodes the characters
//! listed in [`RESERVED`]. Because a rendered value never contains a raw reserved character,
//! and the macro requires at least one reserved character (a separator such as `:`) between two
//! placeholders, different argument tuples always render to different keys, and no value can
//! inject a Redis Cluster hash tag (`{…}`) or a glob character (`*?[]`).

use std::fmt::{self, Display, Write as _};

use crate::error::LockError;

/// Characters a rendered template value never contains raw; they are written as `%XX`.
///
/// `%` is here so that the encoding stays reversible, `{` and `}` so that a value cannot pick a
/// cluster slot, `* ? [ ] \` so that a value cannot act as a `SCAN`/`KEYS` glob, and the common
/// separators `: / | # ,` so that a literal separator in the template is never forged by a
/// value. ASCII whitespace and control characters are encoded too, to keep keys printable.
pub const RESERVED: &[char] = &[
    '%', ':', '{', '}', '*', '?', '[', ']', '\\', '/', '|', '#', ',',
];

/// The longest key rlock accepts, in bytes: 4096 (the attribute's limit for a key's literal
/// text too, from the same definition). Redis allows far more, but a key this long is a
/// template bug, and every byte travels with every command.
pub const MAX_KEY_LEN: usize = rlock_macros::__limit!(MAX_KEY_LEN);

/// Whether `c` is encoded inside a rendered value (see [`RESERVED`]).
pub fn is_reserved(c: char) -> bool {
    RESERVED.contains(&c) || c.is_ascii_whitespace() || c.is_ascii_control()
}

/// A validated lock key, before the client's namespace is applied.
///
/// ```
/// use rlock_runtime::LockKey;
///
/// let key = LockKey::new("order:42").unwrap();
/// assert_eq!(key.as_str(), "order:42");
/// assert!(LockKey::new("").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(String);

impl LockKey {
    /// Checks `key`: it must be non-empty, at most [`MAX_KEY_LEN`] bytes long, and a `}` in
    /// it must close a Redis Cluster hash tag (`{tenant}:x`), so that the key's queue and
    /// fence record can share its cluster slot.
    pub fn new(key: impl Into<String>) -> Result<Self, LockError> {
        let key = key.into();
        if key.is_empty() {
            return Err(LockError::InvalidKey {
                key,
                reason: "a lock key may not be empty",
            });
        }
        if !companions_share_its_slot(&key) {
            return Err(LockError::InvalidKey {
                key,
                reason: "a `}` in a key must close a Redis Cluster hash tag (`{tag}`, not \
                         empty): without one, the key's queue and fence record cannot share \
                         its cluster slot; remove the `}` or write a tag such as `{tenant}:x`",
            });
        }
        if is_companion_shaped(&key) {
            return Err(LockError::InvalidKey {
                key,
                reason: "keys with a `}` that end in `:waiters`, `:fence` or `:awaited` are \
                         where other locks keep their queues and fencing records; choose \
                         another name",
            });
        }
        if key.len() > MAX_KEY_LEN {
            return Err(LockError::InvalidKey {
                key: key.chars().take(64).collect::<String>() + "…",
                reason: "a lock key may be at most 4096 bytes long",
            });
        }
        Ok(Self(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as stored in Redis: `namespace:key`, or the key itself without a namespace.
    pub(crate) fn in_namespace(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{ns}:{}", self.0),
            None => self.0.clone(),
        }
    }
}

/// The Redis key of one of rlock's own records (a holder card, a shared result, a kept
/// answer): `rlock:<what>`, in the client's namespace as its lock keys are.
pub(crate) fn own_key(namespace: Option<&str>, what: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}:rlock:{what}"),
        None => format!("rlock:{what}"),
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Anything that names a lock: `&str`, `String`, or an already checked [`LockKey`].
///
/// A bad key is reported when the lock is acquired, as [`LockError::InvalidKey`].
///
/// ```
/// use rlock_runtime::{IntoLockKey, LockKey};
///
/// assert_eq!("a".into_lock_key().unwrap(), LockKey::new("a").unwrap());
/// assert!(String::new().into_lock_key().is_err());
/// ```
pub trait IntoLockKey {
    /// Validates and converts.
    fn into_lock_key(self) -> Result<LockKey, LockError>;
}

impl IntoLockKey for LockKey {
    fn into_lock_key(self) -> Result<LockKey, LockError> {
        Ok(self)
    }
}

impl IntoLockKey for &LockKey {
    fn into_lock_key(self) -> Result<LockKey, LockError> {
        Ok(self.clone())
    }
}

impl IntoLockKey for &str {
    fn into_lock_key(self) -> Result<LockKey, LockError> {
        LockKey::new(self)
    }
}

impl IntoLockKey for String {
    fn into_lock_key(self) -> Result<LockKey, LockError> {
        LockKey::new(self)
    }
}

impl IntoLockKey for &String {
    fn into_lock_key(self) -> Result<LockKey, LockError> {
        LockKey::new(self.as_str())
    }
}

/// Renders a key template: literal parts as written, values escaped.
///
/// This is what `#[distributed_lock(key = "…")]` generates; it is public so that the manual API
/// can build keys from untrusted values with the same guarantees.
///
/// ```
/// use rlock_runtime::KeyBuilder;
///
/// let a = KeyBuilder::new().literal("a:").value(&"1:2").literal(":").value(&3).finish();
/// let b = KeyBuilder::new().literal("a:").value(&1).literal(":").value(&"2:3").finish();
/// assert_eq!(a.unwrap().as_str(), "a:1%3A2:3");
/// assert_eq!(b.unwrap().as_str(), "a:1:2%3A3");
///
/// // Plain values stay readable.
/// let key = KeyBuilder::new().literal("order:").value(&42).finish().unwrap();
/// assert_eq!(key.as_str(), "order:42");
/// ```
#[derive(Debug, Default)]
pub struct KeyBuilder {
    buf: String,
}

impl KeyBuilder {
    /// An empty key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends template text exactly as written.
    pub fn literal(mut self, text: &str) -> Self {
        self.buf.push_str(text);
        self
    }

    /// Appends a value through its `Display`, escaping the [`RESERVED`] characters.
    pub fn value<T: Display + ?Sized>(mut self, value: &T) -> Self {
        // Writing into a String cannot fail; a Display impl that returns Err anyway leaves
        // whatever it wrote, which is still escaped.
        let _ = write!(Escaper(&mut self.buf), "{value}");
        self
    }

    /// The finished key, checked like [`LockKey::new`].
    pub fn finish(self) -> Result<LockKey, LockError> {
        LockKey::new(self.buf)
    }
}

/// A `fmt::Write` that percent-encodes reserved characters on their way into the key.
struct Escaper<'a>(&'a mut String);

impl fmt::Write for Escaper<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if is_reserved(c) {
                let mut bytes = [0u8; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    write!(self.0, "%{b:02X}")?;
                }
            } else {
                self.0.push(c);
            }
        }
        Ok(())
    }
}

/// The key that stores the fencing counter of `lock_key`, in the same Redis Cluster slot
/// (see [`Companion`]). The scripts are given it as their third key.
#[cfg(test)]
pub(crate) fn fence_key(lock_key: &str) -> String {
    Companion::fence(lock_key).to_string()
}

/// The queue of `lock_key`'s waiters (a list, in arrival order) as a `String`; commands take
/// [`Companion::waiters`] itself.
#[cfg(test)]
pub(crate) fn waiters_key(lock_key: &str) -> String {
    Companion::waiters(lock_key).to_string()
}

/// Whether the companions of a key stored as `key` ([`Companion`]) can share its Redis
/// Cluster slot: a key without a `}` is wrapped whole in braces, and one with a valid hash
/// tag keeps it; a `}` outside any tag (`a}b`, `{}x`) leaves the key hashed whole, which no
/// longer key can be. (The namespace's text is checked the same way: see
/// [`LockClientBuilder::namespace`](crate::LockClientBuilder::namespace).)
pub(crate) fn companions_share_its_slot(key: &str) -> bool {
    !key.contains('}') || crate::util::slot::hashed_part(key) != key
}

/// The suffixes of the keys kept beside a lock.
const COMPANION_SUFFIXES: [&str; 3] = ["waiters", "fence", "awaited"];

/// Whether `key` could be the companion of another lock's key: every companion has a `}`
/// (its own hash tag's, or the wrapping's) and ends in `:` and a companion suffix. Such lock keys
/// are refused, so that no lock's key is another's queue or fence record (and `list` skips
/// every key of that shape: it is a companion).
pub(crate) fn is_companion_shaped(key: &str) -> bool {
    key.contains('}')
        && COMPANION_SUFFIXES.iter().any(|suffix| {
            key.strip_suffix(suffix)
                .is_some_and(|rest| rest.ends_with(':'))
        })
}

/// A key kept beside a lock, in its cluster slot, named injectively: a lock key `k` without a
/// `}` is wrapped as `{k}:suffix` (its whole key the hash tag); a key with a `}` keeps its own
/// tag and takes `k::suffix`. The two forms differ in the byte before the last
/// `:` (`}` or `:`), so `x` and `{x}` have different companions, and no lock key can be a
/// companion ([`LockKey::new`] refuses the shapes). A key with a `}` but no valid tag is
/// refused ([`companions_share_its_slot`]): its companions could not share its slot. The
/// pieces are written straight into a command, without a
/// `String` of their own on every lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Companion<'a> {
    lock_key: &'a str,
    suffix: &'static str,
}

impl<'a> Companion<'a> {
    /// The queue of `lock_key`'s waiters (a list, in arrival order); a release hands the lock
    /// to its first live entry.
    pub(crate) fn waiters(lock_key: &'a str) -> Self {
        Self {
            lock_key,
            suffix: "waiters",
        }
    }

    /// The fencing record of `lock_key`: the last fence issued, expiring with the lease.
    pub(crate) fn fence(lock_key: &'a str) -> Self {
        Self {
            lock_key,
            suffix: "fence",
        }
    }

    /// A semaphore's count set at run time (`set_permits`), kept without expiry; absent
    /// while its callers' count applies.
    pub(crate) fn permits(lock_key: &'a str) -> Self {
        Self {
            lock_key,
            suffix: "permits",
        }
    }

    /// Redlock: the mark of `lock_key` as awaited; a release announces itself to every
    /// waiter only while it lives.
    pub(crate) fn awaited(lock_key: &'a str) -> Self {
        Self {
            lock_key,
            suffix: "awaited",
        }
    }

    /// The key's bytes, piece by piece.
    pub(crate) fn pieces(&self) -> [&'a str; 4] {
        let key = self.lock_key;
        if key.contains('}') {
            ["", key, "::", self.suffix]
        } else {
            ["{", key, "}:", self.suffix]
        }
    }

    /// The key's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.pieces().iter().map(|p| p.len()).sum()
    }
}

impl fmt::Display for Companion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.pieces()
            .iter()
            .try_for_each(|piece| f.write_str(piece))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Redis Cluster slot of a key (CRC16/XMODEM of its hash tag, modulo 16384).
    use crate::util::slot::slot as cluster_slot;

    /// Redis Cluster's rule: a `{` followed later by a `}` with at least one byte between them.
    fn has_hash_tag(key: &str) -> bool {
        match key.find('{') {
            Some(open) => match key[open + 1..].find('}') {
                Some(len) => len > 0,
                None => false,
            },
            None => false,
        }
    }

    /// `x` and `{x}` are two locks with two queues and two fence records, and no lock key
    /// is another lock's companion.
    #[test]
    fn companion_keys_are_injective_and_never_lock_keys() {
        let keys = ["x", "{x}", "{x}:", "x}{y}", "{x", "a{b}c", "{a{b}c}"];
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            assert!(seen.insert(key.to_owned()));
            for companion in [
                fence_key(key),
                waiters_key(key),
                Companion::awaited(key).to_string(),
            ] {
                assert!(seen.insert(companion.clone()), "{key} -> {companion} twice");
                assert!(
                    LockKey::new(companion.clone()).is_err(),
                    "{companion} taken as a lock"
                );
                assert_eq!(Companion::waiters(key).len(), waiters_key(key).len());
            }
        }
        assert_eq!(waiters_key("x"), "{x}:waiters");
        assert_eq!(waiters_key("{x}"), "{x}::waiters");
        for fine in ["order:waiters", "{tenant}:jobs", "x:fence", "{x}:fencing"] {
            assert!(LockKey::new(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn a_hash_tag_decides_the_slot() {
        assert_eq!(
            cluster_slot("{user1000}.following"),
            cluster_slot("user1000")
        );
    }

    /// Every key `LockKey::new` takes has companions in its slot; the keys whose companions
    /// could not share it are refused, with the reason.
    #[test]
    fn companion_keys_share_the_lock_slot() {
        for key in [
            "order:42", "{tag}:x", "a{b", "a{}b", "x}{y}", "}", "{", "{}", "a}b", "{}x", "{a}}",
            "a{}b{c}",
        ] {
            let shares = !key.contains('}') || has_hash_tag(key);
            assert_eq!(companions_share_its_slot(key), shares, "{key}");
            match LockKey::new(key) {
                Ok(_) => assert!(shares, "{key} taken"),
                Err(LockError::InvalidKey { reason, .. }) => {
                    assert!(!shares && reason.contains("hash tag"), "{key}: {reason}")
                }
                Err(e) => panic!("{key}: {e}"),
            }
            if shares {
                for companion in [
                    fence_key(key),
                    waiters_key(key),
                    Companion::awaited(key).to_string(),
                ] {
                    assert_eq!(
                        cluster_slot(&companion),
                        cluster_slot(key),
                        "{key} -> {companion}"
                    );
                }
            }
        }
    }

    #[test]
    fn reserved_characters_are_encoded() {
        let key = KeyBuilder::new()
            .value("{a}*?[b]\\ c%:/|#,\n")
            .finish()
            .unwrap();
        assert!(!key.as_str().chars().any(is_reserved_but_percent));
        assert_eq!(
            key.as_str(),
            "%7Ba%7D%2A%3F%5Bb%5D%5C%20c%25%3A%2F%7C%23%2C%0A"
        );
    }

    fn is_reserved_but_percent(c: char) -> bool {
        c != '%' && is_reserved(c)
    }

    #[test]
    fn unicode_stays_readable() {
        let key = KeyBuilder::new()
            .literal("user:")
            .value("Zoë")
            .finish()
            .unwrap();
        assert_eq!(key.as_str(), "user:Zoë");
    }
}

#[cfg(test)]
mod injectivity {
    use super::*;
    use std::collections::HashMap;

    /// Values drawn mostly from separators and escape-like text, where collisions would hide.
    fn random_value(rng: &mut fastrand::Rng) -> String {
        const ALPHABET: &[&str] = &[
            "1", "2", "a", ":", "%", "%3A", "3A", "{", "}", "*", "/", "|", "#", ",", " ", "é", "",
        ];
        (0..rng.usize(0..5))
            .map(|_| ALPHABET[rng.usize(..ALPHABET.len())])
            .collect()
    }

    #[test]
    fn distinct_argument_tuples_render_distinct_keys() {
        let mut rng = fastrand::Rng::with_seed(0x5EED);
        let templates: [&[&str]; 4] = [
            &["a:", ":", ""],
            &["", "/", ":x"],
            &["k|", "#", "|"],
            &["{t}:", ",", ""],
        ];
        for literals in templates {
            let mut seen: HashMap<String, (String, String)> = HashMap::new();
            for _ in 0..20_000 {
                let (x, y) = (random_value(&mut rng), random_value(&mut rng));
                let key = KeyBuilder::new()
                    .literal(literals[0])
                    .value(&x)
                    .literal(literals[1])
                    .value(&y)
                    .literal(literals[2])
                    .finish();
                let Ok(key) = key else { continue };
                if let Some(earlier) = seen.insert(key.as_str().to_owned(), (x.clone(), y.clone()))
                {
                    assert_eq!(earlier, (x, y), "two tuples rendered {key:?}");
                }
            }
        }
    }

    #[test]
    fn values_cannot_inject_hash_tags_or_globs() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let v = random_value(&mut rng);
            let key = KeyBuilder::new()
                .literal("order:")
                .value(&v)
                .finish()
                .unwrap();
            let rendered = &key.as_str()["order:".len()..];
            assert!(
                !rendered.contains(['{', '}', '*', '?', '[', ']', ':']),
                "{rendered}"
            );
        }
    }
}
