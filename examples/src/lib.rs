//! Shared helpers for the rlock examples: finding a Redis to run against, and the code of
//! the flash-sale ([`seckill`]) and web ([`web`]) examples, which their tests call too.

pub mod database;
mod local_redis;
pub mod prometheus;
pub mod reports;
pub mod seckill;
pub mod web;

pub use local_redis::LocalRedis;
use rlock_runtime::{LockClient, LockError};

/// Where an example's locks live, and what to tell the user about it.
#[derive(Debug)]
pub struct Backend {
    /// The client to lock with.
    pub client: LockClient,
    /// The Redis URL, when there is a Redis (`None` for the in-memory backend).
    pub url: Option<String>,
    /// One line saying which backend this is and how it was chosen.
    pub description: String,
    /// A `redis-server` started for this run, stopped on drop.
    pub server: Option<LocalRedis>,
}

/// The Redis named by `url` or `REDIS_URL`; else a `redis-server` started here; else the
/// in-memory backend.
pub async fn backend(url: Option<String>) -> Result<Backend, LockError> {
    let named = url.or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()));
    if let Some(url) = named {
        let client = LockClient::connect(&url).await?;
        return Ok(Backend {
            client,
            description: format!("Redis at {}", redact(&url)),
            url: Some(url),
            server: None,
        });
    }
    let why = match LocalRedis::start() {
        Ok(server) => {
            let client = LockClient::connect(&server.url()).await?;
            return Ok(Backend {
                client,
                description: format!(
                    "a local redis-server started for this run at {} (give --redis URL or REDIS_URL to use yours)",
                    server.url()
                ),
                url: Some(server.url()),
                server: Some(server),
            });
        }
        Err(why) => why,
    };
    Ok(Backend {
        client: LockClient::in_memory(),
        url: None,
        description: format!("the in-memory backend ({why})"),
        server: None,
    })
}

/// The command line every example takes: `--redis URL` and `--help` (which clap prints,
/// then exits, as it does for a mistake). Returns the URL given, if any; the examples fall
/// back to `REDIS_URL` (see [`backend`]).
pub fn redis_option(name: &'static str, about: &'static str) -> Option<String> {
    clap::Command::new(name)
        .about(about)
        .arg(
            clap::Arg::new("redis")
                .long("redis")
                .value_name("URL")
                .help(REDIS_HELP),
        )
        .get_matches()
        .get_one::<String>("redis")
        .cloned()
}

/// What `--redis` does, in every example's help.
pub const REDIS_HELP: &str =
    "The Redis to use [default: $REDIS_URL, else a local redis-server, else in-memory]";

/// The whole `main` of an example that needs one lock client: parses `--redis URL` and
/// `--help`, picks the backend (see [`backend`]) and says which, runs `body` with the client,
/// and exits printing any error with `Display`.
pub async fn run_example<F, Fut>(
    name: &'static str,
    about: &'static str,
    body: F,
) -> std::process::ExitCode
where
    F: FnOnce(LockClient) -> Fut,
    Fut: std::future::Future<Output = Result<(), LockError>>,
{
    let redis = redis_option(name, about);
    let outcome = async {
        // Kept until the body ends: it owns the redis-server started for this run, if any.
        let backend = backend(redis).await?;
        println!("locking on {}", backend.description);
        body(backend.client.clone()).await
    };
    exit_code(name, outcome.await)
}

/// An example's exit: its error printed with `Display` (not `Debug`), and status 1.
pub fn exit_code<E: std::fmt::Display>(
    name: &str,
    outcome: Result<(), E>,
) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The deployment a topology example called `name` runs on: `--redis URL`, else
/// `REDIS_URL`. `None` (after printing the expected `form`) when neither names one: such an
/// example needs a deployment of its kind, which it cannot start itself.
pub fn deployment_url(name: &'static str, about: &'static str, form: &str) -> Option<String> {
    let url = redis_option(name, about)
        .or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()));
    if url.is_none() {
        eprintln!("usage: {name} --redis {form} (or set REDIS_URL)");
    }
    url
}

/// The URL without its password, for printing.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redact("redis://:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1/"), "redis://127.0.0.1/");
    }
}
