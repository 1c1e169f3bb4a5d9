//! A client configured from the environment, as twelve-factor services and containers are:
//! the URL of any topology, and the client-wide defaults.

use crate::api::client::{LockClient, LockClientBuilder};
use crate::api::options::OnLost;
use crate::error::LockError;

/// The variables [`LockClientBuilder::from_env`] reads, with what each sets.
const VARIABLES: &str = "RLOCK_URL (or REDIS_URL), RLOCK_NAMESPACE, RLOCK_DEFAULT_TTL, \
                         RLOCK_DEFAULT_WAIT, RLOCK_ON_LOST, RLOCK_COMMAND_TIMEOUT, \
                         RLOCK_MIN_REPLICAS";

impl LockClientBuilder {
    /// A builder set from environment variables; call [`connect`](Self::connect) on it, or
    /// change what the environment does not say first:
    ///
    /// | variable | sets | example |
    /// |---|---|---|
    /// | `RLOCK_URL`, else `REDIS_URL` (required) | [`url`](Self::url): any topology | `redis+sentinel://s1:26379,s2:26379/orders` |
    /// | `RLOCK_NAMESPACE` | [`namespace`](Self::namespace) | `shop` |
    /// | `RLOCK_DEFAULT_TTL` | [`default_ttl`](Self::default_ttl) | `10s` |
    /// | `RLOCK_DEFAULT_WAIT` | [`default_wait`](Self::default_wait) | `500ms` |
    /// | `RLOCK_ON_LOST` | [`default_on_lost`](Self::default_on_lost): `abort` or `continue` | `continue` |
    /// | `RLOCK_COMMAND_TIMEOUT` | [`command_timeout`](Self::command_timeout) | `2s` |
    /// | `RLOCK_MIN_REPLICAS` | [`min_replicas`](Self::min_replicas) | `1` |
    ///
    /// Durations are written as the attribute's `ttl` and `wait` are, and read by the same
    /// parser: a whole number and a unit, `ms`, `s`, `m` or `h`, units combined from the
    /// largest to the smallest and each used at most once (`500ms`, `10s`, `1m30s`, `2h`; not
    /// `30s1m`, `1s1s`, `1.5s` or `10 s`). Values are read without surrounding whitespace. An
    /// unset or empty variable leaves the default; a malformed one is an
    /// [`LockError::InvalidConfig`] naming it and saying how to write it.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// // REDIS_URL=redis://127.0.0.1:6379/ RLOCK_NAMESPACE=shop RLOCK_DEFAULT_TTL=10s
    /// let client = LockClient::builder_from_env()?.connect().await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn from_env() -> Result<Self, LockError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables read through `var`.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, LockError> {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let url = var("RLOCK_URL").or_else(|| var("REDIS_URL")).ok_or_else(|| {
            LockError::InvalidConfig(format!(
                "no Redis URL in the environment: set RLOCK_URL or REDIS_URL (read: {VARIABLES})"
            ))
        })?;
        let mut builder = LockClient::builder().url(url.trim());
        if let Some(namespace) = var("RLOCK_NAMESPACE") {
            builder = builder.namespace(namespace.trim());
        }
        let duration = |name: &str| {
            var(name)
                .map(|text| {
                    crate::api::duration::parse(text.trim())
                        .map_err(|why| invalid(name, &text, &why))
                })
                .transpose()
        };
        if let Some(ttl) = duration("RLOCK_DEFAULT_TTL")? {
            builder = builder.default_ttl(ttl);
        }
        if let Some(wait) = duration("RLOCK_DEFAULT_WAIT")? {
            builder = builder.default_wait(wait);
        }
        if let Some(timeout) = duration("RLOCK_COMMAND_TIMEOUT")? {
            builder = builder.command_timeout(timeout);
        }
        if let Some(text) = var("RLOCK_ON_LOST") {
            let on_lost = match text.trim().to_ascii_lowercase().as_str() {
                "abort" => OnLost::Abort,
                "continue" => OnLost::Continue,
                _ => {
                    return Err(invalid(
                        "RLOCK_ON_LOST",
                        &text,
                        "write `abort` or `continue`",
                    ));
                }
            };
            builder = builder.default_on_lost(on_lost);
        }
        if let Some(text) = var("RLOCK_MIN_REPLICAS") {
            let replicas = text.trim().parse::<u32>().map_err(|_| {
                invalid(
                    "RLOCK_MIN_REPLICAS",
                    &text,
                    "write a whole number of replicas, such as `1`",
                )
            })?;
            builder = builder.min_replicas(replicas);
        }
        Ok(builder)
    }
}

impl LockClient {
    /// [`LockClientBuilder::from_env`], for a builder to adjust before connecting.
    pub fn builder_from_env() -> Result<LockClientBuilder, LockError> {
        LockClientBuilder::from_env()
    }

    /// Connects as the environment says (see [`LockClientBuilder::from_env`] for the
    /// variables): `REDIS_URL` alone is enough.
    ///
    /// ```no_run
    /// use rlock_runtime::LockClient;
    ///
    /// # #[tokio::main] async fn main() -> Result<(), rlock_runtime::LockError> {
    /// let client = LockClient::from_env().await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub async fn from_env() -> Result<Self, LockError> {
        LockClientBuilder::from_env()?.connect().await
    }
}

fn invalid(name: &str, value: &str, why: &str) -> LockError {
    LockError::InvalidConfig(format!("{name}=`{value}`: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn from(vars: &[(&str, &str)]) -> Result<LockClientBuilder, LockError> {
        LockClientBuilder::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_string())
        })
    }

    #[test]
    fn durations_follow_the_attributes_grammar() {
        let ttl = |text: &str| {
            from(&[
                ("REDIS_URL", "redis://127.0.0.1/"),
                ("RLOCK_DEFAULT_TTL", text),
            ])
        };
        for good in ["1500ms", "1m30s", " 1m30s\n", "2h", "1h2m3s4ms", "0s"] {
            assert!(ttl(good).is_ok(), "{good:?}");
        }
        // Units from the largest to the smallest, each once: `30s1m` is not `1m30s`.
        let err = ttl("30s1m").unwrap_err().to_string();
        assert!(err.contains("RLOCK_DEFAULT_TTL=`30s1m`"), "{err}");
        assert!(
            err.contains("write them from the largest to the smallest, as in `1m30s`"),
            "{err}"
        );
        for bad in [
            "10",
            "s",
            "1.5s",
            "10 s",
            "-1s",
            "1d",
            "1s1s",
            "99999999999999999999h",
        ] {
            let err = ttl(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("RLOCK_DEFAULT_TTL=`{bad}`")), "{err}");
        }
    }

    #[test]
    fn the_url_is_required_and_rlock_url_wins() {
        let err = from(&[]).unwrap_err().to_string();
        assert!(err.contains("set RLOCK_URL or REDIS_URL"), "{err}");
        let err = from(&[("REDIS_URL", "  ")]).unwrap_err().to_string();
        assert!(err.contains("set RLOCK_URL or REDIS_URL"), "{err}");
        assert!(from(&[("REDIS_URL", "redis://a/"), ("RLOCK_URL", "redis://b/")]).is_ok());
    }

    #[tokio::test]
    async fn the_defaults_reach_the_client() {
        let client = from(&[
            ("REDIS_URL", "redis://127.0.0.1/"),
            ("RLOCK_NAMESPACE", "shop"),
            ("RLOCK_DEFAULT_TTL", "5s"),
            ("RLOCK_DEFAULT_WAIT", "2s"),
        ])
        .unwrap()
        .in_memory();
        let key = crate::LockKey::new("a").unwrap();
        assert_eq!(client.redis_key(&key), "shop:a");
        let other = client.sibling();
        let guard = other.lock("a").acquire().await.unwrap();
        let left = client.inspect("a").await.unwrap().remaining.unwrap();
        assert!(
            left <= Duration::from_secs(5) && left > Duration::from_secs(4),
            "{left:?}"
        );
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await
        });
        // No wait given: the client's default of 2 s lets it wait for the release.
        let guard = client.lock("a").acquire().await.unwrap();
        release.await.unwrap().unwrap();
        guard.release().await.unwrap();
    }

    #[test]
    fn malformed_values_name_their_variable() {
        for (name, value, needle) in [
            ("RLOCK_DEFAULT_TTL", "ten", "RLOCK_DEFAULT_TTL=`ten`"),
            ("RLOCK_DEFAULT_WAIT", "5", "RLOCK_DEFAULT_WAIT=`5`"),
            ("RLOCK_ON_LOST", "ignore", "`abort` or `continue`"),
            ("RLOCK_MIN_REPLICAS", "-1", "RLOCK_MIN_REPLICAS=`-1`"),
        ] {
            let err = from(&[("REDIS_URL", "redis://127.0.0.1/"), (name, value)])
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{name}: {err}");
        }
    }
}
